"""Discrete-event replay of a job trace on a heterogeneous GPU cluster.

Events (arrivals, completions, delayed-preemption wake-ups, periodic ticks for
preemptive policies) are processed in time order; all events at one instant are
applied before one scheduling pass. A pass hands the policy a :class:`SchedState`
(the ``queue_window`` jobs queued longest, every running job) and walks its order:
a job that fits is placed by the placer; one that does not is skipped (the scan
stops after ``max_scan_failures`` misses in a row). Under a preemptive policy a
blocked job may evict lower-ranked running jobs, if the preemptor agrees; a refusal
(``DO_NOT``) is not asked again until a job arrives, starts or stops.

Each (re)start of a job first spends its setup time holding its GPUs without
progress; a restart after a preemption adds ``restore_s``. A preemption during
setup is *futile*: the setup is lost. Progress made after setup is checkpointed
at preemption and kept. Per-job wasted GPU-time = GPU-time spent in setup and
restore beyond the one setup the job needs anyway.

Deterministic: one seed fixes the setup times drawn and the policy's RNG.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from itertools import islice
from types import MappingProxyType
from typing import Callable, Sequence

import numpy as np

from trident.errors import ConfigError
from trident.sched.base import (Allocation, ArrivalPredictor, EwmaArrivalPredictor, Job, JobPolicy, JobView,
                                Node, Placer, Preemptor, SchedState, Verdict)
from trident.sim.cluster import Cluster

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
        for name in ("queue_window", "max_scan_failures", "max_victims"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "an integer >= 1")
        if self.max_preempt_checks < 0 or self.restore_s < 0 or self.decision_log_size < 0:
            raise ConfigError("max_preempt_checks/restore_s/decision_log_size",
                              (self.max_preempt_checks, self.restore_s, self.decision_log_size), "values >= 0")
        if self.tick_s is not None and self.tick_s <= 0:
            raise ConfigError("tick_s", self.tick_s, "None or a number > 0")


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
    __slots__ = ("job", "setup_s", "remaining", "state", "enqueued_at", "wait", "attained", "start_at",
                 "setup_end", "alloc", "speed", "preemptions", "futile", "setup_gpu_s", "first_start",
                 "finish", "version", "view", "shape")

    def __init__(self, job: Job, setup_s: float) -> None:
        self.job = job
        self.setup_s = setup_s
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
        self.first_start = math.nan
        self.finish = math.nan
        self.version = 0
        self.view: JobView | None = None
        self.shape = (job.gpu_models, job.gpu_milli, job.cpus, job.memory_mib)


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
    def _queued_view(self, r: _Run) -> JobView:
        return JobView(job=r.job, running=False, as_of_s=r.enqueued_at, wait_base_s=r.wait,
                       attained_base_s=r.attained, expected_setup_s=r.setup_s, preemptions=r.preemptions,
                       remaining_base_s=r.remaining if self._oracle else None)

    def _running_view(self, r: _Run) -> JobView:
        return JobView(job=r.job, running=True, as_of_s=r.start_at, wait_base_s=r.wait,
                       attained_base_s=r.attained, setup_ends_s=r.setup_end, expected_setup_s=r.setup_s,
                       preemptions=r.preemptions, allocation=r.alloc, speed=r.speed,
                       remaining_base_s=r.remaining if self._oracle else None)

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
        queue: dict[str, _Run] = {}
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
        preemptive = bool(getattr(self.policy, "preemptive", False)) and self.preemptor is not None
        done = 0
        passes = 0
        epoch = 0  # bumped whenever the running set changes or a job arrives
        refused: dict[str, int] = {}  # blocked job -> epoch at which every victim was refused
        progress_every = max(1, min(1000, total // 100))

        def push(t: float, kind: int, idx: int, version: int) -> None:
            nonlocal seq
            seq += 1
            heapq.heappush(heap, (t, seq, kind, idx, version))

        def start(r: _Run, alloc: Allocation, now: float) -> None:
            nonlocal epoch
            epoch += 1
            cluster.allocate(r.job, alloc)
            r.state = _RUNNING
            r.alloc = alloc
            r.speed = r.job.speed_on(alloc.gpu_model)
            r.wait += now - r.enqueued_at
            r.start_at = now
            restore = cfg.restore_s if r.remaining < r.job.duration_s else 0.0
            r.setup_end = now + r.setup_s + restore
            if math.isnan(r.first_start):
                r.first_start = now
            r.version += 1
            push(r.setup_end + r.remaining / r.speed, _FINISH, id(r), r.version)
            del queue[r.job.job_id]
            running_runs[r.job.job_id] = r
            r.view = running[r.job.job_id] = self._running_view(r)

        def stop(r: _Run, now: float) -> None:
            nonlocal epoch
            epoch += 1
            g = r.job.num_gpus
            r.setup_gpu_s += (min(now, r.setup_end) - r.start_at) * g
            r.attained += now - r.start_at
            cluster.release(r.job, r.alloc)
            r.version += 1
            del running[r.job.job_id]
            del running_runs[r.job.job_id]

        def preempt(r: _Run, now: float) -> None:
            if now < r.setup_end:
                r.futile += 1
            else:
                r.remaining = max(1e-6, r.remaining - (now - r.setup_end) * r.speed)
            stop(r, now)
            r.preemptions += 1
            r.state = _QUEUED
            r.alloc = None
            r.enqueued_at = now
            queue[r.job.job_id] = r
            r.view = self._queued_view(r)

        def try_preempt(r: _Run, rank: dict[str, int], state: SchedState, now: float) -> bool:
            my_rank = rank[r.job.job_id]
            cands = [v for v in running_runs.values()
                     if rank.get(v.job.job_id, len(rank)) > my_rank and r.job.allows(v.alloc.gpu_model)]
            if not cands:
                return False
            cands.sort(key=lambda v: (-rank.get(v.job.job_id, len(rank)), -v.start_at, v.job.job_id))
            what_if = cluster.copy()
            victims: list[_Run] = []
            for v in cands:
                what_if.release(v.job, v.alloc)
                victims.append(v)
                if what_if.may_fit(r.job) and self.placer.place(r.job, what_if) is not None:
                    break
                if len(victims) >= cfg.max_victims:
                    return False
            else:
                return False
            # Spare victims the blocked job does not need (highest-ranked first).
            for v in sorted(victims, key=lambda v: rank.get(v.job.job_id, len(rank))):
                if len(victims) == 1:
                    break
                what_if.allocate(v.job, v.alloc)
                if what_if.may_fit(r.job) and self.placer.place(r.job, what_if) is not None:
                    victims.remove(v)
                else:
                    what_if.release(v.job, v.alloc)
            blocked_view = r.view
            answers = [self.preemptor.decide(blocked=blocked_view, victim=v.view, state=state,
                                             predictor=self.predictor) for v in victims]
            for v, a in zip(victims, answers):
                verdicts[a.verdict.value] += 1
                if len(decisions) < cfg.decision_log_size:
                    decisions.append((now, r.job.job_id, v.job.job_id, a.verdict.value, a.reason))
            if all(a.verdict is Verdict.PREEMPT_NOW for a in answers):
                for v in victims:
                    preempt(v, now)
                alloc = self.placer.place(r.job, cluster)
                if alloc is not None:
                    start(r, alloc, now)
                    return True
                return False
            delays = [a.until_s for a in answers if a.verdict is Verdict.DELAY_UNTIL]
            if any(a.verdict is Verdict.DO_NOT for a in answers):
                refused[r.job.job_id] = epoch
            elif delays:
                t = max(min(delays), now + 1e-3)
                if t not in wake_times:
                    wake_times.add(t)
                    push(t, _WAKE, 0, 0)
            return False

        def schedule(now: float) -> None:
            nonlocal passes
            if not queue:
                return
            passes += 1
            state = SchedState(now=now, queued=[v.view for v in islice(queue.values(), cfg.queue_window)],
                               running=MappingProxyType(running), total_gpus_by_model=total_gpus,
                               free_gpus_by_model=cluster.free_gpus_by_model(), queue_length=len(queue),
                               capacity=cluster)
            ordered = self.policy.order(state, policy_rng)
            rank = {jid: k for k, jid in enumerate(ordered)} if preemptive else {}
            failures = 0
            checks = 0
            # Within a pass free capacity only shrinks (until a preemption), so a job shaped like
            # one that did not fit does not fit either.
            misfits: set[tuple] = set()
            for jid in ordered:
                r = by_id[jid]
                if r.state != _QUEUED:
                    continue
                shape = r.shape
                if shape not in misfits:
                    j = r.job
                    alloc = self.placer.place(j, cluster) if cluster.may_fit(j) else None
                    if alloc is not None:
                        start(r, alloc, now)
                        failures = 0
                        continue
                    misfits.add(shape)
                    failures += 1
                if preemptive and checks < cfg.max_preempt_checks and refused.get(jid) != epoch:
                    checks += 1
                    if try_preempt(r, rank, state, now):
                        misfits.clear()
                        failures = 0
                        continue
                if failures >= cfg.max_scan_failures:
                    break

        run_by_id = {id(r): r for r in runs}
        nxt = 0
        tick_pending = False
        while nxt < total or heap:
            t_arr = runs[nxt].job.arrival_s if nxt < total else math.inf
            now = min(t_arr, heap[0][0]) if heap else t_arr
            # A pass can start something only if capacity was freed, a new job may fit, or the
            # policy preempts (or a wake-up/tick asks for one).
            worth_a_pass = preemptive
            while nxt < total and runs[nxt].job.arrival_s <= now:
                r = runs[nxt]
                queue[r.job.job_id] = r
                r.view = self._queued_view(r)
                self.predictor.observe(r.job.arrival_s)
                nxt += 1
                epoch += 1
                worth_a_pass = worth_a_pass or cluster.may_fit(r.job)
            while heap and heap[0][0] <= now:
                _, _, kind, key, version = heapq.heappop(heap)
                worth_a_pass = True
                if kind == _FINISH:
                    r = run_by_id[key]
                    if r.version != version:
                        continue
                    stop(r, now)
                    r.state = _DONE
                    r.finish = now
                    r.view = None
                    done += 1
                    if progress is not None and done % progress_every == 0:
                        progress(done, total)
                elif kind == _WAKE:
                    wake_times.discard(now)
                elif kind == _TICK:
                    tick_pending = False
            if worth_a_pass:
                schedule(now)
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
        needed = np.array([r.setup_s for r in runs]) * num_gpus
        return SimResult(
            policy=getattr(self.policy, "name", type(self.policy).__name__),
            placer=getattr(self.placer, "name", type(self.placer).__name__),
            preemptor=getattr(self.preemptor, "name", "none") if self.preemptor is not None else "none",
            job_ids=tuple(r.job.job_id for r in runs), arrival_s=np.array([r.job.arrival_s for r in runs]),
            first_start_s=arr("first_start"), finish_s=arr("finish"), queued_s=arr("wait"),
            duration_s=np.array([r.job.duration_s for r in runs]), num_gpus=num_gpus,
            preemptions=arr("preemptions").astype(int), futile_preemptions=arr("futile").astype(int),
            setup_gpu_s=setup_gpu, wasted_gpu_s=np.maximum(0.0, setup_gpu - needed),
            timeline_s=np.array(timeline_t), used_gpus=np.array(timeline_used),
            total_gpus=sum(total_gpus.values()), unschedulable=tuple(unschedulable), verdicts=verdicts,
            decisions=tuple(decisions), passes=passes)
