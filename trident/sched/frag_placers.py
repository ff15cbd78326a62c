"""Placers of FGD's allocation experiment ("Beware of Fragmentation", ATC'23), vectorised over nodes.

A cluster is held as arrays (:class:`NodeArrays`): free milli-CPU, free memory (MiB), free
milli-GPU per device (``-1`` where a node has fewer devices) and the GPU model per node.
A pod asks for CPU, memory and either ``num_gpu`` whole GPUs (``milli == 1000``), a share of
one GPU (``num_gpu == 1``, ``milli < 1000``) or no GPU, optionally on some GPU models.

Each placer scores the feasible nodes (higher is better, integer scores as Kubernetes
plugins return them) and picks the devices on the node. Ties go to the first node in
``node_rank`` order when one is given (the reference simulator's behaviour: its node
order is shuffled per run, and ties then always favour the same nodes, which packs), else
to a random one:

- ``random``: any feasible node, any fitting device;
- ``dotprod``: Tetris' alignment: the smallest dot product of the node's free (CPU, GPU)
  and the pod's request, both normalised by the largest node (128 CPUs, 8 GPUs);
- ``gpu-clustering``: nodes already holding pods of the same GPU shape first;
- ``gpu-packing``: shared GPUs first, then used nodes, then empty nodes;
- ``best-fit``: the least (CPU, GPU) left over, equally weighted;
- ``fgd``: the least growth of the node's expected GPU fragmentation (below);
- ``fgd-bestfit`` (ours): FGD's score, ties (frequent: scores are whole numbers) broken
  by best fit instead of at random.

Fragmentation of a node for a *typical* pod ``t`` (one of the most frequent pod shapes, with
frequency ``f_t``): if the node cannot host ``t`` (too few fitting GPUs, too few CPUs, or
wrong model) all its free GPU milli are fragmented; otherwise only the free milli on GPUs
with less free than ``t`` asks per GPU. The node's measure is ``sum_t f_t * frag_t`` (milli-GPU).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trident.errors import ConfigError

MILLI = 1000
MAX_CPU_MILLI = 128_000
MAX_GPU_MILLI = 8_000
PLACERS = ("random", "dotprod", "gpu-clustering", "gpu-packing", "best-fit", "fgd", "fgd-bestfit")
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
    """The typical pod shapes (arrays over shapes) and their frequencies (sum 1)."""

    cpu: np.ndarray
    milli: np.ndarray
    num: np.ndarray
    models: np.ndarray  # (T, n_models) bool
    freq: np.ndarray

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
    freq = np.array([c for _, c in chosen], dtype=float)
    return Typical(cpu=np.array([k[0] for k, _ in chosen]), milli=np.array([k[1] for k, _ in chosen]),
                   num=np.array([k[2] for k, _ in chosen]), models=masks, freq=freq / freq.sum())


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


def _exclusive(gpu_row: np.ndarray, num: int) -> tuple[int, ...]:
    return tuple(np.flatnonzero(gpu_row >= MILLI)[:num].tolist())


def _tightest(gpu_row: np.ndarray, milli: int) -> int:
    cand = np.flatnonzero(gpu_row >= milli)
    return int(cand[np.argmin(gpu_row[cand])])


class FragPlacer:
    """One of :data:`PLACERS`; ``choose`` returns (node, devices) or None. Pure but for
    ``rng`` (the random placer, and ties when there is no ``node_rank``)."""

    def __init__(self, name: str, typical: Typical | None = None, node_rank: np.ndarray | None = None) -> None:
        if name not in PLACERS:
            raise ConfigError("placer", name, f"one of {PLACERS}")
        if name.startswith("fgd") and typical is None:
            raise ConfigError("typical", None, "typical pods for the fgd placer")
        self.name = name
        self.typical = typical
        self.node_rank = None if node_rank is None else np.asarray(node_rank)
        self._frag: np.ndarray | None = None

    def choose(self, nodes: NodeArrays, pod: PodShape, rng: np.random.Generator) -> tuple[int, tuple[int, ...]] | None:
        idx = np.flatnonzero(nodes.feasible(pod))
        if not len(idx):
            return None
        score, share_dev = getattr(self, "_" + self.name.replace("-", "_"))(nodes, pod, idx, rng)
        best = np.flatnonzero(score == score.max())
        if len(best) == 1:
            k = int(best[0])
        elif self.node_rank is not None:
            k = int(best[np.argmin(self.node_rank[idx[best]])])
        else:
            k = int(best[rng.integers(len(best))])
        node = int(idx[k])
        if pod.num_gpu == 0:
            devs: tuple[int, ...] = ()
        elif pod.gpu_milli < MILLI and self.name == "random":
            devs = (int(rng.choice(np.flatnonzero(nodes.gpu[node] >= pod.gpu_milli))),)
        elif pod.gpu_milli < MILLI:
            devs = (int(share_dev[k]) if share_dev is not None else _tightest(nodes.gpu[node], pod.gpu_milli),)
        else:
            devs = _exclusive(nodes.gpu[node], pod.num_gpu)
        if self._frag is not None:
            self._frag[node] = np.nan                             # recomputed lazily
        return node, devs

    # --- scores over the feasible nodes ``idx`` (and the device chosen for a shared GPU) ----
    def _random(self, nodes, pod, idx, rng):
        return rng.random(len(idx)), None

    def _dotprod(self, nodes, pod, idx, rng):
        node_vec = np.stack([nodes.cpu[idx] / MAX_CPU_MILLI, nodes.gpu_left(idx) / MAX_GPU_MILLI])
        pod_vec = np.array([pod.cpu_milli / MAX_CPU_MILLI, pod.total_gpu_milli / MAX_GPU_MILLI])
        return (MAX_SCORE * (1 - pod_vec @ node_vec / 2)).astype(np.int64), None

    def _gpu_clustering(self, nodes, pod, idx, rng):
        if pod.num_gpu == 0:
            return np.zeros(len(idx), dtype=np.int64), None
        base = 25 * (MAX_GPU_MILLI - nodes.gpu_left(idx)) // MAX_GPU_MILLI
        tags = nodes.tags[idx]
        same = tags[:, pod.tag] > 0
        kinds = (tags > 0).sum(axis=1)
        level = np.where(same, np.where(kinds == 1, 75, 50), np.where(kinds == 0, 25, 0))
        return base + level, None

    def _gpu_packing(self, nodes, pod, idx, rng):
        if pod.num_gpu == 0:
            return np.zeros(len(idx), dtype=np.int64), None
        gpu = nodes.gpu[idx]
        full_free = (gpu == MILLI).sum(axis=1)
        empty_node = full_free == nodes.num_gpus[idx]
        score = np.empty(len(idx), dtype=np.int64)
        score[empty_node] = np.maximum(MAX_SCORE // 3 - full_free[empty_node], full_free[empty_node])
        for k in np.flatnonzero(~empty_node):
            row = gpu[k]
            order = np.argsort(np.where(row < 0, MILLI + 1, row), kind="stable")
            use = [d for d in order if row[d] >= pod.gpu_milli][:pod.num_gpu]
            fresh = sum(row[d] == MILLI for d in use)
            if fresh:
                score[k] = max(MAX_SCORE // 2 - fresh, MAX_SCORE // 3)
            else:
                score[k] = max(MAX_SCORE - sum(row[d] * 100 // MILLI for d in use) // 10, MAX_SCORE // 2)
        return score, None

    def _best_fit(self, nodes, pod, idx, rng):
        left = 0.5 * (nodes.cpu[idx] - pod.cpu_milli) / MAX_CPU_MILLI \
            + 0.5 * (nodes.gpu_left(idx) - pod.total_gpu_milli) / MAX_GPU_MILLI
        return ((1.0 - left) * MAX_SCORE).astype(np.int64), None

    def _fgd_bestfit(self, nodes, pod, idx, rng):
        score, dev = self._fgd(nodes, pod, idx, rng)
        return score * (MAX_SCORE + 1) + self._best_fit(nodes, pod, idx, rng)[0], dev

    def _fgd(self, nodes, pod, idx, rng):
        typ = self.typical
        if self._frag is None or len(self._frag) != len(nodes.cpu):
            self._frag = fragmentation(nodes.gpu, nodes.cpu, nodes.model, typ)
        stale = np.isnan(self._frag)
        if stale.any():
            s = np.flatnonzero(stale)
            self._frag[s] = fragmentation(nodes.gpu[s], nodes.cpu[s], nodes.model[s], typ)
        before = self._frag[idx]
        cpu_after = nodes.cpu[idx] - pod.cpu_milli
        if pod.num_gpu == 0:
            after = fragmentation(nodes.gpu[idx], cpu_after, nodes.model[idx], typ)
            return _sigmoid_score(before - after), None
        if pod.gpu_milli >= MILLI:
            gpu = nodes.gpu[idx].copy()
            for k, row in enumerate(gpu):
                row[list(_exclusive(row, pod.num_gpu))] -= pod.gpu_milli
            return _sigmoid_score(before - fragmentation(gpu, cpu_after, nodes.model[idx], typ)), None
        best = np.full(len(idx), -1, dtype=np.int64)
        dev = np.zeros(len(idx), dtype=np.int64)
        for d in range(nodes.gpu.shape[1]):
            ok = nodes.gpu[idx, d] >= pod.gpu_milli
            if not ok.any():
                continue
            gpu = nodes.gpu[idx[ok]].copy()
            gpu[:, d] -= pod.gpu_milli
            s = _sigmoid_score(before[ok] - fragmentation(gpu, cpu_after[ok], nodes.model[idx[ok]], typ))
            better = s > best[ok]
            sel = np.flatnonzero(ok)[better]
            best[sel], dev[sel] = s[better], d
        return best, dev


MAX_SCORE = 100


def _sigmoid_score(delta_milli: np.ndarray) -> np.ndarray:
    return (MAX_SCORE / (1.0 + np.exp(-delta_milli / 1000.0))).astype(np.int64)
