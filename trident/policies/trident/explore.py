"""Exploration of accelerator types: a GPU pool's rate is measured on each type before the
planner chooses between them.

Ray's autoscaler cannot choose a device, and user code usually names none: on a cluster with
two or more GPU types an unpinned pool runs wherever its actors land. Here each such pool is
pinned (a rolling update of ``accelerator_type``) to a type it was not measured on yet, pools
spread over different types so they are measured at the same time, with as many replicas as
that type has room for. Once every pool has ``windows`` rate windows on every type, the MILP
places each where it is relatively fastest. Pure: no Ray, no clock.
"""
from __future__ import annotations

from trident.policies.trident.records import ConfigKey
from trident.policies.trident.tracking import OperatorTrack
from trident.types import OperatorSnapshot, OperatorTarget, Snapshot


def measured_types(tr: OperatorTrack, o: OperatorSnapshot, types: list[str], windows: int) -> set[str]:
    """The types ``o`` has at least ``windows`` rate windows on, with its current batch and GPUs."""
    return {t for t in types
            if len(tr.measured(ConfigKey(o.config.batch_size, t, o.config.num_gpus))) >= windows}


def next_pins(snap: Snapshot, ops: list[OperatorSnapshot], tracks: dict[str, OperatorTrack], *,
              windows: int) -> list[tuple[OperatorTarget, str]]:
    """Rolling updates that measure a GPU pool on a type it has not been measured on; each with
    its reason. Empty when the cluster has one GPU type or every pool is measured everywhere."""
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
    out, taken = [], set()
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
        t = min(todo, key=lambda x: (x in taken, -free.get(x, 0.0), x))
        room = int(max(free.get(t, 0.0), 0.0) // c.num_gpus)
        n = max(1, min(c.replicas or 1, room))
        taken.add(t)
        free[t] = free.get(t, 0.0) - n * c.num_gpus
        where = f"type {c.accelerator_type}" if c.accelerator_type else "no type"
        out.append((OperatorTarget(name=o.name, replicas=n, accelerator_type=t),
                    f"explore: measure {o.name} on {t} ({n} replica(s); measured on {sorted(done) or 'none'}, "
                    f"now on {where})"))
    return out
