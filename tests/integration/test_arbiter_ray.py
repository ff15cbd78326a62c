"""The cluster's arbiter on real Ray: two drivers' pipelines share one cluster within budgets that
fit it (the first shrunk for the second, given everything back when the second ends), a restarted
arbiter gets every run back from the runs themselves, a killed driver's budget returns within the
heartbeat bound, the only driver does not start it (a second one does), a run that cannot reach
it plans alone and says so, ``trident status`` shows the runs; every row comes out once."""
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import ray

import trident
from trident.jobs.arbiter import Claim, Progress, Refused
from trident.jobs.arbiter.actor import find, start

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import arbiter_driver  # noqa: E402

WAIT_S = 240.0
CPUS, GPUS = 4.0, 2.0
LAPSE_S = 4.0


@pytest.fixture(scope="module")
def address():
    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.init(num_cpus=int(CPUS), num_gpus=int(GPUS), include_dashboard=False, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(arbiter_driver)
    ray.data.DataContext.get_current().enable_progress_bars = False
    ray.get(start(lapse_s=LAPSE_S).status.remote())  # the cluster's arbiter, with a short heartbeat bound
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def _status() -> dict:
    arbiter = find()
    return {"runs": []} if arbiter is None else ray.get(arbiter.status.remote(), timeout=30)


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            if condition():
                return
        except ray.exceptions.RayError:  # the arbiter restarting
            pass
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.2)


def _capped(status: dict) -> bool:
    runs = status["runs"]
    return len(runs) == 2 and all(r["budget_cpus"] is not None for r in runs)


def _other_driver(address: str, release: str, name: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(HERE / "arbiter_driver.py"), address, release, name],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _here(release: str, out: dict) -> threading.Thread:
    def run():
        try:
            with trident.autoscale(policy="ds2", interval_s=0.5, history=False, name="this-driver") as r:
                out["ids"] = arbiter_driver.pipeline(release)
            out["run"] = r
        except BaseException as e:  # noqa: BLE001 - re-raised by the test
            out["error"] = e
    return threading.Thread(target=run)


def _budget(name: str):
    row = next((r for r in _status()["runs"] if r["name"] == name), None)
    return None if row is None else (row["budget_cpus"], row["budget_gpus"])


def test_two_drivers_share_the_cluster_and_survive_an_arbiter_restart(address, tmp_path):
    release_here, release_other = str(tmp_path / "here"), str(tmp_path / "other")
    other = _other_driver(address, release_other, "other-driver")
    out: dict = {}
    thread = _here(release_here, out)
    try:
        _wait_for(lambda: [r["name"] for r in _status()["runs"]] == ["other-driver"], "the other driver to register")
        assert _budget("other-driver") == (None, None)  # alone: no cap
        thread.start()
        _wait_for(lambda: _capped(_status()), "both runs to get a budget")
        status = _status()
        assert {r["name"] for r in status["runs"]} == {"this-driver", "other-driver"}
        assert sum(r["budget_cpus"] for r in status["runs"]) <= CPUS + 1e-6
        assert sum(r["budget_gpus"] for r in status["runs"]) <= GPUS + 1e-6
        assert all(r["reason"] for r in status["runs"])
        shown = subprocess.run([sys.executable, "-m", "trident.cli", "status", "--address", address],
                               capture_output=True, text=True, timeout=120)
        assert shown.returncode == 0, shown.stderr
        assert "this-driver" in shown.stdout and "other-driver" in shown.stdout and "srtf" in shown.stdout

        ray.kill(find(), no_restart=False)  # the arbiter dies; Ray restarts it empty
        _wait_for(lambda: _capped(_status()), "both runs to register with the restarted arbiter")
        Path(release_here).touch()
        thread.join(timeout=WAIT_S)
        _wait_for(lambda: [r["name"] for r in _status()["runs"]] == ["other-driver"]
                  and _budget("other-driver") == (None, None), "the first run to get the cluster back")
    finally:
        Path(release_here).touch()
        Path(release_other).touch()
        if thread.is_alive():
            thread.join(timeout=WAIT_S)
        stdout, stderr = other.communicate(timeout=WAIT_S)
    if "error" in out:
        raise out["error"]
    assert other.returncode == 0, stderr[-3000:]
    assert sorted(out["ids"]) == list(range(arbiter_driver.ROWS))  # every row exactly once (the other checks its own)
    mine = [e.message for e in out["run"].record.events if e.kind.startswith("arbiter")]
    theirs = [message for _, message in json.loads(stdout.strip().splitlines()[-1])]
    for events in (mine, theirs):
        assert any(m.startswith("joined the cluster's arbiter") for m in events)
        assert any("registering again" in m for m in events)
        assert any(m.startswith("rank ") for m in events)  # a budget with its rank and reason
    assert theirs.index(next(m for m in theirs if m.startswith("rank "))) < len(theirs) - 1
    assert theirs[-1].startswith("no cap")  # shrunk for this driver's run, then given the cluster back
    _wait_for(lambda: _status()["runs"] == [], "both runs to leave")


def test_a_job_schedulers_running_job_holds_its_gpu_and_the_pipelines_share_the_rest(address, tmp_path):
    """A JobScheduler's running job is a run of kind ``training`` at the arbiter: it holds the GPU it
    runs on, another driver's pipeline is budgeted within the other one, and once the job ends its
    seat is left and the pipeline gets the cluster back."""
    release_job, release_other = tmp_path / "job", tmp_path / "other"
    other = _other_driver(address, str(release_other), "other-driver")
    scheduler = trident.JobScheduler(owner="trainer")
    scheduler.submit(arbiter_driver.train, str(release_job), num_gpus=1.0, name="train-1")
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(result=scheduler.run(timeout_s=WAIT_S)))
    try:
        _wait_for(lambda: _budget("other-driver") is not None, "the other driver to register")
        thread.start()
        _wait_for(lambda: _capped(_status()), "the job and the pipeline to get budgets")
        rows = {r["name"]: r for r in _status()["runs"]}
        job, pipe = rows["train-1"], rows["other-driver"]
        assert (job["kind"], job["owner"], job["budget_gpus"]) == ("training", "trainer", 1.0), job
        assert pipe["kind"] == "pipeline" and pipe["budget_gpus"] <= GPUS - 1.0 + 1e-6, pipe
        assert "training job" in job["reason"]
        release_job.touch()
        thread.join(timeout=WAIT_S)
        _wait_for(lambda: [r["name"] for r in _status()["runs"]] == ["other-driver"]
                  and _budget("other-driver") == (None, None), "the job's seat to be left")
    finally:
        release_job.touch()
        release_other.touch()
        if thread.is_alive():
            thread.join(timeout=WAIT_S)
        _, stderr = other.communicate(timeout=WAIT_S)
    assert other.returncode == 0, stderr[-3000:]  # every row once (the driver checks its own)
    assert out["result"] == {"train-1": "trained"}
    assert scheduler.seats is None  # left when run() ended
    assert any(text.startswith("train-1 joined the arbiter") for _, text in scheduler.arbiter_events)
    _wait_for(lambda: _status()["runs"] == [], "every run to leave")


def test_a_killed_drivers_budget_returns_within_the_heartbeat_bound(address, tmp_path):
    release = str(tmp_path / "release")
    other = _other_driver(address, str(tmp_path / "never"), "doomed-driver")
    out: dict = {}
    thread = _here(release, out)
    try:
        _wait_for(lambda: _budget("doomed-driver") is not None, "the other driver to register")
        thread.start()
        _wait_for(lambda: _capped(_status()), "both runs to get a budget")
        other.kill()
        killed = time.monotonic()
        _wait_for(lambda: [r["name"] for r in _status()["runs"]] == ["this-driver"]
                  and _budget("this-driver") == (None, None), "the killed driver's budget to return")
        assert time.monotonic() - killed <= LAPSE_S + 5.0
    finally:
        Path(release).touch()
        if thread.is_alive():
            thread.join(timeout=WAIT_S)
        other.kill()
        other.communicate(timeout=60)
    if "error" in out:
        raise out["error"]
    assert sorted(out["ids"]) == list(range(arbiter_driver.ROWS))
    assert any("removed: no heartbeat" in text for _, text in _status()["decisions"])


def test_the_only_driver_does_not_start_the_arbiter_a_second_one_does(address, tmp_path):
    ray.kill(find(), no_restart=True)
    _wait_for(lambda: find() is None, "the arbiter to go")
    release = tmp_path / "release"
    release.touch()
    try:
        with trident.autoscale(policy="ds2", interval_s=0.5, history=False) as run:
            ids = arbiter_driver.pipeline(str(release))
        assert sorted(ids) == list(range(arbiter_driver.ROWS))
        assert find() is None  # the only driver on the cluster: no actor started
        assert not any(e.kind.startswith("arbiter") for e in run.record.events)
        other = _other_driver(address, str(release), "second-driver")
        stdout, stderr = other.communicate(timeout=WAIT_S)
        assert other.returncode == 0, stderr[-3000:]
        assert find() is not None  # two drivers: the second started it and joined
        assert any(m.startswith("joined") for _, m in json.loads(stdout.strip().splitlines()[-1]))
    finally:
        if find() is not None:
            ray.kill(find(), no_restart=True)
            _wait_for(lambda: find() is None, "the arbiter to go")
        ray.get(start(lapse_s=LAPSE_S).status.remote())


def test_a_run_that_cannot_reach_the_arbiter_plans_alone_and_says_so(address, tmp_path, monkeypatch):
    import trident.jobs.arbiter.actor as actor
    import trident.jobs.arbiter.link as link

    def unreachable(**_):
        raise TimeoutError("no answer")

    monkeypatch.setattr(actor, "find", lambda: None)
    monkeypatch.setattr(actor, "start", unreachable)
    monkeypatch.setattr(link, "_shared", lambda: True)  # another driver, as far as this run knows
    release = tmp_path / "release"
    release.touch()
    with pytest.warns(Warning, match="no arbiter reached"):
        with trident.autoscale(policy="ds2", interval_s=0.5, history=False) as run:
            ids = arbiter_driver.pipeline(str(release))
    assert sorted(ids) == list(range(arbiter_driver.ROWS))
    assert run.share is None and any(e.kind == "arbiter_unreachable" for e in run.record.events)


def test_malformed_and_foreign_messages_are_refused_through_ray_and_change_nothing(address):
    arbiter = find()
    run_id, token, _ = ray.get(arbiter.register.remote(Claim(name="probe", min_cpus=1)))
    before = [(r["run_id"], r["budget_cpus"], r["rows_done"]) for r in _status()["runs"]]
    with pytest.raises(Refused, match="min_gpus"):
        ray.get(arbiter.register.remote(Claim(name="bad", min_gpus=-1)))
    with pytest.raises(Refused, match="above the cluster"):
        ray.get(arbiter.register.remote(Claim(name="greedy", min_cpus=10 * CPUS)))
    with pytest.raises(Refused, match="wrong token"):
        ray.get(arbiter.update.remote(run_id, "forged", Progress(rows_done=5, rows_total=10)))
    with pytest.raises(Refused, match="rows_done"):
        ray.get(arbiter.update.remote(run_id, token, Progress(rows_done=float("nan"))))
    with pytest.raises(Refused, match="unknown run"):
        ray.get(arbiter.leave.remote("nobody", token))
    assert [(r["run_id"], r["budget_cpus"], r["rows_done"]) for r in _status()["runs"]] == before
    ray.get(arbiter.leave.remote(run_id, token))
    assert _status()["runs"] == []
