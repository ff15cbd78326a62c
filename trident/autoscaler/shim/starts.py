"""How many actors to start at once: a host starts actor processes on its cores.

k actors asked for together on a host of c cores share those cores while they start, so they
come up together after about k/c start times and the first of them works no sooner than the
last. Measured here (``benchmarks/actor_starts.py``: 2 cores, ``ray.init(num_cpus=12,
num_gpus=4)``, six 0.5-GPU actors that import what a Ray Data map actor imports; seconds after
the request, two invocations of two rounds): all six at once, up at 2.4-3.5 s (mean 2.6-3.1);
two at a time, the first pair at 0.7-1.2 s, the last at 2.4-4.1 s (mean 1.6-2.1); one at a time,
every 0.75-0.95 s to 4.6-5.8 s. So the shim starts at most as many actors side by side as the
cluster's hosts have cores (:func:`start_slots`), the pools with the fewest of their target's
actors first; the others wait as pending actors and start as the next slot frees. Pending actors
that do not fit beside the running ones wait for room, not for a core, and do not count
(:func:`starting`). A started actor holds its slot for :data:`SPAWN_HOLD_S`, and after that only
while the host's cores are busy (:class:`StartClock`): a constructor that waits (on a disk, the
network, a sleep) leaves the cores to the next starts, one that computes keeps them.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable

SPAWN_HOLD_S = 1.0
"""Seconds a started actor holds its start slot at least: about what one actor's process takes to
start alone on this machine (``benchmarks/actor_starts.py``: one at a time, one every 0.75-0.95 s)."""
BUSY_SHARE = 0.75
"""The share of the host's cores busy past which started actors hold their slots until they are up."""
LOAD_WINDOW_S = 0.5
"""Seconds over which the host's load is read."""


def host_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def start_slots(nodes: Iterable[dict], *, local_host: str, local_cores: int) -> int:
    """Actors the cluster starts side by side: the cores of each host its live nodes run on
    (``ray.nodes()`` records). Nodes on this process's host (``local_host``: its IP) share its
    ``local_cores`` (a ``ray.cluster_utils.Cluster`` puts every node there, whatever CPUs each
    declares); another host has as many cores as its largest node declares CPUs (Ray's default is
    one per core). At least 1."""
    hosts: dict[str, int] = {}
    for node in nodes:
        if not node.get("Alive"):
            continue
        host = node.get("NodeManagerAddress", "")
        cores = local_cores if host == local_host else int(node.get("Resources", {}).get("CPU", 0))
        hosts[host] = max(hosts.get(host, 0), cores)
    return max(1, sum(hosts.values()))


def cluster_start_slots() -> int:
    """:func:`start_slots` of the running Ray cluster."""
    import ray

    return start_slots(ray.nodes(), local_host=ray.util.get_node_ip_address(), local_cores=host_cores())


def starting(pools: Iterable[tuple[int, int, float, int]], gpus: float) -> int:
    """Pending actors that hold a start slot: of each pool's (running, pending, GPUs per actor,
    pending actors still starting), the pending actors that fit in the ``gpus`` the running ones
    leave, pool by pool, as far as they are still starting; GPU-less ones always fit."""
    pools = list(pools)
    free = gpus - sum(running * per for running, _, per, _ in pools)
    n = 0
    for _, pending, per, holding in pools:
        fit = pending if per <= 0 else min(pending, max(0, int(free / per + 1e-9)))
        free -= fit * per
        n += min(fit, holding)
    return n


class StartClock:
    """When each pool's pending actors were started, and the host's load: how many of them still
    hold a start slot (:meth:`holding`). Pending actors come up oldest first; one first seen
    pending (started by Ray's rule) counts from then."""

    def __init__(self, hold_s: float = SPAWN_HOLD_S, busy_share: float = BUSY_SHARE) -> None:
        self.hold_s, self.busy_share = hold_s, busy_share
        self.started: dict[object, list[float]] = {}
        self.busy = True
        """Whether the host's cores were busy over the last window (until read: busy)."""
        self._read: tuple[float, float | None] | None = None

    def start(self, key: object, n: int, now_s: float) -> None:
        """``n`` actors of pool ``key`` started at ``now_s``."""
        if n > 0:
            self.started.setdefault(key, []).extend([now_s] * n)

    def holding(self, key: object, pending: int, now_s: float) -> int:
        """Of pool ``key``'s ``pending`` actors, those that hold a slot: all while the host is busy,
        else those started less than ``hold_s`` ago."""
        times = self.started.setdefault(key, [])
        times[:] = [now_s] * max(0, pending - len(times)) + times[max(0, len(times) - pending):]
        return pending if self.busy else sum(now_s - t < self.hold_s for t in times)

    def read_host(self, now_s: float, read: Callable[[], tuple[int | None, float | None]]) -> None:
        """Read the host's load with ``read`` (its cores and the core-seconds they have been busy;
        ``None``: unknown, and the host counts as busy) once :data:`LOAD_WINDOW_S` has passed since
        the last reading."""
        if self._read is not None and now_s - self._read[0] < LOAD_WINDOW_S:
            return
        cores, busy_s = read()
        if cores is None or busy_s is None:
            self.busy = True
        elif self._read is not None and self._read[1] is not None:
            t0, b0 = self._read
            self.busy = (busy_s - b0) / (now_s - t0) >= self.busy_share * cores
        self._read = (now_s, busy_s)


class StartGate:
    """The starts one scheduling step may make: at most ``free()`` in all (read at the first start
    asked for: a step that starts nothing reads nothing), granted in the order asked; what was
    asked and not granted is kept per pool (``held``)."""

    def __init__(self, free: Callable[[], int]) -> None:
        self._free_of = free
        self.free: int | None = None
        self.held: dict[object, int] = {}

    def grant(self, key: object, wanted: int) -> int:
        """Starts granted to pool ``key`` of the ``wanted`` ones."""
        if wanted <= 0:
            return 0
        if self.free is None:
            self.free = max(0, self._free_of())
        n = min(wanted, self.free)
        self.free -= n
        if wanted > n:
            self.held[key] = self.held.get(key, 0) + wanted - n
        return n
