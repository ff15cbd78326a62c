"""Pipelines and clusters drawn from a seed, so a policy is judged on shapes nobody picked.

:func:`draw` makes one scenario from a seed: 2-6 operators (the first reads: CPU tasks; then task
operators and actor pools of 0.25, 0.5 or 1 GPU or CPUs only), filters and fan-outs, 1-3
accelerator types with per-operator speed ratios of 1-6x, 1-16 nodes of 2-32 CPUs and 0-8 GPUs
(GPU nodes short of CPUs among them), regime changes by dataset position, actors' heaps (a base,
growing with the batch size on GPU pools) and, at times, a memory limit. :func:`work_bound_s` is the time no policy can beat:
the work of each regime phase at the best placement the nodes allow (each replica whole on one
node), every change free and instant. Pure and seeded.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from trident.autoscaler.sim.model import CPU, PipelineSpec, Regime, SimNodes, SimOperator
from trident.core.cluster import NodeShape, node_groups
from trident.core.errors import ConfigError
from trident.core.plan.milp import solve_placement
from trident.core.plan.placement import DeviceOption, NodeType, OperatorSpec, PlacementProblem

GiB = 2**30
TYPES = ("A", "B", "C")


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

    rows_per_s = 1000 / max(work_bound_s(spec_of(1000)), 1e-9)
    spec = spec_of(max(1000, int(round(rows_per_s * work_s, -2))))
    return Drawn(seed=seed, spec=spec, memory_limit_bytes=limit)


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
    """Seconds no policy can beat: each regime phase's rows at the best throughput any placement of
    replicas (whole on one node, within each operator's bounds and the memory limit) sustains,
    plus the shortest cold start of a GPU pool (nothing of it runs before one is up)."""
    cuts = sorted({0.0, *(r.start for o in spec.operators if o.regime_by == "rows" for r in o.regimes),
                   float(spec.total_rows)})
    cuts = [c for c in cuts if c <= spec.total_rows]
    total = 0.0
    for lo, hi in zip(cuts, cuts[1:]):
        if hi <= lo:
            continue
        t = _best_throughput(spec, lo)
        if t <= 0:
            return math.inf
        total += (hi - lo) / t
    colds = [o.cold_start_s for o in spec.operators if o.kind == "actor"]
    return total + (min(colds) if colds else 0.0)


def _best_throughput(spec: PipelineSpec, row: float) -> float:
    shapes = [NodeShape(node_id=f"{g}-{k}", cpus=n.cpus, gpus=n.gpus, accelerator_type=n.gpu_type if n.gpus else None)
              for g, n in enumerate(spec.nodes) for k in range(n.count)]
    nodes = tuple(NodeType(name=g.name, count=g.count, cpus=g.cpus, gpus=g.gpus, gpu_type=g.accelerator_type)
                  for g in node_groups(shapes))
    specs = []
    for o in spec.operators:
        regime = o.regime(0.0, row)
        devices = [d for d, _ in o.peak_rows_per_s] if o.num_gpus > 0 else [CPU]
        options = tuple(DeviceOption(device=d, rate_rows_per_s=o.rate_rows_per_s(d, o.batch_size, regime),
                                     cpus=o.num_cpus, gpus=o.num_gpus if d != CPU else 0.0,
                                     memory_bytes=int(o.heap_bytes(o.batch_size, regime)) if o.kind == "actor" else 0)
                        for d in devices)
        specs.append(OperatorSpec(name=o.name, options=options, selectivity=o.selectivity, min_replicas=1,
                                  max_replicas=o.max_replicas, single_device=o.kind == "actor"))
    problem = PlacementProblem(operators=tuple(specs), node_types=nodes, memory_limit_bytes=spec.memory_limit_bytes,
                               bin_packing=sum(n.count for n in nodes) <= 64, time_limit_s=10.0)
    result = solve_placement(problem)
    return result.throughput_rows_per_s if result.status != "failed" else 0.0
