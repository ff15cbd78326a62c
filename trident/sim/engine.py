"""Discrete-event replay of a job trace on a heterogeneous GPU cluster.

Events (arrivals, completions, delayed-preemption wake-ups, periodic ticks for
preemptive policies) are processed in time order; all events at one instant are
applied before one scheduling pass, the job layer's own
(:class:`trident.jobs.dispatch.SchedulingPass`, which ``trident.JobScheduler`` runs
on a Ray cluster too).

Each (re)start of a job first spends its setup time holding its GPUs without
progress; a restart after a preemption adds ``restore_s``. A preemption during
setup is *futile*: the setup is lost. Progress made after setup is checkpointed
at preemption and kept, unless the job does not checkpoint (``Job.checkpoints``: a
killed task), which restarts from zero. Per-job wasted GPU-time = GPU-time spent in
setup and restore beyond the one setup the job needs anyway (an elastic job: at its
maximum), plus the progress lost to restarts from zero.

An elastic job (``Job.max_gpus``, a pipeline) is treated as ``JobScheduler`` treats a
pipeline: it starts on its minimum, is lent free whole GPUs of its model up to its
maximum after a pass that leaves no job queued (:func:`trident.jobs.pipelines.lend`),
and evicting it shrinks it to its minimum (it keeps running, nothing is lost). Its
progress rate follows its warm GPUs (:mod:`trident.sim.progress`): ``duration_s`` is its
run time at ``max_gpus``; at g warm GPUs it progresses at g / ``max_gpus`` of that rate
(less of a slow-down when its ``parallel_fraction`` is below 1: Amdahl). Lent GPUs are warm
``Job.rewarm_s`` (else ``setup_s``) after they are lent (their actors start), so a shrink costs
a re-warm when it grows back, and the job is setting up (for preemptors) until then; preemptors
expect that re-warm as its setup, as ``JobScheduler`` does once it has observed one. Remaining work is
integrated at each resize and its end rescheduled.

Deterministic: one seed fixes the setup times drawn and the policy's RNG.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from trident.core.errors import ConfigError
from trident.jobs.base import (Allocation, ArrivalPredictor, EwmaArrivalPredictor, Job, JobPolicy, JobView,
                                Node, Placer, Preemptor, Verdict)
from trident.jobs.capacity import Cluster
from trident.jobs.dispatch import PassConfig, SchedulingPass
from trident.jobs.pipelines import combine, held_gpus, lend
from trident.sim.progress import finish_s, work_done

_QUEUED, _RUNNING, _DONE = 0, 1, 2
_FINISH, _WAKE, _TICK = 0, 1, 2


@dataclass(frozen=True, kw_only=True)
class SetupModel:
    """Distribution of a job's setup time per (re)start, in seconds.

    ``lognormal`` with the given median and 95th percentile (default 5 min and
    25 min: minutes to tens of minutes, as in production training jobs), ``fixed``
    (always ``median_s``) or ``none`` (no setup).
    """

    kind: str = "lognormal"
    median_s: float = 300.0
    p95_s: float = 1500.0

    def __post_init__(self) -> None:
        if self.kind not in ("lognormal", "fixed", "none"):
            raise ConfigError("setup.kind", self.kind, "'lognormal', 'fixed' or 'none'")
        if self.median_s < 0 or (self.kind == "lognormal" and not self.p95_s > self.median_s > 0):
            raise ConfigError("setup.median_s/p95_s", (self.median_s, self.p95_s),
                              "median_s >= 0, and 0 < median_s < p95_s for lognormal")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "none":
            return np.zeros(n)
        if self.kind == "fixed":
            return np.full(n, float(self.median_s))
        sigma = math.log(self.p95_s / self.median_s) / 1.6448536269514722
        return rng.lognormal(math.log(self.median_s), sigma, size=n)


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """Simulator settings (all keyword-only)."""

    seed: int = 0
    setup: SetupModel = field(default_factory=SetupModel)
    restore_s: float = 30.0
    queue_window: int = 128
    max_scan_failures: int = 32
    max_preempt_checks: int = 4
    max_victims: int = 8
    tick_s: float | None = 300.0
    """Re-run a pass this often while jobs run, for preemptive policies (None: events only)."""
    decision_log_size: int = 2000

    def __post_init__(self) -> None:
        self.pass_config()
        if self.restore_s < 0 or self.decision_log_size < 0:
            raise ConfigError("restore_s/decision_log_size", (self.restore_s, self.decision_log_size), "values >= 0")
        if self.tick_s is not None and self.tick_s <= 0:
            raise ConfigError("tick_s", self.tick_s, "None or a number > 0")

    def pass_config(self) -> PassConfig:
        """The limits of one scheduling pass."""
        return PassConfig(queue_window=self.queue_window, max_scan_failures=self.max_scan_failures,
                          max_preempt_checks=self.max_preempt_checks, max_victims=self.max_victims)


@dataclass(frozen=True, eq=False)
class SimResult:
    """Per-job outcomes (arrays aligned with ``job_ids``) and the cluster's busy timeline."""

    policy: str
    placer: str
    preemptor: str
    job_ids: tuple[str, ...]
    arrival_s: np.ndarray
    first_start_s: np.ndarray
    finish_s: np.ndarray
    queued_s: np.ndarray
    duration_s: np.ndarray
    num_gpus: np.ndarray
    preemptions: np.ndarray
    futile_preemptions: np.ndarray
    setup_gpu_s: np.ndarray
    wasted_gpu_s: np.ndarray
    timeline_s: np.ndarray
    used_gpus: np.ndarray
    total_gpus: float
    unschedulable: tuple[str, ...]
    verdicts: dict[str, int]
    decisions: tuple[tuple[float, str, str, str, str], ...]
    """(time, blocked job, victim, verdict, reason) of the first preemption decisions."""
    passes: int


class _Run:
    __slots__ = ("job", "setup_s", "rewarm_s", "remaining", "state", "enqueued_at", "wait", "attained", "start_at",
                 "setup_end", "alloc", "speed", "preemptions", "futile", "setup_gpu_s", "own_setup_s", "first_start",
                 "finish", "version", "view", "shape", "width", "groups", "progress_at", "base", "extra",
                 "lost_gpu_s")

    def __init__(self, job: Job, setup_s: float) -> None:
        self.job = job
        self.setup_s = setup_s
        self.rewarm_s = setup_s if job.rewarm_s is None else job.rewarm_s
        """Seconds a lent GPU takes to be warm; an elastic job's expected setup for preemptors."""
        self.remaining = job.duration_s
        self.state = _QUEUED
        self.enqueued_at = job.arrival_s
        self.wait = 0.0
        self.attained = 0.0
        self.start_at = math.nan
        self.setup_end = math.nan
        self.alloc: Allocation | None = None
        self.speed = 1.0
        self.preemptions = 0
        self.futile = 0
        self.setup_gpu_s = 0.0
        self.own_setup_s = 0.0
        """Seconds its attempts spent in their own setups (a lent GPU's warm-up left out: the job runs meanwhile)."""
        self.lost_gpu_s = 0.0
        """GPU-seconds of progress lost to restarts from zero."""
        self.first_start = math.nan
        self.finish = math.nan
        self.version = 0
        self.view: JobView | None = None
        self.shape = (job.gpu_models, job.gpu_milli, job.cpus, job.memory_mib)
        self.width = job.max_gpus if job.elastic else job.num_gpus
        """GPUs ``duration_s`` is measured at."""
        self.groups: list[tuple[float, float]] = []
        """(warm from s, GPUs) of what it holds (see :mod:`trident.sim.progress`)."""
        self.progress_at = math.nan
        """``remaining`` is as of this time (s)."""
        self.base: Allocation | None = None
        self.extra: Allocation | None = None
        """An elastic job's minimum and what it was lent above it."""


class _Host:
    """The simulator's state as a :class:`~trident.jobs.dispatch.PassHost`."""

    __slots__ = ("capacity", "queue", "running", "start", "evict", "runs")

    def __init__(self, capacity, queue, running, start, evict, runs) -> None:
        self.capacity, self.queue, self.running, self.start, self.evict = capacity, queue, running, start, evict
        self.runs = runs

    def releasable(self, view: JobView) -> Allocation | None:
        r = self.runs[view.job_id]
        return r.extra if r.job.elastic else view.allocation

    def is_elastic(self, job_id: str) -> bool:
        return self.runs[job_id].job.elastic


class Simulator:
    """Replays jobs through one policy, placer and (optional) preemptor.

    The policy, placer and preemptor are the same objects a live scheduler uses.
    """

    def __init__(self, *, nodes: Sequence[Node], policy: JobPolicy, placer: Placer,
                 preemptor: Preemptor | None = None, config: EngineConfig | None = None,
                 predictor: ArrivalPredictor | None = None) -> None:
        self.nodes = tuple(nodes)
        self.policy = policy
        self.placer = placer
        self.preemptor = preemptor
        self.config = config or EngineConfig()
        self.predictor = predictor or EwmaArrivalPredictor()
        self._oracle = bool(getattr(policy, "oracle", False) or getattr(preemptor, "oracle", False))

    # --- views ---------------------------------------------------------------------
    @staticmethod
    def _expected_setup_s(r: _Run) -> float:
        return r.rewarm_s if r.job.elastic else r.setup_s

    def _queued_view(self, r: _Run) -> JobView:
        return JobView(job=r.job, running=False, as_of_s=r.enqueued_at, wait_base_s=r.wait,
                       attained_base_s=r.attained, expected_setup_s=self._expected_setup_s(r),
                       preemptions=r.preemptions,
                       remaining_base_s=r.remaining if self._oracle else None)

    def _running_view(self, r: _Run) -> JobView:
        # The oracle's remaining time: exact as of the last resize, then falling at full width.
        remaining = r.remaining + max(0.0, r.progress_at - r.setup_end) * r.speed
        return JobView(job=r.job, running=True, as_of_s=r.start_at, wait_base_s=r.wait,
                       attained_base_s=r.attained, setup_ends_s=r.setup_end, expected_setup_s=self._expected_setup_s(r),
                       preemptions=r.preemptions, allocation=r.alloc, speed=r.speed,
                       remaining_base_s=remaining if self._oracle else None)

    # --- the run -------------------------------------------------------------------
    def run(self, jobs: Sequence[Job], *, progress: Callable[[int, int], None] | None = None) -> SimResult:
        """Replay ``jobs``; ``progress(done, total)`` is called now and then."""
        cfg = self.config
        cluster = Cluster(self.nodes)
        ids = [j.job_id for j in jobs]
        if len(set(ids)) != len(ids):
            raise ConfigError("jobs", "duplicate job_id", "unique job ids")
        order = sorted(range(len(jobs)), key=lambda i: (jobs[i].arrival_s, jobs[i].job_id))
        setup_rng, policy_rng = np.random.default_rng(cfg.seed).spawn(2)
        drawn = cfg.setup.sample(setup_rng, len(jobs))
        fits_cache: dict[tuple, bool] = {}
        runs: list[_Run] = []
        unschedulable: list[str] = []
        for i in order:
            j = jobs[i]
            key = (j.gpu_models, j.gpu_milli, j.cpus, j.memory_mib)
            ok = fits_cache.get(key)
            if ok is None:
                ok = fits_cache[key] = cluster.could_ever_fit(j)
            if not ok:
                unschedulable.append(j.job_id)
                continue
            runs.append(_Run(j, float(drawn[i]) if j.setup_s is None else j.setup_s))
        by_id = {r.job.job_id: r for r in runs}
        total = len(runs)
        queue: dict[str, JobView] = {}
        running: dict[str, JobView] = {}
        running_runs: dict[str, _Run] = {}
        heap: list[tuple[float, int, int, int, int]] = []
        seq = 0
        wake_times: set[float] = set()
        timeline_t: list[float] = []
        timeline_used: list[float] = []
        verdicts = {v.value: 0 for v in Verdict}
        decisions: list[tuple[float, str, str, str, str]] = []
        total_gpus = cluster.total_gpus_by_model()
        finished_hook = getattr(self.policy, "observe_finish", None)
        sched = SchedulingPass(policy=self.policy, placer=self.placer, preemptor=self.preemptor,
                               predictor=self.predictor, rng=policy_rng, config=cfg.pass_config())
        preemptive = sched.preemptive
        done = 0
        passes = 0
        progress_every = max(1, min(1000, total // 100))

        def push(t: float, kind: int, idx: int, version: int) -> None:
            nonlocal seq
            seq += 1
            heapq.heappush(heap, (t, seq, kind, idx, version))

        def replan(r: _Run) -> None:
            r.version += 1
            push(finish_s(r.groups, r.speed, r.width, r.progress_at, r.remaining, r.job.parallel_fraction),
                 _FINISH, id(r), r.version)

        def advance(r: _Run, now: float) -> None:
            done = work_done(r.groups, r.speed, r.width, r.progress_at, now, r.job.parallel_fraction)
            r.remaining = max(1e-6, r.remaining - done)
            r.progress_at = now

        def start(job_id: str, alloc: Allocation, now: float) -> None:
            r = by_id[job_id]
            cluster.allocate(r.job, alloc)
            r.state = _RUNNING
            r.alloc = r.base = alloc
            r.speed = r.job.speed_on(alloc.gpu_model)
            r.wait += now - r.enqueued_at
            r.start_at = r.progress_at = now
            restore = cfg.restore_s if r.remaining < r.job.duration_s else 0.0
            r.setup_end = now + r.setup_s + restore
            r.groups = [(r.setup_end, r.job.num_gpus)]
            if math.isnan(r.first_start):
                r.first_start = now
            replan(r)
            del queue[job_id]
            running_runs[job_id] = r
            r.view = running[job_id] = self._running_view(r)

        def unlend(r: _Run, now: float) -> None:
            """Drop the lent GPUs' groups; warm-up they had not finished by ``now`` is no setup time."""
            r.setup_gpu_s -= sum(max(0.0, w - now) * g for w, g in r.groups[1:])
            r.groups = r.groups[:1]

        def stop(r: _Run, now: float) -> None:
            g = r.job.num_gpus
            own = min(now, r.groups[0][0]) - r.start_at
            r.own_setup_s += own
            r.setup_gpu_s += own * g
            unlend(r, now)
            r.attained += now - r.start_at
            cluster.release(r.job, r.alloc)
            r.version += 1
            del running[r.job.job_id]
            del running_runs[r.job.job_id]

        def resized(r: _Run) -> None:
            replan(r)
            r.view = running[r.job.job_id] = self._running_view(r)
            sched.note_change()

        def shrink(r: _Run, now: float) -> None:
            """Evicting an elastic job: it gives back what it was lent and keeps running."""
            advance(r, now)
            cluster.release(r.job, r.extra)
            unlend(r, now)
            r.setup_end = max(r.groups[0][0], min(r.setup_end, now))
            r.alloc, r.extra = r.base, None
            r.preemptions += 1
            resized(r)

        def grow(now: float) -> None:
            """Lend free whole GPUs to running elastic jobs below their maximum, while no job waits."""
            if queue:
                return
            for r in [running_runs[j] for j in running if running_runs[j].job.elastic]:
                extra = lend(cluster, r.job, r.base, r.extra)
                if extra is None:
                    continue
                advance(r, now)
                g = held_gpus(r.job, extra) - held_gpus(r.job, r.extra)
                r.alloc, r.extra = combine(r.base, extra), extra
                r.setup_end = now + r.rewarm_s
                r.groups.append((r.setup_end, g))
                r.setup_gpu_s += r.rewarm_s * g
                resized(r)

        def evict(job_ids: Sequence[str], now: float, reason: str) -> None:
            for job_id in job_ids:
                r = by_id[job_id]
                if now < r.setup_end:
                    r.futile += 1
                if r.job.elastic:
                    shrink(r, now)
                    continue
                if now >= r.setup_end:
                    advance(r, now)
                    if not r.job.checkpoints:  # killed: what it did is lost
                        r.lost_gpu_s += (r.job.duration_s - r.remaining) / r.speed * r.job.num_gpus
                        r.remaining = r.job.duration_s
                stop(r, now)
                r.preemptions += 1
                r.state = _QUEUED
                r.alloc = None
                r.enqueued_at = now
                r.view = queue[job_id] = self._queued_view(r)

        host = _Host(cluster, queue, running, start, evict, by_id)
        elastic = any(r.job.elastic for r in runs)  # else nothing is lent, no arrival may shrink a job

        def schedule(now: float) -> None:
            nonlocal passes
            if not queue:
                return
            passes += 1
            out = sched(host, now, total_gpus)
            for d in out.decisions:
                verdicts[d[3]] += 1
                if len(decisions) < cfg.decision_log_size:
                    decisions.append(d)
            for t in out.wake_at_s:
                if t not in wake_times:
                    wake_times.add(t)
                    push(t, _WAKE, 0, 0)

        run_by_id = {id(r): r for r in runs}
        nxt = 0
        tick_pending = False
        while nxt < total or heap:
            t_arr = runs[nxt].job.arrival_s if nxt < total else math.inf
            now = min(t_arr, heap[0][0]) if heap else t_arr
            # A pass can start something only if capacity was freed, a new job may fit, or the
            # policy preempts (or a wake-up/tick asks for one).
            worth_a_pass = False
            while nxt < total and runs[nxt].job.arrival_s <= now:
                r = runs[nxt]
                r.view = queue[r.job.job_id] = self._queued_view(r)
                self.predictor.observe(r.job.arrival_s)
                nxt += 1
                sched.note_change()
                worth_a_pass = (worth_a_pass or (sched.may_evict(host) if elastic else preemptive)
                                or cluster.may_fit(r.job))
            while heap and heap[0][0] <= now:
                _, _, kind, key, version = heapq.heappop(heap)
                if kind == _FINISH:
                    r = run_by_id[key]
                    if r.version != version:  # the end of an attempt that was preempted
                        continue
                    stop(r, now)
                    sched.note_change()
                    r.state = _DONE
                    r.finish = now
                    r.view = None
                    if finished_hook is not None:
                        finished_hook(r.job, max(0.0, r.attained - r.own_setup_s))
                    done += 1
                    if progress is not None and done % progress_every == 0:
                        progress(done, total)
                worth_a_pass = True
                if kind == _WAKE:
                    wake_times.discard(now)
                elif kind == _TICK:
                    tick_pending = False
            if worth_a_pass:
                schedule(now)
                if elastic:
                    grow(now)
            if preemptive and cfg.tick_s is not None and not tick_pending and (queue and running):
                tick_pending = True
                push(now + cfg.tick_s, _TICK, 0, 0)
            used = cluster.used_milli / 1000.0
            if not timeline_used or timeline_used[-1] != used:
                timeline_t.append(now)
                timeline_used.append(used)
            if not heap and nxt >= total and queue:
                raise ConfigError("jobs", f"{len(queue)} jobs left queued on an idle cluster",
                                  "a policy that orders every queued job")
        if progress is not None:
            progress(done, total)

        def arr(attr: str) -> np.ndarray:
            return np.array([getattr(r, attr) for r in runs], dtype=float)

        num_gpus = np.array([r.job.num_gpus for r in runs], dtype=float)
        setup_gpu = arr("setup_gpu_s")
        needed = np.array([r.setup_s * r.job.num_gpus + r.rewarm_s * (r.width - r.job.num_gpus) for r in runs])
        return SimResult(
            policy=getattr(self.policy, "name", type(self.policy).__name__),
            placer=getattr(self.placer, "name", type(self.placer).__name__),
            preemptor=getattr(self.preemptor, "name", "none") if self.preemptor is not None else "none",
            job_ids=tuple(r.job.job_id for r in runs), arrival_s=np.array([r.job.arrival_s for r in runs]),
            first_start_s=arr("first_start"), finish_s=arr("finish"), queued_s=arr("wait"),
            duration_s=np.array([r.job.duration_s for r in runs]), num_gpus=num_gpus,
            preemptions=arr("preemptions").astype(int), futile_preemptions=arr("futile").astype(int),
            setup_gpu_s=setup_gpu, wasted_gpu_s=np.maximum(0.0, setup_gpu - needed) + arr("lost_gpu_s"),
            timeline_s=np.array(timeline_t), used_gpus=np.array(timeline_used),
            total_gpus=sum(total_gpus.values()), unschedulable=tuple(unschedulable), verdicts=verdicts,
            decisions=tuple(decisions), passes=passes)
