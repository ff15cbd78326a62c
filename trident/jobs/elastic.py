"""Round-based GPU allocation policies for elastic training jobs (Pollux's protocol).

Every round the policy sees the active jobs (in arrival order) and the previous
allocations, and returns the new ones: ``{job_id: (node index, ...)}``, one entry per
GPU. Pure: the round's time is passed in, nothing is read from a clock.

- :class:`TiresiasAlloc`: Tiresias' discretised two-queue least-attained-service with
  the configuration Pollux evaluated: a job is demoted once it has run 16 GPU-hours;
  each job gets exactly the GPUs it asked for, or none (gang, preemptible); no
  starvation promotion.
- :class:`OptimusAlloc`: Optimus-like greedy: every job gets one GPU if any is left,
  then GPUs go one at a time to the job whose predicted remaining time drops the most
  (step-time gain x remaining iterations at the job's batch size), bounded by its batch size.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from trident.core.errors import ConfigError


@dataclass(frozen=True)
class ElasticView:
    """What a policy sees of one active job."""

    job_id: str
    max_replicas: int
    application: object
    """A :class:`trident.sim.pollux_apps.Application` (step-time and iteration tables)."""
    batch_size: int
    epoch: int


def packed_placement(num_replicas: int, gpus_per_node: int = 4) -> tuple[int, ...]:
    """``num_replicas`` GPUs on as few nodes as possible (full nodes first)."""
    full, rest = divmod(num_replicas, gpus_per_node)
    return (gpus_per_node,) * full + ((rest,) if rest else ())


def _take(need: int, free: list[int], out: list[int]) -> None:
    """Fill ``need`` GPUs from the nodes with most free GPUs first (ties: lowest index)."""
    while len(out) < need:
        node = max(range(len(free)), key=lambda i: (free[i], -i))
        num = min(free[node], need - len(out))
        if num <= 0:
            raise ConfigError("allocation", need, "no more GPUs than the cluster has free")
        out.extend([node] * num)
        free[node] -= num


def _free(gpus_per_node: Sequence[int], allocs: Mapping[str, Sequence[int]]) -> list[int]:
    free = list(gpus_per_node)
    for nodes in allocs.values():
        for n in nodes:
            free[n] -= 1
    return free


class TiresiasAlloc:
    """Two-queue discretised LAS; ``threshold_gpu_s`` of executed GPU-time demotes a job."""

    name = "tiresias"

    def __init__(self, threshold_gpu_s: float = 16 * 3600.0) -> None:
        if not threshold_gpu_s > 0:
            raise ConfigError("threshold_gpu_s", threshold_gpu_s, "a number > 0")
        self.threshold_gpu_s = threshold_gpu_s
        self._queues: tuple[list[str], list[str]] = ([], [])
        self._running: dict[str, bool] = {}
        self._checked_s: dict[str, int] = {}
        self._executed_s: dict[str, int] = {}

    def allocate(self, now_s: float, jobs: Mapping[str, ElasticView], gpus_per_node: Sequence[int],
                 prev: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
        t = int(now_s)
        q0, q1 = self._queues
        q0[:] = [k for k in q0 if k in jobs]
        q1[:] = [k for k in q1 if k in jobs]
        self._running = {k: v for k, v in self._running.items() if k in jobs}
        allocs = {k: v for k, v in prev.items() if k in jobs}
        for key in jobs:
            if key not in self._running:
                self._running[key] = False
                q0.append(key)
        for key, job in jobs.items():
            elapsed = t - self._checked_s.get(key, 0)
            self._checked_s[key] = t
            if self._running[key]:
                self._executed_s[key] = self._executed_s.get(key, 0) + elapsed
                if key in q0 and self._executed_s[key] * job.max_replicas >= self.threshold_gpu_s:
                    q0.remove(key)
                    q1.append(key)
        left = sum(gpus_per_node)
        for key in q0 + q1:
            need = jobs[key].max_replicas
            self._running[key] = need <= left
            if need <= left:
                left -= need
            else:
                allocs.pop(key, None)
        free = _free(gpus_per_node, allocs)
        for key in q0 + q1:
            if self._running[key] and not allocs.get(key):
                out: list[int] = []
                _take(jobs[key].max_replicas, free, out)
                allocs[key] = tuple(out)
        return allocs


class OptimusAlloc:
    """Greedy marginal-gain allocation over predicted remaining time (Optimus-like)."""

    name = "optimus"

    def __init__(self, gpus_per_node: int = 4) -> None:
        self.gpus_per_node = gpus_per_node
        self._step_s: dict[tuple, float] = {}

    def step_s(self, job: ElasticView, num_replicas: int) -> float:
        """Predicted seconds per step at ``num_replicas`` GPUs packed on full nodes."""
        key = (id(job.application), job.batch_size, num_replicas)
        if key not in self._step_s:
            app = job.application
            local = math.ceil(job.batch_size / num_replicas - 1e-8)
            accum = math.ceil(local / app.max_local_bsz - 1e-8) - 1
            if num_replicas == 1:
                accum = max(1, accum)
            atomic = math.ceil(local / (accum + 1) - 1e-8)
            atomic = min(atomic, int(app.max_batch_size / (num_replicas * (accum + 1))))
            step, sync = app.step_sync_s(packed_placement(num_replicas, self.gpus_per_node), atomic)
            self._step_s[key] = step + (step - sync) * accum
        return self._step_s[key]

    def _gain(self, job: ElasticView, n: int, remaining: float, left: int) -> float:
        if n + 1 > job.max_replicas or left < 1:
            return 0.0
        return (self.step_s(job, n) - self.step_s(job, n + 1)) * remaining

    @staticmethod
    def remaining_steps(job: ElasticView) -> float:
        """Optimizer steps left after the job's current epoch at its batch size (1 in its last
        epoch), from the application's iteration counts (:meth:`Application.iterations`)."""
        app, last = job.application, job.application.max_epochs - 1
        if last <= job.epoch:
            return 1.0
        return app.iterations(job.batch_size, last) - app.iterations(job.batch_size, job.epoch)

    def allocate(self, now_s: float, jobs: Mapping[str, ElasticView], gpus_per_node: Sequence[int],
                 prev: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
        remaining = {key: self.remaining_steps(job) for key, job in jobs.items()}
        left = sum(gpus_per_node)
        replicas: dict[str, int] = {}
        gain: dict[str, float] = {}
        for key, job in jobs.items():
            if left < 1:
                replicas[key], gain[key] = 0, 0.0
                continue
            replicas[key] = 1
            left -= 1
            gain[key] = self._gain(job, 1, remaining[key], left)
        while left > 0 and gain and max(gain.values()) > 0:
            key = max(gain, key=gain.__getitem__)
            replicas[key] += 1
            gain[key] = self._gain(jobs[key], replicas[key], remaining[key], left)
            left -= 1
        allocs = {k: v for k, v in prev.items() if k in jobs and len(v) == replicas[k]}
        free = _free(gpus_per_node, allocs)
        for key in sorted(jobs, key=replicas.__getitem__):
            if replicas[key] > 0 and not allocs.get(key):
                out: list[int] = []
                _take(replicas[key], free, out)
                allocs[key] = tuple(out)
        return allocs
