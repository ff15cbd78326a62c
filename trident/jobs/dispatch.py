"""One scheduling pass: order, place, choose victims, ask the preemptor.

The simulator (:class:`trident.sim.engine.Simulator`) and the Ray scheduler
(:class:`trident.JobScheduler`) both run their passes through :class:`SchedulingPass`,
so a decision made in simulation is the decision the cluster makes. The pass is pure
apart from what it asks its :class:`PassHost` to do (start a job, evict jobs); it reads
no clock.

A pass hands the policy a :class:`~trident.jobs.base.SchedState` (the ``queue_window``
jobs queued longest, every running job) and walks its order: a job that fits is placed;
one that does not is skipped (the scan stops after ``max_scan_failures`` misses in a
row). Under a preemptive policy a blocked job may evict lower-ranked running jobs on
GPU models it allows: the lowest-ranked (then the latest started) are released on a
what-if copy of the capacity until the job fits (at most ``max_victims``), victims it
does not need are spared (highest-ranked first), and the preemptor is asked about each
remaining victim. An *elastic* job (a pipeline) is a victim under any policy other
than ``never`` preemption: evicting it shrinks it to its minimum and frees only what it
holds above that (:meth:`PassHost.releasable`); under a non-preemptive policy the
queued jobs it did not rank (it chose to wait) may still take back what pipelines were
lent. All must answer ``PREEMPT_NOW``; a ``DO_NOT`` is not asked again
until the running set changes or a job arrives (:meth:`SchedulingPass.note_change`);
a ``DELAY_UNTIL`` asks the host for a pass at the earliest time given. Lending to
elastic jobs is the drivers' own, after a pass that leaves no job queued
(:func:`trident.jobs.pipelines.lend`).
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from typing import Mapping, Protocol, Sequence

import numpy as np

from trident.core.errors import ConfigError
from trident.jobs.base import (Allocation, ArrivalPredictor, JobPolicy, JobView, Placer, Preemptor, SchedState,
                                Verdict)
from trident.jobs.capacity import Cluster

Decision = tuple[float, str, str, str, str]
"""(time s, blocked job, victim, verdict, reason) of one preemption question."""


@dataclass(frozen=True, kw_only=True)
class PassConfig:
    """Limits of one pass (all keyword-only)."""

    queue_window: int = 128
    max_scan_failures: int = 32
    max_preempt_checks: int = 4
    max_victims: int = 8

    def __post_init__(self) -> None:
        for name in ("queue_window", "max_scan_failures", "max_victims"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "an integer >= 1")
        if self.max_preempt_checks < 0:
            raise ConfigError("max_preempt_checks", self.max_preempt_checks, "an integer >= 0")


class PassHost(Protocol):
    """What a pass reads and changes: the driver's (simulator's or cluster's) live state.

    ``queue`` maps the queued jobs' ids to their views, longest queued first;
    ``running`` maps the running jobs' ids to their views (both live: the pass sees its
    own starts and evictions). ``capacity`` is the free capacity, kept up to date by
    ``start`` and ``evict``.
    """

    capacity: Cluster
    queue: Mapping[str, JobView]
    running: Mapping[str, JobView]

    def start(self, job_id: str, alloc: Allocation, now: float) -> None:
        """Start a queued job on ``alloc`` (and take its capacity)."""

    def evict(self, job_ids: Sequence[str], now: float, reason: str) -> None:
        """Stop running jobs (or shrink elastic ones), free what :meth:`releasable` names,
        and queue the stopped jobs again."""

    def releasable(self, view: JobView) -> Allocation | None:
        """What evicting a running job frees: its allocation, or for an elastic job what it
        holds above its minimum (``None`` when nothing)."""

    def is_elastic(self, job_id: str) -> bool:
        """Whether evicting the job shrinks it rather than stopping it."""


@dataclass(frozen=True)
class PassOutcome:
    """What one pass did: jobs started (in order), decisions asked, and the wake-up
    times (absolute s) at which a delayed preemption should be asked again."""

    started: tuple[str, ...]
    decisions: tuple[Decision, ...]
    wake_at_s: tuple[float, ...]


class SchedulingPass:
    """The shared pass. ``policy``, ``placer``, ``preemptor`` (``None``: never preempt),
    ``predictor`` and ``rng`` are the driver's plug-ins and random generator."""

    def __init__(self, *, policy: JobPolicy, placer: Placer, preemptor: Preemptor | None,
                 predictor: ArrivalPredictor, rng: np.random.Generator, config: PassConfig | None = None) -> None:
        self.policy = policy
        self.placer = placer
        self.preemptor = preemptor
        self.predictor = predictor
        self.rng = rng
        self.config = config or PassConfig()
        self.preemptive = bool(getattr(policy, "preemptive", False)) and preemptor is not None
        self.shrinks = preemptor is not None and getattr(preemptor, "name", "") != "never"
        """Elastic jobs may be shrunk for a blocked job (under non-preemptive policies too)."""
        self._epoch = 0
        self._refused: dict[str, int] = {}

    def may_evict(self, host: PassHost) -> bool:
        """Can a pass evict anything now (so that every arrival is worth a pass)?"""
        return self.preemptive or (self.shrinks and any(host.is_elastic(j) for j in host.running))

    def note_change(self) -> None:
        """Tell the pass the running set changed or a job arrived (refusals are asked again)."""
        self._epoch += 1

    def __call__(self, host: PassHost, now: float, total_gpus_by_model: Mapping[str, float]) -> PassOutcome:
        cfg = self.config
        started: list[str] = []
        decisions: list[Decision] = []
        wakes: list[float] = []
        if not host.queue:
            return PassOutcome((), (), ())
        cap = host.capacity
        state = SchedState(now=now, queued=list(islice(host.queue.values(), cfg.queue_window)),
                           running=host.running, total_gpus_by_model=total_gpus_by_model,
                           free_gpus_by_model=cap.free_gpus_by_model(), queue_length=len(host.queue),
                           capacity=cap)
        ordered = self.policy.order(state, self.rng)
        rank = {jid: k for k, jid in enumerate(ordered)} if self.shrinks else {}
        failures = 0
        checks = 0
        # Within a pass free capacity only shrinks (until a preemption), so a job shaped like one
        # that did not fit does not fit either.
        misfits: set[tuple] = set()
        for jid in ordered:
            view = host.queue.get(jid)
            if view is None:
                continue
            j = view.job
            shape = (j.gpu_models, j.gpu_milli, j.cpus, j.memory_mib)
            if shape not in misfits:
                alloc = self.placer.place(j, host.capacity) if host.capacity.may_fit(j) else None
                if alloc is not None:
                    self._start(host, jid, alloc, now, started)
                    failures = 0
                    continue
                misfits.add(shape)
                failures += 1
            if self.shrinks and checks < cfg.max_preempt_checks and self._refused.get(jid) != self._epoch:
                checks += 1
                if self._try_preempt(host, view, rank, state, now, started, decisions, wakes):
                    misfits.clear()
                    failures = 0
                    continue
            if failures >= cfg.max_scan_failures:
                break
        if not self.preemptive and self.may_evict(host):
            # GPUs lent to pipelines go back to waiting jobs the policy did not rank (it waits).
            for jid in [j for j in host.queue if j not in rank]:
                if checks >= cfg.max_preempt_checks:
                    break
                if self._refused.get(jid) != self._epoch and jid in host.queue:
                    checks += 1
                    rank[jid] = len(rank)
                    self._try_preempt(host, host.queue[jid], rank, state, now, started, decisions, wakes)
        return PassOutcome(tuple(started), tuple(decisions), tuple(wakes))

    def _start(self, host: PassHost, jid: str, alloc: Allocation, now: float, started: list[str]) -> None:
        self._epoch += 1
        host.start(jid, alloc, now)
        started.append(jid)

    def victims(self, host: PassHost, blocked: JobView, rank: Mapping[str, int]) -> list[JobView] | None:
        """The running jobs ``blocked`` would evict to fit, or ``None`` when no such set exists."""
        job = blocked.job
        last = len(rank) + len(host.queue)
        mine = rank[blocked.job_id]
        frees = {}
        for v in host.running.values():
            if v.allocation is not None and rank.get(v.job_id, last) > mine and job.allows(v.allocation.gpu_model) and (
                    self.preemptive or host.is_elastic(v.job_id)):
                alloc = host.releasable(v)
                if alloc is not None:
                    frees[v.job_id] = alloc
        if not frees:
            return None
        cands = sorted((v for v in host.running.values() if v.job_id in frees),
                       key=lambda v: (-rank.get(v.job_id, last), -v.as_of_s, v.job_id))
        what_if = host.capacity.copy()
        chosen: list[JobView] = []
        for v in cands:
            what_if.release(v.job, frees[v.job_id])
            chosen.append(v)
            if what_if.may_fit(job) and self.placer.place(job, what_if) is not None:
                break
            if len(chosen) >= self.config.max_victims:
                return None
        else:
            return None
        # Spare victims the blocked job does not need (highest-ranked first).
        for v in sorted(chosen, key=lambda v: rank.get(v.job_id, last)):
            if len(chosen) == 1:
                break
            what_if.allocate(v.job, frees[v.job_id])
            if what_if.may_fit(job) and self.placer.place(job, what_if) is not None:
                chosen.remove(v)
            else:
                what_if.release(v.job, frees[v.job_id])
        return chosen

    def _try_preempt(self, host: PassHost, blocked: JobView, rank: Mapping[str, int], state: SchedState,
                     now: float, started: list[str], decisions: list[Decision], wakes: list[float]) -> bool:
        chosen = self.victims(host, blocked, rank)
        if chosen is None:
            return False
        answers = [self.preemptor.decide(blocked=blocked, victim=v, state=state, predictor=self.predictor)
                   for v in chosen]
        for v, a in zip(chosen, answers):
            decisions.append((now, blocked.job_id, v.job_id, a.verdict.value, a.reason))
        if all(a.verdict is Verdict.PREEMPT_NOW for a in answers):
            self._epoch += 1
            host.evict([v.job_id for v in chosen], now, f"preempted for {blocked.job_id}: {answers[0].reason}")
            alloc = self.placer.place(blocked.job, host.capacity)
            if alloc is None:
                return False
            self._start(host, blocked.job_id, alloc, now, started)
            return True
        delays = [a.until_s for a in answers if a.verdict is Verdict.DELAY_UNTIL]
        if any(a.verdict is Verdict.DO_NOT for a in answers):
            self._refused[blocked.job_id] = self._epoch
        elif delays:
            wakes.append(max(min(delays), now + 1e-3))
        return False
