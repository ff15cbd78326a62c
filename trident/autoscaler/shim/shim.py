"""trident inside one Ray Data execution: observe, talk to the controller, actuate.

Runs on the executor thread only (Ray Data calls it from its scheduling loop). Every entry
point is guarded by the callback: an exception here puts the execution back on stock Ray
Data (:meth:`ExecutionShim.fail_open`), warns once, and is recorded in the run.
"""
from __future__ import annotations

import dataclasses
import time
import uuid
from typing import Any

from trident.report.record import Action, Event, ExecutionRecord
from trident.core.types import OperatorTarget, Plan


@dataclasses.dataclass
class _Reach:
    """A pool target not reached yet: since when (s), and how many of those seconds an actor of
    the pool was starting (accumulated at every scheduling step)."""

    want: int
    since_s: float
    seen_s: float
    starting_s: float = 0.0


def operator_kind(op: Any) -> str:
    from ray.data._internal.execution.operators.actor_pool_map_operator import ActorPoolMapOperator
    from ray.data._internal.execution.operators.task_pool_map_operator import TaskPoolMapOperator

    if isinstance(op, ActorPoolMapOperator):
        return "actor"
    if isinstance(op, TaskPoolMapOperator):
        return "task"
    return "other"


def poll_interval_s(interval_s: float) -> float:
    """How often the executor thread checks for the controller's answers (it never waits for
    them): a quarter of the observation interval, within 20-250 ms."""
    return min(0.25, max(0.02, interval_s / 4))


class ExecutionShim:
    """State of trident for one execution (one per executor; never shared between executions)."""

    def __init__(self, run: Any, executor: Any) -> None:
        self.run = run
        self.executor = executor
        self.config = run.config
        self.origin = time.perf_counter()
        dataset_id = str(getattr(executor, "_dataset_id", "dataset"))
        self.execution_id = f"{dataset_id}-{uuid.uuid4().hex[:6]}"
        self.record: ExecutionRecord = run._begin_execution(self.execution_id, dataset_id)
        self.controlling = False
        self.observing = False
        self.builder = None
        self.client = None
        self.autoscaler = None
        self.cap_policy = None
        self.stock_caps = None
        self.names = None
        self.kinds: dict[Any, str] = {}
        self.pool_targets: dict[Any, int] = {}
        self.reach: dict[Any, _Reach] = {}
        self.rollouts: dict[Any, Any] = {}
        self.applied_plan_seq = 0
        self.last_observed_s = -float("inf")
        self.last_polled_s = -float("inf")
        self.poll_s = poll_interval_s(self.config.interval_s)
        self.limits = None
        """Ray Data's limits kept at the run's budget (:class:`trident.autoscaler.shim.budget.Limits`)."""
        self.budget_clamp: dict[Any, int] = {}
        self.pending_since: dict[Any, float] = {}
        self.start_slots = 1
        """Actors started side by side at most (:mod:`trident.autoscaler.shim.starts`), set at install."""
        self.held: dict[Any, int] = {}
        """Actors each pool would start and waits to: shown as pending actors."""
        self.starts = None
        """When each pool's pending actors started (:class:`trident.autoscaler.shim.starts.StartClock`)."""
        self.ray_until_named = False
        """Ray's own rule drives a pool until a plan names it (:meth:`_ray_drives`)."""
        self.history = None
        """This execution's link to the history store (:mod:`trident.autoscaler.shim.history`)."""

    # -- lifecycle -------------------------------------------------------------------------

    def now_s(self) -> float:
        return time.perf_counter() - self.origin

    def install(self) -> None:
        from trident.autoscaler.shim.compat import capabilities
        from trident.autoscaler.shim.metrics import ClusterWatch, OperatorNames, SnapshotBuilder
        from trident.autoscaler.shim.starts import StartClock, cluster_start_slots

        caps = capabilities(self.executor)
        if not caps.observe:
            self.record.mode = "stock"
            self._event("observe_only", f"trident stays out of this execution: {caps.reason}")
            self.run._warn_once("ray-internals", f"trident cannot read this Ray's Data internals ({caps.reason}); "
                                                 "the pipeline runs on stock Ray Data")
            return
        ops = list(self.executor._topology)
        self.kinds = {op: operator_kind(op) for op in ops}
        self.names = OperatorNames(ops)
        wants_control = self.config.policy_name != "ray" and not self.config.dry_run
        if wants_control and not caps.actuate:
            self._event("observe_only", f"observe only: {caps.reason}")
            self.run._warn_once("ray-actuation", f"trident observes only on this Ray ({caps.reason}); "
                                                  "Ray Data's autoscaler stays in charge")
            wants_control = False
        self.builder = SnapshotBuilder(
            executor=self.executor, execution_id=self.execution_id, kinds=self.kinds, names=self.names,
            cap_of=self._cap_of, cluster=ClusterWatch(self.executor._resource_manager, self.config.memory_limit_bytes),
            held_of=lambda op: self.held.get(op, 0), ray_memory=self.config.memory_scope == "ray")
        self.start_slots = self.config.start_slots or cluster_start_slots()
        self.starts = StartClock()
        self.observing = True
        self.client = self.run._controller_client()
        self._open_history()
        if wants_control:
            from trident.autoscaler.shim.autoscaler import TridentActorAutoscaler
            from trident.autoscaler.shim.backpressure import StockCaps, TaskConcurrencyCap

            ex = self.executor
            self.cap_policy = TaskConcurrencyCap(ex._data_context, ex._topology, ex._resource_manager)
            self.stock_caps = StockCaps(ex)
            ex._backpressure_policies.append(self.cap_policy)
            self.autoscaler = TridentActorAutoscaler(ex._actor_autoscaler, self)
            self.ray_until_named = (bool(getattr(self._policy_class(), "ray_until_named", False))
                                    and hasattr(self.autoscaler.stock, "_derive_target_scaling_config"))
            ex._actor_autoscaler = self.autoscaler
            self.controlling = True
            self.record.mode = "control"
        else:
            self.record.mode = "observe"
        self.observe(force=True)

    def _open_history(self) -> None:
        """Read what earlier runs taught of this execution's operators and hand it to the controller."""
        from trident.autoscaler.shim.history import ExecutionHistory

        try:
            self.history = ExecutionHistory.open(self)
        except Exception as exc:  # noqa: BLE001 - history never fails a pipeline
            self.run._warn_once("history", f"trident's history is unavailable ({type(exc).__name__}: {exc}); "
                                           "this run starts blind")
            return
        if self.history is not None and self.history.priors and self.client is not None:
            self.client.begin(self.execution_id, tuple(self.history.priors.values()))

    def _policy_class(self) -> Any:
        """The policy's factory (a registered name's, or the one given)."""
        from trident.core.policy import POLICIES

        policy = self.config.policy
        return POLICIES.get(policy) if isinstance(policy, str) else policy

    def to_stock(self, *, record_mode: bool = True) -> None:
        """Give every knob back to Ray Data; observation may continue."""
        if not self.controlling:
            return
        self.controlling = False
        for rollout in self.rollouts.values():
            rollout.abandon()
        self.rollouts.clear()
        for op, kind in self.kinds.items():  # actors drained by a scale-down get work again
            pool = op.get_autoscaling_actor_pools()[0] if kind == "actor" else None
            if getattr(pool, "trident_retiring", None):
                pool.trident_retiring.clear()
        if self.cap_policy is not None:
            self.cap_policy.enabled = False
            if self.cap_policy in self.executor._backpressure_policies:
                self.executor._backpressure_policies.remove(self.cap_policy)
        if self.stock_caps is not None:
            self.stock_caps.restore()
        if self.autoscaler is not None and self.executor._actor_autoscaler is self.autoscaler:
            self.executor._actor_autoscaler = self.autoscaler.stock
        if record_mode:
            self.record.mode = "stock"

    def fail_open(self, exc: BaseException, *, where: str) -> None:
        """An error inside trident: this execution continues on stock Ray Data, recorded and warned once."""
        message = f"{where}: {type(exc).__name__}: {exc}"
        self.observing = False
        try:
            self.to_stock()
        except Exception as restore_exc:  # the handover itself failed: say so, never raise into Ray
            message += f"; handing back to Ray also failed: {type(restore_exc).__name__}: {restore_exc}"
        finally:
            self.record.mode = "stock"
            self._event("fallback", message)
            self.run._warn_once(f"fallback-{self.execution_id}",
                                f"trident hit an error ({message}); execution {self.execution_id} continues on "
                                "stock Ray Data")

    def finish(self, status: str) -> None:
        if self.builder is not None:
            try:  # the final counters, also after a fallback
                self.observe(force=True)
            except Exception as exc:
                self._event("final_snapshot_failed", f"{type(exc).__name__}: {exc}")
        if self.observing:
            self._poll_controller()
        if self.history is not None:
            try:
                self.history.keep(self)
            except Exception as exc:  # noqa: BLE001 - history never fails a pipeline
                self.run._warn_once("history", f"keeping trident's history failed: {type(exc).__name__}: {exc}")
        self.to_stock(record_mode=False)
        self.record.status = status
        self.record.ended_at_s = self.run._now_s()

    # -- observation and control -----------------------------------------------------------

    def on_step(self) -> None:
        if self.run._closed:
            if self.controlling or self.observing:
                self._event("detached", "the trident.autoscale block ended before this execution did")
                self.to_stock()
                self.observing = False
            return
        if not self.observing:
            return
        self.observe()
        now = self.now_s()
        if now - self.last_polled_s >= self.poll_s:
            self.last_polled_s = now
            self._poll_controller()

    def observe(self, force: bool = False) -> None:
        now = self.now_s()
        if not force and now - self.last_observed_s < self.config.interval_s:
            return
        self.last_observed_s = now
        snapshot = self.builder.snapshot(now, applied_plan_seq=self.applied_plan_seq)
        self.record.snapshots.append(snapshot)
        if self.client is not None and not self.run._closed:
            self.client.send(snapshot)

    def _poll_controller(self) -> None:
        if self.client is None:
            return
        for decision in self.client.poll():
            self.record.decisions.append(decision)
            if decision.plan is not None and decision.plan.seq > self.applied_plan_seq:
                self.applied_plan_seq = decision.plan.seq
                self.apply_plan(decision.plan)
        failure = self.client.failure
        if failure is not None and self.client is not None:
            self._event("controller_failed",
                        f"controller lost at {failure.time_s:.1f} s into the run: {failure.reason}; "
                        "the execution continues on stock Ray Data")
            self.run._controller_failed(failure)
            self.client = None
            self.to_stock()

    # -- actuation -------------------------------------------------------------------------

    def _cap_of(self, op: Any) -> int | None:
        if self.cap_policy is not None and op in self.cap_policy.caps:
            return self.cap_policy.caps[op]
        return getattr(op, "_max_concurrency", None)

    def apply_plan(self, plan: Plan) -> None:
        now = self.now_s()
        for target in plan.targets:
            op = self.names.by_name.get(target.name)
            if op is None:
                self._action(now, target.name, "ignored", f"no operator named {target.name!r}", applied=False)
                continue
            kind = self.kinds[op]
            if kind == "actor":
                try:
                    self._apply_actor(op, target, plan, now)
                except (ValueError, TypeError, KeyError) as exc:  # a target this operator cannot take
                    self._action(now, target.name, "ignored", f"{type(exc).__name__}: {exc}", applied=False)
            elif kind == "task" and target.replicas is not None:
                cap = max(1, target.replicas)
                applied = self.controlling
                if applied:
                    self.stock_caps.lift(op, cap)
                    self.cap_policy.caps[op] = cap
                self._action(now, target.name, "task_cap", f"concurrency cap -> {cap} ({plan.reason})", cap,
                             applied=applied)

    def _apply_actor(self, op: Any, target: OperatorTarget, plan: Plan, now: float) -> None:
        pool = op.get_autoscaling_actor_pools()[0]
        applied = self.controlling
        if target.replicas is not None:
            want = min(max(target.replicas, pool.min_size()), pool.max_size())
            clamp = ("" if want == target.replicas
                     else f" (clamped from {target.replicas} to {pool.min_size()}..{pool.max_size()})")
            if applied:
                self.pool_targets[op] = want
                self.reach[op] = _Reach(want=want, since_s=plan.created_at_s, seen_s=now)
            self._action(now, target.name, "pool_target", f"pool target -> {want}{clamp} ({plan.reason})", want,
                         applied=applied)
        if target.needs_rollout and self._differs(op, target):
            if applied:
                from trident.autoscaler.actuation import pending_guard_s
                from trident.autoscaler.shim.rollout import Rollout

                size = self.pool_targets.get(op, pool.current_size())
                if op in self.rollouts:
                    self.rollouts[op].abandon()
                current = self.builder.config(op)
                type_only = (target.batch_size in (None, current.batch_size)
                             and target.num_gpus in (None, current.num_gpus))
                if (not target.swap and target.accelerator_type in (None, current.accelerator_type)
                        and not self._room_beside(op, target.num_gpus or current.num_gpus, now)):
                    # the plan counted actors that came up since as pending ones to replace: a surge
                    # would wait its whole guard (61 s on the batch-size scenario) for a GPU
                    target = dataclasses.replace(target, swap=True)
                    self._action(now, target.name, "rollout_step", "no GPU free beside the pool's running actors: "
                                 "the rolling update swaps them half the pool at a time")
                gpus = target.num_gpus or current.num_gpus
                self.rollouts[op] = Rollout(op=op, target=target, size=size, node_type=self.builder.cluster.node_type,
                                            type_only=type_only, pending_guard_s=pending_guard_s(self.run.rewarm_s),
                                            room_beside=lambda n, op=op, gpus=gpus: self._room_beside(
                                                op, gpus, self.now_s(), count=n))
            change = ", ".join(f"{k}={v}" for k, v in (("batch_size", target.batch_size), ("num_gpus", target.num_gpus),
                                                       ("accelerator_type", target.accelerator_type)) if v is not None)
            self._action(now, target.name, "rollout_started", f"rolling update to {change}", applied=applied)

    def _room_beside(self, op: Any, gpus_per_actor: float, now: float, count: int = 1) -> bool:
        """Whether ``count`` new actors of ``op`` (``gpus_per_actor`` GPUs each) fit beside every
        pool's actors, ``op``'s pending ones left out (a rolling update replaces them)."""
        if gpus_per_actor <= 0:
            return True
        held = 0.0
        for other, kind in self.kinds.items():
            if kind != "actor" or other.has_completed():
                continue
            pool = other.get_autoscaling_actor_pools()[0]
            if other is op:
                n = pool.current_size() - pool.num_pending_actors()
            else:
                n = pool.current_size() + self.held.get(other, 0)
            held += n * self.builder.config(other).num_gpus
        return self.builder.cluster.view(now).gpus - held >= count * gpus_per_actor - 1e-9

    def _differs(self, op: Any, target: OperatorTarget) -> bool:
        current = self.builder.config(op)
        return ((target.batch_size is not None and target.batch_size != current.batch_size)
                or (target.num_gpus is not None and target.num_gpus != current.num_gpus)
                or (target.accelerator_type is not None and target.accelerator_type != current.accelerator_type))

    def drive_pools(self) -> None:
        """Called instead of Ray's actor autoscaler, every scheduling step. New actors start at
        most :attr:`start_slots` at a time over all pools (:mod:`trident.autoscaler.shim.starts`), to
        the pools with the smallest share of their target up or starting first."""
        from trident.autoscaler.shim.actor_processes import host_cpu
        from trident.autoscaler.shim.rollout import drive_to, resize
        from trident.autoscaler.shim.starts import StartGate

        clamp = self._budget_clamp()
        now = self.now_s()
        self.starts.read_host(now, host_cpu)
        gate = StartGate(self._free_slots)
        actors = [(op, state) for op, state in self.executor._topology.items() if self.kinds.get(op) == "actor"]
        for op, state in sorted(actors, key=lambda a: self._filled(a[0])):
            pool = op.get_autoscaling_actor_pools()[0]
            grant = (lambda n, op=op: self._granted(op, gate.grant(op, n), now))
            rollout = self.rollouts.get(op)
            if rollout is not None:
                rollout.size = max(1, self.pool_targets.get(op, rollout.size))
                for note in rollout.step(self.now_s(), grant):
                    self._action(self.now_s(), self.names.by_op[op], "rollout_step", note)
                if op.has_completed() and not rollout.done:
                    left = len(rollout.old)
                    rollout.abandon()
                    del self.rollouts[op]
                    self._action(self.now_s(), self.names.by_op[op], "rollout_abandoned",
                                 f"the operator finished first ({left} old actor(s) left)")
                    continue
                if rollout.done:
                    del self.rollouts[op]
                    self._action(self.now_s(), self.names.by_op[op], "rollout_finished",
                                 f"all actors run the new configuration ({rollout.retired} replaced)")
                continue
            inputs_done = op._inputs_complete and state.total_enqueued_input_blocks() == 0
            if op.has_completed() or inputs_done:
                if pool.current_size() > 0:
                    resize(pool, size=pool.current_size(), target=0, budget=None, reason="consumed all inputs")
                continue
            if self._ray_drives(op) and clamp.get(op, pool.current_size()) >= pool.current_size():
                pool.scale(self.autoscaler.stock._derive_target_scaling_config(pool, op, state))
                continue  # Ray's rule scales within Ray Data's limits; a lowered budget drains below
            target = min(self._pool_target(op, pool), clamp.get(op, pool.max_size()))
            drained, released = drive_to(pool, target=target, budget=None, reason="trident pool target", starts=grant)
            if drained or released:
                self._action(self.now_s(), self.names.by_op[op], "drain",
                             f"{drained} busy actor(s) stop getting work, {released} released when done")
        for op, n in gate.held.items():
            if n != self.held.get(op):
                self._action(self.now_s(), self.names.by_op[op], "start_wait",
                             f"{n} actor(s) wait to start: {self.start_slots} start side by side over all pools", n)
        self.held = gate.held
        self._check_reached(self.now_s())

    def _granted(self, op: Any, n: int, now: float) -> int:
        """``n`` actors of ``op`` granted a start at ``now``: the clock of their slots runs."""
        self.starts.start(op, n, now)
        return n

    def _free_slots(self) -> int:
        """:attr:`start_slots` less the pending actors that hold one
        (:func:`~trident.autoscaler.shim.starts.starting`)."""
        from trident.autoscaler.shim.starts import starting

        pools, now = [], self.now_s()
        for op, kind in self.kinds.items():
            if kind == "actor" and not op.has_completed():
                pool = op.get_autoscaling_actor_pools()[0]
                pending = pool.num_pending_actors()
                pools.append((pool.num_alive_actors(), pending, self.builder.config(op).num_gpus,
                              self.starts.holding(op, pending, now)))
        return self.start_slots - starting(pools, self.builder.cluster.view(now).gpus)

    def _filled(self, op: Any) -> float:
        """The share of ``op``'s target its actors up or starting make (1 with no target)."""
        pool = op.get_autoscaling_actor_pools()[0]
        rollout = self.rollouts.get(op)
        want = rollout.size if rollout is not None else self.pool_targets.get(op)
        size = rollout.new_size() if rollout is not None else pool.current_size()
        return size / want if want else 1.0

    def _ray_drives(self, op: Any) -> bool:
        """Whether Ray's own rule still drives ``op``'s pool, at every scheduling step as stock Ray
        does: for a policy that asks for it (``ray_until_named``), until a plan names the pool, when
        the run has no memory limit (under one, a pool whose heap is not measured yet holds its
        size) and no GPU budget. Held at its size instead, a pool grew only once the policy's first
        answer came (3.1 s into a 10-15 s run where Ray's rule had started a second actor per pool
        at 2.2 s). Other pools hold their size until a plan names them."""
        return (self.ray_until_named and op not in self.pool_targets and self.config.memory_limit_bytes is None
                and self.run.gpu_budget is None)

    def _pool_target(self, op: Any, pool: Any) -> int:
        target = self.pool_targets.get(op)
        return target if target is not None else max(pool.min_size(), min(pool.current_size(), pool.max_size()))

    def _budget_clamp(self) -> dict[Any, int]:
        """Apply the run's budget (see :mod:`trident.autoscaler.shim.budget`): set Ray Data's limits
        and return the pools' targets that fit in it; record whether GPU actors are starting."""
        from trident.autoscaler.shim.budget import Limits, describe, fit_to_budget, lowest

        now = self.now_s()
        gpu_pools, cpu_pools, task = {}, {}, [0.0, 0.0]
        for op, kind in self.kinds.items():
            if op.has_completed() or kind not in ("actor", "task"):
                continue
            config = self.builder.config(op)
            if kind == "task":  # room for one task at a time (as the arbiter's claim counts it)
                task = [max(task[0], config.num_cpus), max(task[1], config.num_gpus)]
                continue
            pool = op.get_autoscaling_actor_pools()[0]
            if config.num_cpus > 0:
                cpu_pools[op] = (self._pool_target(op, pool), config.num_cpus, pool.min_size())
            if config.num_gpus > 0:
                gpu_pools[op] = (self._pool_target(op, pool), config.num_gpus, pool.min_size())
                pending = pool.num_pending_actors() > 0
                if pending and op not in self.pending_since:
                    self.pending_since[op] = now
                elif not pending and op in self.pending_since:
                    self.run.rewarm_s = now - self.pending_since.pop(op)
        self.run.cold_starting = bool(self.pending_since)
        share = self.run.share
        cpus, gpus = (None if share is None else share.cpus), lowest(self.run.gpu_budget, share and share.gpus)
        if self.limits is None:
            self.limits = Limits(self.executor._resource_manager)
        if self.limits.apply(cpus, gpus):
            self._event("budget", "budget lifted" if cpus is None and gpus is None else describe(cpus, gpus))
        clamp = {} if gpus is None else fit_to_budget(gpu_pools, max(0.0, gpus - task[1]))
        if cpus is not None:
            cpu_pools = {op: (min(t, clamp.get(op, t)), c, lo) for op, (t, c, lo) in cpu_pools.items()}
            clamp.update(fit_to_budget(cpu_pools, max(0.0, cpus - task[0])))
        for op, want in clamp.items():
            if want < self._pool_target(op, op.get_autoscaling_actor_pools()[0]) and self.budget_clamp.get(op) != want:
                self._action(now, self.names.by_op[op], "budget",
                             f"pool held at {want} actor(s): {describe(cpus, gpus)}", want)
        self.budget_clamp = clamp
        return clamp

    def _check_reached(self, now: float) -> None:
        for op, r in list(self.reach.items()):
            pool = op.get_autoscaling_actor_pools()[0]
            pending = pool.num_pending_actors() + self.held.get(op, 0)
            if pending:
                r.starting_s += now - r.seen_s
            r.seen_s = now
            rollout = self.rollouts.get(op)
            if rollout is None:
                reached, finishing = pool.num_alive_actors() == r.want, 0
            else:  # old actors that get no new work and finish what was queued on them do not count
                finishing = len(rollout.old)
                reached = rollout.new_size() == r.want and not rollout.old - pool.trident_retiring
            if pending == 0 and reached:
                del self.reach[op]
                left = f", {finishing} old actor(s) finishing their queued tasks" if finishing else ""
                self._action(now, self.names.by_op[op], "target_reached",
                             f"{r.want} actor(s) running {now - r.since_s:.2f} s after the plan "
                             f"({r.starting_s:.2f} s of it with an actor starting{left})", now - r.since_s,
                             starting_s=r.starting_s)

    # -- record ----------------------------------------------------------------------------

    def _action(self, now: float, operator: str, kind: str, detail: str, value: float | None = None,
                applied: bool = True, starting_s: float | None = None) -> None:
        self.record.actions.append(Action(time_s=now, operator=operator, kind=kind, detail=detail,
                                          value=float(value) if value is not None else None, applied=applied,
                                          starting_s=starting_s))

    def _event(self, kind: str, message: str) -> None:
        from trident.report.metrics import count_event

        self.record.events.append(Event(time_s=self.now_s(), kind=kind, message=message))
        count_event(self.record.dataset_id, kind)
