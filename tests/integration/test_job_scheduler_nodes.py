"""JobScheduler on a multi-node ``ray.cluster_utils.Cluster`` whose nodes die and join: jobs
on a dead node are queued again and rerun on a live one, no job is placed on the dead node,
a new node is used, and every job succeeds exactly once."""
import os
import sys
import threading
import time
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster

from trident.jobs.scheduler import JobScheduler, JobState

WAIT_S = 90.0  # upper bound on any hand-shake; a test that needs it has already failed


@pytest.fixture(scope="module")
def cluster():
    os.environ["RAY_AUTH_MODE"] = "disabled"
    # Fast failure detection: a killed node is declared dead within about a second.
    c = Cluster(initialize_head=True, head_node_args=dict(
        num_cpus=1, num_gpus=0, include_dashboard=False,
        _system_config={"health_check_period_ms": 500, "health_check_failure_threshold": 4}))
    ray.init(address=c.address, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield c
    ray.shutdown()
    c.shutdown()


def _hold(release: str, tag: str) -> tuple[str, str]:
    """Wait until ``release`` exists; returns (tag, the node it ran on)."""
    deadline = time.time() + WAIT_S
    while not os.path.exists(release) and time.time() < deadline:
        time.sleep(0.02)
    return tag, ray.get_runtime_context().get_node_id()


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def test_jobs_on_a_dead_node_rerun_elsewhere_exactly_once(cluster, tmp_path):
    w1 = cluster.add_node(num_cpus=2, num_gpus=2)
    w2 = cluster.add_node(num_cpus=2, num_gpus=2)
    cluster.wait_for_nodes()
    release = str(tmp_path / "release")
    sched = JobScheduler(policy="fifo", node_refresh_s=0.2)
    ids = [sched.submit(_hold, release, f"j{k}", num_gpus=1, name=f"j{k}") for k in range(6)]
    seen, out = {}, {}

    def on(node):
        return [j for j in ids if sched.state(j) is JobState.RUNNING and sched.record(j).attempt_node_ids[-1] == node]

    def run():  # the faults come from the main thread (Ray starts nodes there only)
        try:
            out["results"] = sched.run(timeout_s=240)
        except BaseException as exc:
            out["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    try:
        _wait_for(lambda: len(on(w1.node_id)) == 2 and len(on(w2.node_id)) == 2, "four jobs on the two nodes")
        seen["lost"] = on(w2.node_id)
        cluster.remove_node(w2, allow_graceful=False)
        _wait_for(lambda: all(sched.record(j).node_failures == 1 for j in seen["lost"]), "the lost jobs requeued")
        seen["w3"] = cluster.add_node(num_cpus=2, num_gpus=2).node_id
        _wait_for(lambda: on(seen["w3"]), "a job on the new node")
    finally:
        Path(release).touch()
        t.join()
    assert "error" not in out, out
    results = out["results"]
    assert set(results) == set(ids) and [results[j][0] for j in ids] == ids
    attempts = [n for j in ids for n in sched.record(j).attempt_node_ids]
    assert attempts.count(w2.node_id) == 2, "nothing placed on the dead node after its two first jobs"
    assert {results[j][1] for j in ids} <= {w1.node_id, seen["w3"]}
    assert seen["w3"] in {results[j][1] for j in ids}, "the node that joined was used"
    for j in ids:
        rec = sched.record(j)
        assert rec.state is JobState.SUCCEEDED
        assert [e for _, e in rec.events].count("succeeded") == 1
        lost = j in seen["lost"]
        assert (rec.attempts, rec.node_failures) == ((2, 1) if lost else (1, 0)), (j, rec.events)
        if lost:
            assert any(e.startswith("requeued: its node") for _, e in rec.events), rec.events
    assert sorted(sched.starts) == sorted(ids + seen["lost"])
