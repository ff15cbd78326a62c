"""What a demo prints after its runs: the side-by-side table and the changes trident made."""
from dataclasses import replace

from trident.demos.story import changes, figures, kills, meanwhile, side_by_side
from trident.report.plot import short_name
from trident.core.types import Decision, OperatorTarget, Plan

from test_report import record


def test_side_by_side_has_both_runs_and_the_speedup():
    base = figures("stock Ray Data", record(), wall_s=20.0, rows=300)
    ours = figures("trident", record(), wall_s=10.0, rows=300)
    assert ours.rows_per_s == 30.0 and ours.failed_tasks == 1 and ours.peak_heap_mib == 200
    table = side_by_side([base, ours], unit="pages")
    lines = table.splitlines()
    assert "stock Ray Data" in lines[0] and "trident" in lines[0] and "speedup" in lines[0]
    assert lines[1].split()[-1] == "2.00x"  # wall time: stock Ray's over trident's, above 1 when trident is faster
    assert lines[2].startswith("pages/s") and lines[2].split()[-1] == "2.00x"
    assert 5 <= len(lines) <= 10
    assert "OOM-killed" not in table  # no cgroup counted them
    killed = side_by_side([replace(base, oom_kills=41), replace(ours, oom_kills=1)], unit="pages")
    (row,) = [ln for ln in killed.splitlines() if ln.startswith("processes OOM-killed")]
    assert row.split()[-2:] == ["41", "1"]


def test_changes_name_targets_and_reasons_and_count_inner_moves():
    r = record()
    e = r.executions[0]
    op = "MapBatches(Embed)"
    plan = Plan(seq=2, targets=(OperatorTarget(name=op, replicas=5, batch_size=16),), created_at_s=6.0,
                reason="plan: throughput 40 -> 90 rows/s; cold start pays off | now: Embed -> 5")
    inner = Plan(seq=3, targets=(OperatorTarget(name=op, replicas=4),), reason="inner: util 0.4", created_at_s=8.0)
    e.decisions = [Decision(time_s=3.0, reason="change: rows/s 40 -> 4", regime_changes=(op,), kind="observe"),
                   Decision(time_s=6.0, reason=plan.reason, plan=plan, kind="plan"),
                   Decision(time_s=8.0, reason=inner.reason, plan=inner, kind="inner")]
    lines = changes(r)
    assert lines[0].strip().startswith("3.5 s") and "data changed at Embed" in lines[0]
    assert "plan: Embed 3->5, Embed batch 16 (throughput 40 -> 90 rows/s)" in lines[1]  # 3 ran then
    assert "inner loop: 1 pool moves" in lines[2]
    assert len(changes(r, limit=1)) == 2  # one line, then how many more


def test_a_plan_revisited_after_a_regime_change_says_what_it_kept():
    r = record()
    e = r.executions[0]
    op = "MapBatches(Embed)"
    e.decisions = [Decision(time_s=3.0, reason="change: rows/s 40 -> 4", regime_changes=(op,), kind="observe"),
                   Decision(time_s=4.0, reason="keep: the current plan is already optimal (optimal)", kind="keep"),
                   Decision(time_s=9.0, reason="keep: the current plan is already optimal (optimal)", kind="keep")]
    lines = changes(r)
    assert "data changed at Embed" in lines[0]
    # the size the pool ran at then (3 from 3 s on: its snapshots), whoever moved it
    assert lines[1].strip().startswith("4.5 s") and "keep: Embed x3 kept: the current plan is already optimal" in lines[1]
    assert len(lines) == 2  # the later keep is not a revisit


def test_a_pool_the_inner_loop_held_below_rays_ask_is_told_once_with_why():
    r = record()
    note = ("inner loop: MapBatches(Embed) held at 1: utilisation 2.00 >= 1.75 (2 in flight, 0 queued); bounds 1..3 "
            "(the user's bounds) (2 wanted; no task of it has finished, its heap read mid-task only, under the "
            "memory limit)")
    r.executions[0].decisions = [Decision(time_s=4.0, reason="observing", kind="observe", notes=(note,))]
    (line,) = changes(r)
    assert line.strip().startswith("4.5 s") and "held: Embed at 1 where Ray's rule asked 2" in line, line
    assert line.endswith("(no task of it has finished, its heap read mid-task only, under the memory limit)")


def test_what_the_other_run_did_its_pool_moves_and_kills_in_time_order():
    lines = meanwhile(record(), [7.0, 2.0, 9.5])
    assert lines[0].strip().startswith("2.0 s") and "the first of 3 processes OOM-killed" in lines[0], lines
    assert lines[1].strip().startswith("3.5 s") and lines[1].endswith("Embed 1->3"), lines
    assert meanwhile(record(), [])[-1].strip() == "no process OOM-killed"
    assert len(meanwhile(record(), None)) == 1  # no cgroup: kills not counted, not said
    still = record()
    e = still.executions[0]
    e.snapshots = [replace(s_, operators=tuple(replace(o, config=replace(o.config, replicas=1)) for o in s_.operators))
                   for s_ in e.snapshots]
    assert meanwhile(still, None) == ["          no pool moved"]
    assert kills([1.25])[0].strip() == "1.2 s  1 process OOM-killed by the kernel (Ray ran their tasks again)"


def test_no_change_is_said_plainly():
    r = record()
    r.executions[0].decisions = [replace(d, plan=None) for d in r.executions[0].decisions]
    assert "no change" in changes(r)[0]


def test_short_names():
    assert short_name("MapBatches(OcrPages)") == "OcrPages"
    assert short_name("ReadFiles->MapBatches(parse_pdfs)") == "parse_pdfs"
    assert short_name("Write") == "Write"
