"""FGD's GPU allocation-ratio experiment on the Alibaba 2023 (openb) node and pod lists.

Protocol (kubernetes-scheduler-simulator's experiments): the pod list is *tuned* to a total
GPU request of ``ratio`` x the cluster's GPUs (1.3) by appending random copies of its pods
(seeded), shuffled (seeded), and submitted one by one; a pod is placed by the placer or
fails (no node has its CPU, memory, GPUs or GPU model free); pods never leave. The GPU
allocation ratio (placed GPU milli / cluster GPU milli, %) is recorded each time the
arrived GPU request crosses a whole percent of the cluster (0..130). Each run shuffles
the node order (seeded); a placer's ties go to the first node in that order.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trident.core.errors import ConfigError, TraceFormatError
from trident.jobs.frag_placers import PLACERS, FragPlacer
from trident.jobs.fragmentation import MAX_GPU_MILLI, MILLI, NodeArrays, PodShape, typical_pods
EXPERIMENT_PLACERS = PLACERS + ("milp",)
POD_COLUMNS = ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli")  # gpu_spec is optional
MAX_POD_GPUS = MAX_GPU_MILLI // MILLI  # GPUs of the largest node


@dataclass(frozen=True)
class Cluster:
    """Node capacities and the GPU model names (index = ``model_idx``)."""

    cpu_milli: np.ndarray
    memory_mib: np.ndarray
    num_gpus: np.ndarray
    model_idx: np.ndarray
    models: tuple[str, ...]

    @property
    def total_gpu_milli(self) -> int:
        return int(self.num_gpus.sum()) * MILLI


def _rows(path: Path, required: tuple[str, ...]):
    """(line, row) of a CSV file with a header naming at least ``required``."""
    if not path.is_file():
        raise TraceFormatError(str(path), 0, "file not found")
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceFormatError(str(path), 1, f"missing columns {missing}")
        for r in reader:
            if None in r or None in r.values():
                raise TraceFormatError(str(path), reader.line_num, f"expected {len(reader.fieldnames)} fields")
            yield reader.line_num, r


def _whole(r: dict[str, str], col: str, most: int | None = None) -> int:
    """``r[col]`` as a whole number in 0..``most`` (no bound when None); ValueError otherwise."""
    text = r[col].strip()
    if not (text.isascii() and text.isdigit()) or (most is not None and int(text) > most):
        limits = ">= 0" if most is None else f"in 0..{most}"
        raise ValueError(f"{col}={r[col]!r}: expected a whole number {limits}")
    return int(text)


def load_nodes(path: str | Path) -> Cluster:
    """``openb_node_list_gpu_node.csv`` (sn, cpu_milli, memory_mib, gpu, model)."""
    cpu, mem, gpus, model = [], [], [], []
    for line, r in _rows(Path(path), ("cpu_milli", "memory_mib", "gpu", "model")):
        try:
            cpu.append(int(r["cpu_milli"]))
            mem.append(int(r["memory_mib"]))
            gpus.append(int(r["gpu"]))
            model.append(r["model"].strip())
        except ValueError as exc:
            raise TraceFormatError(str(path), line, str(exc)) from None
    names = tuple(sorted(set(model)))
    return Cluster(np.array(cpu), np.array(mem), np.array(gpus), np.array([names.index(m) for m in model]), names)


def load_pods(path: str | Path, cluster: Cluster) -> list[PodShape]:
    """An ``openb_pod_list_*.csv``: cpu_milli (1000 = one core), memory_mib (MiB), num_gpu
    (0..8), gpu_milli (per GPU, 0..1000, 1000 = a whole GPU) and optionally gpu_spec (the
    allowed GPU models, ``|``-separated; empty, or no column as in the ``multigpu*`` lists,
    = any model). A bad row raises TraceFormatError naming the file and line."""
    pods = []
    for line, r in _rows(Path(path), POD_COLUMNS):
        try:
            cpu, mem = _whole(r, "cpu_milli"), _whole(r, "memory_mib")
            num, milli = _whole(r, "num_gpu", MAX_POD_GPUS), _whole(r, "gpu_milli", MILLI)
        except ValueError as exc:
            raise TraceFormatError(str(path), line, str(exc)) from None
        spec = [s for s in r.get("gpu_spec", "").split("|") if s]
        mask = np.array([m in spec for m in cluster.models]) if spec and num else None
        pods.append(PodShape(cpu, mem, num if milli else 0, milli if num else 0, mask))
    if not pods:
        raise TraceFormatError(str(path), 0, "no pods")
    return pods


def tune(pods: list[PodShape], cluster: Cluster, ratio: float, rng: np.random.Generator) -> list[PodShape]:
    """Append random copies of ``pods`` until their GPU request would pass ``ratio`` x the
    cluster's GPUs (the first copy that would pass stops the tuning), then shuffle."""
    if not ratio > 0:
        raise ConfigError("ratio", ratio, "a number > 0")
    target = ratio * cluster.total_gpu_milli
    total = sum(p.total_gpu_milli for p in pods)
    out = list(pods)
    while total < target:
        p = pods[int(rng.integers(len(pods)))]
        if total + p.gpu_milli > target:
            break
        total += p.total_gpu_milli
        out.append(p)
    order = rng.permutation(len(out))
    return [out[i] for i in order]


@dataclass(frozen=True)
class AllocationCurve:
    """``allocated_pct[k]``: GPU allocation ratio (%) when the arrived GPU request first
    reached ``k`` % of the cluster (k = 0..max_pct); ``failed`` pods that found no node."""

    placer: str
    seed: int
    allocated_pct: np.ndarray
    failed: int
    pods: int


def run(cluster: Cluster, pods: list[PodShape], placer: str, *, seed: int, ratio: float = 1.3,
        max_pct: int = 130) -> AllocationCurve:
    """One run of the experiment (tuning, shuffling and ties all follow ``seed``)."""
    rng = np.random.default_rng(seed)
    seq = tune(pods, cluster, ratio, rng)
    nodes = NodeArrays(cluster.cpu_milli, cluster.memory_mib, cluster.num_gpus, cluster.model_idx)
    rank = rng.permutation(len(cluster.cpu_milli))  # the run's node order; ties go to the first
    if placer == "milp":
        from trident.sim.allocation_milp import MilpAllocPlacer

        fp = MilpAllocPlacer(nodes, cluster.models)
    else:
        fp = FragPlacer(placer, typical_pods(seq, len(cluster.models)) if placer.startswith("fgd") else None, rank)
    total = cluster.total_gpu_milli
    curve = np.full(max_pct + 1, np.nan)
    curve[0] = 0.0
    arrived = placed = 0
    failed = 0
    for pod in seq:
        arrived += pod.total_gpu_milli
        choice = fp.choose(nodes, pod, rng)
        if choice is None:
            failed += 1
        else:
            nodes.place(choice[0], pod, choice[1])
            placed += pod.total_gpu_milli
        k = min(max_pct, int(100 * arrived // total))
        if np.isnan(curve[k]):
            curve[k] = 100.0 * placed / total
    # percents skipped by one large pod take the ratio reached when they were crossed
    for k in range(1, max_pct + 1):
        if np.isnan(curve[k]):
            curve[k] = curve[k - 1] if k <= 100 * arrived // total else np.nan
    return AllocationCurve(placer, seed, curve, failed, len(seq))
