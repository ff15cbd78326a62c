"""From a plan diff to ordered rollout steps, and the gate that decides whether to roll out at all.

New replicas come up before old ones drain, so throughput never dips during a
change: the bottleneck's additions first, then drains of over-provisioned
operators, then additions that need the resources those drains free (asked for
with the drains when only GPUs and CPUs are short: Ray starts them as the room
frees; after the drains under a memory limit). A change is
made only when the time it saves on the remaining work exceeds what it costs: the
cold start, or, when no drain takes an operator below the current throughput (the
pipeline keeps its pace while new replicas start), the cold start times the share of
the new throughput that waits for it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from trident.core.errors import ConfigError
from trident.core.types import OperatorConfig, OperatorTarget

Action = Literal["scale_up", "update", "scale_down"]

PHASE_UP, PHASE_DRAIN, PHASE_UP_AFTER_DRAIN = 0, 1, 2


@dataclass(frozen=True)
class RolloutStep:
    """One operator's change: ``target`` is what the shim applies; ``phase`` orders the steps."""

    operator: str
    action: Action
    replicas_from: int
    replicas_to: int
    target: OperatorTarget
    phase: int
    reason: str


@dataclass(frozen=True)
class Rollout:
    """Ordered steps and the gate's verdict (``go``) with its reason."""

    steps: tuple[RolloutStep, ...]
    go: bool
    reason: str
    time_saved_s: float
    cold_start_s: float

    def phases(self) -> list[tuple[RolloutStep, ...]]:
        """Steps grouped by phase, in the order they are applied (empty phases left out)."""
        out = []
        for p in (PHASE_UP, PHASE_DRAIN, PHASE_UP_AFTER_DRAIN):
            group = tuple(s for s in self.steps if s.phase == p)
            if group:
                out.append(group)
        return out


@dataclass(frozen=True)
class RolloutInputs:
    """What the gate and the ordering need besides the two configurations.

    ``utilisation`` is demand / capacity per operator (the bottleneck has the highest);
    ``remaining_rows`` is ``None`` for an unbounded stream. Free resources, when given,
    decide which additions can start before anything drains: ``free_gpus_by_type`` for
    operators pinned to an accelerator type, ``free_gpus`` for the others, and free memory
    under the limit, so that old and new replicas together never exceed it.
    """

    current_throughput_rows_per_s: float
    new_throughput_rows_per_s: float
    remaining_rows: float | None
    cold_start_s: dict[str, float]
    utilisation: dict[str, float]
    free_cpus: float | None = None
    free_gpus: float | None = None
    free_gpus_by_type: dict[str, float] | None = None
    free_gpu_node_cpus: dict[str | None, float] | None = None
    """CPUs the GPU pools leave on the GPU nodes, in all (key ``None``) and per accelerator type
    (:attr:`~trident.autoscaler.policies.trident.inner.Room.gpu_node_cpus`): a GPU actor's CPUs
    come from its own node, so the head's free CPUs start no GPU actor."""
    free_memory_bytes: float | None = None
    """Memory left under the limit by the current replicas (bytes); ``None``: no limit."""
    memory_per_replica_bytes: dict[str, float] | None = None
    """Memory a new replica of each operator takes (bytes), for ``free_memory_bytes``."""
    pay_margin: float = 1.0
    """How many times its cost a change must save (the gain is a prediction; the cost is paid)."""
    actors_by_type: dict[str, dict[str, int]] | None = None
    """Running actors of each pool per accelerator type, for a move of one pool to another type:
    it swaps only when its old actors hold GPUs another step's new actors need."""

    def __post_init__(self) -> None:
        if self.current_throughput_rows_per_s < 0 or self.new_throughput_rows_per_s < 0:
            raise ConfigError("throughput_rows_per_s",
                              (self.current_throughput_rows_per_s, self.new_throughput_rows_per_s), "numbers >= 0")
        if self.remaining_rows is not None and self.remaining_rows < 0:
            raise ConfigError("remaining_rows", self.remaining_rows, "None or rows >= 0")


PENDING_GUARD_S = 15.0
"""Seconds a rolling update's surge waits at least for its first new actor before it goes on as a
swap (:class:`trident.autoscaler.shim.rollout.Rollout`; the fluid simulator waits as long for room for one)."""
PENDING_GUARD_COLD_STARTS = 3.0
"""... or this many of the run's last observed cold start, when longer: on a loaded 2-core
machine 6 actors starting at once took 30 s, and a swap at 15 s cancelled them and started them
again (the batch-size scenario's first plan reached its target 62 s after it was made)."""


def pending_guard_s(cold_start_s: float | None) -> float:
    """How long a surge waits for its first new actor, given the last observed cold start (s)."""
    return max(PENDING_GUARD_S, PENDING_GUARD_COLD_STARTS * (cold_start_s or 0.0))


def swap_window(size: int, old: int, kept: int = 0) -> int:
    """Actors leaving or starting at once in a swap (a rolling update without room for new
    actors beside the old ones): half the larger of the target size and the old actors left,
    at least one, and never every old actor while more than one serves and no ``kept`` actor
    (one already on the type the update moves to) serves beside them. Each actor is away for
    one drain and one cold start whatever the window; a wider one brings the new configuration
    sooner (a quarter took 60 s for 8 actors on the scenario suite). A pool growing in the swap
    keeps one old actor serving until new ones are up (on two-types Embed's two old actors left
    at once, 2 -> 4 on the other type, and it ran none for 16.5 s while its new actors waited
    for room and then started); beside kept actors its old ones may all leave at once (on
    two-types Detect kept two of four actors on B and swapped the two on A one at a time, the
    second drained only once the first's successor was up: 9.7 s to the target where one drain
    and one start took 4-5 s)."""
    return min(max(1, math.ceil(max(size, old) / 2)), old if kept > 0 else max(1, old - 1))


def time_saved_s(current_rows_per_s: float, new_rows_per_s: float, remaining_rows: float | None) -> float:
    """Seconds the remaining work takes less at ``new`` than at ``current`` throughput
    (the expected gain times the remaining work).

    ``inf`` for an unbounded stream that gains, and for a stalled pipeline that the change
    unblocks; ``-inf`` when the change loses throughput.
    """
    if new_rows_per_s <= current_rows_per_s:
        return 0.0 if new_rows_per_s == current_rows_per_s else -math.inf
    if remaining_rows is None or current_rows_per_s <= 0:
        return math.inf
    return remaining_rows / current_rows_per_s - remaining_rows / new_rows_per_s


def plan_rollout(current: dict[str, OperatorConfig], targets: tuple[OperatorTarget, ...],
                 inputs: RolloutInputs) -> Rollout:
    """Order the changes from ``current`` to ``targets`` and gate them."""
    steps: list[RolloutStep] = []
    for t in targets:
        cfg = current.get(t.name)
        if cfg is None:
            continue
        cur_n = cfg.replicas or 0
        new_n = cur_n if t.replicas is None else t.replicas
        changes = _config_changes(cfg, t)
        if changes:
            steps.append(RolloutStep(operator=t.name, action="update", replicas_from=cur_n, replicas_to=new_n,
                                     target=t, phase=PHASE_UP,
                                     reason=f"rolling update of {t.name} ({', '.join(changes)}): "
                                            f"{new_n} new replicas up before {cur_n} old drain"))
        elif new_n > cur_n:
            steps.append(RolloutStep(operator=t.name, action="scale_up", replicas_from=cur_n, replicas_to=new_n,
                                     target=OperatorTarget(name=t.name, replicas=new_n), phase=PHASE_UP,
                                     reason=f"scale {t.name} up {cur_n} -> {new_n}"))
        elif new_n < cur_n:
            steps.append(RolloutStep(operator=t.name, action="scale_down", replicas_from=cur_n, replicas_to=new_n,
                                     target=OperatorTarget(name=t.name, replicas=new_n), phase=PHASE_DRAIN,
                                     reason=f"drain {t.name} {cur_n} -> {new_n}"))
    steps = _order(steps, current, inputs)
    starting = [s for s in steps if s.action != "scale_down"]
    cold = max((inputs.cold_start_s.get(s.operator, 0.0) for s in starting), default=0.0)
    saved = time_saved_s(inputs.current_throughput_rows_per_s, inputs.new_throughput_rows_per_s,
                         inputs.remaining_rows)
    if not steps:
        return Rollout(steps=(), go=False, reason="nothing to change", time_saved_s=0.0, cold_start_s=0.0)
    gain = f"{inputs.current_throughput_rows_per_s:.1f} -> {inputs.new_throughput_rows_per_s:.1f} rows/s"
    cost, what = cold, f"the {cold:.1f} s cold start"
    if starting and not _dips(steps, inputs) and inputs.new_throughput_rows_per_s > 0:
        # no drain takes an operator below the current throughput and new replicas come up before
        # old ones go: the pipeline keeps its pace while they start, so only the gain waits
        ratio = inputs.current_throughput_rows_per_s / inputs.new_throughput_rows_per_s
        cost, what = cold * (1 - ratio), f"{cold * (1 - ratio):.1f} s it costs ({cold:.1f} s cold start of the gain)"
    if not starting:
        go, why = saved >= 0, f"drain only ({gain}); no cold start to pay"
    elif saved > cost * inputs.pay_margin:
        left = "an unbounded stream" if inputs.remaining_rows is None else f"{inputs.remaining_rows:.0f} rows left"
        go, why = True, f"{gain} saves {_fmt_s(saved)} on {left}, more than {_times(inputs.pay_margin)}{what}"
    else:
        go, why = False, (f"{gain} would save {_fmt_s(saved)} on {inputs.remaining_rows or 0:.0f} rows left, "
                          f"not more than {_times(inputs.pay_margin)}{what}")
    return Rollout(steps=tuple(steps), go=go, reason=why, time_saved_s=saved, cold_start_s=cold)


def _dips(steps: list[RolloutStep], inputs: RolloutInputs) -> bool:
    """Whether a drain leaves its operator too few replicas for the current throughput
    (utilisation x replicas before / after > 1), or the utilisation is not known."""
    for s in steps:
        if s.action == "scale_down":
            util = inputs.utilisation.get(s.operator)
            if util is None or s.replicas_to <= 0 or util * s.replicas_from / s.replicas_to > 1.0:
                return True
    return False


def _times(k: float) -> str:
    """``"2 x "`` for a margin of 2 (nothing for 1), for the gate's reason."""
    return "" if k == 1.0 else f"{k:g} x "


def _fmt_s(s: float) -> str:
    return "unbounded time" if math.isinf(s) else f"{s:.1f} s"


def _config_changes(cfg: OperatorConfig, t: OperatorTarget) -> list[str]:
    out = []
    if t.batch_size is not None and t.batch_size != cfg.batch_size:
        out.append(f"batch_size {cfg.batch_size} -> {t.batch_size}")
    if t.num_gpus is not None and t.num_gpus != cfg.num_gpus:
        out.append(f"num_gpus {cfg.num_gpus:g} -> {t.num_gpus:g}")
    if t.accelerator_type is not None and t.accelerator_type != cfg.accelerator_type:
        out.append(f"accelerator {cfg.accelerator_type} -> {t.accelerator_type}")
    return out


def _type_move(s: RolloutStep, cfg: OperatorConfig) -> bool:
    """Whether the update changes the accelerator type and nothing a new actor holds."""
    t = s.target
    return (t.accelerator_type not in (None, cfg.accelerator_type) and t.batch_size in (None, cfg.batch_size)
            and t.num_gpus in (None, cfg.num_gpus))


def _holds_wanted_room(s: RolloutStep, ups: list[RolloutStep], current: dict[str, OperatorConfig],
                       inputs: RolloutInputs, free: dict) -> bool:
    """Whether the old actors of ``s``'s pool may hold GPUs or CPUs that another step's new actors
    need: they are on a type another step adds actors to, beyond that pool's actors already there
    and the type's free GPUs (and CPUs, where known). Without ``actors_by_type`` for the pool,
    assumed so."""
    by_type = inputs.actors_by_type or {}
    mine = by_type.get(s.operator)
    if mine is None:
        return True
    for o in ups:
        cfg = current[o.operator]
        t = o.target.accelerator_type or cfg.accelerator_type
        if o is s or t is None or t == s.target.accelerator_type or not mine.get(t):
            continue
        if t not in free:
            return True
        added = max(0, o.replicas_to - by_type.get(o.operator, {}).get(t, 0))
        gpus_each = cfg.num_gpus if o.target.num_gpus is None else o.target.num_gpus
        if added * gpus_each > free[t] + 1e-9 or added * cfg.num_cpus > _node_cpus(free, t) + 1e-9:
            return True
    return False


def _node_cpus(free: dict, accel: str | None) -> float:
    """CPUs free where a GPU actor of type ``accel`` can start: its type's nodes, and never more
    than all GPU nodes have free (an unpinned pool's pending actors are charged to them alone:
    which type they land on is not known; read per type only, a surge looked possible where
    those pending actors were about to take the CPUs); unbounded where the nodes are not known."""
    total = free.get(("cpu", None), math.inf)
    return min(free.get(("cpu", accel), total), total)


def _take_node_cpus(free: dict, accel: str | None, cpus: float) -> None:
    """Charge ``cpus`` to the GPU nodes: to all of them and to ``accel``'s (as the room is read)."""
    for key in {("cpu", None), ("cpu", accel)}:
        if key in free:
            free[key] -= cpus


def _order(steps: list[RolloutStep], current: dict[str, OperatorConfig], inputs: RolloutInputs) -> list[RolloutStep]:
    """Additions bottleneck first (those that do not fit the free resources or memory wait for
    the drains - a scale-up short only of GPUs or CPUs is asked for beside them - or, for a
    rolling update with no drain to wait for, swap old actors for new ones); drains
    least-utilised first."""
    util = inputs.utilisation
    ups = sorted((s for s in steps if s.phase == PHASE_UP), key=lambda s: (-util.get(s.operator, 0.0), s.operator))
    downs = sorted((s for s in steps if s.phase == PHASE_DRAIN), key=lambda s: (util.get(s.operator, 0.0), s.operator))
    free = {"cpu": math.inf if inputs.free_cpus is None else inputs.free_cpus,
            None: math.inf if inputs.free_gpus is None else inputs.free_gpus,
            "memory": math.inf if inputs.free_memory_bytes is None else inputs.free_memory_bytes}
    memory_each = inputs.memory_per_replica_bytes or {}
    free.update(inputs.free_gpus_by_type or {})
    free.update({("cpu", t): c for t, c in (inputs.free_gpu_node_cpus or {}).items()})
    ordered = []
    for s in ups:
        cfg = current[s.operator]
        added = s.replicas_to if s.action == "update" else s.replicas_to - s.replicas_from
        gpus_each = cfg.num_gpus if s.target.num_gpus is None else s.target.num_gpus
        accel = s.target.accelerator_type or cfg.accelerator_type
        pool = accel if accel in free else None
        need_cpu, need_gpu = added * cfg.num_cpus, added * gpus_each
        need_mem = added * memory_each.get(s.operator, 0.0)
        node_cpu = _node_cpus(free, accel) if gpus_each > 0 else math.inf
        if (need_cpu <= min(free["cpu"], node_cpu) + 1e-9 and need_gpu <= free[pool] + 1e-9
                and need_mem <= free["memory"]):
            free["cpu"] -= need_cpu
            free[pool] -= need_gpu
            free["memory"] -= need_mem
            if gpus_each > 0:
                _take_node_cpus(free, accel, need_cpu)
            ordered.append(s)
        elif (s.action == "update" and _type_move(s, cfg) and need_mem <= free["memory"]
              and not _holds_wanted_room(s, ups, current, inputs, free)):
            # the pool's old actors hold no room another step waits for: a swap would only idle them.
            # Its new actors wait for room on their type while the old ones serve (two-types: Embed's
            # two old actors on B left at once for four new ones waiting on A, where Detect's old
            # actors were leaving, and Embed ran none for 12 s). Not past the memory limit: old and
            # new side by side would be OOM-killed (seed 13 of the generated scenarios: 11 new
            # actors of 3 GiB beside 4 old ones under a 24 GiB limit)
            ordered.append(s)
        elif s.action == "update" and not downs:  # nothing drains to make room: old and new trade places
            ordered.append(RolloutStep(**{**s.__dict__, "target": replace(s.target, swap=True),
                                          "reason": s.reason + " (no room beside the old ones: swapped half the "
                                                               "pool at a time)"}))
        elif s.action == "scale_up" and downs and inputs.free_memory_bytes is None:
            # only GPUs and CPUs are short, and Ray holds the new actors pending until the drains
            # free them: asked for with the drains, they start as soon as the room is there, not
            # an interval later (first try: Detect's two new actors started 1.1 s after Embed's
            # idle ones had left). Under a memory limit old and new would overlap in memory
            ordered.append(RolloutStep(**{**s.__dict__, "phase": PHASE_DRAIN,
                                          "reason": s.reason + " (its actors start as the drains free their room)"}))
        else:
            ordered.append(RolloutStep(**{**s.__dict__, "phase": PHASE_UP_AFTER_DRAIN,
                                          "reason": s.reason + " (after drains free its resources)"}))
    return ([s for s in ordered if s.phase == PHASE_UP] + downs + [s for s in ordered if s.phase == PHASE_DRAIN]
            + [s for s in ordered if s.phase == PHASE_UP_AFTER_DRAIN])
