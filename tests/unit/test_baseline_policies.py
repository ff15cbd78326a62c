import math

import pytest

from trident.autoscaler.controller.loop import ControlLoop
from trident.core.policy import POLICIES
from trident.core.errors import ConfigError
from trident.autoscaler.policies.baseline import DS2Policy, DS2Settings, source_rate, true_rate_per_replica
from dataclasses import replace

from trident.core.types import ClusterView, OperatorConfig, OperatorSnapshot, Snapshot, with_config

CLUSTER = ClusterView(cpus=8, gpus=4)


def op(name, index, kind, *, rows_out=0, rows_in=0, busy_s=0.0, replicas=1, lo=1, hi=8, running=1, **kw):
    return OperatorSnapshot(name=name, index=index,
                            config=OperatorConfig(kind=kind, replicas=replicas, min_replicas=lo, max_replicas=hi),
                            rows_out_total=rows_out, rows_in_total=rows_in, busy_s=busy_s, tasks_running=running, **kw)


def chain(t, *, src_rows, src_busy, a_rows, a_busy, b_rows, b_busy, a_replicas=1):
    """read (task, cap 2) -> A (actor, 1..8) -> B (actor, 1..3); 1 row in -> 1 row out."""
    return Snapshot(execution_id="e", seq=int(t * 10), time_s=t, cluster=CLUSTER, operators=(
        op("Input", 0, "other", replicas=None, lo=0, hi=None, running=0),
        op("read", 1, "task", rows_out=src_rows, rows_in=src_rows, busy_s=src_busy, replicas=2, hi=None, running=2),
        op("A", 2, "actor", rows_out=a_rows, rows_in=a_rows, busy_s=a_busy, replicas=a_replicas),
        op("B", 3, "actor", rows_out=b_rows, rows_in=b_rows, busy_s=b_busy, hi=3),
    ))


def test_builtin_policies_are_registered():
    assert {"ray", "static", "ds2"} <= set(POLICIES.names())


def test_ray_policy_observes_only():
    loop = ControlLoop(policy="ray")
    for t in range(5):
        d = loop.step(chain(t, src_rows=100 * t, src_busy=t, a_rows=90 * t, a_busy=t, b_rows=80 * t, b_busy=t), t)
        assert d.plan is None and "observe" in d.reason
    assert loop.latest_plan is None and len(loop.decisions) == 5


def test_static_policy_holds_the_first_configuration_once():
    loop = ControlLoop(policy="static")
    first = loop.step(chain(0, src_rows=0, src_busy=0, a_rows=0, a_busy=0, b_rows=0, b_busy=0, a_replicas=2), 0)
    assert first.plan is not None
    assert {(t.name, t.replicas) for t in first.plan.targets} == {("read", 2), ("A", 2), ("B", 1)}
    later = loop.step(chain(1, src_rows=10, src_busy=1, a_rows=5, a_busy=1, b_rows=5, b_busy=1, a_replicas=5), 1)
    assert later.plan is None and "holding" in later.reason


def test_true_rate_uses_busy_time_and_needs_evidence():
    a = op("A", 0, "actor", rows_out=100, busy_s=10.0)
    b = op("A", 0, "actor", rows_out=300, busy_s=14.0)
    assert true_rate_per_replica(a, b, 0.5) == pytest.approx(50.0)
    assert true_rate_per_replica(a, op("A", 0, "actor", rows_out=300, busy_s=10.2), 0.5) is None
    assert true_rate_per_replica(op("A", 0, "actor", busy_s=None), b, 0.5) is None


def test_source_rate_is_its_capacity_not_its_backpressured_output():
    first = op("read", 1, "task", rows_out=0, busy_s=0.0, replicas=2)
    last = op("read", 1, "task", rows_out=300, busy_s=1.0, replicas=2)  # 300 rows/busy-s, 2 tasks wide
    assert source_rate(first, last, 3.0, 0.5) == pytest.approx(600.0)  # not the observed 100 rows/s


def test_ds2_sizes_each_operator_from_its_true_rate():
    policy = DS2Policy(settings=DS2Settings(window_s=3.0))
    s0 = chain(0.0, src_rows=0, src_busy=0, a_rows=0, a_busy=0, b_rows=0, b_busy=0)
    # over 3 s: source can do 100 rows/busy-s x 2 tasks = 200 rows/s; A does 20 rows/busy-s; B 80 rows/busy-s
    s1 = chain(3.0, src_rows=300, src_busy=3.0, a_rows=60, a_busy=3.0, b_rows=60, b_busy=0.75)
    assert policy.step(s0, 0.0).plan is None
    assert policy.step(chain(1.0, src_rows=100, src_busy=1, a_rows=20, a_busy=1, b_rows=20, b_busy=0.25), 1.0).plan is None
    d = policy.step(s1, 3.0)
    assert d.plan is not None
    targets = {t.name: t.replicas for t in d.plan.targets}
    assert targets["A"] == 8  # ceil(200 / 20) = 10, clamped to max 8
    assert targets["B"] == 3  # ceil(200 / 80) = 3
    assert "ceil(" in d.reason and "A" in d.reason


def test_ds2_issues_no_plan_when_targets_do_not_change():
    policy = DS2Policy(settings=DS2Settings(window_s=1.0))
    plans = []
    for t in range(8):
        s = chain(float(t), src_rows=100 * t, src_busy=0.5 * t, a_rows=100 * t, a_busy=2.0 * t,
                  b_rows=100 * t, b_busy=0.5 * t)
        plans.append(policy.step(s, float(t)).plan)
    issued = [p for p in plans if p is not None]
    assert len(issued) == 1  # stationary input => one plan, then holds
    assert {t.name: t.replicas for t in issued[0].targets} == {"A": math.ceil(400 / 50), "B": math.ceil(400 / 200)}


def test_ds2_waits_for_busy_time_evidence():
    policy = DS2Policy(settings=DS2Settings(window_s=1.0, min_busy_s=1.0))
    policy.step(chain(0, src_rows=0, src_busy=0, a_rows=0, a_busy=0, b_rows=0, b_busy=0), 0)
    d = policy.step(chain(1, src_rows=50, src_busy=0.5, a_rows=10, a_busy=0.2, b_rows=10, b_busy=0.1), 1)
    assert d.plan is None
    assert any("too little busy time" in n for n in d.notes)


def test_ds2_settings_validate():
    with pytest.raises(ConfigError, match="window_s"):
        DS2Settings(window_s=0)
    with pytest.raises(ConfigError, match="headroom"):
        DS2Settings(headroom=0.5)


def test_policies_are_deterministic():
    def run():
        p = DS2Policy()
        return [p.step(chain(t * 0.5, src_rows=37 * t, src_busy=0.3 * t, a_rows=30 * t, a_busy=0.9 * t,
                             b_rows=29 * t, b_busy=0.2 * t), t * 0.5) for t in range(20)]
    assert run() == run()


def test_ds2_discards_a_window_with_actors_starting():
    policy = DS2Policy(settings=DS2Settings(window_s=1.0))
    policy.step(chain(0, src_rows=0, src_busy=0, a_rows=0, a_busy=0, b_rows=0, b_busy=0), 0)
    cold = chain(1, src_rows=100, src_busy=1, a_rows=0, a_busy=0, b_rows=0, b_busy=0)
    cold = Snapshot(execution_id="e", seq=10, time_s=1.0, cluster=CLUSTER,
                    operators=tuple(replace(o, actors_pending=2) if o.name == "A" else o for o in cold.operators))
    d = policy.step(cold, 1.0)
    assert d.plan is None and "still starting" in d.reason


def test_ds2_keeps_the_last_true_rate_of_an_idle_operator_and_bounds_uncapped_pools():
    policy = DS2Policy(settings=DS2Settings(window_s=1.0, min_busy_s=0.5))
    policy.step(chain(0, src_rows=0, src_busy=0, a_rows=0, a_busy=0, b_rows=0, b_busy=0), 0)
    first = policy.step(chain(1, src_rows=100, src_busy=0.5, a_rows=100, a_busy=2.0, b_rows=100, b_busy=0.5), 1)
    assert {t.name: t.replicas for t in first.plan.targets}["A"] == 8  # ceil(400 / 50)
    # next window: A barely busy (0.1 s) but the source doubles -> A's last true rate (50/s) is reused
    s = chain(2, src_rows=300, src_busy=1.0, a_rows=105, a_busy=2.1, b_rows=300, b_busy=1.0)
    s = Snapshot(execution_id="e", seq=20, time_s=2.0, cluster=CLUSTER, operators=tuple(
        with_config(o, max_replicas=None, num_cpus=0.75) if o.name == "A" else o for o in s.operators))
    d = policy.step(s, 2.0)
    a = {t.name: t.replicas for t in d.plan.targets}["A"]
    assert a == 10  # ceil(400 rows/busy-s x 2 tasks / 50) = 16, bounded by 8 CPUs at 0.75 CPU each


def test_ds2_keeps_sizing_from_a_source_that_has_read_everything():
    """A batch source reads its input in a burst, then produces nothing: the pools behind it
    are still sized for the rate it delivered, not left where they are."""
    policy = DS2Policy(settings=DS2Settings(window_s=1.0, min_busy_s=0.5))
    policy.step(chain(0, src_rows=0, src_busy=0, a_rows=0, a_busy=0, b_rows=0, b_busy=0), 0)
    burst = policy.step(chain(1, src_rows=100, src_busy=0.5, a_rows=0, a_busy=0, b_rows=0, b_busy=0), 1)
    assert burst.plan is None  # A has no busy time yet: nothing to size it by
    d = policy.step(chain(2, src_rows=100, src_busy=0.5, a_rows=100, a_busy=2.0, b_rows=100, b_busy=0.5), 2)
    assert d.plan is not None and "source idle" in d.reason
    assert {t.name: t.replicas for t in d.plan.targets}["A"] > 1


def test_ds2_remembers_the_source_rate_of_a_window_discarded_for_starting_actors():
    policy = DS2Policy(settings=DS2Settings(window_s=1.0, min_busy_s=0.5))
    policy.step(chain(0, src_rows=0, src_busy=0, a_rows=0, a_busy=0, b_rows=0, b_busy=0), 0)
    cold = chain(1, src_rows=100, src_busy=0.5, a_rows=0, a_busy=0, b_rows=0, b_busy=0)
    cold = Snapshot(execution_id="e", seq=10, time_s=1.0, cluster=CLUSTER,
                    operators=tuple(replace(o, actors_pending=2) if o.name == "A" else o for o in cold.operators))
    assert "still starting" in policy.step(cold, 1.0).reason
    d = policy.step(chain(2, src_rows=100, src_busy=0.5, a_rows=100, a_busy=2.0, b_rows=100, b_busy=0.5), 2)
    assert d.plan is not None and "source idle" in d.reason
