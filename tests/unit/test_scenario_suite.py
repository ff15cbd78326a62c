"""The scenario suite's calibration: phases of a regime shift, scaling, the work bound (pure)."""
import dataclasses

import pytest

from harness.suite import Stage, scenarios, work_bound_s


def test_a_batch_costs_each_row_at_its_phase():
    st = Stage("detect", (0.02, 0.08, 0.02, 0.08), fixed_s=0.5, speed={"B": 2.0})
    assert st.batch_s([10, 0, 0, 10], "A") == pytest.approx(0.5 + 10 * 0.02 + 10 * 0.08)
    assert st.batch_s([0, 20, 0, 0], "B") == pytest.approx((0.5 + 20 * 0.08) / 2.0)


def test_scaling_keeps_the_scenario_and_whole_blocks():
    for sc in scenarios().values():
        assert len({len(st.per_row_s) for st in sc.stages}) == 1, sc.name  # the stages agree on the phases
        small = sc.scaled(0.25)
        assert small.rows % small.block_rows == 0 and small.rows < sc.rows
        assert (small.stages, small.row_bytes, small.object_store_mb, small.memory_limit_mb) == \
            (sc.stages, sc.row_bytes, sc.object_store_mb, sc.memory_limit_mb)


def test_the_work_bound_takes_the_best_split_in_every_phase():
    sc = scenarios()["long-shift"]
    per_phase = sc.rows / 4
    # 8 slots of 0.5 GPU: the cheap stage on 2, the costly one on 6, in every phase
    assert work_bound_s(sc) == pytest.approx(4 * per_phase * 0.08 / 6)
    assert sc.object_store_mb and sc.row_bytes  # queues between the stages are bounded by the object store


def test_memory_bound_fits_its_best_split_and_no_split_that_fills_the_gpus():
    sc = scenarios()["memory-bound"]
    detect, embed = sc.stages
    mem = lambda d, e: d * detect.base_mb + e * embed.base_mb  # noqa: E731
    assert mem(3, 4) * 1.05 <= sc.memory_limit_mb  # the best split, with a settled planning margin
    slots = int(4 / detect.num_gpus)
    fill = [d for d in range(1, slots) if max(d, slots - d) <= detect.max_replicas == embed.max_replicas]
    assert fill and all(mem(d, slots - d) > sc.memory_limit_mb for d in fill)
    # the bound is that split: 4 Embed replicas at 0.06 s per row
    assert work_bound_s(sc) == pytest.approx(sc.rows * 0.06 / 4)


def test_a_plans_time_beyond_its_cold_starts_is_what_it_waited_with_no_actor_starting():
    """A plan at 10 s whose two actors were pending from 11 to 15 s and whose target was reached at
    17 s (an old actor drained until then): 7 s to the target, 4 s of it starting actors."""
    from harness.suite import reach_and_start
    from trident.report.record import Action, ExecutionRecord
    from trident.core.types import ClusterView, OperatorConfig, OperatorSnapshot, Snapshot

    def snap(t, pending):
        op = OperatorSnapshot(name="embed", index=0, actors_pending=pending,
                              config=OperatorConfig(kind="actor", replicas=4, min_replicas=1))
        return Snapshot(execution_id="e", seq=int(t), time_s=float(t), operators=(op,), cluster=ClusterView(cpus=4, gpus=2))

    ex = ExecutionRecord(execution_id="e", dataset_id="d", started_at_s=0.0)
    ex.snapshots = [snap(t, 2 if 11 <= t < 15 else 0) for t in range(20)]
    ex.actions = [Action(time_s=17.0, operator="embed", kind="target_reached", detail="", value=7.0),
                  Action(time_s=17.0, operator="embed", kind="drain", detail="", value=None)]
    assert reach_and_start(ex) == [(7.0, 4.0)]
    # the shim's own count at every scheduling step, finer than the 1 s snapshots, wins
    ex.actions[0] = dataclasses.replace(ex.actions[0], starting_s=4.6)
    assert reach_and_start(ex) == [(7.0, 4.6)]


def test_start_up_and_steady_pace_are_read_at_the_last_model_stage():
    """1,000 rows; the last pool puts out nothing for 20 s, then 50 rows/s (its upstream pool
    runs ahead at 100 rows/s): a tenth is out at 22 s, the pace between a quarter and three
    quarters is 50 rows/s. A run that stops at 60% has no steady pace."""
    from harness.suite import start_and_steady
    from trident.report.record import ExecutionRecord
    from trident.core.types import ClusterView, OperatorConfig, OperatorSnapshot, Snapshot

    def snap(t):
        ops = (OperatorSnapshot(name="read", index=0, rows_out_total=min(1000, 200 * t),
                                config=OperatorConfig(kind="task", replicas=None)),
               OperatorSnapshot(name="detect", index=1, rows_out_total=min(1000, 100 * t),
                                config=OperatorConfig(kind="actor", replicas=2, min_replicas=1)),
               OperatorSnapshot(name="embed", index=2, rows_out_total=min(1000, 50 * max(0, t - 20)),
                                config=OperatorConfig(kind="actor", replicas=2, min_replicas=1)))
        return Snapshot(execution_id="e", seq=t, time_s=float(t), operators=ops, cluster=ClusterView(cpus=4, gpus=2))

    ex = ExecutionRecord(execution_id="e", dataset_id="d", started_at_s=0.0)
    ex.snapshots = [snap(t) for t in range(45)]
    tenth, steady = start_and_steady(ex, 1000)
    assert tenth == 22.0
    assert steady == pytest.approx(50.0)
    ex.snapshots = [snap(t) for t in range(33)]  # 600 rows out of the last pool
    assert start_and_steady(ex, 1000) == (22.0, None)


def test_the_tuned_setup_is_the_best_fixed_one_and_never_beats_the_work_bound():
    from harness.suite import tuned_setup

    all_ = scenarios()
    for sc in all_.values():
        setups, work_s = tuned_setup(sc)
        assert len(setups) == len(sc.stages)
        assert work_s >= work_bound_s(sc) - 1e-6, sc.name
    # two types: each stage pinned to the type where it is faster, four replicas each
    setups, _ = tuned_setup(all_["two-types"])
    assert [(s.replicas, s.accelerator_type) for s in setups] == [(4, "B"), (4, "A")]
    # batch-size: the largest batch that fits 8 replicas (64 fits only 6: 152 rows/s against 164)
    (s,), _ = tuned_setup(all_["batch-size"])
    assert (s.replicas, s.batch_size) == (8, 32)
    # a regime shift with unbounded queues: one split for the whole run, each stage working ahead,
    # beats the best split phase by phase, and the work bound is that
    setups, work_s = tuned_setup(all_["regime-shift"])
    sc = all_["regime-shift"]
    assert [s.replicas for s in setups] == [4, 4]
    assert work_s == pytest.approx(max(sc.rows / 2 * sum(st.per_row_s) / 4 for st in sc.stages))
    assert work_bound_s(sc) == pytest.approx(work_s) and work_s < sc.rows * 0.08 / 6  # phase by phase: 2 + 6
    # queues bounded by the object store: phase by phase, the split one phase needs starves the other
    setups, work_s = tuned_setup(all_["long-shift"])
    assert work_s > 1.4 * work_bound_s(all_["long-shift"]) and [s.replicas for s in setups] == [4, 4]


def test_rounds_take_each_ratio_within_their_round_and_sum_up_as_medians(tmp_path):
    """Ray's placement on two types is luck: over rounds a ratio is taken against the Ray run of
    the same round, and the medians name the spread."""
    from harness.suite import Run, plot, result

    sc = scenarios()["two-types"]

    def run(policy, wall, round_):
        return Run(policy=policy, wall_s=wall, rows_lost=0, rows_duplicated=0, oom_kills=0, summary={}, round=round_)

    runs = [run("ray", 400.0, 1), run("trident", 250.0, 1), run("ray", 300.0, 2), run("trident", 260.0, 2),
            run("ray", 320.0, 3), run("trident", 256.0, 3)]
    res = result(sc, runs, scale=1.0, started="t")
    rows = [r for r in res["rows"] if r["policy"] == "trident"]
    assert [r["round"] for r in rows] == [1, 2, 3]
    assert [r["ratio_to_baseline"] for r in rows] == [1.6, round(300 / 260, 3), 1.25]
    med = res["medians"]["trident"]
    assert (res["rounds"], med["runs"], med["median_wall_s"]) == (3, 3, 256.0)
    assert (med["median_ratio_to_baseline"], med["min_ratio_to_baseline"], med["max_ratio_to_baseline"]) == \
        (1.25, round(300 / 260, 3), 1.6)
    bound = next(r for r in res["rows"] if r["policy"] == "bound")
    assert bound["ratio_to_baseline"] == round(320.0 / bound["wall_s"], 3)  # to Ray's median run
    plot([res], str(tmp_path / "p.png"))
    assert (tmp_path / "p.png").stat().st_size > 0
    # one round: the shape of a single run, no round or medians
    single = result(sc, runs[:2], scale=1.0, started="t")
    assert "medians" not in single and all("round" not in r for r in single["rows"])
