"""Worker memory sampled now, from outside: the unique-set size of a pool's actors that run a task,
and of each actor as it comes up, before its first task (its memory at rest).

Ray Data reports a task's peak memory only when the task finishes (``MemoryProfiler`` in the
worker): a pool whose first task runs for 6 s has no memory reading for 6 s, and a memory-bound
plan cannot grow it. Here the driver reads the same measure (RSS minus shared, as
``MemoryProfiler`` computes it) of every actor that has a task in flight, at each snapshot. It
sees processes on this machine only (an actor on another node has no reading); a reading taken
mid-task is a lower bound of that task's peak (the planner keeps its memory margin until finished
tasks confirm it). An actor read as it comes up (Ray Data marks it running before it hands it a
task) holds what its constructor left, its model for one: a part of a replica's memory that does
not grow with the batch. "This machine": the actor's node has the driver's IP address (the nodes
of a ``ray.cluster_utils.Cluster`` share one). Executor thread only.
"""
from __future__ import annotations

from typing import Any


class LiveMemory:
    """Process ids of actors on this machine (asked once per actor), their memory on demand."""

    def __init__(self) -> None:
        self._pids: dict[str, int | None] = {}
        self._ip: str | None = None
        self._enabled = True
        try:
            import psutil  # noqa: F401 (without it, finished tasks only)
            import ray

            self._ip = ray.util.get_node_ip_address()
        except Exception:  # not in a Ray driver, or no psutil: finished tasks only
            self._enabled = False

    def max_task_uss(self, pool: Any, exclude: set | frozenset = frozenset()) -> int | None:
        """Largest memory (bytes) of ``pool``'s running actors with a task in flight on this
        machine, ``exclude`` left out; ``None`` when none could be read."""
        readings = [self.uss_of(actor) for actor, state in list(pool._running_actors.items())
                    if state.num_tasks_in_flight > 0 and actor not in exclude]
        return max((r for r in readings if r is not None), default=None)

    def uss_of(self, actor: Any) -> int | None:
        """Memory (bytes: resident less shared, as Ray Data's ``MemoryProfiler`` measures it) of
        ``actor``'s process now; ``None`` on another machine or when it cannot be read."""
        if not self._enabled:
            return None
        import psutil

        pid = self._pid(actor)
        if pid is None:
            return None
        try:
            info = psutil.Process(pid).memory_info()
        except (psutil.Error, OSError):
            self._pids.pop(actor._actor_id.hex(), None)  # restarted: a new process id
            return None
        return int(info.rss - getattr(info, "shared", 0))

    def _pid(self, actor: Any) -> int | None:
        key = actor._actor_id.hex()
        if key not in self._pids:
            try:
                import ray._private.state as state

                info = state.actors(actor_id=key)
            except Exception:
                return None
            if info.get("State") != "ALIVE" or not info.get("Pid"):
                return None  # not alive yet: ask again next time
            local = (info.get("Address") or {}).get("IPAddress") == self._ip
            self._pids[key] = int(info["Pid"]) if local else None  # another machine: never read
        return self._pids[key]
