"""Which Ray Data internals this Ray has, checked before trident touches them.

Everything the shim uses is private API. ``TESTED_RAY`` is the range it was written and
tested against; outside it, or when an attribute is missing, trident observes only (or
stays out) and warns once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TESTED_RAY = ((2, 60), (2, 61))  # [low, high)


@dataclass(frozen=True)
class Capabilities:
    """``observe``: snapshots can be built; ``actuate``: pools, caps and rollouts can be changed."""

    observe: bool
    actuate: bool
    reason: str


def ray_version() -> tuple[int, int]:
    import ray

    major, minor = ray.__version__.split(".")[:2]
    return int(major), int(minor)


_OBSERVE_EXECUTOR = ("_topology", "_resource_manager", "_backpressure_policies", "_actor_autoscaler")
_OBSERVE_METRICS = ("rows_task_outputs_generated", "bytes_task_outputs_generated", "num_tasks_running",
                    "num_tasks_finished", "num_tasks_failed", "op_task_duration_stats", "obj_store_mem_used",
                    "num_row_inputs_received", "bytes_inputs_received", "task_worker_completion_time_s",
                    "task_completion_time_s", "task_output_backpressure_time_s", "max_uss_bytes")


def _missing_actuation() -> str | None:
    try:
        from ray.data._internal.actor_autoscaler import (  # noqa: F401
            ActorAutoscaler, ActorPoolScalingRequest, _get_max_scale_up)
        from ray.data._internal.execution.backpressure_policy import BackpressurePolicy  # noqa: F401
        from ray.data._internal.execution.operators.actor_pool_map_operator import _ActorPool
        from ray.data._internal.execution.operators.task_pool_map_operator import TaskPoolMapOperator  # noqa: F401
    except ImportError as exc:
        return f"cannot import {exc.name or exc}"
    for attr in ("_release_running_actor", "_try_remove_pending_actor", "_update_rank", "scale", "current_size"):
        if not hasattr(_ActorPool, attr):
            return f"_ActorPool.{attr} is missing"
    return None


_POOL_STATE = ("_running_actors", "_pending_actors", "_alive_actors_to_in_flight_tasks_heap",
               "_alive_node_to_actor_heap")
_ACTOR_OP = ("_ray_remote_args", "_map_transformer", "_actor_cls")


def _missing_on_ops(executor: Any) -> str | None:
    for op in executor._topology:
        pools = op.get_autoscaling_actor_pools() if hasattr(op, "get_autoscaling_actor_pools") else []
        for pool in pools:
            for attr in _POOL_STATE:
                if not hasattr(pool, attr):
                    return f"actor pool of {op.name} has no {attr}"
            for attr in _ACTOR_OP:
                if not hasattr(op, attr):
                    return f"operator {op.name} has no {attr}"
    return None


def capabilities(executor: Any) -> Capabilities:
    """What trident may do with this executor on this Ray."""
    version = ray_version()
    for attr in _OBSERVE_EXECUTOR:
        if not hasattr(executor, attr):
            return Capabilities(False, False, f"Ray {'.'.join(map(str, version))}: executor has no {attr}")
    for op in executor._topology:
        for attr in _OBSERVE_METRICS:
            if not hasattr(op.metrics, attr):
                return Capabilities(False, False, f"Ray {'.'.join(map(str, version))}: op metrics have no {attr}")
    if not (TESTED_RAY[0] <= version < TESTED_RAY[1]):
        return Capabilities(True, False, f"Ray {'.'.join(map(str, version))} is outside the tested range "
                                         f"{TESTED_RAY[0][0]}.{TESTED_RAY[0][1]}..<{TESTED_RAY[1][0]}.{TESTED_RAY[1][1]}")
    missing = _missing_actuation() or _missing_on_ops(executor)
    if missing:
        return Capabilities(True, False, missing)
    return Capabilities(True, True, "ok")
