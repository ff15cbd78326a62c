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
fallback; both always run with a time limit and a relative gap. The device choice of one-device
operators (the hard part: one binary per device) is decomposed first: a bound per device
assignment, pruned operator by operator, names the most promising one, which is solved alone;
devices that no assignment able to beat that plan uses are left out of the full model. The solver's own
status is read, every solution is checked here against the problem, and a new plan
must beat the current one by ``hysteresis``: otherwise the current plan is kept.
:func:`solve_placement` never raises on a solver failure.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from trident.errors import ConfigError

CPU = "cpu"
"""Device name of a replica that uses no GPU."""
ANY_GPU = "gpu"
"""Device name of a GPU replica that runs on any accelerator type."""

_TOL = 1e-6
_DOWN_WEIGHT = 1e-6
"""Objective weight (relative to the smallest per-replica contribution) of removing a
replica: a tie-breaker that keeps replicas that cost nothing to keep, and never outweighs
a real gain (an operator with a huge rate must not make every removal look expensive)."""


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
    """'optimal', 'feasible' (time limit or gap reached with a valid solution), 'kept' (the current
    plan is as good, within the hysteresis) or 'failed' (no plan found: none exists, the time limit
    passed first or the solver failed; the current plan is kept)."""
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
    smallest = math.inf
    for key in problem.keys():
        op = ops[key[0]]
        contrib = op.option(key[1]).rate_rows_per_s / factors[op.name]
        if contrib > 0:
            smallest = min(smallest, contrib)
        up[key] = 0.0 if problem.current is None else op.cold_start_s * contrib / problem.horizon_s
    return up, _DOWN_WEIGHT * (smallest if math.isfinite(smallest) else 1.0)


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
        return _keep(problem, cur, cur_t, name, f"{note}; keeping the current plan", status="failed")
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
    from trident.solver import pick

    return pick(solver)


def _run(prob, problem: PlacementProblem, solver: str, start: dict | None = None) -> str | None:
    """Solve ``prob`` (HiGHS starts from ``start``, variable -> value, when given); return
    'optimal' or 'feasible' when it holds a solution, else ``None``."""
    from trident.solver import solve

    return solve(prob, solver=solver, time_limit_s=problem.time_limit_s, gap_rel=problem.gap_rel,
                 start=start).status


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
    """Solve over node types. When one-device operators have several devices, the device choice is
    decomposed first (see :class:`_DeviceChoices`): the assignment with the best bound is solved
    alone; when no other assignment's bound beats that plan by more than half of ``gap_rel``, it is
    the answer, else the full model, without the devices no such assignment uses, starts from it."""
    keys = problem.keys()
    caps = {n.name: (n.cpus * n.count, n.gpus * n.count,
                     None if n.memory_bytes is None else n.memory_bytes * n.count)
            for n in problem.node_types if n.count > 0}
    incumbent, note = None, ""
    choices = _DeviceChoices.of(problem, keys, caps)
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
                threshold = value + problem.gap_rel * _PRUNE_GAP * abs(value) + _TOL
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
    status = _run(prob, problem, solver, start)
    if status is None:
        return None, "no feasible plan within the time limit"
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
_MAX_DEVICE_CHOICES = 1 << 14
"""Most partial device assignments :class:`_DeviceChoices` bounds at one level."""


@dataclass(frozen=True)
class _DeviceChoices:
    """Upper bounds on the objective of device assignments of the one-device operators.

    The bound of an assignment relaxes integrality and minimum replicas: an operator reaching ``T``
    on device ``d`` needs ``f * T / rate`` replicas, so ``f * r / rate`` of resource ``r`` per unit
    of ``T`` inside the node types ``d`` fits on; every set of node types that confines some device
    (and the whole cluster) caps the sum of what the operators confined to it need, an operator
    free to use several devices counting its cheapest. The objective is at most
    ``T - sum(alpha * max(T - C, 0))`` over the operators, ``C`` being the throughput its current
    replicas on its device(s) carry and ``alpha`` its cold start over the horizon (what starting the
    missing replicas costs at least). Adding an operator's choice never raises the bound, so
    partial assignments are pruned level by level."""

    ops: tuple[str, ...]
    """Operators with a device to choose, in the order they are assigned."""
    devices: tuple[tuple[str, ...], ...]
    loads: tuple[np.ndarray, ...]
    """Per operator: (devices x rows) resources per unit of T."""
    t_most: tuple[np.ndarray, ...]
    """Per operator: the most T on each device."""
    carried: tuple[np.ndarray, ...]
    """Per operator: the throughput its current replicas carry on each device."""
    alpha: np.ndarray
    """Per operator: cold start over the horizon (0 without a current plan)."""
    fixed_load: np.ndarray
    fixed_alpha: np.ndarray
    fixed_carried: np.ndarray
    t_cap: float
    cap_row: np.ndarray

    @staticmethod
    def of(problem: PlacementProblem, keys: list, caps: dict) -> _DeviceChoices | None:
        """None when no one-device operator has a choice."""
        ops = {o.name: o for o in problem.operators}
        factors = dict(zip(ops, problem.demand_factors()))
        nodes = {n.name: n for n in problem.node_types}
        cur = problem.current.as_dict() if problem.current is not None else {}
        where: dict[tuple[str, str], frozenset] = {}
        for o, d, n in keys:
            where[(o, d)] = where.get((o, d), frozenset()) | {n}
        devices: dict[str, list[str]] = {}
        for o, d in where:
            devices.setdefault(o, []).append(d)
        enum = [o for o in ops if ops[o].single_device and len(devices.get(o, ())) > 1]
        if not enum:
            return None
        everywhere = frozenset(caps)
        rows = []  # (node types, resource index, capacity)
        for group in sorted(set(where.values()) | {everywhere}, key=sorted):
            for r in range(3):
                cap = sum(math.inf if caps[n][r] is None else caps[n][r] for n in group)
                if math.isfinite(cap):
                    rows.append((group, r, cap))
        if problem.memory_limit_bytes is not None:
            rows.append((everywhere, 2, float(problem.memory_limit_bytes)))
        if problem.cpus_limit is not None:
            rows.append((everywhere, 0, float(problem.cpus_limit)))

        def per_unit(o: str, ds: list[str]) -> tuple[np.ndarray, float, float]:
            """Least resources per unit of T in each row, the most T and the T the current replicas
            carry, of operator ``o`` on devices ``ds``."""
            op, f = ops[o], factors[o]
            load = np.zeros(len(rows))
            for j, (group, r, _) in enumerate(rows):
                if all(where[(o, d)] <= group for d in ds):
                    need = [f * (op.option(d).cpus, op.option(d).gpus, op.option(d).memory_bytes)[r]
                            / op.option(d).rate_rows_per_s for d in ds if op.option(d).rate_rows_per_s > 0]
                    load[j] = min(need, default=0.0)
            most = sum(op.option(d).rate_rows_per_s * sum(_max_fit(op, op.option(d), nodes[n], per_node=False)
                                                          for n in where[(o, d)]) for d in ds)
            if op.max_replicas is not None:
                most = min(most, op.max_replicas * max(op.option(d).rate_rows_per_s for d in ds))
            carried = sum(op.option(d).rate_rows_per_s * cur.get((o, d, n), 0) for d in ds for n in where[(o, d)])
            return load, most / f, carried / f

        def alpha(o: str) -> float:
            return 0.0 if problem.current is None else ops[o].cold_start_s / problem.horizon_s

        t_cap = math.inf if problem.max_throughput_rows_per_s is None else problem.max_throughput_rows_per_s
        fixed, fixed_alpha, fixed_carried = np.zeros(len(rows)), [], []
        for o in ops:
            if o not in enum:
                load, most, carried = per_unit(o, devices.get(o, []))
                fixed += load
                t_cap = min(t_cap, most)
                if alpha(o) > 0:
                    fixed_alpha.append(alpha(o))
                    fixed_carried.append(carried)
        cap_row = np.array([c for _, _, c in rows], dtype=float)
        per = {o: [per_unit(o, [d]) for d in devices[o]] for o in enum}
        # the heaviest operators first: they prune the most
        enum.sort(key=lambda o: -min(float(np.max(p[0] / cap_row, initial=0.0)) for p in per[o]))
        return _DeviceChoices(
            ops=tuple(enum), devices=tuple(tuple(devices[o]) for o in enum),
            loads=tuple(np.array([p[0] for p in per[o]]) for o in enum),
            t_most=tuple(np.array([p[1] for p in per[o]]) for o in enum),
            carried=tuple(np.array([p[2] for p in per[o]]) for o in enum),
            alpha=np.array([alpha(o) for o in enum]), fixed_load=fixed, fixed_alpha=np.array(fixed_alpha),
            fixed_carried=np.array(fixed_carried), t_cap=t_cap, cap_row=cap_row)

    def _bounds(self, load: np.ndarray, t_most: np.ndarray, carried: np.ndarray) -> np.ndarray:
        """Bounds of states with resources ``load`` (K x rows), most T ``t_most`` (K) and the first
        ``carried.shape[1]`` operators assigned, carrying ``carried`` (K x assigned)."""
        with np.errstate(divide="ignore"):
            ratio = np.where(load > 0, self.cap_row / np.where(load > 0, load, 1.0), np.inf)
        t = np.minimum(t_most, ratio.min(axis=-1, initial=np.inf))
        alpha = np.concatenate([self.fixed_alpha, self.alpha[:carried.shape[1]]])
        if not np.any(alpha > 0):
            return t
        c = np.hstack([np.broadcast_to(self.fixed_carried, (len(t), len(self.fixed_carried))), carried])
        finite = np.where(np.isfinite(t), t, 0.0)
        cand = np.hstack([finite[:, None], np.minimum(c, finite[:, None])])  # the kinks of a concave function
        value = cand - (alpha * np.maximum(cand[:, :, None] - c[:, None, :], 0.0)).sum(axis=2)
        return np.where(np.isfinite(t), value.max(axis=1), np.inf)

    def bound(self, choice: np.ndarray) -> float:
        load = self.fixed_load + sum(ld[c] for ld, c in zip(self.loads, choice))
        t = min([self.t_cap] + [t[c] for t, c in zip(self.t_most, choice)])
        carried = np.array([[cr[c] for cr, c in zip(self.carried, choice)]])
        return float(self._bounds(load[None, :], np.array([t]), carried)[0])

    def greedy(self) -> np.ndarray:
        """An assignment chosen operator by operator, each keeping the partial bound highest."""
        load, t, carried, out = self.fixed_load, self.t_cap, np.zeros(0), []
        for ld, tm, cr in zip(self.loads, self.t_most, self.carried):
            states = np.hstack([np.broadcast_to(carried, (len(cr), len(carried))), cr[:, None]])
            c = int(np.argmax(self._bounds(load + ld, np.minimum(t, tm), states)))
            load, t, carried = load + ld[c], min(t, float(tm[c])), states[c]
            out.append(c)
        return np.array(out)

    def above(self, tau: float, *, strict: bool):
        """Every assignment whose bound is above ``tau`` (or equal, unless ``strict``), as
        (choices, bounds); None when a level would bound more than :data:`_MAX_DEVICE_CHOICES`."""
        grid = np.zeros((1, 0), dtype=np.int64)
        load, t, carried = self.fixed_load[None, :], np.array([self.t_cap]), np.zeros((1, 0))
        bounds = np.array([self.t_cap])
        for ld, tm, cr in zip(self.loads, self.t_most, self.carried):
            k, c = len(grid), len(tm)
            if k * c > _MAX_DEVICE_CHOICES:
                return None
            load = (load[:, None, :] + ld[None, :, :]).reshape(k * c, -1)
            t = np.minimum(t[:, None], tm[None, :]).reshape(-1)
            grid = np.hstack([np.repeat(grid, c, axis=0), np.tile(np.arange(c), k)[:, None]])
            carried = np.hstack([np.repeat(carried, c, axis=0), np.tile(cr, k)[:, None]])
            bounds = self._bounds(load, t, carried)
            keep = bounds > tau if strict else bounds >= tau - _TOL * max(1.0, abs(tau))
            grid, load, t, carried, bounds = grid[keep], load[keep], t[keep], carried[keep], bounds[keep]
        return grid, bounds

    def keys_of(self, keys: list, grid: np.ndarray) -> list:
        """``keys`` without the devices no assignment in ``grid`` uses."""
        used = {(o, ds[c]) for i, (o, ds) in enumerate(zip(self.ops, self.devices)) for c in set(grid[:, i].tolist())}
        chosen = set(self.ops)
        return [k for k in keys if k[0] not in chosen or (k[0], k[1]) in used]


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
                fit = min([left] + [math.floor((f[r] + (_TOL if r < 2 else 0.0)) / need[r])
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
