"""Baseline job policies: FIFO, SJF, SRTF, Tiresias (2D-LAS) and a Gavel-style policy.

Each returns job ids highest priority first; ties break by arrival, then job id, so
an ordering is deterministic. SJF, SRTF and Gavel are oracles: they read the true
remaining run time, which a real scheduler does not know (reference points only).
"""
from __future__ import annotations

import math
from operator import attrgetter
from typing import Sequence

import numpy as np

from trident.core.errors import ConfigError
from trident.jobs.base import JOB_POLICIES, JobView, SchedState


_by_arrival = attrgetter("job.arrival_s", "job.job_id")


def _arrival_key(v: JobView) -> tuple[float, str]:
    return (v.job.arrival_s, v.job.job_id)


@JOB_POLICIES.register("fifo")
class FifoPolicy:
    """First come, first served (by arrival); a job that does not fit is skipped over."""

    name = "fifo"
    preemptive = False
    oracle = False
    placer = "first-fit"

    def order(self, state: SchedState, rng: np.random.Generator) -> tuple[str, ...]:
        return tuple(v.job.job_id for v in sorted(state.queued, key=_by_arrival))


@JOB_POLICIES.register("sjf")
class SjfPolicy:
    """Shortest job first, non-preemptive, on the true remaining run time (oracle)."""

    name = "sjf"
    preemptive = False
    oracle = True
    placer = "first-fit"

    def order(self, state: SchedState, rng: np.random.Generator) -> tuple[str, ...]:
        now = state.now
        return tuple(v.job.job_id for v in sorted(
            state.queued, key=lambda v: (v.remaining_s(now), *_arrival_key(v))))


@JOB_POLICIES.register("srtf")
class SrtfPolicy:
    """Shortest remaining time first over queued and running jobs (oracle, preemptive).

    A running job ranked below a queued one that does not fit is a preemption
    candidate; with the ``eager`` preemptor this is classic SRTF.
    """

    name = "srtf"
    preemptive = True
    oracle = True
    placer = "first-fit"

    def order(self, state: SchedState, rng: np.random.Generator) -> tuple[str, ...]:
        now = state.now
        views = [*state.queued, *state.running.values()]
        return tuple(v.job.job_id for v in sorted(
            views, key=lambda v: (v.remaining_s(now), *_arrival_key(v))))


@JOB_POLICIES.register("tiresias")
class TiresiasPolicy:
    """Discretised two-dimensional least-attained-service (Tiresias, NSDI'19).

    A job's attained service is GPUs x seconds held. Queue i holds jobs whose service
    lies in ``[thresholds[i-1], thresholds[i])`` GPU-seconds; lower queues go first,
    FIFO (by arrival) within a queue. A job queued again after running, whose current
    wait exceeds ``promote_factor`` times the time it has run (and ``min_promote_wait_s``),
    is promoted to the top queue, against starvation. Preemptive.
    """

    name = "tiresias"
    preemptive = True
    oracle = False
    placer = "first-fit"

    def __init__(self, *, thresholds_gpu_s: Sequence[float] = (3600.0, 36000.0),
                 promote_factor: float = 8.0, min_promote_wait_s: float = 3600.0) -> None:
        th = tuple(float(t) for t in thresholds_gpu_s)
        if any(t <= 0 for t in th) or list(th) != sorted(th):
            raise ConfigError("thresholds_gpu_s", thresholds_gpu_s, "increasing positive GPU-seconds")
        if promote_factor <= 0 or min_promote_wait_s < 0:
            raise ConfigError("promote_factor/min_promote_wait_s", (promote_factor, min_promote_wait_s),
                              "promote_factor > 0 and min_promote_wait_s >= 0")
        self.thresholds_gpu_s = th
        self.promote_factor = promote_factor
        self.min_promote_wait_s = min_promote_wait_s

    def queue_index(self, view: JobView, now: float) -> int:
        """0 = highest-priority queue."""
        service = view.attained_gpu_s(now)
        if not view.running:
            waited = now - view.as_of_s  # this queue spell
            if waited >= max(self.min_promote_wait_s, self.promote_factor * view.attained_s(now)) and service > 0:
                return 0
        for i, t in enumerate(self.thresholds_gpu_s):
            if service < t:
                return i
        return len(self.thresholds_gpu_s)

    def order(self, state: SchedState, rng: np.random.Generator) -> tuple[str, ...]:
        now = state.now
        views = [*state.queued, *state.running.values()]
        # Within a queue a running job keeps its place ahead of later arrivals (FIFO by arrival).
        return tuple(v.job.job_id for v in sorted(
            views, key=lambda v: (self.queue_index(v, now), *_arrival_key(v))))


@JOB_POLICIES.register("gavel")
class GavelPolicy:
    """Heterogeneity-aware finish-time fairness, after Gavel (OSDI'20), simplified.

    Gavel solves an LP over per-model throughputs each round and time-slices jobs.
    Here, each decision ranks queued jobs by their finish-time-fairness ratio
    ``rho = (time in system + remaining / best speed) / (duration / best speed)``
    (largest first: the job furthest behind its isolated run), where best speed is
    the job's fastest allowed GPU model present in the cluster; the ``speed`` placer
    then puts it on its fastest model that fits. Non-preemptive (no round-based
    time slicing). Oracle: it reads remaining run times, as Gavel reads total steps.
    """

    name = "gavel"
    preemptive = False
    oracle = True
    placer = "speed"

    def order(self, state: SchedState, rng: np.random.Generator) -> tuple[str, ...]:
        now = state.now
        models = tuple(state.total_gpus_by_model)

        def rho(v: JobView) -> float:
            allowed = [m for m in models if v.job.allows(m)] or list(models)
            best = max((v.job.speed_on(m) for m in allowed), default=1.0)
            isolated = v.job.duration_s / best
            in_system = now - v.job.arrival_s
            return (in_system + v.remaining_s(now) / best) / isolated if isolated > 0 else math.inf

        return tuple(v.job.job_id for v in sorted(state.queued, key=lambda v: (-rho(v), *_arrival_key(v))))
