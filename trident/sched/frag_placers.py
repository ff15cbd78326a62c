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
  by best fit instead of at random;
- ``fgd-tight`` (ours): a GPU share goes to the device it fits most tightly (least free
  milli left on it), ties by FGD's score; other pods as FGD. (When the cluster fills, FGD
  leaves its free capacity as slivers of shared GPUs; packing shares tighter keeps more
  GPUs whole.)
- ``fgd-tight-shared`` (ours): as ``fgd-tight``, but only on nodes without a whole free
  GPU; a node that still has one is ranked as if its tightest device were whole (FGD
  decides among those), so nodes with whole free GPUs stay whole for whole-GPU pods;
- ``fgd-tight-tol`` (ours): as ``fgd-tight``, but only among the nodes whose FGD score is
  within :data:`TIGHT_TOLERANCE` of the best; the others rank below them, as FGD;
- ``fgd-lookahead`` (ours): FGD with a one-step lookahead over its first few near-best
  nodes and the near-best node where the pod strands the fewest GPUs for want of CPUs,
  each valued with that stranding (:mod:`trident.sched.frag_lookahead`).

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
PLACERS = ("random", "dotprod", "gpu-clustering", "gpu-packing", "best-fit", "fgd", "fgd-bestfit", "fgd-tight",
           "fgd-tight-shared", "fgd-tight-tol", "fgd-lookahead")
TIGHT_TOLERANCE = 1  # fgd-tight-tol: how far (score points, 0-100) below FGD's best a tight node may score
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
        self.lookahead = None

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
        return frag_drop(nodes, pod, idx, self.typical, _sigmoid_score)

    def _fgd_tight(self, nodes, pod, idx, rng):
        score, dev = self._fgd(nodes, pod, idx, rng)
        if dev is None:
            return score, dev
        free = np.where(nodes.gpu[idx] >= pod.gpu_milli, nodes.gpu[idx], 2 * MILLI)
        return (MILLI - free.min(axis=1) + pod.gpu_milli) * (MAX_SCORE + 1) + score, free.argmin(axis=1)

    def _fgd_tight_shared(self, nodes, pod, idx, rng):
        score, dev = self._fgd(nodes, pod, idx, rng)
        if dev is None:
            return score, dev
        gpu = nodes.gpu[idx]
        shared = ~(gpu >= MILLI).any(axis=1)
        free = np.where(gpu >= pod.gpu_milli, gpu, 2 * MILLI)
        tight = np.where(shared, free.min(axis=1), MILLI)
        return (MILLI - tight + pod.gpu_milli) * (MAX_SCORE + 1) + score, \
            np.where(shared, free.argmin(axis=1), dev)

    def _fgd_tight_tol(self, nodes, pod, idx, rng):
        score, dev = self._fgd(nodes, pod, idx, rng)
        if dev is None:
            return score, dev
        near = score >= score.max() - TIGHT_TOLERANCE
        free = np.where(nodes.gpu[idx] >= pod.gpu_milli, nodes.gpu[idx], 2 * MILLI)
        rank = (MILLI - free.min(axis=1) + pod.gpu_milli) * (MAX_SCORE + 1) + score
        return np.where(near, rank + 2 * MILLI * (MAX_SCORE + 1), score), \
            np.where(near, free.argmin(axis=1), dev)

    def _fgd_lookahead(self, nodes, pod, idx, rng):
        score, dev = self._fgd(nodes, pod, idx, rng)
        if self.lookahead is None:
            from trident.sched.frag_lookahead import Lookahead

            rank = self.node_rank if self.node_rank is not None else np.arange(len(nodes.cpu))
            self.lookahead = Lookahead(self.typical, rank)
        out = score.copy()
        out[self.lookahead.choose(nodes, pod, idx, score, dev)] = score.max() + 1
        return out, dev


MAX_SCORE = 100


def _sigmoid_score(delta_milli: np.ndarray) -> np.ndarray:
    return (MAX_SCORE / (1.0 + np.exp(-delta_milli / 1000.0))).astype(np.int64)
