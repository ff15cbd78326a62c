"""A :class:`~trident.JobScheduler`'s running jobs at the cluster's arbiter.

Each running job (not its pipelines: the scheduler gives those their budgets) is a run of kind
``training`` whose claim is what it runs on (its GPUs and CPUs, least and most alike): the arbiter
counts it as held and divides what is left between the pipelines of every driver, so none plans
onto GPUs a training job holds. A daemon thread registers a job that starts, sends a heartbeat for
each one running every ``heartbeat_s``, and leaves for each one that ended or was preempted. Where
no arbiter runs, the scheduler starts it once another driver shares the cluster (as a pipeline's
link does); one that cannot be reached is said once and the jobs run as they would without it.
"""
from __future__ import annotations

import threading
import time
import warnings
from typing import Any, Callable

from trident.jobs.arbiter.divide import Budget
from trident.jobs.arbiter.link import CALL_TIMEOUT_S, CREATE_AFTER_S, LEAVE_TIMEOUT_S, _find, _shared, _user
from trident.jobs.arbiter.state import Claim, Progress, Refused


def claim_of_job(job: Any, *, owner: str) -> Claim:
    """A running job's claim: the GPUs and CPUs it was started with, held whole."""
    return Claim(name=job.job_id, owner=owner, kind="training", priority=int(job.priority),
                 min_cpus=float(job.cpus), min_gpus=float(job.num_gpus),
                 max_cpus=float(job.cpus), max_gpus=float(job.num_gpus))


class JobSeats:
    """The seats of one scheduler's running jobs, kept by a daemon thread."""

    def __init__(self, *, owner: str | None = None, heartbeat_s: float = 1.0,
                 now: Callable[[], float] | None = None) -> None:
        self.owner = owner if owner is not None else _user()
        self.heartbeat_s = heartbeat_s
        self.handle: Any = None
        self.budgets: dict[str, Budget] = {}
        """Job id -> the budget the arbiter last gave it (what the arbiter counts it as holding)."""
        self.events: list[tuple[float, str]] = []
        """(``now()``, what happened); a refusal and an arbiter that does not answer are also warned."""
        self._want: dict[str, Claim] = {}
        self._seats: dict[str, tuple[str, str, Claim]] = {}
        self._refused: dict[str, Claim] = {}
        """Job id -> the claim the arbiter refused (not sent again while the job runs on it)."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._now = now or (lambda: time.monotonic() - self._t0)
        self._quiet = False
        self._thread = threading.Thread(target=self._main, name="trident-job-seats", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def hold(self, jobs: list[Any]) -> None:
        """The jobs running now (:class:`~trident.jobs.base.Job`): each keeps a seat while it runs."""
        want = {j.job_id: claim_of_job(j, owner=self.owner) for j in jobs}
        with self._lock:
            self._want = want

    def stop(self) -> None:
        """Leave for every job still seated and end the thread."""
        self._stop.set()
        self._thread.join(timeout=LEAVE_TIMEOUT_S * (len(self._seats) + 1) + self.heartbeat_s)

    def _main(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                self._beat()
                self._quiet = False
            except Exception as err:  # unreachable or timed out: the jobs run on; said once
                if not self._quiet:
                    self._say(f"the arbiter did not answer ({err!r}); the jobs run on", warn=True)
                self._quiet = True
        with self._lock:
            self._want = {}
        try:
            self._sync()
        except Exception:  # seats not left lapse on their own
            pass

    def _beat(self) -> None:
        if self.handle is None:
            self.handle = _find()
            if self.handle is None:
                shared = _shared()
                if not (shared or (shared is None and time.monotonic() - self._t0 >= CREATE_AFTER_S)):
                    return  # the only driver on the cluster: no arbiter is needed yet
                from trident.jobs.arbiter.actor import start

                self.handle = start()
        self._sync()

    def _sync(self) -> None:
        """Leave for the jobs no longer running (or running on other resources), register the new
        ones, and send a heartbeat for the others."""
        import ray

        if self.handle is None:
            return
        with self._lock:
            want = dict(self._want)
        self._refused = {j: c for j, c in self._refused.items() if want.get(j) == c}
        for job_id, (run_id, token, claim) in list(self._seats.items()):
            if want.get(job_id) != claim:
                del self._seats[job_id]
                self.budgets.pop(job_id, None)
                ray.get(self.handle.leave.remote(run_id, token), timeout=LEAVE_TIMEOUT_S)
        for job_id, claim in want.items():
            seat = self._seats.get(job_id)
            if seat is None and self._refused.get(job_id) == claim:
                continue
            try:
                if seat is None:
                    run_id, token, budget = ray.get(self.handle.register.remote(claim, Progress()),
                                                    timeout=CALL_TIMEOUT_S)
                    self._seats[job_id] = (run_id, token, claim)
                    self._say(f"{job_id} joined the arbiter as {run_id} ({claim.min_gpus:g} GPUs, "
                              f"{claim.min_cpus:g} CPUs held)")
                else:
                    budget = ray.get(self.handle.update.remote(seat[0], seat[1], Progress()), timeout=CALL_TIMEOUT_S)
            except Refused as err:
                why = getattr(err, "cause", err)  # raised in the actor: Ray wraps it, ``cause`` is ours
                if seat is None:  # the arbiter will not seat this job: it runs without a seat
                    self._refused[job_id] = claim
                    self._say(f"{job_id}: the arbiter refused it ({why}); it runs without a seat", warn=True)
                else:  # the arbiter restarted and lost the seat: registered again next beat
                    del self._seats[job_id]
                    self._say(f"{job_id}: {why}; registering again")
                continue
            self.budgets[job_id] = budget

    def _say(self, text: str, *, warn: bool = False) -> None:
        self.events.append((self._now(), text))
        if warn:
            warnings.warn(text, RuntimeWarning, stacklevel=2)
