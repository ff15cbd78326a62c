"""Sustainable-throughput samples: what an operator can do, not what it happened to do.

Measured throughput is distorted: a starved operator (empty input queue) waits on its
upstream, a backpressured one waits on its downstream, and continuous batching makes
bursts (spikes). None of these says what the configuration sustains, so they are
removed before a model is fitted, in three steps:

1. state: drop snapshots taken while starved, backpressured, scaling (actors pending),
   completed, or without output or input size;
2. Hampel: per configuration, in time order, drop samples further than ``hampel_sigmas``
   robust standard deviations (1.4826 x MAD) from the rolling median;
3. GP residual: fit a Gaussian process to log throughput over all configurations and
   drop samples whose residual is further than ``residual_sigmas`` robust standard
   deviations from the median residual (catches outliers Hampel cannot judge, e.g. in
   configurations seen only briefly).
"""
from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trident.core.errors import ConfigError
from trident.core.model.features import ConfigFeatures, FeatureEncoder
from trident.core.model.threads import single_threaded
from trident.core.types import OperatorSnapshot

MAD_TO_SIGMA = 1.4826
"""Scale of the median absolute deviation to a normal standard deviation."""


@dataclass(frozen=True)
class ThroughputSample:
    """One sustainable observation of one operator.

    ``rows_per_s_per_replica`` is output rows per second divided by the replicas running;
    memory is per replica (``None`` when not measured). ``reason`` says why it was kept.
    """

    time_s: float
    operator: str
    config: ConfigFeatures
    rows_per_s_per_replica: float
    heap_bytes_per_replica: float | None
    object_store_bytes_per_replica: float | None
    reason: str = "kept"


@dataclass(frozen=True)
class Rejection:
    """A snapshot left out, with the stage (``state``, ``hampel`` or ``gp_residual``) and why."""

    time_s: float
    operator: str
    stage: str
    reason: str


@dataclass(frozen=True)
class FilterResult:
    """The samples kept (time order) and the snapshots rejected (with reasons)."""

    kept: tuple[ThroughputSample, ...]
    rejected: tuple[Rejection, ...]

    def counts(self) -> dict[str, int]:
        """Number kept (``"kept"``) and rejected per stage."""
        c = Counter(r.stage for r in self.rejected)
        c["kept"] = len(self.kept)
        return dict(c)

    @property
    def reason(self) -> str:
        c = self.counts()
        parts = ", ".join(f"{k} {v}" for k, v in sorted(c.items()) if k != "kept")
        return f"kept {c['kept']} samples" + (f"; rejected {parts}" if parts else "")


def replicas_running(op: OperatorSnapshot) -> int:
    """Replicas doing work now: running actors (actor ops), running tasks (task ops), else the configured count."""
    if op.config.kind == "actor" and op.actors_running > 0:
        return op.actors_running
    if op.config.kind == "task" and op.tasks_running > 0:
        return op.tasks_running
    return op.config.replicas or 0


def state_rejection(op: OperatorSnapshot) -> str | None:
    """Why ``op`` at this moment says nothing about sustainable throughput, or ``None`` when it does."""
    if op.completed:
        return "completed"
    if op.backpressured:
        return "backpressured (output blocked)"
    if op.input_queue_blocks == 0:
        return "starved (empty input queue)"
    if op.actors_pending > 0:
        return f"scaling ({op.actors_pending} actors pending)"
    if op.rows_out_per_s <= 0:
        return "no output this interval"
    if op.input_bytes_per_row is None or op.input_bytes_per_row <= 0:
        return "input row size unknown"
    if replicas_running(op) <= 0:
        return "no replica running"
    return None


def to_sample(op: OperatorSnapshot, time_s: float) -> ThroughputSample:
    """The per-replica sample of ``op`` at ``time_s`` (no filtering; see :func:`state_rejection`)."""
    replicas = replicas_running(op)
    heap = op.heap_rss_per_replica_bytes
    if heap is None and op.heap_rss_bytes is not None:
        heap = op.heap_rss_bytes / replicas
    return ThroughputSample(
        time_s=time_s,
        operator=op.name,
        config=ConfigFeatures.from_config(op.config, replicas=replicas, input_bytes_per_row=float(op.input_bytes_per_row)),
        rows_per_s_per_replica=op.rows_out_per_s / replicas,
        heap_bytes_per_replica=None if heap is None else float(heap),
        object_store_bytes_per_replica=op.object_store_bytes / replicas,
    )


def hampel_mask(values: Sequence[float], *, half_window: int = 5, n_sigmas: float = 3.0, rel_floor: float = 0.01) -> np.ndarray:
    """True where ``values[i]`` is an outlier of its rolling window ``[i-half_window, i+half_window]``.

    The scale is ``max(1.4826 x MAD, rel_floor x |median|)`` so near-constant series do not
    flag ordinary jitter. Series shorter than 3 are never flagged.
    """
    if half_window < 1:
        raise ConfigError("half_window", half_window, "an integer >= 1")
    if n_sigmas <= 0:
        raise ConfigError("n_sigmas", n_sigmas, "a number > 0")
    x = np.asarray(values, dtype=float)
    out = np.zeros(len(x), dtype=bool)
    if len(x) < 3:
        return out
    for i in range(len(x)):
        lo, hi = max(0, i - half_window), min(len(x), i + half_window + 1)
        w = x[lo:hi]
        med = np.median(w)
        scale = max(MAD_TO_SIGMA * np.median(np.abs(w - med)), rel_floor * abs(med), 1e-12)
        out[i] = abs(x[i] - med) > n_sigmas * scale
    return out


def gp_residual_mask(
    samples: Sequence[ThroughputSample], *, n_sigmas: float = 3.5, rel_floor: float = 0.01, seed: int = 0
) -> np.ndarray:
    """True where a sample's log throughput is far from a GP fitted over all configurations.

    The residual scale is robust (1.4826 x MAD of the residuals, at least ``rel_floor``
    in log units). Returns all False when the GP cannot be fitted.
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    devices = tuple(sorted({s.config.device_type for s in samples}))
    x = FeatureEncoder(device_types=devices).encode([s.config for s in samples])
    y = np.log([s.rows_per_s_per_replica for s in samples])
    kernel = ConstantKernel(1.0, (1e-3, 1e3)) * Matern(
        length_scale=np.ones(x.shape[1]), length_scale_bounds=(1e-2, 1e3), nu=2.5
    ) + WhiteKernel(1e-2, (1e-6, 1.0))
    try:
        with single_threaded(), warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            gp = GaussianProcessRegressor(kernel=kernel, normalize_y=True, random_state=seed).fit(x, y)
            r = y - gp.predict(x)
    except (ValueError, np.linalg.LinAlgError):
        return np.zeros(len(samples), dtype=bool)
    med = np.median(r)
    scale = max(MAD_TO_SIGMA * np.median(np.abs(r - med)), rel_floor)
    return np.abs(r - med) > n_sigmas * scale


def sustainable_samples(
    history: Sequence[OperatorSnapshot],
    *,
    times_s: Sequence[float],
    hampel_half_window: int = 5,
    hampel_sigmas: float = 3.0,
    residual_sigmas: float = 3.5,
    min_gp_samples: int = 12,
    max_gp_samples: int = 300,
    seed: int = 0,
) -> FilterResult:
    """Per-replica throughput samples of one operator that reflect sustainable work.

    ``history`` holds the operator's snapshots in time order and ``times_s`` the snapshot
    times (seconds; same length). The GP-residual stage runs only with at least
    ``min_gp_samples`` Hampel survivors, on the latest ``max_gp_samples`` of them.
    Pure and deterministic for a given ``seed``.
    """
    if len(times_s) != len(history):
        raise ConfigError("times_s", f"{len(times_s)} times", f"one per snapshot ({len(history)})")
    rejected: list[Rejection] = []
    candidates: list[ThroughputSample] = []
    for op, t in zip(history, times_s):
        why = state_rejection(op)
        if why is None:
            candidates.append(to_sample(op, float(t)))
        else:
            rejected.append(Rejection(float(t), op.name, "state", why))

    groups: dict[tuple, list[int]] = {}
    for i, s in enumerate(candidates):
        groups.setdefault((s.config.batch_size, s.config.device_type, s.config.replicas), []).append(i)
    spiking = np.zeros(len(candidates), dtype=bool)
    for idx in groups.values():
        vals = [candidates[i].rows_per_s_per_replica for i in idx]
        spiking[idx] = hampel_mask(vals, half_window=hampel_half_window, n_sigmas=hampel_sigmas)
    survivors = []
    for s, bad in zip(candidates, spiking):
        if bad:
            rejected.append(Rejection(s.time_s, s.operator, "hampel", "spike: far from the rolling median of its configuration"))
        else:
            survivors.append(s)

    if len(survivors) >= min_gp_samples:
        head, tail = survivors[:-max_gp_samples], survivors[-max_gp_samples:]
        bad = gp_residual_mask(tail, n_sigmas=residual_sigmas, seed=seed)
        for s, b in zip(tail, bad):
            if b:
                rejected.append(Rejection(s.time_s, s.operator, "gp_residual", "outlier: far from the GP fitted over all configurations"))
        survivors = head + [s for s, b in zip(tail, bad) if not b]

    rejected.sort(key=lambda r: r.time_s)
    return FilterResult(kept=tuple(survivors), rejected=tuple(rejected))
