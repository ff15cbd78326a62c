"""What one execution taught of each operator, read from its snapshots and decisions alone (any
policy's run teaches, stock Ray's included). Pure: no Ray, no clock.

Per operator and regime (the policy's regime changes split a run): rows out per busy
replica-second in windows of ``window_s`` per configuration, measured only while no old actors
of a rolling update work; the rate per accelerator type from the pool's typed counters; the
largest heap per replica per configuration; input bytes per row. Per operator: the shortest
cold start (an actor pending to none pending) and rows out per row in.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from trident.core.model.features import device_type_of
from trident.core.types import Decision, OperatorSnapshot, Snapshot
from trident.core.model.prior import Config, OperatorPrior, RegimePrior

MIN_TYPED_TASKS = 4
"""Finished tasks on an accelerator type before its rate there is kept."""
MIN_TASKS_FOR_SELECTIVITY = 4
SPLIT_RATIO = 1.5
"""Windows whose medians before and after a point differ this much make two regimes."""


def config_of(op: OperatorSnapshot) -> Config:
    return (op.config.batch_size, device_type_of(op.config), float(op.config.num_gpus))


@dataclass
class _Regime:
    windows: dict[Config, list[float]] = field(default_factory=dict)
    heap: dict[Config, float] = field(default_factory=dict)
    first: OperatorSnapshot | None = None
    last: OperatorSnapshot | None = None

    def frozen(self) -> list[RegimePrior]:
        """The regime as the next run remembers it: two when its one configuration's windows
        stepped (:func:`levels`)."""
        rows = (self.last.rows_in_total - self.first.rows_in_total) if self.first and self.last else 0
        size = (self.last.bytes_in_total - self.first.bytes_in_total) / rows if rows > 0 else None
        typed = tuple(sorted(_typed(self.first, self.last).items())) if self.first else ()
        parts = ([{c: part} for c, ws in self.windows.items() for part in levels(ws)] if len(self.windows) == 1
                 else [self.windows])
        return [RegimePrior(rates=tuple((c, tuple(round(w, 6) for w in ws)) for c, ws in part.items()),
                            typed=typed, heap=tuple(self.heap.items()), bytes_per_row=size) for part in parts]


def learn(snapshots: list[Snapshot], decisions: list[Decision], *, run: str,
          window_s: float = 2.0) -> dict[str, OperatorPrior]:
    """Each task or actor operator's lessons from one execution, by operator name (operators
    that never finished a task are left out)."""
    changes: dict[str, list[float]] = {}
    for d in decisions:
        for name in d.regime_changes:
            changes.setdefault(name, []).append(d.time_s)
    series: dict[str, list[tuple[float, OperatorSnapshot]]] = {}
    for s in snapshots:
        for op in s.operators:
            if op.config.kind in ("task", "actor"):
                series.setdefault(op.name, []).append((s.time_s, op))
    out = {}
    for name, ops in series.items():
        prior = _operator(name, ops, sorted(changes.get(name, [])), run=run, window_s=window_s)
        if prior is not None:
            out[name] = prior
    return out


def _busy(op: OperatorSnapshot) -> float | None:
    return op.slot_s if op.config.kind == "task" and op.slot_s is not None else op.busy_s


def _operator(name: str, ops: list[tuple[float, OperatorSnapshot]], changes: list[float], *, run: str,
              window_s: float) -> OperatorPrior | None:
    regimes = [_Regime()]
    start: tuple[float, OperatorSnapshot] | None = None
    pending_since, cold = None, None
    for t, op in ops:
        if changes and t >= changes[0]:  # the policy saw this operator's data change (once or more since)
            changes = [c for c in changes if c > t]
            regimes.append(_Regime())
            start = None
        reg = regimes[-1]
        if op.actors_pending > 0 and pending_since is None:
            pending_since = t
        elif op.actors_pending == 0 and pending_since is not None:
            cold = t - pending_since if cold is None else min(cold, t - pending_since)
            pending_since = None
        if op.old_actors > 0 or op.completed or _busy(op) is None:
            start = None
            continue
        reg.first = reg.first or op
        reg.last = op
        cfg = config_of(op)
        if op.heap_rss_per_replica_bytes:
            reg.heap[cfg] = max(reg.heap.get(cfg, 0.0), float(op.heap_rss_per_replica_bytes))
        if start is None or config_of(start[1]) != cfg:
            start = (t, op)
            continue
        t0, o0 = start
        busy, rows = _busy(op) - _busy(o0), op.rows_out_total - o0.rows_out_total
        if t - t0 >= window_s and busy > 0.2 * (t - t0) and rows > 0:
            reg.windows.setdefault(cfg, []).append(rows / busy)
            start = (t, op)
    kept = [r for r in regimes if r.windows]
    if not kept:
        return None
    last = ops[-1][1]
    done = last.rows_in_done
    sel = (last.rows_out_total / done if done > 0 and last.rows_out_total > 0
           and last.tasks_finished >= MIN_TASKS_FOR_SELECTIVITY else None)
    return OperatorPrior(name=name, run=run, regimes=tuple(p for r in kept for p in r.frozen()), cold_start_s=cold,
                         selectivity=sel)


def levels(windows: list[float]) -> list[list[float]]:
    """One configuration's windows as one level, or two where the medians before and after a
    window are furthest apart and at least ``SPLIT_RATIO`` apart (two windows a side at least):
    a step the policy did not call a regime change (a short run's) is still two regimes for the
    next run to recognise."""
    best = (0.0, 0)
    for k in range(2, len(windows) - 1):
        off = abs(math.log(statistics.median(windows[:k]) / statistics.median(windows[k:])))
        best = max(best, (off, k))
    if best[0] < math.log(SPLIT_RATIO):
        return [windows]
    return [windows[:best[1]], windows[best[1]:]]


def _typed(first: OperatorSnapshot, last: OperatorSnapshot) -> dict[str, float]:
    """Rows out per busy replica-second on each accelerator type over a regime: the type's
    finished tasks times the rows per task, over its busy time there."""
    tasks = last.tasks_finished - first.tasks_finished
    out: dict[str, float] = {}
    if tasks <= 0 or not last.by_type:
        return out
    per_task = (last.rows_out_total - first.rows_out_total) / tasks
    before = {u.accelerator_type: u for u in first.by_type}
    for u in last.by_type:
        b = before.get(u.accelerator_type)
        n = u.tasks_finished - (b.tasks_finished if b else 0)
        busy = u.busy_s - (b.busy_s if b else 0.0)
        if n >= MIN_TYPED_TASKS and busy > 0 and per_task > 0:
            out[u.accelerator_type] = n * per_task / busy
    return out
