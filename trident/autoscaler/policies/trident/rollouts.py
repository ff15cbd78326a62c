"""The rollout and inner-loop steps of the ``trident`` policy, over its state (:mod:`.state`):
apply a plan phase by phase (a pool that stands still short of its target is re-planned around
its obstacle, :mod:`.phases`), and between plans Ray Data's own rule within the planner's bounds
(:mod:`.inner`). Pure: no Ray, no clock."""
from __future__ import annotations

from dataclasses import replace

from trident.autoscaler.policies.trident import estimates
from trident.autoscaler.policies.trident.inner import inner_targets
from trident.autoscaler.policies.trident.phases import Stuck, hold_tasks
from trident.autoscaler.policies.trident.records import Bounds, key_of
from trident.autoscaler.policies.trident.state import PolicyState
from trident.core.types import Decision, DecisionKind, OperatorTarget, Snapshot


def hold_running_tasks(snap: Snapshot) -> tuple[tuple[OperatorTarget, ...], str]:
    """Task operators held at their running tasks while actors start in the room old ones
    leave (Ray gives a freed CPU to whichever request comes first: task operators' new tasks
    kept a type move's actors pending for 20 s on the two-types scenario); the caps and
    the words for the reason."""
    caps = hold_tasks(snap)
    if not caps:
        return (), ""
    return caps, ("; task operators held at their running tasks (" + ", ".join(
        f"{c.name} <= {c.replicas}" for c in caps) + ") so that the CPUs old replicas leave wait for the new ones")


def outrun(st: PolicyState, snap: Snapshot) -> list[str]:
    """Operators the standing plan held for lack of evidence (no rate when it was made: the plan
    took them to keep up) whose first measured rate cannot carry what the plan puts through them:
    at their replicas they make less than its prediction over ``shift_ratio``. Each is named once
    a plan (:attr:`PolicyState.outrun`). A task stage whose first input came after the plan, at the
    concurrency the user gave it, bounded a pipeline for the 20 s a pool's new actors took to
    start, and the plan waited for them."""
    if st.check.done:
        return []
    found = []
    for o in snap.operators:
        want, n = st.check.predicted.get(o.name), o.config.replicas
        if want is None or n is None or o.completed or o.name in st.observer.assumed or o.name in st.outrun \
                or o.name not in st.tracks or o.config.kind != "task":
            continue
        est = estimates.own_rate(st.tracks[o.name], o, key_of(o.config), st.settings)
        if est.source in estimates.MEASURED_SOURCES and est.rows_per_s * n * st.settings.shift_ratio < want:
            st.outrun.add(o.name)
            found.append(f"{o.name} puts out {est.rows_per_s:.3g} rows/s per replica ({est.source}): "
                         f"{est.rows_per_s * n:.3g} at {n}, where the plan, made before it was measured, "
                         f"puts {want:.3g} through it")
    return found


def rollout(st: PolicyState, snap: Snapshot, now: float, notes: list[str]) -> Decision:
    """The rollout under way: wait while its phase settles, re-plan around a stuck pool, or issue
    the next phase."""
    s = st.settings
    waiting = st.phases.settling(snap)
    stuck = st.phases.stuck(snap, now, patience_steps=s.stuck_intervals,
                            cold_start_s={n: estimates.cold_start_s(tr, snap.operator(n), s)
                                          for n, tr in st.tracks.items() if n in st.phases.operators()},
                            heap_bytes=st.heaps(snap), memory_limit_bytes=st.limit(snap), margin=s.memory_margin)
    if stuck is not None and not stuck.drain:
        return replan(st, stuck, snap, now, notes)
    timed_out = now - st.phases.started_s >= s.rollout_timeout_s
    if waiting and not timed_out and stuck is None:
        return Decision(time_s=now, reason=f"rollout: waiting for {', '.join(x.operator for x in waiting)} "
                                           f"to reach its target", notes=tuple(notes), kind=DecisionKind.ROLLOUT)
    trial = st.phases.trial
    phase = st.phases.advance(now)
    st.last_plan_s = now
    if not phase:
        if trial:  # the trial's point is its measurement: the planner looks as soon as it is in,
            # not a dwell later (batch-size scenario: 8 x batch 32 waited 3 s on it, and 15 s
            # where nothing else ended the dwell)
            st.look_again()
            st.phases.trial = False
        return Decision(time_s=now, reason="rollout complete" + (" (timed out waiting)" if timed_out else ""),
                        notes=tuple(notes), kind=DecisionKind.ROLLOUT)
    after = f" ({stuck.obstacle})" if stuck is not None else " after a timeout" if timed_out else ""
    return st.issue_phase(phase, f"rollout: next phase{after}", now, notes, kind=DecisionKind.ROLLOUT)


def replan(st: PolicyState, stuck: Stuck, snap: Snapshot, now: float, notes: list[str]) -> Decision:
    """A pool stands short of its target: end the rollout, name the obstacle, plan again
    around it (task caps that free CPUs, or at most what the pool reached)."""
    st.phases.clear()
    st.look_again()
    reason = f"replan: {stuck.operator} stays at {stuck.reached} of {stuck.wanted} replicas: {stuck.obstacle}"
    if stuck.task_caps:
        caps = ", ".join(f"{t.name} <= {t.replicas}" for t in stuck.task_caps)
        return st.issue(stuck.task_caps, f"{reason}; capping task concurrency to make room: {caps}",
                        now, notes, kind=DecisionKind.REPLAN)
    if not stuck.short:  # nothing is short: cancelling the pending actors would only start them again
        # later (on the PDF benchmark OCR's 4 new actors were cancelled at 1 of 5, three times, 100 s)
        st.ceilings[stuck.operator] = (Bounds(lo=0, hi=stuck.wanted, why=stuck.obstacle), now)
        return Decision(time_s=now, reason=f"{reason}; its target stays (nothing is short: the actors start "
                                           f"when Ray gets to them) and the plan is redone", notes=tuple(notes),
                        kind=DecisionKind.REPLAN)
    # held at what it reached, never below what it had before the step (actors of its own
    # still starting are not the obstacle; holding a bottleneck below them cost 37 s at one
    # replica on the regime-shift scenario) unless the step shrank it: a batch-size trial
    # on fewer replicas (held at the old 8 at batch 64, the pool broke the memory limit)
    hold = max(stuck.reached, min(stuck.before, stuck.wanted), 1)
    st.ceilings[stuck.operator] = (Bounds(lo=0, hi=hold, why=stuck.obstacle), now)
    b = st.bounds.get(stuck.operator)
    if b is not None and b.lo > hold:
        st.bounds[stuck.operator] = Bounds(lo=hold, hi=b.hi, why=stuck.obstacle)
    target = OperatorTarget(name=stuck.operator, replicas=hold)
    return st.issue((target,), f"{reason}; holding it at {target.replicas} until the plan is redone",
                    now, notes, kind=DecisionKind.REPLAN)


def inner(st: PolicyState, snap: Snapshot, now: float, notes: list[str], decision: Decision) -> Decision:
    """The inner loop's decision, else ``decision`` with a note for each pool the room newly
    holds below what Ray's rule asks (once per pool and size asked)."""
    targets, reasons, held = inner_targets(
        st.learned.within(snap), st.bounds, st.heaps(snap), memory_limit_bytes=st.limit(snap),
        settings=st.settings, skip=st.phases.operators(), wanted=st.held_back, since_grew=st.growth.since(snap),
        rolling_out=st.phases.active)
    holds = {r.split(" held at ")[0]: r for r in reasons[len(targets):]}
    new_holds = [f"inner loop: {r}" for n, r in holds.items() if st.held_back.get(n) != held.get(n)]
    st.held_back = held
    fresh = [(t, r) for t, r in zip(targets, reasons) if st.inner_sent.get(t.name) != t.replicas]
    if not fresh:
        return replace(decision, notes=(*decision.notes, *new_holds)) if new_holds else decision
    targets, reasons = [t for t, _ in fresh], [r for _, r in fresh]
    st.inner_sent.update({t.name: t.replicas for t in targets})
    return st.issue(tuple(targets), "inner: " + "; ".join(reasons), now, notes, kind=DecisionKind.INNER,
                    plan_made=False)


def moves(steps) -> bool:
    """Whether a rollout starts actors in the room old ones leave on a node: a move to another
    accelerator type, or a swap."""
    return any(st.target.accelerator_type is not None or st.target.swap for st in steps)
