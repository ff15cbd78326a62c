"""A live budget for one pipeline: the most CPUs and GPUs its operators may hold.

Two sources set it on the pipeline's run: the job layer's GPU budget
(:meth:`trident.autoscaler.api.Run.set_gpu_budget`, ``JobScheduler.submit_pipeline``) and the
cluster's arbiter (:mod:`trident.jobs.arbiter.link`: CPUs and GPUs); the lower of each
holds. The shim then (a) sets Ray Data's resource limits to it (:class:`Limits`), so the
policy's :class:`~trident.core.types.ClusterView` shows the budget as the room it plans in and
Ray Data's task operators and its own scaling stay within it, and (b) clamps the pools' targets
with :func:`fit_to_budget`, so a lowered budget drains actors at once (every row still
processed once) whatever the policy planned. Pure but for :class:`Limits`, which writes Ray
Data's resource manager.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Hashable, Mapping


def fit_to_budget(pools: Mapping[Hashable, tuple[int, float, int]], budget: float) -> dict[Hashable, int]:
    """Pool targets within ``budget`` (GPUs or CPUs): ``pools`` maps a pool to (target actors, units
    per actor, fewest actors it may keep). Removes one actor at a time from the pool holding the
    most units (ties: the first) until the pools fit, never below a pool's minimum (at least 1:
    a pool without actors would stall the pipeline). Returns the new targets."""
    out = {k: t for k, (t, _, _) in pools.items()}
    used = sum(t * g for t, g, _ in pools.values())
    while used > budget + 1e-9:
        shrinkable = [k for k, (_, g, lo) in pools.items() if g > 0 and out[k] > max(lo, 1)]
        if not shrinkable:
            break
        k = max(shrinkable, key=lambda k: out[k] * pools[k][1])
        out[k] -= 1
        used -= pools[k][1]
    return out


def lowest(*caps: float | None) -> float | None:
    """The lowest of the caps given (``None``: no cap)."""
    given = [c for c in caps if c is not None]
    return min(given) if given else None


def describe(cpus: float | None, gpus: float | None) -> str:
    """``"GPU budget 2"``, ``"budget 6 CPUs, any GPUs"``, or ``"no budget"``."""
    if cpus is None:
        return "no budget" if gpus is None else f"GPU budget {gpus:g}"
    return f"budget {cpus:g} CPUs, {'any' if gpus is None else f'{gpus:g}'} GPUs"


class Limits:
    """Ray Data's limits for one execution, kept at the run's budget. A GPU cap lowers Ray Data's
    GPU limit; a CPU cap (the arbiter's) replaces what Ray Data's own coordinator reserved for the
    dataset with the arbiter's share, CPUs and GPUs, since the arbiter now divides the cluster."""

    def __init__(self, resource_manager: Any) -> None:
        self.rm = resource_manager
        self.stock_gpu = float(resource_manager._options.resource_limits.gpu)
        self.stock_total: Callable[[], Any] = resource_manager._get_total_resources
        self.applied: tuple[float | None, float | None] = (None, None)

    def apply(self, cpus: float | None, gpus: float | None) -> bool:
        """Set the limits to ``cpus``/``gpus`` (``None``: Ray Data's own); whether they changed."""
        if (cpus, gpus) == self.applied:
            return False
        rm = self.rm
        opts = copy.copy(rm._options)
        opts.resource_limits = opts.resource_limits.copy(gpu=self.stock_gpu if gpus is None
                                                         else min(gpus, self.stock_gpu))
        rm._options = opts
        stock = self.stock_total
        rm._get_total_resources = stock if cpus is None else (
            lambda: (total := stock()).copy(cpu=cpus, gpu=total.gpu if gpus is None else gpus))
        rm._global_limits_last_update_time = 0.0
        self.applied = (cpus, gpus)
        return True
