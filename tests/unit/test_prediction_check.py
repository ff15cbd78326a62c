"""Every plan is a prediction, and the policy checks it: once a plan is in place, what comes out
is compared with what it predicted; a shortfall or a late target is a ``mismatch`` whose cause is
read from the snapshot, and the next plan uses what was learned."""
import dataclasses

from test_cluster_model import RECORDED, short_of_cpus_spec
from trident.autoscaler.policies.trident.check import PredictionCheck, diagnose
from trident.autoscaler.sim import model as sim_model
from trident.autoscaler.sim.pipeline import simulate
from trident.core.cluster import node_shapes
from trident.core.types import ClusterView, DecisionKind, OperatorConfig, OperatorSnapshot, Snapshot

NODES = node_shapes(RECORDED)
POOL = OperatorConfig(kind="actor", replicas=8, max_replicas=8, num_cpus=1, num_gpus=0.5)
READ = OperatorConfig(kind="task", replicas=4, num_cpus=1)


def _snap(t, *, pool_rows=0, running=8, pending=0, read_running=4, read_queue=0, read_rows=0, store=None):
    ops = (OperatorSnapshot(name="read", index=1, config=READ, rows_out_total=read_rows, tasks_running=read_running,
                            input_queue_blocks=read_queue),
           OperatorSnapshot(name="pool", index=2, config=POOL, rows_out_total=pool_rows, actors_running=running,
                            actors_pending=pending, tasks_running=running, input_queue_blocks=5))
    view = ClusterView(cpus=18, gpus=8, nodes=NODES, object_store_bytes=store)
    return Snapshot(execution_id="x", seq=int(t), time_s=t, operators=ops, cluster=view)


def test_actors_pending_past_a_cold_start_name_the_resource_the_nodes_lack():
    check = PredictionCheck(window_s=5.0)
    check.expect(1, {"read": 200.0, "pool": 160.0}, 0.0, cold_start_s=3.0)
    assert check.step(_snap(1, running=4, pending=4), 1.0, interval_s=1.0, rolling_out=True) is None
    assert check.step(_snap(2, running=4, pending=4), 2.0, interval_s=1.0, rolling_out=False) is None
    assert check.step(_snap(6, running=4, pending=4), 6.0, interval_s=1.0, rolling_out=False) is None
    mismatch = check.step(_snap(8, running=4, pending=4), 8.0, interval_s=1.0, rolling_out=False)
    assert mismatch is not None and mismatch.late
    (cause,) = mismatch.causes
    assert cause.kind == "pending" and cause.operator == "pool" and cause.gpus_cap == 2.0  # 4 running x 0.5
    assert "4 actor(s) of pool pending" in cause.text and "bound by their CPUs" in cause.text
    assert "2 x A-3cpu-2gpu" in cause.text and "cpu-6cpu" not in cause.text  # the head hosts no GPU actor
    assert check.step(_snap(9, running=4, pending=4), 9.0, interval_s=1.0, rolling_out=False) is None  # once


def test_output_below_the_prediction_for_two_windows_is_a_mismatch_and_within_it_is_not():
    check = PredictionCheck(window_s=5.0, shortfall=0.2, windows=2)
    check.expect(1, {"read": 200.0, "pool": 100.0}, 0.0, cold_start_s=3.0)
    assert check.step(_snap(0), 0.0, interval_s=1.0, rolling_out=False) is None  # in place: windows begin
    assert check.step(_snap(5, pool_rows=450, read_rows=1000), 5.0, interval_s=1.0, rolling_out=False) is None
    assert check.low == 0  # 90 of 100 rows/s: within 20%
    assert check.step(_snap(10, pool_rows=750, read_rows=2000), 10.0, interval_s=1.0, rolling_out=False) is None
    mismatch = check.step(_snap(15, pool_rows=1050, read_rows=3000), 15.0, interval_s=1.0, rolling_out=False)
    assert mismatch is not None and not mismatch.late
    assert mismatch.measured_rows_per_s == 60.0 and mismatch.predicted_rows_per_s == 100.0
    assert [c.kind for c in mismatch.causes] == ["slow"] and "7.5 rows/s per replica over 8" in mismatch.reason


def test_a_kept_plan_is_checked_unless_a_prediction_stands_or_the_same_one_just_failed():
    """A look that keeps the plan in place predicts what it puts out; it is checked as a plan is.
    Kept again at the output that just failed, it is no new prediction (no mismatch every two
    windows); kept at another, it is checked again; a plan's own check is not reset by a keep."""
    check = PredictionCheck(window_s=5.0, shortfall=0.2, windows=2)
    check.keep(1, {"read": 200.0, "pool": 100.0}, 0.0, cold_start_s=0.0)
    assert not check.done
    for t, rows in ((0, 0), (5, 300)):
        assert check.step(_snap(t, pool_rows=rows), float(t), interval_s=1.0, rolling_out=False) is None
    mismatch = check.step(_snap(10, pool_rows=600), 10.0, interval_s=1.0, rolling_out=False)
    assert mismatch is not None and mismatch.predicted_rows_per_s == 100.0 and check.done
    assert mismatch.reason.startswith("mismatch: plan 1 predicted 100 rows/s")
    assert "the allocation kept (no plan made yet)" in dataclasses.replace(mismatch, plan_seq=0).reason
    check.keep(1, {"read": 200.0, "pool": 95.0}, 16.0, cold_start_s=0.0)
    assert check.done  # 95 is the 100 that failed, looked at again
    check.keep(1, {"read": 120.0, "pool": 60.0}, 16.0, cold_start_s=0.0)
    assert not check.done and check.predicted["pool"] == 60.0
    check.expect(2, {"pool": 80.0}, 20.0, cold_start_s=3.0)
    check.keep(2, {"pool": 50.0}, 21.0, cold_start_s=0.0)
    assert check.predicted == {"pool": 80.0} and check.seq == 2  # the plan's check stands


def test_a_task_operator_short_of_cpus_and_a_full_object_store_are_named():
    snap = _snap(10, read_running=1, read_queue=12, store=100 * 2**20)
    snap = dataclasses.replace(snap, operators=tuple(dataclasses.replace(o, object_store_bytes=50 * 2**20)
                                                     for o in snap.operators))
    causes = diagnose(snap, {"read": 200.0, "pool": 160.0}, {"read": 50.0, "pool": 150.0})
    kinds = {c.kind: c for c in causes}
    assert set(kinds) == {"object_store", "cpu_starved"}
    assert "1 task(s) running of 4 allowed, 12 block(s) queued" in kinds["cpu_starved"].text


def test_a_regime_change_or_a_finished_operator_ends_the_check():
    check = PredictionCheck(window_s=5.0)
    check.expect(1, {"pool": 100.0}, 0.0, cold_start_s=3.0)
    check.drop()
    assert check.step(_snap(20, running=4, pending=4), 20.0, interval_s=1.0, rolling_out=False) is None
    check.expect(2, {"pool": 100.0}, 0.0, cold_start_s=3.0)
    done = _snap(20, running=4, pending=4)
    done = dataclasses.replace(done, operators=(dataclasses.replace(done.operators[0], completed=True),
                                                done.operators[1]))
    assert check.step(done, 20.0, interval_s=1.0, rolling_out=False) is None and check.done
    # a plan made after read finished is made for the pool left: it is checked all the same
    check.expect(3, {"pool": 100.0}, 20.0, cold_start_s=3.0, finished=frozenset({"read"}))
    assert check.step(done, 21.0, interval_s=1.0, rolling_out=False) is None and not check.done
    mismatch = check.step(done, 27.0, interval_s=1.0, rolling_out=False)  # past 21 + 3 s + two intervals
    assert mismatch is not None and mismatch.late and mismatch.causes[0].kind == "pending"


def test_a_planner_blind_to_the_nodes_learns_from_the_mismatch_and_plans_what_fits(monkeypatch):
    """The simulator places actors per node as Ray does; the policy is shown only the cluster's
    totals (18 CPUs, 8 GPUs), plans 8 + 8 actors of one CPU and half a GPU, and 4 wait: the
    obstacle is named (pending) and the next plans use at most the GPUs the running actors hold."""
    original = sim_model.PipelineSpec.cluster_view
    monkeypatch.setattr(sim_model.PipelineSpec, "cluster_view", lambda self: dataclasses.replace(
        original(self), nodes=()))
    res = simulate(short_of_cpus_spec(), policy="trident", seed=3)
    assert res.finished
    story = [f"{d.time_s} {d.kind}: {d.reason[:200]}" for d in res.decisions if d.kind not in ("observe", "dwell")]
    named = [d for d in res.decisions if d.kind == DecisionKind.MISMATCH and "pending" in d.reason]
    assert named, story
    sizes, after = {}, []
    for d in res.decisions:
        pools = {t.name: t.replicas for t in (d.plan.targets if d.plan else ()) if t.name in ("detect", "embed")}
        sizes.update(pools)
        if pools and d.time_s > named[0].time_s:
            after.append(sizes["detect"] + sizes["embed"])
    assert after and max(after) <= 12, (after, story)  # 6 + 6 where 8 + 8 was asked for before


def _pool_snap(t, *, rows, running, queued=5):
    op = OperatorSnapshot(name="pool", index=1, config=dataclasses.replace(POOL, replicas=running, num_gpus=0.0),
                          rows_out_total=rows, actors_running=running, tasks_running=running,
                          input_queue_blocks=queued)
    return Snapshot(execution_id="x", seq=int(t), time_s=t, operators=(op,), cluster=ClusterView(cpus=2, gpus=0))


def test_a_pool_grown_that_puts_out_no_more_is_saturated_at_its_old_size():
    """On two cores a third OCR replica adds nothing: the plan expected 3 x 10 rows/s, the pool
    put out what one replica did; the cause names it and caps the pool at its old size."""
    check = PredictionCheck(window_s=5.0)
    for t in range(0, 6):  # one replica, backlogged, 10 rows/s
        check.observe(_pool_snap(t, rows=10 * t, running=1), float(t))
    check.expect(1, {"pool": 30.0}, 5.0, cold_start_s=2.0)
    assert check.before == {"pool": (1, 10.0)}
    mismatch, rows = None, 50
    for t in range(6, 30):
        rows += 10.5
        snap = _pool_snap(t, rows=rows, running=3)
        check.observe(snap, float(t))
        mismatch = mismatch or check.step(snap, float(t), interval_s=1.0, rolling_out=False)
    assert mismatch is not None
    (cause,) = mismatch.causes
    assert cause.kind == "saturated" and cause.ceiling == 1
    assert "replicas beyond 1 add nothing" in cause.text


def test_a_pool_that_grew_its_output_is_not_saturated():
    check = PredictionCheck(window_s=5.0)
    for t in range(0, 6):
        check.observe(_pool_snap(t, rows=10 * t, running=1), float(t))
    check.expect(1, {"pool": 30.0}, 5.0, cold_start_s=2.0)
    causes = diagnose(_pool_snap(20, rows=0, running=3), {"pool": 30.0}, {"pool": 20.0}, before=check.before)
    assert [c.kind for c in causes] == ["slow"]  # 20 rows/s on 3 where 1 made 10: short, not saturated


def test_a_pool_short_of_room_on_its_own_type_leaves_the_other_types_free_gpus_to_plans():
    """The pool pinned to A, 4 running and 4 pending; type B's 4 GPUs hold 1 running actor of
    another pool: the cap is the GPUs running plus B's 3 free, not the GPUs running alone."""
    from trident.core.types import TypeUsage

    pinned = dataclasses.replace(POOL, accelerator_type="A")
    other = OperatorConfig(kind="actor", replicas=1, max_replicas=4, num_cpus=1, num_gpus=1.0)
    snap = _snap(8, running=4, pending=4)
    ops = (snap.operators[0], dataclasses.replace(snap.operators[1], config=pinned),
           OperatorSnapshot(name="other", index=3, config=other, actors_running=1, tasks_running=1,
                            by_type=(TypeUsage(accelerator_type="B", actors=1, busy_s=1.0, tasks_finished=4),)))
    snap = dataclasses.replace(snap, operators=ops, cluster=dataclasses.replace(
        snap.cluster, gpus_by_type=(("A", 4.0), ("B", 4.0))))
    check = PredictionCheck(window_s=5.0)
    check.expect(1, {"read": 200.0, "pool": 160.0, "other": 50.0}, 0.0, cold_start_s=3.0)
    for t in (1.0, 2.0, 6.0):
        assert check.step(dataclasses.replace(snap, time_s=t), t, interval_s=1.0, rolling_out=t == 1.0) is None
    mismatch = check.step(snap, 8.0, interval_s=1.0, rolling_out=False)
    (cause,) = [c for c in mismatch.causes if c.kind == "pending"]
    assert cause.operator == "pool" and cause.gpus_cap == 4 * 0.5 + 1.0 + 3.0
