"""An observable-only predictor of a running job's remaining run time.

A job's true duration is never read. :class:`RuntimePrior` holds an empirical
duration distribution (by default the quantiles of 83,154 Philly job runtimes,
shipped beside this module) and answers "a job that has run ``attained_s`` seconds:
how long until it ends?" by the conditional distribution ``D - a | D > a``.
Completed jobs seen on the cluster can replace the prior as they accumulate.
Pure: no clock, no randomness. (The next-arrival predictor is
:class:`trident.jobs.base.EwmaArrivalPredictor`.)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

import numpy as np

from trident.core.errors import ConfigError

_QUANTILE_FILE = "philly_runtime_quantiles.csv"


@lru_cache(maxsize=1)
def philly_runtime_quantiles_s() -> np.ndarray:
    """200 mid-point quantiles (levels 0.0025, 0.0075, ..., 0.9975) of Philly job runtimes, in seconds."""
    text = resources.files("trident.jobs").joinpath(_QUANTILE_FILE).read_text()
    rows = [line.split(",") for line in text.splitlines() if line and not line.startswith(("#", "quantile"))]
    values = np.array([float(r[1]) for r in rows], dtype=float)
    values.setflags(write=False)
    return values


@dataclass(frozen=True)
class RuntimePrior:
    """An empirical duration distribution, as equally weighted sample points (seconds).

    ``scale`` multiplies every point (a cluster whose jobs run k times longer than
    Philly's). ``max_points`` bounds the sample used after :meth:`with_observed`.
    """

    points_s: tuple[float, ...] = field(default=())
    scale: float = 1.0
    max_points: int = 512

    def __post_init__(self) -> None:
        if self.scale <= 0:
            raise ConfigError("scale", self.scale, "a positive number")
        if self.max_points < 2:
            raise ConfigError("max_points", self.max_points, "an integer >= 2")
        if any(p < 0 for p in self.points_s):
            raise ConfigError("points_s", "negative value", "durations >= 0 seconds")
        pts = np.asarray(self.points_s if self.points_s else philly_runtime_quantiles_s(), dtype=float)
        object.__setattr__(self, "_sorted_s", np.sort(pts) * self.scale)

    @classmethod
    def philly(cls, *, scale: float = 1.0) -> "RuntimePrior":
        """The shipped Philly runtime distribution (the default when ``points_s`` is empty)."""
        return cls(scale=scale)

    def with_observed(self, durations_s: "list[float] | np.ndarray", *, min_observed: int = 30) -> "RuntimePrior":
        """The distribution of completed jobs' durations once ``min_observed`` are known, else ``self``.

        At most ``max_points`` evenly spaced quantiles of the observed durations are kept.
        """
        obs = np.asarray(durations_s, dtype=float)
        if obs.size < min_observed:
            return self
        levels = np.linspace(0.0, 1.0, min(self.max_points, obs.size))
        pts = np.quantile(obs, levels)
        return RuntimePrior(points_s=tuple(float(p) for p in pts), scale=1.0, max_points=self.max_points)

    def expected_remaining_s(self, attained_s: float) -> float:
        """E[D - a | D > a] for attained service ``a`` (seconds).

        Beyond the largest sample point the mean residual of a heavy tail grows
        with age; the estimate then is ``attained_s`` itself.
        """
        pts = self._sorted_s
        alive = pts[np.searchsorted(pts, attained_s, side="right"):]
        if alive.size == 0:
            return float(max(attained_s, 1.0))
        return float(np.mean(alive - attained_s))

    def quantile_remaining_s(self, attained_s: float, q: float = 0.5) -> float:
        """The ``q``-quantile of D - a | D > a (seconds); robust to the heavy tail.

        Beyond the largest sample point: ``attained_s`` itself (as the mean's estimate).
        """
        if not 0.0 <= q <= 1.0:
            raise ConfigError("q", q, "a number in [0, 1]")
        pts = self._sorted_s
        lo = int(np.searchsorted(pts, attained_s, side="right"))
        m = pts.size - lo
        if m == 0:
            return float(max(attained_s, 1.0))
        pos = q * (m - 1)  # linear interpolation between order statistics, as numpy's default
        i = int(pos)
        j = min(i + 1, m - 1)
        value = pts[lo + i] + (pos - i) * (pts[lo + j] - pts[lo + i])
        return float(value - attained_s)

    def prob_ends_within(self, attained_s, horizon_s):
        """P(D <= a + h | D > a): the chance a job that has run ``attained_s`` ends within
        ``horizon_s`` seconds. Scalars or numpy arrays (broadcast); 0 beyond the sample."""
        pts = self._sorted_s
        a = np.asarray(attained_s, dtype=float)
        lo = np.searchsorted(pts, a, side="right")
        hi = np.searchsorted(pts, a + np.asarray(horizon_s, dtype=float), side="right")
        alive = pts.size - lo
        p = np.where(alive > 0, (hi - lo) / np.maximum(alive, 1), 0.0)
        return float(p) if p.ndim == 0 else p


class RunTimeHistory:
    """Run times of finished jobs by class: an observable estimate of a queued job's run time.

    A job's class is its ``user`` field (the application, job type or user a trace
    carries), whether it is elastic (a pipeline's run time says nothing of a training
    job's) and its GPU count; :meth:`observe` books a finished job's run time on the
    reference GPU (known once it has finished, as any scheduler knows when a job ended).
    :meth:`estimate_s` answers with the median run time of the finished jobs of the same
    class, else of the same ``user`` and kind at any GPU count, else ``None``. A queued job's
    own duration is never read. ``max_per_class`` keeps the most recent run times of a class.
    """

    def __init__(self, *, max_per_class: int = 64) -> None:
        if max_per_class < 1:
            raise ConfigError("max_per_class", max_per_class, "an integer >= 1")
        self.max_per_class = max_per_class
        self._by_class: dict[tuple[str, bool, float], list[float]] = {}
        self._by_user: dict[tuple[str, bool], list[float]] = {}
        self._cache: dict[tuple[str, bool, float], float | None] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_class.values())

    def clear(self) -> None:
        self._by_class.clear()
        self._by_user.clear()
        self._cache.clear()

    def copy(self) -> RunTimeHistory:
        """An independent copy (a pre-filled history handed to several policies: each books its own finishes)."""
        other = RunTimeHistory(max_per_class=self.max_per_class)
        other._by_class = {k: list(v) for k, v in self._by_class.items()}
        other._by_user = {k: list(v) for k, v in self._by_user.items()}
        return other

    def observe(self, job, run_s: float) -> None:
        """Book ``job`` (a :class:`~trident.jobs.base.Job`) as finished after ``run_s`` seconds of work."""
        if not (run_s >= 0 and np.isfinite(run_s)):
            raise ConfigError("run_s", run_s, "a finite number of seconds >= 0")
        kind = (job.user, job.elastic)
        for book, key in ((self._by_class, (*kind, float(job.num_gpus))), (self._by_user, kind)):
            runs = book.setdefault(key, [])
            runs.append(float(run_s))
            del runs[: -self.max_per_class]
        self._cache.clear()

    def estimate_s(self, job) -> float | None:
        """Median run time of finished jobs of ``job``'s class (then of its ``user`` and kind), or ``None``."""
        key = (job.user, job.elastic, float(job.num_gpus))
        if key not in self._cache:
            runs = self._by_class.get(key) or self._by_user.get(key[:2])
            self._cache[key] = float(np.median(runs)) if runs else None
        return self._cache[key]
