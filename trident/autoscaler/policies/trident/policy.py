"""The ``trident`` policy: a reactive inner loop inside bounds set by a model-based planner.

Each step (:func:`step`, over the policy's state, :mod:`.state`):

1. **Observe** every operator (:mod:`.tracking`): rates, heap, cold starts, regime changes.
2. **Check** the last plan's prediction against what comes out (:mod:`.check`): a shortfall or
   a late target is a ``mismatch`` that names its cause, and the planner looks again.
3. **Roll out**: while a plan's phase is settling, wait; a pool that stands still short of its
   target is stuck, and the plan is redone around the obstacle it names (:mod:`.rollouts`).
4. **Plan** when due and not dwelling (:mod:`.planner`): the MILP chooses replicas and devices
   from the estimates (:mod:`.problem`), the rollout gate checks that the change pays for its
   cold start, and the planned replicas become the floor of each pool's bounds; once the
   allocation is settled, the bottleneck is measured on another type (:mod:`.explore`) or its
   batch size tried (:mod:`.tuning`).
5. **Inner loop** (:mod:`.inner`): Ray Data's own reactive rule, within the bounds, the memory
   limit and the free resources, so that from the first second, and whenever the models are
   not confident, the pipeline is never scaled slower than stock Ray Data would scale it.

Pure: no Ray, no clock; seeded. Every decision has a ``kind`` and a reason.
"""
from __future__ import annotations

from dataclasses import replace

from trident.autoscaler.policies.trident import explore, planner, problem
from trident.autoscaler.policies.trident.rollouts import inner, outrun, rollout
from trident.autoscaler.policies.trident.settings import TridentSettings
from trident.autoscaler.policies.trident.state import PolicyState
from trident.core.model.threads import single_threaded
from trident.core.policy import PolicyContext
from trident.core.types import Decision, DecisionKind, Snapshot


class TridentPolicy:
    """The adaptive policy (see the module docstring); what it knows is :attr:`state`."""

    name = "trident"
    ray_until_named = True
    """Ray Data's own rule drives each pool, at every scheduling step, until a plan names it (no
    memory limit: see :meth:`~trident.autoscaler.shim.shim.ExecutionShim._ray_drives`); the inner loop
    applies the same rule once an interval, after the first snapshots."""

    def __init__(self, *, context: PolicyContext | None = None, settings: TridentSettings | None = None) -> None:
        self.state = PolicyState.new(context or PolicyContext(), settings or TridentSettings())

    @property
    def context(self) -> PolicyContext:
        return self.state.context

    @property
    def settings(self) -> TridentSettings:
        return self.state.settings

    @property
    def tracks(self):
        return self.state.tracks

    def step(self, snapshot: Snapshot, now: float) -> Decision:
        """One control step; an internal error keeps the current plan and says so (fail open)."""
        st = self.state
        try:
            st.changed_ops, st.set_aside, st.predicted, st.history_runs = [], [], (), ()
            decision = step(st, snapshot, now)
            return replace(decision, regime_changes=tuple(st.changed_ops), predicted_rows_per_s=st.predicted,
                           history_runs=st.history_runs)
        except Exception as exc:  # noqa: BLE001 - the pipeline must never fail because the policy did
            st.phases.clear()
            return Decision(time_s=now, reason=f"error: {type(exc).__name__}: {exc}; keeping the current plan",
                            kind=DecisionKind.ERROR)


def step(st: PolicyState, snap: Snapshot, now: float) -> Decision:
    """Observe, check the last plan's prediction, roll out or plan, then the inner loop."""
    notes = observe(st, snap)
    st.growth.see(snap)
    st.cores.see(snap)
    interval_s, st.last_step_s = (now - st.last_step_s if st.last_step_s is not None else 0.0), now
    if st.changed_ops:
        st.check.drop()  # the data changed: the plan's premise with it
        st.learned.data_changed(st.changed_ops)
    st.check.observe(snap, now)
    mismatch = st.check.step(snap, now, interval_s=interval_s, rolling_out=st.phases.active)
    if mismatch is not None:
        return planner.mismatch(st, mismatch, snap, now, notes)
    if st.phases.active and st.changed_ops:
        # a rollout planned on the old data is not finished first: on the PDF benchmark OCR
        # slowed 50x while Embed's replicas started, and the plan waited 17 s for them
        notes.append(f"rollout ended: the data of {', '.join(st.changed_ops)} changed; planning again")
        st.phases.clear()
        st.look_again()
    elif st.phases.active and st.set_aside:
        # a plan made on a history the run's own tasks contradict is not finished first: on the
        # first try's pipeline with its data changed, 6 Embed actors planned on Detect's
        # remembered rate kept starting for 4 s after Detect's first tasks ran 4x slower
        notes.append(f"rollout ended: the history of {', '.join(st.set_aside)} was set aside; planning again")
        st.phases.clear()
        st.look_again()
    short = outrun(st, snap)
    if short:
        # an operator the plan could not size proves too slow for it: its rollout is not finished first
        notes.append(("rollout ended: " if st.phases.active else "") + "; ".join(short) + "; planning again")
        st.phases.clear()
        st.look_again()
    decision = rollout(st, snap, now, notes) if st.phases.active else outer(st, snap, now, notes)
    if decision.plan is not None:
        return decision
    return inner(st, snap, now, notes, decision)


def observe(st: PolicyState, snap: Snapshot) -> list[str]:
    """Every operator's windows, rates, heap and regimes (:mod:`.tracking`); the notes to say."""
    notes: list[str] = []
    st.pools = {o.name for o in snap.operators if o.config.kind == "actor" and o.config.replicas is not None}
    starting = st.observer.starting(snap.operators)
    for op in snap.operators:
        if op.config.kind in ("task", "actor"):
            before, believed = st.observer.regime_changes, _believes_history(st, op.name)
            notes += st.observer.observe(op, snap.time_s, starting=starting)
            if st.observer.regime_changes != before:
                st.changed_ops.append(op.name)
            elif believed and not _believes_history(st, op.name):
                st.set_aside.append(op.name)
    if st.observer.regime_changes != st.regimes_seen:
        st.regimes_seen = st.observer.regime_changes
        st.ceilings.clear()  # the data changed: what blocked a size may not block it now
        st.bounds.clear()  # and until the planner has looked again, Ray's rule holds
    notes += _finished(st, snap)
    due = [tr for tr in st.tracks.values() if st.observer.fit_due(tr, snap.time_s)]
    if due:
        with single_threaded():
            for tr in due:
                notes += st.observer.fit(tr, snap.time_s)
    return notes


def _believes_history(st: PolicyState, name: str) -> bool:
    """Whether the run believes a regime of what earlier runs taught of operator ``name`` (what a
    plan made on the history leaned on)."""
    tr = st.tracks.get(name)
    return tr is not None and tr.belief is not None and tr.belief.live


def _finished(st: PolicyState, snap: Snapshot) -> list[str]:
    """An operator that completed leaves its CPUs and GPUs to the operators left, and a budget
    given or lifted (the job layer's, the arbiter's) changes the room: the planner looks again at
    once, past the dwell, instead of holding the pools at sizes planned for another room."""
    done = {o.name for o in snap.operators if o.completed and o.config.kind in ("task", "actor")}
    new = sorted(done - st.finished_ops)
    st.finished_ops |= done
    room, was = (snap.cluster.cpus, snap.cluster.gpus), st.room
    st.room = room
    resized = was is not None and (abs(room[0] - was[0]) >= 1 or abs(room[1] - was[1]) >= 0.25)
    if not (new or resized) or not problem.plannable(snap):
        return []
    st.look_again()
    st.ceilings.clear()  # what blocked a size may have been the finished operator's, or the room
    configs = [snap.operator(n).config for n in new]
    st.learned.room_freed(cpus=resized or any(c.num_cpus > 0 for c in configs),
                          gpus=resized or any(c.num_gpus > 0 for c in configs))
    if resized:
        st.check.drop()  # the plan's prediction was made for another room
    return ([f"{', '.join(new)} finished: planning again for the operators left"] if new else
            [f"the room changed to {room[0]:g} CPUs, {room[1]:g} GPUs: planning again"])


def outer(st: PolicyState, snap: Snapshot, now: float, notes: list[str]) -> Decision:
    """Plan when due and not dwelling."""
    typed = _types_newly_measured(st, snap)
    if typed:
        notes.append("accelerator types measured: the pools can be planned per type now")
    back = explore.back_due(problem.plannable(snap), st.tracks, st.explored, windows=st.settings.explore_windows)
    changed = st.observer.changed or st.replan_now or typed or back
    dwell_s = st.dwell_s()
    if st.last_plan_s is not None and now - st.last_plan_s < dwell_s and not changed:
        return Decision(time_s=now, reason=f"dwell: last plan {now - st.last_plan_s:.0f} s ago "
                                           f"(< {dwell_s:.0f} s)", notes=tuple(notes), kind=DecisionKind.DWELL)
    if st.last_look_s is not None and now - st.last_look_s < st.settings.plan_interval_s and not changed:
        return Decision(time_s=now, reason="observing", notes=tuple(notes), kind=DecisionKind.OBSERVE)
    return planner.plan(st, snap, now, notes)


def _types_newly_measured(st: PolicyState, snap: Snapshot) -> bool:
    """Whether the pools can be planned per accelerator type and the last look could not: what
    each pool is worth on each type is the largest thing a plan can learn, and neither the
    dwell nor the planning interval holds it back (on the two-types scenario Detect's rate on
    its second type was in at 50 s and the per-type plan waited for the dwell until 58.6 s)."""
    if st.looked_per_type or not any(g > 0 for _, g in snap.cluster.gpus_by_type):
        return False
    return problem.typed_view(snap, problem.plannable(snap), st.tracks, st.settings).per_type
