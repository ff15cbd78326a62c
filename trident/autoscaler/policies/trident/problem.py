"""The planning problem: each operator's options (device, rate, resources, heap) and the
cluster, as a :class:`~trident.core.plan.placement.PlacementProblem`; and the plan read back as targets."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from trident.core.plan.placement import (
    ANY_GPU,
    CPU,
    Allocation,
    DeviceOption,
    OperatorSpec,
    PlacementProblem,
    throughput_of,
)
from trident.autoscaler.actuation import pending_guard_s
from trident.autoscaler.policies.trident import estimates
from trident.autoscaler.policies.trident import nodes as nodes_of
from trident.autoscaler.policies.trident.records import ConfigKey, Estimate, key_of
from trident.autoscaler.policies.trident.settings import TridentSettings
from trident.autoscaler.policies.trident.track import OperatorTrack, same_types_since, type_deltas, typed_snaps
from trident.core.types import OperatorSnapshot, OperatorTarget, Snapshot

TYPE_SPEEDUP = 1.5
"""How much faster on one accelerator type than on another an unpinned pool must be measured
before pools are planned per type."""
UNKNOWN_RATE = 1e9
"""Marks the rate of an operator held for lack of evidence (see :func:`bound_held`)."""
WORK_LEFT_FLOOR = 0.05
"""Least share of the most work left that an operator's demand counts (one whose input is all
handed out still finishes what it holds)."""


@dataclass(frozen=True)
class Planning:
    """A problem to solve, or why there is none yet (``problem is None``)."""

    problem: PlacementProblem | None
    rates: dict[str, Estimate]
    """Input rows per replica-second per operator, and their source."""
    why: str = ""
    per_type: bool = False
    """Whether the problem plans GPU pools per accelerator type (:class:`TypedView`)."""
    held: tuple[str, ...] = ()
    """Pools the plan may move only the way their data changed (:func:`along_the_shift`)."""


def describe_rates(rates: dict[str, Estimate]) -> str:
    """The rates a plan rests on, each with its source (and the earlier run it leans on)."""
    def source(e: Estimate) -> str:
        if not e.history:
            return e.source
        return f"history of run {e.history}" if e.source == "history" else f"{e.source}, history of run {e.history}"
    return ", ".join(f"{n} {e.rows_per_s:.3g} rows/s per replica ({source(e)})"
                     for n, e in rates.items() if e.rows_per_s < UNKNOWN_RATE)


def plannable(snap: Snapshot) -> list[OperatorSnapshot]:
    """Operators a plan can change: running task and actor operators, a Write sink left out."""
    return [o for o in snap.operators
            if o.config.kind in ("task", "actor") and not o.completed and not estimates.is_sink(o)]


def build(snap: Snapshot, ops: list[OperatorSnapshot], tracks: dict[str, OperatorTrack],
          settings: TridentSettings, memory_limit_bytes: int | None) -> Planning:
    cluster = snap.cluster
    if cluster.cpus <= 0:
        return Planning(None, {}, "observing: the cluster's size is not known yet")
    typed = {t: g for t, g in cluster.gpus_by_type if g > 0}
    view = typed_view(snap, ops, tracks, settings)
    seen, per_type, upside = view.seen, view.per_type, view.upside
    nodes = nodes_of.node_types(cluster, typed, per_type)
    specs, current, rates, missing = [], {}, {}, []
    # every pool's, done ones included, as the inner loop's room counts them: a pool not measured
    # yet is charged alike by both
    heaps = {o.name: estimates.heap(tracks[o.name], key_of(o.config), settings) for o in snap.operators
             if o.config.kind == "actor" and o.name in tracks}
    sels = estimates.selectivities(snap, ops, tracks)
    f, factors = 1.0, []
    for sel in sels:
        factors.append(f)
        f *= sel
    for i, o in enumerate(ops):
        tr = tracks[o.name]
        key = key_of(o.config)
        est = estimates.rate(tr, o, key, settings)
        rate_out, source = est.rows_per_s, est.source
        if (rate_out is None or tr.settling_at is not None) and not starved(tr) \
                and not stuck(tr, o, snap.time_s, settings):
            return Planning(None, rates, f"observing: no finished task of {o.name} in its current configuration yet")
        replicas = _replicas(o)
        device = CPU if o.config.num_gpus <= 0 else (o.config.accelerator_type if per_type else ANY_GPU)
        lo, hi = o.config.min_replicas, o.config.max_replicas
        kept = False  # whether lo is raised to what runs now
        if rate_out is None:
            missing.append(o.name)
        if rate_out is None:
            rate_in, lo, hi = UNKNOWN_RATE, replicas, replicas  # held as it is: no evidence to move it
        else:
            rate_in = rate_out / sels[i]
            if o.config.replicas is None:  # an uncapped task operator takes the CPUs it needs, no more
                lo, hi = 1, None
            elif _backlogged(o) and (source == "stall bound" or (source == "busy time" and not tr.regime_start_s)):
                # Ray's rule would keep it: a first estimate or a bound does not shrink it
                lo, kept = max(lo or 0, replicas), replicas > (lo or 0)
        if estimates.input_taken(snap, o):
            cap = max(replicas, lo or 0)  # more replicas would idle
            hi = cap if hi is None else min(hi, cap)
        rates[o.name] = Estimate(rate_in, source, est.history)
        heap = heaps.get(o.name, 0.0) or (estimates.unmeasured_heap(o, snap, heaps, settings.memory_margin)
                                          if o.config.kind == "actor" else 0.0)
        # unpinned: an option per type it was measured on, split as it runs now; planned on one
        # type (which of its actors Ray removes cannot be chosen, so a split cannot be steered)
        if per_type and o.name in seen:
            options = [DeviceOption(device=t, rate_rows_per_s=(r / sels[i] if rate_out is not None else rate_in),
                                    cpus=o.config.num_cpus, gpus=o.config.num_gpus, memory_bytes=int(heap))
                       for t, r in sorted(seen[o.name].items())]
            if rate_out is not None:
                options += unmeasured_options(options, typed, upside)
            current.update({(o.name, t): n for t, n in _split(o, replicas, seen[o.name]).items()})
        else:
            options = [DeviceOption(device=device, rate_rows_per_s=rate_in, cpus=o.config.num_cpus,
                                    gpus=o.config.num_gpus, memory_bytes=int(heap))]
            if per_type and device != CPU and rate_out is not None:
                options += _typed_options(tr, o, key, typed, device, sels[i], settings, heap)
                options += unmeasured_options(options, typed, upside)
            current[(o.name, device)] = replicas
        if kept and per_type and o.config.kind == "actor":
            # a pool Ray spread over two types is planned on one: it keeps at most what one holds
            # (two-types: Detect's 3 on A + 2 on B kept at 5 where one type holds 4 made every
            # plan infeasible for 12 s)
            lo = max(o.config.min_replicas or 0, min(lo, nodes_of.one_device_most(options, nodes)))
        specs.append(OperatorSpec(name=o.name, options=tuple(options), selectivity=sels[i],
                                  min_replicas=lo, max_replicas=hi,
                                  cold_start_s=estimates.cold_start_s(tr, o, settings),
                                  single_device=o.config.kind == "actor"))
    if len(missing) == len(ops):
        return Planning(None, rates, f"observing: no throughput measured yet for {', '.join(missing)}")
    specs, held = along_the_shift(specs, ops, tracks, rates)
    specs = no_growth_beside_bounds(specs, ops, rates)
    demands = None
    if settings.plan_work_left:
        capacity = [sp.options[0].rate_rows_per_s * _replicas(o) for sp, o in zip(specs, ops)]
        demands = work_left(snap, ops, sels, tracks, capacity=capacity, cold_start_s=[sp.cold_start_s for sp in specs])
    if demands is not None:
        specs, factors = [replace(sp, demand=d) for sp, d in zip(specs, demands)], demands
    specs = bound_held(specs, factors, slots=cluster.cpus + cluster.gpus)
    limit = memory_limit_bytes if memory_limit_bytes is not None else cluster.memory_limit_bytes
    specs, released = memory_first(specs, ops, limit)
    problem = PlacementProblem(operators=tuple(specs), node_types=tuple(nodes),
                               current=Allocation.of(nodes_of.on_nodes(current, specs, nodes)),
                               memory_limit_bytes=limit, cpus_limit=cluster.cpus, gpus_limit=cluster.gpus,
                               horizon_s=settings.horizon_s, hysteresis=settings.hysteresis,
                               time_limit_s=settings.solver_time_limit_s,
                               bin_packing=0 < len(cluster.nodes) <= settings.bin_packing_max_nodes)
    left_s = remaining_s(snap, problem, tracks)
    if left_s is not None:  # a cold start is amortised over the work left, at most the horizon
        problem = replace(problem, horizon_s=max(min(settings.horizon_s, left_s), 1.0))
    return Planning(problem, rates, per_type=per_type, held=held + released)


def along_the_shift(specs: list[OperatorSpec], ops: list[OperatorSnapshot], tracks: dict[str, OperatorTrack],
                    rates: dict[str, Estimate]) -> tuple[list[OperatorSpec], tuple[str, ...]]:
    """Until an actor pool's rate after a regime change is measured (``min_rate_windows`` windows),
    its estimate blends rows of both regimes, so it errs toward the old rate: a pool that got
    slower is at most as fast as its estimate, one that got faster at least as fast. A plan then
    moves it only the way its data changed: one that got slower keeps at least its replicas, one
    that got faster at most. On long-shift's second shift Embed's rows turned 4x dearer and its
    estimate read 49.4, 22.6, then 12.4 rows/s per replica; a plan on 22.6 moved one of its six
    replicas back to Detect, and the next plan took it back. Task operators are left free: their
    caps make room for the pools. Returns the specs and, per pool held, why."""
    out, held = [], []
    for sp, o in zip(specs, ops):
        shift, est = tracks[o.name].shift, rates.get(o.name)
        if (shift is None or est is None or est.source in ("measured", "none")
                or o.config.kind != "actor"):  # "none": held as it is already (no evidence to move it)
            out.append(sp)
            continue
        now = _replicas(o)
        if shift < 1.0:
            lo = max(sp.min_replicas, now if sp.max_replicas is None else min(now, sp.max_replicas))
            sp, why = replace(sp, min_replicas=lo), f"at least {lo} replicas: it got slower"
        else:
            hi = max(sp.min_replicas, now if sp.max_replicas is None else min(now, sp.max_replicas))
            sp, why = replace(sp, max_replicas=hi), f"at most {hi} replicas: it got faster"
        held.append(f"{o.name} held to {why}; its rate since the change ({est.rows_per_s:.3g} rows/s per replica, "
                    f"{est.source}) is not measured yet")
        out.append(sp)
    return out, tuple(held)


def memory_first(specs: list[OperatorSpec], ops: list[OperatorSnapshot],
                 limit_bytes: int | None) -> tuple[list[OperatorSpec], tuple[str, ...]]:
    """Floors raised above the user's minimum (a pool kept at what it runs while its data got
    slower or its rate is a first estimate) yield to a memory limit they would break: the pools'
    floors at their heap over the limit make every plan infeasible, and the allocation over it
    would be kept (the PDF demo under a 2.75 GiB cgroup: OCR held at 2 once scanned pages made
    it slower and its heap 750 MiB). Returns the specs and a note."""
    if limit_bytes is None:
        return specs, ()
    floor = sum(sp.min_replicas * min(opt.memory_bytes for opt in sp.options) for sp in specs)
    if floor <= limit_bytes:
        return specs, ()
    out, freed = [], []
    for sp, o in zip(specs, ops):
        least = o.config.min_replicas or 0
        if o.config.kind == "actor" and sp.min_replicas > least:
            out.append(replace(sp, min_replicas=least))
            freed.append(f"{o.name} {sp.min_replicas} -> {least}")
        else:
            out.append(sp)
    if not freed:
        return specs, ()
    return out, (f"floors released ({', '.join(freed)}): at their heap they need {floor / 2**20:.0f} MiB, over "
                 f"the {limit_bytes / 2**20:.0f} MiB the memory limit leaves the pools",)


def no_growth_beside_bounds(specs: list[OperatorSpec], ops: list[OperatorSnapshot],
                            rates: dict[str, Estimate]) -> list[OperatorSpec]:
    """While an operator's rate is only a stall's bound (an upper bound: it is at most that fast),
    no other operator grows: what they need is sized on a throughput the bounded one may never
    reach. Replayed on the PDF benchmark, a plan on OCR's bound (1.1 rows/s per replica, 0.08 in
    truth) started a second embed replica in the memory OCR's fifth needed, and took it back
    4 s later."""
    if not any(e.source == "stall bound" for e in rates.values()):
        return specs
    out = []
    for sp, o in zip(specs, ops):
        if rates.get(o.name, Estimate(None, "")).source != "stall bound" and o.config.replicas is not None:
            hi = _replicas(o) if sp.max_replicas is None else min(sp.max_replicas, _replicas(o))
            sp = replace(sp, min_replicas=min(sp.min_replicas, hi), max_replicas=hi)
        out.append(sp)
    return out


@dataclass(frozen=True)
class TypedView:
    """What is known of the GPU pools' speeds per accelerator type."""

    seen: dict[str, dict[str, float]]
    """Each unpinned GPU pool's rate (rows out per busy replica-second) on each type it was measured on."""
    per_type: bool
    """Whether pools are planned per type: every GPU pool pinned, or measured on every type it
    holds actors on with none pending, and some pool materially faster on one type than another."""
    upside: float
    """How much faster a pool may be on a type it never ran on: the largest ratio measured
    between two types."""


def typed_view(snap: Snapshot, ops: list[OperatorSnapshot], tracks: dict[str, OperatorTrack],
               settings: TridentSettings) -> TypedView:
    typed = {t for t, g in snap.cluster.gpus_by_type if g > 0}
    gpu_ops = [o for o in ops if o.config.num_gpus > 0]
    # an unpinned pool's rate on each type its actors ran on; planned per type once every
    # type it holds actors on is measured and none of its actors is pending: Ray may yet place
    # one on a type the pool never ran on, and a pin now would retire it before its first task
    seen = {o.name: estimates.typed_rates(tracks[o.name], key_of(o.config), settings.min_busy_s)
            or _one_type_rate(tracks[o.name], o, settings) or _backpressured_rates(tracks[o.name], o, settings)
            for o in gpu_ops if o.config.accelerator_type is None}
    # ... and only where some pool is materially faster on one type than another: between
    # types of equal speed a per-type plan only pins pools where the noise put them
    # (a pool pinned to a type counts too: its rate there beside its rates unpinned on the others)
    pinned = [_pinned_rates(tracks[o.name], o, settings) for o in gpu_ops if o.config.accelerator_type is not None]
    differs = any(len(r) >= 2 and max(r.values()) >= TYPE_SPEEDUP * min(r.values())
                  for r in [*seen.values(), *pinned])
    upside = max((max(r.values()) / min(r.values()) for r in seen.values() if len(r) >= 2 and min(r.values()) > 0),
                 default=1.0)
    per_type = bool(typed) and all(o.config.accelerator_type in typed
                                   or (differs and seen.get(o.name) and not o.actors_pending
                                       and {u.accelerator_type for u in o.by_type if u.actors} <= set(seen[o.name]))
                                   for o in gpu_ops)
    return TypedView(seen, per_type, upside)


def _one_type_rate(tr: OperatorTrack, o: OperatorSnapshot, settings: TridentSettings) -> dict[str, float]:
    """An unpinned pool whose actors all run on one type, where no per-type rate was read (its
    output backpressured): its rate is that type's. Read as unknown, it kept every pool from being
    planned per type (seed 194: a pool 6x faster on B than on A ran on both for 250 s beside two
    backpressured pools on B alone)."""
    live = {u.accelerator_type for u in o.by_type if u.actors}
    if len(live) != 1:
        return {}
    est = estimates.rate(tr, o, key_of(o.config), settings)
    return {live.pop(): est.rows_per_s} if est.rows_per_s else {}


def _backpressured_rates(tr: OperatorTrack, o: OperatorSnapshot, settings: TridentSettings) -> dict[str, float]:
    """A pool backpressured while it runs on several types, whose rates per type
    (:func:`estimates.typed_rates`) leave its backpressured snapshots out and so are never read:
    its finished tasks per busy second on each type since its types last changed, scaled so that
    their busy-weighted mean is its pooled rate. The output waits as long on every type, so the
    ratios between types are if anything smaller than they are. Unread, they kept every pool from
    being planned per type (seed 175 of the generated scenarios: op1, 6x faster on C than on A,
    backpressured by op2 on both for the rest of the run)."""
    if not o.backpressured:
        return {}
    key = key_of(o.config)
    snaps = typed_snaps(tr, key)
    if len(snaps) < 2:
        return {}
    snaps = same_types_since(snaps, through_backpressure=True)
    live = {u.accelerator_type for u in snaps[-1].by_type if u.actors}
    per = {t: (n, busy) for t, (n, busy) in type_deltas(snaps[0], snaps[-1]).items()
           if t in live and n >= estimates.MIN_TYPED_TASKS and busy >= settings.min_busy_s}
    pooled = estimates.rate(tr, o, key, settings).rows_per_s
    if len(per) < 2 or set(per) != live or not pooled:
        return {}
    mean = sum(n for n, _ in per.values()) / sum(b for _, b in per.values())
    return {t: pooled * (n / b) / mean for t, (n, b) in per.items()}


def _pinned_rates(tr: OperatorTrack, o: OperatorSnapshot, settings: TridentSettings) -> dict[str, float]:
    """A pinned pool's rate windows' median on its type, beside its rates on the types it ran on
    unpinned in this regime (seed 152: a pool 2x faster on C, explored on A, stayed there for good
    when no unpinned pool differed by type and the planner planned on any GPU)."""
    c = o.config
    out = estimates.typed_rates(tr, ConfigKey(c.batch_size, ANY_GPU, c.num_gpus), settings.min_busy_s)
    measured = tr.measured(key_of(c))
    if measured:
        out[c.accelerator_type] = statistics.median(measured)
    return out


def work_left(snap: Snapshot, ops: list[OperatorSnapshot], sels: list[float], tracks: dict[str, OperatorTrack], *,
              capacity: list[float], cold_start_s: list[float]) -> list[float] | None:
    """Each operator's demand (rows into it per row into the first) for the work it has left:
    its selectivity factor times the pipeline rows it has still to finish over the most any
    operator has left (at least ``WORK_LEFT_FLOOR`` of it). Without queues between the operators
    every one has the same rows left and the demands are the selectivity factors. With one, the
    plan is for the time to finish all of it: sized for the rates alone, regime-shift's Embed
    kept 2 of 8 slots with 2,860 rows queued before it and 2,600 left at Detect, and finished
    10 s after Detect (Ray's fixed 4 + 4 was 9% faster there).

    ``None`` when the pipeline's rows are not known, or when no operator's queue (the rows it has
    left beyond those of the operator before it) lasts longer than its cold start at its
    ``capacity`` (input rows/s): a new replica would come up when the queue is gone (near the end
    of a run a queue of a few blocks is a large share of the work left)."""
    left = estimates.rows_left(snap, ops, tracks)
    if left is None:
        return None
    factors = [math.prod(sels[:i]) for i in range(len(sels))]
    most = max(left)
    queue_s = [(rows - before) * factor / cap if cap > 0 else 0.0
               for rows, before, factor, cap in zip(left[1:], left, factors[1:], capacity[1:])]
    if most <= 0 or not any(q > c for q, c in zip(queue_s, cold_start_s[1:])):
        return None
    return [factor * max(rows / most, WORK_LEFT_FLOOR) for factor, rows in zip(factors, left)]


def _replicas(o: OperatorSnapshot) -> int:
    """Replicas ``o`` has now (a task operator without a cap: its running tasks, at least one)."""
    return o.config.replicas if o.config.replicas is not None else max(o.tasks_running, 1)


def _backlogged(o: OperatorSnapshot) -> bool:
    """An actor pool whose input waits while every running slot is busy: Ray's rule never
    shrinks it, nor does a plan on its first busy-time estimate in its first regime. A plan on
    the first tasks' busy time drained OCR from 4 replicas (3 starting) to 1 on the PDF
    benchmark to give their memory to Embed; OCR's first pages were fast, the next ones 50x
    slower, and it took 40 s to grow back. After a detected change the estimate rests on the
    windows that showed it: there the floor held long-shift's Detect at 6 replicas for ~8 s at
    one shift, until its new rate was measured. Nor does a plan on a stall's bound (an upper
    bound on the rate, not a measure of it): on PDF a plan 7.6 s in drained an OCR replica on
    a bound of 3.8 rows/s per replica where the scanned pages ran at 0.08.

    Not a pool whose output is backpressured: its slots are full because its downstream does
    not take what it makes, so it is not the pipeline's bottleneck whatever its true rate. On
    long-shift the floor held Detect at 6 replicas, backpressured by the object store budget,
    for 14 s while Embed, the bottleneck, waited for their GPUs."""
    slots = max(1, o.config.max_concurrency) * max(o.actors_running, 1)
    return (o.config.kind == "actor" and o.input_queue_blocks > 0 and o.tasks_in_flight >= slots
            and not o.backpressured)


def _split(o: OperatorSnapshot, replicas: int, measured: dict[str, float]) -> dict[str, int]:
    """An unpinned pool's replicas per accelerator type: its running actors where they run, the
    rest (pending) on the type holding most of them."""
    out = {u.accelerator_type: u.actors for u in o.by_type if u.actors and u.accelerator_type in measured}
    most = max(out, key=lambda t: (out[t], t)) if out else min(measured)
    out[most] = out.get(most, 0) + max(replicas - sum(out.values()), 0)
    return out


def _typed_options(tr: OperatorTrack, o: OperatorSnapshot, key: ConfigKey, typed: dict[str, float], device: str,
                   selectivity: float, settings: TridentSettings, heap: float) -> list[DeviceOption]:
    """The operator's rate on each other accelerator type it was measured on: pinned there, else
    where its actors ran while it was unpinned in this regime (seed 86 of the generated scenarios:
    a pool measured 6x faster on A than on B while unpinned, then pinned to A, was planned with
    every other type at its rate on A four seconds later, and moved to B for the rest of the run).
    A replica's heap there is as measured there, else ``heap`` (as where it runs now)."""
    out = []
    unpinned = estimates.typed_rates(tr, ConfigKey(key.batch_size, ANY_GPU, key.num_gpus), settings.min_busy_s)
    for t in typed:
        alt = ConfigKey(key.batch_size, t, key.num_gpus)
        if t == device or not (t in unpinned or any(r.key == alt for r in tr.rates)):
            continue
        alt_rate = estimates.rate(tr, o, alt, settings).rows_per_s or unpinned.get(t)
        if alt_rate:
            out.append(DeviceOption(device=t, rate_rows_per_s=alt_rate / selectivity,
                                    cpus=o.config.num_cpus, gpus=o.config.num_gpus,
                                    memory_bytes=int(estimates.heap(tr, alt, settings) or heap)))
    return out


def unmeasured_options(options: list[DeviceOption], typed: dict[str, float],
                       upside: float = 1.0) -> list[DeviceOption]:
    """An option on each accelerator type a GPU pool was not measured on, at its slowest measured
    rate (a neutral prior: user code names no type, so nothing says it is slower there), with
    ``upside`` (the largest speed difference between types measured on any pool: the plan keeps
    headroom around it, :mod:`trident.core.plan.headroom`). Without
    it a pool whose actors all landed on one type could never be planned onto another: on the
    two-types scenario Embed ran only on B and Detect, 4x faster on B, was pinned there too; the
    plan then held both on B's four GPU slots, with A's four idle, for 440 s (0.44x Ray). Once
    the pool runs there, its measured rate replaces the prior."""
    have = {o.device for o in options}
    if not options or CPU in have or ANY_GPU in have:
        return []
    slowest = min(options, key=lambda o: o.rate_rows_per_s)
    return [replace(slowest, device=t, upside=max(upside, 1.0)) for t in typed if t not in have]


def bound_held(specs: list[OperatorSpec], factors: list[float], *, slots: float) -> list[OperatorSpec]:
    """Give each operator held for lack of evidence (rate ``UNKNOWN_RATE``) a finite rate that
    cannot limit the plan: ten times what the measured operators could sustain at their most
    replicas (``slots`` where unbounded). A finite rate keeps the solver's scaling sane."""
    held = [sp.options[0].rate_rows_per_s >= UNKNOWN_RATE for sp in specs]
    reach = [sp.options[0].rate_rows_per_s * (sp.max_replicas or slots) / f
             for sp, f, h in zip(specs, factors, held) if not h]
    if not reach:
        return specs
    t_max = 10 * max(min(reach), 1e-9)
    out = []
    for sp, f, h in zip(specs, factors, held):
        if h:
            rate = t_max * f / max(sp.min_replicas, 1)
            sp = replace(sp, options=tuple(replace(o, rate_rows_per_s=rate) for o in sp.options))
        out.append(sp)
    return out


def remaining_s(snap: Snapshot, problem: PlacementProblem, tracks: dict[str, OperatorTrack]) -> float | None:
    """Seconds of work left at the current plan's modelled throughput (input rows/s)."""
    left = estimates.remaining_rows(snap, tracks)
    t = throughput_of(problem, problem.current) if problem.current else 0.0
    if left is None or t <= 0:
        return None
    return left / t


def targets(ops: list[OperatorSnapshot], alloc: Allocation) -> tuple[OperatorTarget, ...]:
    """The allocation's changes as operator targets (replicas, and accelerator type where it
    moves). An unpinned pool is pinned when the plan puts all its replicas on one type (its
    actors already there stay: the rolling update replaces only those elsewhere), so that its
    new actors cannot take the GPUs another pool is moving to."""
    out = []
    for o in ops:
        if o.config.replicas is None:
            continue
        n = alloc.replicas(o.name)
        devices = [d for d, c in alloc.by_device(o.name).items() if c > 0]
        device = devices[0] if len(devices) == 1 else None
        if device not in (None, CPU, ANY_GPU) and device != o.config.accelerator_type:
            out.append(OperatorTarget(name=o.name, replicas=n, accelerator_type=device))
        elif n != o.config.replicas:
            out.append(OperatorTarget(name=o.name, replicas=n))
    return tuple(out)


def utilisation(problem: PlacementProblem, t: float) -> dict[str, float]:
    """Demand over capacity per operator at throughput ``t`` under the current plan."""
    cur = problem.current.as_dict() if problem.current else {}
    out = {}
    for spec, f in zip(problem.operators, problem.demand_factors()):
        cap = sum(spec.option(d).rate_rows_per_s * c for (o, d, _), c in cur.items() if o == spec.name)
        out[spec.name] = t * f / cap if cap > 0 else math.inf
    return out


def memory_room(problem: PlacementProblem, new: Allocation) -> dict:
    """Memory left under the limit by the current replicas, and what a new replica of each
    operator takes where the new plan puts it (bytes, as the plan estimates them)."""
    if problem.memory_limit_bytes is None or problem.current is None:
        return {}
    specs = {sp.name: sp for sp in problem.operators}
    used = sum(specs[o].option(d).memory_bytes * n for (o, d, _), n in problem.current.as_dict().items())
    each = {}
    for (o, d, _), n in new.as_dict().items():
        if n > 0:
            each[o] = max(each.get(o, 0.0), float(specs[o].option(d).memory_bytes))
    return {"free_memory_bytes": float(problem.memory_limit_bytes - used), "memory_per_replica_bytes": each}


def stuck(tr: OperatorTrack, o: OperatorSnapshot, now: float, settings: TridentSettings) -> bool:
    """Whether actors of ``o`` have waited to start longer than a rolling update's surge waits
    for its first (:func:`~trident.autoscaler.actuation.pending_guard_s`): a plan is not held
    back until they start. A rolling update keeps its old actors until the new ones come up, so
    while one of them waits for room the pool's counters never measure its new configuration;
    on seed 102 of the generated scenarios the planner waited so for 440 s, its last plan's
    mismatch naming the pending actor."""
    return (o.actors_pending > 0 and tr.pending_since_s is not None
            and now - tr.pending_since_s > pending_guard_s(estimates.cold_start_s(tr, o, settings)))


def starved(tr: OperatorTrack, last: int = 10) -> bool:
    """Whether the operator mostly had nothing to run lately: nothing queued, or nothing running
    (a pool waiting to fill a batch). A pool still starting its actors is not starved."""
    recent = list(tr.snaps)[-last:]
    idle = sum((o.input_queue_blocks == 0 or o.tasks_running == 0) and o.actors_pending == 0 for _, o in recent)
    return bool(recent) and idle >= 0.8 * len(recent)


def free_gpus_by_type(snap: Snapshot, ops: list[OperatorSnapshot]) -> dict[str, float]:
    """GPUs of each accelerator type that no pool holds: a pinned pool holds its replicas'
    GPUs on its type, an unpinned one its running actors' GPUs where they run."""
    free = {t: g for t, g in snap.cluster.gpus_by_type}
    for o in ops:
        if o.config.num_gpus <= 0:
            continue
        if o.config.accelerator_type is not None:
            held = {o.config.accelerator_type: used(o)[1]}
        else:
            held = {u.accelerator_type: u.actors * o.config.num_gpus for u in o.by_type}
        for t, g in held.items():
            if t in free:
                free[t] -= g
    return free


def used(o: OperatorSnapshot) -> tuple[float, float]:
    """(CPUs, GPUs) the operator holds now."""
    n = o.config.replicas if o.config.replicas is not None else o.tasks_running
    return n * o.config.num_cpus, n * o.config.num_gpus
