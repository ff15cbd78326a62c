"""A run's seat at the cluster's arbiter (:mod:`trident.jobs.arbiter`).

A daemon thread of the ``trident.autoscale`` block: once the run's first snapshot is taken it
finds the arbiter (or starts it once another driver shares the cluster, ``CREATE_AFTER_S``),
registers the run (its least and most CPUs and GPUs read from
its operators), then every heartbeat sends its progress (input rows done and in all) and
applies the budget it gets back (:attr:`trident.autoscaler.api.Run.share`, which the shim
turns into Ray Data's limits). The arbiter never stops a run: one it cannot reach leaves the
run alone (said once, as a warning), one that stops answering leaves the run its last budget,
and one that restarted is registered with again.
"""
from __future__ import annotations

import getpass
import os
import sys
import threading
from dataclasses import replace
from typing import Any

from trident.core.types import Snapshot
from trident.jobs.arbiter.divide import Budget
from trident.jobs.arbiter.state import Claim, Progress, Refused
from trident.report.record import Event

CREATE_AFTER_S = 10.0
"""Where no arbiter runs, a run starts it once another driver is connected to the cluster (the
only driver never pays for the actor's start), or, where Ray cannot say, after this many seconds
of the run. Where one runs, a run joins at its first snapshot."""
CALL_TIMEOUT_S, LEAVE_TIMEOUT_S = 10.0, 2.0
"""Seconds a message to the arbiter may take before the run goes on without its answer; leaving
waits less (a run that cannot say it left lapses on its own)."""


def progress_of(snap: Snapshot, rewarm_s: float | None = None) -> Progress:
    """Input rows done and in all, in the first operator's output rows (what ``input_rows_total``
    counts): the rows the last operator has taken in, over the selectivity of the operators between."""
    ops = [o for o in snap.operators if o.config.kind != "other"]
    total = snap.input_rows_total
    if not ops or total is None:
        return Progress(rewarm_s=rewarm_s)
    last = ops[-1]
    if last.completed:
        done = float(total)
    elif len(ops) == 1:
        done = float(last.rows_out_total)
    else:
        done = float(last.rows_in_done)
        for o in ops[1:-1]:  # each operator between turns its rows in into rows out
            if o.rows_in_done and o.rows_out_total:
                done *= o.rows_in_done / o.rows_out_total
    return Progress(rows_done=min(float(total), done), rows_total=float(total), rewarm_s=rewarm_s)


def claim_of(snap: Snapshot, *, name: str, owner: str, priority: int) -> Claim:
    """The run's claim: at least each pool's ``min_size`` of actors and one task at a time (Ray Data
    runs its task operators' tasks within what it is given, one after another if need be); at
    most its pools' maximum (no bound on what a task operator may take)."""
    min_cpus = min_gpus = task_cpus = task_gpus = 0.0
    max_cpus: float | None = 0.0
    max_gpus: float | None = 0.0
    for o in snap.operators:
        c = o.config
        if c.kind == "task":
            task_cpus, task_gpus = max(task_cpus, c.num_cpus), max(task_gpus, c.num_gpus)
            max_cpus = None
            max_gpus = None if c.num_gpus > 0 else max_gpus
        elif c.kind == "actor":
            floor, most = max(c.min_replicas or 0, 1), c.max_replicas
            min_cpus += c.num_cpus * floor
            min_gpus += c.num_gpus * floor
            bounded = most is not None and most < 10**6
            max_cpus = max_cpus + c.num_cpus * most if bounded and max_cpus is not None else None
            max_gpus = max_gpus + c.num_gpus * most if bounded and max_gpus is not None else None
    cluster = snap.cluster
    return Claim(name=name, owner=owner, kind="pipeline", priority=priority,
                 min_cpus=min(min_cpus + task_cpus, cluster.cpus), min_gpus=min(min_gpus + task_gpus, cluster.gpus),
                 max_cpus=max_cpus, max_gpus=max_gpus)


def default_name() -> str:
    """The driver's script and process id, e.g. ``curate_pdfs.py:4242``."""
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    return f"{script or 'python'}:{os.getpid()}"


def join(run: Any) -> "ArbiterLink":
    """Seat ``run`` (a :class:`trident.autoscaler.api.Run`) at the cluster's arbiter: start its link.
    Its heartbeat is the run's ``interval_s``, within 0.5 to 5 s (well inside the arbiter's lapse)."""
    c = run.config
    link = ArbiterLink(run, name=c.name, owner=c.owner, priority=c.priority,
                       heartbeat_s=min(max(0.5, c.interval_s), 5.0))
    link.start()
    return link


class ArbiterLink:
    """This run's registration, kept alive by a daemon thread every ``heartbeat_s`` seconds."""

    def __init__(self, run: Any, *, name: str | None, owner: str | None, priority: int, heartbeat_s: float) -> None:
        self.run = run
        self.name = name or default_name()
        self.owner = owner if owner is not None else _user()
        self.priority = priority
        self.heartbeat_s = heartbeat_s
        self.handle: Any = None
        self.run_id: str | None = None
        self.token: str | None = None
        self._done: tuple[str, float] = ("", 0.0)
        """(execution id, most rows done reported): progress never goes back within an execution."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="trident-arbiter-link", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Leave the arbiter (the budget goes to the others) and end the thread; the run's cap is
        lifted at once (a message still in flight is not applied)."""
        self._stop.set()
        self.run.share = None
        self._thread.join(timeout=LEAVE_TIMEOUT_S + 1)

    def _main(self) -> None:
        unreachable = False
        while not self._stop.wait(self.heartbeat_s):
            latest = self._latest()
            if latest is None:
                continue
            try:
                self._beat(*latest)
                unreachable = False
            except Refused as err:
                why = getattr(err, "cause", err)  # raised in the actor: Ray wraps it, ``cause`` is ours
                if self.run_id is None:  # the arbiter will not take this run: it runs alone
                    self.run.share = None
                    self._say("arbiter_refused", f"the arbiter refused this run ({why}); it runs alone")
                    return
                self._say("arbiter", f"the arbiter lost this run ({why}); registering again")
                self.run_id = None
            except Exception as err:  # unreachable, timed out, or dead: keep the last budget
                if self.handle is None:
                    self._say("arbiter_unreachable", f"no arbiter reached ({err!r}); this run plans alone")
                    return
                if not unreachable:
                    keeps = "keeps its budget" if self.run_id is not None else "plans alone until it does"
                    self._say("arbiter", f"the arbiter did not answer ({err!r}); the run {keeps}")
                unreachable = True
        self._leave()

    def _beat(self, snap: Snapshot, idle: bool) -> None:
        import ray

        from trident.jobs.arbiter.actor import start

        if self.handle is None:
            self.handle = _find()
            if self.handle is None:
                shared = _shared()
                if not (shared or (shared is None and self.run._now_s() >= CREATE_AFTER_S)):
                    return  # the only driver on the cluster: no arbiter is needed yet
                self.handle = start()
        progress = self._progress(snap, idle)
        if self.run_id is None:
            claim = claim_of(snap, name=self.name, owner=self.owner, priority=self.priority)
            self.run_id, self.token, budget = ray.get(self.handle.register.remote(claim, progress),
                                                      timeout=CALL_TIMEOUT_S)
            self._say("arbiter", f"joined the cluster's arbiter as {self.run_id} (at least {claim.min_cpus:g} "
                                 f"CPUs, {claim.min_gpus:g} GPUs)")
        else:
            budget = ray.get(self.handle.update.remote(self.run_id, self.token, progress), timeout=CALL_TIMEOUT_S)
        self._apply(budget)

    def _progress(self, snap: Snapshot, idle: bool) -> Progress:
        """The heartbeat's progress: rows done never go back within one execution."""
        p = replace(progress_of(snap, self.run.rewarm_s), execution=snap.execution_id, idle=idle)
        if p.rows_done is not None:
            best = self._done[1] if self._done[0] == snap.execution_id else 0.0
            p = replace(p, rows_done=max(p.rows_done, best))
            self._done = (snap.execution_id, p.rows_done)
        return p

    def _apply(self, budget: Budget) -> None:
        if self._stop.is_set():  # the block ended while the message was in flight
            return
        share = None if budget.cpus is None and budget.gpus is None else budget
        was = self.run.share
        if (share and (share.cpus, share.gpus)) != (was and (was.cpus, was.gpus)):
            self._say("arbiter_budget", budget.describe() + f": {budget.reason}")
        self.run.share = share

    def _leave(self) -> None:
        if self.run_id is None or self.handle is None:
            return
        import ray

        try:
            ray.get(self.handle.leave.remote(self.run_id, self.token), timeout=LEAVE_TIMEOUT_S)
        except Exception:  # lapses on its own
            pass

    def _latest(self) -> tuple[Snapshot, bool] | None:
        """The last snapshot taken, and whether its execution has ended (the run is idle)."""
        for rec in reversed(self.run.record.executions):
            if rec.snapshots:
                return rec.snapshots[-1], rec.ended_at_s is not None
        return None

    def _say(self, kind: str, text: str) -> None:
        if self._stop.is_set():  # the block ended: its record is closed
            return
        with self.run._lock:
            self.run.record.events.append(Event(self.run._now_s(), kind, text))
        if kind in ("arbiter_refused", "arbiter_unreachable"):
            self.run._warn_once(kind, text)


def _find() -> Any:
    """The cluster's arbiter, or ``None`` when none runs (or Ray cannot say yet)."""
    from trident.jobs.arbiter.actor import find

    try:
        return find()
    except Exception:
        return None


def _shared() -> bool | None:
    """Whether another live driver is connected to the cluster (``None``: Ray cannot say)."""
    try:
        from ray._private import state

        jobs = state.jobs()
    except Exception:
        return None
    return sum(1 for j in jobs if not j.get("IsDead")) > 1


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return ""
