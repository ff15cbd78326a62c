"""Exploring accelerator types where fewer of a pool's replicas fit, or none beside it in memory:
only where the move is cheap against the work left; a pool explored on fewer replicas and no
faster goes back where all of them ran."""
import numpy as np

from trident.autoscaler.policies.trident.explore import Tried, cheap, next_pins, reverts
from trident.autoscaler.policies.trident.records import ConfigKey, RateSample, key_of
from trident.autoscaler.policies.trident.settings import TridentSettings
from trident.autoscaler.policies.trident.tracking import Observer
from trident.core.types import ClusterView, NodeShape, OperatorConfig, OperatorSnapshot, Snapshot, TypeUsage

S = TridentSettings()
GiB = 2**30
NODES = (NodeShape(node_id="a", cpus=3.0, gpus=4.0, accelerator_type="A"),  # CPUs hold 3 actors of 1 CPU
         NodeShape(node_id="c1", cpus=16.0, gpus=8.0, accelerator_type="C"),
         NodeShape(node_id="c2", cpus=16.0, gpus=8.0, accelerator_type="C"))


def _pool(replicas, *, on=(("C", None),), heap=None, accel=None):
    by_type = tuple(TypeUsage(accelerator_type=t, actors=n if n is not None else replicas, tasks_finished=10,
                              busy_s=10.0) for t, n in on)
    return OperatorSnapshot(name="embed", index=1, rows_in_total=100, tasks_in_flight=replicas, input_queue_blocks=9,
                            actors_running=replicas, tasks_running=replicas, heap_rss_per_replica_bytes=heap,
                            by_type=by_type,
                            config=OperatorConfig(kind="actor", replicas=replicas, min_replicas=1, max_replicas=16,
                                                  num_cpus=1.0, num_gpus=1.0, batch_size=32, accelerator_type=accel))


def _snap(pool):
    return Snapshot(execution_id="e", seq=1, time_s=30.0, operators=(pool,), cluster=ClusterView(
        cpus=35.0, gpus=20.0, gpus_by_type=(("A", 4.0), ("C", 16.0)), nodes=NODES))


def _tracks(pool, measured_on=("C",)):
    obs = Observer(settings=S, rng=np.random.default_rng(0), seed=0)
    tr = obs.track(pool)
    for t in measured_on:
        for i in range(2):
            tr.rates.append(RateSample(float(i), ConfigKey(32, t, 1.0), 10.0))
    return obs.tracks


def _pins(pool, *, left_s, tracks=None, free_memory_bytes=float("inf")):
    snap = _snap(pool)
    return next_pins(snap, [pool], tracks or _tracks(pool), windows=2, min_busy_s=1.0, left_s=left_s, window_s=5.0,
                     free_memory_bytes=free_memory_bytes)


def test_a_type_with_room_for_a_third_of_the_pool_is_measured_only_with_much_work_left():
    pool = _pool(9)  # 9 on C; A's node has CPUs for 3: a third of the pool
    (pin,) = _pins(pool, left_s=1_000.0)
    assert (pin[0].accelerator_type, pin[0].replicas, pin[0].swap) == ("A", 3, False)
    assert "3 of its 9 replica(s)" in pin[1]
    assert _pins(pool, left_s=100.0) == []  # the replicas it lacks while measuring cost more than 10% of it
    assert _pins(_pool(10), left_s=10_000.0) == []  # fewer than a third fit: never


def test_a_pool_spread_over_types_or_still_measured_where_it_runs_is_not_moved_to_fewer():
    spread = _pool(9, on=(("C", 6), ("A", 3)))
    assert _pins(spread, left_s=10_000.0, tracks=_tracks(spread, ("C", "A"))) == []  # A measured: nothing to do
    pool = _pool(9)
    assert _pins(pool, left_s=10_000.0, tracks=_tracks(pool, ())) == []  # C's rate not read yet


def test_under_a_memory_limit_new_replicas_fit_beside_the_old_ones_or_the_pool_swaps_when_cheap():
    pool = _pool(3, heap=2 * GiB)
    (pin,) = _pins(pool, left_s=1_000.0, free_memory_bytes=5 * GiB)  # 2 fit beside the 3 old ones
    assert (pin[0].accelerator_type, pin[0].replicas, pin[0].swap) == ("A", 2, False)
    one = _pool(1, heap=2 * GiB)
    (pin,) = _pins(one, left_s=1_000.0, free_memory_bytes=1 * GiB)  # not one fits beside: a swap
    assert (pin[0].replicas, pin[0].swap) == (1, True) and "swapped" in pin[1]
    assert _pins(one, left_s=150.0, free_memory_bytes=1 * GiB) == []  # the swap stops the pool: not worth it


def test_the_cost_of_a_move_is_what_the_missing_replicas_lose_there_and_back():
    assert cheap(6, 16, explore_s=20.0, left_s=500.0)  # 2 x 20 s x 10/16 = 25 s <= 50 s
    assert not cheap(6, 16, explore_s=20.0, left_s=200.0)
    assert cheap(16, 16, explore_s=20.0, left_s=1.0)  # nothing lost
    assert not cheap(0, 1, explore_s=20.0, left_s=None)  # unknown work left: never


def test_a_pool_explored_on_fewer_replicas_and_no_faster_goes_back_with_all_of_them():
    pool = _pool(3, on=(("A", None),), accel="A")
    obs = Observer(settings=S, rng=np.random.default_rng(0), seed=0)
    tr = obs.track(pool)
    tried = {("embed", tr.regime_start_s): Tried(source="C", rate=10.0, target="A", replicas=9)}
    for i in range(2):
        tr.rates.append(RateSample(float(i), key_of(pool.config), 10.5))  # as fast as on C: no gain, less room
    (back,) = reverts([pool], obs.tracks, tried, windows=2)
    assert (back[0].accelerator_type, back[0].replicas) == ("C", 9)
    faster = {("embed", tr.regime_start_s): Tried(source="C", rate=5.0, target="A", replicas=9)}
    assert reverts([pool], obs.tracks, faster, windows=2) == []  # 2x faster on A: it stays
