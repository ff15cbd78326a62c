"""An unpinned GPU pool's pooled rate moves with the types Ray puts its actors on: a fall that
each type's own rate does not show is the placement, not the data; and a pool backpressured on
several types still reads its speed on each (its tasks per busy second there)."""
from collections import deque
from dataclasses import replace

import numpy as np

from trident.autoscaler.policies.trident.problem import typed_view
from trident.autoscaler.policies.trident.records import RateSample, key_of
from trident.autoscaler.policies.trident.settings import TridentSettings
from trident.autoscaler.policies.trident.shifts import placement_moved, replaced
from trident.autoscaler.policies.trident.tracking import Observer
from trident.core.detect.changepoint import ChangeEvent
from trident.core.types import ClusterView, OperatorConfig, OperatorSnapshot, Snapshot, TypeUsage

S = TridentSettings()


def _pool(t, usage, *, backpressured=False, name="embed"):
    """``usage``: type -> (actors, tasks finished, busy seconds), cumulative."""
    by_type = tuple(TypeUsage(accelerator_type=k, actors=a, tasks_finished=n, busy_s=b) for k, (a, n, b) in usage.items())
    tasks = sum(n for _, n, _ in usage.values())
    return OperatorSnapshot(name=name, index=1, rows_out_total=32 * tasks, rows_in_total=32 * tasks, tasks_finished=tasks,
                            busy_s=sum(b for _, _, b in usage.values()), actors_running=sum(a for a, _, _ in usage.values()),
                            input_queue_blocks=4, backpressured=backpressured, by_type=by_type,
                            config=OperatorConfig(kind="actor", replicas=2, min_replicas=1, max_replicas=8, num_cpus=1.0,
                                                  num_gpus=0.5, batch_size=32))


def _track(snaps):
    obs = Observer(settings=S, rng=np.random.default_rng(0), seed=0)
    tr = obs.track(snaps[0][1])
    tr.snaps = deque(snaps)
    return obs, tr


def _fall(before, after):
    return ChangeEvent(signal="embed rows/s per replica", index=4, changed_at_s=10.0, detected_at_s=20.0,
                       mean_before=before, mean_after=after, samples_since_change=2, reason="")


def test_a_fall_that_no_type_shows_is_the_placement_and_one_that_a_type_shows_is_the_data():
    start, change = _pool(0.0, {"C": (1, 0, 0.0)}), _pool(10.0, {"C": (1, 40, 10.0)})  # 4 tasks/s on C
    moved = _pool(20.0, {"C": (1, 80, 20.0), "A": (3, 10, 10.0)})  # C as fast; A at 1 task/s took half the busy time
    _, tr = _track([(0.0, start), (10.0, change), (20.0, moved)])
    assert placement_moved(tr, moved, key_of(moved.config), _fall(128.0, 80.0), S.shift_ratio) == {"A": 0.5, "C": 0.5}
    slower = _pool(20.0, {"C": (1, 60, 20.0), "A": (3, 10, 10.0)})  # C itself at 2 tasks/s: the data changed
    _, tr = _track([(0.0, start), (10.0, change), (20.0, slower)])
    assert placement_moved(tr, slower, key_of(slower.config), _fall(128.0, 48.0), S.shift_ratio) is None
    alone = _pool(20.0, {"C": (1, 60, 20.0)})  # one type: its rate is the pooled rate
    _, tr = _track([(0.0, start), (10.0, change), (20.0, alone)])
    assert placement_moved(tr, alone, key_of(alone.config), _fall(128.0, 64.0), S.shift_ratio) is None


def test_a_pool_backpressured_on_two_types_is_planned_per_type_at_its_ratio_between_them():
    snaps = [(float(t), _pool(float(t), {"A": (2, 2 * t, 2.0 * t), "C": (2, 12 * t, 2.0 * t)}, backpressured=True))
             for t in range(1, 11)]  # 6x as many tasks per busy second on C
    obs, tr = _track(snaps)
    last = snaps[-1][1]
    tr.rates = [RateSample(float(t), key_of(last.config), 112.0) for t in (5, 10)]  # 32 rows a task, 14 tasks / 4 busy s
    snap = Snapshot(execution_id="e", seq=1, time_s=10.0, operators=(last,), cluster=ClusterView(
        cpus=16.0, gpus=8.0, gpus_by_type=(("A", 4.0), ("C", 4.0))))
    view = typed_view(snap, [last], obs.tracks, S)
    assert view.per_type
    rates = view.seen["embed"]
    assert rates["C"] / rates["A"] == 6.0 and (rates["A"] + rates["C"]) / 2 == 112.0  # equal busy time on each
    tr.snaps = deque((t, replace(o, backpressured=False)) for t, o in snaps)
    quiet = tr.snaps[-1][1]  # not backpressured: read from its rates per type as before, the same here
    assert typed_view(replace(snap, operators=(quiet,)), [quiet], obs.tracks, S).seen["embed"] == rates


def test_a_pool_with_an_actor_pending_is_planned_per_type_once_none_is():
    """Ray may yet place a pending actor on a type the pool never ran on: a plan per type made
    before its first task there would pin the pool where it was measured and retire that actor
    unmeasured (seed 86 of the generated scenarios: a pool 6x faster on A, its one actor there
    still starting, pinned to B for the rest of the run, 0.66x Ray's rule)."""
    snaps = [(float(t), _pool(float(t), {"A": (2, 2 * t, 2.0 * t), "C": (2, 12 * t, 2.0 * t)}, backpressured=True))
             for t in range(1, 11)]
    obs, tr = _track(snaps)
    last = replace(snaps[-1][1], actors_pending=1)
    tr.rates = [RateSample(float(t), key_of(last.config), 112.0) for t in (5, 10)]
    snap = Snapshot(execution_id="e", seq=1, time_s=10.0, operators=(last,), cluster=ClusterView(
        cpus=16.0, gpus=12.0, gpus_by_type=(("A", 4.0), ("B", 4.0), ("C", 4.0))))
    view = typed_view(snap, [last], obs.tracks, S)
    assert not view.per_type and view.seen["embed"].keys() == {"A", "C"}
    assert typed_view(snap, [replace(last, actors_pending=0)], obs.tracks, S).per_type


def test_the_mix_before_a_change_is_read_since_the_actors_last_moved():
    # B only for 120 s, then B and C half and half (taken for placement at 120 s), then B only
    # again from 160 s: against the mix since 120 s the busy time moved by a half, against the
    # whole run by a fifth (seed 166 of the generated scenarios took it for a change of the data)
    snaps = [(0.0, _pool(0.0, {"B": (1, 0, 0.0)})), (120.0, _pool(120.0, {"B": (1, 180, 120.0)})),
             (160.0, _pool(160.0, {"B": (1, 240, 160.0), "C": (1, 120, 40.0)}))]
    after = _pool(163.0, {"B": (1, 243, 162.0), "C": (0, 120, 40.0)})  # 3 tasks on B since: under 4
    event = ChangeEvent(signal="embed rows/s per replica", index=4, changed_at_s=160.0, detected_at_s=163.0,
                        mean_before=77.0, mean_after=50.0, samples_since_change=2, reason="")
    _, tr = _track(snaps)
    assert placement_moved(tr, after, key_of(after.config), event, S.shift_ratio) is None
    obs, tr = _track(snaps)
    moved = replace(event, changed_at_s=120.0, detected_at_s=125.0, mean_before=50.0, mean_after=77.0)
    replaced(obs, tr, key_of(after.config), moved, {"B": 0.5, "C": 0.5})  # the move at 120 s
    assert placement_moved(tr, after, key_of(after.config), event, S.shift_ratio) == {"B": 1.0}
