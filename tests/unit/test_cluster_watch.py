"""The cluster as the shim reports it: GPUs from the live nodes where Ray Data's reservation is
smaller, never above the user's limit or the run's GPU budget; a task operator's slot time."""
from types import SimpleNamespace

from ray.data._internal.execution.interfaces import ExecutionOptions, ExecutionResources

import trident.autoscaler.shim.metrics as metrics


TYPED = metrics.NodeCensus(4.0, (("A", 2.0), ("B", 2.0)), (("A", 6.0), ("B", 6.0)), {})
UNTYPED = metrics.NodeCensus(4.0, (), (), {})


def _watch(monkeypatch, *, reserved_gpus: float, limit_gpus: float | None = None, nodes=TYPED):
    options = ExecutionOptions()
    if limit_gpus is not None:
        options.resource_limits = options.resource_limits.copy(gpu=limit_gpus)
    rm = SimpleNamespace(_options=options,
                         get_global_limits=lambda: ExecutionResources(cpu=16, gpu=reserved_gpus, object_store_memory=1e9))
    monkeypatch.setattr(metrics, "node_census", lambda: nodes)
    return metrics.ClusterWatch(rm, None)


def test_the_typed_nodes_gpus_count_where_ray_data_reserved_fewer(monkeypatch):
    view = _watch(monkeypatch, reserved_gpus=3.5).view(0.0)
    assert view.gpus == 4.0 and dict(view.gpus_by_type) == {"A": 2.0, "B": 2.0}


def test_untyped_nodes_gpus_count_where_ray_data_reserved_fewer(monkeypatch):
    """A plain ``ray.init(num_gpus=4)``: Ray Data's coordinator reserved 3.5 of 4 GPUs for 20 s."""
    view = _watch(monkeypatch, reserved_gpus=3.5, nodes=UNTYPED).view(0.0)
    assert view.gpus == 4.0 and view.gpus_by_type == ()


def test_a_gpu_budget_still_caps_the_view(monkeypatch):
    view = _watch(monkeypatch, reserved_gpus=1.0, limit_gpus=1.0).view(0.0)
    assert view.gpus == 1.0 and dict(view.gpus_by_type) == {"A": 1.0, "B": 1.0}
    assert _watch(monkeypatch, reserved_gpus=1.0, limit_gpus=1.0, nodes=UNTYPED).view(0.0).gpus == 1.0


def _task_metrics(*, worker, completion, backpressure=0.0, scheduling=0.0, tasks=0):
    return SimpleNamespace(task_worker_completion_time_s=worker, task_completion_time_s=completion,
                           task_output_backpressure_time_s=backpressure, task_scheduling_time_s=scheduling,
                           num_tasks_task_locality_hit=tasks, num_tasks_task_locality_miss=0)


def test_a_task_slot_is_held_from_scheduling_to_completion():
    m = _task_metrics(worker=1.6, completion=20.0, backpressure=4.0)
    assert metrics._slot_s(m, 0.0) == 16.0  # 100 tasks of 16 ms work held their slots 0.16 s each
    m.task_completion_time_s = 1.0  # never less than the workers' own count
    assert metrics._slot_s(m, 0.0) == 1.6


def test_a_task_waiting_for_a_slot_does_not_hold_one():
    """Scheduling beyond the allowance per task is a wait (for resources, a worker to start),
    counted per snapshot: steady tasks after a slow start do not pay its waits back."""
    allowance = metrics.SCHEDULING_ALLOWANCE_S
    waits, op = metrics.SlotWait(), object()
    # 10 tasks, each 0.05 s of work: steady ones spent 0.2 s scheduling, these 2.0 s (actors starting)
    slow = _task_metrics(worker=0.5, completion=10 * 2.25, scheduling=10 * 2.0, tasks=10)
    waited = waits.update(op, slow)
    assert waited == 10 * (2.0 - allowance)
    assert abs(metrics._slot_s(slow, waited) - 10 * (0.25 + allowance)) < 1e-9
    # then 100 steady tasks under the allowance: the earlier waits stay waits
    steady = _task_metrics(worker=0.5 + 5.0, completion=slow.task_completion_time_s + 100 * 0.25,
                           scheduling=slow.task_scheduling_time_s + 100 * 0.2, tasks=110)
    assert waits.update(op, steady) == waited
    slot = metrics._slot_s(steady, waited) - metrics._slot_s(slow, waited)
    assert abs(slot - 100 * 0.25) < 1e-9  # the steady tasks' slots: 0.25 s each, as they ran
