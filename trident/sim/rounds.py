"""Round-based replay of elastic training jobs whose speed comes from measured tables.

The protocol of Pollux's simulator: time advances in rounds (60 s); within a round each
allocated job progresses at its application's goodput for its placement and batch
(:mod:`trident.sim.pollux_apps`), crossing epoch boundaries as it goes; after the round
the policy (:mod:`trident.jobs.elastic`) re-allocates every active job (arrived, not
finished); a job whose allocation changes spends ``restart_s`` (30 s) holding its new
GPUs before it progresses again. A job finishes when the progress of its last epoch is
reached; its completion time is exact to the second within the round.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from trident.core.errors import ConfigError
from trident.jobs.elastic import ElasticView
from trident.sim.pollux_apps import Application, LocalBatch, application


@dataclass(frozen=True, kw_only=True)
class RoundConfig:
    """Cluster shape and protocol constants (seconds, GPUs)."""

    num_nodes: int = 16
    gpus_per_node: int = 4
    round_s: int = 60
    restart_s: float = 30.0
    max_rounds: int = 100_000

    def __post_init__(self) -> None:
        if self.num_nodes < 1 or self.gpus_per_node < 1 or self.round_s < 1 or self.max_rounds < 1:
            raise ConfigError("num_nodes/gpus_per_node/round_s/max_rounds",
                              (self.num_nodes, self.gpus_per_node, self.round_s, self.max_rounds), "integers >= 1")
        if self.restart_s < 0:
            raise ConfigError("restart_s", self.restart_s, "a number >= 0")


@dataclass(frozen=True)
class ElasticJob:
    """One job of a Pollux workload: the GPUs and total batch size its user asked for."""

    job_id: str
    application: str
    arrival_s: float
    num_replicas: int
    batch_size: int


class ElasticPolicy(Protocol):
    name: str

    def allocate(self, now_s: float, jobs, gpus_per_node: Sequence[int], prev) -> dict[str, tuple[int, ...]]: ...


@dataclass
class _State:
    job: ElasticJob
    app: Application
    max_replicas: int
    placement: tuple[int, ...] = ()
    local: LocalBatch | None = None
    restart_left_s: float = 0.0
    progress: float = 0.0
    epoch: int = 0
    gpu_s: float = 0.0
    restarts: int = -1
    finish_s: float | None = None

    def advance(self, start_s: float, seconds: float) -> None:
        """Run ``seconds`` from ``start_s`` on the current placement."""
        if not self.placement:
            return
        gpus = sum(self.placement)
        delay = min(self.restart_left_s, seconds)
        self.restart_left_s -= delay
        self.gpu_s += delay * gpus
        now, seconds = start_s + delay, seconds - delay
        app, lb = self.app, self.local
        while seconds > 0 and self.finish_s is None:
            rate = app.gain(lb.batch_size(gpus), self.epoch) / app.iteration_s(self.placement, lb)
            target = app.progress_by_epoch[self.epoch + 1]
            if self.progress + rate * seconds < target:
                self.progress += rate * seconds
                self.gpu_s += seconds * gpus
                return
            delta = round(float((target - self.progress) / rate))
            self.epoch += 1
            self.progress = target
            if self.epoch >= app.max_epochs:
                self.finish_s = now + delta
            now += delta
            self.gpu_s += delta * gpus
            seconds -= delta

    def reallocate(self, nodes: tuple[int, ...], restart_s: float) -> None:
        if not nodes:
            self.placement, self.local = (), None
            return
        counts: list[int] = []
        for i, n in enumerate(nodes):
            if i and n == nodes[i - 1]:
                counts[-1] += 1
            else:
                counts.append(1)
        self.placement = tuple(counts)
        self.local = self.app.local_batch(self.job.batch_size, len(nodes))
        self.restart_left_s = restart_s
        self.restarts += 1


@dataclass(frozen=True, eq=False)
class RoundResult:
    """Per-job outcomes aligned with ``job_ids`` (seconds)."""

    policy: str
    job_ids: tuple[str, ...]
    arrival_s: np.ndarray
    finish_s: np.ndarray
    gpu_s: np.ndarray
    restarts: np.ndarray
    rounds: int
    total_gpus: int

    @property
    def jct_s(self) -> np.ndarray:
        return self.finish_s - self.arrival_s


def max_replicas_for(policy_name: str, job: ElasticJob, app: Application) -> int:
    """GPUs a job may get: what it asked for (Tiresias) or as many as its batch allows (Optimus)."""
    if policy_name == "tiresias":
        return job.num_replicas
    return 1 if app.name == "ncf" else max(1, job.batch_size // app.min_local_bsz)


def replay(jobs: Sequence[ElasticJob], policy: ElasticPolicy, config: RoundConfig | None = None,
           *, models_dir: str | None = None) -> RoundResult:
    """Replay ``jobs`` to completion under ``policy``; raises if ``max_rounds`` pass first."""
    cfg = config or RoundConfig()
    ids = [j.job_id for j in jobs]
    if len(set(ids)) != len(ids):
        raise ConfigError("jobs", "duplicate job_id", "unique job ids")
    states = []
    for j in jobs:
        app = application(j.application, models_dir)
        states.append(_State(j, app, max_replicas_for(policy.name, j, app)))
    gpus = [cfg.gpus_per_node] * cfg.num_nodes
    allocs: dict[str, tuple[int, ...]] = {}
    now = 0
    rounds = 0
    pending = len(states)
    while pending:
        if rounds >= cfg.max_rounds:
            raise ConfigError("max_rounds", cfg.max_rounds, f"more rounds ({pending} jobs unfinished)")
        rounds += 1
        for s in states:
            if s.finish_s is None:
                s.advance(now, cfg.round_s)
        now += cfg.round_s
        active = {s.job.job_id: s for s in states if s.job.arrival_s <= now and s.finish_s is None}
        pending = sum(s.finish_s is None for s in states)
        views = {k: ElasticView(k, s.max_replicas, s.app, s.job.batch_size, s.epoch) for k, s in active.items()}
        new = policy.allocate(now, views, gpus, {k: v for k, v in allocs.items() if k in active}) if views else {}
        for s in states:
            k = s.job.job_id
            if new.get(k) != allocs.get(k):
                s.reallocate(new.get(k, ()), cfg.restart_s)
        allocs = new

    def arr(f) -> np.ndarray:
        return np.array([f(s) for s in states], dtype=float)

    return RoundResult(policy=policy.name, job_ids=tuple(ids), arrival_s=arr(lambda s: s.job.arrival_s),
                       finish_s=arr(lambda s: s.finish_s), gpu_s=arr(lambda s: s.gpu_s),
                       restarts=arr(lambda s: max(0, s.restarts)).astype(int), rounds=rounds,
                       total_gpus=sum(gpus))
