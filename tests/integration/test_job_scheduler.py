"""JobScheduler on a real local Ray with logical GPUs: every job completes exactly once,
in the policy's order, and the preemption path evicts and restarts a job."""
import os
import sys
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from trident.errors import ConfigError  # noqa: E402
from trident.sched.base import Verdict  # noqa: E402
from trident.sched.preempt import LazyPreemptor  # noqa: E402
from trident.sched.scheduler import JobScheduler  # noqa: E402

GPUS = 2


@pytest.fixture(scope="module", autouse=True)
def ray_cluster():
    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module
    ray.init(num_cpus=4, num_gpus=GPUS, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


class ByPriority:
    """Highest ``priority`` first, then arrival. ``preemptive`` ranks running jobs too."""

    name = "by-priority"
    oracle = False
    placer = "first-fit"

    def __init__(self, preemptive: bool = False) -> None:
        self.preemptive = preemptive

    def order(self, state, rng: np.random.Generator):
        views = [*state.queued, *(state.running.values() if self.preemptive else ())]
        return tuple(v.job_id for v in sorted(views, key=lambda v: (-v.job.priority, v.job.arrival_s, v.job_id)))


def _work(tag: str, seconds: float) -> tuple[str, float]:
    time.sleep(seconds)
    return tag, time.time()


def test_oracle_plug_ins_and_unknown_modes_are_refused():
    with pytest.raises(ConfigError, match="non-oracle"):
        JobScheduler(policy="srtf")
    with pytest.raises(ConfigError, match="preemption"):
        JobScheduler(preemption="sometimes")


def test_every_job_completes_exactly_once_with_its_gpus():
    sched = JobScheduler(policy="fifo", preemption="never", placement="milp")
    ids = [sched.submit(_work, f"t{i}", 0.2, num_gpus=g) for i, g in enumerate([1, 0.5, 0.5, 2, 1])]
    results = sched.run(timeout_s=60)
    assert sorted(results) == sorted(ids)
    assert [results[j][0] for j in ids] == [f"t{i}" for i in range(5)]
    assert all(sched.record(j).attempts == 1 for j in ids)
    assert sorted(sched.starts) == sorted(ids)  # started exactly once each


def test_priority_order_is_respected_when_gpus_are_scarce():
    sched = JobScheduler(policy=ByPriority(), preemption="never")
    low = [sched.submit(_work, f"low{i}", 0.3, num_gpus=GPUS, priority=0, name=f"low{i}") for i in range(2)]
    high = sched.submit(_work, "high", 0.3, num_gpus=GPUS, priority=5, name="high")
    results = sched.run(timeout_s=60)
    assert set(results) == {*low, high}
    # All three need the whole cluster, so they run one by one, highest priority first.
    assert sched.starts == ["high", "low0", "low1"]
    finish = {j: results[j][1] for j in results}
    assert finish["high"] < finish["low0"] < finish["low1"]


def test_eager_preemption_evicts_and_restarts_the_victim():
    sched = JobScheduler(policy=ByPriority(preemptive=True), preemption="eager")
    sched.submit(_work, "victim", 1.5, num_gpus=GPUS, priority=0, name="victim")
    # Let the victim start first, then submit the urgent job while it runs.
    import threading

    def later():
        time.sleep(0.8)
        sched.submit(_work, "urgent", 0.2, num_gpus=1, priority=9, name="urgent")

    t = threading.Thread(target=later)
    t.start()
    results = sched.run(timeout_s=90)
    t.join()
    assert set(results) == {"victim", "urgent"}
    victim = sched.record("victim")
    assert victim.preemptions == 1 and victim.attempts == 2
    assert results["urgent"][1] < results["victim"][1]
    assert any(d[2] == "victim" and d[3] == Verdict.PREEMPT_NOW.value for d in sched.decisions)


def test_lazy_preemption_holds_off_while_the_victim_sets_up():
    sched = JobScheduler(policy=ByPriority(preemptive=True), preemption=LazyPreemptor())
    sched.submit(_work, "victim", 1.2, num_gpus=GPUS, priority=0, name="victim", setup_s=600.0)
    import threading

    def later():
        time.sleep(0.5)
        sched.submit(_work, "urgent", 0.1, num_gpus=1, priority=9, name="urgent")

    t = threading.Thread(target=later)
    t.start()
    results = sched.run(timeout_s=90)
    t.join()
    assert set(results) == {"victim", "urgent"}
    assert sched.record("victim").preemptions == 0
    verdicts = {d[3] for d in sched.decisions if d[2] == "victim"}
    assert verdicts == {Verdict.DELAY_UNTIL.value}
    assert results["victim"][1] < results["urgent"][1]
