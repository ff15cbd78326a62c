"""The controller loads the batch-size search's model in the background only once a decision has
tried a batch size (the first trial needs no fit), and only once per process."""
import threading

from trident.autoscaler.controller.actor import Controller
from trident.core.policy import PolicyContext
from trident.core.types import ClusterView, Decision, OperatorTarget, Plan, Snapshot


class _Scripted:
    name = "trident"

    def __init__(self, *, context=None):
        self.targets = iter([(), (OperatorTarget(name="embed", replicas=4),),
                             (OperatorTarget(name="embed", replicas=4, batch_size=16),),
                             (OperatorTarget(name="embed", replicas=4, batch_size=32),)])

    def step(self, snapshot, now):
        targets = next(self.targets)
        plan = Plan(seq=1, targets=targets, reason="scripted", created_at_s=now) if targets else None
        return Decision(time_s=now, reason="scripted", plan=plan, kind="tune" if plan else "observe")


def test_the_model_loads_after_the_first_batch_size_trial_once(monkeypatch):
    from trident.core.optimize import safe_bo

    calls, done = [], threading.Event()
    monkeypatch.setattr(safe_bo, "warm_up", lambda: (calls.append(threading.current_thread().name), done.set()))
    controller = Controller(policy=_Scripted, context=PolicyContext())
    snap = Snapshot(execution_id="e", seq=0, time_s=0.0, operators=(), input_rows_total=0,
                    cluster=ClusterView(cpus=4, gpus=1))
    for k in range(2):  # no plan, then a plan with no batch size
        controller.step(snap, float(k))
    assert not done.wait(0.5) and calls == []
    controller.step(snap, 2.0)  # the first trial
    assert done.wait(10) and calls == ["trident-warm-up"]
    controller.step(snap, 3.0)
    assert calls == ["trident-warm-up"]
