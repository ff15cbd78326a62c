"""Actor processes read now, from outside: the unique-set size of a pool's actors that run a task,
of each actor as it comes up (its memory at rest), the CPU time of a pool's actors, and the busy
time of this machine's cores.

Ray Data reports a task's peak memory only when the task finishes (``MemoryProfiler`` in the
worker): a pool whose first task runs for 6 s has no memory reading for 6 s, and a memory-bound
plan cannot grow it. Here the driver reads the same measure (RSS minus shared, as
``MemoryProfiler`` computes it) of every actor that has a task in flight, at each snapshot. It
sees processes on this machine only (an actor on another node has no reading); a reading taken
mid-task is a lower bound of that task's peak (the planner keeps its memory margin until finished
tasks confirm it). An actor read as it comes up (Ray Data marks it running before it hands it a
task) holds what its constructor left, its model for one: a part of a replica's memory that does
not grow with the batch.

Ray schedules on logical CPUs and GPUs; the work runs on the machine's cores. A pool's CPU time
(:meth:`ActorProcesses.pool_cpu_s`) and the cores' busy time (:func:`host_cpu`) tell the planner
whether another replica would get a core of its own (:mod:`trident.autoscaler.policies.trident.cores`).
"This machine": the actor's node has the driver's IP address (the nodes of a
``ray.cluster_utils.Cluster`` share one). Executor thread only.
"""
from __future__ import annotations

from typing import Any

REMOTE = -1
"""The process id kept for an actor on another machine (never read)."""


def uss(proc: Any) -> int:
    """A ``psutil.Process``'s memory in bytes: resident less shared, as Ray Data's
    ``MemoryProfiler`` measures a worker's (raises if the process left)."""
    info = proc.memory_info()
    return int(info.rss - getattr(info, "shared", 0))


def host_cpu() -> tuple[int | None, float | None]:
    """This machine's cores and the core-seconds they have been busy since boot (everything but
    idle and I/O wait); ``(None, None)`` without psutil."""
    try:
        import psutil
    except ImportError:
        return None, None
    t = psutil.cpu_times()
    busy = sum(t) - t.idle - getattr(t, "iowait", 0.0)
    return psutil.cpu_count() or None, float(busy)


class ActorProcesses:
    """Process ids of actors on this machine (asked once per actor), their memory and CPU time."""

    def __init__(self) -> None:
        self._pids: dict[str, int] = {}
        self._cpu_last: dict[str, float] = {}
        """CPU seconds of each actor at its last reading."""
        self._pool_cpu: dict[int, float] = {}
        """CPU seconds of each pool's actors since each was first read (by the pool's ``id``)."""
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
        proc = self._process(actor)
        if proc is None:
            return None
        try:
            return uss(proc)
        except Exception:  # noqa: BLE001 - the process left (psutil.NoSuchProcess): no reading
            return None

    def pool_cpu_s(self, pool: Any) -> float | None:
        """CPU seconds (user + system) ``pool``'s running actors used, each counted from its first
        reading (a constructor's model load is not the work); ``None`` when an actor runs on
        another machine (the pool's CPU time cannot be known) or psutil is missing."""
        if not self._enabled:
            return None
        total = self._pool_cpu.get(id(pool), 0.0)
        for actor in list(pool._running_actors):
            key = actor._actor_id.hex()
            proc = self._process(actor)
            if self._pids.get(key) == REMOTE:
                return None
            if proc is None:
                continue
            try:
                t = proc.cpu_times()
            except Exception:  # noqa: BLE001 - the process left (psutil.NoSuchProcess)
                continue
            now = t.user + t.system
            total += max(0.0, now - self._cpu_last.get(key, now))
            self._cpu_last[key] = now
        self._pool_cpu[id(pool)] = total
        return total

    def _process(self, actor: Any) -> Any:
        """``actor``'s ``psutil.Process`` on this machine, or ``None``."""
        if not self._enabled:
            return None
        import psutil

        pid = self._pid(actor)
        if pid is None or pid == REMOTE:
            return None
        try:
            return psutil.Process(pid)
        except (psutil.Error, OSError):
            self._pids.pop(actor._actor_id.hex(), None)  # restarted: a new process id
            return None

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
            self._pids[key] = int(info["Pid"]) if local else REMOTE  # another machine: never read
        return self._pids[key]
