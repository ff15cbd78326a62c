"""Memory Ray's own processes hold on the driver's machine beside the pipeline's workers.

A node's or container's memory limit binds every process on it: the raylet, the GCS, Ray's
agents and system actors (``_StatsActor``, the autoscaling coordinator), idle workers kept for
reuse, trident's controller. On a local Ray they hold ~0.4-0.6 GiB, a sixth of a 3 GiB limit.
The planner counts the pipeline's workers' heap against the limit; this is the rest, read from
outside (resident less shared, the measure the workers' heap is read in), so that the workers
get only what is left. Executor thread only.
"""
from __future__ import annotations

import os
from typing import Iterable

from trident.autoscaler.shim.actor_processes import uss

DAEMONS = ("raylet", "gcs_server")
"""Ray's native daemons, by process name."""


def other_memory_bytes(processes: Iterable[tuple[str, int]], pipeline: Iterable[str]) -> int:
    """Bytes of the ``(title, memory)`` processes that run none of the operators named in
    ``pipeline`` (a worker's title names the operators it runs, e.g.
    ``ray::MapWorker(MapBatches(Embed)).submit``; an idle one is ``ray::IDLE``)."""
    names = [n for n in pipeline if n]
    return sum(mem for title, mem in processes if not any(n in title for n in names))


def ray_processes(driver_pid: int) -> list[tuple[str, int]]:
    """``(title, bytes)`` of Ray's processes on this machine: its daemons, every ``ray::`` worker,
    and the helpers the driver ``driver_pid`` started (log monitor); ``[]`` without psutil."""
    try:
        import psutil
    except ImportError:
        return []
    out = []
    for p in psutil.process_iter(["pid", "ppid", "name", "cmdline"]):
        try:
            cmd = p.info["cmdline"] or []
            title = " ".join(cmd)
            ours = (p.info["name"] in DAEMONS or title.startswith("ray::")
                    or (p.info["ppid"] == driver_pid and "/ray/" in title))
            if ours and p.info["pid"] != driver_pid:
                out.append((title, uss(p)))
        except Exception:  # noqa: BLE001 - the process left or cannot be read
            continue
    return out


class RayMemory:
    """The most :func:`other_memory_bytes` has read so far in one execution (a worker kept idle
    comes back; a plan sized to a lull would not fit the next peak), re-read every ``every_s``."""

    def __init__(self, *, every_s: float = 2.0) -> None:
        self.every_s, self.driver_pid = every_s, os.getpid()
        self._at_s: float | None = None
        self.most: int | None = None

    def read(self, time_s: float, pipeline: Iterable[str]) -> int | None:
        if self._at_s is None or time_s - self._at_s >= self.every_s:
            self._at_s = time_s
            procs = ray_processes(self.driver_pid)
            if procs:
                self.most = max(self.most or 0, other_memory_bytes(procs, pipeline))
        return self.most
