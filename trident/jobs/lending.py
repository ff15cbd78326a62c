"""Pipelines' GPUs between their minimum and maximum under ``JobScheduler``: shrunk when a pass
preempts them, lent free whole GPUs while no job waits (:func:`~trident.jobs.pipelines.lend`, the
rule the simulator shares), and their cold starts observed. Each function changes the records it
is given and returns those whose pass view changed; the scheduler refreshes them."""
from __future__ import annotations

from trident.jobs.capacity import Cluster
from trident.jobs.pipelines import combine, lend
from trident.jobs.records import JobRecord


def shrink(r: JobRecord, cluster: Cluster, now: float, reason: str) -> None:
    """Preempting a pipeline: give back what it holds above its minimum (pools drain)."""
    cluster.release(r.job, r.extra)
    r.extra = None
    r.allocation = r.base_allocation
    r.pipeline.set_budget(r.budget_gpus)
    r.preemptions += 1
    r.events.append((now, f"shrunk to {r.budget_gpus:g} GPU(s) ({reason})"))


def grow(running: list[JobRecord], cluster: Cluster, now: float) -> list[JobRecord]:
    """Lend free whole GPUs to the running pipelines below their maximum (only while no job waits:
    the caller's to check); the pipelines grown."""
    grown = []
    for r in running:
        extra = None if r.max_gpus is None or r.base_allocation is None else lend(
            cluster, r.job, r.base_allocation, r.extra)
        if extra is None:
            continue
        r.extra = extra
        r.allocation = combine(r.base_allocation, r.extra)
        r.pipeline.set_budget(r.budget_gpus)
        r.events.append((now, f"grown to {r.budget_gpus:g} GPU(s): free GPUs and no job waiting"))
        grown.append(r)
    return grown


def watch(running: list[JobRecord], now: float) -> list[JobRecord]:
    """Observe each running pipeline's cold start (it is setting up while GPU actors start); the
    pipelines cold or cold until now. Only its own start counts as a setup: a lent GPU's warm-up
    is none (the pipeline runs meanwhile)."""
    seen = []
    for r in running:
        if r.pipeline is None:
            continue
        run = r.pipeline.run
        if run.rewarm_s is not None:
            r.setup_s = run.rewarm_s
        if run.cold_starting and r.cold_since is None:
            r.cold_since = now
        elif not run.cold_starting and r.cold_since is not None and any(e.snapshots for e in run.executions):
            r.cold_since = None
            if r.setup_ends_at is None:
                r.observed_setup_s.append(r.setup_s)
            r.setup_ends_at = now
            r.events.append((now, f"warm (actors started in {r.setup_s:.1f} s)"))
        elif r.cold_since is None:
            continue
        seen.append(r)
    return seen
