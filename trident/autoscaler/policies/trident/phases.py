"""Rollout phases: apply a plan phase by phase, and never wait on a target that is not moving.

A phase is done when each of its pools has reached its replicas (new ones up; for a drain, the
old ones finished). A pool that stands still short of its target for ``stuck_intervals`` steps
(plus the observed cold start while an actor is pending) is stuck: the obstacle is looked up
in the snapshot (GPUs or CPUs taken, CPUs held by task operators, memory, or no actor started
at all) and the rollout ends with it named, so the planner plans again around it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from trident.autoscaler.actuation import RolloutStep
from trident.autoscaler.policies.trident.estimates import is_sink
from trident.autoscaler.policies.trident.inner import Room, room_of
from trident.core.types import OperatorSnapshot, OperatorTarget, Snapshot

STARTING_COLD_STARTS = 3.0
"""Cold starts a pool's pending actors may take, when nothing is short, before it counts as stuck
(a loaded machine starts actors slowly; cancelling them would only start them again)."""
DRAIN_TASKS = 3.0
"""Task durations (p90) a drain may take before the next phase goes ahead anyway, at least (a
drained actor finishes the tasks queued on it: one more than the pool's tasks in flight per
actor when that is longer)."""


@dataclass
class Progress:
    """What a pool looked like when it last moved."""

    state: tuple[int, int, int, int]
    """(replicas, running actors, pending actors, old actors of a rolling update)."""
    since_s: float
    steps: int = 0


@dataclass
class Stuck:
    """A pool that does not reach its target, and why."""

    operator: str
    reached: int
    wanted: int
    obstacle: str
    task_caps: tuple[OperatorTarget, ...] = ()
    """Caps on task operators that free the CPUs the pool needs (empty when that cannot help)."""
    short: bool = True
    """Whether a resource is short (else the actors are only slow to start)."""
    drain: bool = False
    """A drain still waiting on busy actors: the next phase goes ahead, nothing is re-planned."""
    before: int = 0
    """The pool's replicas before the step (a re-plan never holds it below them, nor above the
    step's target)."""


@dataclass
class Phases:
    """The phases of the rollout in progress."""

    pending: list[tuple[RolloutStep, ...]] = field(default_factory=list)
    current: tuple[RolloutStep, ...] = ()
    started_s: float = 0.0
    plan_seq: int = 0
    """The plan that started the current phase: nothing is judged before the executor applied it."""
    progress: dict[str, Progress] = field(default_factory=dict)
    trial: bool = False
    """The rollout carries a batch-size trial: what it measures is due at once when it completes."""

    @property
    def active(self) -> bool:
        return bool(self.current)

    def start(self, phases: list[tuple[RolloutStep, ...]], now: float, *,
              trial: bool = False) -> tuple[RolloutStep, ...]:
        self.pending, self.trial = list(phases), trial
        return self.advance(now)

    def advance(self, now: float) -> tuple[RolloutStep, ...]:
        """The next phase (empty when the rollout is done); give it ``plan_seq`` once issued."""
        self.current = self.pending.pop(0) if self.pending else ()
        self.started_s = now
        self.progress = {}
        return self.current

    def clear(self) -> None:
        self.pending, self.current, self.progress, self.plan_seq, self.trial = [], (), {}, 0, False

    def operators(self) -> frozenset[str]:
        return frozenset(st.operator for st in self.current)

    def settling(self, snap: Snapshot) -> list[RolloutStep]:
        """The phase's steps not reached yet (all of them until the executor has applied it)."""
        if snap.applied_plan_seq < self.plan_seq:
            return list(self.current)
        byname = {o.name: o for o in snap.operators}
        return [st for st in self.current if st.operator in byname and _settling(byname[st.operator], st)]

    def stuck(self, snap: Snapshot, now: float, *, patience_steps: int, cold_start_s: dict[str, float],
              heap_bytes: dict[str, float], memory_limit_bytes: int | None, margin: float) -> Stuck | None:
        """The first settling pool that has not moved for ``patience_steps`` steps (plus its cold
        start while an actor is pending), with its obstacle; ``None`` while all move or wait."""
        if snap.applied_plan_seq < self.plan_seq:
            self.progress = {}  # the phase is not applied yet: its clock has not started
            return None
        byname = {o.name: o for o in snap.operators}
        settling = self.settling(snap)
        draining = any(st.action == "scale_down" for st in settling)
        for st in settling:
            o = byname[st.operator]
            if draining and st.action == "scale_up":  # it starts in the room the drains free: its clock
                self.progress.pop(st.operator, None)  # starts when they are done
                continue
            state = (o.config.replicas or 0, o.actors_running, o.actors_pending, o.old_actors)
            p = self.progress.get(st.operator)
            if p is None or p.state != state:
                self.progress[st.operator] = Progress(state=state, since_s=now)
                continue
            p.steps += 1
            held = {s.operator: max(s.replicas_to, 0) for s in self.current}
            why = obstacle(snap, o, st, room_of(snap, held, heap_bytes, memory_limit_bytes, margin=margin))
            grace = 0.0
            cold = cold_start_s.get(st.operator, 0.0)
            if st.action == "scale_down" or o.old_actors:  # drained actors finish the tasks they hold
                queued = math.ceil(o.tasks_in_flight / max(o.actors_running, 1))  # each drained actor's queue
                grace = max(DRAIN_TASKS, queued + 1) * (o.task_duration_p90_s or cold)
            if st.action != "scale_down" and (o.actors_pending or o.old_actors):
                # starting actors (or, in a rolling update, about to start): a cold start,
                # several when nothing is short
                grace += cold * (1 if why.short else STARTING_COLD_STARTS)
            if p.steps >= patience_steps and now - p.since_s >= grace:
                return why
        return None


def _settling(o: OperatorSnapshot, st: RolloutStep) -> bool:
    """Whether ``o`` has yet to reach the step's replicas: new ones still starting, old ones of a
    rolling update still running, or (for a drain) old ones still finishing their work, so the
    next phase's memory is not yet free."""
    if st.action == "scale_down":
        return o.config.kind == "actor" and o.actors_running > st.replicas_to
    return (o.actors_pending > 0 or o.config.replicas != st.replicas_to
            or (st.action == "update" and o.old_actors > 0))


def obstacle(snap: Snapshot, o: OperatorSnapshot, st: RolloutStep, room: Room) -> Stuck:
    """Why ``o`` stays short of ``st.replicas_to`` (``room``: what is left once every pool holds
    its target): the resource that is short, and task caps that would free CPUs."""
    return replace(_obstacle(snap, o, st, room), before=st.replicas_from)


def _obstacle(snap: Snapshot, o: OperatorSnapshot, st: RolloutStep, room: Room) -> Stuck:
    reached = o.actors_running
    c = o.config
    if st.action == "scale_down":
        return Stuck(o.name, reached, st.replicas_to, f"{reached - st.replicas_to} drained actor(s) still busy",
                     short=False, drain=True)
    gpus = room.gpus_by_type.get(c.accelerator_type, room.gpus) if c.accelerator_type else room.gpus
    if c.num_gpus > 0 and gpus < -1e-9:
        kind = f" of type {c.accelerator_type}" if c.accelerator_type else ""
        return Stuck(o.name, reached, st.replicas_to, f"the cluster has {-gpus:.2g} GPUs{kind} too few for the plan")
    if room.cpus < -1e-9:
        caps, held = _task_caps(snap, -room.cpus)
        return Stuck(o.name, reached, st.replicas_to, f"{-room.cpus:.2g} CPUs short: held by {held}", caps)
    if room.memory_bytes < 0:
        return Stuck(o.name, reached, st.replicas_to, "the memory limit leaves no room for another replica")
    if o.actors_pending == 0:
        return Stuck(o.name, reached, st.replicas_to,
                     "no actor was started: Ray Data's per-operator budget or the pool's max_size held it back")
    caps, held = _task_caps(snap, o.actors_pending * c.num_cpus)
    if caps and not _gpu_nodes_hold_all(snap, o):
        # the totals fit, a node does not: task operators' CPUs are the part trident can move
        # (after the patience of a slow start: at one cold start this capped the reads of a
        # pool's 7 starting actors on a loaded machine, and the reads became the bottleneck)
        return Stuck(o.name, reached, st.replicas_to, f"{o.actors_pending} actor(s) still pending although the "
                     f"plan fits the cluster's totals: the CPUs of the nodes they need are taken, by {held}", caps,
                     short=False)
    return Stuck(o.name, reached, st.replicas_to, f"{o.actors_pending} actor(s) still pending although the plan "
                 "fits the cluster: no single node has room for them, or they fail to start", short=False)


def _gpu_nodes_hold_all(snap: Snapshot, o: OperatorSnapshot) -> bool:
    """Whether ``o`` is a GPU pool and the CPUs of the GPU nodes (the typed ones) hold every GPU
    pool's actors and every running task at once: then task operators cannot be what keeps its
    actors pending, they are slow to start (on the batch-size scenario 7 actors took over 15 s where
    the GPU nodes' 12 CPUs held all 8 actors and the 4 read tasks, and the reads were capped at one
    task for 19 s)."""
    node_cpus = sum(c for _, c in snap.cluster.cpus_by_type)
    if o.config.num_gpus <= 0 or node_cpus <= 0:
        return False
    actors = sum((x.config.replicas or 0) * x.config.num_cpus for x in snap.operators
                 if x.config.kind == "actor" and x.config.num_gpus > 0 and not x.completed)
    tasks = sum(t.tasks_running * t.config.num_cpus for t in snap.operators if t.config.kind == "task" and not t.completed)
    return actors + tasks <= node_cpus + 1e-9


def _tasks(snap: Snapshot) -> list[OperatorSnapshot]:
    """Running task operators that hold CPUs, a Write sink left out (its tasks are short and
    capping it would throttle the output)."""
    return [t for t in snap.operators if t.config.kind == "task" and not t.completed and t.config.num_cpus > 0
            and not is_sink(t)]


def _task_caps(snap: Snapshot, cpus: float) -> tuple[tuple[OperatorTarget, ...], str]:
    """Caps on running task operators (the busiest first, each keeping one task) that free
    ``cpus`` CPUs, and who holds them (for the reason)."""
    tasks = sorted((t for t in _tasks(snap) if t.tasks_running > 1), key=lambda t: -t.tasks_running * t.config.num_cpus)
    caps, freed = [], 0.0
    for t in tasks:
        if freed >= cpus:
            break
        give = min(t.tasks_running - 1, math.ceil((cpus - freed) / t.config.num_cpus))
        if give > 0:
            caps.append(OperatorTarget(name=t.name, replicas=t.tasks_running - give))
            freed += give * t.config.num_cpus
    return tuple(caps), ", ".join(f"{t.name} ({t.tasks_running} tasks)" for t in tasks) or "the other pools"


def hold_tasks(snap: Snapshot) -> tuple[OperatorTarget, ...]:
    """Caps holding each running task operator at its running tasks: while GPU actors start in
    room other actors leave, new tasks must not take the CPUs of that room."""
    return tuple(OperatorTarget(name=t.name, replicas=max(t.tasks_running, 1)) for t in _tasks(snap))
