"""A fluid simulator of one Ray Data pipeline, driving the same ControlLoop with a simulated clock.

Rows flow as continuous quantities through a chain of operators. Each operator's
replicas process ``rate(batch, device) x regime x noise`` input rows per second, where
``rate = peak[device] * batch / (batch + half_batch_rows)``; a replica holds
``heap_base_bytes + heap_per_batch_row_bytes x batch x regime memory scale`` of heap once
warm. Regimes change an operator's speed, memory and row size, piecewise in time or in
dataset position. Input queues are bounded (``queue_limit_rows``): a full queue blocks
its upstream (backpressure). New replicas start after ``cold_start_s`` and only when
the cluster's CPUs and GPUs (per accelerator type) allow; when the warm replicas' heap
exceeds the memory limit, the OOM killer restarts the largest ones.

Every ``interval_s`` the simulator builds a :class:`~trident.types.Snapshot` as the
Ray shim would (tasks in flight as Ray's actor pools count them: up to two per actor while
a backlog waits) and calls :meth:`ControlLoop.step`; plan targets are applied as the shim
applies them (:mod:`trident.ray_data.rollout`): sizes clamped to the pool's bounds; a
scale-down cancels pending replicas first, then drains busy ones, which finish the batch
they hold before they go; a configuration change is a rolling update in which each new
replica that is warm retires one old one (drained the same way); when no new one has
started for ``PENDING_GUARD_S``, or when the plan asks for it, it is a swap instead (old
replicas drain half the pool at a time, new ones start where old ones left). The contract
test (``tests/unit/test_actuation_contract.py``) holds the simulator and the shim's pool
driver to the same outcomes. Deterministic for a seed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from trident.control.loop import ControlLoop
from trident.control.policy import Policy, PolicyContext
from trident.errors import ConfigError
from trident.plan.rollout import swap_window
from trident.types import (
    ClusterView,
    Decision,
    OperatorConfig,
    OperatorSnapshot,
    OperatorTarget,
    Snapshot,
)

CPU = "cpu"
PENDING_GUARD_S = 15.0
"""Seconds a rolling update waits for a new replica to start before it goes on as a swap (as
:class:`trident.ray_data.rollout.Rollout`)."""


@dataclass(frozen=True)
class Regime:
    """From ``start`` on (seconds or dataset rows, per the operator's ``regime_by``), the
    operator runs at ``rate_scale`` x its speed, ``memory_scale`` x its per-batch heap, and its
    input rows are ``bytes_per_row_scale`` x as large."""

    start: float
    rate_scale: float = 1.0
    memory_scale: float = 1.0
    bytes_per_row_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.start < 0:
            raise ConfigError("Regime.start", self.start, "a number >= 0")
        if min(self.rate_scale, self.memory_scale, self.bytes_per_row_scale) <= 0:
            raise ConfigError("Regime scales", (self.rate_scale, self.memory_scale, self.bytes_per_row_scale),
                              "numbers > 0")


@dataclass(frozen=True, kw_only=True)
class SimOperator:
    """One operator: its cost and memory curves, resources per replica, and starting configuration."""

    name: str
    kind: Literal["task", "actor"]
    peak_rows_per_s: tuple[tuple[str, float], ...]
    """Input rows per second of one replica at a very large batch, per device ('cpu' or a GPU type)."""
    half_batch_rows: float = 0.0
    selectivity: float = 1.0
    replicas: int
    min_replicas: int = 1
    max_replicas: int | None = None
    batch_size: int | None = None
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    accelerator_type: str | None = None
    heap_base_bytes: float = 0.0
    heap_per_batch_row_bytes: float = 0.0
    cold_start_s: float = 0.0
    regimes: tuple[Regime, ...] = ()
    regime_by: Literal["time", "rows"] = "time"

    def __post_init__(self) -> None:
        if self.kind not in ("task", "actor"):
            raise ConfigError(f"{self.name}.kind", self.kind, "'task' or 'actor'")
        if not self.peak_rows_per_s or any(r <= 0 for _, r in self.peak_rows_per_s):
            raise ConfigError(f"{self.name}.peak_rows_per_s", self.peak_rows_per_s, "(device, rows/s > 0) pairs")
        if self.selectivity <= 0:
            raise ConfigError(f"{self.name}.selectivity", self.selectivity, "a number > 0")
        if self.replicas < 0 or self.cold_start_s < 0 or self.half_batch_rows < 0:
            raise ConfigError(f"{self.name}.replicas/cold_start_s/half_batch_rows",
                              (self.replicas, self.cold_start_s, self.half_batch_rows), "numbers >= 0")
        if self.regime_by not in ("time", "rows"):
            raise ConfigError(f"{self.name}.regime_by", self.regime_by, "'time' or 'rows'")
        if self.num_gpus > 0 and self.device(self.accelerator_type, self.num_gpus) not in dict(self.peak_rows_per_s):
            raise ConfigError(f"{self.name}.accelerator_type", self.accelerator_type,
                              f"a device of peak_rows_per_s ({[d for d, _ in self.peak_rows_per_s]})")

    def device(self, accelerator_type: str | None, num_gpus: float) -> str:
        if num_gpus <= 0:
            return CPU
        return accelerator_type or next(d for d, _ in self.peak_rows_per_s if d != CPU)

    def regime(self, time_s: float, dataset_row: float) -> Regime:
        pos = time_s if self.regime_by == "time" else dataset_row
        current = Regime(start=0.0)
        for r in sorted(self.regimes, key=lambda r: r.start):
            if r.start <= pos:
                current = r
        return current

    def rate_rows_per_s(self, device: str, batch_size: int | None, regime: Regime) -> float:
        """Input rows per second of one warm replica (0 on a device it cannot use)."""
        peak = dict(self.peak_rows_per_s).get(device, 0.0)
        b = batch_size or 1024
        return peak * (b / (b + self.half_batch_rows)) * regime.rate_scale

    def heap_bytes(self, batch_size: int | None, regime: Regime) -> float:
        return self.heap_base_bytes + self.heap_per_batch_row_bytes * (batch_size or 1024) * regime.memory_scale


@dataclass(frozen=True, kw_only=True)
class SimNodes:
    """``count`` identical nodes."""

    count: int
    cpus: float
    gpus: float = 0.0
    gpu_type: str | None = None


@dataclass(frozen=True, kw_only=True)
class PipelineSpec:
    """A pipeline (operators in order; the first reads the dataset), its cluster and data."""

    operators: tuple[SimOperator, ...]
    nodes: tuple[SimNodes, ...]
    total_rows: int
    input_bytes_per_row: float = 1e5
    memory_limit_bytes: int | None = None
    queue_limit_rows: float = 5_000.0
    rows_per_block: int = 100
    noise: float = 0.05
    """Relative standard deviation of a replica's speed from one step to the next."""
    spike_prob: float = 0.02
    """Chance per operator per step of a burst (continuous batching) of 1.5-2.5x speed."""

    def __post_init__(self) -> None:
        if not self.operators:
            raise ConfigError("operators", self.operators, "at least one SimOperator")
        if self.total_rows <= 0:
            raise ConfigError("total_rows", self.total_rows, "an integer > 0")
        if self.queue_limit_rows <= 0 or self.rows_per_block <= 0:
            raise ConfigError("queue_limit_rows/rows_per_block", (self.queue_limit_rows, self.rows_per_block),
                              "numbers > 0")
        if self.noise < 0 or not 0 <= self.spike_prob <= 1:
            raise ConfigError("noise/spike_prob", (self.noise, self.spike_prob), "noise >= 0, spike_prob in [0, 1]")

    def cluster_view(self) -> ClusterView:
        by_type: dict[str, float] = {}
        cpus_by_type: dict[str, float] = {}
        for n in self.nodes:
            if n.gpus > 0:
                t = n.gpu_type or "gpu"
                by_type[t] = by_type.get(t, 0.0) + n.count * n.gpus
                cpus_by_type[t] = cpus_by_type.get(t, 0.0) + n.count * n.cpus
        return ClusterView(cpus=sum(n.count * n.cpus for n in self.nodes),
                           gpus=sum(n.count * n.gpus for n in self.nodes),
                           gpus_by_type=tuple(sorted(by_type.items())),
                           cpus_by_type=tuple(sorted(cpus_by_type.items())), memory_limit_bytes=self.memory_limit_bytes)


@dataclass
class _Group:
    """Replicas of one configuration started together."""

    count: int
    batch_size: int | None
    num_gpus: float
    accelerator_type: str | None
    ready_at_s: float | None  # None while waiting for resources
    gpu_type: str | None = None
    retiring: bool = False
    """Old configuration, retired one for each new replica that is warm."""
    release_at_s: float | None = None
    """Set while draining: the replicas finish the batch they hold and go at this time."""


@dataclass
class _OpState:
    spec: SimOperator
    groups: list[_Group]
    queue_rows: float = 0.0
    rows_in: float = 0.0
    rows_out: float = 0.0
    bytes_in: float = 0.0
    busy_s: float = 0.0
    failed: int = 0
    config_replicas: int = 0
    batch_size: int | None = None
    num_gpus: float = 0.0
    accelerator_type: str | None = None
    backpressured: bool = False
    completed: bool = False
    last_rows_out: float = 0.0
    last_bytes_out: float = 0.0
    utilisation: float = 0.0
    """Share of the warm replicas' capacity used in the last step (0-1)."""
    retired: int = 0
    """Old replicas retired in the rolling update in progress."""
    rollout_started_s: float | None = None
    swap: bool = False
    """The rolling update in progress swaps old replicas for new ones half the pool at a time."""
    swap_cap: int = 0
    """Most replicas while old ones are left in a swap: the smaller of the old and new pools."""


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
        self.reconfigurations = 0
        self.applied_seq = 0
        self.ops = [self._initial(o) for o in spec.operators]
        self.timeline: list[TimelinePoint] = []
        self._start_pending()

    def _initial(self, o: SimOperator) -> _OpState:
        g = _Group(count=o.replicas, batch_size=o.batch_size, num_gpus=o.num_gpus, accelerator_type=o.accelerator_type,
                   ready_at_s=None)
        return _OpState(spec=o, groups=[g], config_replicas=o.replicas, batch_size=o.batch_size, num_gpus=o.num_gpus,
                        accelerator_type=o.accelerator_type)

    # --- resources -------------------------------------------------------------------

    def _free(self) -> tuple[float, dict[str, float]]:
        cpus = sum(n.count * n.cpus for n in self.spec.nodes)
        gpus: dict[str, float] = {}
        for n in self.spec.nodes:
            if n.gpus > 0:
                gpus[n.gpu_type or "gpu"] = gpus.get(n.gpu_type or "gpu", 0.0) + n.count * n.gpus
        for st in self.ops:
            for g in st.groups:
                if g.ready_at_s is not None:
                    cpus -= g.count * st.spec.num_cpus
                    if g.num_gpus > 0:
                        gpus[g.gpu_type] -= g.count * g.num_gpus
        return cpus, gpus

    def _start_pending(self) -> None:
        """Start waiting groups, in order, while the cluster has room (partially when it has some)."""
        cpus, gpus = self._free()
        for st in self.ops:
            for g in list(st.groups):
                if g.ready_at_s is not None or g.count == 0:
                    continue
                types = [g.accelerator_type] if g.accelerator_type else sorted(gpus, key=lambda t: -gpus[t])
                for t in types if g.num_gpus > 0 else [None]:
                    fit = g.count
                    if st.spec.num_cpus > 0:
                        fit = min(fit, int(cpus // st.spec.num_cpus + 1e-9))
                    if g.num_gpus > 0:
                        fit = min(fit, int(gpus.get(t, 0.0) // g.num_gpus + 1e-9))
                    if fit <= 0:
                        continue
                    cold = 0.0 if st.spec.kind == "task" else st.spec.cold_start_s
                    started = _Group(count=fit, batch_size=g.batch_size, num_gpus=g.num_gpus,
                                     accelerator_type=g.accelerator_type, ready_at_s=self.time_s + cold, gpu_type=t)
                    st.groups.insert(st.groups.index(g), started)
                    g.count -= fit
                    cpus -= fit * st.spec.num_cpus
                    if t is not None:
                        gpus[t] -= fit * g.num_gpus
                    if g.count == 0:
                        break
            st.groups = [g for g in st.groups if g.count > 0]

    # --- plan application ------------------------------------------------------------

    def _apply(self, target: OperatorTarget) -> None:
        st = next((s for s in self.ops if s.spec.name == target.name), None)
        if st is None:
            return
        new_batch = target.batch_size if target.batch_size is not None else st.batch_size
        new_gpus = target.num_gpus if target.num_gpus is not None else st.num_gpus
        new_type = target.accelerator_type if target.accelerator_type is not None else st.accelerator_type
        n = st.config_replicas if target.replicas is None else target.replicas
        lo, hi = st.spec.min_replicas, st.spec.max_replicas
        n = max(lo, n if hi is None else min(hi, n))
        changed_cfg = (new_batch, new_gpus, new_type) != (st.batch_size, st.num_gpus, st.accelerator_type)
        if changed_cfg and st.spec.kind == "actor":
            for g in st.groups:
                if not self._is_warm(g):
                    g.count = 0  # pending replicas would come up with the old configuration
                g.retiring = True
            st.groups = [g for g in st.groups if g.count > 0]
            st.retired, st.rollout_started_s, st.swap = 0, self.time_s, target.swap
            st.swap_cap = min(n, sum(g.count for g in st.groups))
        elif changed_cfg:  # tasks pick up a new configuration with their next task
            for g in st.groups:
                g.batch_size, g.num_gpus, g.accelerator_type = new_batch, new_gpus, new_type
                if g.ready_at_s is not None and g.num_gpus > 0 and new_type and g.gpu_type != new_type:
                    g.ready_at_s, g.gpu_type = None, None
        if changed_cfg or n != st.config_replicas:
            self.reconfigurations += 1
        st.batch_size, st.num_gpus, st.accelerator_type = new_batch, new_gpus, new_type
        live = sum(g.count for g in st.groups if not g.retiring and g.release_at_s is None)
        for g in st.groups:  # a rising target puts drained replicas back to work first
            if n > live and g.release_at_s is not None and not g.retiring:
                back = min(n - live, g.count)
                if back < g.count:
                    st.groups.append(replace(g, count=g.count - back))
                g.count, g.release_at_s = back, None
                live += back
        if st.swap:  # new replicas start where old ones leave (:meth:`_swap`)
            live = n
        if n > live:
            st.groups.append(_Group(count=n - live, batch_size=new_batch, num_gpus=new_gpus,
                                    accelerator_type=new_type, ready_at_s=None))
        elif n < live and not st.swap:
            self._remove(st, live - n)
        st.config_replicas = n
        self._start_pending()

    def _remove(self, st: _OpState, k: int) -> None:
        """Scale down by ``k``: pending replicas are cancelled first (the newest first), then warm
        ones are drained: they finish the batch they hold and go (:meth:`_drain`)."""
        order = sorted((g for g in st.groups if not g.retiring and g.release_at_s is None),
                       key=lambda g: (self._is_warm(g), -(g.ready_at_s or 0.0)))
        for g in order:
            take = min(k, g.count)
            if self._is_warm(g):
                self._drain(st, g, take)
            else:
                g.count -= take
            k -= take
            if k == 0:
                break
        st.groups = [g for g in st.groups if g.count > 0]

    def _is_warm(self, g: _Group) -> bool:
        return g.ready_at_s is not None and g.ready_at_s <= self.time_s

    def _drain(self, st: _OpState, g: _Group, k: int) -> None:
        """``k`` warm replicas of ``g`` stop getting work and go once their batch is done."""
        if k <= 0:
            return
        dev = st.spec.device(g.gpu_type or g.accelerator_type, g.num_gpus)
        rate = st.spec.rate_rows_per_s(dev, g.batch_size, self._regime(self.ops.index(st), st))
        batch_s = (g.batch_size or 1) / rate if rate > 0 else 0.0
        g.count -= k
        st.groups.append(_Group(count=k, batch_size=g.batch_size, num_gpus=g.num_gpus,
                                accelerator_type=g.accelerator_type, ready_at_s=g.ready_at_s, gpu_type=g.gpu_type,
                                retiring=g.retiring, release_at_s=self.time_s + batch_s))

    def _finish_rollouts(self) -> None:
        """Release drained replicas whose batch is done; in a rolling update retire one old
        replica for each new one that is warm, and one to make room when no new replica has
        started for ``PENDING_GUARD_S`` (as the shim's :class:`~trident.ray_data.rollout.Rollout`)."""
        for st in self.ops:
            st.groups = [g for g in st.groups if g.release_at_s is None or g.release_at_s > self.time_s]
            old = [g for g in st.groups if g.retiring and g.release_at_s is None]
            if st.swap:
                self._swap(st, old)
                continue
            if not old:
                st.rollout_started_s = None
                continue
            warm_new = sum(g.count for g in st.groups if not g.retiring and self._is_warm(g)
                           and g.release_at_s is None)
            k = max(0, warm_new - st.retired)
            started = any(not g.retiring and g.ready_at_s is not None for g in st.groups)
            if k == 0 and not started and self.time_s - (st.rollout_started_s or self.time_s) > PENDING_GUARD_S:
                st.swap, st.swap_cap = True, min(st.config_replicas, sum(g.count for g in st.groups if g.retiring))
                self._swap(st, old)
                continue
            self._retire(st, old, k)

    def _retire(self, st: _OpState, old: list[_Group], k: int) -> None:
        """Drain ``k`` old replicas of a rolling update."""
        for g in old:
            take = min(k, g.count)
            self._drain(st, g, take)
            st.retired += take
            k -= take
        st.groups = [g for g in st.groups if g.count > 0]

    def _swap(self, st: _OpState, old: list[_Group]) -> None:
        """A swap (as the shim's): old replicas drain half the pool at a time
        (:func:`~trident.plan.rollout.swap_window`), counting new ones still starting; new ones
        start in the room the old ones leave, old and new together never more than ``swap_cap``
        until the last old one is gone."""
        n = st.config_replicas
        alive_old = sum(g.count for g in st.groups if g.retiring)
        new = sum(g.count for g in st.groups if not g.retiring)
        most = min(n, st.swap_cap) if alive_old else n
        excess = new - max(most - alive_old, 0)
        for g in st.groups:  # new replicas still waiting beyond the room: cancelled
            if excess > 0 and not g.retiring and g.ready_at_s is None:
                take = min(excess, g.count)
                g.count -= take
                excess -= take
        new = sum(g.count for g in st.groups if not g.retiring)
        if new < most - alive_old:
            st.groups.append(_Group(count=most - alive_old - new, batch_size=st.batch_size, num_gpus=st.num_gpus,
                                    accelerator_type=st.accelerator_type, ready_at_s=None))
        starting = sum(g.count for g in st.groups if not g.retiring and not self._is_warm(g))
        draining = sum(g.count for g in st.groups if g.retiring and g.release_at_s is not None)
        self._retire(st, old, max(0, swap_window(n, alive_old) - draining - starting))
        if not any(g.retiring for g in st.groups):
            st.swap, st.rollout_started_s = False, None

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
                heaps.append((st.spec.heap_bytes(g.batch_size, reg), g, st))
        total = sum(h * g.count for h, g, _ in heaps)
        for h, g, st in sorted(heaps, key=lambda x: -x[0]):
            while total > self.spec.memory_limit_bytes and g.count > 0 and h > 0:
                g.count -= 1  # the largest worker is killed and restarted: a cold start again
                total -= h
                self.oom_kills += 1
                st.failed += 1
                st.groups.append(_Group(count=1, batch_size=g.batch_size, num_gpus=g.num_gpus,
                                        accelerator_type=g.accelerator_type, ready_at_s=None))
        for st in self.ops:
            st.groups = [g for g in st.groups if g.count > 0]
        self._start_pending()

    def _advance(self, dt: float) -> None:
        self._finish_rollouts()
        self._start_pending()
        self._oom()
        for i, st in enumerate(self.ops):
            spec, reg = st.spec, self._regime(i, st)
            upstream_done = i == 0 or self.ops[i - 1].completed
            avail = self.source_left if i == 0 else st.queue_rows
            cap = 0.0
            for g in self._warm(st):
                dev = spec.device(g.gpu_type or g.accelerator_type, g.num_gpus)
                cap += g.count * spec.rate_rows_per_s(dev, g.batch_size, reg)
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
            if i == 0:
                self.source_left -= done
            else:
                st.queue_rows -= done
            st.rows_in += done
            st.bytes_in += done * self.spec.input_bytes_per_row * reg.bytes_per_row_scale
            st.rows_out += done * spec.selectivity
            if i + 1 < len(self.ops):
                self.ops[i + 1].queue_rows += done * spec.selectivity
            left = self.source_left if i == 0 else st.queue_rows
            st.completed = upstream_done and left <= 1e-6
        self.time_s += dt

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
                tasks_running=warm_n if queue > 0 else 0, tasks_failed=st.failed,
                input_queue_blocks=int(queue // self.spec.rows_per_block),
                input_queue_bytes=int(queue * self.spec.input_bytes_per_row * reg.bytes_per_row_scale),
                actors_running=warm_n if spec.kind == "actor" else 0,
                actors_pending=starting if spec.kind == "actor" else 0,
                actors_idle=warm_n if spec.kind == "actor" and queue <= 0 else 0,
                tasks_in_flight=self._in_flight(st, warm_n, queue),
                backpressured=st.backpressured,
                heap_rss_bytes=int(heap), heap_rss_per_replica_bytes=None if per_replica is None else int(per_replica),
                busy_s=st.busy_s, completed=st.completed,
                old_actors=sum(g.count for g in warm if g.retiring) if spec.kind == "actor" else 0,
            ))
            st.last_rows_out, st.last_bytes_out = st.rows_out, bytes_out
        return Snapshot(execution_id="sim", seq=seq, time_s=self.time_s, operators=tuple(ops),
                        cluster=self.spec.cluster_view(), input_rows_total=self.spec.total_rows,
                        applied_plan_seq=self.applied_seq)

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
            self.timeline.append(TimelinePoint(
                time_s=self.time_s, throughput_rows_per_s=snap.operators[0].rows_out_per_s / max(
                    self.spec.operators[0].selectivity, 1e-12),
                replicas=tuple((s.spec.name, s.config_replicas) for s in self.ops),
                heap_bytes=float(sum(o.heap_rss_bytes or 0 for o in snap.operators))))
            decision = self.loop.step(snap, self.time_s)
            if decision.plan is not None and decision.plan.seq != self.applied_seq:
                self.applied_seq = decision.plan.seq
                for t in decision.plan.targets:
                    self._apply(t)
        src = self.spec.total_rows - self.source_left
        return SimResult(
            policy=self.policy_name, wall_s=self.time_s, rows_out=self.ops[-1].rows_out, source_rows=int(round(src)),
            finished=self.ops[-1].completed, throughput_rows_per_s=src / self.time_s if self.time_s else 0.0,
            reconfigurations=self.reconfigurations, oom_kills=self.oom_kills,
            decisions=tuple(self.loop.decisions), timeline=tuple(self.timeline))


def simulate(spec: PipelineSpec, *, policy: str | Policy, seed: int = 0, max_time_s: float = 3_600.0,
             interval_s: float = 1.0, context: PolicyContext | None = None) -> SimResult:
    """Run ``spec`` under ``policy`` (a registered name or an instance) and return what it achieved."""
    return PipelineSim(spec, policy=policy, seed=seed, interval_s=interval_s, context=context).run(
        max_time_s=max_time_s)
