"""JobScheduler on a real local Ray with logical GPUs: every job completes exactly once, in
the policy's order; preemption evicts and restarts a job; a timeout or ``cancel`` kills what
was started and frees its GPUs. Jobs hand-shake through files, never race a sleep."""
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import ray

from trident.core.errors import ConfigError, TridentError
from trident.jobs.base import Verdict
from trident.jobs.preempt import LazyPreemptor
from trident.jobs.scheduler import JobScheduler, JobState

GPUS = 2
WAIT_S = 60.0  # upper bound on any hand-shake; a test that needs it has already failed


@pytest.fixture(scope="module", autouse=True)
def ray_cluster():
    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module
    # a fresh local instance, never another cluster running on this machine
    ray.init(address="local", num_cpus=4, num_gpus=GPUS, include_dashboard=False, log_to_driver=False)
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


def _until(path: str, tag: str, pid_file: str | None = None) -> tuple[str, float]:
    """Wait until ``path`` exists (at most WAIT_S); returns (tag, finish time)."""
    if pid_file:
        Path(pid_file).write_text(str(os.getpid()))
    deadline = time.time() + WAIT_S
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.02)
    return tag, time.time()


def _touch_then(path: str, tag: str) -> tuple[str, float]:
    Path(path).touch()
    return tag, time.time()


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def _gpus_free() -> bool:
    return ray.available_resources().get("GPU", 0) == GPUS


def test_oracle_plug_ins_and_unknown_modes_are_refused():
    with pytest.raises(ConfigError, match="non-oracle"):
        JobScheduler(policy="srtf")
    with pytest.raises(ConfigError, match="preemption"):
        JobScheduler(preemption="sometimes")
    with pytest.raises(ConfigError, match="node_refresh_s"):
        JobScheduler(node_refresh_s=float("nan"))


def test_every_job_completes_exactly_once_with_its_gpus():
    sched = JobScheduler(policy="fifo", preemption="never", placement="milp")
    ids = [sched.submit(_work, f"t{i}", 0.2, num_gpus=g) for i, g in enumerate([1, 0.5, 0.5, 2, 1])]
    ids.append(sched.submit(time.sleep, 0.1, num_gpus=0.5, name="builtin"))  # any callable runs
    results = sched.run(timeout_s=120)
    assert sorted(results) == sorted(ids)
    assert [results[j][0] for j in ids[:5]] == [f"t{i}" for i in range(5)]
    assert all(sched.record(j).attempts == 1 and sched.state(j) is JobState.SUCCEEDED for j in ids)
    assert sorted(sched.starts) == sorted(ids)  # started exactly once each


def test_priority_order_is_respected_when_gpus_are_scarce():
    sched = JobScheduler(policy=ByPriority(), preemption="never")
    low = [sched.submit(_work, f"low{i}", 0.3, num_gpus=GPUS, priority=0, name=f"low{i}") for i in range(2)]
    high = sched.submit(_work, "high", 0.3, num_gpus=GPUS, priority=5, name="high")
    results = sched.run(timeout_s=120)
    assert set(results) == {*low, high}
    # All three need the whole cluster, so they run one by one, highest priority first.
    assert sched.starts == ["high", "low0", "low1"]
    finish = {j: results[j][1] for j in results}
    assert finish["high"] < finish["low0"] < finish["low1"]


def _submit_when(sched, condition, *args, **kwargs) -> threading.Thread:
    """Submit a job from another thread once ``condition()`` holds."""
    def later():
        _wait_for(condition, "the moment to submit")
        sched.submit(*args, **kwargs)

    t = threading.Thread(target=later)
    t.start()
    return t


def test_eager_preemption_evicts_and_restarts_the_victim(tmp_path):
    done = str(tmp_path / "urgent-done")
    sched = JobScheduler(policy=ByPriority(preemptive=True), preemption="eager")
    # The victim cannot finish before the urgent job has run: it waits for the urgent job's file.
    sched.submit(_until, done, "victim", num_gpus=GPUS, priority=0, name="victim")
    t = _submit_when(sched, lambda: sched.state("victim") is JobState.RUNNING,
                     _touch_then, done, "urgent", num_gpus=1, priority=9, name="urgent")
    results = sched.run(timeout_s=120)
    t.join()
    assert set(results) == {"victim", "urgent"}
    victim = sched.record("victim")
    assert victim.preemptions == 1 and victim.attempts == 2 and victim.state is JobState.SUCCEEDED
    assert [e.split(" ")[0] for _, e in victim.events if e.startswith("preempted")] == ["preempted"]
    assert results["urgent"][1] < results["victim"][1]
    assert any(d[2] == "victim" and d[3] == Verdict.PREEMPT_NOW.value for d in sched.decisions)


def test_lazy_preemption_holds_off_while_the_victim_sets_up(tmp_path):
    go = str(tmp_path / "asked")
    sched = JobScheduler(policy=ByPriority(preemptive=True), preemption=LazyPreemptor())
    sched.submit(_until, go, "victim", num_gpus=GPUS, priority=0, name="victim", setup_s=600.0)
    t = _submit_when(sched, lambda: sched.state("victim") is JobState.RUNNING,
                     _work, "urgent", 0.1, num_gpus=1, priority=9, name="urgent")
    # Let the victim finish only once the preemptor has been asked about it.
    asker = threading.Thread(target=lambda: (_wait_for(lambda: len(sched.decisions) > 0, "a preemption question"),
                                             Path(go).touch()))
    asker.start()
    results = sched.run(timeout_s=120)
    t.join()
    asker.join()
    assert set(results) == {"victim", "urgent"}
    assert sched.record("victim").preemptions == 0
    verdicts = {d[3] for d in sched.decisions if d[2] == "victim"}
    assert verdicts == {Verdict.DELAY_UNTIL.value}
    assert results["victim"][1] < results["urgent"][1]


def test_timeout_cancels_the_running_job_and_frees_its_gpus(tmp_path):
    pid_file = str(tmp_path / "pid")
    sched = JobScheduler()
    sched.submit(_until, str(tmp_path / "never"), "slow", pid_file, num_gpus=GPUS, name="slow")
    sched.submit(_work, "queued", 0.1, num_gpus=GPUS, name="queued")
    with pytest.raises(TridentError, match=r"timed out after 2 s: cancelled \['slow'\]; 1 job\(s\) still queued"):
        sched.run(timeout_s=2)
    assert sched.state("slow") is JobState.CANCELLED and sched.state("queued") is JobState.QUEUED
    pid = int(Path(pid_file).read_text())
    _wait_for(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE,
              "the cancelled job's worker to exit")
    _wait_for(_gpus_free, "the cancelled job's GPUs")
    assert set(sched.run(timeout_s=120)) == {"queued"}
    assert sched.starts == ["slow", "queued"]  # the cancelled job is not restarted


def test_cancel_a_running_and_a_queued_job(tmp_path):
    sched = JobScheduler()
    sched.submit(_until, str(tmp_path / "never"), "running", num_gpus=GPUS, name="running")
    sched.submit(_work, "queued", 0.1, num_gpus=GPUS, name="queued")
    sched.submit(_work, "kept", 0.1, num_gpus=1, name="kept")
    assert sched.cancel("queued") is True and sched.state("queued") is JobState.CANCELLED

    def cancel_when_running():
        _wait_for(lambda: sched.state("running") is JobState.RUNNING, "the job to start")
        assert sched.cancel("running") is True

    t = threading.Thread(target=cancel_when_running)
    t.start()
    results = sched.run(timeout_s=120)
    t.join()
    assert set(results) == {"kept"}
    assert sched.state("running") is JobState.CANCELLED and sched.starts == ["running", "kept"]
    assert sched.cancel("kept") is False  # already finished
    with pytest.raises(ConfigError, match="job_id"):
        sched.cancel("nope")
    _wait_for(_gpus_free, "the GPUs after the run")
