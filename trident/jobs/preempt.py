"""Preemptors: may a blocked higher-priority job evict a running one, and when?

- ``never``: no preemption.
- ``eager``: preempt at once whenever the policy ranks the blocked job higher
  (SRTF-style; it may evict a job that has not finished setting up, wasting its setup).
- ``lazy`` (Lazer-style): preempt only when it pays off, judged from observable
  quantities only:

  * a victim still setting up is never evicted (that preemption is *futile*: all
    its GPU time so far is lost); the question is asked again when its setup ends;
  * the victim's remaining run time is predicted from its attained service with
    :class:`~trident.jobs.predict.RuntimePrior` (the conditional median; never
    the true duration); if it is predicted to end before a swap's own overhead
    (its setup again plus checkpoint/restore) has elapsed, waiting is better: do
    not preempt;
  * a victim is evicted only once the time it has held its GPUs amortises all its
    swaps (``max_waste_fraction``, 5% by default), so no job thrashes and the GPU
    time lost to swaps stays a small share; until then, delay;
  * the gain is the time the blocked job would otherwise wait (until running jobs,
    as predicted, free enough GPUs of its models; at most until the victim ends);
    the cost is the victim's overhead, weighted by GPUs (victim / blocked) and by
    arrival pressure ``1 + (newcomer setup + checkpoint/restore) / predicted next
    arrival interval``: when jobs arrive faster than a swap's overhead, the GPU
    time it wastes delays them too. Evict when the gain exceeds the cost, else
    delay and ask again (the prediction grows with the victim's age);
  * an elastic victim (a pipeline) is shrunk, not stopped: it goes on at its
    minimum, so its cost also counts the seconds its predicted remaining run
    stretches by on the GPUs the blocked job leaves it (in the real-cluster
    benchmark a shrink of a pipeline from 4 GPUs to 1, counted as its 2 s re-warm
    alone, delayed it by 10 s and the two pipelines queued behind it on its GPU type
    by as much again; counted as a stretch to its minimum, no 1-GPU job's wait ever
    outweighed it).

Every decision carries a reason with its numbers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from trident.core.errors import ConfigError
from trident.jobs.base import (
    MILLI_PER_GPU,
    PREEMPTORS,
    ArrivalPredictor,
    JobView,
    PreemptDecision,
    SchedState,
    Verdict,
)
from trident.jobs.predict import RuntimePrior


@dataclass(frozen=True)
class NeverPreemptor:
    """Never evicts a running job."""

    name: str = "never"
    oracle: bool = False

    def decide(self, *, blocked: JobView, victim: JobView, state: SchedState,
               predictor: ArrivalPredictor) -> PreemptDecision:
        return PreemptDecision(Verdict.DO_NOT, f"preemption disabled; {blocked.job_id} waits for free GPUs")


@dataclass(frozen=True)
class EagerPreemptor:
    """Evicts the victim the moment a higher-ranked job is blocked."""

    name: str = "eager"
    oracle: bool = False

    def decide(self, *, blocked: JobView, victim: JobView, state: SchedState,
               predictor: ArrivalPredictor) -> PreemptDecision:
        phase = "in setup" if victim.in_setup(state.now) else "running"
        return PreemptDecision(Verdict.PREEMPT_NOW,
                               f"eager: {blocked.job_id} outranks {victim.job_id} ({phase})")


@dataclass(frozen=True)
class LazyPreemptor:
    """Lazer-style selective preemption (see the module docstring).

    ``checkpoint_restore_s``: seconds a preempted job loses to checkpoint and restore.
    ``default_setup_s``: setup time assumed for a job whose expected setup is unknown (0).
    ``min_recheck_s`` / ``max_recheck_s``: bounds of a delay before asking again.
    ``prior``: the duration distribution remaining times are predicted from;
    ``remaining_quantile``: which quantile of the victim's remaining time is used
    (the median by default: the mean of a heavy tail is dominated by rare long jobs).
    ``payoff_margin``: how many times the weighted cost the gain must exceed.
    ``max_waste_fraction``: a victim's swaps (each its setup plus checkpoint/restore)
    may waste at most this share of the time it has held its GPUs.
    """

    checkpoint_restore_s: float = 30.0
    default_setup_s: float = 300.0
    min_recheck_s: float = 300.0
    max_recheck_s: float = 3600.0
    prior: RuntimePrior = field(default_factory=RuntimePrior.philly)
    remaining_quantile: float = 0.5
    payoff_margin: float = 1.0
    max_waste_fraction: float = 0.05
    name: str = "lazy"
    oracle: bool = False
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    """Predicted GPU releases per GPU model for the state last asked about (a pure memo)."""

    def __post_init__(self) -> None:
        for param in ("checkpoint_restore_s", "default_setup_s"):
            if getattr(self, param) < 0:
                raise ConfigError(param, getattr(self, param), "a number of seconds >= 0")
        if not 0 < self.max_waste_fraction <= 1:
            raise ConfigError("max_waste_fraction", self.max_waste_fraction, "a number in (0, 1]")
        if not self.payoff_margin > 0:
            raise ConfigError("payoff_margin", self.payoff_margin, "a number > 0")
        if not 0 < self.remaining_quantile < 1:
            raise ConfigError("remaining_quantile", self.remaining_quantile, "a number in (0, 1)")
        if not 0 < self.min_recheck_s <= self.max_recheck_s:
            raise ConfigError("min_recheck_s/max_recheck_s", (self.min_recheck_s, self.max_recheck_s),
                              "0 < min_recheck_s <= max_recheck_s")

    def predicted_remaining_s(self, victim: JobView, now: float) -> float:
        """Predicted wall seconds until ``victim`` frees its GPUs (remaining setup included).

        Its work so far (reference-GPU seconds) is its attained time less its setups:
        the current spell's setup as far as it went, and each earlier spell counted as
        one full setup plus a checkpoint/restore.
        """
        earlier_s = victim.preemptions * (victim.expected_setup_s + self.checkpoint_restore_s)
        setups_s = victim.setup_elapsed_s(now) + earlier_s
        speed = max(victim.speed, 1e-9)
        work_ref_s = max(0.0, victim.attained_s(now) - setups_s) * speed
        return victim.setup_left_s(now) + self.prior.quantile_remaining_s(work_ref_s, self.remaining_quantile) / speed

    def shrink_stretch_s(self, victim: JobView, now: float, gpus_taken: float) -> float:
        """Seconds an elastic ``victim``'s run stretches by when a blocked job takes ``gpus_taken``
        of the GPUs it holds (0 for a rigid job or one at its minimum): its predicted remaining
        time, stretched by its speed on the GPUs it holds over its speed on those it keeps (at
        least its minimum; ``parallel_fraction`` of its work divides over them). A shrink frees
        everything above its minimum, but what the blocked job does not take goes to the next jobs
        in line (whose waits the gain does not count either) or is lent back once none waits."""
        job = victim.job
        if not job.elastic or victim.allocation is None:
            return 0.0
        held = victim.allocation.gpu_milli / MILLI_PER_GPU
        kept = max(job.num_gpus, held - gpus_taken)
        if held <= kept + 1e-9:
            return 0.0
        p, top = job.parallel_fraction, job.max_gpus
        stretch = ((1 - p) + p * top / kept) / ((1 - p) + p * top / held)
        return self.predicted_remaining_s(victim, now) * (stretch - 1.0)

    def _releases(self, state: SchedState, model: str) -> list[tuple[float, float]]:
        """(predicted seconds until release, GPUs) of the running jobs on ``model``, soonest first."""
        if self._memo.get("state") is not state:
            self._memo.clear()
            self._memo["state"] = state
        if model not in self._memo:
            self._memo[model] = sorted((self.predicted_remaining_s(v, state.now), v.job.num_gpus)
                                       for v in state.running.values() if v.gpu_model == model)
        return self._memo[model]

    def natural_wait_s(self, blocked: JobView, state: SchedState) -> float:
        """Predicted seconds until ``blocked`` could start without any preemption: when the
        free GPUs of its models plus those predicted to be released by running jobs first
        reach its request (per model, ignoring fragmentation; ``inf`` if never)."""
        need = blocked.job.num_gpus
        best = float("inf")
        for model, free in state.free_gpus_by_model.items():
            if not blocked.job.allows(model):
                continue
            if free >= need:
                return 0.0
            for t, g in self._releases(state, model):
                free += g
                if free >= need - 1e-9:
                    best = min(best, t)
                    break
        return best

    def decide(self, *, blocked: JobView, victim: JobView, state: SchedState,
               predictor: ArrivalPredictor) -> PreemptDecision:
        now = state.now
        if victim.in_setup(now):
            return PreemptDecision(
                Verdict.DELAY_UNTIL,
                f"lazy: {victim.job_id} is still setting up ({victim.setup_elapsed_s(now):.0f} s done, "
                f"{victim.setup_left_s(now):.0f} s left); evicting it now would waste that setup",
                until_s=victim.setup_ends_s)
        free_in_s = self.predicted_remaining_s(victim, now)
        gain_s = min(free_in_s, self.natural_wait_s(blocked, state))
        victim_setup_s = victim.expected_setup_s if victim.expected_setup_s > 0 else self.default_setup_s
        overhead_s = victim_setup_s + self.checkpoint_restore_s
        blocked_setup_s = blocked.expected_setup_s if blocked.expected_setup_s > 0 else self.default_setup_s
        interval_s = max(predictor.predict_interval_s(now), 1e-9)
        pressure = 1.0 + (blocked_setup_s + self.checkpoint_restore_s) / interval_s
        stretch_s = self.shrink_stretch_s(victim, now, blocked.job.num_gpus)
        cost_s = self.payoff_margin * pressure * (overhead_s * victim.job.num_gpus / blocked.job.num_gpus + stretch_s)
        swap = (f"the shrink costs the victim {overhead_s:.0f} s and stretches its run by ~{stretch_s:.0f} s"
                if victim.job.elastic else f"the swap costs the victim {overhead_s:.0f} s")
        numbers = (f"{blocked.job_id} would otherwise wait ~{gain_s:.0f} s (victim {victim.job_id} frees its "
                   f"GPUs in ~{free_in_s:.0f} s); {swap}; next arrival "
                   f"in ~{interval_s:.0f} s (weight {pressure:.2f}): weighted cost {cost_s:.0f} s")
        if free_in_s <= overhead_s:
            return PreemptDecision(Verdict.DO_NOT, f"lazy: cannot pay off, the victim ends first: {numbers}")
        held_s = victim.attained_s(now)
        needed_s = (victim.preemptions + 1) * overhead_s / self.max_waste_fraction
        if held_s < needed_s:
            wait_s = min(max(needed_s - held_s, self.min_recheck_s), self.max_recheck_s)
            return PreemptDecision(
                Verdict.DELAY_UNTIL,
                f"lazy: {victim.job_id} has held its GPUs {held_s:.0f} s; its {victim.preemptions + 1} "
                f"swap(s) of {overhead_s:.0f} s would exceed {100 * self.max_waste_fraction:g}% of that "
                f"(allowed after {needed_s:.0f} s)", until_s=now + wait_s)
        if gain_s <= cost_s:
            delay_s = min(max(gain_s / 2.0, self.min_recheck_s), self.max_recheck_s)
            return PreemptDecision(Verdict.DELAY_UNTIL, f"lazy: does not pay off yet: {numbers}",
                                   until_s=now + delay_s)
        return PreemptDecision(Verdict.PREEMPT_NOW, f"lazy: pays off: {numbers}")


PREEMPTORS.register("never", NeverPreemptor)
PREEMPTORS.register("eager", EagerPreemptor)
PREEMPTORS.register("lazy", LazyPreemptor)
