"""``fgd-lookahead`` (ours): FGD with a one-step policy-improvement lookahead.

For a pod, the candidates are FGD's first :data:`LOOKAHEAD_K` nodes in its own order (score,
then the run's node order) among those within :data:`LOOKAHEAD_TOL` points of its best
score, and then the :data:`STRAND_EXTRA` nodes (not already candidates) of the most
stranding relief (below) among those within :data:`STRAND_TOL` points of FGD's best, FGD's
order on ties. Each candidate ``c`` is valued by the expected fragmentation drop
(milli-GPU) of placing the pod there *and then* one more pod drawn from the typical-pod
distribution FGD already scores with, that pod placed greedily by FGD on the cluster as
``c`` leaves it, plus the pod's stranding relief on ``c``::

    V(c) = drop_pod(c) + sum_t f_t * drop_t(FGD's node for t | pod on c) + relief(c)

A node's *stranded* GPU milli is what its free CPUs cannot feed at the typical GPU pods'
CPU per GPU milli ``r`` (their CPU requests over their GPU requests, count-weighted):
``max(0, free_gpu - free_cpu / r)``; the pod's relief on a node is the stranded milli
before minus after placing it (negative for a pod that eats CPUs a node's GPUs need).
FGD's measure sees a node's CPUs only where they fall below a typical pod's request;
the relief sees them running out before the GPUs do, which on CPU-bound pod lists
(``cpu250``, ``gpushare100``) is where GPUs are lost.

The expectation is exact over the typical shapes (no sampling, no future pods read). A
typical pod that would find no node counts as a drop of minus its GPU request. The drops
are computed exactly, with the typical shapes' pod counts in place of their frequencies
(integers; ``V`` scaled by the count squared), so candidates equal in them tie exactly
instead of by float rounding; the relief (a float, in the same scale) is added last. The
pod goes to the first candidate of the highest ``V`` in FGD's order, the extra candidates
after FGD's: FGD's own choice wins ties.

Every node's FGD score and drop for every typical shape are cached and recomputed only
for the nodes whose free resources changed since the last call.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from trident.jobs.fragmentation import (
    MILLI,
    NodeArrays,
    PodShape,
    Typical,
    sigmoid_score,
    fragmentation,
)

LOOKAHEAD_K = 4        # candidates looked at (FGD's first in its order)
LOOKAHEAD_TOL = 1      # how far below FGD's best score (points, 0-100) a candidate may be
STRAND_EXTRA = 1       # extra candidates: the nodes of the most stranding relief
STRAND_TOL = 3         # how far below FGD's best score (points) an extra candidate may be


def typical_table(gpu: np.ndarray, cpu: np.ndarray, model: np.ndarray, typ: Typical,
                  total: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """FGD's integer score (``-1`` where the shape does not fit) and fragmentation drop
    (milli-GPU) of each typical shape (columns) on each node state (rows of ``gpu``).
    ``typ.freq`` may be weights summing to ``total`` (pod counts): drops are then in those
    weights (exact for integer counts), scores still FGD's (drops divided by ``total``).

    Each shape has one variant per device: a share on that device (FGD takes the variant
    of the highest score, the first on ties), a whole-GPU pod on the first free GPUs
    (variant 0), a pod without GPUs (variant 0)."""
    m, g = gpu.shape
    n_t = len(typ.freq)
    share = (typ.num > 0) & (typ.milli < MILLI)
    whole_pod = (typ.num > 0) & ~share
    ok = (cpu[None, :] >= typ.cpu[:, None]) & (typ.models[:, model] | (typ.num == 0)[:, None])      # (T, m)
    whole = gpu >= MILLI
    sub = np.zeros((n_t, g, m, g), dtype=np.int64)
    sub[share] = typ.milli[share, None, None, None] * np.eye(g, dtype=np.int64)[:, None, :]
    sub[whole_pod, 0] = MILLI * (whole[None] & (np.cumsum(whole, axis=1)[None] <= typ.num[whole_pod, None, None]))
    valid = np.zeros((n_t, g, m), dtype=bool)
    valid[share] = ok[share, None, :] & (gpu.T[None] >= typ.milli[share, None, None])
    valid[~share, 0] = ok[~share] & (whole.sum(axis=1)[None] >= np.where(whole_pod, typ.num, 0)[~share, None])
    after = (gpu[None, None] - sub).reshape(-1, g)
    cpu_after = np.broadcast_to(cpu[None, None, :] - typ.cpu[:, None, None], (n_t, g, m)).reshape(-1)
    rows_model = np.broadcast_to(model, (n_t, g, m)).reshape(-1)
    drops = fragmentation(gpu, cpu, model, typ)[None, None, :] \
        - fragmentation(after, cpu_after, rows_model, typ).reshape(n_t, g, m)
    scores = np.where(valid, sigmoid_score(drops / total), -1)
    best = np.argmax(scores, axis=1)[:, None, :]                         # (T, 1, m): first of the highest
    score = np.take_along_axis(scores, best, axis=1)[:, 0].T
    drop = np.where(score >= 0, np.take_along_axis(drops, best, axis=1)[:, 0].T, 0.0)
    return score, drop


class Lookahead:
    """The typical shapes' scores on every node, kept current, and the candidates' values."""

    def __init__(self, typ: Typical, node_rank: np.ndarray) -> None:
        self.typ = replace(typ, freq=typ.count.astype(float))   # exact weights: the pod counts
        self.total = float(typ.count.sum())
        self.rank = np.asarray(node_rank)
        self.penalty = self.total * typ.milli * typ.num         # a typical pod that fails (count-weighted)
        self.nodes: NodeArrays | None = None
        gpu_ask = float((typ.count * typ.milli * typ.num).sum())
        cpu_ask = float((typ.count * typ.cpu)[typ.num > 0].sum())
        self.ratio = cpu_ask / gpu_ask if gpu_ask else 0.0      # typical CPU milli per GPU milli

    def _refresh(self, nodes: NodeArrays) -> None:
        if self.nodes is not nodes:
            self.nodes, changed = nodes, np.arange(len(nodes.cpu))
            self.score = np.empty((len(nodes.cpu), len(self.typ.freq)), dtype=np.int64)
            self.drop = np.empty(self.score.shape)
        else:
            changed = np.flatnonzero((self.gpu != nodes.gpu).any(axis=1) | (self.cpu != nodes.cpu))
        if len(changed):
            self.score[changed], self.drop[changed] = typical_table(nodes.gpu[changed], nodes.cpu[changed],
                                                                    nodes.model[changed], self.typ, self.total)
        self.gpu, self.cpu = nodes.gpu.copy(), nodes.cpu.copy()

    def _key(self, score: np.ndarray, nodes_idx: np.ndarray) -> np.ndarray:
        """FGD's order as one integer (higher first): score, then the run's node order."""
        n = len(self.rank)
        return np.where(score >= 0, score * (n + 1) + (n - self.rank[nodes_idx]), -1)

    def choose(self, nodes: NodeArrays, pod: PodShape, idx: np.ndarray, score: np.ndarray,
               devs: np.ndarray | None) -> int:
        """Index into ``idx`` of the node for ``pod``, given FGD's ``score`` and share devices."""
        self._refresh(nodes)
        key = self._key(score, idx)
        order = np.argsort(-key, kind="stable")
        cand = order[:LOOKAHEAD_K]
        cand = cand[score[cand] >= score.max() - LOOKAHEAD_TOL]
        relief = self.relief(nodes, pod, idx)
        if STRAND_EXTRA:
            pool = np.flatnonzero(score >= score.max() - STRAND_TOL)
            pool = pool[np.lexsort((-key[pool], -relief[pool]))]
            pool = pool[~np.isin(pool, cand)][:STRAND_EXTRA]
            cand = np.concatenate([cand, pool])
        if len(cand) < 2:
            return int(order[0])
        nodes_c = idx[cand]
        gpu, cpu, model = nodes.gpu[nodes_c], nodes.cpu[nodes_c], nodes.model[nodes_c]
        after = gpu.copy()
        for r in range(len(cand)):
            if pod.num_gpu and pod.gpu_milli < MILLI:
                after[r, devs[cand[r]]] -= pod.gpu_milli
            elif pod.num_gpu:
                after[r, np.flatnonzero(gpu[r] >= MILLI)[:pod.num_gpu]] -= MILLI
        cpu_after = cpu - pod.cpu_milli
        value = self.total * (fragmentation(gpu, cpu, model, self.typ)
                              - fragmentation(after, cpu_after, model, self.typ))
        new_score, new_drop = typical_table(after, cpu_after, model, self.typ, self.total)
        new_key = self._key(new_score, nodes_c[:, None])
        all_key = self._key(self.score, np.arange(len(self.rank))[:, None])
        cols = np.arange(all_key.shape[1])
        top2 = np.argpartition(-all_key, 1, axis=0)[:2]                  # (2, T) nodes, keys distinct
        top2 = np.where(all_key[top2[0], cols] >= all_key[top2[1], cols], top2, top2[::-1])
        for r, node in enumerate(nodes_c):
            other = np.where(top2[0] == node, top2[1], top2[0])          # FGD's node for t elsewhere
            other_key = all_key[other, cols]
            mine = new_key[r] > other_key
            gain = np.where(mine, new_drop[r], np.where(other_key >= 0, self.drop[other, cols], -self.penalty))
            value[r] += float(self.typ.freq @ gain)
        value += self.total * self.total * relief[cand]          # in V's scale (pod counts squared)
        return int(cand[int(np.argmax(value))])

    def relief(self, nodes: NodeArrays, pod: PodShape, idx: np.ndarray) -> np.ndarray:
        """Stranded GPU milli (free GPU milli the node's free CPUs cannot feed at the typical
        CPU per GPU milli) of each node of ``idx`` before ``pod`` minus after it."""
        if self.ratio <= 0:
            return np.zeros(len(idx))
        cpu = nodes.cpu[idx].astype(float)
        gpu = np.clip(nodes.gpu[idx], 0, None).sum(axis=1).astype(float)
        before = np.maximum(0.0, gpu - cpu / self.ratio)
        after = np.maximum(0.0, gpu - pod.num_gpu * pod.gpu_milli - (cpu - pod.cpu_milli) / self.ratio)
        return before - after
