"""A pipeline run again under ``trident.autoscale(history=...)`` on a real local Ray: the second
run plans from the first before its own first task finishes; a store that cannot be used is a
warning and a run without history; two pipelines writing one store at once lose nothing."""
import os
import sys
import threading
import time
import warnings

import pytest

import ray
from ray.data import ActorPoolStrategy

import trident
from trident.autoscaler.shim.session import TridentRuntimeWarning
from trident.history.store import HistoryStore

os.environ["RAY_AUTH_MODE"] = "disabled"

ROWS = 400


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(address="local", num_cpus=8, num_gpus=4, include_dashboard=False, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.shutdown()


def _pre(batch):
    time.sleep(0.005)
    return batch


class _Slow:
    def __call__(self, batch):
        time.sleep(0.15)
        return batch


def _dataset(rows=ROWS):
    return (ray.data.range(rows, override_num_blocks=rows // 5).map_batches(_pre, num_cpus=0.5)
            .map_batches(_Slow, compute=ActorPoolStrategy(min_size=1, max_size=4), num_gpus=0.5, batch_size=5))


def _run(history, rows=ROWS):
    with trident.autoscale(interval_s=0.5, history=history) as run:
        out = _dataset(rows).take_all()
    assert sorted(int(r["id"]) for r in out) == list(range(rows))  # every row exactly once
    (execution,) = run.executions
    return run, execution


def _pool(execution):
    return next(o.name for o in execution.snapshots[-1].operators if "_Slow" in o.name)


def test_a_second_run_plans_from_the_first_before_its_first_task_finishes(tmp_path):
    path = str(tmp_path / "history.sqlite")
    _, first = _run(path)
    kept = HistoryStore(path).entries()
    assert {e.name for e in kept} >= {_pool(first)}
    run, second = _run(path)
    plan = next((d for d in second.decisions if d.plan is not None), None)
    assert plan is not None, [f"{d.time_s:.1f} {d.kind}: {d.reason[:160]}" for d in second.decisions
                              if d.kind not in ("observe", "dwell")]
    assert plan.history_runs and plan.history_runs[0].endswith(first.execution_id.rsplit("-", 1)[-1])
    at = next(s for s in second.snapshots if s.time_s >= plan.time_s)
    assert at.operator(_pool(second)).tasks_finished == 0, plan.reason  # planned before any task of its own
    assert "history of run" in plan.reason
    assert "history (plans made from what earlier runs taught)" in run.report(echo=False)
    assert run.summary()["history_plans"] >= 1
    assert len(HistoryStore(path).entries()) == 2 * len(kept)


@pytest.mark.parametrize("fault", ["corrupt file", "unwritable folder"])
def test_a_store_that_cannot_be_used_is_a_warning_and_a_run_without_history(tmp_path, fault):
    if fault == "corrupt file":
        path = tmp_path / "history.sqlite"
        path.write_bytes(b"garbage" * 1000)
    else:
        (tmp_path / "a-file").write_text("not a folder")
        path = tmp_path / "a-file" / "history.sqlite"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run, execution = _run(str(path), rows=100)
    said = [str(w.message) for w in caught if issubclass(w.category, TridentRuntimeWarning)]
    assert any("history" in m for m in said), said
    assert not any(d.history_runs for d in execution.decisions)
    assert execution.status == "succeeded"


def test_two_pipelines_writing_one_store_at_once_lose_nothing(tmp_path):
    path = str(tmp_path / "history.sqlite")
    done, errors = [], []

    def one():
        try:
            done.append(_run(path, rows=100)[1].execution_id)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors and len(done) == 2
    runs = {e.run.rsplit("/", 1)[-1] for e in HistoryStore(path).entries()}
    assert runs == {d.rsplit("-", 1)[-1] for d in done}
