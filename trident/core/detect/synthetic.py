"""Seeded piecewise-constant signals with known breakpoints (ground truth for the detector)."""
from __future__ import annotations

import numpy as np

from trident.core.errors import ConfigError


def piecewise_constant(
    *,
    n_samples: int,
    n_breaks: int,
    rng: np.random.Generator,
    level: float = 100.0,
    noise_std: float = 5.0,
    min_shift_sigmas: float = 3.0,
    max_shift_sigmas: float = 8.0,
    min_segment: int = 60,
) -> tuple[np.ndarray, tuple[int, ...]]:
    """A signal of ``n_samples`` with ``n_breaks`` mean shifts and Gaussian noise.

    Breaks are at least ``min_segment`` apart (and from both ends); each shift has a
    random sign and a size uniform in ``[min_shift_sigmas, max_shift_sigmas] * noise_std``;
    levels stay positive. Returns ``(signal, breaks)`` where ``breaks`` are the indices of
    the first sample of each new segment.
    """
    if n_breaks < 0 or n_samples < (n_breaks + 1) * min_segment:
        raise ConfigError("n_samples", n_samples, f">= (n_breaks + 1) * min_segment = {(n_breaks + 1) * min_segment}")
    slack = n_samples - (n_breaks + 1) * min_segment
    cuts = np.sort(rng.integers(0, slack + 1, size=n_breaks))
    breaks = tuple(int(c + (i + 1) * min_segment) for i, c in enumerate(cuts))
    means = np.empty(n_samples)
    mean, start = level, 0
    for b in (*breaks, n_samples):
        means[start:b] = mean
        shift = rng.uniform(min_shift_sigmas, max_shift_sigmas) * noise_std
        sign = rng.choice((-1.0, 1.0)) if mean - shift > 0.2 * level else 1.0
        mean, start = mean + sign * shift, b
    return means + rng.normal(0.0, noise_std, n_samples), breaks
