"""What the ``trident`` policy keeps of one operator (:class:`OperatorTrack`), and the rates and
counts read from it: busy-time rates, finished tasks, the batch shape of its tasks."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from trident.core.detect.changepoint import ChangeDetector
from trident.core.model.prior import Belief
from trident.core.model.gp import OperatorModel
from trident.core.model.regimes import RegimeStore
from trident.autoscaler.policies.trident.records import ConfigKey, Counters, OldActorsSpan, RateSample, Stall, key_of
from trident.core.types import OperatorSnapshot


@dataclass
class OperatorTrack:
    """What the policy knows about one operator."""

    name: str
    model: OperatorModel
    regimes: RegimeStore
    rate_detector: ChangeDetector
    size_detector: ChangeDetector
    snaps: deque = field(default_factory=deque)
    """(time_s, OperatorSnapshot) of the current regime, the newest last."""
    rates: list[RateSample] = field(default_factory=list)
    heap: dict[ConfigKey, float] = field(default_factory=dict)
    """Largest heap bytes per replica seen, per configuration."""
    heap_samples: dict[ConfigKey, int] = field(default_factory=dict)
    key: ConfigKey | None = None
    window: Counters | None = None
    pending_since_s: float | None = None
    """When actors of the pool last began to be pending (``None``: none pending)."""
    running_before: int | None = None
    """Its actors running when they did; ``None`` once that wait gave its cold start sample."""
    cold_start_s: float | None = None
    regime_start_s: float = 0.0
    fitted_at_s: float | None = None
    needs_fit: bool = False
    matched: bool = False
    placed_from_s: float = 0.0
    """When its actors last moved between accelerator types (:func:`.shifts.replaced`): its rate
    detector started afresh there."""
    bo_tried: int = 0
    bo_settled: bool = False
    """The batch-size search is over for this regime (converged, or moved to the best found)."""
    batch_shape: dict[tuple[str, float], dict[int, tuple[float, float]]] = field(default_factory=dict)
    """Per (device, GPUs per replica): batch size -> (seconds per batch, heap bytes per replica)
    in the last regime that measured two or more batch sizes there (the search's prior on how a
    batch's time and memory grow, while a new regime has measured one batch size)."""
    selectivity: float = 1.0
    shifting: list[tuple[float, float]] = field(default_factory=list)
    """(time_s, rows/s) of consecutive windows off the median."""
    shift: float | None = None
    """The last regime change's rate after over its rate before (rows/s per replica; above 1 the
    operator got faster); ``None`` before any change."""
    stall: Stall | None = None
    settling_at: int | None = None
    """While a reconfiguration settles: the operator's finished tasks (rows out, where tasks are
    not counted) when it last had old actors; ``None`` once a task of the new configuration
    has finished after them."""
    measured_from_s: dict[ConfigKey, float] = field(default_factory=dict)
    """When each configuration's measurements began (after its reconfiguration settled)."""
    starting_s: float | None = None
    """The last time an actor of the pipeline was seen starting (pending, or up and not yet
    through a first task)."""
    actors_up: int = 0
    """Running actors at the last snapshot."""
    warm_at: int = 0
    """Finished tasks (:func:`_progress`) at which the actors that came up last have each had
    time for a first task."""
    left: OldActorsSpan | None = None
    """While a rolling update's new actors are not up: the configuration left and what its old
    actors did since (:meth:`Observer._old_actors_at_work`)."""
    belief: Belief | None = None
    """What earlier runs taught of the operator, as far as this run's windows agree with it."""
    first_checked: set[ConfigKey] = field(default_factory=set)
    """Configurations whose first tasks were held against the history (:meth:`Observer._first_tasks`)."""

    def measured(self, key: ConfigKey, last: int = 8) -> list[float]:
        return [r.rows_per_s for r in self.rates if r.key == key][-last:]

    def bounded(self, key: ConfigKey) -> bool:
        """Whether the configuration's rate rests on a stall's bound: in a stall that ended its
        regime, or with no sample in the regime but the bound (a task that ends such a stall may
        be the old regime's straggler, and the bound stays an upper bound)."""
        if self.stall is not None and self.stall.bound_time_s is not None:
            return True
        samples = [r for r in self.rates if r.key == key]
        return bool(samples) and all(r.bound for r in samples)

    def since_s(self, key: ConfigKey) -> float:
        """Snapshots from this time on measure ``key``: the regime's, from the settling of its
        reconfiguration on."""
        return max(self.regime_start_s, self.measured_from_s.get(key, self.regime_start_s))


def batch_shape(tr: OperatorTrack, *, before_s: float) -> dict[tuple[str, float], dict[int, tuple[float, float]]]:
    """Per (device, GPUs per replica) with two or more batch sizes measured before ``before_s``:
    batch size -> (seconds per batch at the median rate measured, largest heap seen, bytes)."""
    rates: dict[ConfigKey, list[float]] = {}
    for r in tr.rates:
        if r.time_s < before_s and not r.bound and r.key.batch_size and r.rows_per_s > 0:
            rates.setdefault(r.key, []).append(r.rows_per_s)
    out: dict[tuple[str, float], dict[int, tuple[float, float]]] = {}
    for key, vals in rates.items():
        out.setdefault((key.device, key.num_gpus), {})[key.batch_size] = (
            key.batch_size / float(np.median(vals)), tr.heap.get(key, 0.0))
    return {k: v for k, v in out.items() if len(v) >= 2}


def busy_of(op: OperatorSnapshot) -> float | None:
    """Replica-seconds of ``op``'s finished tasks to plan with: a task operator's slot time
    (its per-task overheads hold the slot too), an actor's busy time."""
    return op.slot_s if op.config.kind == "task" and op.slot_s is not None else op.busy_s


def keep_busy_rate(tr: OperatorTrack, key: ConfigKey, t: float, min_busy_s: float) -> None:
    """A configuration left before any rate window measured it keeps its busy-time rate as one
    (its snapshots leave the history; the batch-size search would forget it was measured: on the
    batch-size scenario batch 8, left after its first task for a trial of 32, was lost, and the
    search later tried 64 as if 32 were the only batch seen)."""
    if not tr.measured(key):
        rate = busy_rate(tr, key, min_busy_s)
        if rate is not None:
            tr.rates.append(RateSample(t, key, rate))


def counters(op: OperatorSnapshot, t: float) -> Counters:
    return Counters(t, op.rows_out_total, busy_of(op), op.rows_in_total, op.bytes_in_total, progress(op))


def busy_rate(tr: OperatorTrack, key: ConfigKey, min_busy_s: float) -> float | None:
    """Output rows per busy replica-second of ``key`` since the regime began (from the first
    finished tasks on), or ``None`` with less than ``min_busy_s`` of busy time."""
    snaps = [o for t, o in tr.snaps if t >= tr.since_s(key) and key_of(o.config) == key and busy_of(o) is not None]
    if len(snaps) < 2:
        return None
    first, last = snaps[0], snaps[-1]
    busy = busy_of(last) - busy_of(first)
    if first.rows_out_total == 0 and busy_of(first) == 0:  # the regime began with the execution
        busy = busy_of(last)
    rows = last.rows_out_total - first.rows_out_total
    if busy < min_busy_s or rows <= 0:
        return None
    return rows / busy


def tasks_since(tr: OperatorTrack, key: ConfigKey) -> int:
    """Tasks of ``key`` finished since the regime began."""
    snaps = [o for t, o in tr.snaps if t >= tr.since_s(key) and key_of(o.config) == key]
    return snaps[-1].tasks_finished - snaps[0].tasks_finished if snaps else 0


def mostly_starting(samples: list[RateSample]) -> bool:
    """Whether most of ``samples`` were measured while actors of the pipeline started."""
    return 2 * sum(r.starting for r in samples) > len(samples)


def progress(op: OperatorSnapshot) -> int:
    """Finished tasks, or rows out where tasks are not counted (the fluid simulator)."""
    return op.tasks_finished or op.rows_out_total


def far_off(rate: float, ref: float, steady: list[float], ratio: float) -> bool:
    """Whether ``rate`` is at least ``ratio`` off ``ref`` and three times further off (in log
    terms) than any of the ``steady`` windows (rates of noisy data need a larger step)."""
    off = abs(np.log(rate / ref))
    spread = max((abs(np.log(r / ref)) for r in steady if r > 0), default=0.0)
    return off >= max(np.log(ratio), 3.0 * spread)


def typed_snaps(tr: OperatorTrack, key: ConfigKey) -> list[OperatorSnapshot]:
    """The snapshots of ``key`` in the regime that carry a pool's work per accelerator type."""
    return [o for t, o in tr.snaps if t >= tr.since_s(key) and key_of(o.config) == key and o.by_type]


def same_types_since(snaps: list[OperatorSnapshot], *, through_backpressure: bool = False) -> list[OperatorSnapshot]:
    """The last stretch of ``snaps`` in which every type the pool has actors on at the end had
    actors (and, unless ``through_backpressure``, its output was not backpressured)."""
    live = {u.accelerator_type for u in snaps[-1].by_type if u.actors}
    start = len(snaps) - 1
    while (start > 0 and (through_backpressure or not snaps[start - 1].backpressured)
           and live <= {u.accelerator_type for u in snaps[start - 1].by_type if u.actors}):
        start -= 1
    return snaps[start:]


def type_deltas(a: OperatorSnapshot, b: OperatorSnapshot) -> dict[str, tuple[int, float]]:
    """Per accelerator type ``b`` has: (tasks finished, busy seconds) from ``a`` to ``b``."""
    was = {u.accelerator_type: u for u in a.by_type}
    out = {}
    for u in b.by_type:
        p = was.get(u.accelerator_type)
        out[u.accelerator_type] = (u.tasks_finished - (p.tasks_finished if p else 0),
                                   u.busy_s - (p.busy_s if p else 0.0))
    return out
