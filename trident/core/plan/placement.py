"""The placement problem: operators with device options, node types, an allocation of replicas,
and what an allocation achieves (throughput, objective) and breaks (:func:`violations`).

Integer replicas per (operator, device, node type) carry the pipeline throughput ``T`` (rows per
second entering the first operator). Operator ``i`` receives ``T * f_i`` rows per second, ``f_i``
being the product of the row selectivities of the operators before it, so its capacity
``sum(rate * replicas)`` must be at least ``T * f_i``. CPUs, GPUs (per accelerator type) and memory
are limited per node type (identical nodes aggregated into ``count x capacity``), and per node when
``bin_packing`` is asked. The objective subtracts a reconfiguration cost: every replica started
loses ``cold_start_s`` of its output, amortised over ``horizon_s``. :mod:`trident.core.plan.milp` solves it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from trident.core.errors import ConfigError

CPU = "cpu"
"""Device name of a replica that uses no GPU."""
ANY_GPU = "gpu"
"""Device name of a GPU replica that runs on any accelerator type."""

TOL = 1e-6
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
    upside: float = 1.0
    """How many times ``rate_rows_per_s`` the rate may turn out to be: above 1 for a prior (the
    operator never ran on this device); :mod:`trident.core.plan.headroom` sizes the others for it."""

    def __post_init__(self) -> None:
        if self.rate_rows_per_s < 0 or not math.isfinite(self.rate_rows_per_s):
            raise ConfigError(f"{self.device}.rate_rows_per_s", self.rate_rows_per_s, "a finite number >= 0")
        if not (self.upside >= 1 and math.isfinite(self.upside)):
            raise ConfigError(f"{self.device}.upside", self.upside, "a finite number >= 1")
        if self.cpus < 0 or self.gpus < 0 or self.memory_bytes < 0:
            raise ConfigError(f"{self.device}.cpus/gpus/memory_bytes", (self.cpus, self.gpus, self.memory_bytes),
                              "non-negative numbers")
        if self.device == CPU and self.gpus > 0:
            raise ConfigError(f"{self.device}.gpus", self.gpus, f"0 for device {CPU!r}")

    def fits(self, node: NodeType) -> bool:
        """Whether one replica fits on one node of ``node``'s type."""
        if self.gpus > 0 and self.device != ANY_GPU and self.device != node.gpu_type:
            return False
        if self.cpus > node.cpus + TOL or self.gpus > node.gpus + TOL:
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
    demand: float | None = None
    """Rows into this operator per row into the first one that the plan must sustain; ``None``:
    the product of the selectivities before it. A plan for the work left sets it from the rows
    each operator has still to take in: one with a queue before it has more to do than the rate
    of the operators before it asks."""

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
        if self.demand is not None and not (self.demand > 0 and math.isfinite(self.demand)):
            raise ConfigError(f"{self.name}.demand", self.demand, "None or a finite number > 0")

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
    """Limit on the summed CPUs of every replica (what the pipeline may use of the nodes' CPUs)."""
    gpus_limit: float | None = None
    """Limit on the summed GPUs of every replica (a GPU budget below the nodes' GPUs)."""
    max_throughput_rows_per_s: float | None = None
    """Upper bound on ``T`` (a rate-limited source); ``None`` for unbounded."""
    horizon_s: float = 600.0
    """Seconds over which a cold start is amortised."""
    hysteresis: float = 0.05
    """Relative throughput gain a new plan needs over a valid current plan."""
    bin_packing: bool = False
    time_limit_s: float = 1.0
    gap_rel: float = 1e-4
    """Relative MIP gap. The plan is the model's best, not one near it: a plan is issued only when
    it beats the current one by ``hysteresis``, and a near-best plan it then holds may fall
    behind as the work left moves (regime-shift's 3 + 5, 0.3% behind 4 + 4 when chosen within a
    1% gap, 8% behind 60 s later). The problems are small: solve times are unchanged (ms)."""

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
        """Rows into each operator per row into the first one (its ``demand`` where set)."""
        out, f = [], 1.0
        for op in self.operators:
            out.append(f if op.demand is None else op.demand)
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
    infeasible: bool = False
    """The solver proved that no plan meets every bound (a longer time limit cannot help)."""
    current_valid: bool = True
    """Whether the current plan meets every bound (one that does not cannot be kept, whatever
    throughput it promises)."""
    better: PlacementResult | None = None
    """Kept within the hysteresis: the better plan the solver found, as it would have been issued."""


def throughput_of(problem: PlacementProblem, allocation: Allocation) -> float:
    """Pipeline throughput (rows/s into the first operator) that ``allocation`` sustains."""
    counts = allocation.as_dict()
    t = math.inf if problem.max_throughput_rows_per_s is None else problem.max_throughput_rows_per_s
    for op, f in zip(problem.operators, problem.demand_factors()):
        cap = sum(o.rate_rows_per_s * counts.get((op.name, o.device, n.name), 0)
                  for o in op.options for n in problem.node_types)
        t = min(t, cap / f)
    return 0.0 if math.isinf(t) else t


def change_costs(problem: PlacementProblem) -> tuple[dict[Key, float], float]:
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
    up_cost, down_w = change_costs(problem)
    counts = allocation.as_dict()
    cur = problem.current.as_dict() if problem.current else {}
    cost = 0.0
    for key in set(counts) | set(cur):
        delta = counts.get(key, 0) - cur.get(key, 0)
        cost += up_cost.get(key, 0.0) * max(delta, 0) + down_w * max(-delta, 0)
    return throughput_of(problem, allocation) - cost


ONE_DEVICE = ", expected one device"
"""Ends the violation of a one-device operator whose replicas run on several devices."""


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
        if cpu > node.cpus * node.count + TOL:
            out.append(f"node type {name}: {cpu:g} CPUs > {node.cpus * node.count:g}")
        if gpu > node.gpus * node.count + TOL:
            out.append(f"node type {name}: {gpu:g} GPUs > {node.gpus * node.count:g}")
        if node.memory_bytes is not None and mem > node.memory_bytes * node.count + 0.5:
            out.append(f"node type {name}: {mem:.0f} bytes > {node.memory_bytes * node.count} bytes")
    if problem.memory_limit_bytes is not None and total_mem > problem.memory_limit_bytes + 0.5:
        out.append(f"pipeline memory {total_mem:.0f} bytes > limit {problem.memory_limit_bytes} bytes")
    total_cpus = sum(u[0] for u in used.values())
    if problem.cpus_limit is not None and total_cpus > problem.cpus_limit + TOL:
        out.append(f"pipeline CPUs {total_cpus:g} > limit {problem.cpus_limit:g}")
    total_gpus = sum(u[1] for u in used.values())
    if problem.gpus_limit is not None and total_gpus > problem.gpus_limit + TOL:
        out.append(f"pipeline GPUs {total_gpus:g} > limit {problem.gpus_limit:g}")
    for op in problem.operators:
        r = allocation.replicas(op.name)
        if r < op.min_replicas or (op.max_replicas is not None and r > op.max_replicas):
            out.append(f"{op.name}: {r} replicas outside [{op.min_replicas}, {op.max_replicas}]")
        if op.single_device and len(allocation.by_device(op.name)) > 1:
            out.append(f"{op.name}: replicas on {sorted(allocation.by_device(op.name))}{ONE_DEVICE}")
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
        if cpu > node.cpus + TOL or gpu > node.gpus + TOL or (
                node.memory_bytes is not None and mem > node.memory_bytes + 0.5):
            out.append(f"node {n}[{k}] over capacity: cpus {cpu:g}, gpus {gpu:g}, memory {mem:.0f}")
    if agg != allocation.as_dict():
        out.append("per-node placement does not add up to the per-node-type counts")
    return out



def max_fit(op: OperatorSpec, o: DeviceOption, node: NodeType, *, per_node: bool) -> int:
    """Most replicas of option ``o`` that one node (or every node of the type) can hold."""
    count = 1 if per_node else node.count
    limits = [op.max_replicas] if op.max_replicas is not None else []
    for need, have in ((o.cpus, node.cpus), (o.gpus, node.gpus),
                       (o.memory_bytes, node.memory_bytes)):
        if need > 0 and have is not None:
            limits.append(int(math.floor(have * count / need + TOL)))
    return min(limits) if limits else 10**6


