"""Baseline pipeline policies: ``ray`` (observe only), ``static`` (hold the user's setup), ``ds2``.

DS2 (Kalavri et al., OSDI'18) sizes each operator from its *true* rate: rows processed per
second of busy time, which ignores time spent waiting on upstream or blocked downstream.
For a chain ``op_0 -> op_1 -> ...`` the target output rate of ``op_0`` (the source) is what
it produces now; each later operator must absorb its upstream's target, so
``replicas_i = ceil(target_in_i / true_rate_per_replica_i)``, clamped to the operator's
``[min_replicas, max_replicas]`` (an uncapped pool is bounded by what the cluster can hold).
As in DS2, a window in which actors are still starting is not used (their cold start would read
as a low rate), and an operator too idle in a window to measure keeps its last measured true
rate. Pure: no Ray, no clock.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from trident.core.policy import POLICIES, PolicyContext
from trident.core.errors import ConfigError
from trident.core.types import Decision, OperatorSnapshot, OperatorTarget, Plan, Snapshot


class RayPolicy:
    """Ray Data's own autoscaler decides; trident only observes and records."""

    name = "ray"

    def __init__(self, *, context: PolicyContext | None = None) -> None:
        self.context = context or PolicyContext()

    def step(self, snapshot: Snapshot, now: float) -> Decision:
        return Decision(time_s=now, reason="observe only: Ray Data's autoscaler decides")


class StaticPolicy:
    """Holds the configuration the user wrote: actor pools at their first observed size,
    task operators at their first observed concurrency cap (uncapped stays uncapped)."""

    name = "static"

    def __init__(self, *, context: PolicyContext | None = None) -> None:
        self.context = context or PolicyContext()
        self._plan_seq = 0

    def step(self, snapshot: Snapshot, now: float) -> Decision:
        if self._plan_seq:
            return Decision(time_s=now, reason="holding the user's configuration")
        targets = tuple(
            OperatorTarget(name=op.name, replicas=op.config.replicas)
            for op in snapshot.operators
            if op.config.kind in ("task", "actor") and op.config.replicas is not None
        )
        self._plan_seq = 1
        held = ", ".join(f"{t.name}={t.replicas}" for t in targets) or "nothing to hold"
        reason = f"hold the user's configuration: {held}"
        return Decision(time_s=now, reason=reason,
                        plan=Plan(seq=1, targets=targets, reason=reason, created_at_s=now))


@dataclass(frozen=True, kw_only=True)
class DS2Settings:
    """``window_s``: seconds of observation per decision; ``headroom``: target-rate multiplier
    (DS2's over-provisioning factor); ``min_busy_s``: busy replica-seconds needed in a window
    before an operator's true rate is trusted."""

    window_s: float = 3.0
    headroom: float = 1.0
    min_busy_s: float = 0.5

    def __post_init__(self) -> None:
        if self.window_s <= 0:
            raise ConfigError("window_s", self.window_s, "a positive number of seconds")
        if self.headroom < 1.0:
            raise ConfigError("headroom", self.headroom, "a number >= 1.0")
        if self.min_busy_s <= 0:
            raise ConfigError("min_busy_s", self.min_busy_s, "a positive number of seconds")


def true_rate_per_replica(first: OperatorSnapshot, last: OperatorSnapshot, min_busy_s: float) -> float | None:
    """Rows out per busy replica-second between two snapshots of one operator, or ``None``
    when the operator was busy for less than ``min_busy_s`` (too little evidence)."""
    if first.busy_s is None or last.busy_s is None:
        return None
    busy_s = last.busy_s - first.busy_s
    rows = last.rows_out_total - first.rows_out_total
    if busy_s < min_busy_s or rows <= 0:
        return None
    return rows / busy_s


def observed_rate(first: OperatorSnapshot, last: OperatorSnapshot, elapsed_s: float) -> float:
    """Rows out per second of wall time between two snapshots."""
    return max(0, last.rows_out_total - first.rows_out_total) / elapsed_s if elapsed_s > 0 else 0.0


def source_rate(first: OperatorSnapshot, last: OperatorSnapshot, elapsed_s: float, min_busy_s: float) -> float:
    """The rate the first operator can produce: the larger of what it produced and its true
    per-replica rate times its parallelism (its cap, or the tasks running now when uncapped),
    so a source slowed by backpressure still sets the target it could reach."""
    observed = observed_rate(first, last, elapsed_s)
    true_rate = true_rate_per_replica(first, last, min_busy_s)
    if true_rate is None:
        return observed
    parallelism = last.config.replicas if last.config.replicas else max(1, last.tasks_running)
    return max(observed, true_rate * parallelism)


def cluster_bound(op: OperatorSnapshot, snapshot: Snapshot) -> int:
    """The most replicas of ``op`` the cluster could hold, from its per-replica GPUs (else CPUs)."""
    cfg, cluster = op.config, snapshot.cluster
    if cfg.num_gpus > 0:
        return max(1, int(cluster.gpus // cfg.num_gpus))
    return max(1, int(cluster.cpus // cfg.num_cpus)) if cfg.num_cpus > 0 else max(1, cfg.min_replicas)


def selectivity(op: OperatorSnapshot) -> float:
    """Rows out per row in (1.0 until both are known)."""
    return op.rows_out_total / op.rows_in_total if op.rows_in_total and op.rows_out_total else 1.0


class DS2Policy:
    """The DS2 rule over windows of ``settings.window_s``; issues a plan only when a target changes."""

    name = "ds2"

    def __init__(self, *, context: PolicyContext | None = None, settings: DS2Settings | None = None) -> None:
        self.context = context or PolicyContext()
        self.settings = settings or DS2Settings()
        self._window_start: Snapshot | None = None
        self._current: dict[str, int] = {}
        self._true_rates: dict[str, float] = {}
        self._source_rate: float | None = None
        self._plan_seq = 0

    def step(self, snapshot: Snapshot, now: float) -> Decision:
        start = self._window_start
        if start is None or snapshot.time_s < start.time_s:
            self._window_start = snapshot
            return Decision(time_s=now, reason="ds2: window started")
        elapsed_s = snapshot.time_s - start.time_s
        if elapsed_s < self.settings.window_s:
            return Decision(time_s=now, reason=f"ds2: observing ({elapsed_s:.1f}/{self.settings.window_s:.1f} s)")
        self._window_start = snapshot
        source_now = self._observe_source(start, snapshot, elapsed_s)
        pending = sum(op.actors_pending for op in snapshot.operators)
        if pending:
            return Decision(time_s=now, reason=f"ds2: {pending} actors still starting; window discarded")
        targets, notes = self._targets(start, snapshot, source_now)
        changed = tuple(t for t in targets if self._current.get(t.name) != t.replicas)
        if not changed:
            return Decision(time_s=now, reason="ds2: targets unchanged", notes=tuple(notes))
        for t in changed:
            self._current[t.name] = t.replicas
        self._plan_seq += 1
        reason = "ds2: " + "; ".join(notes)
        return Decision(time_s=now, reason=reason, notes=tuple(notes),
                        plan=Plan(seq=self._plan_seq, targets=changed, reason=reason, created_at_s=now))

    def _observe_source(self, start: Snapshot, end: Snapshot, elapsed_s: float) -> float:
        """The source's target rate in this window (0 when it produced nothing), remembered in
        every window, also one discarded for starting actors: a batch source may read all its
        input in exactly those first seconds."""
        before = {op.name: op for op in start.operators}
        src = next((op for op in end.operators if op.config.kind in ("task", "actor") and op.name in before), None)
        if src is None:
            return 0.0
        rate = source_rate(before[src.name], src, elapsed_s, self.settings.min_busy_s) * self.settings.headroom
        if rate > 0:
            self._source_rate = rate
        return rate

    def _targets(self, start: Snapshot, end: Snapshot, source_now: float) -> tuple[list[OperatorTarget], list[str]]:
        before = {op.name: op for op in start.operators}
        ops = [op for op in end.operators if op.config.kind in ("task", "actor") and op.name in before]
        targets: list[OperatorTarget] = []
        notes: list[str] = []
        target_out_rate: float | None = None
        for i, op in enumerate(ops):
            first = before[op.name]
            if i == 0:
                if source_now > 0:
                    notes.append(f"{op.name}: source target {source_now:.1f} rows/s")
                elif self._source_rate is not None:
                    # a source that has read everything (or is idle) keeps the rate it delivered
                    notes.append(f"{op.name}: source idle; its last rate {self._source_rate:.1f} rows/s stands")
                else:
                    return [], [f"{op.name}: the source produced nothing yet; no target"]
                target_out_rate = self._source_rate
                continue
            target_in_rate = target_out_rate or 0.0
            target_out_rate = target_in_rate * selectivity(op)
            if op.config.kind != "actor" or op.completed:
                continue
            true_rate = true_rate_per_replica(first, op, self.settings.min_busy_s)
            if true_rate is None:
                true_rate = self._true_rates.get(op.name)
                if true_rate is None:
                    notes.append(f"{op.name}: too little busy time to measure its true rate")
                    continue
            self._true_rates[op.name] = true_rate
            lo = max(1, op.config.min_replicas)
            hi = op.config.max_replicas if op.config.max_replicas is not None else cluster_bound(op, end)
            want = math.ceil(target_out_rate / true_rate)
            replicas = min(hi, max(lo, want))
            targets.append(OperatorTarget(name=op.name, replicas=replicas))
            notes.append(f"{op.name}: ceil({target_out_rate:.1f} / {true_rate:.1f} rows/s per replica) = {want}"
                         f" -> {replicas} (bounds {lo}..{hi})")
        return targets, notes


POLICIES.register("ray", RayPolicy)
POLICIES.register("static", StaticPolicy)
POLICIES.register("ds2", DS2Policy)
