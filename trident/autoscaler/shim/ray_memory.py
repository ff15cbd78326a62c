"""Memory Ray's own processes hold on the driver's machine beside the pipeline's workers.

A node's or container's memory limit binds every process on it: the raylet, the GCS, Ray's
agents and system actors (``_StatsActor``, the autoscaling coordinator), idle workers kept for
reuse, trident's controller, and the workers that run the pipeline's task operators (a video
decode task holds 0.2-0.3 GiB, and its worker keeps most of it once idle). On a local Ray they
hold 0.4-1.3 GiB, up to half of a 2.75 GiB limit. The planner counts the actor pools' heap
against the limit; this is the rest, read from outside (resident less shared, the measure the
pools' heap is read in), so that the pools get only what is left. Executor thread only.
"""
from __future__ import annotations

import os
from typing import Iterable

from trident.autoscaler.shim.actor_processes import uss
from trident.core.types import OperatorSnapshot

DAEMONS = ("raylet", "gcs_server")
"""Ray's native daemons, by process name."""


def other_memory_bytes(processes: Iterable[tuple[str, int]], pools: Iterable[str]) -> int:
    """Bytes of the ``(title, memory)`` processes that run none of the actor pools named in
    ``pools`` (a worker's title names the operator it runs, e.g.
    ``ray::MapWorker(MapBatches(Embed)).submit`` or ``ray::MapBatches(decode)``; an idle one is
    ``ray::IDLE``)."""
    names = [n for n in pools if n]
    return sum(mem for title, mem in processes if not any(n in title for n in names))


def pool_names(operators: Iterable[OperatorSnapshot]) -> list[str]:
    """The actor pools' names as their workers' titles give them (``MapBatches(Embed)`` of
    ``MapBatches(Embed)#2``): a task operator's workers are not planned as heap, so they count."""
    return [o.name.split("#")[0] for o in operators if o.config.kind == "actor"]


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

    def read(self, time_s: float, operators: Iterable[OperatorSnapshot]) -> int | None:
        if self._at_s is None or time_s - self._at_s >= self.every_s:
            self._at_s = time_s
            procs = ray_processes(self.driver_pid)
            if procs:
                self.most = max(self.most or 0, other_memory_bytes(procs, pool_names(operators)))
        return self.most
