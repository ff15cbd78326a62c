"""What the ``trident`` policy plans with: per-replica rates, heap per replica, cold starts and
the work left, each from the operator's track (pure functions)."""
from __future__ import annotations

import numpy as np

from trident.core.errors import ConfigError
from trident.core.model.features import ConfigFeatures
from trident.core.plan.placement import ANY_GPU, CPU
from trident.autoscaler.policies.trident.records import ConfigKey, Estimate, key_of
from trident.autoscaler.policies.trident.settings import TridentSettings
from trident.autoscaler.policies.trident.track import (OperatorTrack, busy_rate, mostly_starting, same_types_since,
                                                      type_deltas, typed_snaps)
from trident.core.types import ClusterView, OperatorSnapshot, Snapshot


def is_sink(op: OperatorSnapshot) -> bool:
    """A Write operator: it emits one row per block written, not data rows, so the pipeline's
    rate and its remaining work are taken before it."""
    return op.name.split("(")[0].split("->")[-1].startswith("Write")


def input_taken(snap: Snapshot, o: OperatorSnapshot) -> bool:
    """Whether ``o`` has taken all its input: every operator before it completed and none of its
    input waits. More replicas would get no task: the planner caps it at its size, the inner loop
    does not grow it, not even to its floor (at the end of the video and PDF benchmarks Ray Data
    released idle OCR actors and the floor asked for them again, twice per run)."""
    before = [p for p in snap.operators if p.index < o.index]
    return bool(before) and all(p.completed for p in before) and o.input_queue_blocks == 0


MIN_TYPED_TASKS = 4
"""Finished tasks on an accelerator type before the pool's rate there is planned with."""


def typed_rates(tr: OperatorTrack, key: ConfigKey, min_busy_s: float) -> dict[str, float]:
    """Output rows per busy replica-second of an unpinned pool on each accelerator type it has
    actors on now (:attr:`OperatorSnapshot.by_type`): its finished tasks there times its rows per
    task, over its busy time there; every type over the same span, the last stretch since the
    regime began in which each of them had actors and the pool's output was not backpressured. A
    type measured at another time says nothing of its speed: on the long-shift scenario a type
    the pool left in the first phase measured half as fast as the other type in the second, and
    the pool was pinned to one type's GPUs. Nor does a task's time while its output waits on the
    object store budget (each node has its own store): there a pool measured 1.8x faster on one
    type, 1.04-1.11x once its backpressured snapshots were left out, and both pools were pinned
    to one type's four slots each for the rest of the run. Until a type is measured in this run,
    the rates earlier runs measured (:mod:`trident.history`)."""
    measured = _typed_here(tr, key, min_busy_s)
    if not measured and tr.belief is not None and tr.belief.regime is not None:
        return dict(tr.belief.regime.typed)  # nothing measured here yet: what earlier runs measured
    return measured


def _typed_here(tr: OperatorTrack, key: ConfigKey, min_busy_s: float) -> dict[str, float]:
    snaps = typed_snaps(tr, key)
    if len(snaps) < 2 or snaps[-1].backpressured:
        return {}
    snaps = same_types_since(snaps)
    if len(snaps) < 2:
        return {}
    first, last = snaps[0], snaps[-1]
    tasks = last.tasks_finished - first.tasks_finished
    if tasks <= 0:
        return {}
    per_task = (last.rows_out_total - first.rows_out_total) / tasks
    live = {u.accelerator_type for u in last.by_type if u.actors}
    return {t: n * per_task / busy for t, (n, busy) in type_deltas(first, last).items()
            if t in live and n >= MIN_TYPED_TASKS and busy >= min_busy_s and per_task > 0}


def rate(tr: OperatorTrack, op: OperatorSnapshot, key: ConfigKey, settings: TridentSettings) -> Estimate:
    """:func:`own_rate`, leaning on earlier runs while this one has measured less than
    ``min_rate_windows`` windows: the remembered rate alone before any measure, then weighed
    with this run's (:meth:`~trident.core.model.prior.Belief.blend`). A stall's bound and a
    measured median stand alone."""
    own = own_rate(tr, op, key, settings)
    belief = tr.belief
    remembered = belief.rate(tuple(key)) if belief is not None else None
    if remembered is None or own.source in ("measured", "stall bound"):
        return own
    if own.rows_per_s is None:
        return Estimate(remembered, "history", belief.prior.run)
    n = len(tr.measured(key)) or 1
    return Estimate(belief.blend(tuple(key), own.rows_per_s, n), own.source, belief.prior.run)


MEASURED_SOURCES = ("measured", "stall bound", "last window", "busy time", "first windows")
"""The sources of :func:`own_rate` that this run's own finished tasks measured (not a rate per type
read while unpinned, the model's, or none)."""


def own_rate(tr: OperatorTrack, op: OperatorSnapshot, key: ConfigKey, settings: TridentSettings) -> Estimate:
    """Output rows per busy replica-second of ``op`` under ``key`` from this run, and where it came
    from: the median of the configuration's rate windows once there are ``min_rate_windows``, else its
    busy-time rate since the regime began (its last window instead when that is ``shift_ratio``
    off it), else its first windows, else (pinned to a type) its rate there while it was unpinned
    in this regime (:func:`typed_rates`), else the GP model."""
    measured = tr.measured(key)
    if len(measured) >= settings.min_rate_windows:
        return Estimate(float(np.median(measured)), "measured")
    busy = busy_rate(tr, key, settings.min_busy_s)
    if measured and tr.bounded(key):
        return Estimate(float(np.median(measured)), "stall bound")  # a bound under a stall beats the past
    if busy is not None:
        last = measured[-1] if measured else None
        if last is not None and not busy / settings.shift_ratio <= last <= busy * settings.shift_ratio:
            # the busy time since the regime began blends a step that no regime change has ended yet
            # (first try at 2,000 rows: Detect's last window read 62 rows/s per replica after its
            # rows turned 4x dearer, its busy time 133, and the plan sized it on 133)
            return Estimate(last, "last window")
        return Estimate(busy, "busy time")
    if measured:
        return Estimate(float(np.median(measured)), "first windows")
    if key.device not in (CPU, ANY_GPU):  # pinned to a type, not measured pinned yet: as measured there unpinned
        unpinned = _typed_here(tr, ConfigKey(key.batch_size, ANY_GPU, key.num_gpus), settings.min_busy_s)
        if key.device in unpinned:
            return Estimate(unpinned[key.device], "per type")
    if tr.model.is_fitted and key.device in tr.model.encoder.device_types:
        cfg = ConfigFeatures(batch_size=key.batch_size or 1024, device_type=key.device,
                             replicas=max(1, op.config.replicas or op.tasks_running or 1),
                             input_bytes_per_row=op.input_bytes_per_row or 1.0)
        try:
            return Estimate(float(tr.model.predict_throughput([cfg]).mean[0]), "model")
        except ConfigError:
            return Estimate(None, "none")
    return Estimate(None, "none")


def at_start(tr: OperatorTrack, key: ConfigKey, source: str) -> bool:
    """Whether ``key``'s rate from ``source`` (as :func:`rate` gave it) was measured while actors
    of the pipeline started: most of its windows, or its busy time since the regime began."""
    if source in ("measured", "first windows", "last window"):
        return mostly_starting([r for r in tr.rates if r.key == key][-(1 if source == "last window" else 8):])
    if source == "busy time":
        return tr.starting_s is not None and tr.starting_s >= tr.since_s(key)
    return False


def workers_memory(limit_bytes: int | None, cluster: ClusterView) -> int | None:
    """What a memory limit leaves the pipeline's workers (bytes): the limit less what Ray's own
    processes hold beside them on the driver's machine (:attr:`ClusterView.other_memory_bytes`);
    ``None`` without a limit."""
    if limit_bytes is None:
        return None
    return max(limit_bytes - (cluster.other_memory_bytes or 0), 0)


def heap(tr: OperatorTrack, key: ConfigKey, settings: TridentSettings) -> float:
    """Heap bytes per replica to plan with: the largest seen plus the margin, a third of the
    margin once the largest stands on ``stable_heap_samples`` samples (0 when never seen)."""
    seen = tr.heap.get(key)
    if seen is None:
        regime = tr.belief.regime if tr.belief is not None else None
        remembered = regime.heap_of(tuple(key)) if regime is not None else None
        return 0.0 if remembered is None else remembered * (1 + settings.memory_margin)
    margin = settings.memory_margin
    if tr.heap_samples.get(key, 0) >= settings.stable_heap_samples:
        margin /= 3
    return seen * (1 + margin)


def others_heap(ops: list[OperatorSnapshot], name: str, tracks: dict[str, OperatorTrack],
                settings: TridentSettings) -> float:
    """Heap bytes the operators of ``ops`` other than ``name`` hold at their replicas, each at
    :func:`heap` (with its margin)."""
    return sum(heap(tracks[x.name], key_of(x.config), settings) * (x.config.replicas or 0)
               for x in ops if x.name != name and x.name in tracks)


def unmeasured_heap(op: OperatorSnapshot, snap: Snapshot, heap_bytes: dict[str, float], margin: float) -> float:
    """Heap bytes per replica to charge an actor pool whose heap is not measured yet (no task of
    it finished): its reading at rest (the smallest of its actors' before their first task) grown
    as much as the most any measured pool's estimate stands above its own reading at rest, at
    least by ``margin``; without those readings, as much as the largest pool's estimate.

    The largest pool alone overcharges a small pool: on the video benchmark the embed pool,
    whose first task finishes only once a batch of clips is through OCR (30 s), was charged
    OCR's 858 MiB where it holds 654 (647 at rest), and the fifth OCR replica waited 13 s for a
    plan. A reading at rest is a floor, not a bound (PDF's embed holds 16% more with a batch of
    8 texts), hence the growth measured on the other pools."""
    pools = [o for o in snap.operators if o.config.kind == "actor"]
    largest = max((heap_bytes.get(o.name, 0.0) for o in pools), default=0.0)
    growth = [heap_bytes[o.name] / o.heap_rest_per_replica_bytes for o in pools
              if heap_bytes.get(o.name) and o.heap_rest_per_replica_bytes]
    rest = op.heap_rest_per_replica_bytes
    if not rest or not growth:
        return largest
    return rest * max(1.0 + margin, *growth)


def cold_start_s(tr: OperatorTrack, op: OperatorSnapshot, settings: TridentSettings) -> float:
    """Seconds a new replica takes to start (0 for task operators)."""
    if op.config.kind != "actor":
        return 0.0
    if tr.cold_start_s is not None:
        return tr.cold_start_s
    remembered = tr.belief.prior.cold_start_s if tr.belief is not None else None
    return settings.default_cold_start_s if remembered is None else remembered


def selectivities(snap: Snapshot, ops: list[OperatorSnapshot], tracks: dict[str, OperatorTrack]) -> list[float]:
    """Rows out per row in of each of ``ops`` (in pipeline order). The pipeline's source (its first
    task or actor operator) is 1 by definition: the pipeline's rows are the rows it emits
    (``Snapshot.input_rows_total``), whatever Ray counts as its inputs (read tasks, files). Any
    other operator keeps its own, also once the source is done and it comes first among the
    operators left (seed 86 of the generated scenarios: a x3 fan-out read as 1 once the read was
    done put the next pool's demand at a third of what came to it, and no plan grew it)."""
    source = next((o.name for o in snap.operators if o.config.kind in ("task", "actor")), None)
    return [1.0 if o.name == source else max(tracks[o.name].selectivity, 1e-12) for o in ops]


def rows_into(snap: Snapshot, tracks: dict[str, OperatorTrack]) -> dict[str, tuple[float, float]]:
    """Rows into and out of each observed task or actor operator per pipeline row: the products
    of the selectivities before it, and up to it."""
    chain = [o for o in snap.operators if o.config.kind in ("task", "actor") and o.name in tracks]
    out, f = {}, 1.0
    for o, sel in zip(chain, selectivities(snap, chain, tracks)):
        out[o.name] = (f, f * sel)
        f *= sel
    return out


def remaining_rows(snap: Snapshot, tracks: dict[str, OperatorTrack]) -> float | None:
    """Rows still to finish at the operator furthest behind (its rows out counted back to
    pipeline rows through the selectivities up to it; a Write sink, which counts blocks, is left
    out), as rows into the first operator not done: the unit of a plan's throughput (the
    pipeline's rows while the source runs)."""
    ops = [o for o in snap.operators if o.config.kind in ("task", "actor") and o.name in tracks and not is_sink(o)]
    left = rows_left(snap, ops, tracks) if ops else None
    if left is None:
        return None
    first = next((o for o in ops if not o.completed), ops[-1])
    return max(max(left), 0.0) * rows_into(snap, tracks)[first.name][0]


def input_rows_left(snap: Snapshot, tracks: dict[str, OperatorTrack], op: OperatorSnapshot) -> float | None:
    """Rows ``op`` has still to take in; ``None`` when the pipeline's rows are not known."""
    left = rows_left(snap, [op], tracks)
    return None if left is None else max(left[0], 0.0) * rows_into(snap, tracks)[op.name][0]


def rows_left(snap: Snapshot, ops: list[OperatorSnapshot], tracks: dict[str, OperatorTrack]) -> list[float] | None:
    """Pipeline rows each of ``ops`` has still to put out: the pipeline's rows less its rows out
    counted back through the selectivities up to it; ``None`` when the pipeline's rows are not
    known."""
    if snap.input_rows_total is None:
        return None
    per_row = rows_into(snap, tracks)
    return [snap.input_rows_total - o.rows_out_total / per_row[o.name][1] for o in ops]
