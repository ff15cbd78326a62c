"""trident's live series on Ray's metrics endpoint, beside Ray Data's ``ray_data_*``.

The controller actor records every snapshot it receives and every decision it makes
(:meth:`ControllerMetrics.record`); the driver counts the times trident stepped back
(:func:`count_event`). Both go through ``ray.util.metrics``, so Ray's metrics agent exports
them on its Prometheus endpoint (``ray.init(_metrics_export_port=...)``, Ray's Grafana set-up)
with Ray's ``ray_`` prefix; the cluster's arbiter (:mod:`trident.jobs.arbiter`) records its
runs' budgets and progress (:class:`ArbiterMetrics`). Labels: ``dataset`` (Ray Data's dataset id, the same value as on
``ray_data_*``), ``execution`` (trident's id for one execution of it), ``operator``
(trident's operator name) and ``policy``; counters add ``kind``; the arbiter's series are
labelled by ``run`` (its run id) and ``owner``. :data:`METRICS` is the one
list of what is exported (docs/metrics.md documents each entry).

Recording never raises: a metric that cannot be set is skipped, and a Ray without a metrics
agent (``ray`` without the ``default`` extra) simply exports nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trident.core.types import Decision, OperatorSnapshot, Snapshot

OP_TAGS = ("dataset", "execution", "operator", "policy")
RUN_TAGS = ("dataset", "execution", "policy")
ARBITER_TAGS = ("run", "owner")


@dataclass(frozen=True)
class MetricSpec:
    """One exported series: its name (before Ray's ``ray_`` prefix), type, labels, meaning."""

    name: str
    kind: str  # "gauge" | "counter"
    tags: tuple[str, ...]
    description: str


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("trident_target_replicas", "gauge", OP_TAGS,
               "Replicas trident wants for the operator (its latest plan's target, else the pool's current size)."),
    MetricSpec("trident_running_replicas", "gauge", OP_TAGS,
               "Replicas running now: live actors of an actor pool, running tasks of a task operator."),
    MetricSpec("trident_pending_replicas", "gauge", OP_TAGS, "Actors of the pool still starting (cold starts)."),
    MetricSpec("trident_batch_size", "gauge", OP_TAGS, "Rows per batch the operator's replicas run with."),
    MetricSpec("trident_measured_rows_per_s", "gauge", OP_TAGS,
               "Rows out per second of the operator over the last observation interval."),
    MetricSpec("trident_predicted_rows_per_s", "gauge", OP_TAGS,
               "Rows out per second the latest plan expects of the operator (the planned pipeline rate "
               "times the operator's measured selectivity)."),
    MetricSpec("trident_heap_per_replica_bytes", "gauge", OP_TAGS,
               "Largest resident (heap) memory of one worker of the operator, bytes."),
    MetricSpec("trident_heap_bytes", "gauge", OP_TAGS,
               "Summed resident memory of every worker of the operator, bytes."),
    MetricSpec("trident_input_queue_blocks", "gauge", OP_TAGS, "Blocks waiting in the operator's input queue."),
    MetricSpec("trident_memory_limit_bytes", "gauge", RUN_TAGS,
               "The run's worker-memory limit (``memory_limit``), bytes; absent when none was set."),
    MetricSpec("trident_decisions", "counter", RUN_TAGS + ("kind",),
               "Control steps, by decision kind (observe, dwell, keep, plan, inner, tune, rollout, replan, "
               "mismatch, done, error; 'none' for policies that do not say)."),
    MetricSpec("trident_plans", "counter", RUN_TAGS + ("kind",),
               "Plans sent to the executor (decisions that change a target), by decision kind."),
    MetricSpec("trident_history_plans", "counter", RUN_TAGS,
               "Plans that leaned on what earlier runs taught (trident.history): the run's first plans before "
               "its own measurements, then those weighed with them."),
    MetricSpec("trident_regime_changes", "counter", OP_TAGS,
               "Changes in the operator's data (throughput or row size) that started a new regime."),
    MetricSpec("trident_fallbacks", "counter", ("dataset", "kind"),
               "Times trident stepped back to stock Ray Data (kind: fallback, controller_failed, observe_only, "
               "detached)."),
    MetricSpec("trident_arbiter_budget_cpus", "gauge", ARBITER_TAGS,
               "CPUs the cluster's arbiter gives the run; absent while the run is alone (no cap)."),
    MetricSpec("trident_arbiter_budget_gpus", "gauge", ARBITER_TAGS,
               "GPUs the cluster's arbiter gives the run; absent while the run is alone (no cap)."),
    MetricSpec("trident_arbiter_rank", "gauge", ARBITER_TAGS, "The run's place in the arbiter's order (1: first)."),
    MetricSpec("trident_arbiter_rows_per_s", "gauge", ARBITER_TAGS,
               "Input rows per second the arbiter measures of the run (over its last 10 s)."),
    MetricSpec("trident_arbiter_remaining_s", "gauge", ARBITER_TAGS,
               "Seconds the run has left with the whole cluster at its least cost per row, as the arbiter predicts them."),
)
"""Every series trident exports (Ray adds ``ray_`` before each name; a counter also gets ``_total``)."""

FALLBACK_EVENTS = ("fallback", "controller_failed", "observe_only", "detached")


def dataset_of(execution_id: str) -> str:
    """Ray Data's dataset id from trident's execution id (``<dataset id>-<6 hex digits>``)."""
    return execution_id.rsplit("-", 1)[0]


def _create(spec: MetricSpec) -> Any:
    from ray.util import metrics

    cls = metrics.Gauge if spec.kind == "gauge" else metrics.Counter
    return cls(spec.name, description=spec.description, tag_keys=spec.tags)


class ControllerMetrics:
    """The controller's gauges and counters (created once per controller process)."""

    def __init__(self) -> None:
        self.series = {s.name: _create(s) for s in METRICS if s.name != "trident_fallbacks" and s.tags != ARBITER_TAGS}
        self.targets: dict[tuple[str, str], int] = {}
        """Per (execution, operator): the replicas the latest plan asked for."""

    def record(self, snapshot: Snapshot, decision: Decision, *, policy: str,
               memory_limit_bytes: int | None) -> None:
        """Set every series from one control step; never raises."""
        try:
            self._record(snapshot, decision, policy, memory_limit_bytes)
        except Exception:  # noqa: BLE001 - metrics are a view; the control loop must go on without them
            pass

    def _record(self, snap: Snapshot, decision: Decision, policy: str, memory_limit_bytes: int | None) -> None:
        run = {"dataset": dataset_of(snap.execution_id), "execution": snap.execution_id, "policy": policy}
        kind = str(decision.kind) or "none"
        self.series["trident_decisions"].inc(1, tags={**run, "kind": kind})
        if decision.plan is not None:
            self.series["trident_plans"].inc(1, tags={**run, "kind": kind})
            if decision.history_runs:
                self.series["trident_history_plans"].inc(1, tags=run)
            for t in decision.plan.targets:
                if t.replicas is not None:
                    self.targets[(snap.execution_id, t.name)] = t.replicas
        if memory_limit_bytes is not None:
            self.series["trident_memory_limit_bytes"].set(memory_limit_bytes, tags=run)
        for name in decision.regime_changes:
            self.series["trident_regime_changes"].inc(1, tags={**run, "operator": name})
        for name, rows_per_s in decision.predicted_rows_per_s:
            self.series["trident_predicted_rows_per_s"].set(rows_per_s, tags={**run, "operator": name})
        for op in snap.operators:
            if op.config.kind in ("task", "actor"):
                self._operator(op, {**run, "operator": op.name})

    def _operator(self, op: OperatorSnapshot, tags: dict[str, str]) -> None:
        running = op.actors_running if op.config.kind == "actor" else op.tasks_running
        target = self.targets.get((tags["execution"], op.name), op.config.replicas)
        values = {
            "trident_running_replicas": running,
            "trident_pending_replicas": op.actors_pending if op.config.kind == "actor" else None,
            "trident_target_replicas": target,
            "trident_batch_size": op.config.batch_size,
            "trident_measured_rows_per_s": op.rows_out_per_s,
            "trident_heap_per_replica_bytes": op.heap_rss_per_replica_bytes,
            "trident_heap_bytes": op.heap_rss_bytes,
            "trident_input_queue_blocks": op.input_queue_blocks,
        }
        for name, value in values.items():
            if value is not None:
                self.series[name].set(float(value), tags=tags)


class ArbiterMetrics:
    """The arbiter's gauges, one series per run (created once, in the arbiter's process)."""

    FIELDS = (("trident_arbiter_budget_cpus", "budget_cpus"), ("trident_arbiter_budget_gpus", "budget_gpus"),
              ("trident_arbiter_rows_per_s", "rate"), ("trident_arbiter_remaining_s", "remaining_s"))

    def __init__(self) -> None:
        self.series = {s.name: _create(s) for s in METRICS if s.tags == ARBITER_TAGS}

    def record(self, runs: list[dict]) -> None:
        """Set every run's gauges from the arbiter's status rows; never raises."""
        try:
            for r in runs:
                tags = {"run": r["run_id"], "owner": r["owner"] or "-"}
                self.series["trident_arbiter_rank"].set(float(r["rank"] + 1), tags=tags)
                for name, key in self.FIELDS:
                    if r[key] is not None:
                        self.series[name].set(float(r[key]), tags=tags)
        except Exception:  # noqa: BLE001 - metrics are a view; the arbiter must go on without them
            pass


_fallbacks: Any = None


def count_event(dataset: str, kind: str) -> None:
    """Count a time trident stepped back (``kind`` in :data:`FALLBACK_EVENTS`; others are ignored);
    called in the driver, never raises."""
    global _fallbacks
    if kind not in FALLBACK_EVENTS:
        return
    try:
        if _fallbacks is None:
            _fallbacks = _create(next(s for s in METRICS if s.name == "trident_fallbacks"))
        _fallbacks.inc(1, tags={"dataset": dataset, "kind": kind})
    except Exception:  # noqa: BLE001 - a fallback must never fail for want of a metric
        pass
