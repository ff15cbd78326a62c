import json

import pytest

from trident.report.plot import plot_run, series
from trident.report.record import Action, Event, ExecutionRecord, RunRecord, summarize
from trident.report.timeline import format_report
from trident.core.types import ClusterView, Decision, OperatorConfig, OperatorSnapshot, OperatorTarget, Plan, Snapshot


def snap(t, rows, replicas, rss, failed=0):
    ops = (
        OperatorSnapshot(name="Input", index=0, config=OperatorConfig(kind="other", replicas=None, min_replicas=0)),
        OperatorSnapshot(name="MapBatches(Embed)", index=1,
                         config=OperatorConfig(kind="actor", replicas=replicas, max_replicas=8, batch_size=32,
                                               num_gpus=0.5, accelerator_type="A"),
                         rows_out_total=rows, rows_out_per_s=rows / max(t, 1e-9), tasks_failed=failed,
                         heap_rss_bytes=rss * replicas, heap_rss_per_replica_bytes=rss),
    )
    return Snapshot(execution_id="ds_1-abc", seq=int(t), time_s=t, operators=ops,
                    cluster=ClusterView(cpus=8, gpus=4, gpus_by_type=(("A", 2.0), ("B", 2.0))))


def record():
    plan = Plan(seq=1, targets=(OperatorTarget(name="MapBatches(Embed)", replicas=3),), reason="ds2: ceil(90/30)=3",
                created_at_s=2.0)
    e = ExecutionRecord(execution_id="ds_1-abc", dataset_id="ds_1", started_at_s=0.5, started_at_unix_s=1000.0,
                        ended_at_s=10.5, status="succeeded", mode="control",
                        snapshots=[snap(t, 30 * t, 1 if t < 3 else 3, 200 * 2**20, failed=1 if t > 5 else 0)
                                   for t in range(1, 11)],
                        decisions=[Decision(time_s=1.0, reason="ds2: window started"),
                                   Decision(time_s=2.0, reason=plan.reason, plan=plan)],
                        actions=[Action(time_s=2.1, operator="MapBatches(Embed)", kind="pool_target",
                                        detail="pool target -> 3", value=3),
                                 Action(time_s=5.1, operator="MapBatches(Embed)", kind="target_reached",
                                        detail="3 actor(s) running 3.10 s after the plan", value=3.1)],
                        events=[Event(time_s=9.0, kind="controller_failed", message="ActorDiedError")])
    return RunRecord(policy="ds2", config={"policy": "ds2", "interval_s": 1.0}, started_at="2026-11-29T10:00:00+00:00",
                     trident_version="0.1.0", ray_version="2.60.0", executions=[e], warnings=["controller failed"])


def test_summary_figures():
    s = summarize(record())
    assert s["rows"] == 300
    assert s["wall_s"] == pytest.approx(10.0)
    assert s["throughput_rows_per_s"] == pytest.approx(30.0)
    assert s["reconfigurations"] == 1
    assert s["failed_tasks"] == {"MapBatches(Embed)": 1}
    assert s["target_reach_s"] == [3.1]
    assert s["controller_failure"] == "ActorDiedError"
    assert s["peak_heap_rss_per_replica_bytes"] == {"MapBatches(Embed)": 200 * 2**20}
    assert s["plans"] == 1 and s["decisions"] == 2


def test_summary_of_an_unfinished_run_leaves_wall_time_out():
    r = record()
    r.executions[0].ended_at_s = None
    s = summarize(r)
    assert "wall_s" not in s and "throughput_rows_per_s" not in s  # missing means not measured


def test_report_text_shows_timeline_decisions_actions_and_events():
    text = format_report(record())
    assert text.startswith("trident run: policy ds2, 1 execution(s), 300 rows, wall 10.00 s, 30.0 rows/s")
    assert "MapBatches(Embed)" in text and "200.0MiB" in text
    assert "plan #1: ds2: ceil(90/30)=3" in text
    assert "pool_target pool target -> 3" in text
    assert "controller_failed: ActorDiedError" in text
    assert "warning: controller failed" in text
    assert max(len(line) for line in text.splitlines()) <= 140


def test_long_runs_are_sampled_to_a_readable_timeline():
    r = record()
    r.executions[0].snapshots = [snap(t, 30 * t, 2, 10) for t in range(1, 500)]
    text = format_report(r)
    timeline = [line for line in text.splitlines() if line.startswith("    ") and "[" in line]
    assert 10 <= len(timeline) <= 31
    assert timeline[-1].split()[0] == "499.0"  # the last snapshot is always shown


def test_json_round_trip(tmp_path):
    path = tmp_path / "run.json"
    r = record()
    r.to_json(str(path))
    raw = json.loads(path.read_text())
    assert raw["format_version"] == 1 and raw["policy"] == "ds2"
    back = RunRecord.from_json(str(path))
    assert back == r
    assert summarize(back) == summarize(r)


def test_plot_writes_a_png(tmp_path):
    path = tmp_path / "run.png"
    plot_run(record(), str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    d = series(record())["MapBatches(Embed)"]
    assert d["t_s"][0] == pytest.approx(1.5) and d["replicas"][-1] == 3
    assert d["rss_mib"][-1] == pytest.approx(600.0)


def test_rows_of_a_write_pipeline_are_the_rows_written_not_the_sinks_statistics_rows():
    r = record()
    e = r.executions[0]
    last = e.snapshots[-1]
    sink = OperatorSnapshot(name="Write", index=2, config=OperatorConfig(kind="task", replicas=None),
                            rows_in_total=300, rows_out_total=4)  # one statistics row per write task
    e.snapshots[-1] = Snapshot(execution_id=last.execution_id, seq=last.seq, time_s=last.time_s,
                               operators=last.operators + (sink,), cluster=last.cluster)
    assert summarize(r)["rows"] == 300


def test_rows_hidden_by_a_fused_write_sink_are_not_measured():
    r = record()
    e = r.executions[0]
    last = e.snapshots[-1]
    fused = OperatorSnapshot(name="ReadRange->MapBatches(f)->Write", index=1,
                             config=OperatorConfig(kind="task", replicas=None), rows_in_total=4, rows_out_total=4)
    e.snapshots[-1] = Snapshot(execution_id=last.execution_id, seq=last.seq, time_s=last.time_s,
                               operators=(last.operators[0], fused), cluster=last.cluster)
    s = summarize(r)
    assert s["rows"] is None and "throughput_rows_per_s" not in s


def test_report_shows_the_peak_rss_per_replica_not_the_last():
    r = record()
    e = r.executions[0]
    e.snapshots = [snap(t, 30 * t, 1, (900 if t == 4 else 100) * 2**20) for t in range(1, 11)]
    text = format_report(r)
    assert "peak rss/replica" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("MapBatches(Embed)"))
    assert row.rstrip().endswith("900.0MiB"), row


def test_run_shows_a_short_html_summary():
    from trident.autoscaler.api import Run
    from trident.autoscaler.config import AutoscaleConfig

    run = Run(AutoscaleConfig.from_user(policy="ds2"))
    run.record = record()
    html = run._repr_html_()
    assert "<table>" in html and "ds2" in html and "300" in html and "2 / 1" in html  # decisions / plans
    assert html.count("<tr>") == 9
