"""Each control step carries the CPU time the controller's thread spent on it (not the wall time:
what it waits for costs it nothing), and a run's summary adds them up."""
import threading
import time

from trident.autoscaler.controller.actor import Controller
from trident.core.policy import PolicyContext
from trident.core.types import ClusterView, Decision, Snapshot
from trident.report.record import ExecutionRecord, RunRecord, summarize


def _spin(seconds: float) -> None:
    t0 = time.thread_time()
    while time.thread_time() - t0 < seconds:
        pass


class _Spends:
    """Spins 50 ms of the step's own thread, then waits for another thread to spin 100 ms."""

    name = "spends"

    def __init__(self, *, context=None):
        pass

    def step(self, snapshot, now):
        _spin(0.05)
        other = threading.Thread(target=_spin, args=(0.1,))
        other.start()
        other.join()
        return Decision(time_s=now, reason="spent", kind="observe")


def test_a_step_carries_its_cpu_time_and_the_summary_adds_them_up():
    controller = Controller(policy=_Spends, context=PolicyContext())
    snap = Snapshot(execution_id="e", seq=0, time_s=0.0, operators=(), input_rows_total=0,
                    cluster=ClusterView(cpus=4, gpus=1))
    decisions = [controller.step(snap, float(k)) for k in range(3)]
    assert all(0.05 <= d.cpu_s < 0.1 for d in decisions), [d.cpu_s for d in decisions]  # the wait is not its CPU
    record = RunRecord(policy="spends", config={}, started_at="", trident_version="",
                       executions=[ExecutionRecord(execution_id="e", dataset_id="d", started_at_s=0.0,
                                                   decisions=decisions)])
    assert summarize(record)["controller_cpu_s"] == sum(d.cpu_s for d in decisions)
    assert RunRecord.from_dict(record.to_dict()) == record
