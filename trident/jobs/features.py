"""Observable features of the queued jobs, RLTune-style (never a job's true duration).

Per queued job (the first ``max_jobs`` of the queue, longest-waiting first), nine
numbers, each scaled to about [0, 1]:

0. ``wait``: log-scaled seconds queued (1.0 = a week).
1. ``gpus``: log-scaled GPUs requested, relative to the GPUs of the models it may use.
2. ``demand_supply``: GPUs requested / (requested + free GPUs of its allowed models).
3. ``queue_load``: GPUs requested by the whole queue / all GPUs of its allowed models (clipped at 1).
4. ``near_future``: GPUs of running jobs on its models predicted to end within
   ``horizon_s`` (from their attained service and :class:`RuntimePrior`), as x / (x + requested).
5. ``fragmentation``: share of the free GPUs of its models on nodes that cannot host it alone.
6. ``feasible``: log-scaled number of nodes able to host it now (GPUs, CPUs and memory).
7. ``can_start``: 1 when a placement exists now.
8. ``qos``: 1 latency-sensitive / guaranteed, 0 best-effort, 0.5 otherwise.

With ``FeatureConfig(history=True)`` two more (``HISTORY_FEATURE_NAMES``), from a
:class:`RunTimeHistory` of finished jobs:

9. ``expected_run``: log-scaled run time expected from the finished jobs of its class
   (application / job type and GPUs; 1.0 = a week); the prior's median when none finished.
10. ``known``: 1 when finished jobs of its class (or its application) exist.

Jobs with the same shape (GPU models, GPUs, CPUs, memory) share their
capacity-derived features within one decision. Pure numpy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trident.core.errors import ConfigError
from trident.jobs.base import MILLI_PER_GPU, CapacityView, Job, JobView, SchedState
from trident.jobs.predict import RunTimeHistory, RuntimePrior

FEATURE_NAMES = ("wait", "gpus", "demand_supply", "queue_load", "near_future", "fragmentation", "feasible",
                 "can_start", "qos")
NUM_FEATURES = len(FEATURE_NAMES)
HISTORY_FEATURE_NAMES = ("expected_run", "known")
MAX_JOBS = 128
_WEEK_MIN = 7 * 24 * 60
_QOS = {"ls": 1.0, "guaranteed": 1.0, "lsr": 1.0, "be": 0.0, "besteffort": 0.0, "best-effort": 0.0}


@dataclass(frozen=True, eq=False)
class QueueFeatures:
    """Features of up to ``max_jobs`` queued jobs: ``matrix`` (n, NUM_FEATURES), ``can_start`` (n,) bool."""

    job_ids: tuple[str, ...]
    matrix: np.ndarray
    can_start: np.ndarray
    any_running: bool


@dataclass(frozen=True)
class FeatureConfig:
    """``horizon_s``: look-ahead of ``near_future``; ``max_jobs``: queue window featurised;
    ``history``: add the run-time-history features (``HISTORY_FEATURE_NAMES``)."""

    horizon_s: float = 600.0
    max_jobs: int = MAX_JOBS
    prior: RuntimePrior = RuntimePrior()
    history: bool = False

    @property
    def num_features(self) -> int:
        return NUM_FEATURES + (len(HISTORY_FEATURE_NAMES) if self.history else 0)

    def __post_init__(self) -> None:
        if not self.horizon_s > 0:
            raise ConfigError("horizon_s", self.horizon_s, "a number of seconds > 0")
        if not 1 <= self.max_jobs <= MAX_JOBS:
            raise ConfigError("max_jobs", self.max_jobs, f"an integer in [1, {MAX_JOBS}]")


def _log_week(seconds: float) -> float:
    """log(1 + minutes) / log(1 + a week's minutes), clipped to [0, 1]."""
    return min(1.0, math.log1p(max(0.0, seconds) / 60.0) / math.log1p(_WEEK_MIN))


def _models(job: Job, all_models) -> tuple[str, ...]:
    return tuple(m for m in all_models if job.allows(m))


def _capacity_features(job: Job, cap: CapacityView, models: tuple[str, ...]) -> tuple[float, float, int]:
    """(free GPUs of its models, free GPUs on nodes that can host it alone, nodes able to host it)."""
    need = job.gpu_milli
    free_total = usable = 0.0
    feasible = 0
    for m in models:
        ok_host = (cap.free_cpus(m) >= job.cpus - 1e-9) & (cap.free_memory_mib(m) >= job.memory_mib - 1e-9)
        full = cap.free_full_gpus(m)
        if need < MILLI_PER_GPU:
            matrix = _milli_matrix(cap, m)
            free_gpus = np.where(matrix > 0, matrix, 0).sum(axis=1) / MILLI_PER_GPU
            hosts = (matrix >= need).any(axis=1) & ok_host
            free_total += float(free_gpus.sum())
            usable += float(free_gpus[hosts].sum())
            feasible += int(hosts.sum())
            continue
        k = need // MILLI_PER_GPU
        max_size = max(cap.nodes[i].num_gpus for i in cap.node_indices(m).tolist())
        free_total += float(full.sum())
        if k <= max_size:
            hosts = (full >= k) & ok_host
            usable += float(full[hosts].sum())
            feasible += int(hosts.sum())
        elif full.sum() >= k:  # only a multi-node placement can hold it
            usable += float(full.sum())
            feasible += int((full > 0).sum())
    return free_total, usable, feasible


def _milli_matrix(cap: CapacityView, model: str) -> np.ndarray:
    getter = getattr(cap, "free_milli_matrix", None)
    if getter is not None:
        return getter(model)
    rows = [cap.free_milli(i) for i in cap.node_indices(model).tolist()]
    width = max(len(r) for r in rows)
    return np.array([np.pad(r, (0, width - len(r)), constant_values=-1) for r in rows])


def queue_features(state: SchedState, config: FeatureConfig = FeatureConfig(),
                   history: RunTimeHistory | None = None) -> QueueFeatures:
    """Featurise ``state.queued[:config.max_jobs]``. Needs ``state.capacity`` for the
    capacity-derived features; without it they fall back to per-model free GPUs.
    ``history`` (finished jobs' run times) feeds the history features when
    ``config.history`` (an empty one when ``None``)."""
    now = state.now
    views: list[JobView] = list(state.queued[: config.max_jobs])
    all_models = tuple(state.total_gpus_by_model)
    cap = state.capacity
    n = len(views)
    out = np.zeros((n, config.num_features), dtype=np.float32)
    if config.history:
        history = history if history is not None else RunTimeHistory()
        fallback = config.prior.quantile_remaining_s(0.0, 0.5)
    can_start = np.zeros(n, dtype=bool)
    # Running GPUs per model predicted to end within the horizon.
    ending: dict[str, float] = {m: 0.0 for m in all_models}
    placed = [v for v in state.running.values() if v.gpu_model is not None]
    if placed:
        speed = np.array([v.speed for v in placed])
        setup_left = np.array([v.setup_left_s(now) for v in placed])
        work = np.array([max(0.0, v.attained_s(now) - v.setup_elapsed_s(now)
                             - v.preemptions * v.expected_setup_s) for v in placed]) * speed
        p_end = config.prior.prob_ends_within(work, np.maximum(0.0, config.horizon_s - setup_left) * speed)
        for v, p in zip(placed, np.atleast_1d(p_end).tolist()):
            ending[v.gpu_model] += p * v.job.num_gpus
    demand = sum(v.job.num_gpus for v in state.queued)
    cache: dict[tuple, tuple[float, float, int]] = {}
    for i, v in enumerate(views):
        job = v.job
        models = _models(job, all_models)
        total = sum(state.total_gpus_by_model[m] for m in models)
        if cap is not None:
            key = (job.gpu_models, job.gpu_milli, job.cpus, job.memory_mib)
            if key not in cache:
                cache[key] = _capacity_features(job, cap, models)
            free, usable, feasible = cache[key]
            nodes = sum(len(cap.node_indices(m)) for m in models)
        else:
            free = sum(state.free_gpus_by_model[m] for m in models)
            usable, feasible, nodes = (free, 1, 1) if free >= job.num_gpus else (0.0, 0, 1)
        g = job.num_gpus
        soon = sum(ending.get(m, 0.0) for m in models)
        out[i, 0] = _log_week(v.wait_s(now))
        out[i, 1] = math.log1p(g) / math.log1p(max(total, 1.0))
        out[i, 2] = g / (g + free)
        out[i, 3] = min(1.0, demand / max(total, 1e-9))
        out[i, 4] = soon / (soon + g)
        out[i, 5] = 1.0 - usable / free if free > 0 else 1.0
        out[i, 6] = math.log1p(feasible) / math.log1p(max(nodes, 1))
        out[i, 7] = float(feasible > 0)
        out[i, 8] = _QOS.get(job.qos.strip().lower(), 0.5)
        if config.history:
            est = history.estimate_s(job)
            out[i, 9] = _log_week(fallback if est is None else est)
            out[i, 10] = float(est is not None)
        can_start[i] = feasible > 0
    return QueueFeatures(job_ids=tuple(v.job_id for v in views), matrix=out, can_start=can_start,
                         any_running=bool(state.running))
