"""The cluster as the shim reports it: GPUs from the typed nodes where Ray Data's reservation is
smaller, never above the user's limit or the run's GPU budget; a task operator's slot time."""
from types import SimpleNamespace

from ray.data._internal.execution.interfaces import ExecutionOptions, ExecutionResources

import trident.ray_data.metrics as metrics


def _watch(monkeypatch, *, reserved_gpus: float, limit_gpus: float | None = None):
    options = ExecutionOptions()
    if limit_gpus is not None:
        options.resource_limits = options.resource_limits.copy(gpu=limit_gpus)
    rm = SimpleNamespace(_options=options,
                         get_global_limits=lambda: ExecutionResources(cpu=16, gpu=reserved_gpus, object_store_memory=1e9))
    monkeypatch.setattr(metrics, "typed_nodes", lambda: ((("A", 2.0), ("B", 2.0)), (("A", 6.0), ("B", 6.0)), {}))
    return metrics.ClusterWatch(rm, None)


def test_the_typed_nodes_gpus_count_where_ray_data_reserved_fewer(monkeypatch):
    view = _watch(monkeypatch, reserved_gpus=3.5).view(0.0)
    assert view.gpus == 4.0 and dict(view.gpus_by_type) == {"A": 2.0, "B": 2.0}


def test_a_gpu_budget_still_caps_the_view(monkeypatch):
    view = _watch(monkeypatch, reserved_gpus=1.0, limit_gpus=1.0).view(0.0)
    assert view.gpus == 1.0 and dict(view.gpus_by_type) == {"A": 1.0, "B": 1.0}


def test_a_task_slot_is_held_from_scheduling_to_completion():
    m = SimpleNamespace(task_worker_completion_time_s=1.6, task_completion_time_s=20.0,
                        task_output_backpressure_time_s=4.0)
    assert metrics._slot_s(m) == 16.0  # 100 tasks of 16 ms work held their slots 0.16 s each
    m.task_completion_time_s = 1.0  # never less than the workers' own count
    assert metrics._slot_s(m) == 1.6
