"""Trainable jobs on a real local Ray with logical GPUs: a preempted trainable saves a
checkpoint and its next attempt resumes from it (progress kept); its setup time is observed,
so a preemptor stops treating it as "setting up" once its setup is really over."""
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import ray

from trident.jobs.preempt import LazyPreemptor
from trident.jobs.ray_backend import is_trainable
from trident.jobs.scheduler import JobScheduler, JobState

GPUS = 2
WAIT_S = 60.0


@pytest.fixture(scope="module", autouse=True)
def ray_cluster():
    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(address="local", num_cpus=4, num_gpus=GPUS, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


class ByPriority:
    """Highest ``priority`` first; running jobs are ranked too (preemptive)."""

    name, oracle, preemptive, placer = "by-priority", False, True, "first-fit"

    def order(self, state, rng: np.random.Generator):
        views = [*state.queued, *state.running.values()]
        return tuple(v.job_id for v in sorted(views, key=lambda v: (-v.job.priority, v.job.arrival_s, v.job_id)))


class Counter:
    """Counts to ``steps``; writes its count to ``progress`` after every step."""

    def __init__(self, steps: int, progress: str, setup_s: float = 0.2) -> None:
        self.steps, self.progress, self.setup_s = steps, progress, setup_s
        self.count = 0
        self.resumed_from: list[int] = []

    def setup(self) -> None:
        time.sleep(self.setup_s)

    def step(self) -> bool:
        time.sleep(0.05)
        self.count += 1
        Path(self.progress).write_text(str(self.count))
        return self.count >= self.steps

    def checkpoint(self):
        return {"count": self.count, "resumed_from": self.resumed_from}

    def restore(self, state) -> None:
        self.count = state["count"]
        self.resumed_from = [*state["resumed_from"], state["count"]]

    def result(self):
        return self.count, self.resumed_from


def _work(tag: str) -> str:
    return tag


def _count(path: str) -> int:
    try:
        return int(Path(path).read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def test_a_preempted_trainable_resumes_from_its_checkpoint(tmp_path):
    assert is_trainable(Counter) and not is_trainable(_work)
    progress = str(tmp_path / "progress")
    sched = JobScheduler(policy=ByPriority(), preemption="eager")
    sched.submit(Counter, 80, progress, num_gpus=GPUS, name="train", priority=0)

    def urgent_after_progress():
        _wait_for(lambda: _count(progress) >= 10, "the trainable to make progress")
        sched.submit(_work, "urgent", num_gpus=1, name="urgent", priority=9)

    t = threading.Thread(target=urgent_after_progress)
    t.start()
    results = sched.run(timeout_s=120)
    t.join()
    count, resumed_from = results["train"]
    rec = sched.record("train")
    assert rec.state is JobState.SUCCEEDED and rec.preemptions == 1 and rec.attempts == 2
    assert rec.checkpoints == 1
    assert count == 80 and len(resumed_from) == 1 and resumed_from[0] >= 10  # progress kept, not restarted
    assert len(rec.observed_setup_s) == 2 and all(s > 0.2 for s in rec.observed_setup_s)
    assert sched.record("urgent").finished_at < rec.finished_at


def test_observed_setup_ends_the_setup_phase_a_preemptor_sees(tmp_path):
    progress = str(tmp_path / "progress")
    sched = JobScheduler(policy=ByPriority(), preemption=LazyPreemptor())
    # Declared setup 10 minutes; the real one is 0.2 s plus the actor's start.
    sched.submit(Counter, 10_000, progress, num_gpus=GPUS, name="train", setup_s=600.0)
    seen = {}

    def watch():
        _wait_for(lambda: _count(progress) >= 20, "the trainable to make progress")
        with sched._lock:
            view = sched.running["train"]
            seen["in_setup"] = view.in_setup(sched._now())
            seen["setup_s"] = view.expected_setup_s
        sched.cancel("train")

    t = threading.Thread(target=watch)
    t.start()
    sched.run(timeout_s=120)
    t.join()
    assert seen["in_setup"] is False and 0.2 < seen["setup_s"] < 60.0
    assert sched.state("train") is JobState.CANCELLED
    _wait_for(lambda: ray.available_resources().get("GPU", 0) == GPUS, "the cancelled trainable's GPUs")
