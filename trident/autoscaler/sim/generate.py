"""Pipelines and clusters drawn from a seed, so a policy is judged on shapes nobody picked.

:func:`draw` makes one scenario from a seed: 2-6 operators (the first reads: CPU tasks; then task
operators and actor pools of 0.25, 0.5 or 1 GPU or CPUs only), filters and fan-outs, 1-3
accelerator types with per-operator speed ratios of 1-6x, 1-16 nodes of 2-32 CPUs and 0-8 GPUs
(GPU nodes short of CPUs among them), regime changes by dataset position, actors' heaps (a base,
growing with the batch size on GPU pools) and, at times, a memory limit. :func:`work_bound_s` is
the time no policy can beat at the user's batch sizes (a larger batch, which trident may try, can
beat it). Pure and seeded.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from trident.autoscaler.sim.model import CPU, PipelineSpec, Regime, SimNodes, SimOperator
from trident.autoscaler.sim.pipeline import PipelineSim
from trident.core.errors import ConfigError
from trident.core.solver import silence_banner

GiB = 2**30
TYPES = ("A", "B", "C")
MAX_REDRAWS = 20


@dataclass(frozen=True)
class Drawn:
    """One drawn scenario: the pipeline and cluster, and the memory limit the policy is told."""

    seed: int
    spec: PipelineSpec
    memory_limit_bytes: int | None

    def describe(self) -> str:
        ops = " -> ".join(f"{o.name}[{o.kind}" + (f", {o.num_gpus:g} GPU" if o.num_gpus else "") + "]"
                          for o in self.spec.operators)
        nodes = ", ".join(f"{n.count} x {n.cpus:g} CPU" + (f" {n.gpus:g} GPU {n.gpu_type}" if n.gpus else "")
                          for n in self.spec.nodes)
        limit = f"; limit {self.memory_limit_bytes / GiB:.1f} GiB" if self.memory_limit_bytes else ""
        return f"seed {self.seed}: {ops}; {nodes}; {self.spec.total_rows} rows{limit}"


def draw(seed: int, *, work_s: float = 240.0) -> Drawn:
    """The scenario of ``seed``, its rows set so that its work bound is about ``work_s`` seconds."""
    if work_s <= 0:
        raise ConfigError("work_s", work_s, "seconds > 0")
    rng = np.random.default_rng(seed)
    types = TYPES[:int(rng.integers(1, 4))]
    nodes = _nodes(rng, types)
    gpu_nodes = any(n.gpus > 0 for n in nodes)
    n_ops = int(rng.integers(2, 7))
    ops = [SimOperator(name="read", kind="task", peak_rows_per_s=((CPU, float(rng.uniform(50, 400))),),
                       replicas=int(rng.integers(1, 5)), max_replicas=int(rng.integers(4, 33)))]
    for i in range(1, n_ops):
        ops.append(_operator(rng, f"op{i}", types if gpu_nodes else ()))
    changed = int(rng.integers(1, n_ops)) if rng.random() < 0.4 else None  # one operator's data changes
    scale = float(rng.choice([0.25, 0.5, 2.0, 4.0]))
    at = float(rng.uniform(0.3, 0.7))  # part-way through the dataset
    heaps = [o.heap_bytes(o.batch_size, Regime(start=0.0)) * max(o.replicas, 1) for o in ops if o.kind == "actor"]
    limit = None
    if sum(heaps) > 0 and rng.random() < 0.3:  # a limit the starting replicas fit with room to spare, not more
        limit = int(sum(heaps) * rng.uniform(1.5, 3.0))

    def spec_of(total: int) -> PipelineSpec:
        drawn = [replace(o, regimes=(Regime(start=at * total, rate_scale=scale),), regime_by="rows")
                 if i == changed else o for i, o in enumerate(ops)]
        return PipelineSpec(operators=tuple(drawn), nodes=tuple(nodes), total_rows=total, memory_limit_bytes=limit,
                            noise=0.05, spike_prob=0.02)

    for _ in range(MAX_REDRAWS):  # a cluster that cannot start one replica of each operator is drawn again
        if starts(spec_of(1000)):
            break
        nodes = _nodes(rng, types)
    else:
        nodes += [SimNodes(count=1, cpus=32.0, gpus=8.0, gpu_type=t) for t in types]
    rows_per_s = 1000 / max(_fastest_bound_s(spec_of(1000)), 1e-9)
    spec = spec_of(max(1000, int(round(rows_per_s * work_s, -2))))
    return Drawn(seed=seed, spec=spec, memory_limit_bytes=limit)


def starts(spec: PipelineSpec) -> bool:
    """Whether one replica of every operator can start at once, each whole on one node (else
    the pipeline never finishes, under any policy)."""
    sim = PipelineSim(spec, policy="static")
    return all(any(g.ready_at_s is not None for g in st.groups) for st in sim.ops)


def _nodes(rng: np.random.Generator, types: tuple[str, ...]) -> list[SimNodes]:
    out = [SimNodes(count=1, cpus=float(rng.choice([2, 4, 8, 16, 32])))]  # the head: CPUs only
    for t in types:
        gpus = float(rng.choice([1, 2, 4, 8]))
        cpus = float(rng.choice([2, 3, 4, 8, 16, 32]))  # 2-3 CPUs beside 8 GPUs: short of CPUs
        out.append(SimNodes(count=int(rng.integers(1, 6)), cpus=cpus, gpus=gpus, gpu_type=t))
    if rng.random() < 0.3:
        out.append(SimNodes(count=int(rng.integers(1, 4)), cpus=float(rng.choice([4, 8, 16]))))
    return out


def _operator(rng: np.random.Generator, name: str, types: tuple[str, ...]) -> SimOperator:
    selectivity = float(rng.choice([0.5, 1.0, 1.0, 1.0, 2.0, 3.0]))
    cold = float(rng.uniform(2, 15))
    if not types or rng.random() < 0.3:
        kind = "task" if rng.random() < 0.5 else "actor"
        return SimOperator(name=name, kind=kind, peak_rows_per_s=((CPU, float(rng.uniform(5, 200))),),
                           selectivity=selectivity, replicas=int(rng.integers(1, 4)),
                           max_replicas=int(rng.integers(4, 33)), cold_start_s=cold if kind == "actor" else 0.0,
                           heap_base_bytes=float(rng.uniform(0.2, 2.0)) * GiB if kind == "actor" else 0.0)
    base = float(rng.uniform(5, 100))
    peaks = tuple((t, base * float(rng.choice([1.0, 1.0, 2.0, 4.0, 6.0]))) for t in types)
    batch = int(rng.choice([8, 16, 32, 64]))
    return SimOperator(name=name, kind="actor", peak_rows_per_s=peaks, half_batch_rows=float(rng.uniform(0, 32)),
                       selectivity=selectivity, replicas=1, max_replicas=int(rng.integers(2, 17)),
                       batch_size=batch, num_gpus=float(rng.choice([0.25, 0.5, 1.0])), cold_start_s=cold,
                       heap_base_bytes=float(rng.uniform(0.2, 2.0)) * GiB,
                       heap_per_batch_row_bytes=float(rng.uniform(0, 0.05)) * GiB)


def work_bound_s(spec: PipelineSpec) -> float:
    """Seconds no policy can beat at the user's batch sizes: the shortest time in which the
    replica-seconds every operator needs fit the cluster, plus the shortest cold start of an actor
    pool (nothing of it runs before one is up). The dataset is cut where an operator's data
    changes (regimes by dataset position): each piece's rows are processed at that piece's rates
    and heaps, on whichever nodes and types suit them, changes free. Any schedule's replica-seconds
    satisfy the same sums: each node group's CPUs and GPUs, the memory limit and each operator's
    maximum replicas, over the run. Regimes by time count at the operator's fastest."""
    return _relaxed_seconds(spec, _pieces(spec)) + _first_cold_start_s(spec)


def _first_cold_start_s(spec: PipelineSpec) -> float:
    colds = [o.cold_start_s for o in spec.operators if o.kind == "actor"]
    return min(colds) if colds else 0.0


def _pieces(spec: PipelineSpec) -> list[tuple[float, float]]:
    """(dataset rows, dataset position) of each piece between regime changes by position."""
    cuts = sorted({r.start for o in spec.operators if o.regime_by == "rows" for r in o.regimes
                   if 0 < r.start < spec.total_rows})
    edges = [0.0, *cuts, float(spec.total_rows)]
    return [(b - a, a) for a, b in zip(edges, edges[1:])]


def _fastest_bound_s(spec: PipelineSpec) -> float:
    """:func:`work_bound_s` with every operator at its fastest regime throughout: what
    :func:`draw` sizes a scenario's rows by (kept so that a seed draws the same rows)."""
    return _relaxed_seconds(spec, [(float(spec.total_rows), None)]) + _first_cold_start_s(spec)


def _relaxed_seconds(spec: PipelineSpec, pieces: list[tuple[float, float | None]]) -> float:
    """The shortest run (seconds) whose replica-seconds process every piece's rows (an LP; HiGHS
    through pulp). A piece at position ``None`` runs every operator at its fastest regime."""
    import pulp

    silence_banner()
    groups = list(enumerate(spec.nodes))
    prob = pulp.LpProblem("work_bound", pulp.LpMinimize)
    w = pulp.LpVariable("W", lowBound=0)
    prob += w
    use: dict[int, list] = {k: [] for k, _ in groups}
    memory, f = [], 1.0
    for i, o in enumerate(spec.operators):
        devices = [d for d, _ in o.peak_rows_per_s] if o.num_gpus > 0 else [CPU]
        mine = []
        for j, (rows, at) in enumerate(pieces):
            regime = _regime_of(o, at)
            xs = []
            for k, n in groups:
                for d in devices:
                    if o.num_gpus > 0 and n.gpu_type != d:
                        continue
                    x = pulp.LpVariable(f"x{i}_{j}_{k}_{d}", lowBound=0)  # replica-seconds
                    xs.append((x, o.rate_rows_per_s(d, o.batch_size, regime)))
                    use[k].append((x, o.num_cpus, o.num_gpus))
                    if o.kind == "actor":
                        memory.append((x, o.heap_bytes(o.batch_size, regime)))
            if not xs:
                return math.inf
            prob += pulp.lpSum(r * x for x, r in xs) >= f * rows
            mine += [x for x, _ in xs]
        if o.max_replicas is not None:
            prob += pulp.lpSum(mine) <= o.max_replicas * w
        f *= o.selectivity
    for k, n in groups:
        prob += pulp.lpSum(c * x for x, c, _ in use[k]) <= n.count * n.cpus * w
        if any(g > 0 for _, _, g in use[k]):
            prob += pulp.lpSum(g * x for x, _, g in use[k]) <= n.count * n.gpus * w
    if spec.memory_limit_bytes is not None and memory:
        prob += pulp.lpSum(h / GiB * x for x, h in memory) <= spec.memory_limit_bytes / GiB * w
    prob.solve(pulp.HiGHS(msg=False) if pulp.HiGHS().available() else pulp.PULP_CBC_CMD(msg=False))
    return float(w.value()) if pulp.LpStatus[prob.status] == "Optimal" else math.inf


def _regime_of(o: SimOperator, at: float | None) -> Regime:
    """The regime ``o`` runs the piece at dataset position ``at`` in (its fastest for ``None``
    or regimes by time); the heap of its lightest regime with the latter."""
    if at is not None and o.regime_by == "rows":
        return o.regime(0.0, at)
    fastest = max([Regime(start=0.0), *o.regimes], key=lambda r: r.rate_scale)
    lightest = min([Regime(start=0.0), *o.regimes], key=lambda r: r.memory_scale)
    return replace(fastest, memory_scale=lightest.memory_scale)
