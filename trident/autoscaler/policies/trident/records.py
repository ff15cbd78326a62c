"""Typed records the ``trident`` policy keeps between steps (no positional tuples)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from trident.core.model.features import device_type_of
from trident.core.types import OperatorConfig


class ConfigKey(NamedTuple):
    """What a measured rate or heap belongs to."""

    batch_size: int | None
    device: str
    num_gpus: float


def key_of(cfg: OperatorConfig) -> ConfigKey:
    return ConfigKey(cfg.batch_size, device_type_of(cfg), cfg.num_gpus)


class RateSample(NamedTuple):
    """Output rows per busy replica-second of one configuration over one window."""

    time_s: float
    key: ConfigKey
    rows_per_s: float
    bound: bool = False
    """An upper bound from a stall (rows per task over the seconds no task finished), not a measure."""
    starting: bool = False
    """Measured while an actor of the pipeline was starting (pending, or up and not yet through a
    first task: starts take CPU from running work, first tasks carry one-off costs)."""


class Counters(NamedTuple):
    """An operator's cumulative counters at one moment (a window's or a regime's start)."""

    time_s: float
    rows_out: int
    busy_s: float | None
    rows_in: int
    bytes_in: int
    tasks: int = 0
    """Finished tasks (rows out where tasks are not counted)."""


class OldActorsSpan(NamedTuple):
    """A rolling update's start until its first new actor is up: every task that finishes then is
    an old actor's (each past its first task, with its one-off costs, when the span began)."""

    key: ConfigKey
    """The configuration left."""
    start: Counters
    """The counters when the pool's configuration changed."""
    end: Counters | None = None
    """The counters at the last snapshot in which only old actors ran."""


@dataclass
class Stall:
    """No task of a working operator finished since ``since_s``."""

    since_s: float
    tasks_finished: int
    replicas: int
    bound_time_s: float | None = None
    """Time of the rate sample the stall's bound stands as, once it ended the regime."""


class Assumed(NamedTuple):
    """What the last plan assumed of an operator's rate (rows out per busy replica-second)."""

    key: ConfigKey
    rows_per_s: float
    flagged: bool = False
    """A measured rate was already found far off it (the plan is being revisited)."""
    starting: bool = False
    """It was measured while actors of the pipeline started (see :func:`estimates.at_start`)."""


class Estimate(NamedTuple):
    """An operator's rate to plan with (input rows per replica-second) and where it came from."""

    rows_per_s: float | None
    source: str
    history: str = ""
    """The run whose history the estimate leans on ('' when none)."""


class Bounds(NamedTuple):
    """Replicas the inner loop may move a pool within (set by the planner)."""

    lo: int
    hi: int | None
    why: str
