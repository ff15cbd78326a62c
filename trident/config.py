"""The validated, frozen configuration of one ``trident.autoscale`` run."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from trident.errors import ConfigError
from trident.units import parse_memory_bytes


def valid_policy_names() -> list[str]:
    """Names registered in ``POLICIES`` (importing ``trident.policies`` registers the built-ins)."""
    import trident.policies  # noqa: F401
    from trident.control.policy import POLICIES

    return POLICIES.names()


@dataclass(frozen=True, kw_only=True)
class AutoscaleConfig:
    """Everything ``trident.autoscale`` was asked to do, checked before Ray is touched.

    ``policy`` is a name registered in ``POLICIES`` or a policy factory (called as
    ``factory(context=PolicyContext)`` once per execution, in the controller actor).
    Build it with :meth:`from_user` to accept a human-written ``memory_limit`` (``"16GiB"``).
    ``interval_s`` is the observation period in seconds; a controller that has not answered a
    snapshot within ``controller_timeout_s`` is treated as dead.
    """

    policy: Any = "trident"
    memory_limit_bytes: int | None = None
    interval_s: float = 1.0
    dry_run: bool = False
    log_dir: str | None = None
    seed: int = 0
    controller_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if isinstance(self.policy, str) or not callable(self.policy):
            names = valid_policy_names()
            if not isinstance(self.policy, str) or self.policy not in names:
                raise ConfigError("policy", self.policy, "one of " + ", ".join(repr(n) for n in names)
                                  + " (or a policy factory: callable(context=PolicyContext) -> Policy)")
        if self.memory_limit_bytes is not None:
            parse_memory_bytes(self.memory_limit_bytes, "memory_limit")
        if (isinstance(self.interval_s, bool) or not isinstance(self.interval_s, (int, float))
                or not math.isfinite(self.interval_s) or self.interval_s <= 0):
            raise ConfigError("interval_s", self.interval_s, "a positive number of seconds, e.g. 1.0")
        if not isinstance(self.dry_run, bool):
            raise ConfigError("dry_run", self.dry_run, "True or False")
        if self.log_dir is not None and not isinstance(self.log_dir, str):
            raise ConfigError("log_dir", self.log_dir, "None or a directory path (str)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError("seed", self.seed, "an integer >= 0")
        if (isinstance(self.controller_timeout_s, bool) or not isinstance(self.controller_timeout_s, (int, float))
                or self.controller_timeout_s <= 0):
            raise ConfigError("controller_timeout_s", self.controller_timeout_s, "a positive number of seconds")

    @property
    def policy_name(self) -> str:
        """The registered name, or the ``name`` attribute of a policy factory."""
        return self.policy if isinstance(self.policy, str) else str(getattr(self.policy, "name", repr(self.policy)))

    @classmethod
    def from_user(cls, *, memory_limit: object = None, **kwargs) -> "AutoscaleConfig":
        """Validate user input; ``memory_limit`` may be bytes or a string such as ``"16GiB"``."""
        return cls(memory_limit_bytes=parse_memory_bytes(memory_limit, "memory_limit"), **kwargs)
