"""Scene-cut detection and keyframe quality on frame arrays (pure numpy).

A cut is declared between frames whose colour histograms differ by at least
``threshold`` in total-variation distance (0 = same distribution, 1 = disjoint), and
at least ``min_scene_frames`` after the previous cut.
"""
from __future__ import annotations

import numpy as np

from trident.core.errors import ConfigError


def colour_histogram(frame: np.ndarray, *, bins: int = 8) -> np.ndarray:
    """Joint RGB histogram of an (h, w, 3) uint8 frame, ``bins**3`` values summing to 1."""
    q = (frame.reshape(-1, 3).astype(np.int32) * bins) // 256
    idx = (q[:, 0] * bins + q[:, 1]) * bins + q[:, 2]
    hist = np.bincount(idx, minlength=bins ** 3).astype(np.float64)
    return hist / max(1.0, hist.sum())


def histogram_distances(histograms: np.ndarray) -> np.ndarray:
    """Total-variation distance between consecutive histograms: shape (n - 1,), in [0, 1]."""
    h = np.asarray(histograms, dtype=np.float64)
    if len(h) < 2:
        return np.zeros(0)
    return 0.5 * np.abs(np.diff(h, axis=0)).sum(axis=1)


def detect_cuts(histograms: np.ndarray, *, threshold: float = 0.5, min_scene_frames: int = 4) -> list[int]:
    """Frame indices where a new scene starts (never 0), from per-frame histograms."""
    if not 0.0 < threshold < 1.0:
        raise ConfigError("threshold", threshold, "a distance in (0, 1)")
    if min_scene_frames < 1:
        raise ConfigError("min_scene_frames", min_scene_frames, "an integer >= 1")
    cuts: list[int] = []
    last = 0
    for i, d in enumerate(histogram_distances(histograms), start=1):
        if d >= threshold and i - last >= min_scene_frames:
            cuts.append(i)
            last = i
    return cuts


def scene_bounds(cuts: list[int], n_frames: int) -> list[tuple[int, int]]:
    """[(first_frame, end_frame_exclusive)] of every scene."""
    starts = [0] + list(cuts)
    return list(zip(starts, starts[1:] + [n_frames]))


def luma(frame: np.ndarray) -> np.ndarray:
    """Rec. 601 luma of an (h, w, 3) uint8 frame, float32 in [0, 255]."""
    return frame[..., :3].astype(np.float32) @ np.array([0.299, 0.587, 0.114], dtype=np.float32)


def sharpness(frame: np.ndarray) -> float:
    """Variance of the 4-neighbour Laplacian of the luma (higher = sharper)."""
    y = luma(frame)
    lap = -4 * y[1:-1, 1:-1] + y[:-2, 1:-1] + y[2:, 1:-1] + y[1:-1, :-2] + y[1:-1, 2:]
    return float(lap.var()) if lap.size else 0.0


def brightness(frame: np.ndarray) -> float:
    """Mean luma, 0-255."""
    return float(luma(frame).mean())


def match_cuts(found: list[int], truth: list[int], *, tolerance_frames: int = 1) -> tuple[int, int, int]:
    """(matched, missed, spurious) with each true cut matched at most once within the tolerance."""
    remaining = list(found)
    matched = 0
    for t in truth:
        hit = next((f for f in remaining if abs(f - t) <= tolerance_frames), None)
        if hit is not None:
            remaining.remove(hit)
            matched += 1
    return matched, len(truth) - matched, len(remaining)
