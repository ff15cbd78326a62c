"""Fragmentation measures of FGD ("Beware of Fragmentation", ATC'23) over a cluster held as arrays.

A cluster is held as arrays (:class:`NodeArrays`): free milli-CPU, free memory (MiB), free
milli-GPU per device (``-1`` where a node has fewer devices) and the GPU model per node.

Fragmentation of a node for a *typical* pod ``t`` (one of the most frequent pod shapes, with
frequency ``f_t``): if the node cannot host ``t`` (too few fitting GPUs, too few CPUs, or
wrong model) all its free GPU milli are fragmented; otherwise only the free milli on GPUs
with less free than ``t`` asks per GPU. The node's measure is ``sum_t f_t * frag_t`` (milli-GPU).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trident.core.errors import ConfigError

MILLI = 1000
MAX_CPU_MILLI = 128_000
MAX_GPU_MILLI = 8_000
MAX_SCORE = 100
TAGS = ("share", "1", "2", "4", "8", "other")


@dataclass(frozen=True)
class PodShape:
    """One pod's request. ``models`` is a boolean mask over the cluster's GPU models
    (``None`` = any)."""

    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    models: np.ndarray | None = None

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    @property
    def tag(self) -> int:
        if self.num_gpu == 0:
            return -1
        if self.gpu_milli < MILLI:
            return 0
        return {1: 1, 2: 2, 4: 3, 8: 4}.get(self.num_gpu, 5)


class NodeArrays:
    """Mutable free resources of every node (the only state a placer reads)."""

    def __init__(self, cpu_milli, memory_mib, num_gpus, model_idx) -> None:
        self.cpu = np.asarray(cpu_milli, dtype=np.int64).copy()
        self.mem = np.asarray(memory_mib, dtype=np.int64).copy()
        self.num_gpus = np.asarray(num_gpus, dtype=np.int64)
        self.model = np.asarray(model_idx, dtype=np.int64)
        g = int(self.num_gpus.max()) if len(self.num_gpus) else 0
        self.gpu = np.where(np.arange(g)[None, :] < self.num_gpus[:, None], MILLI, -1).astype(np.int64)
        self.tags = np.zeros((len(self.cpu), len(TAGS)), dtype=np.int64)
        if (self.cpu < 0).any() or (self.mem < 0).any() or (self.num_gpus < 0).any():
            raise ConfigError("nodes", "negative capacity", "cpu, memory and GPUs >= 0")

    def gpu_left(self, idx=slice(None)) -> np.ndarray:
        return np.clip(self.gpu[idx], 0, None).sum(axis=-1)

    def feasible(self, pod: PodShape) -> np.ndarray:
        ok = (self.cpu >= pod.cpu_milli) & (self.mem >= pod.memory_mib)
        if pod.num_gpu:
            ok &= (self.gpu >= pod.gpu_milli).sum(axis=1) >= pod.num_gpu
            if pod.models is not None:
                ok &= pod.models[self.model]
        return ok

    def place(self, node: int, pod: PodShape, devices: tuple[int, ...]) -> None:
        self.cpu[node] -= pod.cpu_milli
        self.mem[node] -= pod.memory_mib
        for d in devices:
            self.gpu[node, d] -= pod.gpu_milli
        if pod.tag >= 0:
            self.tags[node, pod.tag] += 1


@dataclass(frozen=True)
class Typical:
    """The typical pod shapes (arrays over shapes), their frequencies (sum 1) and, where
    known, the pod counts the frequencies come from."""

    cpu: np.ndarray
    milli: np.ndarray
    num: np.ndarray
    models: np.ndarray  # (T, n_models) bool
    freq: np.ndarray
    count: np.ndarray | None = None

    def groups(self):
        """Shapes grouped by GPU request: (milli, num, model mask, sorted CPU requests,
        cumulative frequency by CPU request with a leading 0)."""
        if not hasattr(self, "_groups"):
            keys: dict[tuple, list[int]] = {}
            for i in range(len(self.freq)):
                keys.setdefault((int(self.milli[i]), int(self.num[i]), self.models[i].tobytes()), []).append(i)
            out = []
            for (milli, num, _), idx in keys.items():
                order = np.argsort(self.cpu[idx], kind="stable")
                cpu_sorted = self.cpu[idx][order]
                out.append((milli, num, self.models[idx[0]], cpu_sorted,
                            np.concatenate([[0.0], np.cumsum(self.freq[idx][order])])))
            object.__setattr__(self, "_groups", out)
        return self._groups


def typical_pods(pods: list[PodShape], n_models: int, *, popularity: float = 0.95, step: int = 1) -> Typical:
    """The most frequent pod shapes (CPU-only ones included) covering ``popularity`` of all
    pods, taken ``step`` shapes at a time, frequencies renormalised over those kept."""
    counts: dict[tuple, int] = {}
    for p in pods:
        key = (p.cpu_milli, p.gpu_milli, p.num_gpu,
               tuple(np.flatnonzero(p.models)) if p.models is not None else None)
        counts[key] = counts.get(key, 0) + 1
    if not counts:
        raise ConfigError("pods", "none", "at least one pod")
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0][:3]))
    total = sum(counts.values())
    k = covered = 0
    while k < len(ranked) and covered < popularity * total:
        for _, c in ranked[k:k + step]:
            covered += c
        k = min(len(ranked), k + step)
    chosen = ranked[:k]
    masks = np.ones((len(chosen), n_models), dtype=bool)
    for i, ((_, _, _, models), _) in enumerate(chosen):
        if models is not None:
            masks[i] = False
            masks[i, list(models)] = True
    count = np.array([c for _, c in chosen])
    return Typical(cpu=np.array([k[0] for k, _ in chosen]), milli=np.array([k[1] for k, _ in chosen]),
                   num=np.array([k[2] for k, _ in chosen]), models=masks, freq=count / count.sum(), count=count)


def fragmentation(gpu: np.ndarray, cpu: np.ndarray, model: np.ndarray, typ: Typical) -> np.ndarray:
    """Expected fragmented milli-GPU of each node (rows of ``gpu``) under the typical pods.

    A typical pod without GPUs counts all free GPU milli (it can use none of them)."""
    free = np.clip(gpu, 0, None)                                  # (M, G)
    total = free.sum(axis=1).astype(float)                        # (M,)
    out = total * typ.freq.sum()
    for milli, num, models, cpu_sorted, cum_freq in typ.groups():
        if milli == 0:
            continue
        fits = free >= milli
        ok = (fits.sum(axis=1) >= num) & models[model]
        # frequency of the group's shapes whose CPU request the node still has
        weight = cum_freq[np.searchsorted(cpu_sorted, cpu, side="right")]
        small = (free * ~fits).sum(axis=1)
        out -= np.where(ok, weight * (total - small), 0.0)
    return out


def frag_drop(nodes: NodeArrays, pod: PodShape, idx: np.ndarray, typ: Typical, score=lambda d: d):
    """``score`` of each feasible node's fragmentation drop (before - after placing ``pod``,
    milli-GPU) and, for a shared GPU, the device of the highest score (the first on ties).

    Nodes in one state (free milli per device, GPU model, and where their free CPUs stand
    against the typical pods' CPU requests before and after) are evaluated once."""
    gpu, cpu, model = nodes.gpu[idx], nodes.cpu[idx], nodes.model[idx]
    cpu_after = cpu - pod.cpu_milli
    levels = np.unique(typ.cpu)
    first, inv = _distinct_rows(np.column_stack([gpu + 1, np.searchsorted(levels, cpu, side="right"),
                                                 np.searchsorted(levels, cpu_after, side="right"), model]))
    g, c, ca, m = gpu[first], cpu[first], cpu_after[first], model[first]
    before = fragmentation(g, c, m, typ)
    if pod.num_gpu == 0:
        return score(before - fragmentation(g, ca, m, typ))[inv], None
    if pod.gpu_milli >= MILLI:
        whole = g >= MILLI
        taken = whole & (np.cumsum(whole, axis=1) <= pod.num_gpu)   # the first free GPUs
        return score(before - fragmentation(g - taken * MILLI, ca, m, typ))[inv], None
    best = np.full(len(first), -np.inf)
    dev = np.zeros(len(first), dtype=np.int64)
    for d in range(g.shape[1]):
        ok = np.flatnonzero(g[:, d] >= pod.gpu_milli)
        if not len(ok):
            continue
        after = g[ok].copy()
        after[:, d] -= pod.gpu_milli
        s = score(before[ok] - fragmentation(after, ca[ok], m[ok], typ))
        better = s > best[ok]
        best[ok[better]], dev[ok[better]] = s[better], d
    return best[inv], dev[inv]


def _distinct_rows(cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of non-negative integers: index of one row per distinct row, and each row's
    distinct row (``np.unique(axis=0)``'s index and inverse, without its slow row sort)."""
    widths = [max(1, int(v).bit_length()) for v in cols.max(axis=0)]
    words, word, used = [], np.zeros(len(cols), dtype=np.int64), 0
    for j, w in enumerate(widths):
        if used + w > 62:
            words.append(word)
            word, used = np.zeros(len(cols), dtype=np.int64), 0
        word = word | (cols[:, j].astype(np.int64) << used)
        used += w
    words.append(word)
    order = np.lexsort(words[::-1])
    new = np.ones(len(cols), dtype=bool)
    new[1:] = np.logical_or.reduce([w[order][1:] != w[order][:-1] for w in words])
    group = np.cumsum(new) - 1
    inv = np.empty(len(cols), dtype=np.int64)
    inv[order] = group
    return order[new], inv


def sigmoid_score(delta_milli: np.ndarray) -> np.ndarray:
    return (MAX_SCORE / (1.0 + np.exp(-delta_milli / 1000.0))).astype(np.int64)
