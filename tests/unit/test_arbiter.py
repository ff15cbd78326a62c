"""The arbiter's pure state: registration and trust, heartbeats and lapses, and how budgets are divided."""
import pytest

from trident.jobs.arbiter import ArbiterState, Budget, Claim, Progress, Refused
from trident.jobs.arbiter.divide import Share, divide, rank


def _state(**kw):
    return ArbiterState(cpus=12.0, gpus=4.0, rebalance_s=0.0, **kw)


def _beat(state, run_id, token, done, total, now):
    return state.update(run_id, token, Progress(rows_done=done, rows_total=total), now)


def test_a_run_alone_gets_no_cap_and_two_runs_share_the_cluster():
    s = _state()
    a, ta, budget = s.register(Claim(name="long", min_cpus=3), 0.0)
    assert budget == Budget()  # alone: plans on the whole cluster
    b, tb, budget_b = s.register(Claim(name="short", min_cpus=3), 8.0)
    total_cpus = s.runs[a].budget.cpus + s.runs[b].budget.cpus
    assert total_cpus == pytest.approx(12.0) and min(s.runs[a].budget.cpus, budget_b.cpus) >= 3.0
    s.leave(b, tb, 9.0)
    assert s.runs[a].budget == Budget()
    s.leave(a, ta, 10.0)  # the last run leaves: nobody to divide for
    assert s.runs == {} and s.status(10.0)["runs"] == []


def test_srtf_serves_the_run_with_the_least_time_left_first():
    s = _state(preemption="eager")
    a, ta, _ = s.register(Claim(name="long", min_cpus=2), 0.0)
    b, tb, _ = s.register(Claim(name="short", min_cpus=2), 0.0)
    for t in (1.0, 2.0, 3.0, 4.0):  # a rate once the heartbeats span 3 s
        _beat(s, a, ta, 100 * t, 16000, t)  # 100 rows/s, 156 s left
        _beat(s, b, tb, 100 * t, 3000, t)  # 100 rows/s, 26 s left
    assert s.runs[b].budget.rank == 0 and s.runs[b].budget.cpus == pytest.approx(10.0)
    assert s.runs[a].budget.cpus == pytest.approx(2.0)  # its floor: nobody starves
    assert "srtf" in s.runs[a].budget.reason


def test_lazy_keeps_the_budget_of_a_run_about_to_finish():
    for preemption, kept in (("lazy", True), ("eager", False)):
        top = Share("top", Claim(name="top", min_cpus=2), 0.0, 1.0, None, Budget(cpus=6, gpus=0, rank=0))
        ending = Share("ending", Claim(name="ending", min_cpus=2), 1.0, 5.0, None, Budget(cpus=6, gpus=0, rank=1))
        out = divide([top, ending], cpus=12, gpus=0, preemption=preemption, payoff_s=10.0)
        assert out["ending"].cpus == pytest.approx(6.0 if kept else 2.0), preemption
        assert out["top"].cpus == pytest.approx(6.0 if kept else 10.0)
        assert ("cannot pay off" in out["ending"].reason) is kept


def test_never_lets_newcomers_share_only_what_is_left():
    s = _state(preemption="never", policy="srtf")
    a, ta, _ = s.register(Claim(name="first", min_cpus=2, max_cpus=8), 0.0)
    _beat(s, a, ta, 10, 100000, 1.0)
    b, tb, budget = s.register(Claim(name="second", min_cpus=2), 2.0)
    assert s.runs[a].budget.cpus == pytest.approx(8.0) and budget.cpus == pytest.approx(4.0)


def test_priority_classes_come_before_the_policy_and_quotas_hold_whatever_is_claimed():
    s = _state(quotas={"greedy": (4.0, 1.0)})
    a, _, _ = s.register(Claim(name="batch", owner="greedy", min_cpus=1, min_gpus=1), 0.0)
    b, _, _ = s.register(Claim(name="urgent", owner="ana", priority=5, min_cpus=1), 1.0)
    assert s.runs[b].budget.rank == 0
    assert s.runs[a].budget.cpus <= 4.0 and s.runs[a].budget.gpus <= 1.0
    assert s.runs[b].budget.cpus == pytest.approx(11.0)


def test_numbers_of_any_real_type_are_taken():
    import numpy as np

    s = _state()
    a, ta, _ = s.register(Claim(name="np", min_cpus=np.int64(2), min_gpus=np.float32(0.5)), 0.0)
    s.update(a, ta, Progress(rows_done=np.int64(3), rows_total=np.float64(10)), 1.0)
    assert s.runs[a].progress.rows_done == 3


def test_a_run_alone_under_a_quota_is_capped():
    s = _state(quotas={"bob": (2.0, 0.0)})
    _, _, budget = s.register(Claim(name="x", owner="bob", min_cpus=1), 0.0)
    assert budget.cpus == pytest.approx(2.0) and budget.gpus == 0.0


@pytest.mark.parametrize("claim, why", [
    (Claim(name="neg", min_gpus=-1), "min_gpus"),
    (Claim(name="big", min_cpus=64), "above the cluster"),
    (Claim(name="inv", min_cpus=4, max_cpus=2), "below min_cpus"),
    (Claim(name="kind", kind="batch"), "kind"),
    (Claim(name=""), "name"),
    ("not a claim", "Claim"),
    (Claim(name="p", priority="high"), "priority"),
    (Claim(name="o", owner=None), "owner"),
    (Claim(name="inf", max_cpus=float("inf")), "max_cpus"),
])
def test_bad_claims_are_refused_named_and_change_nothing(claim, why):
    s = _state()
    with pytest.raises(Refused, match=why):
        s.register(claim, 0.0)
    assert s.runs == {}


def test_a_run_changes_only_its_own_registration():
    s = _state()
    a, ta, _ = s.register(Claim(name="a"), 0.0)
    b, tb, _ = s.register(Claim(name="b"), 0.0)
    before = dict(s.runs[a].__dict__)
    with pytest.raises(Refused, match="wrong token"):
        s.update(a, tb, Progress(rows_done=5, rows_total=10), 1.0)
    with pytest.raises(Refused, match="wrong token"):
        s.leave(a, tb, 1.0)
    with pytest.raises(Refused, match="unknown run"):
        s.update("nobody", ta, Progress(), 1.0)
    with pytest.raises(Refused, match="rows_done"):
        s.update(a, ta, Progress(rows_done=-3), 1.0)
    with pytest.raises(Refused, match="wrong token"):
        s.update(a, "tökén", Progress(), 1.0)
    assert s.runs[a].__dict__ == before and a in s.runs


def test_the_rate_is_measured_over_a_window_and_unknown_until_rows_move():
    s = _state()
    a, ta, _ = s.register(Claim(name="a"), 0.0)
    for t in range(0, 4):
        _beat(s, a, ta, 0, 1000, float(t))  # filling: no row out yet
    assert not s.runs[a].rate and s.runs[a].remaining_s() is None
    for t in range(4, 34):
        _beat(s, a, ta, 50 * (t - 4) if t < 20 else 800 + 10 * (t - 20), 1000, float(t))
    assert s.runs[a].rate == pytest.approx(10.0)  # the last 10 s only
    assert s.runs[a].cost == pytest.approx(1 / 50.0)  # alone: the whole cluster, at its best 50 rows/s
    s.update(a, ta, Progress(rows_done=5, rows_total=1000, execution="second"), 34.0)  # starts anew
    assert s.runs[a].rate is None and s.runs[a].remaining_s() is None


def test_a_silent_run_lapses_and_its_budget_returns():
    s = _state(lapse_s=5.0)
    a, ta, _ = s.register(Claim(name="alive", min_cpus=2), 0.0)
    b, tb, _ = s.register(Claim(name="dead", min_cpus=2), 0.0)
    _beat(s, a, ta, 1, 10, 4.0)
    assert b in s.runs
    _beat(s, a, ta, 2, 10, 6.0)
    assert b not in s.runs and s.runs[a].budget == Budget()
    assert any("no heartbeat" in text for _, text in s.decisions)
    with pytest.raises(Refused, match="register again"):
        s.update(b, tb, Progress(), 6.5)


def test_equal_floors_that_overfill_the_cluster_are_served_whole_in_rank_order():
    shares = [Share(f"r{i}", Claim(name=f"r{i}", min_gpus=1), float(i), None, None, None) for i in range(5)]
    out = divide(shares, cpus=0, gpus=4, policy="fifo", preemption="eager")
    assert [out[f"r{i}"].gpus for i in range(5)] == [1.0, 1.0, 1.0, 1.0, 0.0]  # whole GPUs; the last waits


def test_a_run_held_small_is_not_taken_for_a_long_one():
    s = _state(preemption="eager")
    big, tb, _ = s.register(Claim(name="big", min_cpus=1), 0.0)
    small, ts, _ = s.register(Claim(name="small", min_cpus=1), 0.0)
    s.runs[big].budget, s.runs[small].budget = Budget(cpus=11, gpus=3, rank=0), Budget(cpus=1, gpus=1, rank=1)
    for t in range(0, 6):  # the same 10 rows/s: one on most of the cluster, the other on a quarter of it
        s.update(big, tb, Progress(rows_done=10 * t, rows_total=1000), float(t))
        s.update(small, ts, Progress(rows_done=10 * t, rows_total=1000), float(t))
    assert s.runs[small].remaining_s() < s.runs[big].remaining_s() / 2
    assert s.runs[small].rate == s.runs[big].rate


def test_a_run_budgeted_nothing_is_costed_at_its_floor_and_its_time_left_stays_known():
    """A pipeline's least actors run whatever its budget: rows it makes on a budget of nothing are
    costed at its floor's share of the cluster, not at no cost (which left its time unknown)."""
    s = ArbiterState(cpus=12.0, gpus=4.0, rebalance_s=1e9)  # the budget set here stands
    a, ta, _ = s.register(Claim(name="a", min_cpus=3, min_gpus=1), 0.0)
    s.runs[a].budget = Budget(cpus=0, gpus=0, rank=5)
    for t in range(0, 6):
        _beat(s, a, ta, 10 * t, 1000, float(t))
    assert s.runs[a].cost == pytest.approx(0.25 / 10)  # a quarter of the CPUs and of the GPUs, 10 rows/s
    assert s.runs[a].remaining_s() == pytest.approx(950 * 0.25 / 10)


def test_an_idle_run_between_datasets_holds_nothing():
    busy = Share("busy", Claim(name="busy", min_cpus=2), 1.0, 100.0, None, Budget(cpus=4, gpus=0, rank=1))
    idle = Share("idle", Claim(name="idle", min_cpus=2), 0.0, 0.0, None, Budget(cpus=8, gpus=0, rank=0), idle=True)
    out = divide([busy, idle], cpus=12, gpus=0)
    assert out["busy"].rank == 0 and out["busy"].cpus == 12 and out["idle"].cpus == 0
    assert "idle" in out["idle"].reason


def test_a_run_of_unknown_size_counts_the_median_time_left():
    known = [Share(f"k{i}", Claim(name=f"k{i}"), 0.0, left, None, None, rows_left=left * 10, cost=0.1)
             for i, left in enumerate((10.0, 50.0, 90.0))]
    unknown = Share("unknown", Claim(name="unknown"), 0.0, None, None, None)
    order = [s.run_id for s in rank(known + [unknown], policy="srtf", now=1.0)]
    assert order.index("unknown") in (1, 2) and order[0] == "k0" and order[-1] == "k2"


def test_a_newcomer_is_ranked_by_its_rows_at_the_others_rate_and_the_first_keeps_its_place_among_equals():
    held = Budget(cpus=8, gpus=3, rank=0)
    first = Share("first", Claim(name="first"), 0.0, 26.0, None, held, rows_left=2600, cost=0.01)
    same = Share("same", Claim(name="same"), 5.0, 24.0, None, Budget(cpus=2, gpus=1, rank=1), rows_left=2400,
                 cost=0.01)
    assert [s.run_id for s in rank([first, same], policy="srtf", now=6.0, incumbent_credit_s=10.0)] == ["first", "same"]
    assert [s.run_id for s in rank([first, same], policy="srtf", now=6.0)] == ["same", "first"]
    big = Share("big", Claim(name="big"), 6.0, None, None, None, rows_left=16000)
    small = Share("small", Claim(name="small"), 6.0, None, None, None, rows_left=500)
    order = [s.run_id for s in rank([first, big, small], policy="srtf", now=7.0, incumbent_credit_s=10.0)]
    assert order == ["small", "first", "big"]  # 5 s, 16 s and 160 s at the measured 0.01 cluster-s a row
    alone = [s.run_id for s in rank([big, small], policy="srtf", now=7.0)]
    assert alone == ["big", "small"]  # nobody measured: newcomers count as short, in arrival order


def test_rank_follows_the_job_layer_policy():
    shares = [Share("old", Claim(name="old"), 0.0, 50.0, None, None),
              Share("new", Claim(name="new"), 5.0, 10.0, None, None)]
    assert [s.run_id for s in rank(shares, policy="fifo", now=6.0)] == ["old", "new"]
    assert [s.run_id for s in rank(shares, policy="srtf", now=6.0)] == ["new", "old"]


def test_status_lists_every_run_in_rank_order_with_its_reason():
    s = _state()
    a, ta, _ = s.register(Claim(name="a", owner="ana"), 0.0)
    s.register(Claim(name="b", owner="bo"), 0.5)
    for t in (1.0, 2.0, 3.0, 4.0):
        _beat(s, a, ta, 10 * t, 100, t)
    st = s.status(4.0)
    assert [r["rank"] for r in st["runs"]] == sorted(r["rank"] for r in st["runs"])
    assert {r["owner"] for r in st["runs"]} == {"ana", "bo"} and all(r["reason"] for r in st["runs"])
    row = next(r for r in st["runs"] if r["name"] == "a")
    assert row["rate"] == pytest.approx(10.0) and row["remaining_s"] == pytest.approx(6.0)


def test_time_left_is_the_work_left_at_the_least_cost_shown():
    s = _state()
    a, ta, _ = s.register(Claim(name="a"), 0.0)
    for t in range(0, 5):
        _beat(s, a, ta, 20 * t, 1000, float(t))
    for t in range(5, 20):  # shrunk: no row for 15 s
        _beat(s, a, ta, 80, 1000, float(t))
    assert s.runs[a].rate == 0.0 and s.runs[a].remaining_s() == pytest.approx((1000 - 80) / 20)


def _snapshot(ops, total, completed=False):
    from trident.core.types import ClusterView, OperatorConfig, OperatorSnapshot, Snapshot

    def op(i, name, kind, rows_in, rows_out, cpus=1.0, gpus=0.0, lo=1, hi=None):
        return OperatorSnapshot(name=name, index=i, config=OperatorConfig(
            kind=kind, replicas=1, min_replicas=lo, max_replicas=hi, num_cpus=cpus, num_gpus=gpus),
            rows_in_total=rows_in, rows_in_done_total=rows_in, rows_out_total=rows_out,
            completed=completed and kind != "other")

    return Snapshot(execution_id="e", seq=1, time_s=1.0, input_rows_total=total,
                    operators=tuple(op(i, *o) for i, o in enumerate(ops)),
                    cluster=ClusterView(cpus=12.0, gpus=4.0))


def test_progress_counts_the_rows_the_last_operator_took_in_in_input_rows():
    from trident.jobs.arbiter.link import progress_of

    # the source raced ahead (2,360 of 3,000 out); a filter keeps half; the sink took in 450 rows
    snap = _snapshot([("Input", "other", 75, 0), ("Read->Parse", "task", 59, 2360),
                      ("Filter", "actor", 2000, 1000), ("Write", "task", 450, 11)], 3000)
    p = progress_of(snap)
    assert p.rows_total == 3000 and p.rows_done == pytest.approx(900.0)
    done = progress_of(_snapshot([("Read", "task", 75, 3000), ("Write", "task", 3000, 75)], 3000, completed=True))
    assert done.rows_done == 3000
    assert progress_of(_snapshot([("Read", "task", 1, 10)], None)).rows_done is None


def test_a_claim_asks_one_replica_of_each_operator_at_least_and_the_pools_maxima_at_most():
    from trident.jobs.arbiter.link import claim_of

    pools = [("Read", "task", 0, 0, 1.0), ("Detect", "actor", 0, 0, 1.0, 0.5, 1, 6),
             ("Embed", "actor", 0, 0, 1.0, 0.5, 2, 6), ("Write", "task", 0, 0, 1.0)]
    c = claim_of(_snapshot(pools, 100), name="x", owner="o", priority=1)
    assert (c.min_cpus, c.min_gpus) == (1.0 + 1.0 + 2.0, 0.5 + 1.0)  # one task at a time; each pool's min_size
    assert c.max_cpus is None and c.max_gpus == pytest.approx(6.0)  # a task operator may take any CPUs
    actors_only = claim_of(_snapshot(pools[1:3], 100), name="x", owner="o", priority=0)
    assert actors_only.max_cpus == pytest.approx(12.0) and actors_only.max_gpus == pytest.approx(6.0)
    gpu_task = claim_of(_snapshot([("Read", "task", 0, 0, 1.0), ("Caption", "task", 0, 0, 1.0, 1.0)], 100),
                        name="x", owner="o", priority=0)
    assert gpu_task.min_gpus == 1.0 and gpu_task.max_gpus is None  # a GPU task operator: one task's GPU at least


def test_no_claim_starves_the_others_floors_count_up_to_an_equal_share():
    s = _state()
    greedy, _, _ = s.register(Claim(name="greedy", min_cpus=12, min_gpus=4), 0.0)
    modest, _, _ = s.register(Claim(name="modest", min_cpus=2, min_gpus=1), 0.1)
    assert s.runs[modest].budget.cpus >= 2.0 and s.runs[modest].budget.gpus >= 1.0


def test_a_driver_flooding_registrations_stays_within_its_owners_quota():
    s = _state(quotas={"flood": (4.0, 1.0)})
    other, _, _ = s.register(Claim(name="other", owner="ana", min_cpus=1), 0.0)
    for i in range(10):
        s.register(Claim(name=f"f{i}", owner="flood", min_cpus=1, min_gpus=0.5), 0.1 * i)
    flood = [e.budget for e in s.runs.values() if e.claim.owner == "flood"]
    assert sum(b.cpus for b in flood) <= 4.0 + 1e-9 and sum(b.gpus for b in flood) <= 1.0 + 1e-9
    assert s.runs[other].budget.cpus >= 8.0 - 1e-9


def test_a_run_slowed_down_to_the_bound_is_served_first_and_not_shrunk():
    for bound, first in ((None, "short"), (2.0, "long")):
        s = _state(preemption="eager", max_slowdown=bound)
        a, ta, _ = s.register(Claim(name="long", min_cpus=2), 0.0)
        for t in range(1, 6):
            _beat(s, a, ta, 100 * t, 100_000, float(t))  # 100 rows/s alone
        b, tb, _ = s.register(Claim(name="short", min_cpus=2), 5.0)
        for t in range(6, 21):  # shrunk to its floor, the long run crawls: 10 rows/s
            _beat(s, a, ta, 500 + 10 * (t - 5), 100_000, float(t))
            _beat(s, b, tb, 100 * (t - 5), 5_000, float(t))  # 100 rows/s on most of the cluster
        top = next(e for e in s.runs.values() if e.budget.rank == 0)
        assert top.claim.name == first, bound
        if bound is not None:
            assert s.runs[a].slowdown(20.0) >= bound and "max_slowdown" in s.runs[a].budget.reason


def test_priorities_as_ray_data_names_them():
    from trident.autoscaler.config import AutoscaleConfig
    from trident.core.errors import ConfigError

    assert AutoscaleConfig(priority="HIGH").priority == 1 and AutoscaleConfig(priority="low").priority == -1
    with pytest.raises(ConfigError, match="priority"):
        AutoscaleConfig(priority="urgent")
    with pytest.raises(ConfigError, match="owner"):
        AutoscaleConfig(owner="  ")


def test_a_run_slowed_down_that_holds_nothing_yet_is_served_first():
    fresh = Share("fresh", Claim(name="fresh", min_cpus=1), 0.0, 50.0, None, None, slowdown=5.0)
    other = Share("other", Claim(name="other", min_cpus=1), 1.0, 5.0, None, Budget(cpus=6, gpus=0, rank=0))
    out = divide([fresh, other], cpus=12, gpus=0, max_slowdown=3.0)
    assert out["fresh"].rank == 0 and out["fresh"].cpus == 11.0 and "max_slowdown" in out["fresh"].reason


def test_trident_status_prints_every_run_in_rank_order_with_its_budget_and_reason():
    from trident.jobs.arbiter.cli import format_status

    s = _state()
    a, ta, _ = s.register(Claim(name="nightly-video", owner="media", min_cpus=2), 0.0)
    text = format_status(s.status(0.0))
    assert "order srtf, preemption lazy" in text and " any " in text  # alone: no cap
    s.register(Claim(name="notebook", owner="ana", min_cpus=2), 1.0)
    for t in range(2, 7):
        _beat(s, a, ta, 100 * t, 10_000, float(t))
    lines = format_status(s.status(7.0)).splitlines()
    runs = [line for line in lines if "nightly-video" in line or "notebook" in line]
    assert len(runs) >= 2 and runs[0].split()[0] == "1" and "rank" in " ".join(lines)
    assert any("10,000" in line and "nightly-video" in line for line in runs)  # rows done of the total
    assert "last decisions:" in lines and any("registered" in line for line in lines)
    assert format_status({**s.status(7.0), "runs": [], "decisions": []}).endswith("no runs")


def test_a_training_job_holds_what_it_runs_on_and_the_pipelines_share_the_rest():
    s = _state(quotas={"ana": (12.0, 3.0)})
    job, tj, budget = s.register(Claim(name="train", owner="ana", kind="training", min_cpus=2, min_gpus=3,
                                       max_cpus=2, max_gpus=3), 0.0)
    assert (budget.cpus, budget.gpus) == (2.0, 3.0) and "training job" in budget.reason
    a, ta, budget_a = s.register(Claim(name="pipe", min_cpus=1, min_gpus=0.5, max_gpus=4), 1.0)
    assert (budget_a.cpus, budget_a.gpus) == (10.0, 1.0)  # alone among the pipelines, yet capped
    b, tb, _ = s.register(Claim(name="ana-pipe", owner="ana", min_cpus=1, min_gpus=0.5, max_gpus=4), 2.0)
    assert s.runs[b].budget.gpus == 0.0  # her quota of 3 GPUs is what her training job holds
    assert s.runs[job].budget.gpus == 3.0 and s.runs[a].budget.gpus == pytest.approx(1.0)
    s.leave(job, tj, 3.0)
    s.leave(b, tb, 3.0)
    assert s.runs[a].budget == Budget()  # the job ended: the pipeline is alone again


def test_a_job_scheduler_seats_its_running_jobs_and_leaves_for_those_that_ended(monkeypatch):
    import ray

    from trident.jobs.arbiter.seats import JobSeats
    from trident.jobs.base import Job

    state = ArbiterState(cpus=4.0, gpus=2.0, rebalance_s=0.0)

    class Call:
        def __init__(self, fn):
            self.remote = lambda *a: fn(*a, 0.0)

    handle = type("Handle", (), {})()
    handle.register = Call(lambda claim, progress, now: state.register(claim, now, progress=progress))
    handle.update = Call(state.update)
    handle.leave = Call(state.leave)
    monkeypatch.setattr(ray, "get", lambda value, timeout=None: value)
    seats = JobSeats(owner="trainer")
    seats.handle = handle
    one = Job(job_id="train-1", arrival_s=0.0, duration_s=1.0, num_gpus=1.0, cpus=1.0)
    seats.hold([one])
    seats._sync()
    (entry,) = state.runs.values()
    assert (entry.claim.kind, entry.claim.owner, entry.claim.min_gpus) == ("training", "trainer", 1.0)
    seats._sync()  # a heartbeat: still one seat
    assert len(state.runs) == 1 and seats.budgets["train-1"].gpus == 1.0
    seats.hold([])
    seats._sync()
    assert state.runs == {} and seats.budgets == {}
    assert any("joined the arbiter" in text for _, text in seats.events)
