"""The pure control loop run inside the controller actor (and by the simulators)."""
from __future__ import annotations

import trident.autoscaler.policies  # noqa: F401  (registers the built-in policies)
from trident.core.errors import ConfigError
from trident.core.policy import POLICIES, Policy, PolicyContext
from trident.core.types import Decision, Plan, Snapshot


class ControlLoop:
    """Feeds snapshots to one policy and keeps every decision it made.

    Pure: no Ray, no clock; ``now`` is given by the caller (seconds).
    """

    def __init__(self, *, policy: str | Policy, context: PolicyContext | None = None) -> None:
        ctx = context or PolicyContext()
        self.policy: Policy = POLICIES.create(policy, context=ctx) if isinstance(policy, str) else policy
        if not callable(getattr(self.policy, "step", None)):
            raise ConfigError("policy", self.policy,
                              "a policy with a step(snapshot, now) -> Decision method (the factory returned an "
                              f"object of type {type(self.policy).__name__} without one)")
        self.decisions: list[Decision] = []
        self.latest_plan: Plan | None = None

    def step(self, snapshot: Snapshot, now: float) -> Decision:
        decision = self.policy.step(snapshot, now)
        self.decisions.append(decision)
        if decision.plan is not None:
            self.latest_plan = decision.plan
        return decision
