"""``trident.JobScheduler``: the job layer on a real Ray cluster.

Jobs are submitted with the GPUs they need; the scheduler runs the job layer's one
scheduling pass (:class:`trident.jobs.dispatch.SchedulingPass`, the very pass the
simulator runs) whenever something changed: a job arrived, started, ended or was
evicted, a node came or went, a delayed preemption question is due, or (preemptive
policies) every ``tick_s``. Between passes it waits for attempts to end.

A plain callable runs as a Ray task; preempting it kills the task and it restarts from
the beginning later. A pipeline (:meth:`JobScheduler.submit_pipeline`) is elastic: it
holds its minimum GPUs, is lent free GPUs up to its maximum while no job waits, and
preempting it shrinks it back to its minimum (see :mod:`trident.jobs.pipelines`). A trainable (``setup``/``step``/``checkpoint``/``restore``, see
:mod:`trident.jobs.ray_backend`) runs in an actor: preempting it saves a checkpoint
the next attempt restores, and its setup time is observed. Nodes come and go: a job
whose node died is queued again and restarted on a live node.

This module reads the clock and talks to Ray through a backend; every decision is made
by the pure plug-ins.
"""
from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from dataclasses import replace
from typing import Any, Callable, Sequence

import numpy as np

from trident.core.errors import ConfigError, TridentError
from trident.jobs.base import (PLACERS, PREEMPTORS, Allocation, EwmaArrivalPredictor, Job,
                                JobPolicy, JobView, Placer, Preemptor, create_policy)
from trident.jobs.capacity import Cluster
from trident.jobs.cluster_view import rebuild
from trident.jobs.dispatch import Decision, PassConfig, SchedulingPass
from trident.jobs import lending
from trident.jobs.ray_backend import Attempt, RayBackend, is_trainable
from trident.jobs.records import JobRecord, JobState, job_view

__all__ = ["JobRecord", "JobScheduler", "JobState"]
_PREEMPTION = ("never", "eager", "lazy")

class JobScheduler:
    """Admits, orders, places and (optionally) preempts jobs on the connected Ray cluster.

    ``policy``, ``preemption`` and ``placement`` are registry names or plug-in objects (a policy
    named beside a preemptor that may evict ranks running jobs too where it can:
    :func:`~trident.jobs.base.create_policy`).
    ``seed`` seeds the policy's random generator. ``poll_s``: the longest wait for
    attempts between passes; ``node_refresh_s``: how often it re-reads the cluster's nodes;
    ``tick_s``: under a preemptive policy, a pass at least this often while jobs wait and
    run (``None``: on events only); ``limits``: the pass's limits. ``clock`` (seconds,
    monotonic) and ``backend`` (the Ray edge, :class:`~trident.jobs.ray_backend.RayBackend`)
    default to the real ones. GPU models come from the nodes' ``accelerator_type:X``
    resources (``"GPU"`` when none is set). ``arbiter``: each running job (pipelines aside) holds a
    seat of kind ``training`` at the cluster's arbiter, as ``owner`` (default: the user), so that
    other drivers' pipelines are budgeted around it (:mod:`trident.jobs.arbiter.seats`).
    """

    def __init__(self, *, policy: str | JobPolicy = "fifo", preemption: str | Preemptor = "never",
                 placement: str | Placer | None = None, seed: int = 0, poll_s: float = 0.05,
                 node_refresh_s: float = 1.0, tick_s: float | None = 300.0, limits: PassConfig | None = None,
                 clock: Callable[[], float] | None = None, backend: Any = None, arbiter: bool = True,
                 owner: str | None = None) -> None:
        if isinstance(preemption, str) and preemption not in _PREEMPTION:
            raise ConfigError("preemption", preemption, " | ".join(repr(p) for p in _PREEMPTION))
        self.policy: JobPolicy = create_policy(policy, preemption if isinstance(preemption, str) else getattr(
            preemption, "name", None)) if isinstance(policy, str) else policy
        self.preemptor: Preemptor = PREEMPTORS.create(preemption) if isinstance(preemption, str) else preemption
        if placement is None:
            placement = getattr(self.policy, "placer", "first-fit")
        self.placer: Placer = PLACERS.create(placement) if isinstance(placement, str) else placement
        for kind, plugin in (("policy", self.policy), ("preemption", self.preemptor)):
            if getattr(plugin, "oracle", False):
                raise ConfigError(kind, getattr(plugin, "name", plugin),
                                  "a non-oracle plug-in (a real cluster does not know true run times)")
        for name, value in (("poll_s", poll_s), ("node_refresh_s", node_refresh_s),
                            *((("tick_s", tick_s),) if tick_s is not None else ())):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise ConfigError(name, value, "a finite number of seconds > 0")
        self.poll_s = poll_s
        self.node_refresh_s = node_refresh_s
        self.tick_s = tick_s
        self._clock = clock or time.monotonic
        self._backend = backend
        self._predictor = EwmaArrivalPredictor()
        self._pass = SchedulingPass(policy=self.policy, placer=self.placer, preemptor=self.preemptor,
                                    predictor=self._predictor, rng=np.random.default_rng(seed), config=limits)
        self._lock = threading.RLock()
        self._records: dict[str, JobRecord] = {}
        self._ids = itertools.count()
        self._t0 = self._clock()
        self._cluster: Cluster | None = None
        self._refreshed_at = -float("inf")
        self.queue: dict[str, JobView] = {}
        """Queued jobs' views, longest queued first (the pass reads it)."""
        self.running: dict[str, JobView] = {}
        """Running jobs' views (the pass reads it)."""
        self._due: list[float] = []  # wake-up and tick times (s)
        self._tick_at: float | None = None
        self._pass_due = True
        self.decisions: deque[Decision] = deque(maxlen=10_000)
        """(time, blocked job, victim, verdict, reason) of the latest preemption questions."""
        self.starts: list[str] = []
        """Job ids in the order their attempts started."""
        self.passes = 0
        self.arbiter, self.owner = arbiter, owner
        self.seats: Any = None
        """The running jobs' seats at the cluster's arbiter while :meth:`run` runs on real Ray."""
        self.arbiter_events: list[tuple[float, str]] = []
        """(time, what happened) of the seats at the arbiter: jobs joining, refusals, no answer."""

    # --- public --------------------------------------------------------------------
    def submit(self, fn: Callable[..., Any], *args, num_gpus: float = 1.0, name: str | None = None,
               gpu_models: tuple[str, ...] = (), num_cpus: float = 0.0, priority: int = 0,
               setup_s: float | None = None, expected_duration_s: float = 1.0, **kwargs) -> str:
        """Queue ``fn(*args, **kwargs)`` as a job needing ``num_gpus``; returns its job id.

        ``fn`` is a callable (run as a Ray task, restarted from the beginning after a
        preemption) or a trainable class (instantiated with ``args``/``kwargs`` in a Ray
        actor; preemption checkpoints it, see :func:`~trident.jobs.ray_backend.is_trainable`).
        ``expected_duration_s`` is a nominal size for policies' bookkeeping only (never
        used as the true duration by non-oracle policies); ``setup_s`` tells preemptors
        how long the job needs before it makes progress (a trainable's is then observed).
        """
        if not callable(fn):
            raise ConfigError("fn", fn, "a callable or a trainable class")
        with self._lock:
            job_id = name or f"job-{next(self._ids)}"
            if job_id in self._records:
                raise ConfigError("name", job_id, "a job name not used before")
            now = self._now()
            job = Job(job_id=job_id, arrival_s=now, duration_s=expected_duration_s, num_gpus=num_gpus,
                      gpu_models=tuple(gpu_models), cpus=num_cpus, priority=priority, setup_s=setup_s)
            r = JobRecord(job=job, fn=fn, args=args, kwargs=kwargs, enqueued_at=now, setup_s=setup_s or 0.0)
            self._records[job_id] = r
            self._enqueue(r)
            self._predictor.observe(now)
            self._pass.note_change()
            if self._may_evict() or self._cluster is None or self._cluster.may_fit(job):
                self._pass_due = True
        return job_id

    def submit_pipeline(self, fn: Callable[..., Any], *args, min_gpus: float = 1.0, max_gpus: float,
                        name: str | None = None, gpu_models: tuple[str, ...] = (), priority: int = 0,
                        setup_s: float | None = None, expected_duration_s: float = 1.0,
                        autoscale: dict | None = None, parallel_fraction: float = 1.0, **kwargs) -> str:
        """Queue a pipeline: ``fn(*args, **kwargs)`` builds and runs a Ray Data pipeline; it runs
        in a driver thread under ``trident.autoscale(**autoscale)`` with a GPU budget between
        ``min_gpus`` (held like a job's GPUs) and ``max_gpus`` (whole GPUs lent while no job
        waits). Preempting it shrinks it to ``min_gpus``; it grows back when GPUs are free. It does
        not join the cluster's arbiter unless ``autoscale`` says ``arbiter=True``: this scheduler
        gives it its budget.
        ``parallel_fraction``: the share of its run time at ``max_gpus`` that divides over its GPUs
        (the rest, Ray Data's start and the CPU stages, does not); the lazy preemptor prices a
        shrink by the stretch of its run, so 1 (the default) shrinks it least readily."""
        if not (isinstance(max_gpus, (int, float)) and max_gpus >= min_gpus and float(max_gpus).is_integer()):
            raise ConfigError("max_gpus", max_gpus, f"a whole number of GPUs >= min_gpus ({min_gpus})")
        if not 0 < parallel_fraction <= 1:
            raise ConfigError("parallel_fraction", parallel_fraction, "a number in (0, 1]")
        with self._lock:  # held until the job is elastic: no pass starts it as a plain job
            job_id = self.submit(fn, *args, num_gpus=min_gpus, name=name, gpu_models=gpu_models, priority=priority,
                                 setup_s=setup_s, expected_duration_s=expected_duration_s, **kwargs)
            r = self._records[job_id]
            r.job = replace(r.job, max_gpus=float(max_gpus), parallel_fraction=float(parallel_fraction))
            r.autoscale = {"arbiter": False, **(autoscale or {})}  # this scheduler gives its budget
            self._enqueue(r)
        return job_id

    def cancel(self, job_id: str) -> bool:
        """Cancel a queued or running job (a running one's attempt is killed and its GPUs freed).

        Safe to call from another thread while :meth:`run` loops. Returns ``False`` when the
        job had already finished (succeeded, failed or cancelled), else ``True``.
        """
        with self._lock:
            if job_id not in self._records:
                raise ConfigError("job_id", job_id, "the id of a submitted job")
            r = self._records[job_id]
            if r.state.terminal:
                return False
            if r.state is JobState.RUNNING and r.max_gpus is not None:
                raise TridentError(f"{job_id} is a running pipeline: it cannot be cancelled, it runs to its end")
            if r.state is JobState.RUNNING:
                self._kill([r])
            self._finish(r, JobState.CANCELLED, "cancelled")
        return True

    def run(self, *, timeout_s: float | None = None) -> dict[str, Any]:
        """Run every submitted job to an end; returns job id -> result of the jobs that succeeded.

        A job whose function raises is not retried; its exception is re-raised at the end.
        A job whose node dies is restarted on a live node. After ``timeout_s`` seconds the
        running jobs are cancelled (their GPUs freed), queued ones stay queued, and
        :class:`~trident.core.errors.TridentError` is raised.
        """
        if self._backend is None:
            import ray

            if not ray.is_initialized():
                raise TridentError("JobScheduler.run needs a connected Ray cluster (call ray.init first)")
            self._backend = RayBackend()
        if timeout_s is not None and not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
            raise ConfigError("timeout_s", timeout_s, "None or a number of seconds > 0")
        with self._lock:
            self._refresh(force=True, fail_unfit=False)
            for rec in self._all():
                if not rec.done and not self._fits_ever(rec.job):
                    raise ConfigError(f"{rec.job.job_id}.num_gpus", rec.job.num_gpus,
                                      "a request the cluster can hold")
        if self.arbiter and isinstance(self._backend, RayBackend):  # a real cluster, shared with other drivers
            from trident.jobs.arbiter.seats import JobSeats

            self.seats = JobSeats(owner=self.owner, now=self._now)
            self.seats.start()
        try:
            self._loop(timeout_s)
        finally:
            if self.seats is not None:
                self.seats.stop()
                self.arbiter_events += self.seats.events
                self.seats = None
        errors = [r for r in self._all() if r.state is JobState.FAILED]
        if errors:
            raise TridentError(f"job {errors[0].job.job_id} failed: {errors[0].error!r}") from errors[0].error
        return {r.job.job_id: r.result for r in self._all() if r.state is JobState.SUCCEEDED}

    def _loop(self, timeout_s: float | None) -> None:
        """Passes and waits until every job has ended (or ``timeout_s``)."""
        deadline = None if timeout_s is None else self._clock() + timeout_s
        while True:
            with self._lock:
                if all(r.done for r in self._all()):
                    break
                if deadline is not None and self._clock() > deadline:
                    self._time_out(timeout_s)
                self._refresh()
                self._step()
                if self.seats is not None:
                    self.seats.hold([r.job for r in self.running_records() if r.max_gpus is None])
                refs = [ref for r in self.running_records() for ref in (r.ref, r.attempt.ready_ref)
                        if ref is not None]
                wait_s = self.poll_s
                if self._due:
                    wait_s = max(0.0, min(wait_s, self._due[0] - self._now()))
            ready = self._backend.wait(refs, wait_s)
            with self._lock:
                self._collect(ready)

    def record(self, job_id: str) -> JobRecord:
        return self._records[job_id]

    def state(self, job_id: str) -> JobState:
        """The job's current :class:`JobState`."""
        return self._records[job_id].state

    def running_records(self) -> list[JobRecord]:
        with self._lock:
            return [self._records[jid] for jid in self.running]

    # --- the pass host (see trident.jobs.dispatch.PassHost) ------------------------
    @property
    def capacity(self) -> Cluster:
        return self._cluster

    def start(self, job_id: str, alloc: Allocation, now: float) -> None:
        r = self._records[job_id]
        self._cluster.allocate(r.job, alloc)
        node_id = alloc.node_ids[0]
        if r.max_gpus is not None:
            r.pipeline = self._backend.launch_pipeline(r.fn, r.args, r.kwargs, name=job_id,
                                                       budget_gpus=r.job.num_gpus, autoscale=r.autoscale)
            r.attempt = Attempt(ref=r.pipeline.future)
            r.autoscale_run = r.pipeline.run
            r.base_allocation, r.extra, r.cold_since = alloc, None, now
        else:
            r.attempt = self._backend.launch(r.fn, r.args, r.kwargs, name=job_id, num_gpus=r.job.num_gpus,
                                             num_cpus=r.job.cpus, node_id=node_id, state=r.checkpoint)
        del self.queue[job_id]
        r.state = JobState.RUNNING
        r.allocation = alloc
        r.wait_s += now - r.enqueued_at
        r.started_at = now
        r.setup_ends_at = None
        r.attempts += 1
        r.attempt_node_ids.append(node_id)
        r.events.append((now, f"start on {node_id[:8]} ({alloc.reason})"))
        self.running[job_id] = self._view(r)
        self.starts.append(job_id)

    def evict(self, job_ids: Sequence[str], now: float, reason: str) -> None:
        """Preempt: a trainable past its setup saves a checkpoint; the others are killed."""
        records = []
        for r in (self._records[j] for j in job_ids):
            r.futile_preemptions += self.running[r.job.job_id].in_setup(now)
            if r.max_gpus is not None:
                lending.shrink(r, self._cluster, now, reason)
                self._changed(r)
                continue
            outcome = None
            if is_trainable(r.fn) and r.setup_ends_at is not None:
                outcome = self._backend.save(r.attempt)
            if outcome is not None and outcome[0] == "done":  # it finished while saving
                r.result = outcome[1]
                self._kill([r])
                self._finish(r, JobState.SUCCEEDED, "succeeded")
                continue
            if outcome is not None:
                r.checkpoint = outcome[1]
                r.checkpoints += 1
            records.append(r)
        self._kill(records)
        for r in records:
            r.preemptions += 1
            r.state = JobState.PREEMPTED
            r.enqueued_at = self._now()
            r.events.append((r.enqueued_at, f"preempted ({reason})"))
            self._enqueue(r)

    def releasable(self, view: JobView) -> Allocation | None:
        r = self._records[view.job_id]
        return r.extra if r.max_gpus is not None else view.allocation

    def is_elastic(self, job_id: str) -> bool:
        return self._records[job_id].max_gpus is not None

    def _may_evict(self) -> bool:
        """Can a pass evict anything (so that every arrival is worth a pass)?"""
        return self._pass.may_evict(self)

    # --- internals -----------------------------------------------------------------
    def _changed(self, r: JobRecord) -> None:
        """``r``'s pass view changed (a pipeline shrunk, grown or warm)."""
        self.running[r.job.job_id] = self._view(r)
        self._pass.note_change()

    def _all(self) -> list[JobRecord]:
        with self._lock:
            return list(self._records.values())

    def _now(self) -> float:
        return self._clock() - self._t0

    def _fits_ever(self, job: Job) -> bool:
        return self._cluster is not None and self._cluster.could_ever_fit(job)

    def _enqueue(self, r: JobRecord) -> None:
        self.queue[r.job.job_id] = self._view(r)

    def _view(self, r: JobRecord) -> JobView:
        return job_view(r, self._now())

    def _step(self) -> None:
        """Run a pass if one is due (lock held), then plan the next tick."""
        now = self._now()
        for r in lending.watch(self.running_records(), now):
            self.running[r.job.job_id] = self._view(r)
        while self._due and self._due[0] <= now:
            t = heapq.heappop(self._due)
            if t == self._tick_at:
                self._tick_at = None
            self._pass_due = True
        if self._pass_due and self._cluster is not None:
            self._pass_due = False
            if self.queue:
                self.passes += 1
                out = self._pass(self, now, self._cluster.total_gpus_by_model())
                self._pass_due = False  # what it evicted it placed around already (as the simulator's pass)
                self.decisions.extend(out.decisions)
                for t in out.wake_at_s:
                    if t not in self._due:
                        heapq.heappush(self._due, t)
            for r in lending.grow(self.running_records(), self._cluster, now) if not self.queue else ():
                self._changed(r)
        if (self._pass.preemptive and self.tick_s is not None and self._tick_at is None
                and self.queue and self.running):
            self._tick_at = now + self.tick_s
            heapq.heappush(self._due, self._tick_at)

    def _refresh(self, *, force: bool = False, fail_unfit: bool = True) -> None:
        """Re-read the live nodes (lock held). Jobs on a node that died are queued again; with
        ``fail_unfit``, queued jobs no live node can hold any more fail."""
        now = self._now()
        if not force and now - self._refreshed_at < self.node_refresh_s:
            return
        self._refreshed_at = now
        nodes = self._backend.nodes()
        old = self._cluster
        if old is not None and {n.node_id for n in nodes if n.num_gpus > 0} == {n.node_id for n in old.nodes}:
            return
        running = {r.job.job_id: r for r in self.running_records() if r.allocation is not None}
        view = rebuild(nodes, old.nodes if old is not None else (),
                       {jid: (r.job, r.allocation) for jid, r in running.items()})
        self._cluster = view.cluster
        self._pass_due = True
        for jid, alloc in view.allocations.items():
            r = running[jid]
            r.allocation = alloc
            if r.base_allocation is not None:  # a pipeline: its minimum first, then what is lent
                k = len(r.base_allocation.devices)
                r.base_allocation = replace(r.base_allocation, devices=alloc.devices[:k])
                r.extra = replace(r.extra, devices=alloc.devices[k:]) if r.extra is not None else None
            self.running[jid] = self._view(r)
        for r in (running[jid] for jid in view.lost if running[jid].max_gpus is not None):
            r.allocation = r.base_allocation = r.extra = None  # Ray Data replaces its lost actors itself
            r.events.append((now, "a node it held GPUs on left; its GPUs are no longer booked"))
        lost = [running[jid] for jid in view.lost if running[jid].max_gpus is None]
        self._kill(lost, wait=False, release=False)
        for r in lost:
            self._requeue_lost(r, "its node left the cluster")
        for r in self._all() if fail_unfit else ():
            if not r.done and r.state is not JobState.RUNNING and not self._fits_ever(r.job):
                r.error = TridentError(f"job {r.job.job_id}: no live node can hold num_gpus={r.job.num_gpus:g}")
                self._finish(r, JobState.FAILED, f"failed: {r.error}")

    def _kill(self, records: list[JobRecord], *, wait: bool = True, release: bool = True) -> None:
        """Stop the running attempts of ``records`` (workers killed); with ``wait``, until their
        workers are gone, so their GPUs are really free."""
        self._backend.kill([r.attempt for r in records], wait=wait)
        for r in records:
            self._stop(r, release=release)

    def _stop(self, r: JobRecord, *, release: bool = True) -> None:
        """Book the end of ``r``'s attempt; ``release`` gives its capacity back to the view."""
        if release and self._cluster is not None and r.allocation is not None:
            self._cluster.release(r.job, r.allocation)
        r.attained_s += self._now() - r.started_at
        r.attempt = None
        r.allocation = r.base_allocation = r.extra = None
        r.pipeline = r.cold_since = None
        self.running.pop(r.job.job_id, None)
        self._pass.note_change()
        self._pass_due = True

    def _requeue_lost(self, r: JobRecord, why: str) -> None:
        r.node_failures += 1
        r.state = JobState.QUEUED
        r.enqueued_at = self._now()
        r.events.append((r.enqueued_at, f"requeued: {why}"))
        self._enqueue(r)

    def _finish(self, r: JobRecord, state: JobState, event: str) -> None:
        self.queue.pop(r.job.job_id, None)
        r.state = state
        r.finished_at = self._now()
        r.events.append((r.finished_at, event))

    def _time_out(self, timeout_s: float) -> None:
        running = [r for r in self.running_records() if r.max_gpus is None]  # pipelines run to their end
        self._kill(running)
        for r in running:
            self._finish(r, JobState.CANCELLED, f"cancelled: run timed out after {timeout_s} s")
        queued = sum(1 for r in self._all() if not r.done)
        raise TridentError(f"JobScheduler.run timed out after {timeout_s} s: cancelled "
                           f"{[r.job.job_id for r in running]}; {queued} job(s) still queued")

    def _collect(self, ready: list) -> None:
        """Book what became ready: a trainable's end of setup, or an attempt's outcome."""
        ready_ids = {id(x) for x in ready}
        for r in self.running_records():
            a = r.attempt
            if a.ready_ref is not None and id(a.ready_ref) in ready_ids:
                now = self._now()
                a.ready_ref = None
                r.setup_ends_at = now
                r.setup_s = now - r.started_at
                r.observed_setup_s.append(r.setup_s)
                r.events.append((now, f"setup done in {r.setup_s:.1f} s"))
                self.running[r.job.job_id] = self._view(r)
            if id(a.ref) not in ready_ids:
                continue
            try:
                value = self._backend.get(a.ref)
            except Exception as exc:
                if self._backend.node_lost(exc, r.attempt_node_ids[-1]):
                    self._stop(r)
                    self._requeue_lost(r, f"its node died ({type(exc).__name__})")
                    self._refreshed_at = -float("inf")
                    continue
                r.error = exc  # the job's own failure: recorded, reported at the end
            else:
                r.result = value[1] if a.actor is not None else value  # a trainable's ("done", result)
            if a.actor is not None:
                self._backend.kill([a], wait=False)
            self._stop(r)
            if r.error is None:
                self._finish(r, JobState.SUCCEEDED, "succeeded")
                hook = getattr(self.policy, "observe_finish", None)
                if hook is not None:  # its run time, setups left out
                    hook(r.job, max(0.0, r.attained_s - sum(r.observed_setup_s)))
            else:
                self._finish(r, JobState.FAILED, f"failed: {r.error!r}")

