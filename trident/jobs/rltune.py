"""The ``rltune`` job policy: a learned (PPO) priority over observable features.

Weights ship in the package (``rltune.pt``, written by ``benchmarks/train_rltune.py``;
they read the run-time-history features, fed by :meth:`RLTunePolicy.observe_finish`).
Non-preemptive (as RLTune) alone; places with the ``milp`` placer by default.
``preemptive=True`` (what the name with a preemptor that may evict builds, ``rltune/lazy``:
:func:`~trident.jobs.base.create_policy`) also ranks running jobs (the net scores only queued
ones): a running job goes before the first queued job (in the net's order) whose expected run
time from the history exceeds the running job's expected remaining time (``sref``'s
estimates), so a preemptor (``lazy``) may evict only jobs expected to run longer than the
blocked one. A pass never evicts under a non-preemptive policy. ``history`` hands the policy a
pre-filled :class:`~trident.jobs.predict.RunTimeHistory` (finished jobs seen before this run). With
``explore=True`` it samples its picks and records its decisions in ``rollout`` (for
training); with ``fine_tune=True`` :meth:`RLTunePolicy.fine_tune` takes a small
PPO step (``PpoConfig.fine_tune_lr``) from the decisions recorded since the last call.
"""
from __future__ import annotations

from dataclasses import replace
from importlib import resources
from pathlib import Path

import numpy as np

from trident.core.errors import ConfigError
from trident.jobs.base import JOB_POLICIES, SchedState
from trident.jobs.features import HISTORY_FEATURE_NAMES, NUM_FEATURES, FeatureConfig, queue_features
from trident.jobs.predict import RunTimeHistory
from trident.jobs.rl import (NumpyActorCritic, PpoConfig, Rollout, act, build_net, episode_reward, ordering,
                              ppo_update)

WEIGHTS_FILE = "rltune.pt"


def load_net(path: str | Path | None = None):
    """The actor-critic with the shipped weights (or those at ``path``)."""
    import io

    import torch

    if path is None:
        data = resources.files("trident.jobs").joinpath(WEIGHTS_FILE).read_bytes()
    else:
        data = Path(path).read_bytes()
    saved = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    net = build_net(0, num_features=int(saved["job.0.weight"].shape[1]))
    net.load_state_dict(saved)
    net.eval()
    return net


class RLTunePolicy:
    """Learned priority. Keyword-only: ``weights`` (path, default the shipped file),
    ``net`` (an actor-critic to use instead), ``explore``, ``fine_tune``, ``ppo``, ``features``.

    A net that reads more than the nine base features reads the run-time-history ones
    (``FeatureConfig(history=True)``); the policy then books every finished job's run
    time (:meth:`observe_finish`) in ``history``."""

    name = "rltune"
    preemptive = False
    ranks_running = True
    """Ranks running jobs too when paired with a preemptor that may evict (:func:`~trident.jobs.base.create_policy`)."""
    oracle = False
    placer = "milp"

    def __init__(self, *, weights: str | Path | None = None, net=None, explore: bool = False,
                 fine_tune: bool = False, ppo: PpoConfig = PpoConfig(),
                 features: FeatureConfig = FeatureConfig(), history: RunTimeHistory | None = None,
                 preemptive: bool = False) -> None:
        if net is not None and weights is not None:
            raise ConfigError("weights", weights, "None when net is given")
        self._weights = weights
        self._net = net
        self.explore = explore
        self.fine_tune_enabled = fine_tune
        self.ppo = ppo
        self.features = features
        self.rollout = Rollout()
        self.episode = 0
        self._optimizer = None
        self._fast: NumpyActorCritic | None = None
        self.history = RunTimeHistory() if history is None else history
        self.preemptive = preemptive
        self._estimates = None

    def observe_finish(self, job, run_s: float) -> None:
        """Book a finished job's run time (the simulator and ``JobScheduler`` call this)."""
        self.history.observe(job, run_s)

    @property
    def net(self):
        """The torch actor-critic (loaded on first use)."""
        if self._net is None:
            self._net = load_net(self._weights)
        return self._net

    @property
    def fast(self) -> NumpyActorCritic:
        """The numpy copy the policy acts with."""
        if self._fast is None:
            self._fast = NumpyActorCritic.from_torch(self.net)
            width = self._fast.params["job.0.weight"].shape[1]
            if width not in (NUM_FEATURES, NUM_FEATURES + len(HISTORY_FEATURE_NAMES)):
                raise ConfigError("net", f"{width} input features",
                                  f"{NUM_FEATURES} or {NUM_FEATURES + len(HISTORY_FEATURE_NAMES)}")
            self.features = replace(self.features, history=width > NUM_FEATURES)
        return self._fast

    def order(self, state: SchedState, rng: np.random.Generator) -> tuple[str, ...]:
        """Picks first (jobs that can start now, best first), then the rest by score;
        only the picks when the policy chose to wait."""
        if not state.queued:
            return ()
        fast = self.fast
        qf = queue_features(state, self.features, self.history)
        action = act(fast, qf, rng if self.explore else None, max_picks=self.ppo.max_picks)
        if self.explore or self.fine_tune_enabled:
            self.rollout.add(qf, action, self.episode)
        ids = ordering(qf, action, fast)
        if not action.waited:
            seen = set(ids)
            ids += tuple(v.job_id for v in state.queued[self.features.max_jobs:] if v.job_id not in seen)
        elif self.preemptive:
            # It waits: nothing more starts on free GPUs, but the jobs that cannot start now stay
            # ranked (by score), so a blocked one may still ask the preemptor for a victim.
            blocked = {qf.job_ids[i] for i in np.flatnonzero(~qf.can_start)}
            ids += tuple(j for j in ordering(qf, replace(action, waited=False), fast) if j in blocked)
        return self._with_running(ids, state) if self.preemptive else ids

    def _with_running(self, ids: tuple[str, ...], state: SchedState) -> tuple[str, ...]:
        """``ids`` (queued, the net's order) with the running jobs merged in: each before the first
        queued job expected to run longer than the running job's expected remaining time."""
        if not state.running:
            return ids
        if self._estimates is None:
            from trident.jobs.history_order import ShortestRemainingExpectedFirst

            self._estimates = ShortestRemainingExpectedFirst()
        est = self._estimates
        est.history = self.history
        queued = {v.job_id: v for v in state.queued}
        running = sorted((est.remaining_s(v, state.now), v.job_id) for v in state.running.values())
        out: list[str] = []
        k = 0
        for jid in ids:
            v = queued.get(jid)
            if v is not None:
                expected = est.expected_s(v)
                while k < len(running) and running[k][0] < expected:
                    out.append(running[k][1])
                    k += 1
            out.append(jid)
        out += [jid for _, jid in running[k:]]
        return tuple(out)

    def fine_tune(self, *, policy_bsld: float, baseline_bsld: float, rng: np.random.Generator) -> dict[str, float]:
        """One small PPO step from the decisions recorded since the last call; returns its losses."""
        if not self.fine_tune_enabled:
            raise ConfigError("fine_tune", False, "RLTunePolicy(fine_tune=True) to fine-tune online")
        import torch

        if self._optimizer is None:
            self._optimizer = torch.optim.Adam(self.net.parameters(), lr=self.ppo.fine_tune_lr)
        reward = episode_reward(policy_bsld, baseline_bsld)
        self.net.train()
        stats = ppo_update(self.net, self._optimizer, self.rollout, {self.episode: reward}, self.ppo, rng)
        self.net.eval()
        self._fast = NumpyActorCritic.from_torch(self.net)
        self.rollout = Rollout()
        self.episode += 1
        return {**stats, "reward": reward}


JOB_POLICIES.register("rltune", RLTunePolicy)
