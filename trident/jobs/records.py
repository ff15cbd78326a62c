"""What ``JobScheduler`` keeps of each submitted job (:class:`JobRecord`, :class:`JobState`) and
the view of it a scheduling pass reads (:func:`job_view`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable

from trident.jobs.base import Allocation, Job, JobView
from trident.jobs.pipelines import PipelineRun, held_gpus
from trident.jobs.ray_backend import Attempt

COLD_RECHECK_S = 1.0
"""While a pipeline's actors start, its setup is taken to end at least this far ahead (s): a
preemptor delaying until then asks again about once a second, not at every poll."""


class JobState(str, Enum):
    """Where a job is. ``PREEMPTED``: evicted by a higher-ranked job and queued to restart."""

    QUEUED = "queued"
    RUNNING = "running"
    PREEMPTED = "preempted"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


@dataclass
class JobRecord:
    """One submitted job: what it is, its state, where each attempt ran, what it returned.

    ``setup_s`` is the setup time the preemptor assumes: declared at submission, replaced by
    the last observed one (a trainable's start to the end of its ``setup``/``restore``).
    ``checkpoint`` holds a preempted trainable's saved state until its next attempt.
    """

    job: Job
    fn: Callable[..., Any]
    args: tuple
    kwargs: dict
    state: JobState = JobState.QUEUED
    attempts: int = 0
    preemptions: int = 0
    futile_preemptions: int = 0
    """Preemptions while the job (or a pipeline's new actors) was still setting up."""
    node_failures: int = 0
    wait_s: float = 0.0
    attained_s: float = 0.0
    enqueued_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    allocation: Allocation | None = None
    attempt_node_ids: list[str] = field(default_factory=list)
    attempt: Attempt | None = None
    setup_s: float = 0.0
    setup_ends_at: float | None = None
    observed_setup_s: list[float] = field(default_factory=list)
    checkpoint: Any = None
    checkpoints: int = 0
    autoscale: dict | None = None
    pipeline: PipelineRun | None = None
    autoscale_run: Any = None
    """A pipeline's ``trident.autoscale`` run (its record: budget actions, drains), kept after it ends."""
    base_allocation: Allocation | None = None
    extra: Allocation | None = None
    """GPUs lent to a running pipeline above its minimum."""
    cold_since: float | None = None
    result: Any = None
    error: BaseException | None = None
    events: list[tuple[float, str]] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.state.terminal

    @property
    def ref(self) -> Any:
        return self.attempt.ref if self.attempt is not None else None

    @property
    def max_gpus(self) -> float | None:
        """A pipeline's most GPUs (``None`` for a job); its minimum is ``job.num_gpus``."""
        return self.job.max_gpus

    @property
    def budget_gpus(self) -> float:
        """GPUs a running pipeline may hold now (its minimum plus what is lent)."""
        return held_gpus(self.job, self.extra)


def job_view(r: JobRecord, now: float) -> JobView:
    """The pass's view of ``r`` at ``now`` (seconds since the scheduler started): a running job's
    setup ends where it was observed to, else at its start plus its setup time; a pipeline whose
    actors are starting is setting up until at least ``COLD_RECHECK_S`` from now."""
    if r.state is JobState.RUNNING:
        ends = r.setup_ends_at if r.setup_ends_at is not None else r.started_at + r.setup_s
        if r.cold_since is not None:  # a pipeline whose actors are starting: setting up
            ends = max(r.cold_since + r.setup_s, now + COLD_RECHECK_S)
        return JobView(job=r.job, running=True, as_of_s=r.started_at, wait_base_s=r.wait_s,
                       attained_base_s=r.attained_s, setup_ends_s=ends, expected_setup_s=r.setup_s,
                       preemptions=r.preemptions, allocation=r.allocation,
                       speed=r.job.speed_on(r.allocation.gpu_model))
    return JobView(job=r.job, running=False, as_of_s=r.enqueued_at, wait_base_s=r.wait_s,
                   attained_base_s=r.attained_s, expected_setup_s=r.setup_s, preemptions=r.preemptions)
