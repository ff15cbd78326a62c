"""The batch-size tuner: memory-constrained Bayesian optimisation of the bottleneck's batch size,
once the allocation is settled and a memory limit is known.

A larger batch often cannot be certified safe for every replica from one measured batch (memory
per replica is bounded by the measured value times the batch ratio until a second batch is seen),
so a trial may run fewer replicas - at least half of those the pool may run - at the new
batch: the largest count whose memory bound fits. Replicas scale linearly in the planner's model,
so each measured batch is an observation at every replica count; the optimiser's search is over
batch sizes, and once it converges (or its trials are spent) the pool moves to the best measured
batch at the most replicas it allows. The rolling update starts new replicas before old ones go; when the pool's
GPUs or the memory limit leave no room for that surge, it swaps them (:class:`Trial` ``swap``;
``bo_swap``): old replicas leave half the pool at a time and new ones start in their room, the
pool never above the smaller of the old pool and the trial's, both of which fit the limit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from trident.core.model.features import device_type_of
from trident.core.model.threads import single_threaded
from trident.core.plan.placement import PlacementProblem, throughput_of
from trident.autoscaler.policies.trident import estimates
from trident.autoscaler.policies.trident.inner import gpu_node_cpus
from trident.autoscaler.policies.trident.problem import remaining_s, utilisation
from trident.autoscaler.policies.trident.records import ConfigKey, Estimate, key_of
from trident.autoscaler.policies.trident.settings import TridentSettings
from trident.autoscaler.policies.trident.track import OperatorTrack
from trident.core.types import OperatorSnapshot, OperatorTarget, Snapshot


@dataclass(frozen=True)
class Trial:
    """A batch size to try: the rolling update's target (batch size, replicas), whether old
    replicas are swapped for new ones half the pool at a time (the new ones do not fit beside
    the old ones), and why."""

    target: OperatorTarget
    replicas_from: int
    swap: bool
    reason: str
    replica_bytes: float = 0.0
    """The optimiser's upper bound of one new replica's heap (bytes)."""


def next_batch_size(snap: Snapshot, ops: list[OperatorSnapshot], problem: PlacementProblem,
                    rates: dict[str, Estimate], tracks: dict[str, OperatorTrack], settings: TridentSettings,
                    seed: int, *, free: bool = False) -> Trial | str | None:
    """The bottleneck's next batch size to try (or the best one found, once the search is over);
    why it settles on the current batch size when no further trial pays or trials are spent, or
    why it waits (a settled pool's batch measured while actors started); or ``None``: no limit,
    too little work left, no measured bottleneck to tune, or settled.

    ``free``: the trial's actors start anyway (a scale-up, or a pool still starting), so the
    replica's memory at rest may certify it. A trial of a settled pool costs a rolling update and,
    from one measured batch, its gain rests on the optimiser's prior alone (throughput may grow
    with the batch); it is certified by the batch ratio (on the memory-bound scenario the reading
    at rest certified batch 80 on 2 of Detect's 3 replicas, whose rate does not grow with the
    batch: two swaps for nothing)."""
    limit = problem.memory_limit_bytes
    if settings.bo_trials == 0 or limit is None:
        return None
    left_s = remaining_s(snap, problem, tracks)
    if left_s is not None and left_s < settings.bo_min_remaining_s:
        return None
    util = utilisation(problem, throughput_of(problem, problem.current))
    cands = [o for o in ops if o.config.kind == "actor" and o.config.batch_size and o.config.replicas
             and o.actors_pending == 0 and o.actors_running == o.config.replicas  # the pool is settled
             and rates[o.name].source in ("measured", "busy time") and not tracks[o.name].bo_settled]
    if not cands:
        return None
    o = max(cands, key=lambda c: util.get(c.name, 0.0))
    if util.get(o.name, 0.0) < max(util.values()) - 1e-9:
        return None
    from trident.core.optimize.safe_bo import ModelLoading, SafeBayesOpt
    from trident.core.optimize.space import KnobSpace, Knobs, Observation

    tr = tracks[o.name]
    b, dev = o.config.batch_size, device_type_of(o.config)
    if not free and _warming(tr, key_of(o.config), rates[o.name].source, snap.time_s, settings):
        return f"{o.name}'s batch-size search waits: batch {b}'s rate was measured while actors started"
    others = estimates.others_heap(ops, o.name, tracks, settings)
    if others >= limit or not tr.heap:
        return None
    n_max = most_replicas(snap, o)
    concurrencies = tuple(range(math.ceil(n_max / 2), n_max + 1))
    # larger batches raise throughput until memory runs out; smaller ones measured before stay candidates
    tried = {r.key.batch_size for r in tr.rates if r.key.device == dev and r.key.num_gpus == o.config.num_gpus
             and r.key.batch_size}
    obs = []
    for bb in sorted({b} | tried):
        key = ConfigKey(bb, dev, o.config.num_gpus)
        est = estimates.rate(tr, o, key, settings) if key in tr.heap else None
        if est is not None and est.rows_per_s and est.source != "model":
            obs += [Observation(knobs=Knobs(bb, c, dev), throughput_rows_per_s=est.rows_per_s * c,
                                memory_per_replica_bytes=tr.heap[key]) for c in concurrencies]
    seen = sorted({ob.knobs.batch_size for ob in obs})
    if b not in seen:
        return None
    growth = [b * 2**i for i in range(1, int(math.log2(settings.bo_batch_growth)) + 2)]  # to one step past the trust region
    batches = tuple(sorted(set(seen) | set(growth)))  # a tried batch without a rate is not tried again
    bo = SafeBayesOpt(space=KnobSpace(batch_sizes=batches, concurrencies=concurrencies, device_types=(dev,)),
                      memory_limit_bytes=float(limit), initial=Knobs(b, n_max, dev), seed=seed,
                      fixed_memory_bytes=float(others), rest_memory_bytes=float(o.heap_rest_per_replica_bytes or 0) if free else 0.0,
                      max_batch_growth=settings.bo_batch_growth)
    cost_s = settings.bo_trial_cold_starts * estimates.cold_start_s(tr, o, settings)
    try:
        with single_threaded():
            sug, best = bo.suggest(obs), bo.best(obs)
            why = ""
            if not sug.converged and tr.bo_tried >= settings.bo_trials:
                why = f"{settings.bo_trials} trial(s) spent"
            elif not sug.converged and left_s is not None:
                why = _not_paying(sug, obs, best, left_s, cost_s, float(limit - others),
                                  shape=tr.batch_shape.get((dev, o.config.num_gpus), {}))
            if why:  # no trial: the best safe configuration measured
                sug = replace(sug, knobs=best.knobs if best else sug.knobs, converged=True,
                              reason=f"{why}; the best safe configuration measured")
            bb = sug.knobs.batch_size
            upper = bo.memory_upper_bytes([Knobs(bb, c, dev) for c in concurrencies], obs)
    except ModelLoading as exc:  # a step does not wait on the model loading in another thread
        return f"{o.name}'s batch-size search waits: {exc}"
    if bb == b:
        tr.bo_settled = True  # settled on the current batch size for this regime
        return f"{o.name} stays at batch_size {b}: {why}" if why else None
    c = max((k for k, u in zip(concurrencies, upper) if u <= limit), default=sug.knobs.concurrency)
    left = estimates.input_rows_left(snap, tracks, o)
    if left is not None and left < settings.bo_min_batches * bb * c:
        tr.bo_settled = True
        return (f"{o.name} stays at batch_size {b}: batch {bb} on {c} replica(s) would leave "
                f"{left / (bb * c):.1f} batches per replica of the {left:.0f} rows left (< {settings.bo_min_batches:g})")
    n = o.config.replicas
    if not sug.converged and bb * c <= b * n:
        tr.bo_settled = True
        return (f"{o.name} stays at batch_size {b}: batch {bb} fits {c} replica(s), and on {c} it makes at most "
                f"{bb * c / (b * n):.0%} of what batch {b} makes on {n} (a batch's rows per second grow at most "
                f"as its rows do)")
    if sug.converged:
        tr.bo_settled = True
    else:
        tr.bo_tried += 1
    each = (float(upper[concurrencies.index(c)]) - others) / c  # memory bound of one new replica
    drain_to, surge_c = _room_for(snap, o, c, old_heap=estimates.heap(tr, key_of(o.config), settings),
                                  new_heap=each, free_memory=limit - others)
    swap = drain_to is not None
    if swap and not settings.bo_swap:
        tr.bo_settled = True  # no room for the new batch beside the old one: not tried
        return None
    c = c if swap else surge_c
    what = "best safe" if sug.converged else f"trial {tr.bo_tried}/{settings.bo_trials}"
    reason = (f"tune {o.name} batch_size {b} -> {bb} on {c} replica(s) ({what}): {sug.reason}"
              + ("; no room for new replicas beside the old ones: swapped half the pool at a time" if swap else ""))
    return Trial(OperatorTarget(name=o.name, batch_size=bb, replicas=c), n, swap, reason, replica_bytes=each)


def _warming(tr: OperatorTrack, key: ConfigKey, source: str, now_s: float, settings: TridentSettings) -> bool:
    """Whether the rate of ``key`` (from ``source``) is not yet a warm reading: most of its windows
    were measured while actors started, or (a busy-time rate, since the regime began) an actor
    started within the last rate window. Batches are compared by warm readings: a start's CPU and
    first tasks slow the batch run now (on the batch-size scenario batch 32 read 5.7-9.5 rows/s
    per replica while its eighth actor started, 20 once warm, and batch 8's 9.0 looked better)."""
    if source == "busy time":
        return tr.starting_s is not None and now_s - tr.starting_s < settings.rate_window_s
    return estimates.at_start(tr, key, source)


def _not_paying(sug, obs, best, left_s: float, cost_s: float, free_bytes: float = math.inf, *,
                shape: dict[int, tuple[float, float]] | None = None) -> str:
    """Why a trial would not pay for itself ('' when it would): its own expected gain times the
    work left (seconds) is under its cost, and, for a step that expands the safe set, its goal's
    gain over the work left after the step is under the cost of the step and the goal's trial.
    Each gain is capped at what an affine time and memory per batch predict (see
    :func:`_affine_gain`; ``free_bytes``: the memory limit less the other operators'): on the
    batch-size scenario the optimiser expected batch 64 on 4 replicas to beat 32 on 7 by 36%, the
    line through the measured batches said 0.7x, it measured 0.6x. ``shape``: the last regime's
    batches (see :func:`_affine_gain`)."""
    if best is None:
        return ""
    gain = min(sug.expected_improvement, _affine_gain(obs, sug.knobs, best, free_bytes, shape))
    if gain * left_s >= cost_s:
        return ""
    what = f"batch {sug.knobs.batch_size} x{sug.knobs.concurrency}"
    if sug.goal is not None:
        goal = min(sug.goal_improvement, _affine_gain(obs, sug.goal, best, free_bytes, shape))
        if goal * (left_s - cost_s) >= 2 * cost_s:
            return ""
        what += f" (toward batch {sug.goal.batch_size} x{sug.goal.concurrency}, {goal:+.0%})"
    return (f"a trial of {what} is expected to gain {gain:+.0%} over {left_s:.0f} s left, "
            f"not the {cost_s:.0f} s it costs")


def _affine_gain(obs, knobs, best, free_bytes: float = math.inf,
                 shape: dict[int, tuple[float, float]] | None = None) -> float:
    """Relative gain of ``knobs`` over ``best`` if a batch's time and a replica's memory are affine
    in its rows (a fixed part and a part per row) on the lines through the two largest batches
    measured, at no more replicas than that memory leaves room for in ``free_bytes`` (-1 when not
    one fits); ``inf`` when fewer than two batches are measured. Rates that grow with the batch
    by more are rare, so the cap is optimistic; memory that grows by less is the optimiser's safe
    set's assumption, not the likely case (a goal of batch 256 on 8 replicas was taken as 51%
    better than 32 on 8, where the line through batches 8 and 32 put it at 21 GB of a 5 GB limit).

    With one batch measured and the last regime's ``shape`` (batch -> (seconds per batch, heap
    bytes), two or more batches): that regime's lines, the time scaled to pass through the batch
    measured now and the memory shifted to it (a change of the data scales a batch's cost; on the
    batch-size scenario a false change during a start dropped batch 8's rate, and batch 64 was
    tried on 5 replicas from batch 32's alone: a 35 s swap for 0.95x)."""
    per_replica, memory = {}, {}
    for ob in obs:
        per_replica[ob.knobs.batch_size] = ob.throughput_rows_per_s / ob.knobs.concurrency
        memory[ob.knobs.batch_size] = max(memory.get(ob.knobs.batch_size, 0.0), ob.memory_per_replica_bytes)
    if len(per_replica) >= 2:
        (b1, r1), (b2, r2) = sorted(per_replica.items())[-2:]
        time_at, memory_at = _line(b1, b1 / r1, b2, b2 / r2), _line(b1, memory[b1], b2, memory[b2])
    elif len(per_replica) == 1 and shape and len(shape) >= 2:
        ((b, r),) = per_replica.items()
        (s1, (t1, m1)), (s2, (t2, m2)) = sorted(shape.items())[-2:]
        old_time, old_memory = _line(s1, t1, s2, t2), _line(s1, m1, s2, m2)
        if old_time(b) <= 0:
            return math.inf

        def time_at(x: float) -> float:
            return b / r * old_time(x) / old_time(b)

        def memory_at(x: float) -> float:
            return memory[b] + max(old_memory(x) - old_memory(b), 0.0)
    else:
        return math.inf
    t, m = time_at(knobs.batch_size), memory_at(knobs.batch_size)
    replicas = knobs.concurrency if m <= 0 or math.isinf(free_bytes) else min(knobs.concurrency, math.floor(free_bytes / m))
    if replicas < 1:
        return -1.0
    return knobs.batch_size / t * replicas / best.throughput_rows_per_s - 1


def _line(x1: float, y1: float, x2: float, y2: float):
    """The line through (x1, y1) and (x2, y2), its slope at least 0, as a function of x."""
    slope = max((y2 - y1) / (x2 - x1), 0.0)
    return lambda x: y2 + slope * (x - x2)


def most_replicas(snap: Snapshot, o: OperatorSnapshot) -> int:
    """Replicas the pool may run: its maximum, and no more than the GPUs the other pools leave, nor
    the CPUs they leave on the GPU nodes (where the nodes are known; its type's when pinned). Seed
    142 of the generated scenarios: 6 CPUs on the GPU nodes for four pools; the batch search sized
    a larger batch's trial for 7-13 replicas of a pool that could hold 3, found none of them safe
    under the memory limit, and never tried one."""
    hi = o.config.max_replicas or max(o.config.replicas or 1, 1)
    if o.config.num_gpus > 0:
        others = sum((x.config.replicas or 0) * x.config.num_gpus for x in snap.operators
                     if x.name != o.name and x.config.kind == "actor")
        hi = min(hi, math.floor((snap.cluster.gpus - others) / o.config.num_gpus + 1e-9))
        cpus = gpu_node_cpus(snap, {o.name: 0})
        if cpus is not None and o.config.num_cpus > 0:
            left = cpus.get(o.config.accelerator_type, cpus[None])
            hi = min(hi, math.floor(left / o.config.num_cpus + 1e-9))
    return max(hi, o.config.min_replicas, 1)


def _room_for(snap: Snapshot, o: OperatorSnapshot, new: int, *, old_heap: float, new_heap: float,
              free_memory: float) -> tuple[int | None, int]:
    """Old replicas ``o`` may keep while new replicas of the new batch start (``None`` when all
    may stay), and how many new ones start: what the GPUs left by the other operators and the
    memory allow. The pool keeps at least its minimum (Ray Data never runs a pool below it);
    fewer new replicas start when that minimum leaves no room for all ``new``."""
    n = o.config.replicas or 0
    most = most_replicas(snap, o)
    keep = min(n, most - new)
    if old_heap > 0:
        keep = min(keep, math.floor((free_memory - new * new_heap) / old_heap))
    if keep < o.config.min_replicas:
        keep = min(o.config.min_replicas, n)
        fits = math.floor((free_memory - keep * old_heap) / new_heap) if new_heap > 0 else new
        new = max(1, min(new, most - keep, fits))
    return (None if keep >= n else max(keep, 0)), new
