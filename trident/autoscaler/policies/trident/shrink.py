"""A smaller batch for more replicas: the memory-bound bottleneck's batch halved.

Under a memory limit a pool's heap per replica can hold it below the replicas its GPUs allow.
The batch-size search (:mod:`.tuner`) grows batches: below a measured batch it certifies no more
memory room than the measured batch's own. Here the batch is halved on the replicas the pool has
(certainly safe: a replica's heap does not grow as its batch shrinks); once that heap is measured,
the planner sizes the pool on it. Taken only when the memory the replica's heap at rest plus a part
proportional to its batch would leave at half the batch holds at least twice the replicas: then
even a rate per replica halved with the batch loses nothing (seed 39 of the generated scenarios:
a pool of one replica at batch 64 holding 3.7 GB of a 7.1 GiB limit, four of which fit at batch 16
and make 2.6x its rows). Pure: no Ray, no clock.
"""
from __future__ import annotations

import math

from trident.autoscaler.policies.trident import estimates
from trident.autoscaler.policies.trident.inner import Room
from trident.autoscaler.policies.trident.records import ConfigKey, key_of
from trident.autoscaler.policies.trident.settings import TridentSettings
from trident.autoscaler.policies.trident.track import OperatorTrack
from trident.autoscaler.policies.trident.tuner import Trial, most_replicas
from trident.core.types import OperatorSnapshot, OperatorTarget, Snapshot

GiB = 2**30


def halve(snap: Snapshot, o: OperatorSnapshot, tracks: dict[str, OperatorTrack], settings: TridentSettings,
          limit_bytes: int | None, left_s: float | None, room: Room) -> Trial | None:
    """The trial of ``o``'s batch halved on its replicas, or ``None``: no memory limit, not
    settled, no heap measured at its batch and at rest, not bound by memory, a half batch tried
    in this regime already, too little work left (``left_s``: seconds) for its two cold starts,
    or a swap of a pool pinned to a type, or where the cluster's free CPUs and GPUs (``room``,
    tasks counted) would not start the new replicas beside the old ones: the CPUs the old ones
    leave go to the tasks waiting for them (seed 156 swapped the one replica of a pool pinned to
    C, whose nodes' CPUs the tasks held, and its new one never started)."""
    c, tr = o.config, tracks.get(o.name)
    b, n = c.batch_size or 0, c.replicas or 0
    if (limit_bytes is None or tr is None or c.kind != "actor" or b < 2 or n < 1 or o.actors_pending
            or o.actors_running != n or not o.heap_rest_per_replica_bytes):
        return None
    key = key_of(c)
    heap, rest = tr.heap.get(key), float(o.heap_rest_per_replica_bytes)
    half = ConfigKey(b // 2, key.device, key.num_gpus)
    if not heap or rest >= heap or half in tr.heap or tr.measured(half):
        return None
    cold_s = estimates.cold_start_s(tr, o, settings)
    if left_s is None or left_s < max(settings.bo_min_remaining_s, 4 * settings.bo_trial_cold_starts * cold_s):
        return None
    others = estimates.others_heap(list(snap.operators), o.name, tracks, settings)
    free, margin = limit_bytes - others, 1 + settings.memory_margin
    most = most_replicas(snap, o)
    if most <= n or math.floor(free / (heap * margin)) > n:
        return None  # the GPUs or its maximum hold it, or memory has room for more at this batch
    each = rest + (heap - rest) * (b // 2) / b
    then = min(most, math.floor(free / (each * margin)))
    if then < 2 * n:
        return None
    swap = free - n * heap * margin < n * heap  # no room for the new replicas beside the old ones
    if swap and (c.accelerator_type is not None or room.cpus < n * c.num_cpus or room.gpus < n * c.num_gpus - 1e-9):
        return None
    reason = (f"tune {o.name} batch_size {b} -> {b // 2} on {n} replica(s): memory holds {n} at batch {b} "
              f"({heap / GiB:.2f} GiB each), about {then} at batch {b // 2} ({rest / GiB:.2f} GiB at rest plus "
              f"{(heap - rest) / b / 2**20:.1f} MiB a row); its heap there measured, the plan sizes the pool")
    return Trial(OperatorTarget(name=o.name, batch_size=b // 2, replicas=n), n, swap,
                 reason + ("; no room for new replicas beside the old ones: swapped half the pool at a time"
                           if swap else ""), replica_bytes=heap)
