"""The ``trident`` policy's planner: the MILP chooses replicas and devices from the estimates
(:mod:`.problem`), the rollout gate checks that the change pays for its cold start, and the planned
replicas become the floor of each pool's bounds; a settled allocation moves its bottleneck to
another accelerator type to measure it there (:mod:`.explore`) or tries its batch size
(:mod:`.tuning`). A plan states what it expects, and :mod:`.check` compares. Pure: no Ray, no clock."""
from __future__ import annotations

import math
from dataclasses import replace

from trident.autoscaler.actuation import RolloutInputs, plan_rollout
from trident.autoscaler.policies.trident import estimates, explore, problem, tuning
from trident.autoscaler.policies.trident.check import Mismatch
from trident.autoscaler.policies.trident.inner import below_one_replica, gpu_node_cpus, room_of
from trident.autoscaler.policies.trident.records import Assumed, Bounds, key_of
from trident.autoscaler.policies.trident.rollouts import hold_running_tasks, moves
from trident.autoscaler.policies.trident.state import PolicyState
from trident.core.plan.milp import solve_placement
from trident.core.types import Decision, DecisionKind, Snapshot


def plan(st: PolicyState, snap: Snapshot, now: float, notes: list[str]) -> Decision:
    """Look: solve the placement problem of ``snap``, and roll out what pays (or explore, or tune)."""
    ops = problem.plannable(snap)
    if not ops:
        return Decision(time_s=now, reason="nothing to plan: every operator is done", notes=tuple(notes),
                        kind=DecisionKind.DONE)
    planning = problem.build(snap, ops, st.tracks, st.settings, st.limit(snap))
    if planning.problem is None:  # looked again at the next step: the evidence may come any moment
        return Decision(time_s=now, reason=planning.why, notes=tuple(notes), kind=DecisionKind.OBSERVE)
    prob, capped_by = _with_ceilings(st, planning.problem, snap, now)
    st.last_look_s, st.looked_per_type = now, planning.per_type
    notes = [*notes, *planning.held, *capped_by]
    st.observer.changed = st.replan_now = False
    short = below_one_replica(ops, st.heaps(snap), st.limit(snap))
    if short:
        return Decision(time_s=now, reason=short, notes=tuple(notes), kind=DecisionKind.KEEP)
    explored = explore_types(st, snap, ops, prob, now, notes, only=None if st.settings.explore_types else [])
    if explored is not None:
        return explored
    limited = _retry_limit(st, prob)
    result = solve_placement(limited)
    if result.status == "failed":
        return _no_plan(st, result, limited.time_limit_s, now, notes)
    st.solve_failures = 0
    near = _near_gain(st, limited, result)
    if not result.changed and near is None:
        return _settled(st, snap, ops, prob, planning, now, notes, result.reason, _current(result))
    if near is not None:
        notes = [*notes, f"{result.reason} for {st.near_gains} looks in a row: taken if it pays"]
        result = near
    return _roll_out(st, snap, ops, prob, planning, result, now, notes, settled_if_not=near is not None)


def _settled(st: PolicyState, snap: Snapshot, ops, prob, planning, now: float, notes: list[str],
             reason: str, current_rows_per_s: float | None) -> Decision:
    """The allocation is settled: the bottleneck on another type (:mod:`.explore`), or its batch size."""
    _bound(st, ops, {o.name: o.config.replicas for o in ops if _estimated(o, planning)}, "the plan")
    slowest = explore.bottleneck(prob, ops, st.settings.explore_cold_starts)
    explored = explore_types(st, snap, ops, prob, now, notes, only=slowest)
    return explored or _kept(st, snap, ops, prob, current_rows_per_s, now,
                             tuning.tune(st, snap, ops, prob, planning, now, notes, reason))


def _current(result) -> float | None:
    """What the solver reckons the allocation in place puts out (rows/s; ``None``: it breaks a bound)."""
    return result.current_throughput_rows_per_s if result.current_valid else None


def _kept(st: PolicyState, snap: Snapshot, ops, prob, current_rows_per_s: float | None, now: float,
          decision: Decision) -> Decision:
    """A keep is a prediction too: the plan in place is to put out what the solver reckons of it,
    and :mod:`.check` compares (unless a prediction stands, or this one just failed). Without it a
    planner that kept a plan believing 196 rows/s while 110 came out never learned otherwise."""
    if decision.kind != DecisionKind.KEEP or not current_rows_per_s:
        return decision
    st.predicted = _outputs(ops, prob, current_rows_per_s, estimates.selectivities(snap, ops, st.tracks))
    st.check.keep(st.plan_seq, dict(st.predicted), now, cold_start_s=max(_cold_starts(st, ops).values(), default=0.0),
                  finished=_finished(snap))
    return decision


def _outputs(ops, prob, rows_per_s: float, selectivities) -> tuple[tuple[str, float], ...]:
    """What each operator is to put out (rows/s) while the pipeline makes ``rows_per_s``."""
    out = ((o.name, rows_per_s * f * sel) for o, f, sel in zip(ops, prob.demand_factors(), selectivities))
    return tuple(p for p in out if math.isfinite(p[1]))


def _cold_starts(st: PolicyState, ops) -> dict[str, float]:
    return {o.name: estimates.cold_start_s(st.tracks[o.name], o, st.settings) for o in ops}


def _finished(snap: Snapshot) -> frozenset[str]:
    """The operators done at ``snap`` (a prediction made now is made for the others)."""
    return frozenset(o.name for o in snap.operators if o.completed)


def _near_gain(st: PolicyState, prob, result):
    """The best plan, once ``near_gain_looks`` looks in a row have found one at least half the
    hysteresis better than the current plan but under it (a gain that holds look after look is
    no noise; the rollout gate still decides whether it pays); else ``None``."""
    best = result.better
    if best is None or st.settings.near_gain_looks <= 0:
        st.near_gains = 0
        return None
    cur_t = best.current_throughput_rows_per_s or 0.0
    gains = cur_t > 0 and best.throughput_rows_per_s >= cur_t * (1 + prob.hysteresis / 2)
    st.near_gains = st.near_gains + 1 if gains else 0
    return best if gains and st.near_gains >= st.settings.near_gain_looks else None


def _no_plan(st: PolicyState, result, time_limit_s: float, now: float, notes: list[str]) -> Decision:
    """No plan found: the bounds and the inner loop stay; the planner looks again at the next step
    with a longer limit, ``solver_retries`` times, unless the solver proved that none exists."""
    if result.infeasible:
        st.solve_failures = 0
    else:
        if st.solve_failures < st.settings.solver_retries:
            st.look_again()
        st.solve_failures += 1
    return Decision(time_s=now, reason=f"keep: {result.reason} ({time_limit_s:.2g} s)", notes=tuple(notes),
                    kind=DecisionKind.KEEP)


def _roll_out(st: PolicyState, snap: Snapshot, ops, prob, planning, result, now: float,
              notes: list[str], *, settled_if_not: bool = False) -> Decision:
    """The solver's new allocation, rolled out where it pays for its cold starts; the plan's
    prediction is recorded for :mod:`.check`. ``settled_if_not``: the allocation in place counts
    as settled when the new one does not pay (:func:`_settled`)."""
    targets = problem.targets(ops, result.allocation)
    tuner_before = tuning.tuner_state(st)
    targets, trial = tuning.fold_trial(st, snap, ops, prob, planning, result.allocation, targets)
    # a current plan that breaks a bound (a cap learned from unplaceable actors) cannot be kept
    cur_t = (result.current_throughput_rows_per_s or 0.0) if result.current_valid else 0.0
    cold_starts = _cold_starts(st, ops)
    used = [problem.used(o) for o in ops]
    capped = st.learned.within(snap)
    rollout = plan_rollout(
        {o.name: o.config for o in ops}, targets,
        RolloutInputs(current_throughput_rows_per_s=cur_t, new_throughput_rows_per_s=result.throughput_rows_per_s,
                      remaining_rows=estimates.remaining_rows(snap, st.tracks),
                      utilisation=problem.utilisation(prob, cur_t),
                      cold_start_s=cold_starts,
                      free_cpus=capped.cluster.cpus - sum(c for c, _ in used),
                      free_gpus=capped.cluster.gpus - sum(g for _, g in used),
                      free_gpus_by_type=problem.free_gpus_by_type(snap, ops), pay_margin=st.settings.pay_margin,
                      free_gpu_node_cpus=gpu_node_cpus(snap, {}),
                      actors_by_type={o.name: {u.accelerator_type: u.actors for u in o.by_type}
                                      for o in ops if o.by_type},
                      **problem.memory_room(prob, result.allocation)))
    if not rollout.go:  # the allocation stays as it is: the batch-size search may still move
        tuning.restore_tuner(st, tuner_before)  # a folded trial that does not run is not counted
        if settled_if_not:
            return _settled(st, snap, ops, prob, planning, now, [*notes, rollout.reason], result.reason, cur_t)
        return _kept(st, snap, ops, prob, cur_t, now,
                     tuning.tune(st, snap, ops, prob, planning, now, [*notes, result.reason], rollout.reason))
    _bound(st, ops, {o.name: result.allocation.replicas(o.name) for o in ops if _estimated(o, planning)}, "the plan")
    if trial is not None:
        st.bounds[trial.target.name] = Bounds(lo=trial.target.replicas, hi=trial.target.replicas,
                                              why="the batch-size trial")
    # what the plan assumed of each operator's rate (rows out per busy replica-second)
    selectivities = estimates.selectivities(snap, ops, st.tracks)
    st.outrun.clear()
    st.observer.assumed = {
        o.name: Assumed(key_of(o.config), planning.rates[o.name].rows_per_s * sel,
                        starting=estimates.at_start(st.tracks[o.name], key_of(o.config), planning.rates[o.name].source))
        for o, sel in zip(ops, selectivities) if planning.rates[o.name].rows_per_s < problem.UNKNOWN_RATE}
    rates = problem.describe_rates(planning.rates)
    st.predicted = _outputs(ops, prob, result.throughput_rows_per_s, selectivities)
    phase = st.phases.start(rollout.phases(), now, trial=trial is not None)
    steps = "; ".join(s.reason for s in rollout.steps) + (f"; {trial.reason} (folded into the scale-up: "
                                                          f"its new replicas start at the trial's batch)"
                                                          if trial is not None else "")
    decision = st.issue_phase(phase, f"plan: {result.reason}; {rollout.reason}; from {rates}; steps: {steps}", now,
                              [*notes, *result.notes], kind=DecisionKind.PLAN,
                              held=hold_running_tasks(snap) if moves(rollout.steps) else ((), ""))
    st.history_runs = tuple(sorted({e.history for e in planning.rates.values() if e.history}))
    st.check.expect(st.plan_seq, dict(st.predicted), now, cold_start_s=max(cold_starts.values(), default=0.0),
                    finished=_finished(snap))
    return decision


def mismatch(st: PolicyState, found: Mismatch, snap: Snapshot, now: float, notes: list[str]) -> Decision:
    """The last plan's prediction did not come true: say why, keep what it taught, plan again."""
    st.learned.learn(found, snap)
    st.phases.clear()
    st.look_again()
    return Decision(time_s=now, reason=found.reason, notes=tuple(notes), kind=DecisionKind.MISMATCH)


def explore_types(st: PolicyState, snap: Snapshot, ops, prob, now: float, notes: list[str],
                  only=None) -> Decision | None:
    """Pin a GPU pool (of ``only``; all: ``None``) to a type it was not measured on, or any pool
    back, before a plan moves it (:mod:`.explore`)."""
    s = st.settings
    left_s = problem.remaining_s(snap, prob, st.tracks)
    if left_s is not None and left_s < s.explore_min_remaining_s:
        explore.reverts(ops, st.tracks, st.explored, windows=s.explore_windows)  # settled where they are
        return None
    free = room_of(snap, {}, st.heaps(snap), st.limit(snap), margin=s.memory_margin)
    pins = (explore.reverts(ops, st.tracks, st.explored, windows=s.explore_windows)
            or explore.next_pins(snap, ops if only is None else only, st.tracks, min_busy_s=s.min_busy_s,
                                 windows=s.explore_windows, explored=st.explored, left_s=left_s,
                                 window_s=s.rate_window_s, free_memory_bytes=free.memory_bytes))
    if not pins:
        return None
    explore.record(st.explored, pins, snap, st.tracks, s)
    st.check.drop()  # a move to measure a type is no plan: what comes out meanwhile is no prediction's
    for t, _ in pins:  # the inner loop holds an explored pool where it moved (its type may have room for no more)
        st.bounds[t.name] = Bounds(lo=t.replicas, hi=t.replicas, why="the exploration")
    rollout = plan_rollout({o.name: o.config for o in ops}, tuple(t for t, _ in pins),
                           RolloutInputs(0.0, 0.0, remaining_rows=None, cold_start_s={}, utilisation={}))
    phase = st.phases.start(rollout.phases(), now)
    return st.issue_phase(phase, "; ".join(why for _, why in pins), now, notes, kind=DecisionKind.PLAN,
                          held=hold_running_tasks(snap) if moves(rollout.steps) else ((), ""))


def _retry_limit(st: PolicyState, prob):
    """``prob`` with its solver time limit ``solver_retry_growth`` times longer per solve in a
    row that found no plan, up to ``solver_retries`` of them."""
    k = min(st.solve_failures, st.settings.solver_retries)
    return prob if k == 0 else replace(prob, time_limit_s=prob.time_limit_s * st.settings.solver_retry_growth ** k)


def _with_ceilings(st: PolicyState, prob, snap: Snapshot, now: float):
    """Pools that could not reach a planned size get at most what they reached for
    ``ceiling_hold_s`` (what blocked them may be gone by then), within what mismatches taught
    and what the machine's cores feed (:mod:`.cores`: with a note per pool they cap)."""
    st.ceilings = {n: (c, t) for n, (c, t) in st.ceilings.items() if now - t < st.settings.ceiling_hold_s}
    highest = {n: c.hi for n, (c, _) in st.ceilings.items()}
    for name, size in st.learned.saturated.items():
        highest[name] = min(highest.get(name, size), size)
    return st.cores.limit(st.learned.limit(prob, snap), snap, highest)


def _estimated(o, planning) -> bool:
    """An actor pool the planner has a rate for (held pools stay with the inner loop)."""
    return o.config.kind == "actor" and planning.rates[o.name].rows_per_s < problem.UNKNOWN_RATE


def _bound(st: PolicyState, ops, planned: dict[str, int | None], why: str) -> None:
    """A planned pool is held at its planned size: the inner loop moves only pools the planner
    has no estimate for, until their data changes (the planner looks again at once then)."""
    for o in ops:
        n = planned.get(o.name)
        if n is not None:
            n = max(n, o.config.min_replicas)
            st.bounds[o.name] = Bounds(lo=n, hi=n, why=why)
