"""Observable orders from run-time history: shortest expected job first, and its preemptive
form (shortest expected remaining first).

A queued job's expected run time is the median run time of the finished jobs of its class
(:class:`~trident.jobs.predict.RunTimeHistory`: its application / job type and GPUs),
else the prior's median; a job's own duration is never read. These are the observable
counterparts of the oracles ``sjf`` and ``srtf``, and the teacher the history-reading
``rltune`` is warm-started on.
"""
from __future__ import annotations

import numpy as np

from trident.jobs.base import JOB_POLICIES, JobView, SchedState
from trident.jobs.predict import RunTimeHistory, RuntimePrior


_PRIOR = RuntimePrior()


class _HistoryOrder:
    oracle = False
    placer = "first-fit"

    def __init__(self, *, prior: RuntimePrior = _PRIOR, history: RunTimeHistory | None = None) -> None:
        self.history = RunTimeHistory() if history is None else history
        self.prior = prior
        self.fallback_s = prior.quantile_remaining_s(0.0, 0.5)

    def observe_finish(self, job, run_s: float) -> None:
        self.history.observe(job, run_s)

    def expected_s(self, view: JobView) -> float:
        est = self.history.estimate_s(view.job)
        return self.fallback_s if est is None else est


@JOB_POLICIES.register("sef")
class ShortestExpectedFirst(_HistoryOrder):
    """Non-preemptive: queued jobs by expected run time, then fewer GPUs, then arrival."""

    name = "sef"
    preemptive = False

    def order(self, state: SchedState, rng: np.random.Generator) -> tuple[str, ...]:
        return tuple(v.job_id for v in sorted(
            state.queued, key=lambda v: (self.expected_s(v), v.job.num_gpus, v.job.arrival_s, v.job_id)))


@JOB_POLICIES.register("sref")
class ShortestRemainingExpectedFirst(_HistoryOrder):
    """Preemptive: queued and running jobs by expected remaining run time (expected run time
    less the work done so far, on the reference GPU; the prior's median residual life when its
    class has no history or the job outlived it), then fewer GPUs, then arrival."""

    name = "sref"
    preemptive = True

    def remaining_s(self, v: JobView, now: float) -> float:
        done = max(0.0, v.attained_s(now) - v.setup_elapsed_s(now) - v.preemptions * v.expected_setup_s) * v.speed
        est = self.history.estimate_s(v.job)
        if est is None or est <= done:  # no history, or it outlived it: the prior's median residual
            return self.prior.quantile_remaining_s(done, 0.5)
        return est - done

    def order(self, state: SchedState, rng: np.random.Generator) -> tuple[str, ...]:
        now = state.now
        views = [*state.queued, *state.running.values()]
        return tuple(v.job_id for v in sorted(
            views, key=lambda v: (self.remaining_s(v, now), v.job.num_gpus, v.job.arrival_s, v.job_id)))
