"""The job layer's value types and plug-in signatures.

A *job* asks for GPUs (fractional below one GPU), optionally restricted to some GPU
models, and runs for ``duration_s`` on the reference GPU (speed 1.0). Three plug-in
kinds decide what happens to it, each pure (explicit ``now`` and ``rng``, no clock):

- :class:`JobPolicy` orders jobs: ``order(state, rng) -> tuple[job_id, ...]``.
- :class:`Placer` maps one job onto free capacity: ``place(job, capacity) -> Allocation | None``.
- :class:`Preemptor` decides whether a blocked job may evict a running one:
  ``decide(blocked=, victim=, state=, predictor=) -> PreemptDecision``.

The simulator (``trident.sim``) and the Ray job scheduler drive the same objects.
Policies see :class:`JobView` s: observable features only. The true remaining time
is filled in only for oracle policies (``oracle = True``, e.g. SJF, SRTF).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Mapping, Protocol, Sequence

import numpy as np

from trident.core.errors import ConfigError
from trident.core.registry import Registry

MILLI_PER_GPU = 1000
"""Fractional GPUs are counted in thousandths of a device (Alibaba's ``gpu_milli``)."""


def gpus_to_milli(num_gpus: float) -> int:
    """GPUs (float) -> integer thousandths of a GPU."""
    return int(round(num_gpus * MILLI_PER_GPU))


@dataclass(frozen=True, eq=False)
class Job:
    """One job of a trace, as submitted.

    ``duration_s`` is the run time on the reference GPU once set up; on GPU model m
    the job runs ``duration_s / speed_by_model.get(m, 1.0)``. ``num_gpus`` is either a
    fraction of one device (0 < g < 1) or a whole number of devices. ``gpu_models``
    lists the models the job may run on (empty = any). ``setup_s`` is the time a
    (re)start spends before the job makes progress (loading, initialisation); ``None``
    lets the simulator draw it from its setup distribution. ``max_gpus`` makes the job
    *elastic* (a pipeline): it holds ``num_gpus`` (its minimum) and may be lent whole
    GPUs up to ``max_gpus`` (a whole number >= ``num_gpus``); its ``duration_s`` is then
    its run time at ``max_gpus`` (``None``: a rigid job). ``parallel_fraction`` (p) is the
    share of that run time its GPUs divide (Amdahl): at g GPUs an elastic job runs
    ``duration_s * ((1 - p) + p * max_gpus / g)``; 1.0: in proportion to its GPUs.
    ``rewarm_s`` (elastic only) is the seconds a GPU lent to it takes to become warm (its
    actors start: what a shrink costs when it grows back); ``None``: ``setup_s``.
    """

    job_id: str
    arrival_s: float
    duration_s: float
    num_gpus: float
    gpu_models: tuple[str, ...] = ()
    cpus: float = 0.0
    memory_mib: float = 0.0
    priority: int = 0
    qos: str = ""
    user: str = ""
    vc: str = ""
    status: str = ""
    speed_by_model: Mapping[str, float] = field(default_factory=dict)
    setup_s: float | None = None
    max_gpus: float | None = None
    parallel_fraction: float = 1.0
    rewarm_s: float | None = None
    checkpoints: bool = True
    """Its progress survives a preemption (the simulator's default); ``False``: a preemption
    restarts it from zero, as killing a Ray task does."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.arrival_s) and self.arrival_s >= 0):
            raise ConfigError(f"{self.job_id}.arrival_s", self.arrival_s, "a finite number >= 0")
        if not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise ConfigError(f"{self.job_id}.duration_s", self.duration_s, "a finite number > 0")
        g = self.num_gpus
        if not (g > 0 and (g < 1 or float(g).is_integer())):
            raise ConfigError(f"{self.job_id}.num_gpus", g, "a fraction in (0, 1) or a whole number >= 1")
        if self.cpus < 0 or self.memory_mib < 0:
            raise ConfigError(f"{self.job_id}.cpus/memory_mib", (self.cpus, self.memory_mib), "numbers >= 0")
        if self.setup_s is not None and not (math.isfinite(self.setup_s) and self.setup_s >= 0):
            raise ConfigError(f"{self.job_id}.setup_s", self.setup_s, "None or a finite number >= 0")
        if self.max_gpus is not None and not (math.isfinite(self.max_gpus) and self.max_gpus >= g
                                              and float(self.max_gpus).is_integer()):
            raise ConfigError(f"{self.job_id}.max_gpus", self.max_gpus, f"None or a whole number >= num_gpus ({g})")
        if self.rewarm_s is not None and not (math.isfinite(self.rewarm_s) and self.rewarm_s >= 0):
            raise ConfigError(f"{self.job_id}.rewarm_s", self.rewarm_s, "None or a finite number >= 0")
        if not 0 < self.parallel_fraction <= 1:
            raise ConfigError(f"{self.job_id}.parallel_fraction", self.parallel_fraction, "a number in (0, 1]")
        for m, s in self.speed_by_model.items():
            if not s > 0:
                raise ConfigError(f"{self.job_id}.speed_by_model[{m!r}]", s, "a number > 0")
        object.__setattr__(self, "gpu_models", tuple(self.gpu_models))
        object.__setattr__(self, "speed_by_model", MappingProxyType(dict(self.speed_by_model)))
        object.__setattr__(self, "gpu_milli", gpus_to_milli(g))

    gpu_milli: int = field(init=False, repr=False)
    """Requested GPUs in thousandths of a device (derived from ``num_gpus``)."""

    @property
    def elastic(self) -> bool:
        """Is this job elastic (held at ``num_gpus``, lent up to ``max_gpus``)?"""
        return self.max_gpus is not None

    def allows(self, gpu_model: str) -> bool:
        """May this job run on ``gpu_model``?"""
        return not self.gpu_models or gpu_model in self.gpu_models

    def speed_on(self, gpu_model: str) -> float:
        """Speed on ``gpu_model`` relative to the reference GPU (1.0 when unknown)."""
        return self.speed_by_model.get(gpu_model, 1.0)


@dataclass(frozen=True)
class Node:
    """One machine: ``num_gpus`` devices of one ``gpu_model``, CPUs and memory."""

    node_id: str
    gpu_model: str
    num_gpus: int
    cpus: float = 0.0
    memory_mib: float = 0.0

    def __post_init__(self) -> None:
        if self.num_gpus < 0 or int(self.num_gpus) != self.num_gpus:
            raise ConfigError(f"{self.node_id}.num_gpus", self.num_gpus, "a whole number >= 0")
        if self.cpus < 0 or self.memory_mib < 0:
            raise ConfigError(f"{self.node_id}.cpus/memory_mib", (self.cpus, self.memory_mib), "numbers >= 0")


@dataclass(frozen=True)
class Allocation:
    """Where a job runs: ``devices`` is a tuple of (node index, device index, milli) on
    nodes of ``gpu_model``; ``node_ids`` names the nodes used (in order of first use)."""

    gpu_model: str
    devices: tuple[tuple[int, int, int], ...]
    node_ids: tuple[str, ...]
    reason: str = ""

    @property
    def gpu_milli(self) -> int:
        return sum(d[2] for d in self.devices)


class CapacityView(Protocol):
    """Read-only free capacity a :class:`Placer` chooses from (``trident.jobs.capacity.Cluster``).

    Arrays are per GPU model; node indices are positions in ``nodes``.
    """

    nodes: tuple[Node, ...]
    gpu_models: tuple[str, ...]

    def node_indices(self, gpu_model: str) -> np.ndarray:
        """Indices (into ``nodes``) of the nodes carrying ``gpu_model``."""

    def free_full_gpus(self, gpu_model: str) -> np.ndarray:
        """Per node of ``gpu_model`` (aligned with ``node_indices``): wholly free devices."""

    def free_milli(self, node_index: int) -> np.ndarray:
        """Free thousandths of each device of one node."""

    def free_milli_matrix(self, gpu_model: str) -> np.ndarray:
        """Per node of ``gpu_model`` x device: free thousandths (-1 = no such device)."""

    def max_free_milli(self, gpu_model: str) -> np.ndarray:
        """Per node of ``gpu_model``: the most free thousandths on any one device."""

    def candidate_models(self, job: Job) -> tuple[str, ...]:
        """GPU models present in the cluster that ``job`` may run on."""

    def free_cpus(self, gpu_model: str) -> np.ndarray:
        """Per node of ``gpu_model``: free CPUs."""

    def free_memory_mib(self, gpu_model: str) -> np.ndarray:
        """Per node of ``gpu_model``: free memory (MiB)."""

    def may_fit(self, job: Job) -> bool:
        """Cheap necessary condition for ``job`` to fit now (False => it cannot)."""


@dataclass(frozen=True, eq=False)
class JobView:
    """What a policy may see of one job (queued or running) at one decision.

    A view is valid from ``as_of_s`` (the job's last enqueue or start) until its state
    changes, so the scheduler can reuse it between decisions; read time-dependent
    quantities through the methods with the decision's ``now``. For a running job,
    ``setup_ends_s`` is when its current (re)start finishes setting up.
    ``remaining_base_s`` (true remaining run time on the reference GPU as of
    ``as_of_s``) is set only when the policy or preemptor is an oracle, else ``None``.
    """

    job: Job
    running: bool
    as_of_s: float
    wait_base_s: float
    attained_base_s: float
    setup_ends_s: float = 0.0
    expected_setup_s: float = 0.0
    preemptions: int = 0
    allocation: Allocation | None = None
    speed: float = 1.0
    remaining_base_s: float | None = None

    @property
    def job_id(self) -> str:
        return self.job.job_id

    @property
    def gpu_model(self) -> str | None:
        return self.allocation.gpu_model if self.allocation is not None else None

    def wait_s(self, now: float) -> float:
        """Seconds spent queued since arrival (all queue spells)."""
        return self.wait_base_s + (0.0 if self.running else now - self.as_of_s)

    def attained_s(self, now: float) -> float:
        """Seconds the job has held GPUs since arrival (setup included)."""
        return self.attained_base_s + (now - self.as_of_s if self.running else 0.0)

    def attained_gpu_s(self, now: float) -> float:
        """GPU-seconds of service attained (Tiresias' two-dimensional attained service)."""
        return self.attained_s(now) * self.job.num_gpus

    def in_setup(self, now: float) -> bool:
        """Running and still setting up (a preemption now would waste the setup)."""
        return self.running and now < self.setup_ends_s

    def setup_elapsed_s(self, now: float) -> float:
        """Seconds of the current (re)start's setup already spent (0 when queued)."""
        if not self.running:
            return 0.0
        return min(now, self.setup_ends_s) - self.as_of_s

    def setup_left_s(self, now: float) -> float:
        """Seconds of setup still ahead of a running job (0 once it makes progress)."""
        return max(0.0, self.setup_ends_s - now) if self.running else 0.0

    def remaining_s(self, now: float) -> float | None:
        """Oracle only: true remaining seconds of work on the reference GPU, else ``None``."""
        if self.remaining_base_s is None:
            return None
        if self.running and now > self.setup_ends_s:
            return max(0.0, self.remaining_base_s - (now - self.setup_ends_s) * self.speed)
        return self.remaining_base_s


@dataclass(frozen=True, eq=False)
class SchedState:
    """Everything a policy sees at one decision.

    ``queued`` holds the jobs queued longest first (at most the scheduler's queue
    window; ``queue_length`` counts them all); ``running`` maps job id to the view of
    every running job. ``total_gpus_by_model`` and ``free_gpus_by_model`` are in
    GPUs; ``capacity`` is the free capacity placers see.
    """

    now: float
    queued: Sequence[JobView]
    running: Mapping[str, JobView]
    total_gpus_by_model: Mapping[str, float]
    free_gpus_by_model: Mapping[str, float]
    queue_length: int = 0
    capacity: CapacityView | None = None


class Verdict(Enum):
    PREEMPT_NOW = "preempt_now"
    DELAY_UNTIL = "delay_until"
    DO_NOT = "do_not"


@dataclass(frozen=True)
class PreemptDecision:
    """A preemptor's answer; ``until_s`` is set (absolute time) for ``DELAY_UNTIL``."""

    verdict: Verdict
    reason: str
    until_s: float | None = None

    def __post_init__(self) -> None:
        if (self.verdict is Verdict.DELAY_UNTIL) != (self.until_s is not None):
            raise ConfigError("until_s", self.until_s, "a time exactly when verdict is DELAY_UNTIL")


class ArrivalPredictor(Protocol):
    """Predicts the interval to the next job arrival from the arrivals seen so far."""

    def observe(self, arrival_s: float) -> None: ...

    def predict_interval_s(self, now: float) -> float: ...


class EwmaArrivalPredictor:
    """Exponentially weighted mean of inter-arrival intervals (``alpha`` = weight of the newest)."""

    def __init__(self, *, alpha: float = 0.1, initial_interval_s: float = 60.0) -> None:
        if not 0 < alpha <= 1:
            raise ConfigError("alpha", alpha, "a number in (0, 1]")
        if initial_interval_s <= 0:
            raise ConfigError("initial_interval_s", initial_interval_s, "a number > 0")
        self.alpha = alpha
        self.interval_s = initial_interval_s
        self._last_s: float | None = None

    def observe(self, arrival_s: float) -> None:
        if self._last_s is not None and arrival_s >= self._last_s:
            self.interval_s += self.alpha * ((arrival_s - self._last_s) - self.interval_s)
        self._last_s = arrival_s

    def predict_interval_s(self, now: float) -> float:
        return self.interval_s


class JobPolicy(Protocol):
    """Orders jobs, highest priority first.

    Non-preemptive policies order ``state.queued``; preemptive ones
    (``preemptive = True``) order queued and running jobs together, and a running
    job ranked below a blocked queued one is a candidate victim. ``oracle = True``
    asks the scheduler to fill in true remaining times. A policy may define
    ``observe_finish(job, run_s)``: the simulator and ``JobScheduler`` call it when a
    job succeeds, with the seconds it held its GPUs outside setups (its run time as
    measured; on a faster GPU model, shorter than ``duration_s``), so that it can learn run times
    from history.
    """

    name: str
    preemptive: bool
    oracle: bool

    def order(self, state: SchedState, rng: np.random.Generator) -> tuple[str, ...]: ...


class Placer(Protocol):
    """Chooses devices for one job on free capacity, or ``None`` when it cannot fit."""

    name: str

    def place(self, job: Job, capacity: CapacityView) -> Allocation | None: ...


class Preemptor(Protocol):
    """Decides whether ``blocked`` may evict ``victim`` now, later or never."""

    name: str
    oracle: bool

    def decide(self, *, blocked: JobView, victim: JobView, state: SchedState,
               predictor: ArrivalPredictor) -> PreemptDecision: ...


JOB_POLICIES: Registry[JobPolicy] = Registry("job policy")
PLACERS: Registry[Placer] = Registry("placer")
PREEMPTORS: Registry[Preemptor] = Registry("preemptor")


def create_policy(name: str, preemption: str | None, **kwargs) -> JobPolicy:
    """The registered policy ``name``, paired with the preemptor named ``preemption``: a policy
    that may rank running jobs too (one whose class sets ``ranks_running``, as ``rltune``) does
    so under a preemptor that may evict (any but ``never``), so that the preemptor has victims
    to judge; with none, it orders the queue alone."""
    factory = JOB_POLICIES.get(name)
    if getattr(factory, "ranks_running", False) and preemption not in (None, "never"):
        kwargs.setdefault("preemptive", True)
    return factory(**kwargs)
