"""How the fluid simulator applies plan targets, as the shim does (see :mod:`trident.autoscaler.sim.pipeline`):
replicas in groups started together, pending until a node has room; scale-downs that cancel
pending replicas first and drain busy ones; rolling updates and swaps.

Replicas are placed as Ray places them: each one whole on one node (its CPUs and its GPUs from
the same node, a GPU replica only on a node of its accelerator type), so GPU nodes short of CPUs
leave GPU actors pending. A replica without GPUs goes to a node without GPUs while one has room,
else to the node with the most free CPUs."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from trident.autoscaler.actuation import PENDING_GUARD_S, swap_window
from trident.autoscaler.sim.model import PipelineSpec, Regime, SimOperator
from trident.core.types import OperatorTarget


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
    kept: bool = False
    """Old replicas an update of the accelerator type alone keeps (already on that type)."""
    node: int | None = None
    """The node the replicas run on (an index into the spec's nodes, counted out); None while pending."""
    spawn_left_s: float = 0.0
    """CPU-seconds of its process start left (:attr:`PipelineSpec.actor_spawn_s`); its ``ready_at_s``
    is infinite until they are done."""
    held_rows: float = 0.0
    """Input rows an OOM-killed replica's tasks held: Ray retries an actor's tasks on that actor once
    it is up again, so they wait for it."""


@dataclass
class _OpState:
    spec: SimOperator
    groups: list[_Group]
    queue_rows: float = 0.0
    rows_in: float = 0.0
    rows_out: float = 0.0
    tasks: float = 0.0
    """Tasks finished: input rows over the rows of one task (a batch, or a block for a task operator)."""
    by_type: dict[str, list[float]] = field(default_factory=dict)
    """Per accelerator type of the nodes a GPU pool ran on: [busy replica-seconds, tasks finished]."""
    bytes_in: float = 0.0
    busy_s: float = 0.0
    failed: int = 0
    held_rows: float = 0.0
    """Input rows held by killed replicas' tasks (:attr:`_Group.held_rows`), out of the queue."""
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


class Actuation:
    """Plan application and replica bookkeeping of a :class:`~trident.autoscaler.sim.pipeline.PipelineSim`:
    the operators' replica groups (``ops``, shared with the simulator, which moves rows through
    them), read at the simulator's clock (``now``, seconds) and with each operator's regime
    (``regime(index, op)``, for a drained replica's last batch)."""

    def __init__(self, spec: PipelineSpec, ops: list[_OpState], *, now: Callable[[], float],
                 regime: Callable[[int, _OpState], Regime]) -> None:
        self.spec, self.ops = spec, ops
        self._now, self._regime = now, regime
        self.reconfigurations = 0
        """Targets applied that changed an operator's configuration or replica count."""

    @property
    def time_s(self) -> float:
        return self._now()

    # --- resources -------------------------------------------------------------------

    def _free(self) -> list[list]:
        """[free CPUs, free GPUs, accelerator type] of every node (counted out of ``spec.nodes``)."""
        free = [[n.cpus, n.gpus, (n.gpu_type or "gpu") if n.gpus > 0 else None]
                for n in self.spec.nodes for _ in range(n.count)]
        for st in self.ops:
            for g in st.groups:
                if g.ready_at_s is not None and g.node is not None:
                    free[g.node][0] -= g.count * st.spec.num_cpus
                    free[g.node][1] -= g.count * g.num_gpus
        return free

    @staticmethod
    def _hosts(free: list[list], gpus: float, accelerator_type: str | None) -> list[int]:
        """Nodes a replica may go to, in the order it is placed: a GPU replica on the nodes of its
        type (any type, the type with the most free GPUs first); a CPU one on nodes without GPUs
        first, then the ones with the most free CPUs."""
        if gpus > 0:
            by_type: dict[str, float] = {}
            for c, g, t in free:
                if t is not None:
                    by_type[t] = by_type.get(t, 0.0) + g
            order = [accelerator_type] if accelerator_type else sorted(by_type, key=lambda t: -by_type[t])
            return [k for t in order for k, f in enumerate(free) if f[2] == t]
        return sorted(range(len(free)), key=lambda k: (free[k][2] is not None, -free[k][0], k))

    def _holds_slot(self, g: _Group) -> bool:
        """Whether a started group still holds its start slots: while its processes spawn on the
        host's cores (its constructor then runs beside the next ones), or, with no spawn modelled,
        until it is up."""
        if self.spec.actor_spawn_s > 0:
            return g.spawn_left_s > 0 and g.count > 0
        return g.ready_at_s is not None and g.ready_at_s > self.time_s

    def start_pending(self) -> None:
        """Start waiting groups, in order, while a node has room (partially when it has some)
        and, for actors, while fewer than ``spec.start_slots`` replicas are starting (then to the
        operators with the smallest share of their target started first, as the shim)."""
        free = self._free()
        slots, order = self.spec.start_slots, self.ops
        if slots is not None:
            slots -= sum(g.count for st in self.ops for g in st.groups if self._holds_slot(g))
            order = sorted(self.ops, key=self._filled)
        for st in order:
            cpus = st.spec.num_cpus
            cold = 0.0 if st.spec.kind == "task" else st.spec.cold_start_s
            gated = slots is not None and cold > 0  # a replica that starts at once holds no slot
            for g in list(st.groups):
                if g.ready_at_s is not None or g.count == 0:
                    continue
                for k in self._hosts(free, g.num_gpus, g.accelerator_type):
                    f = free[k]
                    fit = g.count
                    if cpus > 0:
                        fit = min(fit, int(f[0] // cpus + 1e-9))
                    if g.num_gpus > 0:
                        fit = min(fit, int(f[1] // g.num_gpus + 1e-9))
                    if gated:
                        fit = min(fit, slots)
                    if fit <= 0:
                        continue
                    if gated:
                        slots -= fit
                    spawn = self.spec.actor_spawn_s if cold > 0 else 0.0
                    held, g.held_rows = (g.held_rows, 0.0) if fit == g.count else (0.0, g.held_rows)
                    started = _Group(count=fit, batch_size=g.batch_size, num_gpus=g.num_gpus,
                                     accelerator_type=g.accelerator_type,
                                     ready_at_s=math.inf if spawn > 0 else self.time_s + cold,
                                     gpu_type=f[2] if g.num_gpus > 0 else None, node=k, spawn_left_s=spawn,
                                     held_rows=held)
                    st.groups.insert(st.groups.index(g), started)
                    g.count -= fit
                    f[0] -= fit * cpus
                    f[1] -= fit * g.num_gpus
                    if g.count == 0:
                        break
            st.groups = [g for g in st.groups if g.count > 0]

    def spawn(self, dt: float) -> None:
        """``dt`` seconds of the replicas' process starts, the host's cores shared by all of them;
        a replica whose start is done begins its cold start."""
        spawning = [(st, g) for st in self.ops for g in st.groups if g.spawn_left_s > 0 and g.count > 0]
        n = sum(g.count for _, g in spawning)
        share = min(1.0, self.spec.host_cores / n) * dt if n else 0.0
        for st, g in spawning:
            g.spawn_left_s -= share
            if g.spawn_left_s <= 1e-9:
                g.spawn_left_s, g.ready_at_s = 0.0, self.time_s + dt + st.spec.cold_start_s

    @staticmethod
    def _filled(st: _OpState) -> float:
        """The share of ``st``'s target its started replicas make (1 with no target)."""
        started = sum(g.count for g in st.groups if g.ready_at_s is not None and not g.retiring)
        return started / st.config_replicas if st.config_replicas else 1.0

    # --- plan application ------------------------------------------------------------

    def state(self, name: str) -> _OpState | None:
        """The operator called ``name`` (``None``: no such operator)."""
        return next((s for s in self.ops if s.spec.name == name), None)

    def apply(self, target: OperatorTarget) -> None:
        st = self.state(target.name)
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
            type_only = (new_batch, new_gpus) == (st.batch_size, st.num_gpus)
            for g in st.groups:
                if not self.is_warm(g):
                    g.count = 0  # pending replicas would come up with the old configuration
                elif type_only and g.gpu_type == new_type and g.release_at_s is None and not g.retiring:
                    g.kept, g.accelerator_type = True, new_type  # what a new replica would be
                    continue
                g.retiring, g.kept = True, False
            st.groups = [g for g in st.groups if g.count > 0]
            st.retired, st.rollout_started_s, st.swap = 0, self.time_s, target.swap
            st.swap_cap = min(n, sum(g.count for g in st.groups))
        elif changed_cfg:  # tasks pick up a new configuration with their next task
            for g in st.groups:
                g.batch_size, g.num_gpus, g.accelerator_type = new_batch, new_gpus, new_type
                if g.ready_at_s is not None and g.num_gpus > 0 and new_type and g.gpu_type != new_type:
                    g.ready_at_s, g.gpu_type, g.node = None, None, None
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
        self.start_pending()

    def _remove(self, st: _OpState, k: int) -> None:
        """Scale down by ``k``: pending replicas are cancelled first (the newest first), then warm
        ones are drained: they finish the batch they hold and go (:meth:`_drain`)."""
        order = sorted((g for g in st.groups if not g.retiring and g.release_at_s is None),
                       key=lambda g: (self.is_warm(g), -(g.ready_at_s or 0.0)))
        for g in order:
            take = min(k, g.count)
            if self.is_warm(g):
                self._drain(st, g, take)
            else:
                g.count -= take
            k -= take
            if k == 0:
                break
        st.groups = [g for g in st.groups if g.count > 0]

    def is_warm(self, g: _Group) -> bool:
        """Whether ``g``'s replicas are up (started and past their cold start)."""
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
                                node=g.node, retiring=g.retiring, release_at_s=self.time_s + batch_s))

    def finish_rollouts(self) -> None:
        """Release drained replicas whose batch is done; in a rolling update retire one old
        replica for each new one that is warm (all that are left once the new pool is complete),
        and one to make room when no new replica has started for ``PENDING_GUARD_S`` (as the
        shim's :class:`~trident.autoscaler.shim.rollout.Rollout`)."""
        for st in self.ops:
            st.groups = [g for g in st.groups if g.release_at_s is None or g.release_at_s > self.time_s]
            old = [g for g in st.groups if g.retiring and g.release_at_s is None]
            if st.swap:
                self._swap(st, old)
                continue
            if not old:
                st.rollout_started_s = None
                for g in st.groups:
                    g.kept = False
                continue
            warm_new = sum(g.count for g in st.groups if not g.retiring and not g.kept and self.is_warm(g)
                           and g.release_at_s is None)
            k = max(0, warm_new - st.retired)
            kept = sum(g.count for g in st.groups if g.kept and g.release_at_s is None)
            if warm_new + kept >= st.config_replicas:  # the new pool is complete: every old replica goes
                k = sum(g.count for g in old)
            if kept:  # old replicas beyond the target once the kept ones count: at once
                k = max(k, kept + warm_new + sum(g.count for g in old) - st.config_replicas)
            started = any(not g.retiring and not g.kept and g.ready_at_s is not None for g in st.groups)
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
        (:func:`~trident.autoscaler.actuation.swap_window`), counting new ones still starting; new ones
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
        starting = sum(g.count for g in st.groups if not g.retiring and not self.is_warm(g))
        draining = sum(g.count for g in st.groups if g.retiring and g.release_at_s is not None)
        leave = swap_window(n, alive_old, sum(g.count for g in st.groups if g.kept)) - draining - starting
        if any(g.kept for g in st.groups):  # old replicas beyond the target once kept and new ones count
            leave = max(leave, sum(g.count for g in st.groups if not g.retiring) + sum(g.count for g in old) - n)
        self._retire(st, old, max(0, leave))
        if not any(g.retiring for g in st.groups):
            st.swap, st.rollout_started_s = False, None
            for g in st.groups:
                g.kept = False
