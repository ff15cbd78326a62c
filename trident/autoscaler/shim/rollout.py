"""Actor-pool actuation: reach a target size within budget, and rolling updates.

A rolling update changes what *new* actors get (per-actor ``num_gpus``, accelerator type as
a custom resource ``accelerator_type:X``, batch size through a re-serialised map
transformer and input bundles grown to it); existing actors keep theirs, and an update of the
accelerator type alone keeps the old actors already on nodes of that type (the other old actors
beyond the target, once those are counted, stop getting work at once). New actors start
first; for each new actor that is up, one old actor stops receiving work (it is taken out of
the pool's scheduling heaps and kept out on every refresh) and is released once its in-flight
tasks are done.
Released actors are dropped exactly like Ray Data's own scale-down does, so every task that
was submitted completes and no row is lost or duplicated. Executor thread only.
"""
from __future__ import annotations

import copy
import dataclasses
import sys
from collections.abc import Callable
from typing import Any

from ray.data._internal.actor_autoscaler import ActorPoolScalingRequest, _get_max_scale_up
from ray.data._internal.execution.interfaces import ExecutionResources

from trident.autoscaler.actuation import PENDING_GUARD_S, swap_window
from trident.core.cluster import ACCELERATOR_PREFIX
from trident.core.types import OperatorTarget

Starts = Callable[[int], int]
"""Of the actors a pool would start now, how many it may (the rest wait for a later step)."""


def with_retiring(pool: Any) -> Any:
    """Give ``pool`` a ``trident_retiring`` set whose actors never get new tasks."""
    if hasattr(pool, "trident_retiring"):
        return pool
    base = type(pool)

    class RetiringPool(base):  # type: ignore[misc, valid-type]
        def _update_rank(self, actor: Any, state: Any, died: bool) -> None:
            super()._update_rank(actor, state, died or actor in self.trident_retiring)

    RetiringPool.__name__ = f"Retiring{base.__name__}"
    pool.__class__ = RetiringPool
    pool.trident_retiring = set()
    return pool


def stop_scheduling(pool: Any, actor: Any) -> None:
    pool.trident_retiring.add(actor)
    pool._alive_actors_to_in_flight_tasks_heap.pop(actor, None)
    for heap in pool._alive_node_to_actor_heap.values():
        heap.pop(actor, None)


def max_scale_up(pool: Any, budget: Any) -> int:
    """How many more actors fit in the operator's budget (``sys.maxsize`` when unlimited)."""
    return _get_max_scale_up(pool, budget) if budget is not None else sys.maxsize


def resize(pool: Any, *, size: int, target: int, budget: Any, reason: str, starts: Starts | None = None) -> int:
    """Move ``pool`` from ``size`` toward ``target`` by one request. Scale-up stays within
    ``budget`` and starts what ``starts`` grants of it (:class:`~trident.autoscaler.shim.starts.StartGate`;
    ``None``: all); scale-down releases only pending or idle actors (forced past Ray's debounce).
    Returns the change requested (0 when at target or blocked)."""
    if size < target:
        delta = min(target - size, max_scale_up(pool, budget))
        if delta > 0 and starts is not None:
            delta = starts(delta)
        if delta > 0:
            pool.scale(ActorPoolScalingRequest.upscale(delta=delta, reason=reason))
        return max(delta, 0)
    if size > target:
        return pool.scale(ActorPoolScalingRequest.downscale(delta=target - size, force=True, reason=reason)) or 0
    return 0


def _retiring(pool: Any) -> set:
    """The pool's drained actors that are still running (empty for a pool never drained)."""
    retiring = getattr(pool, "trident_retiring", None)
    if retiring is None:
        return set()
    retiring &= set(pool._running_actors)
    return retiring


def drive_to(pool: Any, *, target: int, budget: Any, reason: str, starts: Starts | None = None) -> tuple[int, int]:
    """One step of ``pool`` toward ``target`` actors that get work. A rising target first puts
    drained actors back to work; then Ray's own scaling (scale-up within ``budget``; scale-down
    of pending, then idle actors; new actors as ``starts`` grants them); then busy surplus actors
    are drained (:func:`drain_to`). Drained actors do not count as the pool's size. Returns
    (actors drained, actors released)."""
    retiring = _retiring(pool)  # the pool's own set: un-retiring below updates it in place
    if retiring and pool.current_size() - len(retiring) < target:
        drain_to(pool, target)
    resize(pool, size=pool.current_size() - len(retiring), target=target, budget=budget, reason=reason, starts=starts)
    if retiring or pool.current_size() > target:
        return drain_to(pool, target)
    return 0, 0


def drain_to(pool: Any, target: int) -> tuple[int, int]:
    """Shrink ``pool`` to ``target`` actors when busy ones stand in the way: Ray's scale-down
    releases only pending or idle actors, and in a pool with a queue none is ever idle.
    Actors beyond the target (those with the fewest tasks in flight) stop getting work; each
    is released once its tasks in flight are done, so every submitted task completes.
    Returns (actors newly drained, actors released)."""
    pool = with_retiring(pool)
    retiring = _retiring(pool)
    serving = [a for a in pool._running_actors if a not in retiring]
    over = len(serving) + pool.num_pending_actors() - target
    drained = 0
    if over < 0:  # the target rose again: drained actors still at work serve once more
        for actor in list(retiring)[:-over]:
            retiring.discard(actor)
    for actor in sorted(serving, key=lambda a: pool._running_actors[a].num_tasks_in_flight)[:max(over, 0)]:
        stop_scheduling(pool, actor)
        drained += 1
    released = 0
    for actor in list(retiring):
        if pool._running_actors[actor].num_tasks_in_flight == 0:
            pool._release_running_actor(actor)
            retiring.discard(actor)
            released += 1
    return drained, released


def new_remote_args(remote_args: dict, target: OperatorTarget) -> dict:
    """The operator's actor remote args with the target's ``num_gpus`` / accelerator type."""
    args = dict(remote_args)
    if target.num_gpus is not None:
        args["num_gpus"] = target.num_gpus
    if target.accelerator_type is not None:
        resources = {k: v for k, v in (args.get("resources") or {}).items() if not k.startswith(ACCELERATOR_PREFIX)}
        resources[ACCELERATOR_PREFIX + target.accelerator_type] = 0.001
        args["resources"] = resources
    return args


def bundle_rows(op: Any, batch_size: int) -> None:
    """Make ``op`` bundle its input up to ``batch_size`` rows per task, as Ray Data does for the
    batch size it was built with (otherwise a larger batch only ever sees the old bundle's rows)."""
    strategy = getattr(getattr(op, "_block_ref_bundler", None), "_strategy", None)
    if strategy is not None and hasattr(strategy, "_min_rows_per_bundle"):
        strategy._min_rows_per_bundle = batch_size


def with_batch_size(transformer: Any, batch_size: int) -> Any:
    """A copy of ``transformer`` whose last batch transform uses ``batch_size``."""
    new = copy.copy(transformer)
    fns = list(transformer.get_transform_fns())
    for i in range(len(fns) - 1, -1, -1):
        if type(fns[i]).__name__ == "BatchMapTransformFn":
            fn = copy.copy(fns[i])
            fn._batch_size = batch_size
            fns[i] = fn
            break
    else:
        raise ValueError("the operator has no batch transform to resize")
    new._transform_fns = fns
    return new


class Rollout:
    """One rolling update of one actor operator (new actors first, old drained then released)."""

    def __init__(self, *, op: Any, target: OperatorTarget, size: int, pending_guard_s: float = PENDING_GUARD_S,
                 node_type: dict[str, str] | None = None, type_only: bool = False,
                 room_beside: Callable[[int], bool] | None = None) -> None:
        """``type_only``: the update changes the accelerator type and nothing else, so old actors
        already on a node of that type are kept (they are what a new actor would be).
        ``room_beside(n)``: whether ``n`` new actors fit beside the running ones (``None``: never
        known to)."""
        import ray

        transformer = with_batch_size(op._map_transformer, target.batch_size) if target.batch_size is not None else None
        self.op = op
        self.pending_guard_s = pending_guard_s
        self.room_beside = room_beside
        self.node_type = node_type or {}
        self.surge_started_s: float | None = None
        self.target = target
        self.size = max(1, size)
        pool = with_retiring(op.get_autoscaling_actor_pools()[0])
        self.pool = pool
        while pool._pending_actors:  # pending actors would come up with the old configuration
            pool._try_remove_pending_actor()
        self.old: set[Any] = set(pool._running_actors)
        self.kept: set[Any] = {a for a in self.old if self._on_target_type(a)} if type_only else set()
        self.old -= self.kept
        pool.trident_old = self.old  # the same set: snapshots count the old actors left
        self.swap_cap = min(self.size, len(pool._running_actors))
        """Most actors during a swap while old ones are left: no mix of old and new is then
        larger than the old pool or the new one (in memory as in count)."""
        args = new_remote_args(op._ray_remote_args, target)
        op._ray_remote_args = args
        pool._config = dataclasses.replace(pool._config, per_actor_resource_usage=ExecutionResources(
            cpu=args.get("num_cpus"), gpu=args.get("num_gpus"), memory=args.get("memory")))
        if transformer is not None:
            bundle_rows(op, target.batch_size)
            op._map_transformer = transformer
            # the replaced reference stays alive with the operator: an old actor that restarts
            # (an OOM kill) reads its constructor arguments again, and a freed one aborts the run
            op.__dict__.setdefault("_trident_replaced_refs", []).append(op.__dict__.get("_map_transformer_ref"))
            op.__dict__["_map_transformer_ref"] = ray.put(transformer)
        self.retired = 0

    @property
    def done(self) -> bool:
        return not self.old

    def new_size(self) -> int:
        """Pending plus running actors with the new configuration."""
        return self.pool.current_size() - len(self.old)

    def step(self, now_s: float, starts: Starts | None = None) -> list[str]:
        """Advance by what is possible now, starting the new actors ``starts`` grants; returns
        what happened (for the run record).

        New actors are started up to the target at once, past Ray Data's per-operator budget (the
        surge is temporary: each new actor that is up retires an old one, and the old ones left once
        the new pool is complete all retire: an update that shrinks 5 actors to 2 kept 3 old ones
        serving, past the plan and the memory limit, on seed 52 of the generated scenarios). Old
        actors on nodes of the accelerator type the update moves to go first, and at once while new
        actors wait for room (they hold the GPUs the new ones need). If no new actor has come up
        ``pending_guard_s`` after the surge began and the cluster has no room for the pending ones
        beside the running actors, the update goes on as a swap (:meth:`_swap_step`); with room, the
        new actors are slow to start, not blocked, and a swap would only cancel them and start them
        again (a pool's first trial, riding on its starting actors, was swapped at 15 s on the
        batch-size scenario: its seven actors, 15 s into a 20 s start, started over).
        """
        pool = self.pool
        notes: list[str] = []
        self.old &= set(pool._running_actors)  # old actors that died or were released elsewhere
        self.kept &= set(pool._running_actors)
        if self.target.swap:
            return self._swap_step(notes, starts)
        new_running = sum(1 for a in pool._running_actors if a not in self.old and a not in self.kept)
        started = resize(pool, size=self.new_size(), target=self.size, budget=None,
                         reason="trident rolling update: new actors first", starts=starts)
        if started:
            notes.append(f"started {started} new actor(s)")
            if self.surge_started_s is None:
                self.surge_started_s = now_s
        draining = self.old & pool.trident_retiring
        serving = sorted(self.old - pool.trident_retiring, key=lambda a: not self._on_target_type(a))
        to_retire = min(len(serving), max(0, new_running - self.retired))
        if new_running + len(self.kept) >= self.size:  # the new pool is complete: every old actor goes
            to_retire = len(serving)
        if self.kept:  # old actors beyond the target once the kept ones count: surplus at once
            to_retire = min(len(serving), max(to_retire, len(self.kept) + new_running + len(serving) - self.size))
        in_the_way = sum(1 for a in serving if self._on_target_type(a))
        making_room = min(in_the_way, pool.num_pending_actors())
        if (new_running == 0 and not draining and making_room == 0 and self.surge_started_s is not None
                and now_s - self.surge_started_s > self.pending_guard_s
                and not (self.room_beside is not None and self.room_beside(pool.num_pending_actors()))):
            self.target = dataclasses.replace(self.target, swap=True)  # no room beside the old ones
            self.swap_cap = min(self.size, len(pool._running_actors))
            notes.append(f"no new actor up {self.pending_guard_s:.0f} s after the surge began: swapping instead")
            return self._swap_step(notes, starts)
        to_retire = max(to_retire, making_room)
        for actor in serving[:to_retire]:
            stop_scheduling(pool, actor)
            self.retired += 1
            room = self._on_target_type(actor) and making_room
            notes.append("draining 1 old actor" + (" to make room" if room else ""))
        self._release_drained(notes)
        return notes

    def _swap_step(self, notes: list[str], starts: Starts | None = None) -> list[str]:
        """A swap: old actors leave half the pool at a time
        (:func:`~trident.autoscaler.actuation.swap_window`; fewest tasks in flight first) and new ones
        start in the room they leave, old and new together never more than the smaller of the
        old pool and the new one (``swap_cap``) until the last old actor is gone. Old actors beyond
        the target once the kept ones count leave at once (two-types: Detect kept its two actors on
        B and its four on A left two, then one at a time, over 6.5 s, while Embed's four new actors
        waited for A's GPUs)."""
        pool = self.pool
        self._release_drained(notes)
        most = min(self.size, self.swap_cap) if self.old else self.size
        started = resize(pool, size=self.new_size(), target=max(len(self.kept), most - len(self.old)), budget=None,
                         reason="trident rolling update: a new actor where an old one left", starts=starts)
        if started > 0:
            notes.append(f"started {started} new actor(s)")
        draining = self.old & pool.trident_retiring
        serving = sorted(self.old - pool.trident_retiring, key=lambda a: pool._running_actors[a].num_tasks_in_flight)
        leave = swap_window(self.size, len(self.old), len(self.kept)) - len(draining) - pool.num_pending_actors()
        if self.kept:  # old actors beyond the target once the kept (and new) ones count leave at once
            leave = max(leave, self.new_size() + len(serving) - self.size)
        for actor in serving[:max(0, leave)]:
            stop_scheduling(pool, actor)
            self.retired += 1
            notes.append("draining 1 old actor to make room")
        return notes

    def _release_drained(self, notes: list[str]) -> None:
        pool = self.pool
        for actor in list(self.old & pool.trident_retiring):
            state = pool._running_actors.get(actor)
            if state is not None and state.num_tasks_in_flight == 0:
                pool._release_running_actor(actor)
                pool.trident_retiring.discard(actor)
                self.old.discard(actor)
                notes.append("released 1 drained old actor")

    def _on_target_type(self, actor: Any) -> bool:
        """Whether ``actor`` runs on a node of the accelerator type the update moves to."""
        t = self.target.accelerator_type
        state = self.pool._running_actors.get(actor)
        return t is not None and state is not None and self.node_type.get(state.actor_location) == t

    def abandon(self) -> None:
        """Hand the pool back as it is: drained old actors become schedulable again."""
        self.pool.trident_retiring.clear()
        self.old.clear()
