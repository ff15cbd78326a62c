"""The inner loop against Ray Data's own rule, within bounds, memory and room; the obstacle a
stuck target names (CPUs of actors and task operators, GPUs)."""
from dataclasses import replace
from types import SimpleNamespace

import pytest
from ray.data._internal.actor_autoscaler import BacklogAwareActorAutoscaler
from ray.data._internal.execution.operators.actor_pool_map_operator import _ActorPool
from ray.data.context import AutoscalingConfig

from trident.autoscaler.actuation import RolloutStep
from trident.autoscaler.policies.trident.inner import (
    Growth,
    PoolView,
    even_share,
    inner_targets,
    ray_rule,
    room_of,
)
from trident.autoscaler.policies.trident.phases import obstacle
from trident.autoscaler.policies.trident.records import Bounds
from trident.autoscaler.policies.trident.settings import TridentSettings
from trident.core.types import ClusterView, NodeShape, OperatorConfig, OperatorSnapshot, OperatorTarget, Snapshot

GiB = 2**30
S = TridentSettings()


class _RayPool:
    """The members of an actor pool Ray's DefaultActorAutoscaler reads."""

    def __init__(self, size, pending, in_flight, lo=1, hi=16):
        self.size, self.pending, self.in_flight, self.lo, self.hi = size, pending, in_flight, lo, hi

    def current_size(self):
        return self.size

    def min_size(self):
        return self.lo

    def max_size(self):
        return self.hi

    def num_pending_actors(self):
        return self.pending

    def max_actor_concurrency(self):
        return 1

    def max_tasks_in_flight_per_actor(self):
        return 2

    def num_tasks_in_flight(self):
        return self.in_flight

    def get_pool_util(self):
        return float("inf") if self.size == 0 else self.in_flight / self.size

    def per_actor_resource_usage(self):
        return None


def _ray_delta(size, pending, in_flight, queued):
    """The change Ray's default autoscaler (2.60: backlog-aware) requests for a pool in this state."""
    scaler = BacklogAwareActorAutoscaler({}, SimpleNamespace(), config=AutoscalingConfig())
    op = SimpleNamespace(has_completed=lambda: False, _inputs_complete=False,
                         metrics=SimpleNamespace(num_inputs_received=10, average_num_inputs_per_task=1))
    state = SimpleNamespace(total_enqueued_input_blocks=lambda: queued, op=op,
                            _scheduling_status=SimpleNamespace(under_resource_limits=True))
    scaler._resource_manager = SimpleNamespace(get_allocation=lambda op: None, get_op_usage=lambda op: None,
                                               get_budget=lambda op: None)
    return scaler._derive_target_scaling_config(_RayPool(size, pending, in_flight), op, state).delta


@pytest.mark.parametrize("size,pending,in_flight,queued", [
    (1, 0, 2, 0), (1, 0, 2, 40), (4, 0, 8, 3), (4, 1, 8, 100), (8, 0, 16, 0), (3, 0, 3, 0), (4, 0, 4, 9),
    (4, 0, 2, 0), (4, 0, 1, 0), (2, 1, 0, 0), (6, 0, 0, 0), (0, 0, 0, 5), (5, 0, 9, 2),
])
def test_the_inner_rule_moves_as_ray_does_and_grows_at_least_as_far(size, pending, in_flight, queued):
    ray_delta = _ray_delta(size, pending, in_flight, queued)
    want, why = ray_rule(PoolView(name="p", size=size, pending=pending, in_flight=in_flight, queued=queued), S)
    ours = want - size
    assert (ours > 0) == (ray_delta > 0) and (ours < 0) == (ray_delta < 0 and queued == 0), (ours, ray_delta, why)
    if ray_delta > 0:
        assert min(want, 16) - size == ray_delta, (ours, ray_delta)  # as far as Ray (max size 16), in one step
    if ours < 0:
        assert ours == -1  # one at a time, as Ray


def test_a_pool_is_not_shrunk_within_ray_s_debounce_after_it_grew():
    """Ray holds a pool's scale-down for 10 s after it grew: the inner loop and the simulator's Ray
    rule do too, whoever grew it (Ray's rule or a plan), and shrink it by one after."""
    ray_debounce_s = _ActorPool._ACTOR_POOL_SCALE_DOWN_DEBOUNCE_PERIOD_S
    assert S.downscale_debounce_s == ray_debounce_s
    idle = dict(name="p", size=2, pending=0, in_flight=1, queued=0)
    assert ray_rule(PoolView(**idle, since_grew_s=ray_debounce_s - 1), S)[0] == 2
    assert ray_rule(PoolView(**idle, since_grew_s=ray_debounce_s + 1), S)[0] == 1
    growth = Growth()
    pool = lambda n, t: _snap(_actor("p", 0, replicas=n, in_flight=1, queued=0), time_s=t)  # noqa: E731
    for n, t in ((1, 0.0), (2, 3.0), (2, 8.0)):
        growth.see(pool(n, t))
    assert growth.since(pool(2, 8.0)) == {"p": 5.0}
    targets, _, _ = inner_targets(pool(2, 8.0), {}, {}, memory_limit_bytes=None, settings=S,
                                  since_grew=growth.since(pool(2, 8.0)))
    assert targets == []
    targets, _, _ = inner_targets(pool(2, 14.0), {}, {}, memory_limit_bytes=None, settings=S,
                                  since_grew=growth.since(pool(2, 14.0)))
    assert [t.replicas for t in targets] == [1]


def _actor(name, index, *, replicas, in_flight, queued, gpus=0.5, cpus=1.0, lo=1, hi=8, heap=None, accel=None,
           rest=None, finished=0):
    return OperatorSnapshot(
        name=name, index=index, rows_in_total=100, tasks_in_flight=in_flight, input_queue_blocks=queued,
        tasks_finished=finished,
        actors_running=replicas, tasks_running=min(in_flight, replicas), heap_rss_per_replica_bytes=heap,
        heap_rest_per_replica_bytes=rest,
        config=OperatorConfig(kind="actor", replicas=replicas, min_replicas=lo, max_replicas=hi, num_cpus=cpus,
                              num_gpus=gpus, accelerator_type=accel))


def _task(name, index, *, running, cpus=1.0):
    return OperatorSnapshot(name=name, index=index, tasks_running=running, rows_in_total=100,
                            config=OperatorConfig(kind="task", replicas=None, num_cpus=cpus))


def _snap(*ops, cpus=16.0, gpus=4.0, time_s=1.0):
    return Snapshot(execution_id="e", seq=1, time_s=time_s, operators=ops, cluster=ClusterView(cpus=cpus, gpus=gpus))


def test_when_pools_want_more_than_is_free_the_most_utilised_is_served_first():
    # 4 GPUs, 2 + 2 replicas of 0.5 GPU hold 2: room for 4 more; both want to double
    snap = _snap(_actor("a", 0, replicas=2, in_flight=4, queued=50), _actor("b", 1, replicas=2, in_flight=4,
                                                                             queued=50))
    targets, reasons, _ = inner_targets(snap, {}, {}, memory_limit_bytes=None, settings=S)
    assert {t.name: t.replicas for t in targets} == {"a": 4, "b": 4}
    # only one GPU free: two more replicas in all, given in turn
    busy = _actor("c", 2, replicas=4, in_flight=4, queued=0)  # 10 slots, 3 pools: an even share is 3
    snap = _snap(_actor("a", 0, replicas=2, in_flight=4, queued=50), _actor("b", 1, replicas=2, in_flight=4,
                                                                             queued=50), busy, gpus=5.0)
    targets, reasons, _ = inner_targets(snap, {}, {}, memory_limit_bytes=None, settings=S)
    assert {t.name: t.replicas for t in targets} == {"a": 3, "b": 3}  # one each, not both to one
    assert all("GPUs free" in r for r in reasons), reasons
    # the pool below its even share is served first
    snap = _snap(_actor("a", 0, replicas=2, in_flight=4, queued=50), _actor("b", 1, replicas=4, in_flight=8,
                                                                             queued=50), gpus=4.0)
    targets, reasons, _ = inner_targets(snap, {}, {}, memory_limit_bytes=None, settings=S)
    assert {t.name: t.replicas for t in targets} == {"a": 4}, reasons


def test_bounds_floor_and_cap_the_inner_loop():
    snap = _snap(_actor("a", 0, replicas=3, in_flight=0, queued=0))
    targets, _, _ = inner_targets(snap, {"a": Bounds(lo=3, hi=None, why="the plan")}, {}, memory_limit_bytes=None,
                               settings=S)
    assert targets == []  # idle, but the plan's floor holds it
    snap = _snap(_actor("a", 0, replicas=3, in_flight=6, queued=90))
    targets, _, _ = inner_targets(snap, {"a": Bounds(lo=1, hi=4, why="test")}, {}, memory_limit_bytes=None, settings=S)
    assert targets == [OperatorTarget(name="a", replicas=4)]


def test_a_pool_below_its_floor_grows_to_it_in_the_room_held_for_it():
    """Ray's own rule shrank a pool the plan holds at 2 (the demo: EmbedText 2 -> 1 while no
    target had named it); the room charges the pool its floor, so the replica back to it is room
    already held, not more (it was held back: "0 GPUs free" with half a GPU idle). While a
    rollout is under way its later phases bring pools to their floors in turn."""
    snap = _snap(_actor("ocr", 0, replicas=2, in_flight=4, queued=9), _actor("embed", 1, replicas=1, in_flight=2,
                                                                            queued=9), gpus=2.0)
    floor = {"embed": Bounds(lo=2, hi=2, why="the plan")}
    targets, _, held = inner_targets(snap, floor, {}, memory_limit_bytes=None, settings=S)
    assert OperatorTarget(name="embed", replicas=2) in targets and "embed" not in held
    targets, _, held = inner_targets(snap, floor, {}, memory_limit_bytes=None, settings=S, rolling_out=True)
    assert "embed" not in {t.name for t in targets} and held.get("embed") == 2


def test_a_pool_that_has_taken_all_its_input_is_not_grown_back_to_its_floor():
    """Ray Data released two idle actors of a pool whose upstream finished: the plan's floor of 4
    does not ask for them again (a new actor would get no task); while input waits, or an operator
    before it still runs, it does."""
    read = replace(_task("read", 0, running=0), completed=True)
    tail = _actor("a", 1, replicas=2, in_flight=2, queued=0)
    floor = {"a": Bounds(lo=4, hi=None, why="the plan")}
    targets, _, _ = inner_targets(_snap(read, tail), floor, {}, memory_limit_bytes=None, settings=S)
    assert targets == []
    for snap in (_snap(read, replace(tail, input_queue_blocks=3)), _snap(replace(read, completed=False), tail)):
        targets, _, _ = inner_targets(snap, floor, {}, memory_limit_bytes=None, settings=S)
        assert targets == [OperatorTarget(name="a", replicas=4)]


def test_with_a_memory_limit_a_pool_grows_only_by_what_its_measured_heap_allows():
    snap = _snap(_actor("a", 0, replicas=2, in_flight=4, queued=50, finished=1))
    blocked, reasons, _ = inner_targets(snap, {}, {}, memory_limit_bytes=8 * GiB, settings=S)
    assert blocked == [] or all(t.replicas == 2 for t in blocked)
    targets, reasons, _ = inner_targets(snap, {}, {"a": 3 * GiB}, memory_limit_bytes=8 * GiB, settings=S)
    assert targets == []  # 2 x 3 GiB held; a third would pass 8 GiB
    targets, reasons, _ = inner_targets(snap, {}, {"a": 2 * GiB}, memory_limit_bytes=8 * GiB, settings=S)
    assert targets == [OperatorTarget(name="a", replicas=4)]


def test_with_a_memory_limit_a_pool_grows_only_once_a_task_of_it_finished():
    """The video demo under a 2.75 GiB cgroup: OCR's heap read mid-way through its first task
    (569 MiB, SD frames) let Ray's rule grow it 1 -> 2 at 3 s; the heap a whole task holds came
    later (HD: 770 MiB per replica) and the kernel killed both. A reading before a task finished
    is a floor, not the heap to plan with."""
    first = _actor("a", 0, replicas=1, in_flight=2, queued=40)
    targets, reasons, held = inner_targets(_snap(first), {}, {"a": 0.5 * GiB}, memory_limit_bytes=4 * GiB,
                                           settings=S)
    assert targets == [] and held, reasons
    done = replace(first, tasks_finished=1)
    targets, reasons, _ = inner_targets(_snap(done), {}, {"a": 0.6 * GiB}, memory_limit_bytes=4 * GiB, settings=S)
    assert [t.replicas for t in targets] == [6], reasons  # 6 x 0.6 GiB fit 4 GiB; Ray's rule asked 8
    targets, _, _ = inner_targets(_snap(first), {}, {"a": 0.5 * GiB}, memory_limit_bytes=None, settings=S)
    assert [t.replicas for t in targets] == [8]  # without a limit Ray's rule grows it at once


def test_a_pool_not_measured_yet_holds_as_much_memory_as_the_largest_measured():
    snap = _snap(_actor("a", 0, replicas=1, in_flight=2, queued=40, finished=1),
                 _actor("b", 1, replicas=1, in_flight=0, queued=0))
    targets, reasons, _ = inner_targets(snap, {}, {"a": 1 * GiB}, memory_limit_bytes=4 * GiB, settings=S)
    assert targets == [OperatorTarget(name="a", replicas=3)], reasons  # b's replica counts 1 GiB, as the plan's
    assert "under the memory limit" in reasons[0]


def test_a_pool_not_measured_yet_is_charged_its_reading_at_rest_grown_as_the_measured_pools_grew():
    """The video benchmark: OCR measured (858 MiB with its margin, 746 at rest), embed's first
    task not finished (647 MiB at rest); 5 GiB. Charged OCR's heap, embed left room for 3 more
    OCR replicas; charged its reading at rest grown by the margin, 4 (the memory limit's 5)."""
    MiB = 2**20
    ocr = _actor("ocr", 0, replicas=1, in_flight=2, queued=25, rest=746 * MiB, finished=1)
    embed = _actor("embed", 1, replicas=1, in_flight=0, queued=0, rest=647 * MiB)
    heaps = {"ocr": 858 * MiB}
    targets, reasons, _ = inner_targets(_snap(ocr, embed), {}, heaps, memory_limit_bytes=5 * GiB, settings=S)
    assert targets == [OperatorTarget(name="ocr", replicas=5)], reasons
    # no reading at rest for embed: charged as the largest pool measured, as before
    targets, reasons, _ = inner_targets(_snap(ocr, replace(embed, heap_rest_per_replica_bytes=None)), {}, heaps,
                                     memory_limit_bytes=5 * GiB, settings=S)
    assert targets == [OperatorTarget(name="ocr", replicas=4)], reasons
    # a measured pool that grew 60% above its reading at rest: embed is charged as growing as much
    big = room_of(_snap(replace(ocr, heap_rest_per_replica_bytes=536 * MiB), embed), {}, heaps, 5 * GiB,
                  margin=S.memory_margin)
    assert big.memory_bytes == pytest.approx(5 * GiB - 858 * MiB - 647 * MiB * 858 / 536)


def test_a_size_the_room_held_back_is_asked_again_once_room_appears_while_input_waits():
    """The video benchmark: OCR asked for 8 when its first actor came up; embed not measured yet,
    4 fitted. Embed's heap read at rest then left room for a fifth while OCR's pending actors
    kept its utilisation low: the fifth starts then, not once the pool is busy again."""
    MiB = 2**20
    ocr = _actor("ocr", 0, replicas=1, in_flight=2, queued=30, rest=746 * MiB, finished=1)
    embed = _actor("embed", 1, replicas=1, in_flight=0, queued=0, rest=None)
    heaps = {"ocr": 858 * MiB}
    targets, _, held = inner_targets(_snap(ocr, embed), {}, heaps, memory_limit_bytes=5 * GiB, settings=S)
    assert targets == [OperatorTarget(name="ocr", replicas=4)] and held == {"ocr": 8}
    ocr = replace(ocr, config=replace(ocr.config, replicas=4), actors_pending=3, input_queue_blocks=28)
    embed = replace(embed, heap_rest_per_replica_bytes=300 * MiB)
    targets, reasons, _ = inner_targets(_snap(ocr, embed), {}, heaps, memory_limit_bytes=5 * GiB, settings=S)
    assert targets == []  # Ray's rule alone: utilisation 0.5, keep
    targets, reasons, held = inner_targets(_snap(ocr, embed), {}, heaps, memory_limit_bytes=5 * GiB, settings=S,
                                           wanted=held)
    assert targets == [OperatorTarget(name="ocr", replicas=5)] and "held back by room" in reasons[0], reasons
    # the input drained: the earlier ask is dropped
    idle = replace(ocr, input_queue_blocks=0)
    targets, _, held = inner_targets(_snap(idle, embed), {}, heaps, memory_limit_bytes=5 * GiB, settings=S,
                                     wanted={"ocr": 8})
    assert targets == [] and held == {}


def test_room_counts_actor_cpus_gpus_and_the_cpus_task_operators_hold():
    snap = _snap(_task("read", 0, running=6), _actor("a", 1, replicas=4, in_flight=0, queued=0),
                 _actor("b", 2, replicas=2, in_flight=0, queued=0, gpus=1.0), cpus=12.0, gpus=4.0)
    room = room_of(snap, {"a": 5}, {}, None, margin=0.15)  # a was told to have 5
    assert room.cpus == pytest.approx(12 - 6 - 5 - 2)
    assert room.gpus == pytest.approx(4 - 2.5 - 2)


def test_a_target_short_of_cpus_names_the_task_operator_and_caps_it_to_make_room():
    snap = _snap(_task("read", 0, running=8), _actor("a", 1, replicas=2, in_flight=4, queued=50), cpus=10.0)
    step = RolloutStep(operator="a", action="scale_up", replicas_from=2, replicas_to=4,
                       target=OperatorTarget(name="a", replicas=4), phase=0, reason="test")
    stuck = obstacle(snap, snap.operator("a"), step, room_of(snap, {"a": 4}, {}, None, margin=0.15))
    assert "CPUs short" in stuck.obstacle and "read (8 tasks)" in stuck.obstacle
    assert stuck.task_caps == (OperatorTarget(name="read", replicas=6),)


def test_a_target_beyond_the_gpus_of_its_type_names_the_type():
    snap = Snapshot(execution_id="e", seq=1, time_s=1.0, operators=(
        _actor("a", 0, replicas=2, in_flight=4, queued=50, gpus=1.0, accel="B"),),
        cluster=ClusterView(cpus=16, gpus=4, gpus_by_type=(("A", 2.0), ("B", 2.0))))
    step = RolloutStep(operator="a", action="scale_up", replicas_from=2, replicas_to=3,
                       target=OperatorTarget(name="a", replicas=3), phase=0, reason="test")
    stuck = obstacle(snap, snap.operator("a"), step, room_of(snap, {"a": 3}, {}, None, margin=0.15))
    assert "GPUs of type B too few" in stuck.obstacle and stuck.task_caps == ()


def test_exploration_pins_one_pool_at_a_time_where_three_quarters_of_its_replicas_fit():
    import numpy as np

    from trident.autoscaler.policies.trident.explore import next_pins
    from trident.autoscaler.policies.trident.tracking import Observer

    def snap(detect, embed):
        return Snapshot(execution_id="e", seq=1, time_s=1.0, operators=(
            _actor("detect", 0, replicas=detect, in_flight=8, queued=50),
            _actor("embed", 1, replicas=embed, in_flight=4, queued=9)),
            cluster=ClusterView(cpus=16, gpus=4, gpus_by_type=(("A", 2.0), ("B", 2.0))))

    obs = Observer(settings=S, rng=np.random.default_rng(0), seed=0)
    for o in snap(2, 2).operators:
        obs.track(o)
    # 2 of 4 GPUs held, spread over both types: 1 free on each, room for detect's 2 replicas
    (pin,) = next_pins(snap(2, 2), list(snap(2, 2).operators), obs.tracks, windows=1, min_busy_s=1.0)
    assert pin[0].name == "detect" and pin[0].replicas == 2 and pin[0].accelerator_type in ("A", "B")
    assert pin[1].startswith("explore: measure detect")
    # 3.5 of 4 GPUs held: no type has room for 3/4 of a pool, so nothing is explored now
    assert next_pins(snap(4, 3), list(snap(4, 3).operators), obs.tracks, windows=1, min_busy_s=1.0) == []
    # the GPU nodes' CPUs hold 2 replicas on A, 3 on B: detect's 4 go to B as 3 (seed 24 of the
    # generated scenarios: the bottleneck, 4x faster on B, never moved while all 8 had to fit)
    nodes = (NodeShape(node_id="a", cpus=2.0, gpus=4.0, accelerator_type="A"),
             NodeShape(node_id="b", cpus=3.0, gpus=4.0, accelerator_type="B"))
    short = replace(snap(4, 1), cluster=ClusterView(cpus=5, gpus=8, gpus_by_type=(("A", 4.0), ("B", 4.0)),
                                                    nodes=nodes))
    (pin,) = next_pins(short, list(short.operators), obs.tracks, windows=1, min_busy_s=1.0)
    assert (pin[0].name, pin[0].replicas, pin[0].accelerator_type) == ("detect", 3, "B"), pin
    assert "3 of its 4 replica(s)" in pin[1]
    one_type = Snapshot(execution_id="e", seq=1, time_s=1.0, operators=snap(2, 2).operators,
                        cluster=ClusterView(cpus=16, gpus=4, gpus_by_type=(("A", 4.0),)))
    assert next_pins(one_type, list(one_type.operators), obs.tracks, windows=1, min_busy_s=1.0) == []
    # an actor pending anywhere: the room that looks free is about to be taken
    pending = replace(snap(2, 2), operators=(replace(snap(2, 2).operators[0], actors_pending=1),
                                             snap(2, 2).operators[1]))
    assert next_pins(pending, list(pending.operators), obs.tracks, windows=1, min_busy_s=1.0) == []
    # a pool explored once in this regime is not explored again
    done = {("detect", 0.0): None, ("embed", 0.0): None}
    assert next_pins(snap(2, 2), list(snap(2, 2).operators), obs.tracks, windows=1, min_busy_s=1.0,
                     explored=done) == []


def test_the_bottleneck_is_explored_only_with_enough_work_left_for_a_move_to_pay():
    from trident.autoscaler.policies.trident.explore import bottleneck
    from trident.core.plan.placement import Allocation, DeviceOption, NodeType, OperatorSpec, PlacementProblem

    ops = [_actor("fast", 0, replicas=2, in_flight=2, queued=0), _actor("slow", 1, replicas=2, in_flight=4, queued=9)]
    specs = tuple(OperatorSpec(name=o.name, single_device=True, min_replicas=1, max_replicas=8, cold_start_s=10.0,
                               options=(DeviceOption(device="gpu", rate_rows_per_s=r, cpus=1.0, gpus=0.5),))
                  for o, r in zip(ops, (100.0, 10.0)))

    def problem(horizon_s):
        return PlacementProblem(operators=specs, node_types=(NodeType(name="gpu", count=1, cpus=16, gpus=4),),
                                current=Allocation.of({("fast", "gpu", "gpu"): 2, ("slow", "gpu", "gpu"): 2}),
                                horizon_s=horizon_s)

    pays = S.explore_cold_starts
    assert [o.name for o in bottleneck(problem(pays * 10.0), ops, pays)] == ["slow"]
    assert bottleneck(problem(pays * 10.0 - 1.0), ops, pays) == []  # a move would not pay over what is left


def test_an_explored_pool_measured_slower_goes_back_once_and_a_faster_one_stays():
    import numpy as np

    from trident.autoscaler.policies.trident.explore import Tried, back_due, reverts
    from trident.autoscaler.policies.trident.records import RateSample, key_of
    from trident.autoscaler.policies.trident.tracking import Observer

    pool = _actor("embed", 0, replicas=2, in_flight=4, queued=9, accel="A")
    obs = Observer(settings=S, rng=np.random.default_rng(0), seed=0)
    tr = obs.track(pool)
    tried = {("embed", tr.regime_start_s): Tried(source="B", rate=100.0, target="A")}
    tr.rates.append(RateSample(1.0, key_of(pool.config), 60.0))
    assert not back_due([pool], obs.tracks, tried, windows=2)
    assert reverts([pool], obs.tracks, tried, windows=2) == []  # one window on A, not clearly slower: not yet
    tr.rates.append(RateSample(2.0, key_of(pool.config), 44.0))
    assert back_due([pool], obs.tracks, tried, windows=2)  # the planner looks at once, past the dwell
    (back,) = reverts([pool], obs.tracks, tried, windows=2)
    assert back[0].accelerator_type == "B" and back[0].replicas == 2 and "back to B" in back[1]
    assert reverts([pool], obs.tracks, tried, windows=2) == []  # settled: once
    fewer = {("embed", tr.regime_start_s): Tried(source="B", rate=100.0, target="A", replicas=3)}
    (back,) = reverts([pool], obs.tracks, fewer, windows=2)  # explored with 2 of its 3: back with 3
    assert back[0].replicas == 3
    faster = {("embed", tr.regime_start_s): Tried(source="B", rate=30.0, target="A")}
    assert not back_due([pool], obs.tracks, faster, windows=2)
    assert reverts([pool], obs.tracks, faster, windows=2) == []
    tr.rates[:] = [RateSample(1.0, key_of(pool.config), 40.0)]  # one window, under half the rate where it was
    clearly = {("embed", tr.regime_start_s): Tried(source="B", rate=100.0, target="A")}
    (back,) = reverts([pool], obs.tracks, clearly, windows=2)
    assert back[0].accelerator_type == "B"


def test_actors_pending_although_the_totals_fit_cap_task_operators_but_never_the_sink():
    """The cluster's totals have room, a node does not: the CPUs task operators hold are what
    trident can free; a Write sink is left alone."""
    pool = replace(_actor("a", 1, replicas=4, in_flight=4, queued=50), actors_running=2, actors_pending=2)
    snap = _snap(_task("read", 0, running=4), pool, _task("Write", 2, running=3), cpus=16.0)
    step = RolloutStep(operator="a", action="scale_up", replicas_from=2, replicas_to=4,
                       target=OperatorTarget(name="a", replicas=4), phase=0, reason="test")
    stuck = obstacle(snap, snap.operator("a"), step, room_of(snap, {"a": 4}, {}, None, margin=0.15))
    assert "pending although the plan fits the cluster's totals" in stuck.obstacle and not stuck.short
    assert stuck.task_caps == (OperatorTarget(name="read", replicas=2),)


def test_actors_pending_while_the_gpu_nodes_cpus_hold_every_actor_and_task_cap_nothing():
    """The GPU nodes' CPUs hold every GPU actor and every running task at once: the tasks are not
    what keeps the pool's actors pending (they are slow to start), so no task is capped."""
    pool = replace(_actor("a", 1, replicas=8, in_flight=4, queued=50), actors_running=1, actors_pending=7)
    step = RolloutStep(operator="a", action="scale_up", replicas_from=1, replicas_to=8,
                       target=OperatorTarget(name="a", replicas=8), phase=0, reason="test")
    for node_cpus, capped in ((12.0, False), (10.0, True)):
        snap = Snapshot(execution_id="e", seq=1, time_s=1.0, operators=(_task("read", 0, running=4), pool),
                        cluster=ClusterView(cpus=16, gpus=4, gpus_by_type=(("A", 2.0), ("B", 2.0)),
                                            cpus_by_type=(("A", node_cpus / 2), ("B", node_cpus / 2))))
        stuck = obstacle(snap, snap.operator("a"), step, room_of(snap, {"a": 8}, {}, None, margin=0.15))
        assert bool(stuck.task_caps) is capped and not stuck.short, (node_cpus, stuck)


def test_a_pool_grows_past_its_even_share_only_into_room_no_pool_below_its_share_needs():
    """The regime-shift scenario's start (2.2 s): the first pool, backlogged first, took 6 of 8 GPU
    slots while the second, the bottleneck, had its first task in flight, and the second ran on
    2 until the plan moved four actors."""
    detect = _actor("detect", 0, replicas=1, in_flight=2, queued=26, hi=6)
    first = _actor("embed", 1, replicas=1, in_flight=1, queued=0, hi=6)  # no task finished yet
    targets, reasons, held = inner_targets(_snap(detect, first), {}, {}, memory_limit_bytes=None, settings=S)
    assert targets == [OperatorTarget(name="detect", replicas=4)], reasons  # 4 of 8 slots: its even share
    assert "even share" in reasons[0] and "embed" in reasons[0] and held == {"detect": 6}, reasons
    # measured and asking: the second pool grows into the room kept for it, the first stays at its share
    detect = replace(detect, config=replace(detect.config, replicas=4), tasks_in_flight=8, input_queue_blocks=50)
    asking = replace(_actor("embed", 1, replicas=1, in_flight=2, queued=10, hi=6), tasks_finished=2)
    targets, reasons, _ = inner_targets(_snap(detect, asking), {}, {}, memory_limit_bytes=None, settings=S,
                                        wanted=held)
    assert {t.name: t.replicas for t in targets} == {"embed": 4}, reasons
    # measured and idle: nothing is kept for it, the first pool takes what its backlog needs
    idle = replace(_actor("embed", 1, replicas=1, in_flight=0, queued=0, hi=6), tasks_finished=5)
    targets, reasons, _ = inner_targets(_snap(detect, idle), {}, {}, memory_limit_bytes=None, settings=S)
    assert {t.name: t.replicas for t in targets} == {"detect": 6}, reasons
    # under a memory limit a pool whose heap is not measured could not grow into the room: none is
    # kept for it (the video benchmark's OCR pool grows to 5 beside an embed pool not measured yet)
    measured = replace(detect, config=replace(detect.config, replicas=1), tasks_in_flight=2, tasks_finished=1)
    targets, reasons, _ = inner_targets(_snap(measured, first), {}, {"detect": 0.5 * GiB},
                                        memory_limit_bytes=8 * GiB, settings=S)
    assert {t.name: t.replicas for t in targets} == {"detect": 6}, reasons


def test_an_even_share_splits_each_resource_among_the_pools_that_use_it():
    gpu = _actor("gpu", 0, replicas=1, in_flight=0, queued=0, gpus=0.5, cpus=1.0, hi=8)
    other = _actor("gpu2", 1, replicas=1, in_flight=0, queued=0, gpus=0.5, cpus=1.0, hi=3)
    cpu = _actor("cpu", 2, replicas=1, in_flight=0, queued=0, gpus=0.0, cpus=2.0, hi=8)
    cluster = ClusterView(cpus=16.0, gpus=4.0)
    assert even_share(gpu, cluster, [gpu, cpu]) == 8  # the CPU pool takes no GPU: 16 / 2 CPUs bound it at 8
    assert even_share(cpu, cluster, [gpu, cpu]) == 4  # 8 of the 16 CPUs at 2 each
    assert even_share(gpu, cluster, [gpu, other]) == 4 and even_share(other, cluster, [gpu, other]) == 3  # its max


def test_a_scale_up_asked_for_with_drains_is_not_judged_stuck_until_they_are_done():
    """Embed drains 6 -> 4 (its actors busy) while Detect's two new actors wait, pending, for the
    GPUs they free: no re-plan while the drain lasts; once it is done, Detect's clock starts."""
    from trident.autoscaler.policies.trident.phases import Phases

    drain = RolloutStep(operator="embed", action="scale_down", replicas_from=6, replicas_to=4,
                        target=OperatorTarget(name="embed", replicas=4), phase=1, reason="drain")
    up = RolloutStep(operator="detect", action="scale_up", replicas_from=2, replicas_to=4,
                     target=OperatorTarget(name="detect", replicas=4), phase=1, reason="up")
    phases = Phases()
    phases.start([(drain, up)], 0.0)

    def snap(t, embed_running):
        detect = replace(_actor("detect", 0, replicas=4, in_flight=4, queued=50), actors_running=2, actors_pending=2)
        embed = replace(_actor("embed", 1, replicas=4, in_flight=embed_running, queued=0),
                        actors_running=embed_running, task_duration_p90_s=30.0)
        return replace(_snap(detect, embed, gpus=4.0), time_s=t)

    def stuck(t, embed_running):
        return phases.stuck(snap(t, embed_running), t, patience_steps=2, cold_start_s={"detect": 1.0, "embed": 1.0},
                            heap_bytes={}, memory_limit_bytes=None, margin=0.15)

    assert all(stuck(float(t), 6) is None for t in range(20))  # the drain's tasks take 30 s: no verdict
    assert stuck(20.0, 4) is None and stuck(21.0, 4) is None  # drained: Detect's clock starts now
    late = [stuck(float(t), 4) for t in range(22, 40)]
    assert any(s is not None and s.operator == "detect" for s in late)  # and it can be judged


def test_an_unpinned_pool_holds_cpus_on_the_nodes_its_actors_run_on():
    """Two GPU nodes of 4 CPUs (A and B); an unpinned pool with 3 actors on A holds A's CPUs (it
    was charged to the total alone, so A looked free to a pool moving there)."""
    from trident.autoscaler.policies.trident.inner import gpu_node_cpus
    from trident.core.cluster import NodeShape
    from trident.core.types import TypeUsage

    pool = replace(_actor("embed", 0, replicas=3, in_flight=3, queued=0),
                   by_type=(TypeUsage(accelerator_type="A", actors=3, busy_s=1.0, tasks_finished=4),))
    nodes = (NodeShape(node_id="a", cpus=4, gpus=2, accelerator_type="A"),
             NodeShape(node_id="b", cpus=4, gpus=2, accelerator_type="B"))
    snap = Snapshot(execution_id="e", seq=1, time_s=1.0, operators=(pool,),
                    cluster=ClusterView(cpus=8, gpus=4, gpus_by_type=(("A", 2.0), ("B", 2.0)), nodes=nodes))
    assert gpu_node_cpus(snap, {}) == {None: 5.0, "A": 1.0, "B": 4.0}
