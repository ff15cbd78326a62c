"""Pipelines as elastic jobs of the job layer.

A pipeline job runs ``fn(*args, **kwargs)`` (a function that builds and executes a Ray
Data pipeline) in a driver thread inside its own ``trident.autoscale`` block. The job
layer holds ``min_gpus`` for it like any job and lends it more, up to ``max_gpus``, while
nobody waits; the lent GPUs are the pipeline's *GPU budget*
(:meth:`trident.autoscaler.api.Run.set_gpu_budget`), within which its controller plans. Preempting a
pipeline shrinks it back to its minimum by draining actor pools (no row lost); the
scheduler grows it again when GPUs are free. Its setup is observed: it is "setting up"
while any of its GPU actors is starting (``Run.cold_starting``), and the cost of a
shrink is the re-warm of drained actors (``Run.rewarm_s``). :func:`lend` is the lending
rule, shared by the scheduler and the simulator.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any, Callable

import numpy as np

from trident.jobs.base import MILLI_PER_GPU, Allocation, Job
from trident.jobs.capacity import Cluster


class PipelineRun:
    """One pipeline running in a driver thread under ``trident.autoscale(**autoscale)``;
    ``future`` resolves to ``fn``'s return value (or its exception)."""

    def __init__(self, fn: Callable[..., Any], args: tuple, kwargs: dict, *, name: str, budget_gpus: float,
                 autoscale: dict) -> None:
        from trident.autoscaler.api import autoscale as autoscale_block

        self.run = autoscale_block(**autoscale)
        self.run.set_gpu_budget(budget_gpus)
        self.future: Future = Future()
        self._thread = threading.Thread(target=self._main, args=(fn, args, kwargs), name=f"pipeline-{name}",
                                        daemon=True)
        self._thread.start()

    def _main(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        try:
            with self.run:
                value = fn(*args, **kwargs)
        except BaseException as exc:  # the pipeline's own failure, reported by the scheduler
            self.future.set_exception(exc)
        else:
            self.future.set_result(value)

    def set_budget(self, gpus: float) -> None:
        self.run.set_gpu_budget(gpus)


def free_devices(capacity: Cluster, gpu_model: str, gpus: int, prefer: tuple[str, ...] = ()) -> Allocation | None:
    """``gpus`` wholly free devices of ``gpu_model`` (nodes in ``prefer`` first, then the
    fullest free ones), or ``None`` when fewer are free."""
    if gpus <= 0 or gpu_model not in capacity.gpu_models:
        return None
    idx = capacity.node_indices(gpu_model)
    milli = capacity.free_milli_matrix(gpu_model)
    order = sorted(range(len(idx)), key=lambda row: (capacity.nodes[int(idx[row])].node_id not in prefer,
                                                     -int(np.sum(milli[row] == MILLI_PER_GPU))))
    devices, node_ids = [], []
    for row in order:
        for dev in np.flatnonzero(milli[row] == MILLI_PER_GPU).tolist():
            if len(devices) == gpus:
                break
            devices.append((int(idx[row]), int(dev), MILLI_PER_GPU))
            node_id = capacity.nodes[int(idx[row])].node_id
            if node_id not in node_ids:
                node_ids.append(node_id)
    if len(devices) < gpus:
        return None
    return Allocation(gpu_model=gpu_model, devices=tuple(devices), node_ids=tuple(node_ids),
                      reason=f"{gpus} free GPU(s) lent to a pipeline")


def combine(base: Allocation, extra: Allocation | None) -> Allocation:
    """``base`` plus ``extra`` (devices above a pipeline's minimum) as one allocation."""
    if extra is None:
        return base
    node_ids = base.node_ids + tuple(n for n in extra.node_ids if n not in base.node_ids)
    return Allocation(gpu_model=base.gpu_model, devices=base.devices + extra.devices, node_ids=node_ids,
                      reason=base.reason)


def held_gpus(job: Job, extra: Allocation | None) -> float:
    """GPUs a running elastic job holds: its minimum plus ``extra``, what it was lent."""
    return job.num_gpus + (extra.gpu_milli / MILLI_PER_GPU if extra is not None else 0.0)


def lend(capacity: Cluster, job: Job, base: Allocation, extra: Allocation | None) -> Allocation | None:
    """Lend a running elastic ``job`` (on ``base``, lent ``extra`` so far) the wholly free GPUs of
    its model it may still take (up to ``job.max_gpus``, on its nodes first): books them on
    ``capacity`` and returns ``extra`` grown by them, or ``None`` when it takes none."""
    model = base.gpu_model
    want = int(job.max_gpus - held_gpus(job, extra))
    more = free_devices(capacity, model, min(int(capacity.free_full_gpus(model).sum()), want),
                        prefer=base.node_ids)
    if more is None:
        return None
    capacity.allocate(job, more)
    return more if extra is None else Allocation(gpu_model=model, devices=extra.devices + more.devices,
                                                 node_ids=combine(extra, more).node_ids, reason=more.reason)
