"""A live GPU budget for one pipeline: the most GPUs its actor pools may hold.

The job layer (``JobScheduler.submit_pipeline``) sets it on the pipeline's run
(:meth:`trident.autoscaler.api.Run.set_gpu_budget`); the shim then (a) caps Ray Data's resource
limits, so the policy's :class:`~trident.core.types.ClusterView` shows the budget as the room
it plans in and Ray Data scales up within it, and (b) clamps the pools' targets with
:func:`fit_to_budget`, so a lowered budget drains actors at once (every row still
processed once) whatever the policy planned. Pure.
"""
from __future__ import annotations

from typing import Hashable, Mapping


def fit_to_budget(pools: Mapping[Hashable, tuple[int, float, int]], budget_gpus: float) -> dict[Hashable, int]:
    """Pool targets within ``budget_gpus``: ``pools`` maps a pool to (target actors, GPUs per
    actor, fewest actors it may keep). Removes one actor at a time from the pool holding the
    most GPUs (ties: the first) until the GPU pools fit, never below a pool's minimum (at
    least 1: a pool without actors would stall the pipeline). Returns the new targets."""
    out = {k: t for k, (t, _, _) in pools.items()}
    used = sum(t * g for t, g, _ in pools.values())
    while used > budget_gpus + 1e-9:
        shrinkable = [k for k, (_, g, lo) in pools.items() if g > 0 and out[k] > max(lo, 1)]
        if not shrinkable:
            break
        k = max(shrinkable, key=lambda k: out[k] * pools[k][1])
        out[k] -= 1
        used -= pools[k][1]
    return out
