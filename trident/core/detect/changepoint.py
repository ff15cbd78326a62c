"""Online changepoint detection on one scalar stream (per-replica throughput, input bytes per row).

Each :meth:`ChangeDetector.update` appends the new values to a bounded window and
segments the window with ruptures' ``KernelCPD(kernel="linear")`` (C-backed; the linear
kernel is the least-squares cost of a mean shift) with ``jump=1``. The penalty is
BIC-style, ``penalty_scale * sigma**2 * log(window)``, where ``sigma`` is the noise level
estimated robustly from first differences (``1.4826 * MAD(diff) / sqrt(2)``), so it does
not depend on the signal's units and is not inflated by the shift itself. When a break
is found, the samples before it are dropped from the window (they belong to the old
regime) and a :class:`ChangeEvent` says where it was.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trident.core.errors import ConfigError

MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class ChangeEvent:
    """A detected change.

    ``index`` counts the stream's samples from 0 (the first sample of the new regime);
    ``changed_at_s`` is that sample's time (or ``detected_at_s`` when no times were given);
    ``samples_since_change`` = samples seen after the break when it was reported.
    """

    signal: str
    index: int
    changed_at_s: float
    detected_at_s: float
    mean_before: float
    mean_after: float
    samples_since_change: int
    reason: str


def robust_sigma(values: Sequence[float]) -> float:
    """Noise standard deviation from first differences: ``1.4826 * MAD(diff) / sqrt(2)`` (0 for < 3 values)."""
    x = np.asarray(values, dtype=float)
    if len(x) < 3:
        return 0.0
    d = np.diff(x)
    return float(MAD_TO_SIGMA * np.median(np.abs(d - np.median(d))) / math.sqrt(2.0))


def bic_penalty(values: Sequence[float], *, penalty_scale: float, n: int | None = None, rel_floor: float = 1e-3) -> float:
    """``penalty_scale * sigma**2 * log(n)`` (``n`` defaults to ``len(values)``); sigma is at least
    ``rel_floor * |median|`` (and > 0)."""
    x = np.asarray(values, dtype=float)
    sigma = max(robust_sigma(x), rel_floor * abs(float(np.median(x))), 1e-12)
    return penalty_scale * sigma**2 * math.log(max(n or len(x), 2))


class ChangeDetector:
    """Online mean-shift detector over a bounded window of one signal.

    ``window`` bounds the samples kept; ``min_size`` is the shortest segment; a break is
    reported once ``confirm`` samples follow it (before that its place is pinned by
    ``min_size`` rather than by the data); detection starts once ``min_samples`` samples
    are held; ``penalty_scale`` is the BIC multiplier (higher = fewer false alarms,
    later detections). The penalty's ``log(n)`` uses ``n = window``, so the false-alarm
    rate stays the same while the window refills after a change.
    """

    def __init__(
        self,
        *,
        signal: str = "throughput",
        window: int = 200,
        min_size: int = 5,
        min_samples: int = 20,
        confirm: int = 8,
        penalty_scale: float = 4.0,
    ) -> None:
        if min_size < 2:
            raise ConfigError("min_size", min_size, "an integer >= 2")
        if min_samples < 2 * min_size:
            raise ConfigError("min_samples", min_samples, f"an integer >= 2 * min_size ({2 * min_size})")
        if window < min_samples:
            raise ConfigError("window", window, f"an integer >= min_samples ({min_samples})")
        if confirm < min_size:
            raise ConfigError("confirm", confirm, f"an integer >= min_size ({min_size})")
        if penalty_scale <= 0:
            raise ConfigError("penalty_scale", penalty_scale, "a number > 0")
        self.signal = signal
        self.window = window
        self.min_size = min_size
        self.min_samples = min_samples
        self.confirm = confirm
        self.penalty_scale = penalty_scale
        self._values: list[float] = []
        self._times: list[float | None] = []
        self._start = 0
        self.n_seen = 0

    @property
    def values(self) -> tuple[float, ...]:
        """The samples of the current regime held in the window."""
        return tuple(self._values)

    def reset(self) -> None:
        """Forget the window (e.g. after the operator was reconfigured); the sample count continues."""
        self._start = self.n_seen
        self._values.clear()
        self._times.clear()

    def update(self, values: float | Sequence[float], *, now: float, times_s: Sequence[float] | None = None) -> ChangeEvent | None:
        """Append ``values`` (with optional per-value ``times_s``) and report a change, if any.

        Non-finite values are ignored. Returns the most recent break found in the window,
        or ``None``.
        """
        vals = [float(values)] if np.isscalar(values) else [float(v) for v in values]
        if times_s is not None and len(times_s) != len(vals):
            raise ConfigError("times_s", f"{len(times_s)} times", f"one per value ({len(vals)})")
        times = [None] * len(vals) if times_s is None else [float(t) for t in times_s]
        for v, t in zip(vals, times):
            if math.isfinite(v):
                self._values.append(v)
                self._times.append(t)
                self.n_seen += 1
        excess = len(self._values) - self.window
        if excess > 0:
            del self._values[:excess]
            del self._times[:excess]
            self._start += excess
        if len(self._values) < self.min_samples:
            return None
        return self._detect(now)

    def _detect(self, now: float) -> ChangeEvent | None:
        import ruptures

        x = np.asarray(self._values)
        pen = bic_penalty(x, penalty_scale=self.penalty_scale, n=self.window)
        bkps = ruptures.KernelCPD(kernel="linear", min_size=self.min_size, jump=1).fit(x).predict(pen=pen)
        if len(bkps) < 2:
            return None
        b = bkps[-2]
        if len(x) - b < self.confirm:
            return None  # too few samples after the break to place it; look again next time
        prev = bkps[-3] if len(bkps) >= 3 else 0
        before, after = float(x[prev:b].mean()), float(x[b:].mean())
        t = self._times[b]
        event = ChangeEvent(
            signal=self.signal,
            index=self._start + b,
            changed_at_s=now if t is None else t,
            detected_at_s=now,
            mean_before=before,
            mean_after=after,
            samples_since_change=len(x) - b,
            reason=(
                f"{self.signal} changed {before:.4g} -> {after:.4g} "
                f"({len(x) - b} samples ago; penalty {pen:.3g} over {len(x)} samples)"
            ),
        )
        del self._values[:b]
        del self._times[:b]
        self._start += b
        return event
