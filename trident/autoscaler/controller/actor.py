"""The controller: one Ray actor per run around the pure :class:`ControlLoop`, and the client
the shim uses from Ray Data's executor thread.

The client never blocks: it sends each snapshot with a fire-and-forget ``.remote()`` and
collects finished answers with ``ray.wait(timeout=0)``. If the actor dies (or stops
answering for ``timeout_s``; ``startup_timeout_s`` before its first answer, since a new
actor may wait for a worker process), the client reports the failure once, with when and
why, and the shim hands the execution back to stock Ray Data.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from trident.autoscaler.controller.loop import ControlLoop
from trident.core.policy import PolicyContext
from trident.core.types import Decision, Snapshot


class Controller:
    """Holds one ControlLoop per execution (two datasets running at once never share policy state)."""

    def __init__(self, *, policy: Any, context: PolicyContext) -> None:
        self.reset(policy=policy, context=context)

    def _warm(self, decision: Decision) -> None:
        """Once per controller process, after the first decision that tries a batch size (one
        measured batch size needs no model fit; the next trial does), import the batch-size
        search's GP stack and fit its models in a background thread, so that the next trial is
        not late by seconds of imports. The thread runs at the process's own priority: a thread
        at a lower one held Python's GIL and import locks while the pipeline's starting actors
        kept it off the CPU, and the control step waited on it (the first trial of the
        batch-size scenario reached the shim 13-24 s after its snapshot; a 0.3 s loop of the step
        took 4-6 s beside such a thread and six busy processes, 1.2 s beside one at its own
        priority). While it runs, the search defers any fit (``safe_bo.ModelLoading``)."""
        if getattr(self, "_warmed", False) or decision.plan is None or not any(
                t.batch_size is not None for t in decision.plan.targets):
            return
        from trident.core.optimize.safe_bo import warm_up

        self._warmed = True
        threading.Thread(target=warm_up, name="trident-warm-up", daemon=True).start()

    def reset(self, *, policy: Any, context: PolicyContext) -> None:
        """Start over for a new run (an idle controller actor is reused rather than restarted)."""
        self.policy = policy
        self.context = context
        self.loops: dict[str, ControlLoop] = {}
        self.priors: dict[str, tuple] = {}
        if not hasattr(self, "metrics"):  # one set of series per controller process, kept across runs
            from trident.report.metrics import ControllerMetrics

            try:
                self.metrics: ControllerMetrics | None = ControllerMetrics()
            except Exception:  # noqa: BLE001 - no metrics agent: control works without the view
                self.metrics = None
        elif self.metrics is not None:
            self.metrics.targets.clear()  # the last run's executions are over

    def node_id(self) -> str:
        """The Ray node this controller runs on."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def begin(self, execution_id: str, priors: tuple) -> None:
        """What earlier runs taught of ``execution_id``'s operators, for its policy (sent before
        its first snapshot: an actor runs one caller's calls in the order they were made)."""
        self.priors[execution_id] = tuple(priors)

    def step(self, snapshot: Snapshot, now: float) -> Decision:
        """One control step of ``snapshot``'s execution, with the CPU time it took
        (:attr:`Decision.cpu_s`); its series go to Ray's metrics endpoint."""
        t0 = time.thread_time()
        loop = self.loops.get(snapshot.execution_id)
        if loop is None:
            ctx = replace(self.context, priors=self.priors.pop(snapshot.execution_id, ()))
            policy = self.policy if isinstance(self.policy, str) else self.policy(context=ctx)
            loop = self.loops[snapshot.execution_id] = ControlLoop(policy=policy, context=ctx)
        decision = loop.step(snapshot, now)
        self._warm(decision)
        if self.metrics is not None:
            self.metrics.record(snapshot, decision, policy=getattr(loop.policy, "name", type(loop.policy).__name__),
                                memory_limit_bytes=self.context.memory_limit_bytes)
        return replace(decision, cpu_s=time.thread_time() - t0)


@dataclass(frozen=True)
class ControllerFailure:
    """When (seconds since the run began) and why the controller stopped answering."""

    time_s: float
    reason: str


REUSE_TIMEOUT_S = 2.0
_idle_lock = threading.Lock()
_idle: list[tuple[tuple[str, str], Any]] = []


def _cluster_key() -> tuple[str, str]:
    import ray

    ctx = ray.get_runtime_context()
    return ctx.get_job_id(), ctx.get_node_id()


def acquire_controller(*, policy: Any, context: PolicyContext) -> Any:
    """A controller actor for one run: an idle one of this Ray session, reset, or a new one.

    A new actor needs a worker process (seconds of CPU on a small machine); reusing an idle
    one keeps that cost off every run but the first. No CPU or GPU is reserved: the
    controller must never take a pipeline's slot. It is pinned to the driver's node, so a
    worker node's death never takes it away.
    """
    import ray

    key = _cluster_key()
    while True:
        with _idle_lock:
            if not _idle:
                break
            idle_key, handle = _idle.pop()
        if idle_key != key:
            continue
        try:  # a controller may have died while idle; ask it to start over, briefly
            ray.get(handle.reset.remote(policy=policy, context=context), timeout=REUSE_TIMEOUT_S)
            return handle
        except Exception:
            continue
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    actor_cls = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=1)(Controller)
    here = NodeAffinitySchedulingStrategy(node_id=key[1], soft=False)  # dies only with the driver's node
    return actor_cls.options(scheduling_strategy=here).remote(policy=policy, context=context)


def release_controller(handle: Any) -> None:
    """Keep a healthy controller for the next run of this Ray session."""
    with _idle_lock:
        _idle.append((_cluster_key(), handle))


def describe_failure(exc: BaseException) -> str:
    """One plain line for a controller failure: the error raised inside the actor when there
    is one (not Ray's coloured traceback around it), else Ray's own error."""
    cause = getattr(exc, "cause", None)
    err = cause if isinstance(cause, BaseException) else exc
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}: {text}".rstrip(": ")


class ControllerClient:
    """Non-blocking access to a controller actor for one execution."""

    def __init__(self, handle: Any, *, timeout_s: float, clock_origin_s: float, startup_timeout_s: float = 120.0) -> None:
        self.handle = handle
        self.timeout_s = timeout_s
        self.startup_timeout_s = max(startup_timeout_s, timeout_s)
        self.answered = False
        self.clock_origin_s = clock_origin_s
        self._pending: dict[Any, float] = {}
        self.failure: ControllerFailure | None = None

    def begin(self, execution_id: str, priors: tuple) -> None:
        """Fire and forget: hand the controller what earlier runs taught (:meth:`Controller.begin`)."""
        if self.failure is None and priors:
            try:
                self.handle.begin.remote(execution_id, priors)
            except Exception as exc:  # a dead handle can raise on submit
                self._fail(f"submitting the history failed: {type(exc).__name__}: {exc}")

    def send(self, snapshot: Snapshot) -> None:
        """Fire and forget: ask the controller to step on ``snapshot``."""
        if self.failure is not None:
            return
        try:
            ref = self.handle.step.remote(snapshot, snapshot.time_s)
        except Exception as exc:  # a dead handle can raise on submit
            self._fail(f"submitting a snapshot failed: {type(exc).__name__}: {exc}")
            return
        self._pending[ref] = time.perf_counter()

    def poll(self) -> list[Decision]:
        """Decisions that arrived since the last poll, oldest first; never waits."""
        if self.failure is not None or not self._pending:
            return []
        import ray

        refs = list(self._pending)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=True)
        decisions: list[Decision] = []
        for ref in refs:  # submission order
            if ref not in ready:
                continue
            self._pending.pop(ref)
            try:
                decisions.append(ray.get(ref, timeout=0))
                self.answered = True
            except Exception as exc:
                self._fail(describe_failure(exc))
                return decisions
        if self._pending:
            limit_s = self.timeout_s if self.answered else self.startup_timeout_s
            if time.perf_counter() - min(self._pending.values()) > limit_s:
                self._fail(f"no answer for {limit_s:.0f} s" + ("" if self.answered else " (never started)"))
        return decisions

    def _fail(self, reason: str) -> None:
        if self.failure is None:
            self.failure = ControllerFailure(time_s=time.perf_counter() - self.clock_origin_s, reason=reason)
        self._pending.clear()
