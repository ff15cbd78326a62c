"""Ray Data's own autoscaling rule, played on the fluid simulator (where the ``ray`` policy only
observes): every step each actor pool moves as Ray 2.60's ``BacklogAwareActorAutoscaler`` would
move it (:func:`~trident.autoscaler.policies.trident.inner.ray_rule`: up one at utilisation >= 1.75
or a backlog, down one at <= 0.5, never while actors are pending nor within 10 s of growing), within the user's bounds,
a scale-up within what the cluster's free CPUs and GPUs hold in all (:func:`_budget`); task
operators keep the concurrency the user gave them.
The baseline of the generated-scenario benchmark. Pure: no Ray."""
from __future__ import annotations

import math

from trident.autoscaler.policies.trident.inner import Growth, Room, pool_view, ray_rule, room_of
from trident.autoscaler.policies.trident.settings import TridentSettings
from trident.core.policy import PolicyContext
from trident.core.types import Decision, DecisionKind, OperatorConfig, OperatorTarget, Plan, Snapshot


class RayRule:
    """Ray Data's per-pool rule at every step; task operators as the user set them."""

    name = "ray-rule"

    def __init__(self, *, context: PolicyContext | None = None) -> None:
        self.context = context or PolicyContext()
        self.settings = TridentSettings()
        self.seq = 0
        self.sent: dict[str, int] = {}
        self.growth = Growth()

    def step(self, snapshot: Snapshot, now: float) -> Decision:
        targets, why = [], []
        self.growth.see(snapshot)
        since = self.growth.since(snapshot)
        room = room_of(snapshot, {}, {}, None, margin=0.0)
        for o in snapshot.operators:
            c = o.config
            if o.completed or c.kind != "actor":
                continue
            size, reason = ray_rule(pool_view(o, since_grew_s=since.get(o.name, math.inf)), self.settings,
                                    queue_holds=False)
            size = max(c.min_replicas, size if c.max_replicas is None else min(size, c.max_replicas))
            budget = _budget(room, c)
            if budget is not None and size > (c.replicas or 0):
                size = min(size, (c.replicas or 0) + budget)
            if size != (c.replicas or 0) and self.sent.get(o.name) != size:
                self.sent[o.name] = size
                targets.append(OperatorTarget(name=o.name, replicas=size))
                why.append(f"{o.name} {c.replicas} -> {size}: {reason}")
        if not targets:
            return Decision(time_s=now, reason="ray rule: no change", kind=DecisionKind.OBSERVE)
        self.seq += 1
        reason = "ray rule: " + "; ".join(why)
        return Decision(time_s=now, reason=reason, kind=DecisionKind.INNER,
                        plan=Plan(seq=self.seq, targets=tuple(targets), reason=reason, created_at_s=now))


def _budget(room: Room, c: OperatorConfig) -> int | None:
    """Actors of configuration ``c`` Ray's autoscaler may add: what the cluster's free CPUs and GPUs
    hold in all (its budget is a sum over the nodes, not a node's room; Ray 2.60's
    ``_get_max_scale_up``), at least none; ``None`` (no cap) for an actor that needs neither."""
    n = min([have / need for need, have in ((c.num_cpus, room.cpus), (c.num_gpus, room.gpus)) if need > 0],
            default=math.inf)
    return None if math.isinf(n) else max(0, int(n + 1e-9))
