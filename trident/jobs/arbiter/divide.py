"""How the arbiter divides a cluster's CPUs and GPUs between the runs sharing it. Pure.

Runs are ranked by their priority class (higher first), then by the job layer's policy (a
``JOB_POLICIES`` order over the runs as queued jobs: ``srtf`` puts the run with the least
predicted time left first: its rows left at its least cost per row, with the whole cluster; see
:func:`_left_for_rank` for a run not measured yet, one of unknown size, an idle one and the one
ranked first so far). Each run first gets its floor (the least that keeps it moving; see
:func:`_floor_cap`), in rank order; then, in rank order, as much more as it can use up to its
claim's maximum and its owner's quota. With ``max_slowdown``, a run slowed down that much so far
(time since it arrived over the time its rows done take with the whole cluster) comes first in its
class and is not shrunk. A run alone on the cluster gets no cap at all (``Budget()``: it plans as
if the arbiter did not exist). A training job (a :class:`~trident.JobScheduler`'s running job)
holds what it runs on; the runs share what is left.

Preemption is a shrink, never a kill (a pipeline drains actors; no row is lost), and it is
decided per run: ``eager`` shrinks whoever the order says; ``lazy`` keeps a run's budget when
it will finish within ``payoff_s`` (or twice its re-warm) anyway, since the shrink cannot pay
off; ``never`` keeps every run's budget but for newcomers' floors, newcomers share what is left
(Ray Data's own coordinator works so: first come, first reserved).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from trident.jobs.base import JOB_POLICIES, Job, JobView, SchedState

PREEMPTION = ("lazy", "eager", "never")


@dataclass(frozen=True)
class Budget:
    """What one run may hold: ``cpus``/``gpus`` (``None``: no cap), its ``rank`` (0 first) and why."""

    cpus: float | None = None
    gpus: float | None = None
    rank: int = 0
    reason: str = "alone on the cluster"

    def describe(self) -> str:
        if self.cpus is None and self.gpus is None:
            return "no cap"
        return f"rank {self.rank + 1}: {_num(self.cpus)} CPUs, {_num(self.gpus)} GPUs"


@dataclass(frozen=True)
class Share:
    """One run as the division sees it: its claim, arrival (s), predicted seconds left (``None``:
    unknown), re-warm (s) and the budget it holds now (``None``: none yet)."""

    run_id: str
    claim: object
    arrival_s: float
    remaining_s: float | None
    rewarm_s: float | None
    held: Budget | None
    rows_left: float | None = None
    """Input rows it has left (``None``: not known)."""
    cost: float | None = None
    """Its least cost per row, cluster-seconds (``None``: none yet; see ``Entry.cost``)."""
    idle: bool = False
    """Between executions (the block runs no dataset now): no floor, served last."""
    slowdown: float | None = None
    """Its slowdown so far: seconds since it arrived over what its rows done take with the whole cluster,
    its first rows' wait included (``None``: no rate yet)."""


def rank(shares: list[Share], *, policy: Any, now: float, seed: int = 0, max_slowdown: float | None = None,
         incumbent_credit_s: float = 0.0) -> list[Share]:
    """``shares`` in rank order: priority class first, then the runs slowed down to ``max_slowdown``
    (most slowed first), then ``policy``'s order (runs it leaves out follow by arrival); see
    :func:`_left_for_rank` for the time left the policy sees."""
    views = []
    costs = sorted(s.cost for s in shares if s.cost)
    lefts = sorted(s.remaining_s for s in shares if s.remaining_s is not None)
    prior = (costs[len(costs) // 2] if costs else None, lefts[len(lefts) // 2] if lefts else 0.0)
    for s in shares:
        left = max(_left_for_rank(s, prior, incumbent_credit_s if len(shares) > 1 else 0.0), 1e-6)
        job = Job(job_id=s.run_id, arrival_s=max(s.arrival_s, 0.0), duration_s=left,
                  num_gpus=_job_gpus(s.claim.min_gpus), priority=s.claim.priority, user=s.claim.owner)
        views.append(JobView(job=job, running=False, as_of_s=now, wait_base_s=now - s.arrival_s,
                             attained_base_s=now - s.arrival_s, remaining_base_s=left))
    state = SchedState(now=now, queued=views, running={}, total_gpus_by_model={}, free_gpus_by_model={},
                       queue_length=len(views))
    policy = JOB_POLICIES.create(policy) if isinstance(policy, str) else policy
    ordered = list(policy.order(state, np.random.default_rng(seed)))
    by_id = {s.run_id: s for s in shares}
    ordered = [r for r in ordered if r in by_id]
    ordered += [s.run_id for s in sorted(shares, key=lambda s: (s.arrival_s, s.run_id)) if s.run_id not in ordered]
    position = {r: i for i, r in enumerate(ordered)}
    slowed = {s.run_id: -s.slowdown for s in shares if _slowed(s, max_slowdown)}
    return sorted(shares, key=lambda s: (-s.claim.priority, slowed.get(s.run_id, 0.0), position[s.run_id]))


def _left_for_rank(s: Share, prior: tuple[float | None, float], incumbent_credit_s: float) -> float:
    """The time left the policy orders by. A run not measured yet counts its rows left at the median
    cost of the runs measured (``prior[0]``; none measured: nothing left, so a newcomer is served
    first until its first seconds say how long it is); one whose size is unknown counts the median
    time left of the runs measured (``prior[1]``); an idle run counts as endless. The run ranked
    first so far counts ``incumbent_credit_s`` less: taking its place costs a shrink and a re-warm
    (no flapping between equals)."""
    if s.idle:
        return 1e12
    left = s.remaining_s
    if left is None:
        cost, median_left = prior
        left = (s.rows_left * cost if cost else 0.0) if s.rows_left is not None else median_left
    if s.held is not None and s.held.rank == 0:
        left -= incumbent_credit_s
    return left


def _slowed(s: Share, max_slowdown: float | None) -> bool:
    return max_slowdown is not None and s.slowdown is not None and s.slowdown >= max_slowdown


def _job_gpus(gpus: float) -> float:
    """The GPUs a run counts as for the job layer's policies: its GPU floor, a CPU-only run as one."""
    if gpus <= 0:
        return 1.0
    return gpus if gpus < 1 else float(math.ceil(gpus))


def divide(shares: list[Share], *, cpus: float, gpus: float, policy: Any = "srtf", preemption: str = "lazy",
           quotas: dict[str, tuple[float, float]] | None = None, payoff_s: float = 10.0, now: float = 0.0,
           seed: int = 0, max_slowdown: float | None = None) -> dict[str, Budget]:
    """Every run's budget (see the module's docstring). A training job (``kind="training"``, a
    running job of a :class:`~trident.JobScheduler`) holds what it claims: its scheduler preempts
    it by its own rules, the arbiter does not shrink it; the others share what is left."""
    quotas = {o: list(q) for o, q in (quotas or {}).items()}
    held = [s for s in shares if s.claim.kind == "training"]
    out: dict[str, Budget] = {}
    for s in held:
        quota = quotas.get(s.claim.owner)
        if quota is not None:
            quota[0], quota[1] = max(0.0, quota[0] - s.claim.min_cpus), max(0.0, quota[1] - s.claim.min_gpus)
        cpus, gpus = max(0.0, cpus - s.claim.min_cpus), max(0.0, gpus - s.claim.min_gpus)
    rest = [s for s in shares if s.claim.kind != "training"]
    if len(rest) == 1 and not held and rest[0].claim.owner not in quotas:
        return {rest[0].run_id: Budget()}
    if rest:
        out.update(_elastic(rest, cpus=cpus, gpus=gpus, policy=policy, preemption=preemption, quotas=quotas,
                            payoff_s=payoff_s, now=now, seed=seed, max_slowdown=max_slowdown))
    for n, s in enumerate(held, start=len(rest)):
        out[s.run_id] = Budget(cpus=s.claim.min_cpus, gpus=s.claim.min_gpus, rank=n,
                               reason="a training job: holds what it runs on (its scheduler may preempt it)")
    return out


def _elastic(shares: list[Share], *, cpus: float, gpus: float, policy: Any, preemption: str,
             quotas: dict[str, list[float]], payoff_s: float, now: float, seed: int,
             max_slowdown: float | None) -> dict[str, Budget]:
    """The budgets of the runs the arbiter may shrink, over ``cpus`` and ``gpus``; ``quotas``: what
    each owner may still take (taken from as its runs are served)."""
    ranked = rank(shares, policy=policy, now=now, seed=seed, max_slowdown=max_slowdown, incumbent_credit_s=payoff_s)
    left = [cpus, gpus]
    give: dict[str, list[float]] = {}
    cap = [_floor_cap(shares, i, cpus if i == 0 else gpus) for i in (0, 1)]
    for s in ranked:  # floors first, whole where they fit, in rank order
        give[s.run_id] = [_take(left, quotas, s, i, min(_floor(s, i), cap[i])) for i in (0, 1)]
    kept = [s for s in ranked if _keeps(s, preemption, payoff_s) or _slowed(s, max_slowdown)]
    for s, held_only in [(s, True) for s in kept] + [(s, False) for s in ranked]:
        for i in (0, 1):  # what kept runs hold first, then more for every run in rank order
            want = _want(s, i, cpus if i == 0 else gpus, held_only)
            give[s.run_id][i] += _take(left, quotas, s, i, want - give[s.run_id][i])
    kept_ids = {s.run_id for s in kept}
    out = {}
    for n, s in enumerate(ranked):
        c, g = give[s.run_id]
        out[s.run_id] = Budget(cpus=round(c, 6), gpus=round(g, 6), rank=n, reason=_why(
            s, n, len(ranked), getattr(policy, "name", policy), s.run_id in kept_ids, preemption,
            _slowed(s, max_slowdown)))
    return out


def _floor(s: Share, i: int) -> float:
    return 0.0 if s.idle else (s.claim.min_cpus if i == 0 else s.claim.min_gpus)


def _floor_cap(shares: list[Share], i: int, total: float) -> float:
    """The most of resource ``i`` one floor counts for: an equal share of the cluster or the (lower) median
    floor, whichever is more. A claim far above the others' cannot starve them; equal claims that
    overfill the cluster are served whole, in rank order (the last waits)."""
    floors = sorted(_floor(s, i) for s in shares)
    return max(total / len(shares), floors[(len(floors) - 1) // 2])


def _keeps(s: Share, preemption: str, payoff_s: float) -> bool:
    """Whether ``s`` keeps what it holds before the others are served."""
    if preemption == "eager" or s.held is None:
        return False
    if preemption == "never":
        return True
    bound = max(payoff_s, 2 * (s.rewarm_s or 0.0))
    return s.remaining_s is not None and s.remaining_s <= bound


def _want(s: Share, i: int, total: float, held_only: bool) -> float:
    """What ``s`` may hold of resource ``i`` (0 CPUs, 1 GPUs): its maximum, or no more than it holds."""
    if s.idle:
        return 0.0
    most = s.claim.max_cpus if i == 0 else s.claim.max_gpus
    most = total if most is None else most
    if held_only and s.held is not None:
        held = s.held.cpus if i == 0 else s.held.gpus
        return min(most, total if held is None else held)
    return most


def _take(left: list[float], owner_left: dict[str, list[float]], s: Share, i: int, amount: float) -> float:
    """Up to ``amount`` of resource ``i`` from what is left (and from the owner's quota)."""
    room = left[i]
    quota = owner_left.get(s.claim.owner)
    if quota is not None:
        room = min(room, quota[i])
    got = max(0.0, min(amount, room))
    left[i] -= got
    if quota is not None:
        quota[i] -= got
    return got


def _why(s: Share, n: int, runs: int, policy: str, kept: bool, preemption: str, slowed: bool) -> str:
    left = "time left unknown" if s.remaining_s is None else f"{s.remaining_s:.0f} s left"
    if s.idle:
        return f"rank {n + 1} of {runs}: idle between datasets"
    if slowed:
        return f"rank {n + 1} of {runs}: slowed down {s.slowdown:.1f}x, at the bound (max_slowdown)"
    if kept:
        return (f"keeps its budget: {left}, a shrink cannot pay off ({preemption})" if preemption == "lazy"
                else "keeps its budget (preemption never)")
    return f"rank {n + 1} of {runs} by priority {s.claim.priority}, then {policy} ({left})"


def _num(x: float | None) -> str:
    return "any" if x is None else f"{x:g}"
