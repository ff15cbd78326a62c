"""trident's series on Ray's Prometheus endpoint: a small pipeline under trident.autoscale, then
the endpoint scraped for every series with values that fit the run."""
import os
import re
import socket
import sys
import threading
import time
import urllib.request

import pytest

import ray
# Ray exports metrics through its dashboard agent's reporter, which comes with ray[default]
# (trident's "metrics" extra): this folder runs only where it is installed (`.ci/run`, docs/metrics.md)
import ray.dashboard.modules.reporter.reporter_agent  # noqa: F401
from ray.data import ActorPoolStrategy

import trident
from trident.report.metrics import METRICS

os.environ["RAY_AUTH_MODE"] = "disabled"

ROWS = 200
LIMIT_BYTES = 8 * 2**30
LINE = re.compile(r'^(\w+)\{(.*)\} (\S+)$')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def metrics_port():
    port = _free_port()
    ray.init(address="local", num_cpus=4, num_gpus=2, include_dashboard=False, log_to_driver=False,
             _metrics_export_port=port, _system_config={"metrics_report_interval_ms": 500})
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield port
    ray.shutdown()


def _slow(batch):
    time.sleep(0.01)
    return batch


class _Model:
    def __call__(self, batch):
        time.sleep(0.02)
        return batch


def scrape(port: int) -> list[tuple[str, dict[str, str], float]]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2)))
            out.append((m.group(1), labels, float(m.group(3))))
    return out


class _Watcher:
    """Scrapes the endpoint every 0.3 s from before the run until told to stop, keeping every
    value each series took, as Prometheus would see them. Ray's agent drops a gauge some seconds
    after its last update, so a single scrape after the run may miss what a live one saw."""

    def __init__(self, port: int) -> None:
        self.port, self.seen, self.stop = port, {}, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.scrape()
            self.stop.wait(0.3)

    def scrape(self) -> None:
        for name, labels, v in scrape(self.port):
            if name.startswith("ray_trident_"):
                self.seen.setdefault((name, tuple(sorted(labels.items()))), []).append(v)

    def series(self, execution_id: str) -> list[tuple[str, dict[str, str], list[float]]]:
        """Each series of ``execution_id``: its name, labels and the values scraped, in order."""
        return [(n, dict(lab), list(vs)) for (n, lab), vs in list(self.seen.items())
                if dict(lab).get("execution") == execution_id]


def test_trident_series_on_rays_endpoint(metrics_port):
    ds = (ray.data.range(ROWS, override_num_blocks=30)
          .map_batches(_slow)
          .map_batches(_Model, compute=ActorPoolStrategy(min_size=1, max_size=3), num_gpus=0.5, batch_size=10))
    watcher = _Watcher(metrics_port)
    try:
        with trident.autoscale(memory_limit=LIMIT_BYTES, interval_s=0.25) as run:
            rows = ds.take_all()
        assert sorted(int(r["id"]) for r in rows) == list(range(ROWS))  # every row exactly once
        (execution,) = run.executions
        model_op = next(op.name for op in execution.snapshots[-1].operators if "_Model" in op.name)

        # a short run on a busy machine may end before it plans, regime changes or learns history
        wanted = {"ray_" + s.name + ("_total" if s.kind == "counter" else "") for s in METRICS
                  if s.name not in ("trident_fallbacks", "trident_regime_changes", "trident_predicted_rows_per_s",
                                    "trident_history_plans", "trident_plans")
                  and not s.name.startswith("trident_arbiter_")}  # the arbiter's: the next test
        if any(d.plan is not None for d in execution.decisions):
            wanted.add("ray_trident_plans_total")

        def decided(series):
            return sum(vs[-1] for n, _, vs in series if n == "ray_trident_decisions_total")

        deadline = time.monotonic() + 60
        while True:  # Ray's agent exports every metrics_report_interval_ms, each series on its own
            series = watcher.series(execution.execution_id)
            complete = wanted <= {name for name, _, _ in series} and decided(series) >= len(execution.decisions)
            if complete or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        watcher.stop.set()
        watcher.thread.join()
    assert wanted <= {name for name, _, _ in series}, sorted(wanted - {name for name, _, _ in series})

    def values(name, **labels):
        """The values one series took over the run."""
        (found,) = [vs for n, lab, vs in series if n == name and all(lab.get(k) == x for k, x in labels.items())]
        return found

    assert all(lab["dataset"] == execution.dataset_id and lab["policy"] == "trident" for _, lab, _ in series)
    assert set(values("ray_trident_batch_size", operator=model_op)) == {10.0}
    targets = values("ray_trident_target_replicas", operator=model_op)
    assert all(0 <= t <= 3 for t in targets) and max(targets) >= 1  # the pool drains to 0 at the end
    assert all(0 <= r <= 3 for r in values("ray_trident_running_replicas", operator=model_op))
    heap = values("ray_trident_heap_per_replica_bytes", operator=model_op)
    assert all(10 * 2**20 < h < 16 * 2**30 for h in heap)  # a Python worker's resident memory
    assert set(values("ray_trident_memory_limit_bytes")) == {float(LIMIT_BYTES)}
    # the controller may have decided once more than the run polled before it ended
    assert decided(series) >= len(execution.decisions) >= 3
    plans = sum(vs[-1] for n, _, vs in series if n == "ray_trident_plans_total")
    assert plans >= sum(d.plan is not None for d in execution.decisions)
    kinds = {lab["kind"] for n, lab, _ in series if n == "ray_trident_decisions_total"}
    assert kinds <= set(trident.core.types.DECISION_KINDS) - {""} | {"none"}, kinds
    planned = {n for d in execution.decisions for n, _ in d.predicted_rows_per_s}
    predicted = {lab["operator"] for n, lab, vs in series if n == "ray_trident_predicted_rows_per_s" and max(vs) > 0}
    assert planned <= predicted, (planned, predicted)
    # beside Ray Data's own series, under the same dataset label
    ray_data = [lab for n, lab, _ in scrape(metrics_port) if n.startswith("ray_data_")]
    assert any(lab.get("dataset") == execution.dataset_id for lab in ray_data)


def test_the_arbiters_series_on_rays_endpoint(metrics_port):
    from trident.jobs.arbiter import Claim, Progress
    from trident.jobs.arbiter.actor import start

    arbiter = start(lapse_s=60)
    runs = [ray.get(arbiter.register.remote(Claim(name=n, owner="ops", min_cpus=1))) for n in ("long", "short")]
    watcher = _Watcher(metrics_port)
    names = {"ray_trident_arbiter_" + s for s in ("budget_cpus", "budget_gpus", "rank", "rows_per_s", "remaining_s")}
    try:
        deadline = time.monotonic() + 60
        t, seen = 0, {}
        while time.monotonic() < deadline:  # heartbeats as two runs would send them
            t += 1
            for (run_id, token, _), total in zip(runs, (100_000, 2_000)):
                ray.get(arbiter.update.remote(run_id, token, Progress(rows_done=50.0 * t, rows_total=total)))
            seen = {(n, dict(lab)["run"]): vs for (n, lab), vs in list(watcher.seen.items()) if n in names}
            if len(seen) == len(names) * len(runs):
                break
            time.sleep(0.5)
    finally:
        watcher.stop.set()
        watcher.thread.join()
        for run_id, token, _ in runs:
            ray.get(arbiter.leave.remote(run_id, token))
    ids = [run_id for run_id, _, _ in runs]
    assert {(n, r) for n, r in seen} == {(n, r) for n in names for r in ids}
    assert all(dict(lab)["owner"] == "ops" for (n, lab) in watcher.seen if n in names)
    last = {key: vs[-1] for key, vs in seen.items()}
    assert last[("ray_trident_arbiter_budget_cpus", ids[0])] + last[("ray_trident_arbiter_budget_cpus", ids[1])] <= 4
    assert {last[("ray_trident_arbiter_rank", r)] for r in ids} == {1.0, 2.0}
    assert all(v > 0 for (n, _), v in last.items() if n == "ray_trident_arbiter_rows_per_s")
