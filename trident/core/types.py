"""Frozen value objects passed between the shim, the controller and the pure decision core.

The shim (inside Ray Data's executor) builds a :class:`Snapshot` every ``interval_s``;
the controller's :class:`~trident.autoscaler.controller.loop.ControlLoop` turns it into a
:class:`Decision`, whose optional :class:`Plan` holds per-operator
:class:`OperatorTarget` s that the shim applies. Nothing here imports Ray.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Literal

from trident.core.cluster import NodeShape
from trident.core.errors import ConfigError

OperatorKind = Literal["task", "actor", "other"]


@dataclass(frozen=True)
class OperatorConfig:
    """The configuration an operator runs with now (what a plan can change).

    ``replicas`` is the actor-pool size (actor ops) or the concurrency cap (task ops,
    ``None`` when uncapped). Resources are per replica (per actor or per task).
    """

    kind: OperatorKind
    replicas: int | None
    min_replicas: int = 1
    max_replicas: int | None = None
    batch_size: int | None = None
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    accelerator_type: str | None = None
    max_concurrency: int = 1
    """Tasks one actor runs at once (Ray's ``max_concurrency``; 1 for task operators)."""

    def __post_init__(self) -> None:
        if self.kind not in ("task", "actor", "other"):
            raise ConfigError("kind", self.kind, "'task', 'actor' or 'other'")
        if self.replicas is not None and self.replicas < 0:
            raise ConfigError("replicas", self.replicas, "an integer >= 0 or None")
        if self.min_replicas < 0:
            raise ConfigError("min_replicas", self.min_replicas, "an integer >= 0")
        if self.max_replicas is not None and self.max_replicas < self.min_replicas:
            raise ConfigError("max_replicas", self.max_replicas, f"None or >= min_replicas ({self.min_replicas})")
        if self.batch_size is not None and self.batch_size <= 0:
            raise ConfigError("batch_size", self.batch_size, "a positive integer or None")
        if self.num_cpus < 0 or self.num_gpus < 0:
            raise ConfigError("num_cpus/num_gpus", (self.num_cpus, self.num_gpus), "non-negative numbers")
        if self.max_concurrency < 1:
            raise ConfigError("max_concurrency", self.max_concurrency, "an integer >= 1")


@dataclass(frozen=True)
class TypeUsage:
    """An actor pool's work on the nodes of one accelerator type, cumulative since the execution
    began (so per-type rates can be measured while user code names no type)."""

    accelerator_type: str
    actors: int
    """Actors running on nodes of this type now."""
    busy_s: float
    """Actor-seconds with at least one task in flight, up to each task's completion."""
    tasks_finished: int


@dataclass(frozen=True)
class OperatorSnapshot:
    """One operator at one moment. Counters are cumulative since the execution began;
    rates are over the last observation interval. Missing measurements are ``None``."""

    name: str
    index: int
    config: OperatorConfig
    rows_out_total: int = 0
    bytes_out_total: int = 0
    rows_out_per_s: float = 0.0
    bytes_out_per_s: float = 0.0
    rows_in_total: int = 0
    bytes_in_total: int = 0
    tasks_running: int = 0
    tasks_finished: int = 0
    tasks_failed: int = 0
    task_duration_p50_s: float | None = None
    task_duration_p90_s: float | None = None
    input_queue_blocks: int = 0
    input_queue_bytes: int = 0
    object_store_bytes: int = 0
    actors_running: int = 0
    actors_pending: int = 0
    actors_idle: int = 0
    tasks_in_flight: int = 0
    backpressured: bool = False
    heap_rss_bytes: int | None = None
    """Summed resident memory of the workers running this operator (bytes)."""
    heap_rss_per_replica_bytes: int | None = None
    """Largest resident memory of one worker of this operator (bytes)."""
    heap_live_per_replica_bytes: int | None = None
    """Largest memory of one replica running a task, read now from outside (bytes; actor pools
    on the driver's node only): a lower bound of that task's peak, known before it finishes."""
    heap_rest_per_replica_bytes: int | None = None
    """Smallest memory of one of this pool's actors read as it came up, before its first task
    (bytes; actor pools on the driver's node only): what its constructor left, a part of a
    replica's memory that does not grow with the batch."""
    busy_s: float | None = None
    """Cumulative replica-seconds spent executing tasks, as the workers measured them (for true
    per-replica rates, DS2)."""
    slot_s: float | None = None
    """A task operator's seconds of task slots held by its finished tasks: from scheduling to
    completion less output backpressure, as the driver measured them (``None``: not measured)."""
    completed: bool = False
    rows_in_done_total: int | None = None
    """Input rows of finished tasks (``None``: not measured; then ``rows_in_total`` stands in)."""
    by_type: tuple[TypeUsage, ...] = ()
    """An actor pool's work per accelerator type of the nodes its actors run on (empty when the
    cluster's GPU nodes name no type)."""
    old_actors: int = 0
    """Actors of the pool's previous configuration still running (a rolling update in progress)."""
    cpu_s: float | None = None
    """CPU seconds (user + system) an actor pool's running actors used, each from its first reading
    (``None``: an actor runs off the driver's machine, or not read)."""

    @property
    def rows_in_done(self) -> int:
        """Input rows of finished tasks, or every row taken in where that is not measured."""
        return self.rows_in_done_total if self.rows_in_done_total is not None else self.rows_in_total

    @property
    def input_bytes_per_row(self) -> float | None:
        return self.bytes_in_total / self.rows_in_total if self.rows_in_total else None

    @property
    def starved(self) -> bool:
        """No queued input and nothing running: the operator waited on upstream."""
        return self.input_queue_blocks == 0 and self.tasks_running == 0 and not self.completed


@dataclass(frozen=True)
class ClusterView:
    """Resources the pipeline may use, as seen at snapshot time."""

    cpus: float
    gpus: float
    gpus_by_type: tuple[tuple[str, float], ...] = ()
    cpus_by_type: tuple[tuple[str, float], ...] = ()
    """CPUs of the nodes of each accelerator type (what actors pinned to the type can use)."""
    object_store_bytes: int | None = None
    memory_limit_bytes: int | None = None
    other_memory_bytes: int | None = None
    """Memory Ray's processes hold on the driver's machine beside the pipeline's actor pools (its
    daemons, system actors, idle workers, trident's controller, the task operators' workers;
    bytes, the most read so far; ``None``: not read). Under a memory limit the pools get the rest."""
    nodes: tuple[NodeShape, ...] = ()
    """The live nodes, as Ray schedules on them (empty where unknown: then only the totals count)."""
    host_cores: int | None = None
    """Cores of the driver's machine (``None``: not read)."""
    host_busy_s: float | None = None
    """Core-seconds the driver's machine has been busy, cumulative (``None``: not read)."""


@dataclass(frozen=True)
class Snapshot:
    """Every operator of one execution at time ``time_s`` (seconds since the execution began)."""

    execution_id: str
    seq: int
    time_s: float
    operators: tuple[OperatorSnapshot, ...]
    cluster: ClusterView
    input_rows_total: int | None = None
    """Rows the first operator receives in all, when known (``None`` for an open-ended stream)."""
    applied_plan_seq: int = 0
    """The newest plan the executor had applied when this snapshot was taken (a policy waits for
    its plan to be applied before it judges whether a target is being reached)."""

    def operator(self, name: str) -> OperatorSnapshot:
        for op in self.operators:
            if op.name == name:
                return op
        raise KeyError(name)


@dataclass(frozen=True)
class OperatorTarget:
    """What a plan wants for one operator. ``None`` fields are left as they are.

    Changing ``batch_size``, ``num_gpus`` or ``accelerator_type`` of an actor operator
    means a rolling update (new actors first, old ones drained).
    """

    name: str
    replicas: int | None = None
    batch_size: int | None = None
    num_gpus: float | None = None
    accelerator_type: str | None = None
    swap: bool = False
    """Roll by replacing old actors half the pool at a time (new ones start where old ones left)
    instead of starting every new actor first: for a change whose new actors do not fit beside
    the old ones (the GPUs or the memory limit are full)."""

    def __post_init__(self) -> None:
        if self.replicas is not None and self.replicas < 0:
            raise ConfigError(f"{self.name}.replicas", self.replicas, "an integer >= 0")
        if self.batch_size is not None and self.batch_size <= 0:
            raise ConfigError(f"{self.name}.batch_size", self.batch_size, "a positive integer")
        if self.num_gpus is not None and self.num_gpus < 0:
            raise ConfigError(f"{self.name}.num_gpus", self.num_gpus, "a number >= 0")

    @property
    def needs_rollout(self) -> bool:
        return self.batch_size is not None or self.num_gpus is not None or self.accelerator_type is not None


@dataclass(frozen=True)
class Plan:
    """A set of operator targets, numbered so the shim applies each plan once."""

    seq: int
    targets: tuple[OperatorTarget, ...]
    reason: str
    created_at_s: float

    def target(self, name: str) -> OperatorTarget | None:
        return next((t for t in self.targets if t.name == name), None)


class DecisionKind(str, Enum):
    """What a decision was, for tests and tools that should not parse its reason. A ``str``: it
    compares equal to, and is written to JSON as, its value."""

    OBSERVE = "observe"
    """waiting for evidence"""
    DWELL = "dwell"
    """a recent plan stands"""
    KEEP = "keep"
    """looked, nothing worth changing"""
    PLAN = "plan"
    """the planner's new allocation"""
    INNER = "inner"
    """the reactive inner loop moved a pool"""
    TUNE = "tune"
    """a batch size tried"""
    ROLLOUT = "rollout"
    """a rollout phase began or is waited on"""
    REPLAN = "replan"
    """a target was not reached: the obstacle is named and the plan redone"""
    MISMATCH = "mismatch"
    """what came out stayed below the last plan's prediction, or its targets were late: the cause
    is named and the planner looks again"""
    DONE = "done"
    ERROR = "error"
    """the policy failed and keeps the current plan"""
    NONE = ""
    """policies that say nothing"""

    __str__ = str.__str__
    __format__ = str.__format__


DECISION_KINDS = tuple(k.value for k in DecisionKind)


@dataclass(frozen=True)
class Decision:
    """What the control loop decided at one step: a new plan, or ``None`` to keep the current one."""

    time_s: float
    reason: str
    plan: Plan | None = None
    notes: tuple[str, ...] = field(default=())
    kind: DecisionKind | str = DecisionKind.NONE
    predicted_rows_per_s: tuple[tuple[str, float], ...] = ()
    """(operator, rows out per second) the plan made at this step expects; empty when none."""
    regime_changes: tuple[str, ...] = ()
    """Operators whose data started a new regime at this step."""
    history_runs: tuple[str, ...] = ()
    """Earlier runs whose history (:mod:`trident.history`) the plan made at this step leaned on."""
    cpu_s: float = 0.0
    """CPU seconds the controller's thread spent on this step and its metrics (0: not measured,
    as in the simulators)."""

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "kind", DecisionKind(self.kind))
        except ValueError:
            raise ConfigError("Decision.kind", self.kind, f"one of {DECISION_KINDS}") from None


def with_config(op: OperatorSnapshot, **changes) -> OperatorSnapshot:
    """A copy of ``op`` with its configuration fields changed (handy for tests and the simulator)."""
    return replace(op, config=replace(op.config, **changes))


def cluster_shape(snap: Snapshot) -> tuple:
    """What identifies the cluster a snapshot saw: its CPUs, GPUs and live nodes (a fact learned
    about placement holds while this stays the same)."""
    c = snap.cluster
    return c.cpus, c.gpus, tuple(sorted((n.node_id, n.cpus, n.gpus) for n in c.nodes))
