"""The batch-size search's steps in the ``trident`` policy, over its state (:mod:`.state`): the
bottleneck's next batch size when the allocation stays, a trial folded into a scale-up, and a
trial started on its own (:mod:`.tuner` chooses the sizes). Pure: no Ray, no clock."""
from __future__ import annotations

import math
from dataclasses import replace

from trident.autoscaler.actuation import PHASE_UP, RolloutStep
from trident.autoscaler.policies.trident import shrink, tuner
from trident.autoscaler.policies.trident.problem import remaining_s, utilisation
from trident.autoscaler.policies.trident.inner import room_of
from trident.autoscaler.policies.trident.records import Bounds
from trident.core.plan.placement import throughput_of
from trident.autoscaler.policies.trident.rollouts import hold_running_tasks
from trident.autoscaler.policies.trident.state import PolicyState
from trident.core.types import Decision, DecisionKind, OperatorTarget, Snapshot


def tune(st: PolicyState, snap: Snapshot, ops, prob, planning, now: float, notes: list[str],
         why: str) -> Decision:
    """The allocation stays (settled, or its change does not pay): the bottleneck's next batch
    size, the best one measured once the search is over, or a keep saying ``why``. (After a
    trial of batch 64 on 6 replicas measured below 32 on 8, the memory its heap took made the
    current plan invalid; the drain the planner offered did not pay, and the pool kept the
    worse batch for the rest of the run instead of going back to the best one measured.)"""
    trial = _starting_trial(st, snap, ops, prob, planning) or _halve(st, snap, ops, prob)
    if trial is None:
        trial = tuner.next_batch_size(snap, ops, prob, planning.rates, st.tracks, st.settings,
                                      st.context.seed)
    if isinstance(trial, tuner.Trial):
        return _trial(st, trial, snap, now, [*notes, why])
    if trial is not None:
        notes = [*notes, trial]
    return Decision(time_s=now, reason=f"keep: {why}", notes=tuple(notes), kind=DecisionKind.KEEP)


def fold_trial(st: PolicyState, snap: Snapshot, ops, prob, planning, alloc,
               targets: tuple[OperatorTarget, ...]):
    """A plan that grows the bottleneck to at least twice its replicas starts mostly new actors
    anyway: they start at the batch size the tuner would try next, as its trial, instead of at
    the old batch and a swap one rolling update later (two cold starts of the whole pool, 45 s
    on the batch-size scenario). Only as many as fit beside the old replicas (GPUs, and memory
    at the optimiser's bound per new replica), and at least half the trial's. Returns the
    targets (the pool's with the trial's batch and replicas) and the trial (``None``: none folded)."""
    grown = {t.name for t in targets if t.accelerator_type is None and t.replicas is not None
             and (now_n := snap.operator(t.name).config.replicas) and t.replicas >= 2 * now_n}
    if not grown or st.context.memory_limit_bytes is None:
        return targets, None
    planned = {o.name: alloc.replicas(o.name) for o in ops if o.config.kind == "actor"}
    view = [replace(o, actors_running=planned[o.name], actors_pending=0,
                    config=replace(o.config, replicas=planned[o.name])) if o.name in planned else o
            for o in snap.operators]
    after = replace(snap, operators=tuple(view))
    before = tuner_state(st)
    trial = tuner.next_batch_size(after, [after.operator(o.name) for o in ops], replace(prob, current=alloc),
                                  planning.rates, st.tracks, st.settings, st.context.seed, free=True)
    trial = trial if isinstance(trial, tuner.Trial) else None
    # the tuner saw the planned pool: what fits is judged beside the actors running now
    n = _beside(st, snap, trial) if trial is not None and trial.target.name in grown else 0
    if trial is None or n < max(math.ceil(trial.target.replicas / 2),
                                2 * (snap.operator(trial.target.name).config.replicas or 0)):
        restore_tuner(st, before)  # not tried: the tuner's count stands as it was
        return targets, None
    beside = _beside_old(trial, n)
    return tuple(beside.target if x.name == beside.target.name else x for x in targets), beside


def _starting_trial(st: PolicyState, snap: Snapshot, ops, prob, planning) -> tuner.Trial | None:
    """A pool still starting (at most half its actors up, the rest pending) starts its pending
    actors at the batch size the tuner would try next once the pool is up, as its trial: the
    rollout replaces pending actors anyway, and a trial on the settled pool would be a swap,
    two cold starts of the whole pool (on the batch-size scenario the inner loop grew Embed
    1 -> 8 at 12 s; the seven took 31 s to start, the swap to batch 16 then 52 s, half the
    pool at a time). Only as many as fit beside the running actors, and at least half the
    trial's; ``None`` when no pool is starting or the tuner would not try a batch."""
    starting = {o.name: o.actors_running for o in ops if o.config.kind == "actor" and o.actors_pending > 0
                and 0 < 2 * o.actors_running <= (o.config.replicas or 0)}
    if not starting or st.context.memory_limit_bytes is None:
        return None
    view = [replace(o, actors_running=o.config.replicas, actors_pending=0) if o.name in starting else o
            for o in snap.operators]
    after = replace(snap, operators=tuple(view))
    before = tuner_state(st)
    trial = tuner.next_batch_size(after, [after.operator(o.name) for o in ops], prob, planning.rates,
                                  st.tracks, st.settings, st.context.seed, free=True)
    trial = trial if isinstance(trial, tuner.Trial) else None
    running = starting.get(trial.target.name) if trial is not None else None  # None: a pool not starting
    n = _beside(st, snap, trial, held={trial.target.name: running}) if running is not None else 0
    if running is None or n < max(math.ceil(trial.target.replicas / 2), 2 * running):
        restore_tuner(st, before)  # not tried: the tuner's count stands as it was
        return None
    beside = _beside_old(trial, n)
    return replace(beside, replicas_from=running, reason=beside.reason + f" (the pool is starting, {running} of "
                                                                         f"its actors up: its pending actors "
                                                                         f"start at the trial's batch)")


def _halve(st: PolicyState, snap: Snapshot, ops, prob) -> tuner.Trial | None:
    """The memory-bound bottleneck's batch halved for more replicas (:mod:`.shrink`)."""
    util = utilisation(prob, throughput_of(prob, prob.current)) if prob.current is not None else {}
    o = next((x for x in ops if util and x.name == max(util, key=util.get)), None)
    room = room_of(snap, {}, st.heaps(snap), None, margin=st.settings.memory_margin)
    return None if o is None else shrink.halve(snap, o, st.tracks, st.settings, st.limit(snap),
                                               remaining_s(snap, prob, st.tracks), room)


def _beside(st: PolicyState, snap: Snapshot, trial: tuner.Trial, held: dict[str, int] | None = None) -> int:
    """New replicas of ``trial`` that fit beside the pool's running ones (``held``: replicas
    each pool holds, default its target): GPUs, and memory at the optimiser's bound per new
    replica (at most the trial's count)."""
    t = trial.target
    c = snap.operator(t.name).config
    room = room_of(snap, held or {}, st.heaps(snap), st.limit(snap),
                   margin=st.settings.memory_margin)
    n = t.replicas
    if c.num_gpus > 0:
        n = min(n, math.floor(room.gpus / c.num_gpus + 1e-9))
    if trial.replica_bytes > 0:
        n = min(n, math.floor(room.memory_bytes / trial.replica_bytes))
    return max(n, 0)


def tuner_state(st: PolicyState) -> dict[str, tuple[int, bool]]:
    """Each track's batch-size trials so far and whether its search is settled."""
    return {n: (tr.bo_tried, tr.bo_settled) for n, tr in st.tracks.items()}


def restore_tuner(st: PolicyState, state: dict[str, tuple[int, bool]]) -> None:
    for name, (tried, settled) in state.items():
        st.tracks[name].bo_tried, st.tracks[name].bo_settled = tried, settled


def _trial(st: PolicyState, trial: tuner.Trial, snap: Snapshot, now: float, notes: list[str]) -> Decision:
    """Roll out a batch-size trial: new replicas first where they fit beside the old ones,
    else a swap (old replicas replaced half the pool at a time, never more at once than the
    smaller of the old pool and the trial's)."""
    t, swap = trial.target, trial.swap
    if swap:
        t = replace(t, swap=True)
    how = "swapped half the pool at a time" if swap else "new first"
    phases = [(RolloutStep(operator=t.name, action="update", replicas_from=trial.replicas_from,
                           replicas_to=t.replicas, target=t, phase=PHASE_UP,
                           reason=f"rolling update of {t.name} to batch_size {t.batch_size} on {t.replicas} "
                                  f"replica(s), {how}"),)]
    st.bounds[t.name] = Bounds(lo=t.replicas, hi=t.replicas, why="the batch-size trial")
    st.check.drop()  # a trial measures a batch size: what comes out meanwhile is no prediction's
    phase = st.phases.start(phases, now, trial=True)
    return st.issue_phase(phase, trial.reason, now, notes, kind=DecisionKind.TUNE,
                          held=hold_running_tasks(snap) if swap else ((), ""))


def _beside_old(trial: tuner.Trial, n: int) -> tuner.Trial:
    """``trial`` on ``n`` new replicas started beside the old ones (new first, no swap)."""
    reason = trial.reason.split("; no room for new replicas")[0].replace(
        f"on {trial.target.replicas} replica(s)", f"on {n} replica(s)")
    return replace(trial, target=replace(trial.target, replicas=n, swap=False), swap=False, reason=reason)
