"""The inner loop: at every step, at least what Ray Data's own autoscaler would do.

Ray's rule per actor pool (Ray 2.60's default ``BacklogAwareActorAutoscaler``): utilisation is
tasks in flight over (actor slots x actors, pending ones included); at or above
``upscale_util`` the pool jumps to what its backlog needs (in-flight plus queued tasks at
``upscale_util`` per slot), in one cold start (capping the jump at doubling left the video
benchmark's OCR pool two cold starts behind Ray's); at or below ``downscale_util`` (no actor
pending, and not within ``downscale_debounce_s`` of its last growth, as Ray holds a pool's scale-down
for 10 s after it grew) it shrinks by one; a pool that has taken all its input (``estimates.input_taken``) does
not grow. Every pool moves only within the bounds the planner set
(``lo..hi``), within the memory limit (heap per replica as measured), and within the CPUs
and GPUs left free: when the pools together want more than is free, replicas go one at a time
to the pool with the most tasks in flight per replica (counting those already granted). A pool
grows past its even share of the cluster (:func:`even_share`) only into room that no other pool
below its share may need: one none of whose tasks has finished yet, or one that asks to grow
(as Ray Data reserves each operator a share of the resources; on the regime-shift scenario the
first pool, backlogged first, took 6 of 8 GPU slots at 2.4 s and the second, the bottleneck, ran
on 2 until the plan at 17 s moved four actors). Pure: no Ray, no clock.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from trident.autoscaler.policies.trident import estimates
from trident.autoscaler.policies.trident.records import Bounds
from trident.autoscaler.policies.trident.settings import TridentSettings
from trident.core.types import ClusterView, OperatorSnapshot, OperatorTarget, Snapshot


@dataclass(frozen=True)
class PoolView:
    """One actor pool as the inner loop sees it."""

    name: str
    size: int
    """Running plus pending actors."""
    pending: int
    in_flight: int
    queued: int
    """Input blocks waiting at the operator (a block is taken for one task)."""
    received: int = 1
    """Input rows received so far (Ray holds a pool that has received none)."""
    slots: int = 1
    """Tasks one actor runs at once (Ray's ``max_concurrency``)."""
    wanted: int = 0
    """A size asked for at an earlier step that the room held back (0: none)."""
    since_grew_s: float = math.inf
    """Seconds since the pool last grew."""

    @property
    def util(self) -> float:
        return math.inf if self.size == 0 else self.in_flight / (self.slots * self.size)


def ray_rule(pool: PoolView, settings: TridentSettings, *, queue_holds: bool = True) -> tuple[int, str]:
    """The size Ray's rule moves ``pool`` to (before bounds and room), and why. ``queue_holds``: a
    pool with input waiting is not shrunk (the inner loop's rule; Ray 2.60's shrinks it all the
    same)."""
    if pool.size == 0:
        return (1, "no actor: start one") if pool.queued or pool.in_flight else (0, "idle")
    if pool.received == 0:
        return pool.size, "no input received yet"
    if pool.wanted > pool.size and pool.queued:
        # Ray would hold these as pending actors and start them when room appears; on the video
        # benchmark the OCR pool's fifth replica fitted 3 s later (Embed's heap measured), and
        # waited 6 s more for the pool's utilisation
        return pool.wanted, f"{pool.wanted} asked for earlier, held back by room ({pool.queued} queued)"
    u = pool.util
    if u >= settings.upscale_util:
        backlog = math.ceil((pool.in_flight + pool.queued) / (pool.slots * settings.upscale_util))
        want = max(pool.size + 1, backlog)
        return want, f"utilisation {u:.2f} >= {settings.upscale_util:g} ({pool.in_flight} in flight, {pool.queued} queued)"
    if u <= settings.downscale_util and pool.pending == 0 and not (queue_holds and pool.queued):
        if pool.since_grew_s <= settings.downscale_debounce_s:
            return pool.size, f"utilisation {u:.2f}, grown {pool.since_grew_s:.0f} s ago"
        return pool.size - 1, f"utilisation {u:.2f} <= {settings.downscale_util:g}"
    return pool.size, f"utilisation {u:.2f}"


@dataclass
class Growth:
    """When each actor pool last grew (seconds, the snapshot clock), read from its size."""

    sizes: dict[str, int] = field(default_factory=dict)
    grew_at: dict[str, float] = field(default_factory=dict)

    def see(self, snap: Snapshot) -> None:
        """Note the pools that are larger than at the last snapshot."""
        for o in snap.operators:
            if o.config.kind == "actor" and o.config.replicas is not None:
                if o.config.replicas > self.sizes.get(o.name, o.config.replicas):
                    self.grew_at[o.name] = snap.time_s
                self.sizes[o.name] = o.config.replicas

    def since(self, snap: Snapshot) -> dict[str, float]:
        """Seconds since each pool that has grown last grew."""
        return {name: snap.time_s - t for name, t in self.grew_at.items()}


@dataclass(frozen=True)
class Room:
    """What is free for new replicas: CPUs, GPUs (per accelerator type when typed), memory, and
    the CPUs of the GPU nodes (a GPU replica's CPUs come from its node; per type when typed;
    ``None`` where the nodes are not known)."""

    cpus: float
    gpus: float
    gpus_by_type: dict[str, float]
    memory_bytes: float
    gpu_node_cpus: dict[str | None, float] | None = None
    """Free CPUs of the GPU nodes: in all (key ``None``) and per accelerator type."""

    def gpu_cpus(self, c) -> float:
        """CPUs a new replica of configuration ``c`` can have: for a GPU replica, those of the GPU nodes."""
        if self.gpu_node_cpus is None or c.num_gpus <= 0:
            return self.cpus
        return min(self.cpus, self.gpu_node_cpus.get(c.accelerator_type, 0.0) if c.accelerator_type
                   else self.gpu_node_cpus.get(None, 0.0))

    def fits(self, op: OperatorSnapshot, heap_bytes: float) -> bool:
        c = op.config
        gpus = self.gpus_by_type.get(c.accelerator_type, self.gpus) if c.accelerator_type else self.gpus
        return (c.num_cpus <= self.gpu_cpus(c) + 1e-9 and c.num_gpus <= gpus + 1e-9
                and heap_bytes <= self.memory_bytes + 1e-9)

    def take(self, op: OperatorSnapshot, heap_bytes: float) -> Room:
        c = op.config
        typed = dict(self.gpus_by_type)
        if c.accelerator_type in typed:
            typed[c.accelerator_type] -= c.num_gpus
        node_cpus = None if self.gpu_node_cpus is None else dict(self.gpu_node_cpus)
        if node_cpus is not None and c.num_gpus > 0:
            for key in {None, c.accelerator_type}:
                if key in node_cpus:
                    node_cpus[key] -= c.num_cpus
        return Room(cpus=self.cpus - c.num_cpus, gpus=self.gpus - c.num_gpus, gpus_by_type=typed,
                    memory_bytes=self.memory_bytes - heap_bytes, gpu_node_cpus=node_cpus)


def room_of(snap: Snapshot, held: dict[str, int], heap_bytes: dict[str, float],
            memory_limit_bytes: int | None, *, margin: float) -> Room:
    """Resources left once every operator holds what it has or was told to have (``held``:
    replicas per actor pool, the larger of current and planned); task operators hold the CPUs
    of their running tasks. A pool whose heap is not measured yet is charged as the planner
    charges it (:func:`estimates.unmeasured_heap`, with ``margin``; else a replica the inner
    loop adds would be taken back by the next plan)."""
    cpus, gpus, mem = snap.cluster.cpus, snap.cluster.gpus, 0.0
    typed = dict(snap.cluster.gpus_by_type)
    for o in snap.operators:
        if o.config.kind == "task" and not o.completed:
            cpus -= o.tasks_running * o.config.num_cpus
        elif o.config.kind == "actor":
            n = held.get(o.name, o.config.replicas or 0)
            cpus -= n * o.config.num_cpus
            gpus -= n * o.config.num_gpus
            if o.config.accelerator_type in typed:
                typed[o.config.accelerator_type] -= n * o.config.num_gpus
            if n:
                mem += n * (heap_bytes.get(o.name, 0.0) or estimates.unmeasured_heap(o, snap, heap_bytes, margin))
    free_mem = math.inf if memory_limit_bytes is None else memory_limit_bytes - mem
    return Room(cpus=cpus, gpus=gpus, gpus_by_type=typed, memory_bytes=free_mem,
                gpu_node_cpus=gpu_node_cpus(snap, held))


def gpu_node_cpus(snap: Snapshot, held: dict[str, int]) -> dict[str | None, float] | None:
    """CPUs the GPU pools leave on the GPU nodes, in all (key ``None``) and per accelerator type,
    each pool at its ``held`` replicas (else its current ones); ``None`` where the nodes are not known."""
    if not snap.cluster.nodes:
        return None
    node_cpus: dict[str | None, float] = {None: sum(n.cpus for n in snap.cluster.nodes if n.gpus > 0)}
    for n in snap.cluster.nodes:
        if n.gpus > 0 and n.accelerator_type is not None:
            node_cpus[n.accelerator_type] = node_cpus.get(n.accelerator_type, 0.0) + n.cpus
    for o in snap.operators:
        if o.config.kind == "actor" and o.config.num_gpus > 0:
            _charge_gpu_node_cpus(node_cpus, o, held.get(o.name, o.config.replicas or 0))
    return node_cpus


def _charge_gpu_node_cpus(node_cpus: dict[str | None, float], o: OperatorSnapshot, n: int) -> None:
    """Charge ``n`` replicas of GPU pool ``o`` to the GPU nodes' CPUs: to its type's when pinned,
    else to the types its actors run on (by_type), the rest to the total alone."""
    node_cpus[None] -= n * o.config.num_cpus
    if o.config.accelerator_type is not None and o.config.accelerator_type in node_cpus:  # None: the total
        node_cpus[o.config.accelerator_type] -= n * o.config.num_cpus
        return
    for u in o.by_type:
        if u.accelerator_type in node_cpus:
            node_cpus[u.accelerator_type] -= min(u.actors, n) * o.config.num_cpus


def even_share(o: OperatorSnapshot, cluster: ClusterView, pools: list[OperatorSnapshot]) -> int:
    """Replicas of ``o`` in an even split of the cluster's GPUs among the ``pools`` that use GPUs
    and of its CPUs among those that use CPUs, within its maximum (at least 1)."""
    c = o.config
    fit = math.inf
    if c.num_gpus > 0:
        fit = min(fit, cluster.gpus / sum(p.config.num_gpus > 0 for p in pools) / c.num_gpus)
    if c.num_cpus > 0:
        fit = min(fit, cluster.cpus / sum(p.config.num_cpus > 0 for p in pools) / c.num_cpus)
    share = min(fit, c.max_replicas if c.max_replicas is not None else math.inf)
    return max(1, int(share + 1e-9)) if share != math.inf else 1 << 30


def pool_view(o: OperatorSnapshot, wanted: int = 0, since_grew_s: float = math.inf) -> PoolView:
    return PoolView(name=o.name, size=o.config.replicas or 0, pending=o.actors_pending, in_flight=o.tasks_in_flight,
                    queued=o.input_queue_blocks, slots=max(1, o.config.max_concurrency), received=o.rows_in_total,
                    wanted=wanted, since_grew_s=since_grew_s)


def inner_targets(snap: Snapshot, bounds: dict[str, Bounds], heap_bytes: dict[str, float], *,
                  memory_limit_bytes: int | None, settings: TridentSettings,
                  skip: frozenset[str] = frozenset(), wanted: dict[str, int] | None = None,
                  since_grew: dict[str, float] | None = None, rolling_out: bool = False,
                  ) -> tuple[list[OperatorTarget], list[str], dict[str, int]]:
    """Pool sizes Ray's rule asks for, within bounds, memory and free resources; (targets,
    reasons: one per target, then one per pool the room held at its size, held back: the size
    each pool asked for that the room held back).

    ``heap_bytes``: heap per replica to plan with (0 when unknown). With a memory limit a pool
    grows only once a task of it has finished: a reading before that is a floor of the heap a
    task holds, not the heap to plan with. ``skip``: pools a rollout is moving.
    ``wanted``: the previous step's held-back sizes (asked for again while input is queued).
    ``since_grew``: seconds since each pool last grew (:class:`Growth`). A pool below its bound's
    floor grows to it in the room held for it (``room_of`` charges the floor), unless a rollout is
    under way (``rolling_out``: its later phases bring the pools they name to their floors in turn)."""
    pools = [o for o in snap.operators if o.config.kind == "actor" and not o.completed and o.name not in skip
             and o.config.replicas is not None]
    holding = {o.name: max(o.config.replicas or 0, bounds[o.name].lo if o.name in bounds else 0)
               for o in snap.operators if o.config.kind == "actor"}
    room = room_of(snap, holding, heap_bytes, memory_limit_bytes, margin=settings.memory_margin)
    wants: dict[str, tuple[int, str]] = {}
    for o in pools:
        b = bounds.get(o.name, Bounds(o.config.min_replicas, o.config.max_replicas, "the user's bounds"))
        size, why = ray_rule(pool_view(o, (wanted or {}).get(o.name, 0), (since_grew or {}).get(o.name, math.inf)),
                             settings)
        hi = b.hi if b.hi is not None else math.inf
        if o.config.max_replicas is not None:
            hi = min(hi, o.config.max_replicas)
        want = int(min(max(size, b.lo, o.config.min_replicas), hi))
        if estimates.input_taken(snap, o):
            want = min(want, o.config.replicas or 0)
        if want != o.config.replicas:
            wants[o.name] = (want, f"{why}; bounds {b.lo}..{'-' if b.hi is None else b.hi} ({b.why})")
    targets, reasons, held, kept_at = [], [], {}, []
    # growth one replica at a time within the room left, to the most loaded pool as granted so far
    grow = {o.name: o for o in pools if o.name in wants and wants[o.name][0] > (o.config.replicas or 0)}
    granted = {name: grow[name].config.replicas or 0 for name in grow}
    live = [o for o in snap.operators if o.config.kind == "actor" and not o.completed and o.config.replicas is not None]
    share = {o.name: even_share(o, snap.cluster, live) for o in live}
    # what a pool below its share may need of it: all of it before a task of it has finished, else
    # what it asks for; none for a pool that could not grow into it (heap unmeasured under a limit)
    keep = {o.name: share[o.name] if o.tasks_finished == 0 else min(share[o.name], wants[o.name][0])
            for o in live if (o.tasks_finished == 0 or o.name in grow)
            and (memory_limit_bytes is None or heap_bytes.get(o.name, 0.0) > 0)}
    blocked: dict[str, str] = {}
    while True:
        open_ = [n for n in grow if granted[n] < wants[n][0] and n not in blocked]
        if not open_:
            break
        n = max(open_, key=lambda k: (grow[k].tasks_in_flight / max(granted[k], 1), k))  # utilisation as granted
        o, h = grow[n], heap_bytes.get(n, 0.0)
        kept, short = room, []
        if granted[n] >= share[n]:
            for p in live:
                gap = keep.get(p.name, 0) - granted.get(p.name, holding[p.name])
                short += [p.name] if gap > 0 else []
                for _ in range(gap):
                    kept = kept.take(p, 0.0)
        if memory_limit_bytes is not None and h <= 0:
            blocked[n] = "its heap per replica is not measured yet (memory limit)"
        elif memory_limit_bytes is not None and o.tasks_finished == 0:
            blocked[n] = "no task of it has finished, its heap read mid-task only, under the memory limit"
        elif granted[n] < holding[n] and not rolling_out:  # to its floor: the room holds these replicas
            granted[n] += 1
        elif not room.fits(o, h):
            blocked[n] = _short(room, o, h)
        elif not kept.fits(o, h):
            blocked[n] = f"at its even share ({share[n]}); the rest kept for {', '.join(short)}, below theirs"
        else:
            room = room.take(o, h)
            granted[n] += 1
    for o in pools:
        if o.name not in wants:
            continue
        want, why = wants[o.name]
        n = granted.get(o.name, want)
        if n < want and o.name in blocked:
            held[o.name] = want
        note = f" ({want} wanted; {blocked[o.name]})" if n < want and o.name in blocked else ""
        if n == (o.config.replicas or 0):
            kept_at += [f"{o.name} held at {n}: {why}{note}"] if note else []
            continue
        targets.append(OperatorTarget(name=o.name, replicas=n))
        reasons.append(f"{o.name} {o.config.replicas} -> {n}: {why}{note}")
    return targets, reasons + kept_at, held


def _short(room: Room, o: OperatorSnapshot, heap_bytes: float) -> str:
    """What is missing for one more replica of ``o``."""
    c = o.config
    gpus = room.gpus_by_type.get(c.accelerator_type, room.gpus) if c.accelerator_type else room.gpus
    if c.num_gpus > gpus + 1e-9:
        return f"{gpus:.2g} GPUs free{f' of type {c.accelerator_type}' if c.accelerator_type else ''}"
    if c.num_cpus > room.cpus + 1e-9:
        return f"{room.cpus:.2g} CPUs free"
    if c.num_cpus > room.gpu_cpus(c) + 1e-9:
        return f"{room.gpu_cpus(c):.2g} CPUs free on the GPU nodes{f' of type {c.accelerator_type}' if c.accelerator_type else ''}"
    return f"{room.memory_bytes / 2**20:.0f} MiB left under the memory limit"


def below_one_replica(ops: list[OperatorSnapshot], heaps: dict[str, float], limit: int | None) -> str:
    """Why the memory limit (bytes) cannot be met at all ('' when it can): one replica of every
    pool (its minimum) already needs more heap (``heaps``: bytes per replica, with the margin)
    than the limit allows."""
    if limit is None:
        return ""
    pools = [o for o in ops if o.config.kind == "actor"]
    need = sum(max(o.config.min_replicas, 1) * heaps.get(o.name, 0.0) for o in pools)
    if need <= limit:
        return ""
    each = ", ".join(f"{o.name} {heaps[o.name] / 2**20:.0f} MiB" for o in pools if heaps.get(o.name))
    return (f"keep: the memory limit leaves the workers {limit / 2**20:.0f} MiB, below what the pools' "
            f"minimum replicas need ({need / 2**20:.0f} MiB measured with its margin: {each}); trident cannot "
            f"go below a pool's minimum, so it holds every pool there and adds no replica")
