"""Rollout: make-before-break ordering, bottleneck first, and the cold-start gate."""
import math
from dataclasses import replace

import pytest

from trident.autoscaler.actuation import (
    PHASE_DRAIN,
    PHASE_UP,
    PHASE_UP_AFTER_DRAIN,
    RolloutInputs,
    plan_rollout,
    time_saved_s,
)
from trident.core.types import OperatorConfig, OperatorTarget

CURRENT = {
    "parse": OperatorConfig(kind="task", replicas=8, num_cpus=1.0),
    "ocr": OperatorConfig(kind="actor", replicas=2, num_gpus=1.0, batch_size=16, accelerator_type="A"),
    "embed": OperatorConfig(kind="actor", replicas=4, num_gpus=1.0, batch_size=64),
}


def _inputs(**kw):
    base = dict(current_throughput_rows_per_s=100.0, new_throughput_rows_per_s=150.0, remaining_rows=None,
                cold_start_s={"ocr": 20.0, "embed": 10.0, "parse": 0.0},
                utilisation={"parse": 0.4, "ocr": 1.0, "embed": 0.7})
    base.update(kw)
    return RolloutInputs(**base)


def test_new_replicas_come_up_before_old_drain_bottleneck_first():
    targets = (OperatorTarget(name="parse", replicas=4), OperatorTarget(name="embed", replicas=6),
               OperatorTarget(name="ocr", replicas=4))
    r = plan_rollout(CURRENT, targets, _inputs())
    assert r.go
    assert [(s.operator, s.action, s.phase) for s in r.steps] == [
        ("ocr", "scale_up", PHASE_UP), ("embed", "scale_up", PHASE_UP), ("parse", "scale_down", PHASE_DRAIN)]
    assert [len(p) for p in r.phases()] == [2, 1]


def test_additions_short_of_gpus_are_asked_for_with_the_drains_that_free_them():
    # no memory limit: Ray holds ocr's new actors pending until embed's drained ones leave
    targets = (OperatorTarget(name="embed", replicas=2), OperatorTarget(name="ocr", replicas=5))
    r = plan_rollout(CURRENT, targets, _inputs(free_gpus=1.0))
    assert [(s.operator, s.phase) for s in r.steps] == [("embed", PHASE_DRAIN), ("ocr", PHASE_DRAIN)]
    assert [len(p) for p in r.phases()] == [2]
    assert "start as the drains free their room" in r.steps[1].reason
    # under a memory limit they wait for the drains: old and new would overlap in memory
    each = {"ocr": 1e8, "embed": 1e8}
    limited = plan_rollout(CURRENT, targets, _inputs(free_gpus=1.0, free_memory_bytes=1e10,
                                                     memory_per_replica_bytes=each))
    assert [(s.operator, s.phase) for s in limited.steps] == [("embed", PHASE_DRAIN), ("ocr", PHASE_UP_AFTER_DRAIN)]
    assert "after drains" in limited.steps[1].reason


def test_config_change_is_a_rolling_update():
    targets = (OperatorTarget(name="ocr", replicas=3, batch_size=32, accelerator_type="B"),)
    r = plan_rollout(CURRENT, targets, _inputs())
    (step,) = r.steps
    assert step.action == "update" and step.phase == PHASE_UP and step.target.batch_size == 32
    assert "batch_size 16 -> 32" in step.reason and "accelerator A -> B" in step.reason


def test_gate_refuses_when_gain_times_remaining_work_is_below_what_the_cold_start_costs():
    targets = (OperatorTarget(name="ocr", replicas=3),)
    # 1,000 rows left: 10 s at 100 rows/s, 6.7 s at 150 rows/s; 3.3 s saved. The two replicas keep
    # working while the third starts, so the 20 s cold start costs 20 x (1 - 100/150) = 6.7 s
    small = plan_rollout(CURRENT, targets, _inputs(remaining_rows=1_000))
    assert not small.go and "not more than 6.7 s it costs" in small.reason
    # 3,000 rows left: 10 s saved > 6.7 s, although less than the whole cold start
    medium = plan_rollout(CURRENT, targets, _inputs(remaining_rows=3_000))
    assert medium.go and 6.7 < medium.time_saved_s < 20.0
    big = plan_rollout(CURRENT, targets, _inputs(remaining_rows=1_000_000))
    assert big.go and big.time_saved_s > 20.0
    stream = plan_rollout(CURRENT, targets, _inputs(remaining_rows=None))
    assert stream.go and math.isinf(stream.time_saved_s)


def test_time_saved_is_gain_times_remaining_work():
    # 10,000 rows at 100 rows/s: 100 s; at 200 rows/s: 50 s
    assert time_saved_s(100.0, 200.0, 10_000) == pytest.approx(50.0)
    assert time_saved_s(100.0, 100.0, 10_000) == 0.0
    assert time_saved_s(100.0, 80.0, 10_000) == -math.inf
    assert time_saved_s(0.0, 50.0, 10_000) == math.inf
    assert time_saved_s(100.0, 150.0, None) == math.inf


def test_no_change_no_steps():
    targets = (OperatorTarget(name="ocr", replicas=2), OperatorTarget(name="embed", batch_size=64))
    r = plan_rollout(CURRENT, targets, _inputs())
    assert r.steps == () and not r.go and r.reason == "nothing to change"


def test_free_gpus_are_counted_per_accelerator_type():
    # 4 free GPUs, all of type B: ocr (pinned to A) must wait for drains, embed (untyped) need not
    targets = (OperatorTarget(name="ocr", replicas=3), OperatorTarget(name="embed", replicas=5))
    r = plan_rollout(CURRENT, targets, _inputs(free_gpus=4.0, free_gpus_by_type={"A": 0.0, "B": 4.0}))
    assert [(s.operator, s.phase) for s in r.steps] == [("embed", PHASE_UP), ("ocr", PHASE_UP_AFTER_DRAIN)]


def test_additions_that_would_exceed_the_memory_limit_wait_for_drains():
    # GPUs are free for 3 more ocr replicas, but memory under the limit only for 1 of them
    targets = (OperatorTarget(name="ocr", replicas=5), OperatorTarget(name="embed", replicas=1))
    each = {"ocr": 800e6, "embed": 800e6}
    tight = plan_rollout(CURRENT, targets, _inputs(free_gpus=8, free_gpus_by_type={"A": 3},
                                                   free_memory_bytes=900e6, memory_per_replica_bytes=each))
    assert [(s.operator, s.phase) for s in tight.steps] == [("embed", PHASE_DRAIN), ("ocr", PHASE_UP_AFTER_DRAIN)]
    roomy = plan_rollout(CURRENT, targets, _inputs(free_gpus=8, free_gpus_by_type={"A": 3},
                                                   free_memory_bytes=3e9, memory_per_replica_bytes=each))
    assert [(s.operator, s.phase) for s in roomy.steps] == [("ocr", PHASE_UP), ("embed", PHASE_DRAIN)]


def test_a_move_with_no_room_and_nothing_draining_is_a_swap():
    # both pools move to the type the other holds: no GPU free on either, nothing drains
    targets = (OperatorTarget(name="ocr", replicas=2, accelerator_type="B"),
               OperatorTarget(name="embed", replicas=4, accelerator_type="A"))
    r = plan_rollout(CURRENT, targets, _inputs(free_gpus=0.0, free_gpus_by_type={"A": 0.0, "B": 0.0}))
    assert [(s.operator, s.phase, s.target.swap) for s in r.steps] == [("ocr", PHASE_UP, True),
                                                                        ("embed", PHASE_UP, True)]
    assert all("swapped half the pool at a time" in s.reason for s in r.steps)
    # with room, new replicas come first
    roomy = plan_rollout(CURRENT, targets, _inputs(free_gpus=8.0, free_gpus_by_type={"A": 4.0, "B": 4.0}))
    assert not any(s.target.swap for s in roomy.steps)


def test_a_move_whose_old_actors_hold_no_wanted_room_keeps_them_serving():
    """Both pools unpinned: detect has 4 actors on A and 2 on B, embed 2 on B. Detect moves to B
    at 2 replicas (it has them there), embed to A at 4 (A's GPUs are detect's): detect's old
    actors hold what embed needs (a swap), embed's hold nothing anyone needs, so its new actors
    wait for room on A while its old ones serve."""
    current = {"detect": OperatorConfig(kind="actor", replicas=6, num_gpus=0.5, batch_size=20),
               "embed": OperatorConfig(kind="actor", replicas=2, num_gpus=0.5, batch_size=20)}
    targets = (OperatorTarget(name="detect", replicas=2, accelerator_type="B"),
               OperatorTarget(name="embed", replicas=4, accelerator_type="A"))
    inputs = _inputs(utilisation={"detect": 0.5, "embed": 1.0}, cold_start_s={"detect": 5.0, "embed": 5.0},
                     free_gpus=0.0, free_gpus_by_type={"A": 0.0, "B": 0.0},
                     actors_by_type={"detect": {"A": 4, "B": 2}, "embed": {"B": 2}})
    swaps = {s.operator: s.target.swap for s in plan_rollout(current, targets, inputs).steps}
    assert swaps == {"detect": True, "embed": False}
    # where detect still needs B's room (it has no actor there), embed's old actors are in its way
    inputs = replace(inputs, actors_by_type={"detect": {"A": 4}, "embed": {"B": 2}})
    assert all(s.target.swap for s in plan_rollout(current, targets, inputs).steps)


def test_a_move_counts_the_cpus_of_its_type_s_nodes_not_the_head_s():
    """Two GPU nodes of 2 CPUs and 2 GPUs (types A and B) and a head of 2 CPUs and no GPU. Each
    pool holds two actors of 1 CPU and half a GPU, one on each type; fast moves to B, uniform to A.
    Each type has a GPU free but no CPU: new actors beside the old ones cannot start (the head's
    two free CPUs host no GPU actor), and each pool's old actors hold the CPUs the other's new ones
    need, so both swap. With CPUs free on the GPU nodes both surge."""
    current = {"fast": OperatorConfig(kind="actor", replicas=2, num_cpus=1.0, num_gpus=0.5, batch_size=20),
               "uniform": OperatorConfig(kind="actor", replicas=2, num_cpus=1.0, num_gpus=0.5, batch_size=20)}
    targets = (OperatorTarget(name="fast", replicas=2, accelerator_type="B"),
               OperatorTarget(name="uniform", replicas=2, accelerator_type="A"))
    inputs = _inputs(utilisation={"fast": 1.0, "uniform": 0.5}, cold_start_s={"fast": 5.0, "uniform": 5.0},
                     free_cpus=2.0, free_gpus=2.0, free_gpus_by_type={"A": 1.0, "B": 1.0},
                     free_gpu_node_cpus={None: 0.0, "A": 0.0, "B": 0.0},
                     actors_by_type={"fast": {"A": 1, "B": 1}, "uniform": {"A": 1, "B": 1}})
    assert all(s.target.swap for s in plan_rollout(current, targets, inputs).steps)
    roomy = replace(inputs, free_cpus=6.0, free_gpu_node_cpus={None: 4.0, "A": 2.0, "B": 2.0})
    assert not any(s.target.swap for s in plan_rollout(current, targets, roomy).steps)
    # where the nodes' CPUs are not known, only the totals count: the head's CPUs seem to fit fast's
    blind = {s.operator: s.target.swap for s in plan_rollout(current, targets, replace(inputs, free_gpu_node_cpus=None)).steps}
    assert blind["fast"] is False
    # GPU nodes that name no type: their CPUs in all are what a GPU actor can start on
    grow = (OperatorTarget(name="fast", replicas=3),)
    untyped = replace(inputs, free_gpus_by_type=None, actors_by_type=None)
    assert plan_rollout(current, grow, replace(untyped, free_gpu_node_cpus={None: 0.0})).steps[0].phase != PHASE_UP
    assert plan_rollout(current, grow, replace(untyped, free_gpu_node_cpus={None: 1.0})).steps[0].phase == PHASE_UP

    # pending actors of unpinned pools are charged to all GPU nodes, not to a type: the types'
    # CPUs read free, the GPU nodes' in all do not (a scale-up's actors not yet placed): both swap
    pending = replace(inputs, free_cpus=6.0, free_gpu_node_cpus={None: 0.0, "A": 2.0, "B": 2.0})
    assert all(s.target.swap for s in plan_rollout(current, targets, pending).steps)

def test_a_change_must_save_its_margin_times_what_it_costs():
    """The gain is a prediction and the cold start is paid: with a margin of 2 a change that
    saves 1.5 times its cost is not made, one that saves 3 times is."""
    targets = (OperatorTarget(name="embed", replicas=6),)
    # 100 -> 150 rows/s while old replicas serve: the cost is a third of embed's 10 s cold start
    rows = {"fair": 3.33 * 1.5 * 300, "ample": 3.33 * 3 * 300}  # rows left: 1/100 - 1/150 = 1/300 s per row
    for name, margin, go in (("fair", 1.0, True), ("fair", 2.0, False), ("ample", 2.0, True)):
        r = plan_rollout(CURRENT, targets, _inputs(remaining_rows=rows[name], pay_margin=margin,
                                                   free_gpus=8.0, free_cpus=8.0))
        assert r.go is go, (name, margin, r.reason)
    assert "2 x" in r.reason
