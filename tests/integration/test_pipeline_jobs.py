"""Pipelines as elastic jobs on a ``ray.cluster_utils.Cluster``: a running Ray Data pipeline
under ``trident.autoscale`` is shrunk (its GPU pool drained) to free GPUs for a higher-priority
job, then grown back when the job ends; every input row comes out exactly once; the
scheduler's events and decisions say why."""
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import ray
from ray.cluster_utils import Cluster
from ray.data import ActorPoolStrategy

from trident.jobs.base import Verdict
from trident.jobs.scheduler import JobScheduler, JobState

ROWS = 1200
WAIT_S = 240.0  # generous: actors take tens of seconds to start on a loaded 2-core machine


@pytest.fixture(scope="module")
def cluster():
    os.environ["RAY_AUTH_MODE"] = "disabled"
    c = Cluster(initialize_head=True, head_node_args=dict(num_cpus=4, num_gpus=0, include_dashboard=False))
    c.add_node(num_cpus=8, num_gpus=4, resources={"accelerator_type:A": 4})
    ray.init(address=c.address, log_to_driver=False)
    c.wait_for_nodes()
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield c
    ray.shutdown()
    c.shutdown()


class ByPriority:
    """Highest ``priority`` first (non-preemptive: a pipeline may still be shrunk)."""

    name, oracle, preemptive, placer = "by-priority", False, False, "first-fit"

    def order(self, state, rng: np.random.Generator):
        return tuple(v.job_id for v in sorted(state.queued, key=lambda v: (-v.job.priority, v.job.arrival_s)))


class Embed:
    """A GPU stage: 0.25 s per batch, so one replica holds the first half's 30 batches for
    several of DS2's 3 s windows however late its actor starts (the pool must grow)."""

    def __call__(self, batch):
        time.sleep(0.25)
        return batch


def _gate(release: str):
    def gate(batch):
        """Rows of the second half wait until ``release`` exists (the pipeline outlives the test's steps)."""
        deadline = time.time() + WAIT_S
        while batch["id"].max() >= ROWS // 2 and not os.path.exists(release) and time.time() < deadline:
            time.sleep(0.05)
        return batch
    return gate


def pipeline(release: str) -> list[int]:
    ds = (ray.data.range(ROWS, override_num_blocks=60)
          .map_batches(_gate(release), batch_size=20)
          .map_batches(Embed, compute=ActorPoolStrategy(min_size=1, max_size=4), num_gpus=1, num_cpus=0.5,
                       batch_size=20))
    return [int(row["id"]) for row in ds.iter_rows()]


def _train(tag: str) -> str:
    time.sleep(1.0)
    return tag


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def _events(sched, job_id, prefix):
    return [t for t, e in sched.record(job_id).events if e.startswith(prefix)]


def test_a_pipeline_shrinks_for_a_higher_priority_job_and_grows_back(cluster, tmp_path):
    release = str(tmp_path / "release")
    sched = JobScheduler(policy=ByPriority(), preemption="eager", node_refresh_s=0.5)
    sched.submit_pipeline(pipeline, release, min_gpus=1, max_gpus=4, name="pipe",
                          autoscale=dict(policy="ds2", interval_s=0.5))

    failures: list[BaseException] = []

    def drive():
        try:
            steps()
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            failures.append(e)
        finally:
            Path(release).touch()  # the pipeline ends either way; a failed step must not hang the run

    def steps():
        _wait_for(lambda: sched.state("pipe") is JobState.RUNNING and sched.record("pipe").budget_gpus == 4,
                  "the pipeline to be lent all GPUs")
        run = sched.record("pipe").autoscale_run
        _wait_for(lambda: any(op.actors_running >= 2 for s in run.executions[-1:] for op in s.snapshots[-1].operators)
                  if run.executions and run.executions[-1].snapshots else False, "the pipeline's pool to grow")
        sched.submit(_train, "urgent", num_gpus=3, name="urgent", priority=9)
        _wait_for(lambda: sched.state("urgent") is JobState.SUCCEEDED, "the urgent job")
        _wait_for(lambda: sched.record("pipe").budget_gpus == 4, "the pipeline to grow back")

    t = threading.Thread(target=drive)
    t.start()
    results = sched.run(timeout_s=600)
    t.join()
    if failures:
        raise failures[0]
    assert sorted(results["pipe"]) == list(range(ROWS))  # every row exactly once
    pipe, urgent = sched.record("pipe"), sched.record("urgent")
    assert pipe.state is JobState.SUCCEEDED and pipe.attempts == 1 and pipe.preemptions == 1
    shrunk, grown = _events(sched, "pipe", "shrunk to 1 GPU"), _events(sched, "pipe", "grown to 4 GPU")
    assert len(shrunk) == 1 and len(grown) == 2
    assert grown[0] < shrunk[0] <= urgent.events[0][0] and shrunk[0] < urgent.finished_at <= grown[1]
    # The reasons name the blocked job, the verdict, and the budget the pool was held at.
    assert any(d[1:4] == ("urgent", "pipe", Verdict.PREEMPT_NOW.value) for d in sched.decisions)
    assert "preempted for urgent" in next(e for _, e in pipe.events if e.startswith("shrunk"))
    actions = [a for e in pipe.autoscale_run.executions for a in e.actions]
    assert any(a.kind == "budget" and "GPU budget 1" in a.detail for a in actions)
    # Ray granted the urgent job 3 of the node's 4 GPUs while the pipeline still ran (its second
    # half waited for the release): the pool had really given its actors back.
    assert urgent.state is JobState.SUCCEEDED and urgent.finished_at < pipe.finished_at
