"""Video curation: decode (PyAV) -> detect scenes (colour-histogram cuts) -> keyframes with
quality (sharpness, brightness) -> on-screen text (RapidOCR) -> keyframe embedding -> Parquet.

One row per detected scene. A clip that cannot be decoded becomes one row with
``status="skipped"`` and a ``reason``, so every input clip comes out of the pipeline.
The embedding is CLIP-free: a 512-d joint RGB colour histogram (8 bins per channel)
of the keyframe, L2-normalised.
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from trident.demos.neardup import normalise_rows
from trident.demos.pdf import limit_threads, object_array
from trident.demos.scenes import brightness, colour_histogram, detect_cuts, scene_bounds, sharpness

CUT_BINS = 4
"""Histogram bins per channel for cut detection (coarse: robust to compression noise)."""
EMBED_BINS = 8
EMBED_DIM = EMBED_BINS ** 3
KEYFRAME_MAX_WIDTH_PX = 640
SCENE_COLUMNS = ("clip", "scene", "n_scenes", "status", "reason", "start_frame", "end_frame", "start_s", "end_s",
                 "fps", "width", "height", "cut_frames", "sharpness", "brightness", "keyframe")
_INT_COLUMNS = ("scene", "n_scenes", "start_frame", "end_frame", "fps", "width", "height")
_FLOAT_COLUMNS = ("start_s", "end_s", "sharpness", "brightness")


def decode_frames(data: bytes, *, analysis_width_px: int = 96) -> tuple[list[np.ndarray], np.ndarray, float]:
    """(full-resolution RGB frames, per-frame colour histograms of a downscaled copy, fps)."""
    import av

    frames, hists = [], []
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        fps = float(stream.average_rate or 0) or 1.0
        for frame in container.decode(stream):
            h = max(2, int(round(frame.height * analysis_width_px / frame.width)))
            small = frame.reformat(width=analysis_width_px, height=h, format="rgb24").to_ndarray()
            hists.append(colour_histogram(small, bins=CUT_BINS))
            frames.append(frame.to_ndarray(format="rgb24"))
    return frames, np.array(hists), fps


def _png(frame: np.ndarray) -> bytes:
    from PIL import Image

    img = Image.fromarray(frame)
    if img.width > KEYFRAME_MAX_WIDTH_PX:
        img = img.resize((KEYFRAME_MAX_WIDTH_PX, int(img.height * KEYFRAME_MAX_WIDTH_PX / img.width)))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _skipped(clip: str, reason: str) -> dict:
    return {"clip": clip, "scene": -1, "n_scenes": 0, "status": "skipped", "reason": reason, "start_frame": 0,
            "end_frame": 0, "start_s": 0.0, "end_s": 0.0, "fps": 0, "width": 0, "height": 0, "cut_frames": "",
            "sharpness": 0.0, "brightness": 0.0, "keyframe": b""}


def clip_scenes(clip: str, data: bytes, *, threshold: float = 0.5, min_scene_frames: int = 4) -> list[dict]:
    """Scene rows of one clip (keyframe = the middle frame of each scene)."""
    try:
        frames, hists, fps = decode_frames(data)
    except Exception as exc:  # PyAV raises many error types for a damaged file
        return [_skipped(clip, f"undecodable: {type(exc).__name__}: {exc}")]
    if not frames:
        return [_skipped(clip, "no video frames")]
    cuts = detect_cuts(hists, threshold=threshold, min_scene_frames=min_scene_frames)
    bounds = scene_bounds(cuts, len(frames))
    h, w = frames[0].shape[:2]
    rows = []
    for s, (a, b) in enumerate(bounds):
        key = frames[(a + b - 1) // 2]
        rows.append({"clip": clip, "scene": s, "n_scenes": len(bounds), "status": "ok", "reason": "",
                     "start_frame": a, "end_frame": b, "start_s": a / fps, "end_s": b / fps, "fps": int(round(fps)),
                     "width": w, "height": h, "cut_frames": ",".join(map(str, cuts)),
                     "sharpness": sharpness(key), "brightness": brightness(key), "keyframe": _png(key)})
    return rows


def _batch(rows: list[dict]) -> dict[str, np.ndarray]:
    out = {}
    for col in SCENE_COLUMNS:
        values = [r[col] for r in rows]
        if col in _INT_COLUMNS:
            out[col] = np.array(values, dtype=np.int64)
        elif col in _FLOAT_COLUMNS:
            out[col] = np.array(values, dtype=np.float64)
        else:
            out[col] = object_array(values)
    return out


def split_scenes(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """CPU stage: a batch of clips (``path``, ``bytes``) -> a batch of scene rows."""
    rows: list[dict] = []
    for path, data in zip(batch["path"], batch["bytes"]):
        rows.extend(clip_scenes(str(path), bytes(data)))
    return _batch(rows)


class OcrKeyframes:
    """Model stage (actor): on-screen text of each keyframe (RapidOCR)."""

    def __init__(self) -> None:
        limit_threads()
        from rapidocr_onnxruntime import RapidOCR

        self._engine = RapidOCR()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from trident.demos.pdf import ocr_text

        text = [ocr_text(self._engine, bytes(k)) if k else "" for k in batch["keyframe"]]
        return {**batch, "text": object_array(text)}


def keyframe_embedding(png: bytes) -> np.ndarray:
    """The 512-d unit-norm joint colour histogram of a keyframe (zeros for no keyframe)."""
    from PIL import Image

    if not png:
        return np.zeros(EMBED_DIM, dtype=np.float32)
    frame = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    return normalise_rows(colour_histogram(frame, bins=EMBED_BINS)[None, :])[0]


class EmbedKeyframes:
    """Model stage (actor): keyframe embeddings; drops the keyframe pixels from the row."""

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        emb = np.stack([keyframe_embedding(bytes(k)) for k in batch["keyframe"]]) if len(batch["keyframe"]) else \
            np.zeros((0, EMBED_DIM), np.float32)
        out = {k: v for k, v in batch.items() if k != "keyframe"}
        out["embedding"] = emb.astype(np.float32)
        return out


def build_video_dataset(paths: list[str], *, ocr_cls=OcrKeyframes, embed_cls=EmbedKeyframes,
                        ocr_pool: tuple[int, int] = (1, 2), embed_pool: tuple[int, int] = (1, 2),
                        ocr_num_gpus: float = 0.5, embed_num_gpus: float = 0.25, ocr_batch_size: int = 4,
                        embed_batch_size: int = 16):
    """The lazy Ray Dataset of scene rows. Model stages are actor pools on (logical) GPUs."""
    import ray
    from ray.data import ActorPoolStrategy

    ds = ray.data.read_binary_files(paths, include_paths=True, override_num_blocks=max(1, len(paths)))
    return (ds.map_batches(split_scenes, batch_size=1, num_cpus=1)
              .map_batches(ocr_cls, compute=ActorPoolStrategy(min_size=ocr_pool[0], max_size=ocr_pool[1]),
                           num_gpus=ocr_num_gpus, batch_size=ocr_batch_size)
              .map_batches(embed_cls, compute=ActorPoolStrategy(min_size=embed_pool[0], max_size=embed_pool[1]),
                           num_gpus=embed_num_gpus, batch_size=embed_batch_size))


def list_clips(folder: str | Path) -> list[str]:
    """Sorted ``*.mp4`` paths in a folder."""
    return [str(p) for p in sorted(Path(folder).glob("*.mp4"))]


def summarize_clips(scenes):
    """Scene rows (pandas) -> one row per input clip: scene count, cut frames, mean quality, text found."""
    import pandas as pd

    out = []
    for clip, grp in scenes.sort_values(["clip", "scene"]).groupby("clip", sort=True):
        ok = grp[grp["status"] == "ok"]
        cuts = str(grp["cut_frames"].iloc[0])
        out.append({
            "clip": clip,
            "status": "ok" if len(ok) else "skipped",
            "reason": "" if len(ok) else str(grp["reason"].iloc[0]),
            "n_scenes": int(len(ok)),
            "cut_frames": [int(c) for c in cuts.split(",")] if cuts else [],
            "mean_sharpness": float(ok["sharpness"].mean()) if len(ok) else 0.0,
            "mean_brightness": float(ok["brightness"].mean()) if len(ok) else 0.0,
            "text": " | ".join(t for t in ok["text"].astype(str) if t),
        })
    return pd.DataFrame(out)
