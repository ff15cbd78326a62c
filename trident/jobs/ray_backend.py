"""The job scheduler's edge to Ray: start, stop and watch job attempts.

A plain callable runs as a Ray task. A *trainable* (a class with ``setup``, ``step``,
``checkpoint`` and ``restore``, see :func:`is_trainable`) runs in a Ray actor that
reports when its setup is over (the observed setup time) and, when preempted, saves a
checkpoint and exits; the next attempt restores it and keeps its progress. Every
attempt is pinned to the node the placer chose (``NodeAffinitySchedulingStrategy``).
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from trident.jobs.base import Node
from trident.jobs.cluster_view import ray_gpu_nodes

KILL_WAIT_S = 30.0
"""How long a cancelled or preempted attempt is given to exit (its GPUs are free after)."""
SAVE_WAIT_S = 30.0
"""How long a preempted trainable is given to save its checkpoint before it is killed."""

_TRAINABLE_METHODS = ("setup", "step", "checkpoint", "restore")


def is_trainable(fn: Any) -> bool:
    """A class with ``setup()``, ``step() -> bool`` (True when finished), ``checkpoint() -> state``
    and ``restore(state)`` (``result()`` is optional): run it with checkpoint/restore."""
    return isinstance(fn, type) and all(callable(getattr(fn, m, None)) for m in _TRAINABLE_METHODS)


def _run_job(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """The Ray task of every plain job (a wrapper, so builtins and callables of any kind run)."""
    return fn(*args, **kwargs)


class TrainableRunner:
    """Ray actor running one attempt of a trainable: ``setup()`` (and ``restore`` of the last
    checkpoint), then ``step()`` until it returns True or the attempt is asked to stop."""

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._stop = threading.Event()

    def run(self, cls: type, args: tuple, kwargs: dict, state: Any) -> tuple[str, Any]:
        """("done", result) when finished, ("preempted", checkpoint) when asked to stop."""
        job = cls(*args, **kwargs)
        job.setup()
        if state is not None:
            job.restore(state)
        self._ready.set()
        while not job.step():
            if self._stop.is_set():
                return "preempted", job.checkpoint()
        result = getattr(job, "result", None)
        return "done", result() if callable(result) else None

    def ready(self) -> bool:
        """Returns once setup (and restore) is over."""
        self._ready.wait()
        return True

    def stop(self) -> None:
        self._stop.set()


@dataclass
class Attempt:
    """One running attempt: the ref of its outcome; for a trainable, its actor and the ref
    that resolves when its setup is over."""

    ref: Any
    actor: Any = None
    ready_ref: Any = None


class RayBackend:
    """Starts, stops and watches attempts on the connected Ray cluster."""

    def __init__(self) -> None:
        import ray

        self.ray = ray
        self._task: Any = None
        self._actor: Any = None

    def nodes(self) -> list[Node]:
        return ray_gpu_nodes(self.ray)

    def launch(self, fn: Any, args: tuple, kwargs: dict, *, name: str, num_gpus: float, num_cpus: float,
               node_id: str, state: Any = None) -> Attempt:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        where = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
        if is_trainable(fn):
            if self._actor is None:
                self._actor = self.ray.remote(max_concurrency=3)(TrainableRunner)
            actor = self._actor.options(num_gpus=num_gpus, num_cpus=num_cpus, max_restarts=0,
                                        scheduling_strategy=where).remote()
            return Attempt(ref=actor.run.remote(fn, args, kwargs, state), actor=actor, ready_ref=actor.ready.remote())
        if self._task is None:
            self._task = self.ray.remote(_run_job)
        task = self._task.options(num_gpus=num_gpus, num_cpus=num_cpus, max_retries=0, name=name,
                                  scheduling_strategy=where)
        return Attempt(ref=task.remote(fn, args, kwargs))

    def launch_pipeline(self, fn: Any, args: tuple, kwargs: dict, *, name: str, budget_gpus: float,
                        autoscale: dict) -> Any:
        """Run a pipeline in a driver thread (see :class:`~trident.jobs.pipelines.PipelineRun`)."""
        from trident.jobs.pipelines import PipelineRun

        return PipelineRun(fn, args, kwargs, name=name, budget_gpus=budget_gpus, autoscale=autoscale)

    def wait(self, refs: Sequence[Any], timeout_s: float) -> list[Any]:
        """The refs (Ray object refs, or pipelines' futures) of ``refs`` that are ready within
        ``timeout_s`` (sleeps when there are none)."""
        futures = [r for r in refs if isinstance(r, Future)]
        objects = [r for r in refs if not isinstance(r, Future)]
        if objects:
            ready, _ = self.ray.wait(objects, num_returns=len(objects), timeout=timeout_s)
        else:
            ready = []
            wait_futures(futures, timeout=timeout_s, return_when=FIRST_COMPLETED) if futures else time.sleep(timeout_s)
        return ready + [f for f in futures if f.done()]

    def get(self, ref: Any) -> Any:
        return ref.result() if isinstance(ref, Future) else self.ray.get(ref)

    def save(self, attempt: Attempt) -> tuple[str, Any] | None:
        """Ask a trainable attempt to checkpoint and stop: its ("done" | "preempted", value),
        or ``None`` when it did not answer in time (it is killed by :meth:`kill` then)."""
        try:
            attempt.actor.stop.remote()
            return self.ray.get(attempt.ref, timeout=SAVE_WAIT_S)
        except Exception:
            return None

    def kill(self, attempts: Sequence[Attempt], *, wait: bool = True) -> None:
        """Stop ``attempts`` at once (workers killed); with ``wait``, until they are gone."""
        refs = [a.ref for a in attempts if not isinstance(a.ref, Future)]
        for a in attempts:
            try:
                if a.actor is not None:
                    self.ray.kill(a.actor, no_restart=True)
                else:
                    self.ray.cancel(a.ref, force=True)
            except Exception:  # the attempt already ended, or its node is gone
                pass
        if wait and refs:
            self.ray.wait(refs, num_returns=len(refs), timeout=KILL_WAIT_S)

    def node_lost(self, exc: BaseException, node_id: str) -> bool:
        """Did an attempt fail because its node died (rather than by the job's own error)?"""
        from ray.exceptions import ActorDiedError, NodeDiedError, TaskUnschedulableError, WorkerCrashedError

        if isinstance(exc, (NodeDiedError, TaskUnschedulableError)):
            return True
        if isinstance(exc, (WorkerCrashedError, ActorDiedError)):
            return node_id not in {n.node_id for n in self.nodes()}
        return False
