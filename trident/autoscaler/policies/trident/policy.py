"""The ``trident`` policy: a reactive inner loop inside bounds set by a model-based planner.

Each step:

1. **Observe** every operator (:mod:`.tracking`): rates, heap, cold starts, regime changes.
2. **Roll out**: while a plan's phase is settling, wait; a pool that stands still short of its
   target is stuck, and the plan is redone around the obstacle it names (:mod:`.phases`).
3. **Plan** when due and not dwelling: the MILP chooses replicas and devices from the
   estimates (:mod:`.problem`), the rollout gate checks that the change pays for its cold
   start, and the planned replicas become the floor of each pool's bounds; once the
   allocation is settled, the batch-size tuner tries the bottleneck's batch size (:mod:`.tuner`).
4. **Inner loop** (:mod:`.inner`): Ray Data's own reactive rule, within the bounds, the memory
   limit and the free resources, so that from the first second, and whenever the models are
   not confident, the pipeline is never scaled slower than stock Ray Data would scale it.

Pure: no Ray, no clock; seeded. Every decision has a ``kind`` and a reason.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from trident.core.policy import PolicyContext
from trident.core.model.threads import single_threaded
from trident.core.plan.milp import solve_placement
from trident.autoscaler.actuation import RolloutInputs, plan_rollout
from trident.autoscaler.policies.trident import estimates, explore, problem
from trident.autoscaler.policies.trident.check import Mismatch, PredictionCheck
from trident.autoscaler.policies.trident.cores import HostCores
from trident.autoscaler.policies.trident.inner import Growth, below_one_replica, gpu_node_cpus, room_of
from trident.autoscaler.policies.trident.learned import Learned
from trident.autoscaler.policies.trident.phases import Phases
from trident.autoscaler.policies.trident.records import Assumed, Bounds, key_of
from trident.autoscaler.policies.trident.rollouts import RolloutSteps, moves
from trident.autoscaler.policies.trident.settings import TridentSettings
from trident.autoscaler.policies.trident.tracking import Observer
from trident.autoscaler.policies.trident.tuning import BatchTuning
from trident.core.types import Decision, OperatorTarget, Plan, Snapshot


class TridentPolicy(RolloutSteps, BatchTuning):
    """The adaptive policy (see the module docstring)."""

    name = "trident"
    ray_until_named = True
    """Ray Data's own rule drives each pool, at every scheduling step, until a plan names it (no
    memory limit: see :meth:`~trident.autoscaler.shim.shim.ExecutionShim._ray_drives`); the inner loop
    applies the same rule once an interval, after the first snapshots."""

    def __init__(self, *, context: PolicyContext | None = None, settings: TridentSettings | None = None) -> None:
        self.context = context or PolicyContext()
        self.settings = (settings or TridentSettings()).for_scope(self.context.memory_scope)
        self.rng = np.random.default_rng(self.context.seed)
        self.observer = Observer(settings=self.settings, rng=self.rng, seed=self.context.seed,
                                 priors=self.context.priors)
        self.phases = Phases()
        self.bounds: dict[str, Bounds] = {}
        self.ceilings: dict[str, tuple[Bounds, float]] = {}
        """Pools that could not reach a planned size: the most the planner may give them, and since
        when (s); it holds ``ceiling_hold_s``, until the data changes or the room does."""
        self.plan_seq = 0
        self.last_look_s: float | None = None
        self.last_plan_s: float | None = None
        self.replan_now = False
        self.solve_failures = 0  # solves in a row that found no plan (the next looks again, longer)
        self._regimes_seen = 0
        self.changed_ops: list[str] = []  # operators whose regime changed in this step
        self.predicted: tuple[tuple[str, float], ...] = ()
        """(operator, rows out/s) the plan made in this step expects."""
        self.history_runs: tuple[str, ...] = ()  # earlier runs the plan made in this step leaned on
        self.inner_sent: dict[str, int] = {}
        """The last size the inner loop asked of each pool (the shim keeps a target until changed)."""
        self.held_back: dict[str, int] = {}
        """Sizes the inner loop asked for that the room held back (asked again while input waits)."""
        self.looked_per_type = False  # whether the planner's last look planned GPU pools per type
        self.finished_ops: set[str] = set()
        """Operators seen completed (each one's end frees what it held for the operators left)."""
        self.named: set[str] = set()
        """Operators some issued target has named (Ray's own rule no longer drives their pools)."""
        self.pools: set[str] = set()  # the actor pools of the last snapshot
        self.room: tuple[float, float] | None = None  # (CPUs, GPUs) of the last snapshot's cluster
        self.check = PredictionCheck(shortfall=self.settings.mismatch_shortfall,
                                     windows=self.settings.mismatch_windows, window_s=self.settings.rate_window_s)
        """The last plan's prediction, checked against what comes out (:mod:`.check`)."""
        self.learned = Learned()  # what mismatches taught: placement caps and saturated pools (:mod:`.learned`)
        self.last_step_s: float | None = None
        self.growth = Growth()  # when each pool last grew (the inner loop's scale-down waits after)
        self.cores = HostCores()  # how far each pool scales on the machine's cores (:mod:`.cores`)
        self.explored: dict[tuple[str, float], explore.Tried] = {}  # (pool, its regime's start): a type move

    @property
    def tracks(self):
        return self.observer.tracks

    # --- the step ------------------------------------------------------------------------------

    def step(self, snapshot: Snapshot, now: float) -> Decision:
        """One control step; an internal error keeps the current plan and says so (fail open)."""
        try:
            self.changed_ops, self.predicted, self.history_runs = [], (), ()
            decision = self._step(snapshot, now)
            return replace(decision, regime_changes=tuple(self.changed_ops), predicted_rows_per_s=self.predicted,
                           history_runs=self.history_runs)
        except Exception as exc:  # noqa: BLE001 - the pipeline must never fail because the policy did
            self.phases.clear()
            return Decision(time_s=now, reason=f"error: {type(exc).__name__}: {exc}; keeping the current plan",
                            kind="error")

    def _step(self, snap: Snapshot, now: float) -> Decision:
        notes = self._observe(snap)
        self.growth.see(snap)
        self.cores.see(snap)
        interval_s, self.last_step_s = (now - self.last_step_s if self.last_step_s is not None else 0.0), now
        if self.changed_ops:
            self.check.drop()  # the data changed: the plan's premise with it
            self.learned.data_changed(self.changed_ops)
        self.check.observe(snap, now)
        mismatch = self.check.step(snap, now, interval_s=interval_s, rolling_out=self.phases.active)
        if mismatch is not None:
            return self._mismatch(mismatch, snap, now, notes)
        if self.phases.active and self.changed_ops:
            # a rollout planned on the old data is not finished first: on the PDF benchmark OCR
            # slowed 50x while Embed's replicas started, and the plan waited 17 s for them
            notes.append(f"rollout ended: the data of {', '.join(self.changed_ops)} changed; planning again")
            self.phases.clear()
            self.replan_now, self.last_look_s = True, None
        decision = self._rollout(snap, now, notes) if self.phases.active else self._outer(snap, now, notes)
        if decision.plan is not None:
            return decision
        return self._inner(snap, now, notes, decision)

    def _observe(self, snap: Snapshot) -> list[str]:
        notes: list[str] = []
        self.pools = {o.name for o in snap.operators if o.config.kind == "actor" and o.config.replicas is not None}
        starting = self.observer.starting(snap.operators)
        for op in snap.operators:
            if op.config.kind in ("task", "actor"):
                before = self.observer.regime_changes
                notes += self.observer.observe(op, snap.time_s, starting=starting)
                if self.observer.regime_changes != before:
                    self.changed_ops.append(op.name)
        if self.observer.regime_changes != self._regimes_seen:
            self._regimes_seen = self.observer.regime_changes
            self.ceilings.clear()  # the data changed: what blocked a size may not block it now
            self.bounds.clear()  # and until the planner has looked again, Ray's rule holds
        notes += self._finished(snap)
        due = [tr for tr in self.tracks.values() if self.observer.fit_due(tr, snap.time_s)]
        if due:
            with single_threaded():
                for tr in due:
                    notes += self.observer.fit(tr, snap.time_s)
        return notes

    def _finished(self, snap: Snapshot) -> list[str]:
        """An operator that completed leaves its CPUs and GPUs to the operators left, and a budget
        given or lifted (the job layer's, the arbiter's) changes the room: the planner looks again at
        once, past the dwell, instead of holding the pools at sizes planned for another room."""
        done = {o.name for o in snap.operators if o.completed and o.config.kind in ("task", "actor")}
        new = sorted(done - self.finished_ops)
        self.finished_ops |= done
        room, was = (snap.cluster.cpus, snap.cluster.gpus), self.room
        self.room = room
        resized = was is not None and (abs(room[0] - was[0]) >= 1 or abs(room[1] - was[1]) >= 0.25)
        if not (new or resized) or not problem.plannable(snap):
            return []
        self.replan_now, self.last_look_s = True, None
        self.ceilings.clear()  # what blocked a size may have been the finished operator's, or the room
        if resized:
            self.check.drop()  # the plan's prediction was made for another room
        return ([f"{', '.join(new)} finished: planning again for the operators left"] if new else
                [f"the room changed to {room[0]:g} CPUs, {room[1]:g} GPUs: planning again"])

    def _outer(self, snap: Snapshot, now: float, notes: list[str]) -> Decision:
        """Plan when due and not dwelling."""
        s = self.settings
        typed = self._types_newly_measured(snap)
        if typed:
            notes.append("accelerator types measured: the pools can be planned per type now")
        changed = self.observer.changed or self.replan_now or typed
        dwell_s = self._dwell_s()
        if self.last_plan_s is not None and now - self.last_plan_s < dwell_s and not changed:
            return Decision(time_s=now, reason=f"dwell: last plan {now - self.last_plan_s:.0f} s ago "
                                               f"(< {dwell_s:.0f} s)", notes=tuple(notes), kind="dwell")
        if self.last_look_s is not None and now - self.last_look_s < s.plan_interval_s and not changed:
            return Decision(time_s=now, reason="observing", notes=tuple(notes), kind="observe")
        return self._plan(snap, now, notes)

    def _types_newly_measured(self, snap: Snapshot) -> bool:
        """Whether the pools can be planned per accelerator type and the last look could not: what
        each pool is worth on each type is the largest thing a plan can learn, and neither the
        dwell nor the planning interval holds it back (on the two-types scenario Detect's rate on
        its second type was in at 50 s and the per-type plan waited for the dwell until 58.6 s)."""
        if self.looked_per_type or not any(g > 0 for _, g in snap.cluster.gpus_by_type):
            return False
        return problem.typed_view(snap, problem.plannable(snap), self.tracks, self.settings).per_type

    # --- the outer planner ---------------------------------------------------------------------

    def _plan(self, snap: Snapshot, now: float, notes: list[str]) -> Decision:
        ops = problem.plannable(snap)
        if not ops:
            return Decision(time_s=now, reason="nothing to plan: every operator is done", notes=tuple(notes),
                            kind="done")
        planning = problem.build(snap, ops, self.tracks, self.settings, self._limit(snap))
        if planning.problem is None:  # looked again at the next step: the evidence may come any moment
            return Decision(time_s=now, reason=planning.why, notes=tuple(notes), kind="observe")
        prob, capped_by = self._with_ceilings(planning.problem, snap, now)
        self.last_look_s, self.looked_per_type = now, planning.per_type
        notes = [*notes, *planning.held, *capped_by]
        self.observer.changed = self.replan_now = False
        short = below_one_replica(ops, self._heaps(snap), self._limit(snap))
        if short:
            return Decision(time_s=now, reason=short, notes=tuple(notes), kind="keep")
        explored = self._explore(snap, ops, prob, now, notes, only=None if self.settings.explore_types else [])
        if explored is not None:
            return explored
        limited = self._retry_limit(prob)
        result = solve_placement(limited)
        if result.status == "failed":
            # no plan found: the bounds and the inner loop stay; the planner looks again at the next step
            # with a longer limit, ``solver_retries`` times, unless the solver proved that none exists
            if result.infeasible:
                self.solve_failures = 0
            else:
                if self.solve_failures < self.settings.solver_retries:
                    self.replan_now, self.last_look_s = True, None
                self.solve_failures += 1
            return Decision(time_s=now, reason=f"keep: {result.reason} ({limited.time_limit_s:.2g} s)",
                            notes=tuple(notes), kind="keep")
        self.solve_failures = 0
        if not result.changed:  # the allocation is settled: the bottleneck on another type, or its batch size
            self._bound(ops, {o.name: o.config.replicas for o in ops if self._estimated(o, planning)}, "the plan")
            slowest = explore.bottleneck(prob, ops, self.settings.explore_cold_starts)
            explored = self._explore(snap, ops, prob, now, notes, only=slowest)
            return explored or self._tune(snap, ops, prob, planning, now, notes, result.reason)
        targets = problem.targets(ops, result.allocation)
        tuner_before = self._tuner_state()
        targets, trial = self._fold_trial(snap, ops, prob, planning, result.allocation, targets)
        # a current plan that breaks a bound (a cap learned from unplaceable actors) cannot be kept
        cur_t = (result.current_throughput_rows_per_s or 0.0) if result.current_valid else 0.0
        rollout_inputs_cold_starts = {o.name: estimates.cold_start_s(self.tracks[o.name], o, self.settings) for o in ops}
        used = [problem.used(o) for o in ops]
        capped = self.learned.within(snap)
        rollout = plan_rollout(
            {o.name: o.config for o in ops}, targets,
            RolloutInputs(current_throughput_rows_per_s=cur_t, new_throughput_rows_per_s=result.throughput_rows_per_s,
                          remaining_rows=estimates.remaining_rows(snap, self.tracks),
                          utilisation=problem.utilisation(prob, cur_t),
                          cold_start_s=rollout_inputs_cold_starts,
                          free_cpus=capped.cluster.cpus - sum(c for c, _ in used),
                          free_gpus=capped.cluster.gpus - sum(g for _, g in used),
                          free_gpus_by_type=problem.free_gpus_by_type(snap, ops), pay_margin=self.settings.pay_margin,
                          free_gpu_node_cpus=gpu_node_cpus(snap, {}),
                          actors_by_type={o.name: {u.accelerator_type: u.actors for u in o.by_type}
                                          for o in ops if o.by_type},
                          **problem.memory_room(prob, result.allocation)))
        if not rollout.go:  # the allocation stays as it is: the batch-size search may still move
            self._restore_tuner(tuner_before)  # a folded trial that does not run is not counted
            return self._tune(snap, ops, prob, planning, now, [*notes, result.reason], rollout.reason)
        self._bound(ops, {o.name: result.allocation.replicas(o.name) for o in ops if self._estimated(o, planning)},
                    "the plan")
        if trial is not None:
            self.bounds[trial.target.name] = Bounds(lo=trial.target.replicas, hi=trial.target.replicas,
                                                    why="the batch-size trial")
        # what the plan assumed of each operator's rate (rows out per busy replica-second)
        self.observer.assumed = {
            o.name: Assumed(key_of(o.config), planning.rates[o.name].rows_per_s * sel,
                            starting=estimates.at_start(self.tracks[o.name], key_of(o.config),
                                                        planning.rates[o.name].source))
            for o, sel in zip(ops, estimates.selectivities(snap, ops, self.tracks))
            if planning.rates[o.name].rows_per_s < problem.UNKNOWN_RATE}
        rates = problem.describe_rates(planning.rates)
        out = [(o.name, result.throughput_rows_per_s * f * sel)  # what the plan asks each operator to put out
               for o, f, sel in zip(ops, prob.demand_factors(), estimates.selectivities(snap, ops, self.tracks))]
        self.predicted = tuple(p for p in out if math.isfinite(p[1]))
        phase = self.phases.start(rollout.phases(), now, trial=trial is not None)
        steps = "; ".join(st.reason for st in rollout.steps) + (f"; {trial.reason} (folded into the scale-up: "
                                                                  f"its new replicas start at the trial's batch)"
                                                                  if trial is not None else "")
        reason = (f"plan: {result.reason}; {rollout.reason}; from {rates}; steps: {steps} | now: "
                  + "; ".join(st.reason for st in phase))
        caps, held = self._hold_tasks(snap) if moves(rollout.steps) else ((), "")
        decision = self._issue(tuple(st.target for st in phase) + caps, reason + held, now,
                               [*notes, *result.notes], kind="plan")
        self.phases.plan_seq = self.plan_seq
        self.history_runs = tuple(sorted({e.history for e in planning.rates.values() if e.history}))
        self.check.expect(self.plan_seq, dict(self.predicted), now,
                          cold_start_s=max(rollout_inputs_cold_starts.values(), default=0.0))
        return decision

    def _mismatch(self, mismatch: Mismatch, snap: Snapshot, now: float, notes: list[str]) -> Decision:
        """The last plan's prediction did not come true: say why, keep what it taught, plan again."""
        self.learned.learn(mismatch, snap)
        self.phases.clear()
        self.replan_now, self.last_look_s = True, None
        return Decision(time_s=now, reason=mismatch.reason, notes=tuple(notes), kind="mismatch")

    def _explore(self, snap: Snapshot, ops, prob, now: float, notes: list[str], only=None) -> Decision | None:
        """Pin a GPU pool (of ``only``; all: ``None``) to a type it was not measured on, or any pool
        back, before a plan moves it (:mod:`.explore`)."""
        left_s = problem.remaining_s(snap, prob, self.tracks)
        if left_s is not None and left_s < self.settings.explore_min_remaining_s:
            return None
        free = room_of(snap, {}, self._heaps(snap), self._limit(snap), margin=self.settings.memory_margin)
        pins = (explore.reverts(ops, self.tracks, self.explored, windows=self.settings.explore_windows)
                or explore.next_pins(snap, ops if only is None else only, self.tracks, min_busy_s=self.settings.min_busy_s,
                                     windows=self.settings.explore_windows, explored=self.explored, left_s=left_s,
                                     window_s=self.settings.rate_window_s, free_memory_bytes=free.memory_bytes))
        if not pins:
            return None
        explore.record(self.explored, pins, snap, self.tracks, self.settings)
        self.check.drop()  # a move to measure a type is no plan: what comes out meanwhile is no prediction's
        for t, _ in pins:  # the inner loop holds an explored pool where it moved (its type may have room for no more)
            self.bounds[t.name] = Bounds(lo=t.replicas, hi=t.replicas, why="the exploration")
        rollout = plan_rollout({o.name: o.config for o in ops}, tuple(t for t, _ in pins),
                               RolloutInputs(0.0, 0.0, remaining_rows=None, cold_start_s={}, utilisation={}))
        phase = self.phases.start(rollout.phases(), now)
        reason = "; ".join(why for _, why in pins) + " | now: " + "; ".join(st.reason for st in phase)
        caps, held = self._hold_tasks(snap) if moves(rollout.steps) else ((), "")
        decision = self._issue(tuple(st.target for st in phase) + caps, reason + held, now, notes, kind="plan")
        self.phases.plan_seq = self.plan_seq
        return decision

    def _retry_limit(self, prob):
        """``prob`` with its solver time limit ``solver_retry_growth`` times longer per solve in a
        row that found no plan, up to ``solver_retries`` of them."""
        k = min(self.solve_failures, self.settings.solver_retries)
        return prob if k == 0 else replace(prob, time_limit_s=prob.time_limit_s * self.settings.solver_retry_growth ** k)

    def _with_ceilings(self, prob, snap: Snapshot, now: float):
        """Pools that could not reach a planned size get at most what they reached for
        ``ceiling_hold_s`` (what blocked them may be gone by then), within what mismatches taught
        and what the machine's cores feed (:mod:`.cores`: with a note per pool they cap)."""
        self.ceilings = {n: (c, t) for n, (c, t) in self.ceilings.items() if now - t < self.settings.ceiling_hold_s}
        highest = {n: c.hi for n, (c, _) in self.ceilings.items()}
        for name, size in self.learned.saturated.items():
            highest[name] = min(highest.get(name, size), size)
        return self.cores.limit(self.learned.limit(prob, snap), snap, highest)

    @staticmethod
    def _estimated(o, planning) -> bool:
        """An actor pool the planner has a rate for (held pools stay with the inner loop)."""
        return o.config.kind == "actor" and planning.rates[o.name].rows_per_s < problem.UNKNOWN_RATE

    def _bound(self, ops, planned: dict[str, int | None], why: str) -> None:
        """A planned pool is held at its planned size: the inner loop moves only pools the planner
        has no estimate for, until their data changes (the planner looks again at once then)."""
        for o in ops:
            n = planned.get(o.name)
            if n is not None:
                n = max(n, o.config.min_replicas)
                self.bounds[o.name] = Bounds(lo=n, hi=n, why=why)

    # --- helpers -------------------------------------------------------------------------------

    def _pinned_unnamed(self, exclude: set[str]) -> tuple[OperatorTarget, ...]:
        """A target for each pool the planner pinned (bounds ``n..n``) that no target has named yet,
        added to a decision issued anyway: until one names it, Ray's own rule still drives it
        (``ray_until_named``) and may grow it past the plan, which the inner loop then cuts back
        (first try: Ray grew Detect 2 -> 4 after a plan that held it at 2 beside Embed 2 -> 6, and
        the inner loop stopped two working actors). A keep issues nothing: the inner loop's first
        cut names the pool."""
        return tuple(OperatorTarget(name=n, replicas=b.lo) for n, b in sorted(self.bounds.items())
                     if b.lo == b.hi and n in self.pools and n not in self.named and n not in exclude)

    def _issue(self, targets: tuple[OperatorTarget, ...], reason: str, now: float, notes: list[str], *,
               kind: str, plan_made: bool = True) -> Decision:
        moving = {st.operator for phase in [self.phases.current, *self.phases.pending] for st in phase}
        pinned = self._pinned_unnamed({t.name for t in targets} | moving)
        if pinned:
            targets += pinned
            reason += "; held where the plan has them: " + ", ".join(f"{t.name} at {t.replicas}" for t in pinned)
        self.named.update(t.name for t in targets)
        for t in targets if plan_made else ():  # a plan's targets replace what the inner loop asked
            self.inner_sent.pop(t.name, None)
        self.plan_seq += 1
        self.last_plan_s = now if plan_made else self.last_plan_s
        plan = Plan(seq=self.plan_seq, targets=targets, reason=reason, created_at_s=now)
        return Decision(time_s=now, reason=reason, plan=plan, notes=tuple(notes), kind=kind)

    def _dwell_s(self) -> float:
        """Seconds a finished rollout stands: ``min_dwell_s``, or ``dwell_cold_starts`` times the
        slowest cold start observed when that is longer (a change must pay for itself)."""
        cold = max((tr.cold_start_s for tr in self.tracks.values() if tr.cold_start_s is not None), default=0.0)
        return max(self.settings.min_dwell_s, self.settings.dwell_cold_starts * cold)

