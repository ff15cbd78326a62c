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


MEMORY_SCOPES = ("ray", "workers")
"""What a memory limit covers: every Ray process on the driver's machine, or the pipeline's workers alone."""


@dataclass(frozen=True)
class PolicyContext:
    """Everything a policy is constructed with (keyword-only, validated)."""

    memory_limit_bytes: int | None = None
    memory_scope: str = "workers"
    """What ``memory_limit_bytes`` covers (:data:`MEMORY_SCOPES`). ``trident.autoscale`` passes its
    own (``"ray"`` unless told); the simulator, whose limit holds its workers alone, keeps this."""
    seed: int = 0
    dry_run: bool = False
    priors: tuple[OperatorPrior, ...] = ()
    """What earlier runs taught of this execution's operators (:mod:`trident.history`); a
    policy may plan with it before its own measurements come in."""

    def __post_init__(self) -> None:
        if self.memory_limit_bytes is not None and self.memory_limit_bytes <= 0:
            raise ConfigError("memory_limit", self.memory_limit_bytes, "None or a positive number of bytes")
        if self.memory_scope not in MEMORY_SCOPES:
            raise ConfigError("memory_scope", self.memory_scope, " or ".join(repr(m) for m in MEMORY_SCOPES))


class Policy(Protocol):
    """``step(snapshot, now)`` returns a Decision; it may keep state between calls. A policy class
    with ``ray_until_named = True`` leaves each actor pool to Ray Data's own autoscaler until one
    of its plans names the pool (runs without a memory limit); otherwise a pool holds its size."""

    name: str

    def step(self, snapshot: Snapshot, now: float) -> Decision: ...


POLICIES: Registry[Policy] = Registry("policy")
