"""The validated, frozen configuration of one ``trident.autoscale`` run."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trident.core.errors import ConfigError
from trident.core.paths import writable_dir
from trident.core.policy import MEMORY_SCOPES
from trident.core.units import parse_memory_bytes

PRIORITY_NAMES = {"low": -1, "medium": 0, "high": 1}
"""Priorities as Ray Data's autoscaling coordinator names them, as the arbiter's classes."""
MIN_INTERVAL_S = 0.05
"""The shortest observation period: Ray Data's executor steps about every 0.1 s, so a
shorter one only floods the controller with identical snapshots."""


def valid_policy_names() -> list[str]:
    """Names registered in ``POLICIES`` (importing ``trident.autoscaler.policies`` registers the built-ins)."""
    import trident.autoscaler.policies  # noqa: F401
    from trident.core.policy import POLICIES

    return POLICIES.names()


@dataclass(frozen=True, kw_only=True)
class AutoscaleConfig:
    """Everything ``trident.autoscale`` was asked to do, checked before Ray is touched.

    ``policy`` is a name registered in ``POLICIES`` or a policy factory (called as
    ``factory(context=PolicyContext)`` once per execution, in the controller actor).
    Build it with :meth:`from_user` to accept a human-written ``memory_limit`` (``"16GiB"``).
    ``interval_s`` is the observation period in seconds (at least :data:`MIN_INTERVAL_S`); a
    controller that has not answered a snapshot within ``controller_timeout_s`` is treated as dead.
    ``log_dir`` must be a non-empty path; :meth:`from_user` also creates it and checks it is writable.
    ``start_slots``: actors started side by side at most, over all pools (``None``: the cores of
    the cluster's hosts, :mod:`trident.autoscaler.shim.starts`).
    ``history``: where what each operator taught is kept across runs (:mod:`trident.history.store`):
    ``True`` the default store (``TRIDENT_HISTORY`` or the user's cache folder), a path, or
    ``False`` for none.
    ``memory_scope``: what ``memory_limit`` covers: ``"ray"`` every Ray process on the driver's
    machine (a node's or container's limit: what Ray's other processes hold is read and the
    actor pools get the rest), ``"workers"`` the pipeline's workers alone (a harness that holds
    only them to it).
    ``arbiter``: join the cluster's arbiter as ``name`` of ``owner`` with ``priority`` (a class,
    higher first; :mod:`trident.jobs.arbiter`).
    """

    policy: Any = "trident"
    memory_limit_bytes: int | None = None
    interval_s: float = 1.0
    dry_run: bool = False
    log_dir: str | None = None
    seed: int = 0
    controller_timeout_s: float = 60.0
    start_slots: int | None = None
    history: bool | str = True
    memory_scope: str = "ray"
    arbiter: bool = True
    name: str | None = None
    owner: str | None = None
    priority: int | str = 0

    def __post_init__(self) -> None:
        if isinstance(self.policy, str) or not callable(self.policy):
            names = valid_policy_names()
            if not isinstance(self.policy, str) or self.policy not in names:
                raise ConfigError("policy", self.policy, "one of " + ", ".join(repr(n) for n in names)
                                  + " (or a policy factory: callable(context=PolicyContext) -> Policy)")
        if self.memory_limit_bytes is not None:
            parse_memory_bytes(self.memory_limit_bytes, "memory_limit")
        if self.memory_scope not in MEMORY_SCOPES:
            raise ConfigError("memory_scope", self.memory_scope, " or ".join(repr(m) for m in MEMORY_SCOPES))
        if not _finite_number(self.interval_s) or self.interval_s < MIN_INTERVAL_S:
            raise ConfigError("interval_s", self.interval_s,
                              f"a positive number of seconds >= {MIN_INTERVAL_S}, e.g. 1.0")
        if not isinstance(self.dry_run, bool):
            raise ConfigError("dry_run", self.dry_run, "True or False")
        if self.log_dir is not None and (not isinstance(self.log_dir, str) or not self.log_dir.strip()):
            raise ConfigError("log_dir", self.log_dir, "None or a non-empty directory path (str)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError("seed", self.seed, "an integer >= 0")
        if not _finite_number(self.controller_timeout_s) or self.controller_timeout_s <= 0:
            raise ConfigError("controller_timeout_s", self.controller_timeout_s, "a positive, finite number of seconds")
        if self.start_slots is not None and (isinstance(self.start_slots, bool) or not isinstance(self.start_slots, int)
                                             or self.start_slots < 1):
            raise ConfigError("start_slots", self.start_slots, "None or an integer >= 1")
        if not isinstance(self.history, (bool, str)) or (isinstance(self.history, str) and not self.history.strip()):
            raise ConfigError("history", self.history, "True, False or the path of a history file (str)")
        if not isinstance(self.arbiter, bool):
            raise ConfigError("arbiter", self.arbiter, "True or False")
        for what, value in (("name", self.name), ("owner", self.owner)):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(what, value, "None or a non-empty string")
        if isinstance(self.priority, str) and self.priority.lower() in PRIORITY_NAMES:
            object.__setattr__(self, "priority", PRIORITY_NAMES[self.priority.lower()])
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise ConfigError("priority", self.priority, "an integer (higher first) or 'low', 'medium', 'high'")

    @property
    def history_path(self) -> Path | None:
        """The history store's file (``None``: no history)."""
        from trident.history.store import default_path

        if self.history is False:
            return None
        return default_path() if self.history is True else Path(self.history).expanduser()

    @property
    def policy_name(self) -> str:
        """The registered name, or the ``name`` attribute of a policy factory."""
        return self.policy if isinstance(self.policy, str) else str(getattr(self.policy, "name", repr(self.policy)))

    @classmethod
    def from_user(cls, *, memory_limit: object = None, history: object = True, **kwargs) -> "AutoscaleConfig":
        """Validate user input; ``memory_limit`` may be bytes or a string such as ``"16GiB"``,
        ``history`` a ``pathlib.Path``. ``log_dir`` is created here and must be writable."""
        if isinstance(history, os.PathLike):
            history = os.fspath(history)
        config = cls(memory_limit_bytes=parse_memory_bytes(memory_limit, "memory_limit"), history=history, **kwargs)
        if config.log_dir is not None:
            writable_dir(config.log_dir, "log_dir")
        return config


def _finite_number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
