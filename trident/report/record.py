"""The run record: everything one ``trident.autoscale`` run saw, decided and did.

Plain dataclasses (no Ray) so reports, plots and tests can be built from a saved JSON file.
Times: ``ExecutionRecord.started_at_s`` is seconds since the run began; snapshot, decision,
action and event times are seconds since their execution began.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from trident.core.cluster import NodeShape
from trident.core.types import (ClusterView, Decision, OperatorConfig, OperatorSnapshot, OperatorTarget, Plan,
                           Snapshot, TypeUsage)
from trident.report.predictions import plan_checks, prediction_error

FORMAT_VERSION = 1


@dataclass(frozen=True)
class Action:
    """Something the shim did to Ray (or, in a dry run, would have done).

    ``kind``: ``pool_target`` | ``task_cap`` | ``target_reached`` | ``rollout_started`` |
    ``rollout_finished`` | ``rollout_step`` | ``start_wait`` (actors waiting for a start slot)
    among others. ``value`` is the number involved (replicas, cap, seconds to reach a target,
    actors waiting).
    """

    time_s: float
    operator: str
    kind: str
    detail: str
    value: float | None = None
    applied: bool = True
    starting_s: float | None = None
    """``target_reached``: of ``value``, the seconds an actor of the pool was starting."""


@dataclass(frozen=True)
class Event:
    """Something that happened to trident itself: ``fallback``, ``controller_failed``,
    ``observe_only``, ``detached``."""

    time_s: float
    kind: str
    message: str


@dataclass
class ExecutionRecord:
    execution_id: str
    dataset_id: str
    started_at_s: float
    started_at_unix_s: float | None = None
    """Wall-clock start (``time.time()``), to line the record up with other logs."""
    ended_at_s: float | None = None
    status: str = "running"  # running | succeeded | failed
    mode: str = "control"  # control | observe | stock
    shim_time_s: float = 0.0
    """Executor-thread time spent inside trident (observing, polling, actuating), seconds."""
    snapshots: list[Snapshot] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    @property
    def wall_s(self) -> float | None:
        return None if self.ended_at_s is None else self.ended_at_s - self.started_at_s

    @property
    def output_rows(self) -> int | None:
        """Rows the pipeline delivered: out of the last operator in the final snapshot, or into
        it when it is a write sink (Ray Data's ``Write`` emits one statistics row per task).
        ``None`` (not measured) when the sink is fused into the operator before it."""
        if not self.snapshots or not self.snapshots[-1].operators:
            return 0
        last = self.snapshots[-1].operators[-1]
        if last.name == "Write":
            return last.rows_in_total
        return None if last.name.endswith("->Write") else last.rows_out_total


@dataclass
class RunRecord:
    policy: str
    config: dict[str, Any]
    started_at: str
    trident_version: str
    ray_version: str | None = None
    ended_at_s: float | None = None
    executions: list[ExecutionRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["format_version"] = FORMAT_VERSION
        return d

    def to_json(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=1)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunRecord":
        execs = [_execution(e) for e in d.get("executions", [])]
        return cls(policy=d["policy"], config=d.get("config", {}), started_at=d.get("started_at", ""),
                   trident_version=d.get("trident_version", ""), ray_version=d.get("ray_version"),
                   ended_at_s=d.get("ended_at_s"), executions=execs, warnings=list(d.get("warnings", [])),
                   events=[Event(**e) for e in d.get("events", [])])

    @classmethod
    def from_json(cls, path: str) -> "RunRecord":
        with open(path) as f:
            return cls.from_dict(json.load(f))


def _snapshot(d: dict[str, Any]) -> Snapshot:
    ops = tuple(OperatorSnapshot(**{**o, "config": OperatorConfig(**o["config"]),
                                    "by_type": tuple(TypeUsage(**u) for u in o.get("by_type", ()))})
                for o in d["operators"])
    c = d["cluster"]
    cluster = ClusterView(**{**c, "gpus_by_type": tuple(tuple(x) for x in c.get("gpus_by_type", ())),
                             "cpus_by_type": tuple(tuple(x) for x in c.get("cpus_by_type", ())),
                             "nodes": tuple(NodeShape(**{**n, "resources": tuple(tuple(r) for r in n["resources"])})
                                            for n in c.get("nodes", ()))})
    return Snapshot(execution_id=d["execution_id"], seq=d["seq"], time_s=d["time_s"], operators=ops, cluster=cluster,
                    input_rows_total=d.get("input_rows_total"), applied_plan_seq=d.get("applied_plan_seq", 0))


def _decision(d: dict[str, Any]) -> Decision:
    plan = d.get("plan")
    if plan is not None:
        plan = Plan(seq=plan["seq"], targets=tuple(OperatorTarget(**t) for t in plan["targets"]),
                    reason=plan["reason"], created_at_s=plan["created_at_s"])
    return Decision(time_s=d["time_s"], reason=d["reason"], plan=plan, notes=tuple(d.get("notes", ())),
                    kind=d.get("kind", ""),
                    predicted_rows_per_s=tuple((n, r) for n, r in d.get("predicted_rows_per_s", ())),
                    regime_changes=tuple(d.get("regime_changes", ())),
                    history_runs=tuple(d.get("history_runs", ())), cpu_s=d.get("cpu_s", 0.0))


def _execution(d: dict[str, Any]) -> ExecutionRecord:
    return ExecutionRecord(
        execution_id=d["execution_id"], dataset_id=d["dataset_id"], started_at_s=d["started_at_s"],
        started_at_unix_s=d.get("started_at_unix_s"),
        ended_at_s=d.get("ended_at_s"), status=d.get("status", "running"), mode=d.get("mode", "control"),
        shim_time_s=d.get("shim_time_s", 0.0),
        snapshots=[_snapshot(s) for s in d.get("snapshots", [])],
        decisions=[_decision(x) for x in d.get("decisions", [])],
        actions=[Action(**a) for a in d.get("actions", [])],
        events=[Event(**e) for e in d.get("events", [])])


RECONFIGURING_ACTIONS = ("pool_target", "task_cap", "rollout_started")


def peak_heap_rss_per_replica(snapshots: Any) -> dict[str, int]:
    """Per operator, the largest heap RSS of one replica (bytes) over ``snapshots``."""
    peak: dict[str, int] = {}
    for s in snapshots:
        for op in s.operators:
            if op.heap_rss_per_replica_bytes is not None:
                peak[op.name] = max(peak.get(op.name, 0), op.heap_rss_per_replica_bytes)
    return peak


def summarize(record: RunRecord) -> dict[str, Any]:
    """The figures a benchmark row needs (units in the keys; missing means not measured).

    ``wall_s`` spans the first execution's start to the last one's end; ``first_plan_s`` is the
    first plan's time in the first execution; ``history_plans`` counts plans that leaned on
    earlier runs (:mod:`trident.history`); ``rows`` counts the
    rows each execution delivered (``None`` when a fused write sink hides them); ``reconfigurations`` counts applied pool targets,
    task caps and rollouts; ``failed_tasks`` is per operator.
    """
    ended = [e for e in record.executions if e.ended_at_s is not None]
    wall_s = (max(e.ended_at_s for e in ended) - min(e.started_at_s for e in ended)) if ended else None
    counts = [e.output_rows for e in record.executions]
    rows = None if None in counts else sum(counts)
    failed: dict[str, int] = {}
    peak_rss: dict[str, int] = {}
    for e in record.executions:
        for op in (e.snapshots[-1].operators if e.snapshots else ()):
            if op.config.kind != "other":
                failed[op.name] = failed.get(op.name, 0) + op.tasks_failed
        for name, rss in peak_heap_rss_per_replica(e.snapshots).items():
            peak_rss[name] = max(peak_rss.get(name, 0), rss)
    actions = [a for e in record.executions for a in e.actions]
    events = [ev for e in record.executions for ev in e.events] + list(record.events)
    out: dict[str, Any] = {
        "policy": record.policy,
        "executions": len(record.executions),
        "rows": rows,
        "reconfigurations": sum(1 for a in actions if a.applied and a.kind in RECONFIGURING_ACTIONS),
        "decisions": sum(len(e.decisions) for e in record.executions),
        "plans": sum(1 for e in record.executions for d in e.decisions if d.plan is not None),
        "failed_tasks": failed,
        "peak_heap_rss_per_replica_bytes": peak_rss,
        "target_reach_s": [a.value for a in actions if a.kind == "target_reached" and a.value is not None],
        "fallbacks": [ev.message for ev in events if ev.kind == "fallback"],
        "controller_failure": next((ev.message for ev in events if ev.kind == "controller_failed"), None),
        "warnings": list(record.warnings),
        "shim_time_s": sum(e.shim_time_s for e in record.executions),
        "controller_cpu_s": sum(d.cpu_s for e in record.executions for d in e.decisions),
        "prediction_error": prediction_error([c for e in record.executions for c in plan_checks(e)]),
        "first_plan_s": next((d.time_s for e in record.executions[:1] for d in e.decisions if d.plan is not None),
                             None),
        "history_plans": sum(1 for e in record.executions for d in e.decisions if d.plan is not None and d.history_runs),
    }
    if wall_s is not None:
        out["wall_s"] = wall_s
        if wall_s > 0 and rows is not None:
            out["throughput_rows_per_s"] = rows / wall_s
    return out
