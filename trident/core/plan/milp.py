"""Replicas and device placement for a pipeline (:mod:`trident.core.plan.placement`), as a
mixed-integer linear program.

The solver is HiGHS in-process (``highspy`` through ``pulp.HiGHS``) with CBC as the
fallback; both always run with a time limit and a relative gap. The device choice of one-device
operators (the hard part: one binary per device) is decomposed first (:mod:`trident.core.plan.device_choices`):
a bound per device assignment, pruned operator by operator, names the most promising one, which is
solved alone; devices that no assignment able to beat that plan uses are left out of the full model.
The solver's own status is read, every solution is checked here against the problem, and a new plan
must beat the current one by ``hysteresis``: otherwise the current plan is kept.
:func:`solve_placement` never raises on a solver failure.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from trident.core.plan.device_choices import DeviceChoices
from trident.core.plan.headroom import with_headroom
from trident.core.plan.placement import (
    ONE_DEVICE,
    TOL,
    Allocation,
    Key,
    PlacementProblem,
    PlacementResult,
    change_costs,
    max_fit,
    objective_of,
    throughput_of,
    violations,
)


def solve_placement(problem: PlacementProblem, *, solver: str | None = None) -> PlacementResult:
    """The best allocation for ``problem``; keeps ``problem.current`` when no better valid one is found.

    ``solver`` is ``'highs'``, ``'cbc'`` or ``None`` (HiGHS when ``highspy`` is installed).
    Never raises on a solver failure: the result's ``status`` and ``reason`` say what happened.
    """
    name = _pick_solver(solver)
    cur = problem.current
    if cur is not None and problem.bin_packing and cur.counts and not cur.nodes:
        # what runs now, packed node by node as Ray would have placed it (when it fits at all)
        cur = Allocation(counts=cur.counts, nodes=_first_fit(problem, cur) or ())
        problem = dataclasses.replace(problem, current=cur)
    cur_bad = violations(problem, cur) if cur is not None else ["no current plan"]
    # a pool Ray spread over two devices runs as it is and makes what it makes: a plan must beat that
    # (a single-device rule is the planner's, not a limit of the cluster; on a generated scenario a
    # 4 + 2 split read as invalid was replaced by 2 replicas on one type, a third less throughput)
    cur_broken = [v for v in cur_bad if not v.endswith(ONE_DEVICE)]
    cur_t = throughput_of(problem, cur) if cur is not None else None
    notes: list[str] = []
    try:
        found, status, note = _solve_aggregated(problem, name)
        if found is not None:
            found, notes = with_headroom(problem, found)
        if found is not None and problem.bin_packing:
            found, status, note = _place_on_nodes(problem, found, status, name)
    except Exception as exc:  # a solver crash must never reach the caller
        found, status, note = None, "failed", f"solver error: {type(exc).__name__}: {exc}"
    if found is not None:
        bad = violations(problem, found)
        if bad:
            found, status, note = None, "failed", f"solver returned an invalid plan ({bad[0]})"
    if found is None:
        return dataclasses.replace(_keep(problem, cur, cur_t, name, f"{note}; keeping the current plan",
                                         status="failed"), infeasible=note.endswith(INFEASIBLE))
    new_t = throughput_of(problem, found)
    if cur is not None and found.as_dict() == cur.as_dict() and (not problem.bin_packing or not cur_bad):
        return _keep(problem, cur, cur_t, name, f"the current plan is already optimal ({status})",
                     status=status)
    why = ("the current plan is not valid: " + cur_broken[0]) if cur is not None and cur_broken else (
        f"throughput {cur_t:.1f} -> {new_t:.1f} rows/s" if cur_t is not None else f"throughput {new_t:.1f} rows/s")
    better = PlacementResult(
        allocation=found, throughput_rows_per_s=new_t, current_throughput_rows_per_s=cur_t, changed=True,
        status=status, solver=name, reason=f"{why} ({status}, {name}{'; ' + note if note else ''})",
        objective=objective_of(problem, found), notes=tuple(notes), current_valid=cur is None or not cur_broken,
    )
    if not cur_broken and new_t < cur_t * (1 + problem.hysteresis) - TOL:
        gain = (new_t / cur_t - 1) if cur_t > 0 else 0.0
        return dataclasses.replace(_keep(problem, cur, cur_t, name,
                                         f"best plan gains {gain:+.1%} ({cur_t:.1f} -> {new_t:.1f} rows/s), "
                                         f"under the {problem.hysteresis:.0%} hysteresis; keeping the current plan"),
                                   better=better)
    return better


INFEASIBLE = "(infeasible)"
"""Ends the reason of a solve that proved no plan meets every bound."""


def _keep(problem, cur, cur_t, solver, reason, *, status="kept") -> PlacementResult:
    alloc = cur if cur is not None else Allocation()
    return PlacementResult(
        allocation=alloc, throughput_rows_per_s=cur_t if cur_t is not None else 0.0,
        current_throughput_rows_per_s=cur_t, changed=False, status=status if cur is not None else "failed",
        solver=solver, reason=reason, objective=objective_of(problem, alloc) if cur is not None else None,
    )


def _pick_solver(solver: str | None) -> str:
    from trident.core.solver import pick

    return pick(solver)


def _run(prob, problem: PlacementProblem, solver: str, what: str,
         start: dict | None = None) -> tuple[str | None, str]:
    """Solve ``prob`` (HiGHS starts from ``start``, variable -> value, when given); return
    'optimal' or 'feasible' when it holds a solution, else ``None`` and why there is no ``what``."""
    from trident.core.solver import solve

    out = solve(prob, solver=solver, time_limit_s=problem.time_limit_s, gap_rel=problem.gap_rel, start=start)
    why = f"no {what} meets every bound {INFEASIBLE}" if out.infeasible else f"no feasible {what} within the time limit"
    return out.status, why


def _ints(values: dict, tol: float = 1e-4) -> dict | None:
    out = {}
    for k, v in values.items():
        if v is None:
            return None
        r = round(v)
        if abs(v - r) > tol:
            return None
        out[k] = int(r)
    return out


def _model(problem: PlacementProblem, keys: list, node_of, per_node_caps, incumbent: Allocation | None = None):
    """Build the MILP over ``keys`` (aggregated keys or per-node keys); returns (prob, x, start):
    ``start`` is the better of ``incumbent`` and the current plan as a solution of the model, when
    one of them is a point of it."""
    import pulp

    prob = pulp.LpProblem("trident_placement", pulp.LpMaximize)
    ops = {o.name: o for o in problem.operators}
    nodes = {n.name: n for n in problem.node_types}
    ub = {k: max_fit(ops[k[0]], ops[k[0]].option(k[1]), nodes[k[2]], per_node=len(k) == 4) for k in keys}
    x = {k: pulp.LpVariable(f"x{j}", lowBound=0, upBound=ub[k], cat=pulp.LpInteger) for j, k in enumerate(keys)}
    factors = dict(zip(ops, problem.demand_factors()))
    t_ub = min(sum(ops[o].option(d).rate_rows_per_s * ub[k] for k in keys if k[0] == o for d in (k[1],)) / factors[o]
               for o in ops)
    if problem.max_throughput_rows_per_s is not None:
        t_ub = min(t_ub, problem.max_throughput_rows_per_s)
    cur = problem.current.as_dict() if problem.current else {}
    # More replicas than reaching ``t_ub`` needs never raise T; beyond that only the current ones stay
    # candidates (they cost nothing to keep). The tighter bound is also the big-M of one-device pools.
    for k in keys:
        op, o = ops[k[0]], ops[k[0]].option(k[1])
        need = math.ceil(t_ub * factors[op.name] / o.rate_rows_per_s - TOL) if o.rate_rows_per_s > 0 else 0
        ub[k] = min(ub[k], max(need, op.min_replicas, cur.get(k[:3], 0) if len(k) == 3 else 0))
        x[k].upBound = ub[k]
    t = pulp.LpVariable("T", lowBound=0, upBound=t_ub)
    agg: dict[Key, list] = {}
    for k in keys:
        agg.setdefault(node_of(k), []).append(x[k])
    up_cost, down_w = change_costs(problem)
    cost_terms = []
    start = None
    points = [a for a in (incumbent, problem.current) if a is not None and all(len(k) == 3 for k in keys)
              and all(k in x and c <= ub[k] for k, c in a.as_dict().items())]
    if points:
        point = max(points, key=lambda a: objective_of(problem, a))
        counts = point.as_dict()
        start = {x[k]: float(counts.get(k, 0)) for k in keys}
        start[t] = min(throughput_of(problem, point), t_ub)
    for j, (akey, xs) in enumerate(agg.items()):
        c0 = cur.get(akey, 0)
        up = pulp.LpVariable(f"u{j}", lowBound=0)
        down = pulp.LpVariable(f"d{j}", lowBound=0, upBound=c0)
        prob += pulp.lpSum(xs) - c0 == up - down
        cost_terms += [up_cost[akey] * up, down_w * down]
        if start is not None:
            moved = sum(start[v] for v in xs) - c0
            start[up], start[down] = max(moved, 0.0), max(-moved, 0.0)
    for akey, c0 in cur.items():
        if akey not in agg and c0 > 0:  # replicas on placements no longer valid: their removal is forced
            cost_terms.append(down_w * c0)
    prob += t - pulp.lpSum(cost_terms)
    by_op: dict = {}
    for k in keys:
        by_op.setdefault(k[0], []).append(k)
    for i, op in enumerate(problem.operators):
        mine = [(k, op.option(k[1])) for k in by_op.get(op.name, [])]
        prob += pulp.lpSum(o.rate_rows_per_s * x[k] for k, o in mine) >= factors[op.name] * t
        if op.min_replicas > 0:
            prob += pulp.lpSum(x[k] for k, _ in mine) >= op.min_replicas
        if op.max_replicas is not None:
            prob += pulp.lpSum(x[k] for k, _ in mine) <= op.max_replicas
        devices = sorted({k[1] for k, _ in mine})
        if op.single_device and len(devices) > 1:
            use = {d: pulp.LpVariable(f"y{i}_{j}", cat=pulp.LpBinary) for j, d in enumerate(devices)}
            for k, _ in mine:
                prob += x[k] <= ub[k] * use[k[1]]
            prob += pulp.lpSum(use.values()) <= 1
            if start is not None:
                on = {k[1] for k, _ in mine if start[x[k]] > 0}
                start.update({v: float(d in on) for d, v in use.items()})
    # memory rows in units of the largest replica: byte-sized coefficients beside replica counts scale badly
    mem_unit = float(max((o.memory_bytes for op in problem.operators for o in op.options), default=1) or 1)
    by_bucket: dict = {}
    for k in keys:
        by_bucket.setdefault(_bucket(k), []).append((k, ops[k[0]].option(k[1])))
    for bucket, (cpus, gpus, mem) in per_node_caps.items():
        mine = by_bucket.get(bucket, [])
        if not mine:
            continue
        prob += pulp.lpSum(o.cpus * x[k] for k, o in mine) <= cpus
        if any(o.gpus > 0 for _, o in mine):
            prob += pulp.lpSum(o.gpus * x[k] for k, o in mine) <= gpus
        if mem is not None and any(o.memory_bytes > 0 for _, o in mine):
            prob += pulp.lpSum(o.memory_bytes / mem_unit * x[k] for k, o in mine) <= mem / mem_unit
    if problem.memory_limit_bytes is not None:
        prob += (pulp.lpSum(ops[k[0]].option(k[1]).memory_bytes / mem_unit * x[k] for k in keys)
                 <= problem.memory_limit_bytes / mem_unit)
    if problem.cpus_limit is not None:
        prob += pulp.lpSum(ops[k[0]].option(k[1]).cpus * x[k] for k in keys) <= problem.cpus_limit
    if problem.gpus_limit is not None and any(ops[k[0]].option(k[1]).gpus > 0 for k in keys):
        prob += pulp.lpSum(ops[k[0]].option(k[1]).gpus * x[k] for k in keys) <= problem.gpus_limit
    return prob, x, start


def _bucket(k: tuple) -> tuple:
    """The resource bucket of a key: its node type (aggregated) or (node type, index) (per node)."""
    return k[2] if len(k) == 3 else (k[2], k[3])


def _solve_aggregated(problem: PlacementProblem, solver: str):
    """Solve over node types. When one-device operators have several devices, the device choice is
    decomposed first (see :class:`DeviceChoices`): the assignment with the best bound is solved
    alone; when no other assignment's bound beats that plan by more than half of ``gap_rel``, it is
    the answer, else the full model, without the devices no such assignment uses, starts from it."""
    keys = problem.keys()
    caps = {n.name: (n.cpus * n.count, n.gpus * n.count,
                     None if n.memory_bytes is None else n.memory_bytes * n.count)
            for n in problem.node_types if n.count > 0}
    incumbent, note = None, ""
    choices = DeviceChoices.of(problem, keys, caps)
    if choices is not None:  # two solves: each gets half the time limit
        problem = dataclasses.replace(problem, time_limit_s=problem.time_limit_s / 2)
        sub_problem = dataclasses.replace(problem, gap_rel=problem.gap_rel * _SUB_GAP)
        tau = choices.bound(choices.greedy())
        found = choices.above(tau, strict=False) if math.isfinite(tau) else None
        if found is not None and len(found[0]):
            grid, bounds = found
            best = grid[int(np.argmax(bounds))]
            sub_keys = choices.keys_of(keys, best[None, :])
            incumbent, sub_status = _solve_keys(sub_problem, sub_keys, caps, solver, None)
            if incumbent is not None:
                value = objective_of(problem, incumbent)
                threshold = value + problem.gap_rel * _PRUNE_GAP * abs(value) + TOL
                if threshold >= tau:
                    keep = bounds > threshold
                    grid = grid[keep]
                else:
                    found = choices.above(threshold, strict=True)
                    grid = None if found is None else found[0]
                if grid is not None:
                    others = grid[np.any(grid != best, axis=1)]
                    if not len(others):
                        return incumbent, sub_status, "every other device choice is bounded below this plan"
                    keys = choices.keys_of(keys, np.vstack([best[None, :], others]))
                    note = "device choices bounded below the best single-choice plan were left out"
    found_alloc, status = _solve_keys(problem, keys, caps, solver, incumbent)
    if found_alloc is None:
        if incumbent is not None:
            return incumbent, "feasible", f"{status}; kept the best single-choice plan"
        return None, "failed", status
    return found_alloc, status, note


def _solve_keys(problem: PlacementProblem, keys: list, caps: dict, solver: str, incumbent: Allocation | None):
    """Solve the aggregated model over ``keys``; returns (allocation, status) or (None, why)."""
    prob, x, start = _model(problem, keys, lambda k: k, caps, incumbent)
    status, why = _run(prob, problem, solver, "plan", start)
    if status is None:
        return None, why
    vals = _ints({k: v.varValue for k, v in x.items()})
    if vals is None:
        return None, "the solver returned a non-integer plan"
    return Allocation.of(vals), status


_SUB_GAP = 0.1
"""The single-assignment model is solved to this fraction of ``gap_rel``: it is small and easy, and
the closer its plan is to the optimum, the more device choices its value rules out."""
_PRUNE_GAP = 0.5
"""A device choice is left out when its bound is within this fraction of ``gap_rel`` of that plan,
so the plan returned is within ``gap_rel`` of the optimum with room to spare."""
def _place_on_nodes(problem: PlacementProblem, agg: Allocation, status: str, solver: str):
    """Place an aggregated optimum on individual nodes: first-fit decreasing per node type, which
    keeps the optimum when it succeeds; otherwise the per-node MILP with symmetry breaking."""
    nodes = _first_fit(problem, agg)
    if nodes is not None:
        return Allocation(counts=agg.counts, nodes=nodes), status, "packed per node by first-fit"
    ops = {o.name: o for o in problem.operators}
    keys = [(o, d, n.name, i) for (o, d, nn) in problem.keys() for n in problem.node_types if n.name == nn
            for i in range(n.count)]
    caps = {(n.name, i): (n.cpus, n.gpus, n.memory_bytes) for n in problem.node_types for i in range(n.count)}
    prob, x, _ = _model(problem, keys, lambda k: k[:3], caps)
    import pulp

    for n in problem.node_types:  # identical nodes: order them by load to cut symmetric solutions
        for i in range(n.count - 1):
            def load(idx, n=n):
                return pulp.lpSum((ops[k[0]].option(k[1]).gpus + 1e-3 * ops[k[0]].option(k[1]).cpus) * x[k]
                                  for k in keys if k[2] == n.name and k[3] == idx)
            prob += load(i) >= load(i + 1)
    st, why = _run(prob, problem, solver, "per-node packing")
    if st is None:
        return None, "failed", why
    vals = _ints({k: v.varValue for k, v in x.items()})
    if vals is None:
        return None, "failed", "the solver returned a non-integer packing"
    counts: dict[Key, int] = {}
    for (o, d, n, _), c in vals.items():
        counts[(o, d, n)] = counts.get((o, d, n), 0) + c
    return Allocation.of(counts, vals), st, "packed per node by the per-node MILP"


def _first_fit(problem: PlacementProblem, agg: Allocation):
    """First-fit decreasing of every replica on the nodes of its type; None when one does not fit.

    The replicas of one (operator, device) come in a run, so a node takes as many of them as fit
    before the next node is tried (a node one of them did not fit keeps too little room for more)."""
    ops = {o.name: o for o in problem.operators}
    out = []
    for n in problem.node_types:
        kinds = [((o, d), ops[o].option(d), c) for o, d, nn, c in agg.counts if nn == n.name and c > 0]
        if not kinds:
            continue
        kinds.sort(key=lambda it: (-it[1].gpus, -it[1].memory_bytes, -it[1].cpus, it[0]))
        free = [[n.cpus, n.gpus, math.inf if n.memory_bytes is None else n.memory_bytes] for _ in range(n.count)]
        for (o, d), opt, left in kinds:
            need = (opt.cpus, opt.gpus, opt.memory_bytes)
            for k, f in enumerate(free):
                fit = min([left] + [math.floor((f[r] + (TOL if r < 2 else 0.0)) / need[r])
                                    for r in range(3) if need[r] > 0 and math.isfinite(f[r])])
                if fit <= 0:
                    continue
                for r in range(3):
                    f[r] -= fit * need[r]
                out.append((o, d, n.name, k, fit))
                left -= fit
                if not left:
                    break
            if left:
                return None
    return tuple(sorted(out))
