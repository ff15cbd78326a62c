"""The arbiter as a Ray actor: detached, named ``trident-arbiter`` in namespace ``trident``, one per cluster.

The first ``trident.autoscale()`` that needs it creates it (or :func:`start`, to choose its
policy); every other run, from any driver, finds it by name. It holds no CPU. Ray restarts it
if it dies; it then starts empty, and every run, told it is unknown, registers again with
its claim and progress (the state lives in the runs). Times are the actor's own clock.
"""
from __future__ import annotations

import time
from typing import Any

from trident.jobs.arbiter.divide import PREEMPTION
from trident.jobs.arbiter.state import ArbiterState, Claim, Progress, Refused
from trident.report.metrics import ArbiterMetrics

NAME, NAMESPACE = "trident-arbiter", "trident"
CLUSTER_EVERY_S = 10.0
"""Seconds between reads of the cluster's CPUs and GPUs (nodes come and go)."""


class Arbiter:
    """The actor's class: each method is one message, validated by :class:`ArbiterState`."""

    def __init__(self, policy: str = "srtf", preemption: str = "lazy",
                 quotas: dict[str, tuple[float, float]] | None = None, lapse_s: float = 15.0,
                 max_slowdown: float | None = None) -> None:
        cpus, gpus = _cluster()
        self.state = ArbiterState(cpus=cpus, gpus=gpus, policy=policy, preemption=preemption,
                                  quotas=dict(quotas or {}), lapse_s=lapse_s, max_slowdown=max_slowdown)
        self.read_s = time.monotonic()
        self.metrics = ArbiterMetrics()

    def register(self, claim: Claim, progress: Progress | None = None) -> tuple[str, str, Any]:
        out = self.state.register(claim, self._now(), progress=progress)
        self._export()
        return out

    def update(self, run_id: str, token: str, progress: Progress) -> Any:
        budget = self.state.update(run_id, token, progress, self._now())
        self._export()
        return budget

    def leave(self, run_id: str, token: str) -> None:
        self.state.leave(run_id, token, self._now())
        self._export()

    def status(self) -> dict:
        now = self._now()
        self.state.expire(now)
        return self.state.status(now)

    def _export(self) -> None:
        """Every run's budget and progress on Ray's metrics endpoint (``ray_trident_arbiter_*``)."""
        self.metrics.record(self.state.status(time.monotonic())["runs"])

    def _now(self) -> float:
        now = time.monotonic()
        if now - self.read_s >= CLUSTER_EVERY_S:
            self.read_s = now
            self.state.resize(*_cluster(), now)
        return now


def _cluster() -> tuple[float, float]:
    import ray

    total = ray.cluster_resources()
    return float(total.get("CPU", 0.0)), float(total.get("GPU", 0.0))


def start(*, policy: str = "srtf", preemption: str = "lazy", quotas: dict[str, tuple[float, float]] | None = None,
          lapse_s: float = 15.0, max_slowdown: float | None = None) -> Any:
    """Create the cluster's arbiter with these settings, or return the one that runs (its settings
    are those it was created with). ``policy``: a ``JOB_POLICIES`` name; ``preemption``: ``lazy``,
    ``eager`` or ``never``; ``quotas``: owner -> (CPUs, GPUs) at most; ``lapse_s``: seconds without
    a heartbeat before a run is removed; ``max_slowdown``: a run slowed down this much is served
    first (``None``: no bound). Needs ``ray.init``."""
    import ray

    from trident.core.errors import ConfigError
    from trident.jobs.base import JOB_POLICIES

    if policy not in JOB_POLICIES:
        raise ConfigError("policy", policy, "one of " + ", ".join(JOB_POLICIES.names()))
    if preemption not in PREEMPTION:
        raise ConfigError("preemption", preemption, " or ".join(PREEMPTION))
    if not (isinstance(lapse_s, (int, float)) and lapse_s > 0):
        raise ConfigError("lapse_s", lapse_s, "a positive number of seconds")
    if max_slowdown is not None and not (isinstance(max_slowdown, (int, float)) and max_slowdown >= 1):
        raise ConfigError("max_slowdown", max_slowdown, "None or a number >= 1")
    for owner, quota in (quotas or {}).items():
        if len(quota) != 2 or any(not isinstance(q, (int, float)) or q < 0 for q in quota):
            raise ConfigError(f"quotas[{owner!r}]", quota, "(CPUs, GPUs), two numbers >= 0")
    actor = ray.remote(num_cpus=0, max_restarts=-1)(Arbiter)
    return actor.options(name=NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True).remote(
        policy=policy, preemption=preemption, quotas=quotas, lapse_s=lapse_s, max_slowdown=max_slowdown)


def find() -> Any | None:
    """The cluster's arbiter, or ``None`` when none runs. Needs ``ray.init``."""
    import ray

    try:
        return ray.get_actor(NAME, namespace=NAMESPACE)
    except ValueError:
        return None


__all__ = ["Arbiter", "NAME", "NAMESPACE", "Refused", "find", "start"]
