"""Ray Data operator state -> frozen :class:`~trident.core.types.Snapshot` (executor thread only).

Counters come from ``op.metrics``; queues from the executor's topology; actor counts from
the pool itself (``op.metrics`` refreshes them only when the operator outputs). Worker
memory is the unique-set size that every Ray Data map worker samples in its own process
(``MemoryProfiler``, polled each ``DataContext.memory_usage_poll_interval_s``) and reports
with each finished task; :class:`RecentSamples` keeps the values of the last interval. Actors
running a task are also read live (:mod:`trident.autoscaler.shim.actor_processes`).
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NamedTuple

from trident.autoscaler.shim.actor_processes import ActorProcesses, host_cpu
from trident.autoscaler.shim.ray_memory import RayMemory
from trident.core.cluster import ACCELERATOR_PREFIX, NodeShape, node_shapes
from trident.core.types import ClusterView, OperatorConfig, OperatorSnapshot, Snapshot, TypeUsage



def recent_samples_tracker(tracker: Any) -> Any:
    """Wrap a Ray ``DistributionTracker`` so the samples added since the last drain are kept."""
    cls = type(tracker)

    class RecentSamples(cls):  # type: ignore[misc, valid-type]
        def add_sample(self, value: float) -> None:
            super().add_sample(value)
            self.trident_recent.append(value)

        def drain_recent(self) -> list[float]:
            out = list(self.trident_recent)
            self.trident_recent.clear()
            return out

    tracker.__class__ = RecentSamples
    tracker.trident_recent = deque(maxlen=4096)
    return tracker


def busy_time_tracker(pool: Any, at_rest: Callable[[Any], int | None] | None = None) -> Any:
    """Give an actor ``pool`` per-node busy time and finished tasks (``trident_busy``: node id ->
    [actor-seconds with a task in flight, tasks finished]), kept as tasks are handed out and come
    back; each task's time is credited when it completes. With ``at_rest`` (an actor's memory now,
    bytes), each actor is read as it comes up, before Ray Data hands it a task (``trident_rest``:
    the smallest reading, bytes; no actor handle is kept: one would keep a released actor's
    process, and its memory, alive). Executor thread only."""
    if hasattr(pool, "trident_busy"):
        return pool
    cls = type(pool)

    class BusyTimePool(cls):  # type: ignore[misc, valid-type]
        def pending_to_running(self, ready_ref: Any) -> Any:
            actor = super().pending_to_running(ready_ref)
            if actor is not None and self.trident_at_rest is not None:
                try:
                    uss = self.trident_at_rest(actor)
                except Exception:  # noqa: BLE001 - a reading that fails is no reading; the pool goes on
                    uss = None
                if uss:
                    self.trident_rest = uss if self.trident_rest is None else min(self.trident_rest, uss)
            return actor

        def on_task_submitted(self, actor: Any) -> None:
            super().on_task_submitted(actor)
            if self._running_actors[actor].num_tasks_in_flight == 1:
                self.trident_since[actor] = time.perf_counter()

        def on_task_completed(self, actor: Any) -> None:
            super().on_task_completed(actor)
            state = self._running_actors.get(actor)
            since = self.trident_since.pop(actor, None)
            if state is None or since is None:
                return
            now = time.perf_counter()
            acc = self.trident_busy.setdefault(state.actor_location, [0.0, 0])
            acc[0] += now - since
            acc[1] += 1
            if state.num_tasks_in_flight > 0:
                self.trident_since[actor] = now

    BusyTimePool.__name__ = f"BusyTime{cls.__name__}"
    pool.__class__ = BusyTimePool
    pool.trident_busy, pool.trident_since, pool.trident_rest, pool.trident_at_rest = {}, {}, None, at_rest
    return pool


def usage_by_type(pool: Any, node_type: dict[str, str]) -> tuple[TypeUsage, ...]:
    """The pool's actors, busy time and finished tasks per accelerator type of their nodes."""
    if not node_type:
        return ()
    out: dict[str, list] = {}
    for node, (busy, tasks) in getattr(pool, "trident_busy", {}).items():
        if node in node_type:
            acc = out.setdefault(node_type[node], [0, 0.0, 0])
            acc[1] += busy
            acc[2] += tasks
    for state in pool._running_actors.values():
        t = node_type.get(state.actor_location)
        if t is not None:
            out.setdefault(t, [0, 0.0, 0])[0] += 1
    return tuple(TypeUsage(accelerator_type=t, actors=a, busy_s=b, tasks_finished=n)
                 for t, (a, b, n) in sorted(out.items()))


def batch_size_of(op: Any) -> int | None:
    """The batch size of the operator's own (last) batch transform, or ``None``."""
    transformer = getattr(op, "_map_transformer", None)
    fns = transformer.get_transform_fns() if transformer is not None else []
    for fn in reversed(fns):
        size = getattr(fn, "_batch_size", None)
        if size is not None or type(fn).__name__ == "BatchMapTransformFn":
            return size if isinstance(size, int) else None
    return None


def accelerator_of(remote_args: dict) -> str | None:
    for key in (remote_args.get("resources") or {}):
        if key.startswith(ACCELERATOR_PREFIX):
            return key[len(ACCELERATOR_PREFIX):]
    return None


class OperatorNames:
    """Stable, unique operator names for one execution (``name#i`` when a name repeats)."""

    def __init__(self, ops: list[Any]) -> None:
        counts: dict[str, int] = {}
        for op in ops:
            counts[op.name] = counts.get(op.name, 0) + 1
        self.by_op = {op: (op.name if counts[op.name] == 1 else f"{op.name}#{i}") for i, op in enumerate(ops)}
        self.by_name = {v: k for k, v in self.by_op.items()}


class SnapshotBuilder:
    """Builds snapshots of one execution; keeps the previous counters to compute rates."""

    def __init__(self, *, executor: Any, execution_id: str, kinds: dict[Any, str], names: OperatorNames,
                 cap_of: Any, cluster: ClusterWatch, held_of: Callable[[Any], int] = lambda op: 0,
                 ray_memory: bool = True) -> None:
        """``held_of(op)``: actors the pool would start and waits to (counted as pending);
        ``ray_memory``: under a memory limit, read what Ray's own processes hold beside the workers."""
        self.executor = executor
        self.held_of = held_of
        self.execution_id = execution_id
        self.kinds = kinds
        self.names = names
        self.cap_of = cap_of
        self.cluster = cluster
        self.seq = 0
        self._prev: dict[Any, tuple[float, int, int]] = {}
        self._rss: dict[Any, int] = {}
        self._live = ActorProcesses()
        self._waits = SlotWait()
        self._ray_memory = RayMemory() if ray_memory else None
        for op in executor._topology:
            if kinds[op] != "other":
                recent_samples_tracker(op.metrics.max_uss_bytes)
            if kinds[op] == "actor":  # before its first actors come up: each is read at rest
                busy_time_tracker(op.get_autoscaling_actor_pools()[0], self._live.uss_of)

    def snapshot(self, time_s: float, *, applied_plan_seq: int = 0) -> Snapshot:
        ops = tuple(self._operator(i, op, state, time_s) for i, (op, state) in enumerate(self.executor._topology.items()))
        self.seq += 1
        cluster = self.cluster.view(time_s)
        if cluster.memory_limit_bytes is not None and self._ray_memory is not None:  # a limit on all of Ray
            cluster = replace(cluster, other_memory_bytes=self._ray_memory.read(time_s, ops))
        return Snapshot(execution_id=self.execution_id, seq=self.seq, time_s=time_s, operators=ops,
                        cluster=cluster, input_rows_total=self._input_rows_total(),
                        applied_plan_seq=applied_plan_seq)

    def _input_rows_total(self) -> int | None:
        """Rows the source operator will emit in all, when Ray Data knows (from block metadata)."""
        source = next((op for op in self.executor._topology if self.kinds[op] != "other"), None)
        total = source.num_output_rows_total() if source is not None else None
        return int(total) if total is not None else None

    def config(self, op: Any) -> OperatorConfig:
        kind = self.kinds[op]
        args = getattr(op, "_ray_remote_args", None) or {}
        common = dict(batch_size=batch_size_of(op), num_cpus=float(args.get("num_cpus") or 0.0),
                      num_gpus=float(args.get("num_gpus") or 0.0), accelerator_type=accelerator_of(args))
        if kind == "actor":
            pool = op.get_autoscaling_actor_pools()[0]
            return OperatorConfig(kind="actor", replicas=pool.current_size() + self.held_of(op),
                                  min_replicas=pool.min_size(), max_replicas=pool.max_size(),
                                  max_concurrency=int(pool.max_actor_concurrency()), **common)
        if kind == "task":
            return OperatorConfig(kind="task", replicas=self.cap_of(op), min_replicas=1, **common)
        return OperatorConfig(kind="other", replicas=None, min_replicas=0)

    def _operator(self, index: int, op: Any, state: Any, time_s: float) -> OperatorSnapshot:
        m = op.metrics
        rows, nbytes = int(m.rows_task_outputs_generated), int(m.bytes_task_outputs_generated)
        prev_t, prev_rows, prev_bytes = self._prev.get(op, (None, 0, 0))
        dt = time_s - prev_t if prev_t is not None else 0.0
        self._prev[op] = (time_s, rows, nbytes)
        durations = m.op_task_duration_stats
        kind = self.kinds[op]
        actors = dict(actors_running=0, actors_pending=0, actors_idle=0, tasks_in_flight=0)
        by_type = ()
        live = rest = cpu_s = None
        if kind == "actor":
            info = op.get_actor_info()
            actors = dict(actors_running=info.running, actors_pending=info.pending + self.held_of(op),
                          actors_idle=info.idle, tasks_in_flight=info.tasks_in_flight)
            pool = op.get_autoscaling_actor_pools()[0]  # wrapped by busy_time_tracker at start
            by_type = usage_by_type(pool, self.cluster.node_type)
            old = getattr(pool, "trident_old", set())
            actors["old_actors"] = len(old & set(pool._running_actors))
            live = self._live.max_task_uss(pool, exclude=old)
            rest = getattr(pool, "trident_rest", None)
            cpu_s = self._live.pool_cpu_s(pool)
        rss_per_replica = None
        rss_total = None
        if kind != "other":
            recent = m.max_uss_bytes.drain_recent()
            if recent:
                self._rss[op] = int(max(recent))
            rss_per_replica = self._rss.get(op)
            workers = actors["actors_running"] if kind == "actor" else m.num_tasks_running
            rss_total = rss_per_replica * workers if rss_per_replica is not None else None
        backpressured = (getattr(m, "_task_submission_backpressure_start_time", -1) != -1
                         or not state._scheduling_status.under_resource_limits)
        return OperatorSnapshot(
            name=self.names.by_op[op], index=index, config=self.config(op),
            rows_out_total=rows, bytes_out_total=nbytes,
            rows_out_per_s=(rows - prev_rows) / dt if dt > 0 else 0.0,
            bytes_out_per_s=(nbytes - prev_bytes) / dt if dt > 0 else 0.0,
            rows_in_total=int(m.num_row_inputs_received), bytes_in_total=int(m.bytes_inputs_received),
            tasks_running=int(m.num_tasks_running), tasks_finished=int(m.num_tasks_finished),
            tasks_failed=int(m.num_tasks_failed),
            task_duration_p50_s=durations.p50 if durations.num_samples else None,
            task_duration_p90_s=durations.p90 if durations.num_samples else None,
            input_queue_blocks=int(state.total_enqueued_input_blocks()),
            input_queue_bytes=int(state.total_enqueued_input_blocks_bytes()),
            object_store_bytes=int(m.obj_store_mem_used),
            backpressured=bool(backpressured),
            heap_rss_bytes=rss_total, heap_rss_per_replica_bytes=rss_per_replica, heap_live_per_replica_bytes=live,
            heap_rest_per_replica_bytes=rest, cpu_s=cpu_s,
            busy_s=float(m.task_worker_completion_time_s),
            slot_s=_slot_s(m, self._waits.update(op, m)) if kind == "task" else None,
            rows_in_done_total=_rows_in_done(m),
            completed=bool(op.has_completed()),
            by_type=by_type,
            **actors,
        )


SCHEDULING_ALLOWANCE_S = 0.25
"""Seconds per task of a task operator's scheduling (driver launch to first output, less the
worker's own time) counted as holding its slot. Beyond it a task was waiting for a slot, not
holding one: for resources, or for a worker process to start. Measured here on a 2-core machine
(16 logical CPUs): 8-row tasks of 16 ms each spent 0.17-0.22 s per task in scheduling when
steady, 0.5-2.1 s while seven GPU actors started beside them."""


def _slot_s(m: Any, waited_s: float) -> float:
    """Seconds a task operator's finished tasks held their slots: from scheduling to completion
    as the driver measured them, less output backpressure and ``waited_s`` (scheduling beyond
    :data:`SCHEDULING_ALLOWANCE_S` per task, see :class:`SlotWait`), never less than the workers'
    own count. (A reader of 8-row blocks worked 16 ms per task and put out 8 rows per ~0.2 s;
    planned at its workers' time, 237 rows/s per task, it was capped to one task and starved the
    pipeline's GPU pool for 70 s. Planned with its waits while a GPU pool's actors started, it
    made 0.7 rows/s per task, and the plan drained that pool from 6 replicas to 2 to run 14 reads.)"""
    worker = float(m.task_worker_completion_time_s)
    return max(worker, float(m.task_completion_time_s) - float(m.task_output_backpressure_time_s) - waited_s)


class SlotWait:
    """Per task operator, the scheduling time its tasks spent waiting for a slot (seconds), summed
    over snapshots: each snapshot's new scheduling time beyond :data:`SCHEDULING_ALLOWANCE_S` for
    each newly scheduled task. (A running sum over the whole run would let the steady tasks after
    a slow start pay the start's waits back, and their slots would read as longer than they were.)"""

    def __init__(self) -> None:
        self._seen: dict[Any, tuple[float, int, float]] = {}
        """Per operator: scheduling seconds and scheduled tasks at the last update, waits so far."""

    def update(self, op: Any, m: Any) -> float:
        """The waits of ``op`` so far (seconds), with ``m`` its metrics now."""
        sched, tasks = float(m.task_scheduling_time_s), _scheduled_tasks(m)
        last_sched, last_tasks, waited = self._seen.get(op, (0.0, 0, 0.0))
        waited += max(0.0, (sched - last_sched) - (tasks - last_tasks) * SCHEDULING_ALLOWANCE_S)
        self._seen[op] = (sched, tasks, waited)
        return waited


def _scheduled_tasks(m: Any) -> int:
    """Tasks whose scheduling time Ray Data has counted (those that put out a block)."""
    return int(m.num_tasks_task_locality_hit) + int(m.num_tasks_task_locality_miss)


def _rows_in_done(m: Any) -> int:
    """Input rows of finished tasks: rows received x the byte fraction of them finished tasks
    consumed (Ray counts finished inputs in blocks and bytes, not rows)."""
    received = int(m.bytes_inputs_received)
    if received <= 0:
        return 0
    return int(round(int(m.num_row_inputs_received) * min(1.0, int(m.bytes_task_inputs_processed) / received)))


class NodeCensus(NamedTuple):
    """The cluster's live nodes, as :func:`node_census` reads them."""

    gpus: float
    """GPUs over every live node."""
    gpus_by_type: tuple[tuple[str, float], ...]
    cpus_by_type: tuple[tuple[str, float], ...]
    node_type: dict[str, str]
    """Node id -> accelerator type, for the nodes that name one."""
    nodes: tuple[NodeShape, ...] = ()


class ClusterWatch:
    """The cluster as one execution sees it: the executor's global limits, read at every
    snapshot (they are zero until the executor's first resource update), plus the live nodes'
    GPUs, per accelerator type and in all, and each node's type, re-read every
    ``nodes_every_s`` seconds, and this machine's cores and their busy time, read at every snapshot."""

    def __init__(self, resource_manager: Any, memory_limit_bytes: int | None, *, nodes_every_s: float = 30.0) -> None:
        self.resource_manager = resource_manager
        self.memory_limit_bytes = memory_limit_bytes
        self.nodes_every_s = nodes_every_s
        self._nodes = NodeCensus(0.0, (), (), {}, ())
        self._nodes_at_s: float | None = None

    @property
    def node_type(self) -> dict[str, str]:
        """Node id -> accelerator type, for the nodes that name one."""
        return self._nodes.node_type

    def view(self, time_s: float) -> ClusterView:
        if self._nodes_at_s is None or time_s - self._nodes_at_s >= self.nodes_every_s:
            self._nodes, self._nodes_at_s = node_census(), time_s
        limits = self.resource_manager.get_global_limits()
        store = limits.object_store_memory
        gpus = float(limits.gpu)
        options = getattr(self.resource_manager, "_options", None)
        if options is not None and self._nodes.gpus > 0:
            # Ray Data's limit is what its autoscaling coordinator reserved for the dataset (3.5 of
            # 4 GPUs for a minute and more, on typed and untyped nodes alike); trident scales pools
            # itself, so the live nodes' GPUs count, under the user's limit or the run's budget
            physical = self._nodes.gpus - float(options.exclude_resources.gpu)
            gpus = max(gpus, min(physical, float(options.resource_limits.gpu)))
        typed = tuple((t, min(g, gpus)) for t, g in self._nodes.gpus_by_type)  # a GPU budget caps every type
        cores, busy_s = host_cpu()
        # until the executor's first resource update its limits are zero: the live nodes' CPUs stand in
        cpus = float(limits.cpu) or sum(n.cpus for n in self._nodes.nodes)
        return ClusterView(cpus=cpus, gpus=gpus, gpus_by_type=typed,
                           cpus_by_type=self._nodes.cpus_by_type, nodes=self._nodes.nodes,
                           object_store_bytes=int(store) if 0 < store != float("inf") else None,
                           memory_limit_bytes=self.memory_limit_bytes, host_cores=cores, host_busy_s=busy_s)


def node_census() -> NodeCensus:
    """GPUs over the cluster's live nodes, in all and per accelerator type, CPUs per type, each
    typed node's type, and every live node's shape."""
    import ray

    nodes = node_shapes(ray.nodes())
    gpus: dict[str, float] = {}
    cpus: dict[str, float] = {}
    for n in nodes:
        if n.accelerator_type is not None:
            gpus[n.accelerator_type] = gpus.get(n.accelerator_type, 0.0) + n.gpus
            cpus[n.accelerator_type] = cpus.get(n.accelerator_type, 0.0) + n.cpus
    return NodeCensus(sum(n.gpus for n in nodes), tuple(sorted(gpus.items())), tuple(sorted(cpus.items())),
                      {n.node_id: n.accelerator_type for n in nodes if n.accelerator_type is not None}, nodes)
