"""``trident.JobScheduler``: the job layer on a real Ray cluster.

Jobs (and pipelines: any callable) are submitted with the GPUs they need; the
scheduler orders them with a job policy, places them with a placer on the Ray
cluster's GPU nodes, and, under a preemptive policy, asks a preemptor whether a
blocked job may evict a running one. These are the very objects the simulator
drives (``trident.sim``). A job runs as a Ray task pinned to the chosen node
(``NodeAffinitySchedulingStrategy``) with ``num_gpus``; a preempted job's task is
cancelled (its worker killed) and the job is queued again and restarted from the
beginning later: saving progress across a restart is the job's own business.

Nodes come and go: the cluster view is re-read from Ray while jobs run. A job whose
node died is queued again and restarted on a live node; no job is placed on a dead one.

This module is the Ray shell: it reads the clock and talks to Ray; every decision
is made by the pure plug-ins.
"""
from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any, Callable

import numpy as np

from trident.errors import ConfigError, TridentError
from trident.sched.base import (JOB_POLICIES, PLACERS, PREEMPTORS, Allocation, EwmaArrivalPredictor, Job,
                                JobPolicy, JobView, Placer, Preemptor, SchedState, Verdict)
from trident.sched.cluster_view import ray_gpu_nodes, rebuild

_PREEMPTION = ("never", "eager", "lazy")
KILL_WAIT_S = 30.0
"""How long a cancelled or preempted task's worker is given to exit (its GPUs are free after)."""


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
    """One submitted job: what it is, its state, where each attempt ran, what it returned."""

    job: Job
    fn: Callable[..., Any]
    args: tuple
    kwargs: dict
    state: JobState = JobState.QUEUED
    attempts: int = 0
    preemptions: int = 0
    node_failures: int = 0
    wait_s: float = 0.0
    attained_s: float = 0.0
    enqueued_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    allocation: Allocation | None = None
    attempt_node_ids: list[str] = field(default_factory=list)
    ref: Any = None
    result: Any = None
    error: BaseException | None = None
    events: list[tuple[float, str]] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.state.terminal


def _run_job(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """The Ray task of every job (a wrapper, so builtins and callables of any kind run)."""
    return fn(*args, **kwargs)


class JobScheduler:
    """Admits, orders, places and (optionally) preempts jobs on the connected Ray cluster.

    ``policy``, ``preemption`` and ``placement`` are registry names or plug-in objects.
    ``seed`` seeds the policy's random generator. ``poll_s``: how often the loop looks
    for finished tasks; ``node_refresh_s``: how often it re-reads the cluster's nodes.
    Nodes and GPU models come from Ray (``accelerator_type:X`` resources name the model;
    ``"GPU"`` when none is set).
    """

    def __init__(self, *, policy: str | JobPolicy = "fifo", preemption: str | Preemptor = "never",
                 placement: str | Placer | None = None, seed: int = 0, poll_s: float = 0.05,
                 node_refresh_s: float = 1.0) -> None:
        self.policy: JobPolicy = JOB_POLICIES.create(policy) if isinstance(policy, str) else policy
        if isinstance(preemption, str) and preemption not in _PREEMPTION:
            raise ConfigError("preemption", preemption, " | ".join(repr(p) for p in _PREEMPTION))
        self.preemptor: Preemptor = PREEMPTORS.create(preemption) if isinstance(preemption, str) else preemption
        if placement is None:
            placement = getattr(self.policy, "placer", "first-fit")
        self.placer: Placer = PLACERS.create(placement) if isinstance(placement, str) else placement
        for kind, plugin in (("policy", self.policy), ("preemption", self.preemptor)):
            if getattr(plugin, "oracle", False):
                raise ConfigError(kind, getattr(plugin, "name", plugin),
                                  "a non-oracle plug-in (a real cluster does not know true run times)")
        for name, value in (("poll_s", poll_s), ("node_refresh_s", node_refresh_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise ConfigError(name, value, "a finite number of seconds > 0")
        self.poll_s = poll_s
        self.node_refresh_s = node_refresh_s
        self._rng = np.random.default_rng(seed)
        self._predictor = EwmaArrivalPredictor()
        self._records: dict[str, JobRecord] = {}
        self._lock = threading.RLock()  # submit() and cancel() may be called from other threads while run() loops
        self._ids = itertools.count()
        self._t0 = time.monotonic()
        self._cluster: Any = None
        self._refreshed_at = -float("inf")
        self._remote: Any = None
        self.decisions: deque[tuple[float, str, str, str, str]] = deque(maxlen=10_000)
        """(time, blocked job, victim, verdict, reason) of the latest preemption questions."""
        self.starts: list[str] = []
        """Job ids in the order their attempts started."""

    # --- public --------------------------------------------------------------------
    def submit(self, fn: Callable[..., Any], *args, num_gpus: float = 1.0, name: str | None = None,
               gpu_models: tuple[str, ...] = (), num_cpus: float = 0.0, priority: int = 0,
               setup_s: float | None = None, expected_duration_s: float = 1.0, **kwargs) -> str:
        """Queue ``fn(*args, **kwargs)`` as a job needing ``num_gpus``; returns its job id.

        ``expected_duration_s`` is a nominal size for policies' bookkeeping only (never
        used as the true duration by non-oracle policies); ``setup_s`` tells preemptors
        how long the job needs before it makes progress.
        """
        if not callable(fn):
            raise ConfigError("fn", fn, "a callable")
        with self._lock:
            job_id = name or f"job-{next(self._ids)}"
            if job_id in self._records:
                raise ConfigError("name", job_id, "a job name not used before")
            now = self._now()
            job = Job(job_id=job_id, arrival_s=now, duration_s=expected_duration_s, num_gpus=num_gpus,
                      gpu_models=tuple(gpu_models), cpus=num_cpus, priority=priority, setup_s=setup_s)
            self._records[job_id] = JobRecord(job=job, fn=fn, args=args, kwargs=kwargs, enqueued_at=now)
            self._predictor.observe(now)
        return job_id

    def cancel(self, job_id: str) -> bool:
        """Cancel a queued or running job (a running one's task is killed and its GPUs freed).

        Safe to call from another thread while :meth:`run` loops. Returns ``False`` when the
        job had already finished (succeeded, failed or cancelled), else ``True``.
        """
        with self._lock:
            if job_id not in self._records:
                raise ConfigError("job_id", job_id, "the id of a submitted job")
            r = self._records[job_id]
            if r.state.terminal:
                return False
            if r.state is JobState.RUNNING:
                import ray

                self._kill([r], ray)
            self._finish(r, JobState.CANCELLED, "cancelled")
        return True

    def run(self, *, timeout_s: float | None = None) -> dict[str, Any]:
        """Run every submitted job to an end; returns job id -> result of the jobs that succeeded.

        A job whose function raises is not retried; its exception is re-raised at the end.
        A job whose node dies is restarted on a live node. After ``timeout_s`` seconds the
        running jobs are cancelled (their GPUs freed), queued ones stay queued, and
        :class:`~trident.errors.TridentError` is raised.
        """
        import ray

        if not ray.is_initialized():
            raise TridentError("JobScheduler.run needs a connected Ray cluster (call ray.init first)")
        if timeout_s is not None and not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
            raise ConfigError("timeout_s", timeout_s, "None or a number of seconds > 0")
        with self._lock:
            self._refresh(ray, force=True, fail_unfit=False)
            for rec in self._all():
                if not rec.done and not self._fits_ever(rec.job):
                    raise ConfigError(f"{rec.job.job_id}.num_gpus", rec.job.num_gpus,
                                      "a request the cluster can hold")
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            with self._lock:
                if all(r.done for r in self._all()):
                    break
                if deadline is not None and time.monotonic() > deadline:
                    self._time_out(ray, timeout_s)
                self._refresh(ray)
                self._schedule(ray)
                running = [r.ref for r in self._all() if r.state is JobState.RUNNING]
            if running:
                ready, _ = ray.wait(running, num_returns=len(running), timeout=self.poll_s)
                with self._lock:
                    self._collect(ray, ready)
            else:
                time.sleep(self.poll_s)
        errors = [r for r in self._all() if r.state is JobState.FAILED]
        if errors:
            raise TridentError(f"job {errors[0].job.job_id} failed: {errors[0].error!r}") from errors[0].error
        return {r.job.job_id: r.result for r in self._all() if r.state is JobState.SUCCEEDED}

    def record(self, job_id: str) -> JobRecord:
        return self._records[job_id]

    def state(self, job_id: str) -> JobState:
        """The job's current :class:`JobState`."""
        return self._records[job_id].state

    # --- internals -----------------------------------------------------------------
    def _all(self) -> list[JobRecord]:
        with self._lock:
            return list(self._records.values())

    def _now(self) -> float:
        return time.monotonic() - self._t0

    def _fits_ever(self, job: Job) -> bool:
        return self._cluster is not None and self._cluster.could_ever_fit(job)

    def _refresh(self, ray, *, force: bool = False, fail_unfit: bool = True) -> None:
        """Re-read the live nodes (lock held). Jobs on a node that died are queued again; with
        ``fail_unfit``, queued jobs no live node can hold any more fail."""
        now = self._now()
        if not force and now - self._refreshed_at < self.node_refresh_s:
            return
        self._refreshed_at = now
        nodes = ray_gpu_nodes(ray)
        old = self._cluster
        if old is not None and {n.node_id for n in nodes if n.num_gpus > 0} == {n.node_id for n in old.nodes}:
            return
        running = {r.job.job_id: r for r in self._all() if r.state is JobState.RUNNING}
        view = rebuild(nodes, old.nodes if old is not None else (),
                       {jid: (r.job, r.allocation) for jid, r in running.items()})
        self._cluster = view.cluster
        for jid, alloc in view.allocations.items():
            running[jid].allocation = alloc
        lost = [running[jid] for jid in view.lost]
        self._kill(lost, ray, wait=False, release=False)
        for r in lost:
            self._requeue_lost(r, "its node left the cluster")
        for r in self._all() if fail_unfit else ():
            if not r.done and r.state is not JobState.RUNNING and not self._fits_ever(r.job):
                r.error = TridentError(f"job {r.job.job_id}: no live node can hold num_gpus={r.job.num_gpus:g}")
                self._finish(r, JobState.FAILED, f"failed: {r.error}")

    def _view(self, r: JobRecord, now: float) -> JobView:
        setup = r.job.setup_s or 0.0
        if r.state is JobState.RUNNING:
            return JobView(job=r.job, running=True, as_of_s=r.started_at, wait_base_s=r.wait_s,
                           attained_base_s=r.attained_s, setup_ends_s=r.started_at + setup,
                           expected_setup_s=setup, preemptions=r.preemptions, allocation=r.allocation)
        return JobView(job=r.job, running=False, as_of_s=r.enqueued_at, wait_base_s=r.wait_s,
                       attained_base_s=r.attained_s, expected_setup_s=setup, preemptions=r.preemptions)

    def _state(self, now: float) -> SchedState:
        records = self._all()
        queued = sorted((r for r in records if r.state in (JobState.QUEUED, JobState.PREEMPTED)),
                        key=lambda r: (r.enqueued_at, r.job.job_id))
        running = {r.job.job_id: self._view(r, now) for r in records if r.state is JobState.RUNNING}
        return SchedState(now=now, queued=[self._view(r, now) for r in queued], running=MappingProxyType(running),
                          total_gpus_by_model=self._cluster.total_gpus_by_model(),
                          free_gpus_by_model=self._cluster.free_gpus_by_model(), queue_length=len(queued),
                          capacity=self._cluster)

    def _schedule(self, ray) -> None:
        if self._cluster is None:
            return
        now = self._now()
        state = self._state(now)
        if not state.queued:
            return
        ordered = self.policy.order(state, self._rng)
        rank = {jid: k for k, jid in enumerate(ordered)}
        preemptive = bool(getattr(self.policy, "preemptive", False))
        for jid in ordered:
            r = self._records[jid]
            if r.state not in (JobState.QUEUED, JobState.PREEMPTED):
                continue
            alloc = self.placer.place(r.job, self._cluster) if self._cluster.may_fit(r.job) else None
            if alloc is None and preemptive:
                alloc = self._try_preempt(ray, r, rank, state)
            if alloc is not None:
                self._start(ray, r, alloc)

    def _try_preempt(self, ray, r: JobRecord, rank: dict[str, int], state: SchedState) -> Allocation | None:
        """Evict the lowest-ranked running jobs that make room for ``r``, if the preemptor agrees."""
        mine = rank[r.job.job_id]
        cands = sorted((v for v in self._all() if v.state is JobState.RUNNING
                        and rank.get(v.job.job_id, len(rank)) > mine and r.job.allows(v.allocation.gpu_model)),
                       key=lambda v: -rank.get(v.job.job_id, len(rank)))
        what_if = self._cluster.copy()
        victims = []
        for v in cands:
            what_if.release(v.job, v.allocation)
            victims.append(v)
            if what_if.may_fit(r.job) and self.placer.place(r.job, what_if) is not None:
                break
        else:
            return None
        answers = [self.preemptor.decide(blocked=self._view(r, state.now), victim=state.running[v.job.job_id],
                                         state=state, predictor=self._predictor) for v in victims]
        for v, a in zip(victims, answers):
            self.decisions.append((state.now, r.job.job_id, v.job.job_id, a.verdict.value, a.reason))
        if not all(a.verdict is Verdict.PREEMPT_NOW for a in answers):
            return None
        self._kill(victims, ray)
        for v in victims:
            v.preemptions += 1
            v.state = JobState.PREEMPTED
            v.enqueued_at = self._now()
            v.events.append((v.enqueued_at, "preempted"))
        return self.placer.place(r.job, self._cluster)

    def _start(self, ray, r: JobRecord, alloc: Allocation) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if self._remote is None:
            self._remote = ray.remote(_run_job)
        now = self._now()
        self._cluster.allocate(r.job, alloc)
        node_id = alloc.node_ids[0]
        task = self._remote.options(
            num_gpus=r.job.num_gpus, num_cpus=r.job.cpus, max_retries=0, name=r.job.job_id,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False))
        r.ref = task.remote(r.fn, r.args, r.kwargs)
        r.state = JobState.RUNNING
        r.allocation = alloc
        r.wait_s += now - r.enqueued_at
        r.started_at = now
        r.attempts += 1
        r.attempt_node_ids.append(node_id)
        r.events.append((now, f"start on {node_id[:8]} ({alloc.reason})"))
        self.starts.append(r.job.job_id)

    def _kill(self, records: list[JobRecord], ray, *, wait: bool = True, release: bool = True) -> None:
        """Cancel the running attempts of ``records`` (workers killed) and stop them; with
        ``wait``, until their workers are gone, so their GPUs are really free."""
        refs = [r.ref for r in records]
        for ref in refs:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # the task already ended, or its node is gone
                pass
        if wait and refs:
            ray.wait(refs, num_returns=len(refs), timeout=KILL_WAIT_S)
        for r in records:
            self._stop(r, release=release)

    def _stop(self, r: JobRecord, *, release: bool = True) -> None:
        """Book the end of ``r``'s attempt; ``release`` gives its capacity back to the view."""
        if release:
            self._cluster.release(r.job, r.allocation)
        r.attained_s += self._now() - r.started_at
        r.ref = None
        r.allocation = None

    def _requeue_lost(self, r: JobRecord, why: str) -> None:
        r.node_failures += 1
        r.state = JobState.QUEUED
        r.enqueued_at = self._now()
        r.events.append((r.enqueued_at, f"requeued: {why}"))

    def _finish(self, r: JobRecord, state: JobState, event: str) -> None:
        r.state = state
        r.finished_at = self._now()
        r.events.append((r.finished_at, event))

    def _time_out(self, ray, timeout_s: float) -> None:
        running = [r for r in self._all() if r.state is JobState.RUNNING]
        self._kill(running, ray)
        for r in running:
            self._finish(r, JobState.CANCELLED, f"cancelled: run timed out after {timeout_s} s")
        queued = sum(1 for r in self._all() if not r.done)
        raise TridentError(f"JobScheduler.run timed out after {timeout_s} s: cancelled "
                           f"{[r.job.job_id for r in running]}; {queued} job(s) still queued")

    def _collect(self, ray, ready: list) -> None:
        by_ref = {r.ref: r for r in self._all() if r.state is JobState.RUNNING}
        for ref in ready:
            r = by_ref.get(ref)
            if r is None:  # cancelled or requeued meanwhile
                continue
            try:
                r.result = ray.get(ref)
            except Exception as exc:
                if self._node_lost(ray, r, exc):
                    self._stop(r)
                    self._requeue_lost(r, f"its node died ({type(exc).__name__})")
                    self._refreshed_at = -float("inf")
                    continue
                r.error = exc  # the job's own failure: recorded, reported at the end
            self._stop(r)
            if r.error is None:
                self._finish(r, JobState.SUCCEEDED, "succeeded")
            else:
                self._finish(r, JobState.FAILED, f"failed: {r.error!r}")

    def _node_lost(self, ray, r: JobRecord, exc: BaseException) -> bool:
        """Did the attempt fail because its node died (rather than by the job's own error)?"""
        from ray.exceptions import NodeDiedError, TaskUnschedulableError, WorkerCrashedError

        if isinstance(exc, (NodeDiedError, TaskUnschedulableError)):
            return True
        if isinstance(exc, WorkerCrashedError):
            alive = {n.node_id for n in ray_gpu_nodes(ray)}
            return r.attempt_node_ids[-1] not in alive
        return False
