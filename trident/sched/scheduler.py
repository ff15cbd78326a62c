"""``trident.JobScheduler``: the job layer on a real Ray cluster.

Jobs (and pipelines: any callable) are submitted with the GPUs they need; the
scheduler orders them with a job policy, places them with a placer on the Ray
cluster's GPU nodes, and, under a preemptive policy, asks a preemptor whether a
blocked job may evict a running one. These are the very objects the simulator
drives (``trident.sim``). A job runs as a Ray task pinned to the chosen node
(``NodeAffinitySchedulingStrategy``) with ``num_gpus``; a preempted job's task is
cancelled (its worker killed) and the job is queued again and restarted from the
beginning later: saving progress across a restart is the job's own business.

This module is the Ray shell: it reads the clock and talks to Ray; every decision
is made by the pure plug-ins.
"""
from __future__ import annotations

import itertools
import threading
from collections import deque
import time
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable

import numpy as np

from trident.errors import ConfigError, TridentError
from trident.sched.base import (JOB_POLICIES, PLACERS, PREEMPTORS, Allocation, EwmaArrivalPredictor, Job,
                                JobPolicy, JobView, Node, Placer, Preemptor, SchedState, Verdict)

_PREEMPTION = ("never", "eager", "lazy")


@dataclass
class JobRecord:
    """One submitted job: what it is, where it ran, what it returned."""

    job: Job
    fn: Callable[..., Any]
    args: tuple
    kwargs: dict
    attempts: int = 0
    preemptions: int = 0
    wait_s: float = 0.0
    attained_s: float = 0.0
    enqueued_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    allocation: Allocation | None = None
    ref: Any = None
    result: Any = None
    error: BaseException | None = None
    done: bool = False
    events: list[tuple[float, str]] = field(default_factory=list)


class JobScheduler:
    """Admits, orders, places and (optionally) preempts jobs on the connected Ray cluster.

    ``policy``, ``preemption`` and ``placement`` are registry names or plug-in objects.
    ``seed`` seeds the policy's random generator. ``poll_s``: how often the loop looks
    for finished tasks. Nodes and GPU models come from Ray (``accelerator_type:X``
    resources name the model; ``"GPU"`` when none is set).
    """

    def __init__(self, *, policy: str | JobPolicy = "fifo", preemption: str | Preemptor = "never",
                 placement: str | Placer | None = None, seed: int = 0, poll_s: float = 0.05) -> None:
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
        if not poll_s > 0:
            raise ConfigError("poll_s", poll_s, "a number of seconds > 0")
        self.poll_s = poll_s
        self._rng = np.random.default_rng(seed)
        self._predictor = EwmaArrivalPredictor()
        self._records: dict[str, JobRecord] = {}
        self._lock = threading.Lock()  # submit() may be called from another thread while run() loops
        self._ids = itertools.count()
        self._t0 = time.monotonic()
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

    def _all(self) -> list[JobRecord]:
        with self._lock:
            return list(self._records.values())

    def run(self, *, timeout_s: float | None = None) -> dict[str, Any]:
        """Run every submitted job to completion; returns job id -> result.

        A job whose function raises is not retried; its exception is re-raised at the end.
        """
        import ray

        if not ray.is_initialized():
            raise TridentError("JobScheduler.run needs a connected Ray cluster (call ray.init first)")
        from trident.sim.cluster import Cluster

        self._cluster = Cluster(self._ray_nodes(ray))
        for rec in self._all():
            if not rec.done and not self._cluster.could_ever_fit(rec.job):
                raise ConfigError(f"{rec.job.job_id}.num_gpus", rec.job.num_gpus, "a request the cluster can hold")
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while any(not r.done for r in self._all()):
            if deadline is not None and time.monotonic() > deadline:
                raise TridentError(f"JobScheduler.run timed out after {timeout_s} s")
            self._schedule(ray)
            running = [r.ref for r in self._all() if r.ref is not None]
            if running:
                ready, _ = ray.wait(running, num_returns=len(running), timeout=self.poll_s)
                self._collect(ray, ready)
        errors = [r for r in self._all() if r.error is not None]
        if errors:
            raise TridentError(f"job {errors[0].job.job_id} failed: {errors[0].error!r}") from errors[0].error
        return {r.job.job_id: r.result for r in self._all()}

    def record(self, job_id: str) -> JobRecord:
        return self._records[job_id]

    # --- internals -----------------------------------------------------------------
    def _now(self) -> float:
        return time.monotonic() - self._t0

    @staticmethod
    def _ray_nodes(ray) -> list[Node]:
        nodes = []
        for n in ray.nodes():
            if not n.get("Alive"):
                continue
            res = n.get("Resources", {})
            gpus = int(res.get("GPU", 0))
            model = next((k.split(":", 1)[1] for k in res if k.startswith("accelerator_type:")), "GPU")
            nodes.append(Node(node_id=n["NodeID"], gpu_model=model, num_gpus=gpus, cpus=res.get("CPU", 0.0),
                              memory_mib=res.get("memory", 0.0) / 2**20))
        return nodes

    def _view(self, r: JobRecord, now: float) -> JobView:
        setup = r.job.setup_s or 0.0
        if r.ref is not None:
            return JobView(job=r.job, running=True, as_of_s=r.started_at, wait_base_s=r.wait_s,
                           attained_base_s=r.attained_s, setup_ends_s=r.started_at + setup,
                           expected_setup_s=setup, preemptions=r.preemptions, allocation=r.allocation)
        return JobView(job=r.job, running=False, as_of_s=r.enqueued_at, wait_base_s=r.wait_s,
                       attained_base_s=r.attained_s, expected_setup_s=setup, preemptions=r.preemptions)

    def _state(self, now: float) -> SchedState:
        records = self._all()
        queued = sorted((r for r in records if not r.done and r.ref is None),
                        key=lambda r: (r.enqueued_at, r.job.job_id))
        running = {r.job.job_id: self._view(r, now) for r in records if r.ref is not None}
        return SchedState(now=now, queued=[self._view(r, now) for r in queued], running=MappingProxyType(running),
                          total_gpus_by_model=self._cluster.total_gpus_by_model(),
                          free_gpus_by_model=self._cluster.free_gpus_by_model(), queue_length=len(queued),
                          capacity=self._cluster)

    def _schedule(self, ray) -> None:
        now = self._now()
        state = self._state(now)
        if not state.queued:
            return
        ordered = self.policy.order(state, self._rng)
        rank = {jid: k for k, jid in enumerate(ordered)}
        preemptive = bool(getattr(self.policy, "preemptive", False))
        for jid in ordered:
            r = self._records[jid]
            if r.done or r.ref is not None:
                continue
            alloc = self.placer.place(r.job, self._cluster) if self._cluster.may_fit(r.job) else None
            if alloc is None and preemptive:
                alloc = self._try_preempt(ray, r, rank, state)
            if alloc is not None:
                self._start(ray, r, alloc)

    def _try_preempt(self, ray, r: JobRecord, rank: dict[str, int], state: SchedState) -> Allocation | None:
        """Evict the lowest-ranked running jobs that make room for ``r``, if the preemptor agrees."""
        mine = rank[r.job.job_id]
        cands = sorted((v for v in self._all() if v.ref is not None
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
        for v in victims:
            self._preempt(ray, v)
        return self.placer.place(r.job, self._cluster)

    def _start(self, ray, r: JobRecord, alloc: Allocation) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        now = self._now()
        self._cluster.allocate(r.job, alloc)
        node_id = alloc.node_ids[0]
        task = ray.remote(r.fn).options(
            num_gpus=r.job.num_gpus, num_cpus=r.job.cpus, max_retries=0, name=r.job.job_id,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False))
        r.ref = task.remote(*r.args, **r.kwargs)
        r.allocation = alloc
        r.wait_s += now - r.enqueued_at
        r.started_at = now
        r.attempts += 1
        r.events.append((now, f"start on {node_id[:8]} ({alloc.reason})"))
        self.starts.append(r.job.job_id)

    def _stop(self, r: JobRecord) -> None:
        now = self._now()
        self._cluster.release(r.job, r.allocation)
        r.attained_s += now - r.started_at
        r.ref = None
        r.allocation = None

    def _preempt(self, ray, r: JobRecord) -> None:
        ref = r.ref
        ray.cancel(ref, force=True)
        try:  # wait for the worker to go, so its GPUs are really free
            ray.get(ref, timeout=30)
        except Exception:  # the cancelled task's error is expected here
            pass
        self._stop(r)
        r.preemptions += 1
        r.enqueued_at = self._now()
        r.events.append((r.enqueued_at, "preempted"))

    def _collect(self, ray, ready: list) -> None:
        by_ref = {r.ref: r for r in self._all() if r.ref is not None}
        for ref in ready:
            r = by_ref[ref]
            try:
                r.result = ray.get(ref)
            except Exception as exc:  # the job's own failure: recorded, reported at the end
                r.error = exc
            self._stop(r)
            r.done = True
            r.finished_at = self._now()
            r.events.append((r.finished_at, "finished" if r.error is None else f"failed: {r.error!r}"))
