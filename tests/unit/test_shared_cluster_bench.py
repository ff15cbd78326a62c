"""The shared-cluster benchmark's draw and its measures (``benchmarks/shared_cluster.py``; pure, no Ray)."""
import pytest

import shared_cluster
from trident.jobs.arbiter.divide import Budget


def test_the_arrivals_are_drawn_from_the_seed_with_each_kind_of_run_once():
    for seed in range(5):
        runs = shared_cluster.arrivals(seed)
        assert runs == shared_cluster.arrivals(seed)  # the same seed, the same round
        pipes = [r for r in runs if r["kind"] == "pipeline"]
        train = [r for r in runs if r["kind"] == "training"]
        assert len(pipes) == 6 and len(train) == 2 and len({r["name"] for r in runs}) == 8
        assert runs[0]["at"] == 0.0 and runs[0]["rows"] == 12_000 and runs == sorted(runs, key=lambda r: r["at"])
        assert sorted(r["rows"] for r in pipes if r["pinned"] == "B") == [2_000, 6_000]  # one video-like per size
        (urgent,) = [r for r in pipes if r["priority"] == "high"]
        assert urgent["rows"] == 2_000 and urgent["pinned"] is None
        assert all(0 <= r["at"] <= 40 for r in runs) and all(20 <= r["secs"] <= 40 for r in train)
    assert shared_cluster.arrivals(0) != shared_cluster.arrivals(1)


def test_a_rounds_measures_are_over_every_run_and_each_alone():
    results = [dict(name="p", kind="pipeline", rows=100, pinned=None, completion_s=30.0, arrival_unix_s=100.0,
                    end_unix_s=130.0, arbiter_events=[]),
               dict(name="t", kind="training", secs=10.0, completion_s=20.0, arrival_unix_s=105.0,
                    end_unix_s=125.0, arbiter_events=[])]
    s = shared_cluster.summary(results, {"100 rows on any": 15.0, "training 10 s": 10.0})
    assert s["avg_jct_s"] == pytest.approx(25.0) and s["avg_pipeline_jct_s"] == pytest.approx(30.0)
    assert s["makespan_s"] == pytest.approx(30.0)  # first arrival to last end
    assert s["slowdowns"] == {"p": pytest.approx(2.0), "t": pytest.approx(2.0)} and s["max_slowdown"] == pytest.approx(2.0)
    assert 25.0 < s["p95_jct_s"] <= 30.0


def test_each_measure_is_the_median_over_the_rounds_and_the_first_contender_the_baseline():
    run = dict(name="p", kind="pipeline", rows=100, pinned=None, arrival_unix_s=100.0, arbiter_events=[])
    solo = {"100 rows on any": 15.0}
    rounds = [shared_cluster.summary([{**run, "completion_s": c, "end_unix_s": 100.0 + c}], solo)
              for c in (30.0, 50.0, 90.0)]
    res = shared_cluster._result({"stock": rounds, "trident": rounds[:1]}, [dict(run, at=0.0)], solo, 0, "t", "v", "r", 24)
    stock, trident = res["rows"]
    assert res["baseline"] == "stock" and stock["avg_jct_s"] == 50.0 and len(stock["rounds"]) == 3
    assert stock["completion_s"] == {"p": 90.0}  # the last round's runs
    assert trident["ratio_to_baseline"] == pytest.approx(50.0 / 30.0) and stock["ratio_to_baseline"] == 1.0


def test_a_shrink_is_a_gpu_budget_cut_and_futile_when_the_run_ends_within_the_payoff():
    def said(budget):  # as the run's link says a budget (trident.jobs.arbiter.link)
        return "arbiter_budget", budget.describe() + ": " + budget.reason

    events = [[1.0, "arbiter", "joined the cluster's arbiter as p-1 (at least 3 CPUs, 1 GPUs)"],
              [1.0, *said(Budget(cpus=12, gpus=3, rank=0, reason="rank 1 of 1 by priority 0, then srtf"))],
              [5.0, *said(Budget(cpus=9, gpus=2, rank=0, reason="rank 1 of 2 by priority 0, then srtf"))],
              [9.0, *said(Budget(cpus=6, gpus=2, rank=1, reason="rank 2 of 2 by priority 0, then srtf"))],
              [20.0, *said(Budget())],
              [30.0, *said(Budget(cpus=3.5, gpus=0.5, rank=1, reason="rank 2 of 2 by priority 0, then srtf"))]]
    assert shared_cluster.shrinks(events, completion_s=60.0) == (2, 0)  # 3 -> 2 GPUs, and from no cap to 1
    assert shared_cluster.shrinks(events, completion_s=36.0) == (2, 1)  # it ended 6 s after the last cut
    assert shared_cluster.shrinks([], completion_s=10.0) == (0, 0)  # stock Ray Data: no budget at all
