"""Built-in placers: first-fit, best-fit and speed-aware (heterogeneity-aware best-fit).

A fraction of a GPU goes on one device; a whole number of GPUs goes on one node
when some node is large enough, else is spread over the nodes of one GPU model
(fullest-free nodes first). CPUs and memory must fit on single-node placements.
"""
from __future__ import annotations

import numpy as np

from trident.jobs.base import MILLI_PER_GPU, PLACERS, Allocation, CapacityView, Job

_BIG = np.iinfo(np.int64).max


def _node_ok(job: Job, cap: CapacityView, model: str, ok: np.ndarray) -> np.ndarray:
    """Narrow a per-node mask to nodes with the job's CPUs and memory free."""
    if job.cpus:
        ok &= cap.free_cpus(model) >= job.cpus - 1e-9
    if job.memory_mib:
        ok &= cap.free_memory_mib(model) >= job.memory_mib - 1e-9
    return ok


def _candidate(job: Job, cap: CapacityView, model: str, best: bool) -> tuple[int, Allocation] | None:
    """The first (or best) spot for ``job`` on nodes of ``model``: (leftover milli, allocation)."""
    need = job.gpu_milli
    idx = cap.node_indices(model)
    matrix = cap.free_milli_matrix(model)
    if need < MILLI_PER_GPU:
        rows = np.flatnonzero(_node_ok(job, cap, model, cap.max_free_milli(model) >= need))
        if len(rows) == 0:
            return None
        if best:
            sub = matrix[rows]
            flat = int(np.argmin(np.where(sub >= need, sub, _BIG)))
            r, dev = divmod(flat, matrix.shape[1])
            row = int(rows[r])
        else:
            row = int(rows[0])
            dev = next(d for d, free in enumerate(matrix[row].tolist()) if free >= need)
        node = int(idx[row])
        return int(matrix[row, dev]) - need, Allocation(model, ((node, dev, need),), (cap.nodes[node].node_id,))
    k = need // MILLI_PER_GPU
    full = cap.free_full_gpus(model)
    if k <= matrix.shape[1]:
        rows = np.flatnonzero(_node_ok(job, cap, model, full >= k))
        if len(rows) == 0:
            return None
        row = int(rows[np.argmin(full[rows])]) if best else int(rows[0])
        node = int(idx[row])
        devs = [d for d, free in enumerate(matrix[row].tolist()) if free == MILLI_PER_GPU][:k]
        return (int(full[row]) - k) * MILLI_PER_GPU, Allocation(
            model, tuple((node, d, MILLI_PER_GPU) for d in devs), (cap.nodes[node].node_id,))
    if int(full.sum()) < k:
        return None
    order = np.argsort(-full, kind="stable") if best else np.arange(len(full))
    devices: list[tuple[int, int, int]] = []
    node_ids: list[str] = []
    for row in order.tolist():
        if full[row] <= 0:
            continue
        node = int(idx[row])
        take = [d for d, free in enumerate(matrix[row].tolist()) if free == MILLI_PER_GPU][: k - len(devices)]
        devices.extend((node, d, MILLI_PER_GPU) for d in take)
        node_ids.append(cap.nodes[node].node_id)
        if len(devices) == k:
            break
    return (int(full.sum()) - k) * MILLI_PER_GPU, Allocation(model, tuple(devices), tuple(node_ids))


class _FitPlacer:
    name = ""
    best = False

    def place(self, job: Job, capacity: CapacityView) -> Allocation | None:
        if not capacity.may_fit(job):
            return None
        models = capacity.candidate_models(job)
        chosen: tuple[int, Allocation] | None = None
        for m in models:
            c = _candidate(job, capacity, m, self.best)
            if c is None:
                continue
            if not self.best:
                chosen = c
                break
            if chosen is None or c[0] < chosen[0]:
                chosen = c
        if chosen is None:
            return None
        leftover, alloc = chosen
        return Allocation(alloc.gpu_model, alloc.devices, alloc.node_ids,
                          reason=f"{self.name}: {alloc.gpu_model} on {','.join(alloc.node_ids)}, "
                                 f"{leftover / MILLI_PER_GPU:g} GPUs left there")


@PLACERS.register("first-fit")
class FirstFitPlacer(_FitPlacer):
    """The first node (in cluster order, models alphabetically) where the job fits."""

    name = "first-fit"
    best = False


@PLACERS.register("best-fit")
class BestFitPlacer(_FitPlacer):
    """The spot that leaves the least free capacity behind (tightest node or device)."""

    name = "best-fit"
    best = True


@PLACERS.register("speed")
class SpeedAwarePlacer(_FitPlacer):
    """Heterogeneity-aware: the fastest GPU model for this job that fits now, best-fit within it."""

    name = "speed"
    best = True

    def place(self, job: Job, capacity: CapacityView) -> Allocation | None:
        if not capacity.may_fit(job):
            return None
        models = sorted(capacity.candidate_models(job), key=lambda m: (-job.speed_on(m), m))
        for m in models:
            c = _candidate(job, capacity, m, True)
            if c is not None:
                alloc = c[1]
                return Allocation(alloc.gpu_model, alloc.devices, alloc.node_ids,
                                  reason=f"speed: {m} (x{job.speed_on(m):g}) on {','.join(alloc.node_ids)}")
        return None
