"""Summary metrics of a simulated replay, keyed as in RESULTS.md's job-layer rows."""
from __future__ import annotations

import numpy as np

from trident.sim.engine import SimResult

BOUNDED_SLOWDOWN_MIN_S = 10.0
"""Bounded slowdown divides by max(run time, this many seconds)."""


def busy_gpu_s(result: SimResult) -> float:
    """GPU-seconds held by jobs (setup included): the integral of the busy timeline."""
    t, used = result.timeline_s, result.used_gpus
    if len(t) < 2:
        return 0.0
    return float(np.sum(np.diff(t) * used[:-1]))


def summarize(result: SimResult) -> dict[str, float | int]:
    """avg/p50/p99/max JCT, queueing delay, bounded slowdown, utilisation, makespan, preemptions, waste.

    - JCT = finish - arrival; queueing delay = time spent queued (all spells).
    - bounded slowdown = mean of max(1, JCT / max(duration, 10 s)), duration on the reference GPU.
    - GPU utilisation = GPU-seconds held / (GPUs x makespan), makespan = last finish - first arrival.
    - wasted GPU-time % = setup and restore GPU-time beyond each job's one necessary setup,
      plus progress lost to restarts from zero, over all GPU-time held.
    """
    n = len(result.job_ids)
    if n == 0:
        return {"jobs": 0, "unschedulable_jobs": len(result.unschedulable)}
    jct = result.finish_s - result.arrival_s
    slowdown = np.maximum(1.0, jct / np.maximum(result.duration_s, BOUNDED_SLOWDOWN_MIN_S))
    makespan = float(result.finish_s.max() - result.arrival_s.min())
    busy = busy_gpu_s(result)
    return {
        "jobs": n,
        "unschedulable_jobs": len(result.unschedulable),
        "avg_jct_s": float(jct.mean()),
        "p50_jct_s": float(np.percentile(jct, 50)),
        "p99_jct_s": float(np.percentile(jct, 99)),
        "max_jct_s": float(jct.max()),
        "avg_queue_s": float(result.queued_s.mean()),
        "bounded_slowdown": float(slowdown.mean()),
        "gpu_util_pct": 100.0 * busy / (result.total_gpus * makespan) if makespan > 0 else 0.0,
        "makespan_s": makespan,
        "preemptions": int(result.preemptions.sum()),
        "futile_preemptions": int(result.futile_preemptions.sum()),
        "wasted_gpu_pct": 100.0 * float(result.wasted_gpu_s.sum()) / busy if busy > 0 else 0.0,
    }
