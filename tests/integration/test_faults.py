"""Fault injection on one multi-node Ray cluster while a pipeline runs under ``trident.autoscale``:
the controller killed, a pool actor killed during a drain and during a scale-up, a worker node
killed. Each run writes the ids to Parquet and reads them back: every row exactly once.

A pipeline cannot outrun its fault: once ``GATE_BATCHES`` batches are through the GPU stage,
every further batch waits for a gate file that the test opens only after the fault is injected.
The pipeline runs in a thread; faults come from the main thread (Ray starts and stops nodes there).
"""
import os
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import ray
from ray.cluster_utils import Cluster
from ray.data import ActorPoolStrategy

import trident
from trident.autoscaler.shim import shim
from trident.autoscaler.shim.session import TridentRuntimeWarning
from trident.core.types import Decision, OperatorTarget, Plan

os.environ["RAY_AUTH_MODE"] = "disabled"
ROWS = 300  # 30 batches of 10
GATE_BATCHES = 6
WAIT_S = 120.0  # upper bound on any hand-shake; a test that needs it has already failed


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args=dict(
        num_cpus=2, resources={"head": 1}, include_dashboard=False,
        _system_config={"health_check_period_ms": 500, "health_check_failure_threshold": 4}))
    workers = [c.add_node(num_cpus=2, num_gpus=2) for _ in range(2)]
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield {"cluster": c, "head": ray.get_runtime_context().get_node_id(), "workers": workers}
    ray.shutdown()
    c.shutdown()


@pytest.fixture
def executors(monkeypatch):
    """The executors trident attaches to in this test (to find the pool's actors)."""
    seen = []
    real = shim.ExecutionShim.__init__

    def spy(self, run, executor):
        seen.append(executor)
        real(self, run, executor)

    monkeypatch.setattr(shim.ExecutionShim, "__init__", spy)
    return seen


def gated_model(folder: str):
    """The GPU stage: each batch leaves a file; past GATE_BATCHES files a batch waits for ``gate``."""
    class _Model:
        def __call__(self, batch):
            Path(folder, f"done-{batch['id'][0]}-{os.getpid()}-{time.time_ns()}").touch()
            deadline = time.time() + WAIT_S
            while (len(os.listdir(folder)) > GATE_BATCHES and not os.path.exists(os.path.join(folder, "..", "gate"))
                   and time.time() < deadline):
                time.sleep(0.02)
            time.sleep(0.05)
            return batch
    return _Model


def _pre(batch):
    return batch


class Targets:
    """Test double: the GPU pool's replica targets, one per step of ``plan`` ((min rows out, replicas, min
    actors running) ...), each sent once its condition holds."""

    name = "test-targets"
    plan: tuple = ()

    def __init__(self, *, context=None):
        self.seq = 0

    def step(self, snapshot, now):
        op = next(o for o in snapshot.operators if "_Model" in o.name)
        if self.seq >= len(self.plan):
            return Decision(time_s=now, reason="hold")
        rows, replicas, running = self.plan[self.seq]
        if op.rows_out_total < rows or op.actors_running < running:
            return Decision(time_s=now, reason="hold")
        self.seq += 1
        plan = Plan(seq=self.seq, targets=(OperatorTarget(name=op.name, replicas=replicas),),
                    reason=f"test: {replicas} replicas", created_at_s=now)
        return Decision(time_s=now, reason=plan.reason, plan=plan)


def targets(*steps):
    return type("TargetsPolicy", (Targets,), {"plan": steps})


class Pipeline:
    """One pipeline under ``trident.autoscale`` in a thread; ``gate()`` lets it finish."""

    def __init__(self, tmp_path: Path, policy, *, num_gpus: float = 0.5) -> None:
        self.tmp = tmp_path
        (tmp_path / "progress").mkdir()
        self.out = tmp_path / "out"
        ds = (ray.data.range(ROWS, override_num_blocks=ROWS // 10)
              .map_batches(_pre, num_cpus=0.25)
              .map_batches(gated_model(str(tmp_path / "progress")), batch_size=10, num_gpus=num_gpus,
                           compute=ActorPoolStrategy(min_size=1, max_size=4)))
        self.run = trident.autoscale(policy=policy, interval_s=0.2)
        self.error = None

        def go():
            try:
                with self.run:  # writes run on the head node: the fault under test is trident's, not the sink's
                    ds.write_parquet(str(self.out), ray_remote_args={"resources": {"head": 0.01}})
            except BaseException as exc:
                self.error = exc

        self.thread = threading.Thread(target=go)
        self.thread.start()

    def gate(self) -> None:
        (self.tmp / "gate").touch()

    def finish(self):
        self.gate()
        self.thread.join(timeout=300)
        assert not self.thread.is_alive(), "the pipeline did not finish"
        assert self.error is None, repr(self.error)
        ids = sorted(pd.read_parquet(self.out)["id"].tolist())
        assert ids == list(range(ROWS)), f"{len(ids)} rows, {len(set(ids))} distinct, expected {ROWS}"
        (execution,) = self.run.executions
        return execution

    def actions(self, kind):
        ex = self.run.executions
        return [a for a in ex[0].actions if a.kind == kind] if ex else []

    def blocked(self) -> bool:
        """Has the pipeline reached the gate (so a fault now is mid-run)?"""
        return len(os.listdir(self.tmp / "progress")) > GATE_BATCHES


def _wait_for(condition, what: str):
    deadline = time.monotonic() + WAIT_S
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def _pool(executors):
    op = next(op for op in executors[-1]._topology if "_Model" in op.name)
    return op.get_autoscaling_actor_pools()[0]


def test_controller_killed_mid_run(cluster, tmp_path):
    p = Pipeline(tmp_path, targets((1, 2, 0)))
    _wait_for(lambda: p.blocked() and p.run._controller is not None and p.actions("pool_target"), "a plan applied")
    assert ray.get(p.run._controller.node_id.remote()) == cluster["head"]  # pinned to the driver's node
    with pytest.warns(TridentRuntimeWarning, match="controller failed"):
        ray.kill(p.run._controller)
        killed_at = p.run._now_s()
        execution = p.finish()
    assert p.run.summary()["controller_failure"] is not None
    assert execution.mode == "stock" and execution.ended_at_s > killed_at


def test_actor_killed_during_a_drain(cluster, tmp_path, executors):
    p = Pipeline(tmp_path, targets((1, 3, 0), (GATE_BATCHES * 10 - 20, 1, 3)))
    _wait_for(lambda: p.blocked() and p.actions("drain") and getattr(_pool(executors), "trident_retiring", None),
              "busy actors draining")
    victim = next(iter(list(_pool(executors).trident_retiring)))
    ray.kill(victim, no_restart=False)
    execution = p.finish()
    assert p.run.summary()["fallbacks"] == [] and p.run.summary()["controller_failure"] is None
    name = p.actions("drain")[0].operator
    assert execution.snapshots[-1].operator(name).actors_running <= 1  # the scale-down still went through


def test_actor_killed_during_a_scale_up(cluster, tmp_path, executors):
    p = Pipeline(tmp_path, targets((1, 4, 0)))
    pool = _wait_for(lambda: p.actions("pool_target") and _pool(executors).num_pending_actors() > 0
                     and _pool(executors), "new actors starting")
    victim = next(iter(list(pool._running_actors)))
    ray.kill(victim, no_restart=False)
    p.gate()
    execution = p.finish()
    assert p.run.summary()["fallbacks"] == [] and p.run.summary()["controller_failure"] is None
    assert any(a.kind == "pool_target" and a.value == 4 for a in execution.actions)


def test_worker_node_killed_mid_run(cluster, tmp_path, executors):
    doomed = cluster["workers"][1]
    p = Pipeline(tmp_path, targets((1, 4, 0)), num_gpus=1)  # four replicas need both nodes

    def on_doomed():
        pool = _pool(executors) if executors else None
        return pool is not None and p.blocked() and any(
            pool.get_actor_location(a) == doomed.node_id for a in list(pool._running_actors))

    _wait_for(on_doomed, "an actor on the node to kill")
    cluster["cluster"].remove_node(doomed, allow_graceful=False)
    _wait_for(lambda: not any(n["Alive"] for n in ray.nodes() if n["NodeID"] == doomed.node_id), "the node's death")
    p.finish()
    summary = p.run.summary()
    assert summary["controller_failure"] is None and summary["fallbacks"] == []  # trident kept control
