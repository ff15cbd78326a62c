"""The arbiter's state: who shares the cluster, what each run said of itself, and its budget.

Pure: every method takes the time (s, the arbiter's clock) and returns what changed; the Ray
actor (:mod:`trident.jobs.arbiter.actor`) only holds one :class:`ArbiterState` and calls it.
A run registers a :class:`Claim` and receives a token; only that token changes its
registration. Each :meth:`ArbiterState.update` is a heartbeat carrying :class:`Progress`; a run
silent for ``lapse_s`` is removed and its budget returned. Budgets are divided by
:func:`trident.jobs.arbiter.divide.divide` whenever a run arrives or leaves and at most every
``rebalance_s`` otherwise.
"""
from __future__ import annotations

import math
import numbers
import secrets
from collections import deque
from dataclasses import dataclass, field, replace

from trident.core.errors import TridentError
from trident.jobs.arbiter.divide import Budget, Share, divide
from trident.jobs.base import JOB_POLICIES

KINDS = ("pipeline", "training")
RATE_WINDOW_S, RATE_MIN_SPAN_S = 10.0, 3.0
"""A run's rate and cost are measured over its last 10 s of heartbeats, once they span 3 s."""


class Refused(TridentError, ValueError):
    """A message the arbiter will not act on; it changed nothing. The message says why."""


@dataclass(frozen=True)
class Claim:
    """What a run says of itself when it registers. ``priority``: a class (higher first; runs of
    one class are ordered by the arbiter's policy). ``min_*``: the least that keeps it moving (one
    task or actor of each operator); ``max_*``: the most it can use (``None``: no bound)."""

    name: str
    owner: str = ""
    kind: str = "pipeline"
    priority: int = 0
    min_cpus: float = 1.0
    min_gpus: float = 0.0
    max_cpus: float | None = None
    max_gpus: float | None = None


@dataclass(frozen=True)
class Progress:
    """A run's heartbeat: the execution it runs (its id; a new one starts its measurements anew),
    rows done and in all (input rows; ``None``: not known), whether it is ``idle`` between
    executions, and the seconds a shrink costs it to grow back (its actors' observed cold start;
    ``None``: not observed)."""

    rows_done: float | None = None
    rows_total: float | None = None
    rewarm_s: float | None = None
    execution: str = ""
    idle: bool = False


@dataclass
class Entry:
    """One registered run, as the arbiter keeps it."""

    run_id: str
    token: str
    claim: Claim
    arrival_s: float
    seen_s: float
    progress: Progress = field(default_factory=Progress)
    rate: float | None = None
    """Rows per second over the last ``RATE_WINDOW_S`` of heartbeats once they span ``RATE_MIN_SPAN_S``."""
    cost: float | None = None
    """Cluster-seconds per row: over such a window that starts after its first rows, the share of
    the cluster the run held (its larger share of CPUs or GPUs, each at least its floor; 1 with no
    cap) times the seconds, over the rows done; the least of the run's current execution (``None``
    until then). A run held small is not taken for a long one: its rate is low, and so is its share."""
    first_rows_s: float | None = None
    """When its current execution's first rows were done (arbiter clock)."""
    points: deque = field(default_factory=deque)
    """(time s, rows done, share of the cluster held) of the heartbeats within the rate's window."""
    budget: Budget | None = None
    """The budget last given (``None``: none yet)."""

    def remaining_s(self) -> float | None:
        """Seconds left with the whole cluster at its least cost per row (``None``: unknown): the work
        left, which a shrink does not change, so a run held small does not fall behind for it."""
        left = self.rows_left()
        return None if left is None or not self.cost else left * self.cost

    def rows_left(self) -> float | None:
        p = self.progress
        return None if p.rows_total is None or p.rows_done is None else max(0.0, p.rows_total - p.rows_done)

    def slowdown(self, now: float) -> float | None:
        """Seconds since it arrived over the seconds its rows done take with the whole cluster at its
        least cost, after its first rows' wait (``None``: no cost yet)."""
        if not self.cost or self.first_rows_s is None or not self.progress.rows_done:
            return None
        alone = (self.first_rows_s - self.arrival_s) + self.progress.rows_done * self.cost
        return (now - self.arrival_s) / alone if alone > 0 else None


def _number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def check_claim(claim: Claim, cpus: float, gpus: float) -> None:
    """Raise :class:`Refused` naming what is wrong with ``claim`` on a cluster of ``cpus``/``gpus``."""
    if not isinstance(claim, Claim):
        raise Refused(f"a claim must be a trident Claim, got {type(claim).__name__}")
    if not claim.name or not isinstance(claim.name, str):
        raise Refused("a run needs a name")
    if not isinstance(claim.owner, str):
        raise Refused(f"owner={claim.owner!r}: expected a string")
    if not isinstance(claim.priority, numbers.Integral) or isinstance(claim.priority, bool):
        raise Refused(f"priority={claim.priority!r}: expected an integer")
    if claim.kind not in KINDS:
        raise Refused(f"kind {claim.kind!r} is not one of {', '.join(KINDS)}")
    for what, value in (("min_cpus", claim.min_cpus), ("min_gpus", claim.min_gpus),
                        ("max_cpus", claim.max_cpus), ("max_gpus", claim.max_gpus)):
        if value is not None and (not _number(value) or value < 0):
            raise Refused(f"{what}={value!r}: expected a finite number >= 0")
    if claim.max_cpus is not None and claim.max_cpus < claim.min_cpus:
        raise Refused(f"max_cpus={claim.max_cpus} is below min_cpus={claim.min_cpus}")
    if claim.max_gpus is not None and claim.max_gpus < claim.min_gpus:
        raise Refused(f"max_gpus={claim.max_gpus} is below min_gpus={claim.min_gpus}")
    if claim.min_cpus > cpus + 1e-9 or claim.min_gpus > gpus + 1e-9:
        raise Refused(f"min {claim.min_cpus:g} CPUs / {claim.min_gpus:g} GPUs is above the cluster's "
                      f"{cpus:g} / {gpus:g}")


def check_progress(progress: Progress) -> None:
    if not isinstance(progress, Progress):
        raise Refused(f"progress must be a trident Progress, got {type(progress).__name__}")
    for what, value in (("rows_done", progress.rows_done), ("rows_total", progress.rows_total),
                        ("rewarm_s", progress.rewarm_s)):
        if value is not None and (not _number(value) or value < 0):
            raise Refused(f"{what}={value!r}: expected a finite number >= 0")
    if not isinstance(progress.execution, str) or not isinstance(progress.idle, bool):
        raise Refused("progress.execution must be a string and progress.idle a bool")


@dataclass
class ArbiterState:
    """All runs sharing one cluster of ``cpus`` CPUs and ``gpus`` GPUs.

    ``policy``: the job layer's order within a priority class (a ``JOB_POLICIES`` name: ``"srtf"``
    orders by predicted remaining time, ``"fifo"`` by arrival, ...). ``preemption``: ``"lazy"`` (a
    run is shrunk only where the shrink pays off: it has more than ``payoff_s``, or twice its
    re-warm, left), ``"eager"`` (budgets follow the order at once) or ``"never"`` (a run keeps what
    it was given but for newcomers' floors; newcomers share the rest). ``max_slowdown``: a run
    slowed down this much so far is served first and not shrunk (``None``: no bound).
    ``quotas``: owner -> (CPUs, GPUs) the owner's runs hold at most, whatever they claim.
    ``lapse_s``: a run silent this long is removed."""

    cpus: float
    gpus: float
    policy: str = "srtf"
    preemption: str = "lazy"
    quotas: dict[str, tuple[float, float]] = field(default_factory=dict)
    lapse_s: float = 15.0
    rebalance_s: float = 2.0
    payoff_s: float = 10.0
    max_slowdown: float | None = None
    seed: int = 0
    runs: dict[str, Entry] = field(default_factory=dict)
    decisions: deque = field(default_factory=lambda: deque(maxlen=200))
    divided_s: float = -math.inf

    def __post_init__(self) -> None:
        self._order = JOB_POLICIES.create(self.policy)
        """The job layer's policy object, kept across divisions (a policy may learn)."""

    def register(self, claim: Claim, now: float, *, progress: Progress | None = None) -> tuple[str, str, Budget]:
        """Add a run: returns its id, its token (keep it: only it changes the registration) and its budget."""
        check_claim(claim, self.cpus, self.gpus)
        if progress is not None:
            check_progress(progress)
        run_id = f"{claim.name}-{secrets.token_hex(3)}"
        while run_id in self.runs:
            run_id = f"{claim.name}-{secrets.token_hex(3)}"
        token = secrets.token_hex(16)
        self.runs[run_id] = Entry(run_id, token, claim, arrival_s=now, seen_s=now, progress=progress or Progress())
        try:
            self.divide(now)
        except Exception as err:  # a claim the division cannot take changes nothing
            del self.runs[run_id]
            self.divide(now)
            raise Refused(f"the claim could not be divided: {err!r}") from None
        self._note(now, f"{run_id} registered ({claim.kind} of {claim.owner or 'no owner'}, "
                        f"priority {claim.priority})")
        return run_id, token, self.runs[run_id].budget

    def update(self, run_id: str, token: str, progress: Progress, now: float) -> Budget:
        """A heartbeat: record ``progress`` and return the run's budget (re-divided at most every ``rebalance_s``)."""
        entry = self._own(run_id, token)
        check_progress(progress)
        self._measure(entry, progress, now)
        self.expire(now)
        if now - self.divided_s >= self.rebalance_s:
            self.divide(now)
        return entry.budget

    def leave(self, run_id: str, token: str, now: float) -> None:
        """The run ended: its budget goes to the others."""
        self._own(run_id, token)
        del self.runs[run_id]
        self._note(now, f"{run_id} left")
        self.divide(now)

    def expire(self, now: float) -> list[str]:
        """Remove runs silent for ``lapse_s`` (their drivers died); returns their ids."""
        gone = [r for r, e in self.runs.items() if now - e.seen_s > self.lapse_s]
        for run_id in gone:
            del self.runs[run_id]
            self._note(now, f"{run_id} removed: no heartbeat for {self.lapse_s:g} s")
        if gone:
            self.divide(now)
        return gone

    def resize(self, cpus: float, gpus: float, now: float) -> None:
        """The cluster changed (nodes came or went)."""
        if (cpus, gpus) != (self.cpus, self.gpus):
            self.cpus, self.gpus = cpus, gpus
            self._note(now, f"cluster now {cpus:g} CPUs, {gpus:g} GPUs")
            self.divide(now)

    def divide(self, now: float) -> None:
        """Give every run its budget (see :func:`~trident.jobs.arbiter.divide.divide`)."""
        self.divided_s = now
        shares = [Share(run_id=e.run_id, claim=e.claim, arrival_s=e.arrival_s, remaining_s=e.remaining_s(),
                        rewarm_s=e.progress.rewarm_s, held=e.budget, rows_left=e.rows_left(),
                        cost=e.cost, idle=e.progress.idle, slowdown=e.slowdown(now))
                  for e in self.runs.values()]
        budgets = divide(shares, cpus=self.cpus, gpus=self.gpus, policy=self._order, preemption=self.preemption,
                         quotas=self.quotas, payoff_s=self.payoff_s, now=now, seed=self.seed,
                         max_slowdown=self.max_slowdown)
        for run_id, budget in budgets.items():
            entry = self.runs[run_id]
            was = entry.budget
            if was is None or (budget.cpus, budget.gpus, budget.rank) != (was.cpus, was.gpus, was.rank):
                self._note(now, f"{run_id}: {budget.describe()} ({budget.reason})")
            entry.budget = budget

    def status(self, now: float) -> dict:
        """What ``trident status`` prints: the cluster, every run (rank order) and the last decisions."""
        rows = []
        for e in sorted(self.runs.values(), key=lambda e: e.budget.rank if e.budget else 0):
            left = e.remaining_s()
            budget = e.budget or Budget()
            rows.append(dict(run_id=e.run_id, name=e.claim.name, owner=e.claim.owner, kind=e.claim.kind,
                             priority=e.claim.priority, rank=budget.rank, budget_cpus=budget.cpus,
                             budget_gpus=budget.gpus, reason=budget.reason,
                             rows_done=e.progress.rows_done, rows_total=e.progress.rows_total,
                             rate=e.rate, remaining_s=left, slowdown=e.slowdown(now), age_s=now - e.arrival_s,
                             seen_s_ago=now - e.seen_s))
        return dict(cpus=self.cpus, gpus=self.gpus, policy=self.policy, preemption=self.preemption,
                    runs=rows, decisions=list(self.decisions)[-20:])

    def _own(self, run_id: str, token: str) -> Entry:
        entry = self.runs.get(run_id)
        if entry is None:
            raise Refused(f"unknown run {run_id!r} (removed after {self.lapse_s:g} s without a heartbeat, "
                          "or the arbiter restarted): register again")
        if not isinstance(token, str) or not secrets.compare_digest(token.encode(), entry.token.encode()):
            raise Refused(f"wrong token for run {run_id!r}: a run changes only its own registration")
        return entry

    def _measure(self, entry: Entry, progress: Progress, now: float) -> None:
        entry.seen_s = now
        if progress.execution != entry.progress.execution:  # a new execution of the run: start again
            entry.points.clear()
            entry.rate = entry.cost = entry.first_rows_s = None
        if progress.rows_done is not None:
            points = entry.points
            points.append((now, progress.rows_done, self._share(entry.budget, entry.claim)))
            while len(points) > 2 and now - points[1][0] >= RATE_WINDOW_S:
                points.popleft()
            (t0, r0, _), (t1, r1, _) = points[0], points[-1]
            if t1 - t0 >= RATE_MIN_SPAN_S:
                entry.rate = max(0.0, r1 - r0) / (t1 - t0)
            moving = [p for p in points if p[1] > 0]  # from its first rows on: the pipeline's fill is no cost
            if moving and t1 - moving[0][0] >= RATE_MIN_SPAN_S and r1 > moving[0][1]:
                held = sum(p[2] for p in moving) / len(moving)
                cost = held * (t1 - moving[0][0]) / (r1 - moving[0][1])
                if cost > 0:
                    entry.cost = cost if entry.cost is None else min(entry.cost, cost)
            if progress.rows_done > 0 and entry.first_rows_s is None:
                entry.first_rows_s = now
        entry.progress = replace(progress, rewarm_s=progress.rewarm_s if progress.rewarm_s is not None
                                 else entry.progress.rewarm_s)

    def _share(self, budget: Budget | None, claim: Claim) -> float:
        """The share of the cluster a run holds under ``budget``: its larger share of CPUs or GPUs, each
        at least its claim's floor (1: no cap). A pipeline's least actors run whatever its budget says:
        one budgeted nothing still makes rows on its floor, and a share of 0 would make its cost 0 and
        its time left unknown for the rest of its run."""
        if budget is None or (budget.cpus is None and budget.gpus is None):
            return 1.0
        shares = [max(b, floor) / total for b, floor, total in ((budget.cpus, claim.min_cpus, self.cpus),
                                                               (budget.gpus, claim.min_gpus, self.gpus))
                  if b is not None and total > 0]
        return max(shares, default=1.0)

    def _note(self, now: float, text: str) -> None:
        self.decisions.append((round(now, 3), text))
