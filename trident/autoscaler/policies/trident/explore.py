"""Exploration of accelerator types: a GPU pool's rate is measured on each type before the
planner chooses between them.

Ray's autoscaler cannot choose a device, and user code usually names none: on a cluster with
two or more GPU types an unpinned pool runs wherever its actors land. Here one pool at a time
is pinned (a rolling update of ``accelerator_type``, new actors first) to a type it was not
measured on yet, and only when that type has room for all its current replicas: exploring
never shrinks a pool nor leaves actors pending. Once a pool has ``windows`` rate windows on
several types, the MILP places it where it is relatively fastest. Pure: no Ray, no clock.
"""
from __future__ import annotations

from trident.autoscaler.policies.trident.records import ConfigKey
from trident.autoscaler.policies.trident.track import OperatorTrack
from trident.core.types import OperatorSnapshot, OperatorTarget, Snapshot


def measured_types(tr: OperatorTrack, o: OperatorSnapshot, types: list[str], windows: int) -> set[str]:
    """The types ``o`` has at least ``windows`` rate windows on, with its current batch and GPUs."""
    return {t for t in types
            if len(tr.measured(ConfigKey(o.config.batch_size, t, o.config.num_gpus))) >= windows}


def next_pins(snap: Snapshot, ops: list[OperatorSnapshot], tracks: dict[str, OperatorTrack], *,
              windows: int) -> list[tuple[OperatorTarget, str]]:
    """The rolling update (at most one) that measures a GPU pool on a type it has not been
    measured on, with its reason. Empty when the cluster has one GPU type, every pool is measured
    everywhere, or no type has room for the pool that still needs it."""
    types = [t for t, g in snap.cluster.gpus_by_type if g > 0]
    if len(types) < 2:
        return []
    capacity = dict(snap.cluster.gpus_by_type)
    free = dict(capacity)
    total = sum(capacity.values())
    for o in snap.operators:
        used = (o.config.replicas or 0) * o.config.num_gpus if o.config.kind == "actor" else 0.0
        if o.config.accelerator_type in free:
            free[o.config.accelerator_type] -= used
        elif used:  # an unpinned pool's actors are somewhere: each type holds its share of them
            for t in free:
                free[t] -= used * capacity[t] / total
    for o in ops:
        c = o.config
        if c.kind != "actor" or c.num_gpus <= 0 or o.name not in tracks:
            continue
        done = measured_types(tracks[o.name], o, types, windows)
        if c.accelerator_type in types and c.accelerator_type not in done:
            continue  # still measuring where it is
        todo = [t for t in types if t not in done and t != c.accelerator_type]
        if not todo:
            continue
        n = max(1, c.replicas or 1)
        room = [t for t in todo if free.get(t, 0.0) + 1e-9 >= n * c.num_gpus]
        if not room:
            continue  # no type it still has to be measured on has room for it now
        t = max(room, key=lambda x: (free[x], x))
        where = f"type {c.accelerator_type}" if c.accelerator_type else "no type"
        return [(OperatorTarget(name=o.name, replicas=n, accelerator_type=t),
                 f"explore: measure {o.name} on {t} ({n} replica(s); measured on {sorted(done) or 'none'}, "
                 f"now on {where})")]
    return []
