"""Exploration of accelerator types: a GPU pool's rate is measured on each type before the
planner chooses between them.

Ray's autoscaler cannot choose a device, and user code usually names none: on a cluster with
two or more GPU types an unpinned pool runs wherever its actors land. Here one pool at a time
is pinned (a rolling update of ``accelerator_type``, new actors first) to a type it was not
measured on yet, with as many of its replicas as that type has room for, at least three
quarters of them (seed 24: the bottleneck's 8 replicas, 4x faster on B, where 6 fit, never
moved while all 8 had to): exploring never leaves actors pending, and a pool measured slower
there goes back with the replicas it had (:func:`reverts`). Once a pool has ``windows`` rate windows on
several types, the MILP places it where it is relatively fastest. Exploring every pool is off
by default (:attr:`TridentSettings.explore_types`); the pool that bounds a settled plan is
explored all the same (:func:`bottleneck`): no plan can give it more on the types it was measured
on, and Ray's own rule, which places a pool's actors where GPUs are free, often lands them on a
faster type by chance (seed 24 of the generated scenarios: a pool 4x faster on B held its 8
replicas on A, where the most GPUs were free when it grew, for the whole run). Pure: no Ray, no
clock.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from trident.autoscaler.policies.trident import estimates
from trident.autoscaler.policies.trident.inner import gpu_node_cpus
from trident.autoscaler.policies.trident.records import ConfigKey, key_of
from trident.autoscaler.policies.trident.settings import TridentSettings
from trident.autoscaler.policies.trident.track import OperatorTrack
from trident.core.plan.placement import ANY_GPU, PlacementProblem
from trident.core.types import OperatorSnapshot, OperatorTarget, Snapshot

CLEARLY_SLOWER = 0.5
"""A pool explored on a type where its first rate window is under this fraction of its rate
where it was goes back without waiting for more windows."""
CHEAP_SHARE = 0.1
"""The share of the work left a pool may lose measuring a type where fewer of its replicas fit."""


def measured_types(tr: OperatorTrack, o: OperatorSnapshot, types: list[str], windows: int,
                   min_busy_s: float) -> set[str]:
    """The types ``o`` has at least ``windows`` rate windows on, with its current batch and GPUs,
    or a rate on while unpinned in this regime (:func:`~.estimates.typed_rates`)."""
    b, g = o.config.batch_size, o.config.num_gpus
    return ({t for t in types if len(tr.measured(ConfigKey(b, t, g))) >= windows}
            | set(estimates.typed_rates(tr, ConfigKey(b, ANY_GPU, g), min_busy_s)))


@dataclass
class Tried:
    """A pool moved to another type to measure it there, in one regime: the type it left (the
    one most of its actors ran on when unpinned) and its rate there (rows out per busy
    replica-second)."""

    source: str | None
    rate: float | None
    target: str
    replicas: int | None = None
    """The pool's replicas where it was (a type with room for fewer took only those)."""
    settled: bool = False


def record(tried: dict[tuple[str, float], Tried], pins: list[tuple[OperatorTarget, str]], snap: Snapshot,
           tracks: dict[str, OperatorTrack], settings: TridentSettings) -> None:
    """Remember each explored pool's move and its rate where it runs now."""
    for target, _ in pins:
        o, tr = snap.operator(target.name), tracks[target.name]
        on = max(o.by_type, key=lambda u: u.actors).accelerator_type if o.by_type else None
        tried.setdefault((o.name, tr.regime_start_s),
                         Tried(source=o.config.accelerator_type or on, target=target.accelerator_type,
                               rate=estimates.rate(tr, o, key_of(o.config), settings).rows_per_s,
                               replicas=o.config.replicas))


def reverts(ops: list[OperatorSnapshot], tracks: dict[str, OperatorTrack], tried: dict[tuple[str, float], Tried], *,
            windows: int) -> list[tuple[OperatorTarget, str]]:
    """The move back (at most one) of a pool measured slower where it was explored than where it
    was, or no faster where it was explored on fewer replicas (pinned there, it could not grow:
    a plan of 6 on any GPU left 4 pending on the type that held 2): once its ``windows`` rate
    windows there are in (one, where it is under :data:`CLEARLY_SLOWER` of its rate where it
    was), whatever the planner makes of them (seed 152: a pool 2x faster on C,
    explored on A, stayed on A when the planner, with no unpinned pool measured per type, planned
    every pool on any GPU)."""
    for o in ops:
        verdict = _verdict(o, tracks, tried, windows)
        if verdict is not None:
            verdict[0].settled = True
            if verdict[1] is not None:
                return [verdict[1]]
    return []


def back_due(ops: list[OperatorSnapshot], tracks: dict[str, OperatorTrack], tried: dict[tuple[str, float], Tried], *,
             windows: int) -> bool:
    """Whether :func:`reverts` would move a pool back now: the planner then looks at once, past
    the dwell (else a pool measured at half its rate where it was explored runs there until the
    dwell after its move ends)."""
    return any(v is not None and v[1] is not None for v in (_verdict(o, tracks, tried, windows) for o in ops))


def _verdict(o: OperatorSnapshot, tracks: dict[str, OperatorTrack], tried: dict[tuple[str, float], Tried],
             windows: int) -> tuple[Tried, tuple[OperatorTarget, str] | None] | None:
    """``None`` while ``o`` is no explored pool whose ``windows`` windows are in; else its
    :class:`Tried` and the move back, if it goes back."""
    t = tried.get((o.name, tracks[o.name].regime_start_s)) if o.name in tracks else None
    measured = tracks[o.name].measured(key_of(o.config)) if t is not None else []
    if t is None or t.settled or o.config.accelerator_type != t.target or not measured:
        return None
    here = statistics.median(measured)
    if len(measured) < windows and not (t.rate and here < CLEARLY_SLOWER * t.rate):
        return None
    fewer = (o.config.replicas or 0) < (t.replicas or 0)  # its type had room for fewer: no faster, it goes back
    if t.source is not None and t.rate and (here * 1.1 < t.rate or fewer and here < 1.1 * t.rate):
        return t, (OperatorTarget(name=o.name, replicas=max(t.replicas or 0, o.config.replicas or 0),
                                  accelerator_type=t.source),
                   f"explore: {o.name} back to {t.source} ({here:.3g} rows/s per replica on {t.target}, "
                   f"{t.rate:.3g} where it was)")
    return t, None


def bottleneck(prob: PlacementProblem, ops: list[OperatorSnapshot], cold_starts: float) -> list[OperatorSnapshot]:
    """The GPU pool whose rate bounds the current plan's throughput (none when another operator
    does, nothing runs, or less work is left, ``PlacementProblem.horizon_s``, than ``cold_starts``
    of the pool's cold starts: :attr:`TridentSettings.explore_cold_starts`)."""
    counts = prob.current.as_dict() if prob.current is not None else {}
    caps = {sp.name: sum(o.rate_rows_per_s * counts.get((sp.name, o.device, n.name), 0)
                         for o in sp.options for n in prob.node_types) / max(f, 1e-12)
            for sp, f in zip(prob.operators, prob.demand_factors())}
    name = min(caps, key=caps.get) if caps else None
    if name is None:
        return []
    cold_s = next(sp.cold_start_s for sp in prob.operators if sp.name == name)
    if prob.horizon_s < cold_starts * max(cold_s, 1.0):
        return []
    return [o for o in ops if o.name == name and o.config.kind == "actor" and o.config.num_gpus > 0]


def next_pins(snap: Snapshot, ops: list[OperatorSnapshot], tracks: dict[str, OperatorTrack], *,
              windows: int, min_busy_s: float, explored: dict | frozenset = frozenset(),
              left_s: float | None = None, window_s: float = 0.0,
              free_memory_bytes: float = math.inf) -> list[tuple[OperatorTarget, str]]:
    """The rolling update (at most one) that measures a GPU pool on a type it has not been
    measured on, with its reason. ``explored``: (pool, regime start) of pools already explored
    once (:class:`Tried`), not again in that regime: each move restarts the whole pool (seed 151
    moved a pool of 4 to each of three types in turn, and lost 2.2x to Ray's rule; seed 17 moved
    one back to a type every 20 s, its windows there never measured). Empty when the cluster has
    one GPU type, an actor is pending, every pool is measured everywhere, or no type has room
    (GPUs, and CPUs on its nodes) for three quarters of the pool that still needs it, unless
    what fewer replicas lose while they measure it and come back is a small share of the work
    left (:func:`cheap`) and its actors run on one type (where all of them go back if the type
    measured is no faster). A pool whose new replicas' heap does not fit beside the old ones in
    ``free_memory_bytes`` (under a memory limit) measures the type on as many as fit beside them;
    where not one does, it moves by a swap, which stops it for the move: only where that is
    cheap. A pool still measured where its actors run waits (seed 40: a pool on B, its rate there
    not yet read, was 'explored' on B, and never on A, 6x faster)."""
    types = [t for t, g in snap.cluster.gpus_by_type if g > 0]
    if len(types) < 2 or any(o.actors_pending for o in snap.operators):
        # pending actors are about to take room that looks free (seed 193: a pool moved to B for good
        # while another pool's pending actors took B's CPUs; its one old actor drained, none came up)
        return []
    free = _free_gpus(snap)
    cpus = gpu_node_cpus(snap, {})  # a GPU actor's CPUs come from its own node
    for o in ops:
        c = o.config
        if c.kind != "actor" or c.num_gpus <= 0 or o.name not in tracks:
            continue
        done = measured_types(tracks[o.name], o, types, windows, min_busy_s)
        if c.accelerator_type in types and c.accelerator_type not in done:
            continue  # still measuring where it is
        on = {u.accelerator_type for u in o.by_type if u.actors}
        if on and not on & done:
            continue  # still measuring where its actors run
        todo = [t for t in types if t not in done and t != c.accelerator_type
                and (o.name, tracks[o.name].regime_start_s) not in explored]
        n = max(1, c.replicas or 1)
        fit, swap = _fits(o, todo, free, cpus, free_memory_bytes)
        explore_s = (tracks[o.name].cold_start_s or 0.0) + windows * window_s
        room = [t for t in todo if fit[t] >= 1 and ((4 * fit[t] >= 3 * n and not swap)
                or len(on) <= 1 and (3 * fit[t] >= n or swap) and cheap(0 if swap else fit[t], n, explore_s, left_s))]
        if not room:
            continue  # no type it still has to be measured on has room for 3/4 of it now
        t = max(room, key=lambda x: (fit[x], free[x], x))
        where = f"type {c.accelerator_type}" if c.accelerator_type else "no type"
        return [(OperatorTarget(name=o.name, replicas=fit[t], accelerator_type=t, swap=swap),
                 f"explore: measure {o.name} on {t} ({fit[t]} of its {n} replica(s), as many as fit; measured on "
                 f"{sorted(done) or 'none'}, now on {where})" + ("; swapped: no memory for both" if swap else ""))]
    return []


def _free_gpus(snap: Snapshot) -> dict[str, float]:
    """GPUs free per type: an unpinned pool's actors where they run (:attr:`OperatorSnapshot.by_type`),
    its others (pending, or where no type is read) spread over the types by their share of GPUs."""
    capacity = dict(snap.cluster.gpus_by_type)
    free = dict(capacity)
    total = sum(capacity.values())
    for o in snap.operators:
        used = (o.config.replicas or 0) * o.config.num_gpus if o.config.kind == "actor" else 0.0
        if o.config.accelerator_type in free:
            free[o.config.accelerator_type] -= used
            continue
        for u in o.by_type if used else ():
            if u.accelerator_type in free:
                free[u.accelerator_type] -= u.actors * o.config.num_gpus
                used -= u.actors * o.config.num_gpus
        for t in free if used > 0 else ():
            free[t] -= used * capacity[t] / total
    return free


def _fits(o: OperatorSnapshot, todo: list[str], free: dict[str, float], cpus: dict[str | None, float] | None,
          free_memory_bytes: float) -> tuple[dict[str, int], bool]:
    """How many of ``o``'s replicas each type in ``todo`` has room for (GPUs, its nodes' CPUs, and
    memory beside the old replicas), and whether the move is a swap (not one fits in memory beside
    them: the count is then the GPUs' and CPUs' alone)."""
    c = o.config
    n = max(1, c.replicas or 1)
    fit = {t: min(n, int(free.get(t, 0.0) / c.num_gpus + 1e-9),
                  n if cpus is None or c.num_cpus <= 0 else int(cpus.get(t, 0.0) / c.num_cpus + 1e-9))
           for t in todo}
    heap = o.heap_rss_per_replica_bytes or 0.0
    beside = n if heap <= 0 or math.isinf(free_memory_bytes) else max(int(free_memory_bytes // heap), 0)
    if beside == 0:
        return fit, True
    return {t: min(f, beside) for t, f in fit.items()}, False


def cheap(fit: int, n: int, explore_s: float, left_s: float | None) -> bool:
    """Whether measuring a type on ``fit`` of a pool's ``n`` replicas (0: a swap) costs at most
    ``CHEAP_SHARE`` of the ``left_s`` seconds of work left: the replicas it lacks for the
    ``explore_s`` the measure takes, twice (there and, if slower, back). Seed 177: a pool of 16
    on the type 4x slower than the two others, each of which had room for 4-6 of it, was never
    measured elsewhere and finished 1.4x after Ray's rule."""
    if left_s is None or n < 1:
        return False
    return 2 * explore_s * (1 - fit / n) <= CHEAP_SHARE * left_s
