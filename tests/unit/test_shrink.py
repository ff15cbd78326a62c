"""The memory-bound bottleneck's batch halved for more replicas: only where memory, not GPUs,
holds the pool, the half batch would hold at least twice its replicas, and the work left pays."""
import numpy as np

from trident.autoscaler.policies.trident.inner import Room
from trident.autoscaler.policies.trident.records import key_of
from trident.autoscaler.policies.trident.settings import TridentSettings
from trident.autoscaler.policies.trident.shrink import halve
from trident.autoscaler.policies.trident.tracking import Observer
from trident.core.types import ClusterView, OperatorConfig, OperatorSnapshot, Snapshot

S = TridentSettings()
GiB = 2**30
ROOM = Room(cpus=8.0, gpus=4.0, gpus_by_type={"A": 4.0}, memory_bytes=0.0, gpu_node_cpus=None)


def _pool(replicas=1, batch=64, rest=1.0 * GiB, hi=11, accel=None):
    return OperatorSnapshot(name="embed", index=1, rows_in_total=100, tasks_in_flight=replicas, input_queue_blocks=9,
                            actors_running=replicas, tasks_running=replicas, heap_rss_per_replica_bytes=3.7 * GiB,
                            heap_rest_per_replica_bytes=rest,
                            config=OperatorConfig(kind="actor", replicas=replicas, min_replicas=1, max_replicas=hi,
                                                  num_cpus=1.0, num_gpus=0.25, batch_size=batch,
                                                  accelerator_type=accel))


def _case(pool, heap=3.7 * GiB):
    snap = Snapshot(execution_id="e", seq=1, time_s=30.0, operators=(pool,),
                    cluster=ClusterView(cpus=32.0, gpus=8.0, gpus_by_type=(("A", 8.0),)))
    obs = Observer(settings=S, rng=np.random.default_rng(0), seed=0)
    obs.track(pool).heap[key_of(pool.config)] = heap
    return snap, obs.tracks


def test_a_pool_memory_holds_at_one_replica_halves_its_batch_on_that_replica():
    snap, tracks = _case(_pool())
    trial = halve(snap, _pool(), tracks, S, limit_bytes=int(7.6e9), left_s=600.0, room=ROOM)
    # 3.7 GiB each: one fits in 7.6 GB with the margin; at batch 32, 1 + 2.7 / 2 = 2.35 GiB: two
    assert (trial.target.batch_size, trial.target.replicas, trial.swap) == (32, 1, True)
    assert "batch_size 64 -> 32 on 1 replica(s)" in trial.reason and "about 2 at batch 32" in trial.reason


def test_no_halving_where_memory_is_not_what_holds_the_pool_or_it_would_not_double():
    snap, tracks = _case(_pool())
    assert halve(snap, _pool(), tracks, S, limit_bytes=None, left_s=600.0, room=ROOM) is None  # no limit
    assert halve(snap, _pool(), tracks, S, limit_bytes=int(40e9), left_s=600.0, room=ROOM) is None  # room for more at 64
    one = _pool(hi=1)
    snap_one, tracks_one = _case(one)
    assert halve(snap_one, one, tracks_one, S, limit_bytes=int(7.6e9), left_s=600.0, room=ROOM) is None  # its maximum
    heavy = _pool(rest=3.0 * GiB)  # 3 GiB at rest: half the batch saves 0.35 GiB, not a second replica
    assert halve(snap, heavy, _case(heavy)[1], S, limit_bytes=int(7.6e9), left_s=600.0, room=ROOM) is None
    assert halve(snap, _pool(), tracks, S, limit_bytes=int(7.6e9), left_s=30.0, room=ROOM) is None  # too little work left


def test_a_half_batch_measured_in_this_regime_is_not_tried_again():
    pool = _pool()
    snap, tracks = _case(pool)
    tracks["embed"].heap[key_of(_pool(batch=32).config)] = 2.4 * GiB
    assert halve(snap, pool, tracks, S, limit_bytes=int(7.6e9), left_s=600.0, room=ROOM) is None


def test_a_swap_waits_where_the_new_replica_might_not_start():
    """The CPUs a swapped replica leaves go to the tasks waiting for them: a swap needs the
    cluster's room for the new replicas beside the old ones, and a pool not pinned to one type."""
    snap, tracks = _case(_pool())
    busy = Room(cpus=0.0, gpus=4.0, gpus_by_type={"A": 4.0}, memory_bytes=0.0, gpu_node_cpus=None)
    assert halve(snap, _pool(), tracks, S, limit_bytes=int(7.6e9), left_s=600.0, room=busy) is None
    pinned = _pool(accel="A")
    snap_p, tracks_p = _case(pinned)
    assert halve(snap_p, pinned, tracks_p, S, limit_bytes=int(7.6e9), left_s=600.0, room=ROOM) is None
