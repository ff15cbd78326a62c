"""Replicas and device placement for a pipeline, as a mixed-integer linear program.

Integer replicas per (operator, device, node type) maximise the pipeline throughput
``T`` (rows per second entering the first operator). Operator ``i`` receives
``T * f_i`` rows per second, ``f_i`` being the product of the row selectivities of
the operators before it, so its capacity ``sum(rate * replicas)`` must be at least
``T * f_i``. CPUs, GPUs (per accelerator type) and memory are limited per node type
(identical nodes aggregated into ``count x capacity``), and per node when
``bin_packing`` is asked. The objective subtracts a reconfiguration cost: every
replica started loses ``cold_start_s`` of its output, amortised over ``horizon_s``.

The solver is HiGHS in-process (``highspy`` through ``pulp.HiGHS``) with CBC as the
fallback; both always run with a time limit and a relative gap. The solver's own
status is read, every solution is checked here against the problem, and a new plan
must beat the current one by ``hysteresis``: otherwise the current plan is kept.
:func:`solve_placement` never raises on a solver failure.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from trident.errors import ConfigError

CPU = "cpu"
"""Device name of a replica that uses no GPU."""
ANY_GPU = "gpu"
"""Device name of a GPU replica that runs on any accelerator type."""

_TOL = 1e-6
_DOWN_WEIGHT = 1e-6
"""Objective weight (relative to the largest per-replica contribution) of removing a
replica: a tie-breaker that keeps replicas that cost nothing to keep."""


@dataclass(frozen=True)
class NodeType:
    """``count`` identical nodes, each with ``cpus``, ``gpus`` of ``gpu_type`` and ``memory_bytes``."""

    name: str
    count: int
    cpus: float
    gpus: float = 0.0
    gpu_type: str | None = None
    memory_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ConfigError(f"{self.name}.count", self.count, "an integer >= 0")
        if self.cpus < 0 or self.gpus < 0:
            raise ConfigError(f"{self.name}.cpus/gpus", (self.cpus, self.gpus), "non-negative numbers")
        if self.memory_bytes is not None and self.memory_bytes < 0:
            raise ConfigError(f"{self.name}.memory_bytes", self.memory_bytes, "None or bytes >= 0")


@dataclass(frozen=True)
class DeviceOption:
    """One way to run a replica: its device, input rows per second and resources per replica."""

    device: str
    rate_rows_per_s: float
    cpus: float = 1.0
    gpus: float = 0.0
    memory_bytes: int = 0

    def __post_init__(self) -> None:
        if self.rate_rows_per_s < 0 or not math.isfinite(self.rate_rows_per_s):
            raise ConfigError(f"{self.device}.rate_rows_per_s", self.rate_rows_per_s, "a finite number >= 0")
        if self.cpus < 0 or self.gpus < 0 or self.memory_bytes < 0:
            raise ConfigError(f"{self.device}.cpus/gpus/memory_bytes", (self.cpus, self.gpus, self.memory_bytes),
                              "non-negative numbers")
        if self.device == CPU and self.gpus > 0:
            raise ConfigError(f"{self.device}.gpus", self.gpus, f"0 for device {CPU!r}")

    def fits(self, node: NodeType) -> bool:
        """Whether one replica fits on one node of ``node``'s type."""
        if self.gpus > 0 and self.device != ANY_GPU and self.device != node.gpu_type:
            return False
        if self.cpus > node.cpus + _TOL or self.gpus > node.gpus + _TOL:
            return False
        return node.memory_bytes is None or self.memory_bytes <= node.memory_bytes


@dataclass(frozen=True)
class OperatorSpec:
    """One operator of a linear pipeline (listed in pipeline order)."""

    name: str
    options: tuple[DeviceOption, ...]
    selectivity: float = 1.0
    """Rows out per row in."""
    min_replicas: int = 0
    max_replicas: int | None = None
    cold_start_s: float = 0.0
    single_device: bool = False
    """All replicas on one device (an actor pool has one accelerator type)."""

    def __post_init__(self) -> None:
        if not self.options:
            raise ConfigError(f"{self.name}.options", self.options, "at least one DeviceOption")
        if len({o.device for o in self.options}) != len(self.options):
            raise ConfigError(f"{self.name}.options", [o.device for o in self.options], "distinct device names")
        if self.selectivity <= 0 or not math.isfinite(self.selectivity):
            raise ConfigError(f"{self.name}.selectivity", self.selectivity, "a finite number > 0")
        if self.min_replicas < 0:
            raise ConfigError(f"{self.name}.min_replicas", self.min_replicas, "an integer >= 0")
        if self.max_replicas is not None and self.max_replicas < self.min_replicas:
            raise ConfigError(f"{self.name}.max_replicas", self.max_replicas, f">= min_replicas ({self.min_replicas})")
        if self.cold_start_s < 0:
            raise ConfigError(f"{self.name}.cold_start_s", self.cold_start_s, "seconds >= 0")

    def option(self, device: str) -> DeviceOption | None:
        return next((o for o in self.options if o.device == device), None)


Key = tuple[str, str, str]
"""(operator, device, node type)."""


@dataclass(frozen=True)
class Allocation:
    """Replicas per (operator, device, node type); ``nodes`` adds the node index when bin-packed."""

    counts: tuple[tuple[str, str, str, int], ...] = ()
    nodes: tuple[tuple[str, str, str, int, int], ...] = ()
    """(operator, device, node type, node index, replicas), only when placed per node."""

    @staticmethod
    def of(counts: dict[Key, int], nodes: dict[tuple[str, str, str, int], int] | None = None) -> Allocation:
        return Allocation(
            counts=tuple(sorted((o, d, n, int(c)) for (o, d, n), c in counts.items() if c > 0)),
            nodes=tuple(sorted((o, d, n, k, int(c)) for (o, d, n, k), c in (nodes or {}).items() if c > 0)),
        )

    def as_dict(self) -> dict[Key, int]:
        return {(o, d, n): c for o, d, n, c in self.counts}

    def replicas(self, operator: str) -> int:
        return sum(c for o, _, _, c in self.counts if o == operator)

    def by_device(self, operator: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for o, d, _, c in self.counts:
            if o == operator:
                out[d] = out.get(d, 0) + c
        return out

    def describe(self) -> str:
        per_op: dict[str, list[str]] = {}
        for o, d, n, c in self.counts:
            per_op.setdefault(o, []).append(f"{c}x{d}@{n}")
        return "; ".join(f"{o}: {', '.join(v)}" for o, v in per_op.items()) or "(empty)"


@dataclass(frozen=True)
class PlacementProblem:
    """Everything :func:`solve_placement` needs; operators in pipeline order."""

    operators: tuple[OperatorSpec, ...]
    node_types: tuple[NodeType, ...]
    current: Allocation | None = None
    memory_limit_bytes: int | None = None
    """Limit on the summed memory of every replica of the pipeline (bytes)."""
    cpus_limit: float | None = None
    """Limit on the summed CPUs of every replica (when CPUs are known only for the whole cluster)."""
    max_throughput_rows_per_s: float | None = None
    """Upper bound on ``T`` (a rate-limited source); ``None`` for unbounded."""
    horizon_s: float = 600.0
    """Seconds over which a cold start is amortised."""
    hysteresis: float = 0.05
    """Relative throughput gain a new plan needs over a valid current plan."""
    bin_packing: bool = False
    time_limit_s: float = 1.0
    gap_rel: float = 0.01
    """Relative MIP gap: well under both the rate models' error and ``hysteresis``."""

    def __post_init__(self) -> None:
        if not self.operators:
            raise ConfigError("operators", self.operators, "at least one OperatorSpec")
        names = [o.name for o in self.operators]
        if len(set(names)) != len(names):
            raise ConfigError("operators", names, "distinct operator names")
        if len({n.name for n in self.node_types}) != len(self.node_types):
            raise ConfigError("node_types", [n.name for n in self.node_types], "distinct node type names")
        if self.horizon_s <= 0:
            raise ConfigError("horizon_s", self.horizon_s, "seconds > 0")
        if self.hysteresis < 0:
            raise ConfigError("hysteresis", self.hysteresis, "a fraction >= 0")
        if not (0 < self.time_limit_s <= 600):
            raise ConfigError("time_limit_s", self.time_limit_s, "seconds in (0, 600]")
        if not (0 <= self.gap_rel < 1):
            raise ConfigError("gap_rel", self.gap_rel, "a fraction in [0, 1)")
        if self.max_throughput_rows_per_s is not None and self.max_throughput_rows_per_s < 0:
            raise ConfigError("max_throughput_rows_per_s", self.max_throughput_rows_per_s, "None or >= 0")

    def demand_factors(self) -> list[float]:
        """Rows into each operator per row into the first one."""
        out, f = [], 1.0
        for op in self.operators:
            out.append(f)
            f *= op.selectivity
        return out

    def keys(self) -> list[Key]:
        """Every (operator, device, node type) a replica may be placed on."""
        return [(op.name, o.device, n.name) for op in self.operators for o in op.options
                for n in self.node_types if n.count > 0 and o.fits(n)]


@dataclass(frozen=True)
class PlacementResult:
    """The allocation to run, what it is expected to achieve and why it was chosen."""

    allocation: Allocation
    throughput_rows_per_s: float
    current_throughput_rows_per_s: float | None
    changed: bool
    status: str
    """'optimal', 'feasible' (time limit or gap reached with a valid solution), 'kept' or 'failed'."""
    solver: str
    reason: str
    objective: float | None = None
    notes: tuple[str, ...] = field(default=())


def throughput_of(problem: PlacementProblem, allocation: Allocation) -> float:
    """Pipeline throughput (rows/s into the first operator) that ``allocation`` sustains."""
    counts = allocation.as_dict()
    t = math.inf if problem.max_throughput_rows_per_s is None else problem.max_throughput_rows_per_s
    for op, f in zip(problem.operators, problem.demand_factors()):
        cap = sum(o.rate_rows_per_s * counts.get((op.name, o.device, n.name), 0)
                  for o in op.options for n in problem.node_types)
        t = min(t, cap / f)
    return 0.0 if math.isinf(t) else t


def _change_costs(problem: PlacementProblem) -> tuple[dict[Key, float], float]:
    """Per-replica start cost (throughput units) per key, and the weight of removing one.

    Without a current plan nothing is running: every replica starts at once whatever the plan,
    so starting costs nothing extra."""
    factors = dict(zip((o.name for o in problem.operators), problem.demand_factors()))
    ops = {o.name: o for o in problem.operators}
    up: dict[Key, float] = {}
    largest = 0.0
    for key in problem.keys():
        op = ops[key[0]]
        contrib = op.option(key[1]).rate_rows_per_s / factors[op.name]
        largest = max(largest, contrib)
        up[key] = 0.0 if problem.current is None else op.cold_start_s * contrib / problem.horizon_s
    return up, _DOWN_WEIGHT * max(largest, 1.0)


def objective_of(problem: PlacementProblem, allocation: Allocation) -> float:
    """The value the MILP maximises: throughput minus reconfiguration cost."""
    up_cost, down_w = _change_costs(problem)
    counts = allocation.as_dict()
    cur = problem.current.as_dict() if problem.current else {}
    cost = 0.0
    for key in set(counts) | set(cur):
        delta = counts.get(key, 0) - cur.get(key, 0)
        cost += up_cost.get(key, 0.0) * max(delta, 0) + down_w * max(-delta, 0)
    return throughput_of(problem, allocation) - cost


def violations(problem: PlacementProblem, allocation: Allocation) -> list[str]:
    """Every constraint ``allocation`` breaks (an empty list when it is valid)."""
    out: list[str] = []
    ops = {o.name: o for o in problem.operators}
    nodes = {n.name: n for n in problem.node_types}
    used = {n: [0.0, 0.0, 0.0] for n in nodes}
    total_mem = 0.0
    for o, d, n, c in allocation.counts:
        op, node = ops.get(o), nodes.get(n)
        opt = op.option(d) if op else None
        if opt is None or node is None or not opt.fits(node) or node.count == 0:
            out.append(f"{o}: device {d!r} on node type {n!r} is not a valid placement")
            continue
        if c < 0 or int(c) != c:
            out.append(f"{o}: replicas {c} is not a non-negative integer")
        used[n][0] += opt.cpus * c
        used[n][1] += opt.gpus * c
        used[n][2] += opt.memory_bytes * c
        total_mem += opt.memory_bytes * c
    for name, (cpu, gpu, mem) in used.items():
        node = nodes[name]
        if cpu > node.cpus * node.count + _TOL:
            out.append(f"node type {name}: {cpu:g} CPUs > {node.cpus * node.count:g}")
        if gpu > node.gpus * node.count + _TOL:
            out.append(f"node type {name}: {gpu:g} GPUs > {node.gpus * node.count:g}")
        if node.memory_bytes is not None and mem > node.memory_bytes * node.count + 0.5:
            out.append(f"node type {name}: {mem:.0f} bytes > {node.memory_bytes * node.count} bytes")
    if problem.memory_limit_bytes is not None and total_mem > problem.memory_limit_bytes + 0.5:
        out.append(f"pipeline memory {total_mem:.0f} bytes > limit {problem.memory_limit_bytes} bytes")
    total_cpus = sum(u[0] for u in used.values())
    if problem.cpus_limit is not None and total_cpus > problem.cpus_limit + _TOL:
        out.append(f"pipeline CPUs {total_cpus:g} > limit {problem.cpus_limit:g}")
    for op in problem.operators:
        r = allocation.replicas(op.name)
        if r < op.min_replicas or (op.max_replicas is not None and r > op.max_replicas):
            out.append(f"{op.name}: {r} replicas outside [{op.min_replicas}, {op.max_replicas}]")
        if op.single_device and len(allocation.by_device(op.name)) > 1:
            out.append(f"{op.name}: replicas on {sorted(allocation.by_device(op.name))}, expected one device")
    if problem.bin_packing and allocation.counts:
        out.extend(_node_violations(problem, allocation))
    return out


def _node_violations(problem: PlacementProblem, allocation: Allocation) -> list[str]:
    if not allocation.nodes:
        return ["bin packing asked but the allocation has no per-node placement"]
    ops = {o.name: o for o in problem.operators}
    nodes = {n.name: n for n in problem.node_types}
    load: dict[tuple[str, int], list[float]] = {}
    agg: dict[Key, int] = {}
    out: list[str] = []
    for o, d, n, k, c in allocation.nodes:
        if n not in nodes or not (0 <= k < nodes[n].count):
            out.append(f"{o}: node {n}[{k}] does not exist")
            continue
        opt = ops[o].option(d)
        lo = load.setdefault((n, k), [0.0, 0.0, 0.0])
        lo[0] += opt.cpus * c
        lo[1] += opt.gpus * c
        lo[2] += opt.memory_bytes * c
        agg[(o, d, n)] = agg.get((o, d, n), 0) + c
    for (n, k), (cpu, gpu, mem) in load.items():
        node = nodes[n]
        if cpu > node.cpus + _TOL or gpu > node.gpus + _TOL or (
                node.memory_bytes is not None and mem > node.memory_bytes + 0.5):
            out.append(f"node {n}[{k}] over capacity: cpus {cpu:g}, gpus {gpu:g}, memory {mem:.0f}")
    if agg != allocation.as_dict():
        out.append("per-node placement does not add up to the per-node-type counts")
    return out


def solve_placement(problem: PlacementProblem, *, solver: str | None = None) -> PlacementResult:
    """The best allocation for ``problem``; keeps ``problem.current`` when no better valid one is found.

    ``solver`` is ``'highs'``, ``'cbc'`` or ``None`` (HiGHS when ``highspy`` is installed).
    Never raises on a solver failure: the result's ``status`` and ``reason`` say what happened.
    """
    name = _pick_solver(solver)
    cur = problem.current
    cur_bad = violations(problem, cur) if cur is not None else ["no current plan"]
    cur_t = throughput_of(problem, cur) if cur is not None else None
    try:
        found, status, note = _solve_aggregated(problem, name)
        if found is not None and problem.bin_packing:
            found, status, note = _place_on_nodes(problem, found, status, name)
    except Exception as exc:  # a solver crash must never reach the caller
        found, status, note = None, "failed", f"solver error: {type(exc).__name__}: {exc}"
    if found is not None:
        bad = violations(problem, found)
        if bad:
            found, status, note = None, "failed", f"solver returned an invalid plan ({bad[0]})"
    if found is None:
        return _keep(problem, cur, cur_t, name, f"{note}; keeping the current plan")
    new_t = throughput_of(problem, found)
    if cur is not None and found.as_dict() == cur.as_dict() and (not problem.bin_packing or not cur_bad):
        return _keep(problem, cur, cur_t, name, f"the current plan is already optimal ({status})",
                     status=status)
    if not cur_bad and new_t < cur_t * (1 + problem.hysteresis) - _TOL:
        gain = (new_t / cur_t - 1) if cur_t > 0 else 0.0
        return _keep(problem, cur, cur_t, name,
                     f"best plan gains {gain:+.1%} ({cur_t:.1f} -> {new_t:.1f} rows/s), "
                     f"under the {problem.hysteresis:.0%} hysteresis; keeping the current plan")
    why = ("the current plan is not valid: " + cur_bad[0]) if cur is not None and cur_bad else (
        f"throughput {cur_t:.1f} -> {new_t:.1f} rows/s" if cur_t is not None else f"throughput {new_t:.1f} rows/s")
    return PlacementResult(
        allocation=found, throughput_rows_per_s=new_t, current_throughput_rows_per_s=cur_t, changed=True,
        status=status, solver=name, reason=f"{why} ({status}, {name}{'; ' + note if note else ''})",
        objective=objective_of(problem, found),
    )


def _keep(problem, cur, cur_t, solver, reason, *, status="kept") -> PlacementResult:
    alloc = cur if cur is not None else Allocation()
    return PlacementResult(
        allocation=alloc, throughput_rows_per_s=cur_t if cur_t is not None else 0.0,
        current_throughput_rows_per_s=cur_t, changed=False, status=status if cur is not None else "failed",
        solver=solver, reason=reason, objective=objective_of(problem, alloc) if cur is not None else None,
    )


def _pick_solver(solver: str | None) -> str:
    if solver not in (None, "highs", "cbc"):
        raise ConfigError("solver", solver, "'highs', 'cbc' or None")
    if solver is None:
        import pulp

        return "highs" if pulp.HiGHS().available() else "cbc"
    return solver


def _run(prob, problem: PlacementProblem, solver: str, start: dict | None = None) -> str | None:
    """Solve ``prob`` (HiGHS starts from ``start``, variable -> value, when given); return
    'optimal' or 'feasible' when it holds a solution, else ``None``."""
    import pulp

    if solver == "highs":
        import highspy

        # No ``threads`` option: HiGHS's thread pool is process-wide, and asking for a count
        # other than the one another HiGHS user in this process started it with fails the solve.
        cmd = _warm_highs()(start=start, msg=False, timeLimit=problem.time_limit_s, gapRel=problem.gap_rel)
        prob.solve(cmd)
        model = prob.solverModel
        st = model.getModelStatus()
        has_solution = model.getInfo().primal_solution_status == 2  # kSolutionStatusFeasible
        if st == highspy.HighsModelStatus.kOptimal:
            return "optimal"
        return "feasible" if has_solution and st in (
            highspy.HighsModelStatus.kTimeLimit, highspy.HighsModelStatus.kInterrupt,
            highspy.HighsModelStatus.kIterationLimit, highspy.HighsModelStatus.kSolutionLimit) else None
    cmd = pulp.PULP_CBC_CMD(msg=False, timeLimit=problem.time_limit_s, gapRel=problem.gap_rel, threads=1)
    prob.solve(cmd)
    if prob.status != pulp.LpStatusOptimal:
        return None
    # CBC reports "Optimal" after a time limit (pulp#649): the plan is validated by the caller.
    return "optimal" if prob.sol_status == pulp.LpSolutionOptimal else (
        "feasible" if prob.sol_status == pulp.LpSolutionIntegerFeasible else None)


def _warm_highs():
    """``pulp.HiGHS`` that hands HiGHS a starting solution (pulp has no warm start for it)."""
    import numpy as np
    import pulp

    class WarmHiGHS(pulp.HiGHS):
        def __init__(self, *, start: dict | None, **kw) -> None:
            super().__init__(**kw)
            self.start = start or {}

        def callSolver(self, lp) -> None:
            if self.start:
                idx = np.array([v.index for v in self.start], dtype=np.int32)
                lp.solverModel.setSolution(len(idx), idx, np.array(list(self.start.values()), dtype=float))
            lp.solverModel.run()

    return WarmHiGHS


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


def _model(problem: PlacementProblem, keys: list, node_of, per_node_caps):
    """Build the MILP over ``keys`` (aggregated keys or per-node keys); returns (prob, x, start):
    ``start`` is the current plan as a solution of the model, when it is one of its points."""
    import pulp

    prob = pulp.LpProblem("trident_placement", pulp.LpMaximize)
    ops = {o.name: o for o in problem.operators}
    nodes = {n.name: n for n in problem.node_types}
    ub = {k: _max_fit(ops[k[0]], ops[k[0]].option(k[1]), nodes[k[2]], per_node=len(k) == 4) for k in keys}
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
        need = math.ceil(t_ub * factors[op.name] / o.rate_rows_per_s - _TOL) if o.rate_rows_per_s > 0 else 0
        ub[k] = min(ub[k], max(need, op.min_replicas, cur.get(k[:3], 0) if len(k) == 3 else 0))
        x[k].upBound = ub[k]
    t = pulp.LpVariable("T", lowBound=0, upBound=t_ub)
    agg: dict[Key, list] = {}
    for k in keys:
        agg.setdefault(node_of(k), []).append(x[k])
    up_cost, down_w = _change_costs(problem)
    cost_terms = []
    start = None
    if cur and all(len(k) == 3 for k in keys) and all(k in x and c <= ub[k] for k, c in cur.items()):
        start = {x[k]: float(cur.get(k, 0)) for k in keys}
        start[t] = min(throughput_of(problem, problem.current), t_ub)
    for j, (akey, xs) in enumerate(agg.items()):
        c0 = cur.get(akey, 0)
        up = pulp.LpVariable(f"u{j}", lowBound=0)
        down = pulp.LpVariable(f"d{j}", lowBound=0, upBound=c0)
        prob += pulp.lpSum(xs) - c0 == up - down
        cost_terms += [up_cost[akey] * up, down_w * down]
        if start is not None:
            start[up] = start[down] = 0.0
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
    return prob, x, start


def _max_fit(op: OperatorSpec, o: DeviceOption, node: NodeType, *, per_node: bool) -> int:
    """Most replicas of option ``o`` that one node (or every node of the type) can hold."""
    count = 1 if per_node else node.count
    limits = [op.max_replicas] if op.max_replicas is not None else []
    for need, have in ((o.cpus, node.cpus), (o.gpus, node.gpus),
                       (o.memory_bytes, node.memory_bytes)):
        if need > 0 and have is not None:
            limits.append(int(math.floor(have * count / need + _TOL)))
    return min(limits) if limits else 10**6


def _bucket(k: tuple) -> tuple:
    """The resource bucket of a key: its node type (aggregated) or (node type, index) (per node)."""
    return k[2] if len(k) == 3 else (k[2], k[3])


def _solve_aggregated(problem: PlacementProblem, solver: str):
    keys = problem.keys()
    caps = {n.name: (n.cpus * n.count, n.gpus * n.count,
                     None if n.memory_bytes is None else n.memory_bytes * n.count)
            for n in problem.node_types if n.count > 0}
    prob, x, start = _model(problem, keys, lambda k: k, caps)
    status = _run(prob, problem, solver, start)
    if status is None:
        return None, "failed", "no feasible plan within the time limit"
    vals = _ints({k: v.varValue for k, v in x.items()})
    if vals is None:
        return None, "failed", "the solver returned a non-integer plan"
    return Allocation.of(vals), status, ""


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
    st = _run(prob, problem, solver)
    if st is None:
        return None, "failed", "no per-node packing within the time limit"
    vals = _ints({k: v.varValue for k, v in x.items()})
    if vals is None:
        return None, "failed", "the solver returned a non-integer packing"
    counts: dict[Key, int] = {}
    for (o, d, n, _), c in vals.items():
        counts[(o, d, n)] = counts.get((o, d, n), 0) + c
    return Allocation.of(counts, vals), st, "packed per node by the per-node MILP"


def _first_fit(problem: PlacementProblem, agg: Allocation):
    ops = {o.name: o for o in problem.operators}
    out = []
    for n in problem.node_types:
        items = []
        for o, d, nn, c in agg.counts:
            if nn == n.name:
                items += [(o, d)] * c
        if not items:
            continue
        opt = {it: ops[it[0]].option(it[1]) for it in set(items)}
        items.sort(key=lambda it: (-opt[it].gpus, -opt[it].memory_bytes, -opt[it].cpus, it))
        free = [[n.cpus, n.gpus, math.inf if n.memory_bytes is None else n.memory_bytes] for _ in range(n.count)]
        placed: dict[tuple, int] = {}
        for it in items:
            o = opt[it]
            for k, f in enumerate(free):
                if o.cpus <= f[0] + _TOL and o.gpus <= f[1] + _TOL and o.memory_bytes <= f[2]:
                    f[0] -= o.cpus
                    f[1] -= o.gpus
                    f[2] -= o.memory_bytes
                    placed[(it[0], it[1], n.name, k)] = placed.get((it[0], it[1], n.name, k), 0) + 1
                    break
            else:
                return None
        out += [(o, d, nn, k, c) for (o, d, nn, k), c in placed.items()]
    return tuple(sorted(out))
