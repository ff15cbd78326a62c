"""A fluid simulator of one Ray Data pipeline, driving the same ControlLoop with a simulated clock.

Rows flow as continuous quantities through a chain of operators. Each operator's
replicas process ``rate(batch, device) x regime x noise`` input rows per second, where
``rate = peak[device] * batch / (batch + half_batch_rows)``; a replica holds
``heap_base_bytes + heap_per_batch_row_bytes x batch x regime memory scale`` of heap once
warm (``heap_base_bytes`` is its memory at rest, read as a replica comes up). Regimes change an operator's speed, memory and row size, piecewise in time or in
dataset position. Input queues are bounded (``queue_limit_rows``): a full queue blocks
its upstream (backpressure). New replicas start after ``cold_start_s`` and only when
the cluster's CPUs and GPUs (per accelerator type) allow; when the warm replicas' heap
exceeds the memory limit, the OOM killer restarts the largest ones; the tasks a killed actor held
wait for it to be up again (Ray retries an actor's tasks on that actor).

Every ``interval_s`` the simulator builds a :class:`~trident.core.types.Snapshot` as the
Ray shim would (tasks in flight as Ray's actor pools count them: up to two per actor while
a backlog waits) and calls :meth:`ControlLoop.step`; plan targets are applied as the shim
applies them (:mod:`trident.autoscaler.shim.rollout`): sizes clamped to the pool's bounds; a
scale-down cancels pending replicas first, then drains busy ones, which finish the batch
they hold before they go; a configuration change is a rolling update in which each new
replica that is warm retires one old one (drained the same way); when no new one has
started for ``PENDING_GUARD_S``, or when the plan asks for it, it is a swap instead (old
replicas drain half the pool at a time, new ones start where old ones left). The contract
test (``tests/unit/test_actuation_contract.py``) holds the simulator and the shim's pool
driver to the same outcomes. Deterministic for a seed. The model of the pipeline lives in
:mod:`trident.autoscaler.sim.model`, the application of targets in
:mod:`trident.autoscaler.sim.actuation`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from trident.autoscaler.controller.loop import ControlLoop
from trident.core.policy import Policy, PolicyContext
from trident.core.errors import ConfigError
from trident.autoscaler.actuation import PENDING_GUARD_S  # noqa: F401 - a public name of the simulator
from trident.autoscaler.sim.actuation import Actuation, _Group, _OpState
from trident.autoscaler.sim.model import (  # noqa: F401 - the public names of the simulator
    CPU,
    PipelineSpec,
    Regime,
    SimNodes,
    SimOperator,
)
from trident.core.types import Decision, OperatorConfig, OperatorSnapshot, Snapshot, TypeUsage
from trident.report.record import Action


@dataclass(frozen=True)
class TimelinePoint:
    """The pipeline at one control step."""

    time_s: float
    throughput_rows_per_s: float
    replicas: tuple[tuple[str, int], ...]
    heap_bytes: float


@dataclass(frozen=True)
class SimResult:
    """What one simulated run achieved."""

    policy: str
    wall_s: float
    rows_out: float
    source_rows: int
    finished: bool
    throughput_rows_per_s: float
    """Dataset rows per simulated second, over the whole run."""
    reconfigurations: int
    oom_kills: int
    decisions: tuple[Decision, ...]
    timeline: tuple[TimelinePoint, ...] = field(default=())
    snapshots: tuple[Snapshot, ...] = field(default=())
    """Every snapshot the policy saw (what :func:`trident.history.lessons.learn` reads)."""
    actions: tuple[Action, ...] = field(default=())
    """``target_reached`` of each actor pool a plan sized or reconfigured, as the shim records it."""

    @property
    def ended_at_s(self) -> float:
        """The run's end (seconds): with ``decisions``, ``snapshots`` and ``actions``, what
        :func:`trident.report.predictions.plan_checks` reads of a run."""
        return self.wall_s


class PipelineSim:
    """Runs one :class:`PipelineSpec` under one policy; see the module docstring."""

    def __init__(self, spec: PipelineSpec, *, policy: str | Policy, seed: int = 0, interval_s: float = 1.0,
                 dt_s: float = 0.5, context: PolicyContext | None = None) -> None:
        if interval_s <= 0 or dt_s <= 0 or interval_s < dt_s:
            raise ConfigError("interval_s/dt_s", (interval_s, dt_s), "0 < dt_s <= interval_s")
        self.spec = spec
        self.interval_s = interval_s
        self.dt_s = dt_s
        self.rng = np.random.default_rng(seed)
        ctx = context or PolicyContext(memory_limit_bytes=spec.memory_limit_bytes, seed=seed)
        self.loop = ControlLoop(policy=policy, context=ctx)
        self.policy_name = policy if isinstance(policy, str) else getattr(policy, "name", type(policy).__name__)
        self.time_s = 0.0
        self.source_left = float(spec.total_rows)
        self.oom_kills = 0
        self.applied_seq = 0
        self.ops = [self._initial(o) for o in spec.operators]
        self.actuation = Actuation(spec, self.ops, now=lambda: self.time_s, regime=self._regime)
        self.timeline: list[TimelinePoint] = []
        self.snapshots: list[Snapshot] = []
        self.actions: list[Action] = []
        self.reach: dict[str, tuple[int, float]] = {}
        """Actor pools a plan moved and not yet where it put them: (replicas wanted, since when)."""
        self.actuation.start_pending()

    def _initial(self, o: SimOperator) -> _OpState:
        g = _Group(count=o.replicas, batch_size=o.batch_size, num_gpus=o.num_gpus, accelerator_type=o.accelerator_type,
                   ready_at_s=None)
        return _OpState(spec=o, groups=[g], config_replicas=o.replicas, batch_size=o.batch_size, num_gpus=o.num_gpus,
                        accelerator_type=o.accelerator_type)

    # --- the fluid step --------------------------------------------------------------

    def _regime(self, i: int, st: _OpState) -> Regime:
        f = math.prod(o.spec.selectivity for o in self.ops[:i])
        return st.spec.regime(self.time_s, st.rows_in / f if f > 0 else 0.0)

    def _warm(self, st: _OpState) -> list[_Group]:
        return [g for g in st.groups if g.ready_at_s is not None and g.ready_at_s <= self.time_s]

    def _oom(self) -> None:
        if self.spec.memory_limit_bytes is None:
            return
        heaps = []
        for i, st in enumerate(self.ops):
            reg = self._regime(i, st)
            for g in self._warm(st):
                heaps.append((st.spec.heap_bytes(g.batch_size, reg), g, st, i))
        total = sum(h * g.count for h, g, _, _ in heaps)
        for h, g, st, i in sorted(heaps, key=lambda x: -x[0]):
            while total > self.spec.memory_limit_bytes and g.count > 0 and h > 0:
                g.count -= 1  # the largest worker is killed and restarted: a cold start again, and
                total -= h  # the tasks it held (two in flight) wait for it (Ray retries them on it)
                self.oom_kills += 1
                st.failed += 1
                held = min(st.queue_rows, 2.0 * (g.batch_size or self.spec.rows_per_block)) if i > 0 else 0.0
                st.queue_rows -= held
                st.held_rows += held
                st.groups.append(_Group(count=1, batch_size=g.batch_size, num_gpus=g.num_gpus,
                                        accelerator_type=g.accelerator_type, ready_at_s=None, held_rows=held))
        for st in self.ops:
            st.groups = [g for g in st.groups if g.count > 0]
        self.actuation.start_pending()

    def _advance(self, dt: float) -> None:
        self.actuation.spawn(dt)
        self.actuation.finish_rollouts()
        self.actuation.start_pending()
        self._oom()
        latency = self._task_latency_s()
        for i, st in enumerate(self.ops):
            self._release(st)
            spec, reg = st.spec, self._regime(i, st)
            upstream_done = i == 0 or self.ops[i - 1].completed
            avail = self.source_left if i == 0 else st.queue_rows
            caps = [(g, g.count * self._task_rate(spec.rate_rows_per_s(
                spec.device(g.gpu_type or g.accelerator_type, g.num_gpus), g.batch_size, reg), spec, latency))
                for g in self._warm(st)]
            cap = sum(c for _, c in caps)
            speed = math.exp(self.rng.normal(0.0, self.spec.noise) - self.spec.noise ** 2 / 2)
            if self.rng.random() < self.spec.spike_prob:
                speed *= self.rng.uniform(1.5, 2.5)
            cap *= speed
            room = math.inf
            if i + 1 < len(self.ops):
                room = max(self.spec.queue_limit_rows - self.ops[i + 1].queue_rows, 0.0) / spec.selectivity
            done = min(avail, cap * dt, room)
            st.backpressured = room < min(avail, cap * dt)
            st.utilisation = done / (cap * dt) if cap > 0 else 0.0
            warm_n = sum(g.count for g in self._warm(st))
            st.busy_s += (done / cap * warm_n) if cap > 0 else 0.0
            for g, c in caps:  # every replica as busy as the pool; each group's share of the rows
                if g.gpu_type is not None and cap > 0:
                    used = st.by_type.setdefault(g.gpu_type, [0.0, 0.0])
                    used[0] += done / cap * g.count
                    used[1] += done * c / cap / (g.batch_size or self.spec.rows_per_block)
            if i == 0:
                self.source_left -= done
            else:
                st.queue_rows -= done
            st.rows_in += done
            st.tasks += done / (st.batch_size or self.spec.rows_per_block)
            st.bytes_in += done * self.spec.input_bytes_per_row * reg.bytes_per_row_scale
            st.rows_out += done * spec.selectivity
            if i + 1 < len(self.ops):
                self.ops[i + 1].queue_rows += done * spec.selectivity
            left = self.source_left if i == 0 else st.queue_rows + st.held_rows
            st.completed = upstream_done and left <= 1e-6
            if st.completed and spec.kind == "actor" and st.groups:  # as Ray Data and the shim release
                st.groups, st.config_replicas = [], 0  # a finished pool's actors ("consumed all inputs")
        self.time_s += dt

    def _release(self, st: _OpState) -> None:
        """Rows killed replicas held go back to the queue once their replica is up again (or the
        pool let it go before it was)."""
        if st.held_rows <= 0:
            return
        back = 0.0
        for g in self._warm(st):
            back, g.held_rows = back + g.held_rows, 0.0
        back += max(st.held_rows - back - sum(g.held_rows for g in st.groups), 0.0)
        st.held_rows -= back
        st.queue_rows += back

    def _task_latency_s(self) -> float:
        """A task's seconds beyond its work now: :attr:`PipelineSpec.task_latency_s`, or more where
        the tasks running at once (the task operators' busy replicas at the last step) take the
        host's cores (:attr:`PipelineSpec.task_overhead_s`)."""
        if self.spec.task_overhead_s <= 0:
            return self.spec.task_latency_s
        at_once = sum(sum(g.count for g in self._warm(st)) * st.utilisation
                      for st in self.ops if st.spec.kind == "task")
        return max(self.spec.task_latency_s, at_once * self.spec.task_overhead_s / self.spec.host_cores)

    def _task_rate(self, rate: float, op: SimOperator, latency_s: float) -> float:
        """A replica's rows/s with a task operator's per-task latency of ``latency_s``."""
        if op.kind != "task" or latency_s <= 0 or rate <= 0:
            return rate
        rows = self.spec.rows_per_block
        return rows / (rows / rate + latency_s)

    # --- snapshots -------------------------------------------------------------------

    def snapshot(self, seq: int) -> Snapshot:
        ops = []
        for i, st in enumerate(self.ops):
            spec, reg = st.spec, self._regime(i, st)
            warm = self._warm(st)
            warm_n = sum(g.count for g in warm)
            starting = sum(g.count for g in st.groups if g not in warm)
            heap = sum(g.count * spec.heap_bytes(g.batch_size, reg) for g in warm)
            per_replica = max((spec.heap_bytes(g.batch_size, reg) for g in warm if g.count), default=None)
            rate_out = (st.rows_out - st.last_rows_out) / self.interval_s
            bytes_out = st.rows_out * self.spec.input_bytes_per_row * reg.bytes_per_row_scale
            queue = self.source_left if i == 0 else st.queue_rows
            ops.append(OperatorSnapshot(
                name=spec.name, index=i,
                config=OperatorConfig(kind=spec.kind, replicas=st.config_replicas, min_replicas=spec.min_replicas,
                                      max_replicas=spec.max_replicas, batch_size=st.batch_size, num_cpus=spec.num_cpus,
                                      num_gpus=st.num_gpus, accelerator_type=st.accelerator_type),
                rows_out_total=int(st.rows_out), bytes_out_total=int(bytes_out),
                rows_out_per_s=rate_out, bytes_out_per_s=(bytes_out - st.last_bytes_out) / self.interval_s,
                rows_in_total=int(st.rows_in), bytes_in_total=int(st.bytes_in),
                tasks_running=warm_n if queue > 0 else 0, tasks_finished=int(st.tasks), tasks_failed=st.failed,
                input_queue_blocks=int(queue // self.spec.rows_per_block),
                input_queue_bytes=int(queue * self.spec.input_bytes_per_row * reg.bytes_per_row_scale),
                actors_running=warm_n if spec.kind == "actor" else 0,
                actors_pending=starting if spec.kind == "actor" else 0,
                actors_idle=warm_n if spec.kind == "actor" and queue <= 0 else 0,
                tasks_in_flight=self._in_flight(st, warm_n, queue),
                backpressured=st.backpressured,
                heap_rss_bytes=int(heap), heap_rss_per_replica_bytes=None if per_replica is None else int(per_replica),
                heap_rest_per_replica_bytes=(int(spec.heap_base_bytes) if spec.kind == "actor" and spec.heap_base_bytes > 0
                                             and warm_n > 0 else None),
                busy_s=st.busy_s, completed=st.completed, by_type=self._by_type(st, warm),
                old_actors=sum(g.count for g in warm if g.retiring) if spec.kind == "actor" else 0,
            ))
            st.last_rows_out, st.last_bytes_out = st.rows_out, bytes_out
        return Snapshot(execution_id="sim", seq=seq, time_s=self.time_s, operators=tuple(ops),
                        cluster=self.spec.cluster_view(), input_rows_total=self.spec.total_rows,
                        applied_plan_seq=self.applied_seq)

    @staticmethod
    def _by_type(st: _OpState, warm: list[_Group]) -> tuple[TypeUsage, ...]:
        """A GPU pool's actors, busy time and finished tasks per type of their nodes, as the shim
        reads them (:func:`trident.autoscaler.shim.metrics.usage_by_type`)."""
        if st.spec.kind != "actor":
            return ()
        actors: dict[str, int] = {}
        for g in warm:
            if g.gpu_type is not None:
                actors[g.gpu_type] = actors.get(g.gpu_type, 0) + g.count
        return tuple(TypeUsage(accelerator_type=t, actors=actors.get(t, 0), busy_s=busy, tasks_finished=int(tasks))
                     for t, (busy, tasks) in sorted(st.by_type.items()))

    def _in_flight(self, st: _OpState, warm_n: int, queue_rows: float) -> int:
        """Tasks in flight as Ray's pools count them: the busy share of the replicas, plus one
        more per replica while blocks wait (an actor holds at most two)."""
        if st.spec.kind != "actor" or warm_n == 0:
            return 0
        queued_blocks = math.ceil(queue_rows / self.spec.rows_per_block) if queue_rows > 1e-6 else 0
        return int(round(warm_n * st.utilisation)) + min(warm_n, queued_blocks)

    def run(self, *, max_time_s: float = 3_600.0) -> SimResult:
        """Simulate until the dataset is through the pipeline or ``max_time_s`` passes."""
        seq = 0
        steps = max(1, int(round(self.interval_s / self.dt_s)))
        while self.time_s < max_time_s and not self.ops[-1].completed:
            for _ in range(steps):
                self._advance(self.interval_s / steps)
            seq += 1
            snap = self.snapshot(seq)
            self.snapshots.append(snap)
            self._record_reached()
            self.timeline.append(TimelinePoint(
                time_s=self.time_s, throughput_rows_per_s=snap.operators[0].rows_out_per_s / max(
                    self.spec.operators[0].selectivity, 1e-12),
                replicas=tuple((s.spec.name, s.config_replicas) for s in self.ops),
                heap_bytes=float(sum(o.heap_rss_bytes or 0 for o in snap.operators))))
            decision = self.loop.step(snap, self.time_s)
            if decision.plan is not None and decision.plan.seq != self.applied_seq:
                self.applied_seq = decision.plan.seq
                for t in decision.plan.targets:
                    self.actuation.apply(t)
                    st = self.actuation.state(t.name)
                    if st is not None and st.spec.kind == "actor":
                        self.reach[t.name] = (st.config_replicas, self.time_s)
        src = self.spec.total_rows - self.source_left
        return SimResult(
            policy=self.policy_name, wall_s=self.time_s, rows_out=self.ops[-1].rows_out, source_rows=int(round(src)),
            finished=self.ops[-1].completed, throughput_rows_per_s=src / self.time_s if self.time_s else 0.0,
            reconfigurations=self.actuation.reconfigurations, oom_kills=self.oom_kills,
            decisions=tuple(self.loop.decisions), timeline=tuple(self.timeline), snapshots=tuple(self.snapshots),
            actions=tuple(self.actions))

    def _record_reached(self) -> None:
        """A ``target_reached`` action for each moved pool whose wanted replicas are all warm in
        its new configuration, none pending and no old replica left to retire (the shim's rule;
        replicas draining their last batch do not count)."""
        for name, (want, since) in list(self.reach.items()):
            st = self.actuation.state(name)
            live = [g for g in st.groups if g.release_at_s is None]
            new = sum(g.count for g in live if not g.retiring and self.actuation.is_warm(g))
            waiting = any(not self.actuation.is_warm(g) for g in live) or any(g.retiring for g in live)
            if new == want and not waiting:
                del self.reach[name]
                self.actions.append(Action(time_s=self.time_s, operator=name, kind="target_reached",
                                           detail=f"{want} replica(s) up {self.time_s - since:.0f} s after the plan",
                                           value=self.time_s - since))


def simulate(spec: PipelineSpec, *, policy: str | Policy, seed: int = 0, max_time_s: float = 3_600.0,
             interval_s: float = 1.0, context: PolicyContext | None = None) -> SimResult:
    """Run ``spec`` under ``policy`` (a registered name or an instance) and return what it achieved."""
    return PipelineSim(spec, policy=policy, seed=seed, interval_s=interval_s, context=context).run(
        max_time_s=max_time_s)
