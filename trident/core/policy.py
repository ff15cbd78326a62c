"""The one plug-in signature for pipeline policies, and their registry.

A policy is pure: it sees frozen snapshots and an explicit ``now`` and returns a
:class:`~trident.core.types.Decision`. It owns its RNG (seeded through :class:`PolicyContext`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from trident.core.errors import ConfigError
from trident.core.registry import Registry
from trident.core.types import Decision, Snapshot
from trident.core.model.prior import OperatorPrior


@dataclass(frozen=True)
class PolicyContext:
    """Everything a policy is constructed with (keyword-only, validated)."""

    memory_limit_bytes: int | None = None
    seed: int = 0
    dry_run: bool = False
    priors: tuple[OperatorPrior, ...] = ()
    """What earlier runs taught of this execution's operators (:mod:`trident.history`); a
    policy may plan with it before its own measurements come in."""

    def __post_init__(self) -> None:
        if self.memory_limit_bytes is not None and self.memory_limit_bytes <= 0:
            raise ConfigError("memory_limit", self.memory_limit_bytes, "None or a positive number of bytes")


class Policy(Protocol):
    """``step(snapshot, now)`` returns a Decision; it may keep state between calls. A policy class
    with ``ray_until_named = True`` leaves each actor pool to Ray Data's own autoscaler until one
    of its plans names the pool (runs without a memory limit); otherwise a pool holds its size."""

    name: str

    def step(self, snapshot: Snapshot, now: float) -> Decision: ...


POLICIES: Registry[Policy] = Registry("policy")
