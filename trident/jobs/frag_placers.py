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
  each valued with that stranding (:mod:`trident.jobs.frag_lookahead`).
"""
from __future__ import annotations

import numpy as np

from trident.core.errors import ConfigError
from trident.jobs.fragmentation import (MAX_CPU_MILLI, MAX_GPU_MILLI, MAX_SCORE, MILLI, NodeArrays, PodShape, Typical,
                                        frag_drop, sigmoid_score)

PLACERS = ("random", "dotprod", "gpu-clustering", "gpu-packing", "best-fit", "fgd", "fgd-bestfit", "fgd-tight",
           "fgd-tight-shared", "fgd-tight-tol", "fgd-lookahead")
TIGHT_TOLERANCE = 1  # fgd-tight-tol: how far (score points, 0-100) below FGD's best a tight node may score


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
        return frag_drop(nodes, pod, idx, self.typical, sigmoid_score)

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
            from trident.jobs.frag_lookahead import Lookahead

            rank = self.node_rank if self.node_rank is not None else np.arange(len(nodes.cpu))
            self.lookahead = Lookahead(self.typical, rank)
        out = score.copy()
        out[self.lookahead.choose(nodes, pod, idx, score, dev)] = score.max() + 1
        return out, dev
