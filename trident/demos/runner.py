"""Run the curation examples end to end on a local Ray: generate inputs, execute the
pipeline (under ``trident.autoscale`` unless ``policy`` is None), and account for every input."""
from __future__ import annotations

import os
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

WORKER_ENV = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
              "TOKENIZERS_PARALLELISM": "false"}
SAMPLES_PDF_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "samples" / "pdf"
"""The real sample PDFs next to a development checkout (used when present)."""


@dataclass(frozen=True)
class Accounting:
    """Which inputs came out of a pipeline: every input must appear exactly once."""

    inputs: int
    processed: int
    skipped: dict[str, str]
    missing: tuple[str, ...]
    duplicated: tuple[str, ...]
    unexpected: tuple[str, ...]

    @property
    def complete(self) -> bool:
        return not (self.missing or self.duplicated or self.unexpected)


def account(inputs: list[str], keys: list[str], statuses: list[str], reasons: list[str]) -> Accounting:
    """Per-input accounting from one output row per input (``keys``: the input each row stands for)."""
    from collections import Counter

    counts = Counter(keys)
    want = set(inputs)
    skipped = {k: r for k, s, r in zip(keys, statuses, reasons) if s == "skipped"}
    return Accounting(inputs=len(inputs), processed=sum(1 for k, s in zip(keys, statuses) if s != "skipped"),
                      skipped=skipped, missing=tuple(sorted(want - set(counts))),
                      duplicated=tuple(sorted(k for k, c in counts.items() if c > 1)),
                      unexpected=tuple(sorted(set(counts) - want)))


def start_ray(*, num_cpus: int = 4, num_gpus: int = 2) -> None:
    """A new local Ray with logical GPUs (``num_gpus`` need not exist physically); never an
    existing cluster on this machine."""
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False,
                 log_to_driver=False, runtime_env={"env_vars": dict(WORKER_ENV)})


def _autoscale(policy: str | None, memory_limit: str | None, interval_s: float | None):
    if policy is None:
        return nullcontext(None)
    import trident

    kwargs = {"policy": policy, "memory_limit": memory_limit}
    if interval_s is not None:
        kwargs["interval_s"] = interval_s
    return trident.autoscale(**kwargs)


@dataclass
class DemoResult:
    """What a demo run produced."""

    kind: str
    out_dir: str
    wall_s: float
    accounting: Accounting
    table: object
    """pandas DataFrame: one row per input document or clip."""
    run: object = None
    """The ``trident.Run`` (None when run without trident)."""
    notes: list[str] = field(default_factory=list)


def run_pdf(out_dir: str | Path, *, docs: int = 8, seed: int = 0, samples_dir: str | Path | None = SAMPLES_PDF_DIR,
            policy: str | None = "trident", memory_limit: str | None = None, interval_s: float | None = None,
            ocr_pool: tuple[int, int] = (1, 2), embed_pool: tuple[int, int] = (1, 2)) -> DemoResult:
    """Generate ``docs`` PDFs (plus the real samples when present), curate them, write
    ``pages/`` (Parquet) and ``documents.parquet`` under ``out_dir``."""
    from trident.demos.pdf import build_pdf_dataset, curate_documents, list_pdfs, read_pages
    from trident.demos.pdfgen import write_corpus

    out = Path(out_dir)
    n_short = max(1, docs - 5)
    write_corpus(out / "input", seed=seed, short=n_short, long=1, two_column=1, scanned=1, long_pages=3)
    paths = list_pdfs(out / "input", *([samples_dir] if samples_dir else []))
    ds = build_pdf_dataset(paths, ocr_pool=ocr_pool, embed_pool=embed_pool)
    t0 = time.perf_counter()
    with _autoscale(policy, memory_limit, interval_s) as run:
        ds.write_parquet(str(out / "pages"))
    wall_s = time.perf_counter() - t0
    docs_df = curate_documents(read_pages(out / "pages"))
    docs_df.drop(columns=["embedding"]).to_parquet(out / "documents.parquet")
    acc = account(paths, docs_df["path"].tolist(), docs_df["status"].tolist(), docs_df["reason"].tolist())
    return DemoResult(kind="pdf", out_dir=str(out), wall_s=wall_s, accounting=acc, table=docs_df, run=run)


def run_video(out_dir: str | Path, *, clips: int = 4, seed: int = 0, resolution: str = "sd",
              policy: str | None = "trident", memory_limit: str | None = None, interval_s: float | None = None,
              ocr_pool: tuple[int, int] = (1, 2), embed_pool: tuple[int, int] = (1, 2)) -> DemoResult:
    """Generate ``clips`` clips with known cuts, curate them, write ``scenes/`` (Parquet) and
    ``clips.parquet``; a note per clip says whether the detected cuts match the ground truth."""
    from trident.demos.pdf import read_pages
    from trident.demos.scenes import match_cuts
    from trident.demos.video import build_video_dataset, list_clips, summarize_clips
    from trident.demos.videogen import write_clips

    out = Path(out_dir)
    truth = {c.path: c.cut_frames for c in write_clips(out / "input", n=clips, seed=seed, resolution=resolution,
                                                       scenes=3)}
    paths = list_clips(out / "input")
    ds = build_video_dataset(paths, ocr_pool=ocr_pool, embed_pool=embed_pool)
    t0 = time.perf_counter()
    with _autoscale(policy, memory_limit, interval_s) as run:
        ds.write_parquet(str(out / "scenes"))
    wall_s = time.perf_counter() - t0
    clips_df = summarize_clips(read_pages(out / "scenes"))
    clips_df.to_parquet(out / "clips.parquet")
    notes = []
    for clip, found in zip(clips_df["clip"], clips_df["cut_frames"]):
        matched, missed, spurious = match_cuts(list(found), list(truth.get(clip, ())))
        notes.append(f"{Path(clip).name}: cuts {list(found)} vs truth {list(truth.get(clip, ()))} "
                     f"({matched} matched, {missed} missed, {spurious} spurious)")
    acc = account(paths, clips_df["clip"].tolist(), clips_df["status"].tolist(), clips_df["reason"].tolist())
    return DemoResult(kind="video", out_dir=str(out), wall_s=wall_s, accounting=acc, table=clips_df, run=run,
                      notes=notes)
