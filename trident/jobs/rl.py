"""PPO for a learned job priority (RLTune-style), in torch (imported lazily).

The agent sees :func:`~trident.jobs.features.queue_features` of up to 128 queued
jobs. A shared MLP scores each job; a "wait" token is scored from the pooled queue.
At each scheduling decision the action is a short sequence of picks: a queued job
that can start now (the others are masked), repeated up to ``max_picks`` times
(Plackett-Luce, sampled with Gumbel noise from the caller's numpy Generator), or
"wait" (hold the rest back; masked while nothing runs). Acting greedily the picks
are the jobs scored above the wait token, best first.

The reward comes once, at the end of an episode (a trace window replayed by the
simulator): the relative improvement in mean bounded slowdown (or average JCT)
over a heuristic baseline (FIFO) on the same window. Every decision of the episode shares it; the
critic's value of the decision's queue is the baseline of the advantage. PPO
(clipped ratio, value loss, entropy bonus) updates the network. Same seed, same
weights.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from trident.core.errors import ConfigError
from trident.jobs.features import MAX_JOBS, NUM_FEATURES, QueueFeatures

HIDDEN = 32


@dataclass(frozen=True)
class PpoConfig:
    """PPO hyper-parameters. ``lr``: Adam step; ``fine_tune_lr``: step of online fine-tuning."""

    lr: float = 3e-3
    fine_tune_lr: float = 1e-4
    clip: float = 0.2
    epochs: int = 4
    minibatch: int = 256
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    max_picks: int = 8
    wait_bias: float = -3.0

    def __post_init__(self) -> None:
        for name in ("lr", "fine_tune_lr", "clip"):
            if not getattr(self, name) > 0:
                raise ConfigError(name, getattr(self, name), "a number > 0")
        for name in ("epochs", "minibatch", "max_picks"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "an integer >= 1")


def build_net(seed: int, *, wait_bias: float = -3.0, num_features: int = NUM_FEATURES):
    """A fresh actor-critic over ``num_features`` per job, initialised from ``seed`` (torch's own
    generator, not the global one)."""
    import torch
    from torch import nn

    class ActorCritic(nn.Module):
        """Job scorer (per job), wait scorer and critic (on the pooled queue)."""

        def __init__(self) -> None:
            super().__init__()
            self.job = nn.Sequential(nn.Linear(num_features, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh())
            self.score = nn.Linear(HIDDEN, 1)
            self.wait = nn.Linear(2 * HIDDEN + 1, 1)
            self.value = nn.Sequential(nn.Linear(2 * HIDDEN + 1, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))

        def forward(self, x, present, running):
            """x (B, N, F), present (B, N) bool, running (B,) float ->
            job logits (B, N), wait logit (B,), value (B,)."""
            h = self.job(x)
            logits = self.score(h).squeeze(-1)
            m = present.unsqueeze(-1).float()
            count = m.sum(1).clamp(min=1.0)
            mean = (h * m).sum(1) / count
            mx = torch.where(present.unsqueeze(-1), h, torch.full_like(h, -1.0)).max(1).values
            pooled = torch.cat([mean, mx, running.unsqueeze(-1)], dim=-1)
            return logits, self.wait(pooled).squeeze(-1), self.value(pooled).squeeze(-1)

    gen = torch.Generator().manual_seed(seed)
    net = ActorCritic()
    with torch.no_grad():
        for p in net.parameters():
            bound = 1.0 / np.sqrt(p.shape[-1]) if p.dim() > 1 else 0.1
            p.copy_(torch.empty(p.shape).uniform_(-bound, bound, generator=gen))
        net.wait.bias.fill_(wait_bias)
    return net


@dataclass(frozen=True)
class Action:
    """Positions (into the featurised queue) picked, best first; ``waited``: the wait token ended the picks."""

    picks: tuple[int, ...]
    waited: bool
    logp: float
    value: float


@dataclass(frozen=True, eq=False)
class NumpyActorCritic:
    """A numpy copy of the actor-critic for acting (fast on tiny inputs, no torch needed)."""

    params: dict

    @classmethod
    def from_torch(cls, net) -> "NumpyActorCritic":
        return cls({k: v.detach().cpu().numpy().astype(np.float64) for k, v in net.state_dict().items()})

    def __call__(self, x: np.ndarray, running: bool) -> tuple[np.ndarray, float, float]:
        """x (N, F) -> job logits (N,), wait logit, value."""
        p = self.params
        h = np.tanh(np.tanh(x @ p["job.0.weight"].T + p["job.0.bias"]) @ p["job.2.weight"].T + p["job.2.bias"])
        logits = h @ p["score.weight"][0] + p["score.bias"][0]
        pooled = np.concatenate([h.mean(0), h.max(0), [float(running)]]) if len(h) else \
            np.concatenate([np.zeros(2 * HIDDEN), [float(running)]])
        wait = float(pooled @ p["wait.weight"][0] + p["wait.bias"][0])
        v = np.tanh(pooled @ p["value.0.weight"].T + p["value.0.bias"]) @ p["value.2.weight"][0] + p["value.2.bias"][0]
        return logits, wait, float(v)


def _logits(net: NumpyActorCritic, qf: QueueFeatures):
    return net(qf.matrix.astype(np.float64), qf.any_running)


def act(net: NumpyActorCritic, qf: QueueFeatures, rng: np.random.Generator | None, *, max_picks: int) -> Action:
    """Choose picks for one decision: sampled (``rng`` given) or greedy (``rng`` is ``None``)."""
    logits, wait, value = _logits(net, qf)
    valid = np.flatnonzero(qf.can_start)
    cand = np.concatenate([logits[valid], [wait if qf.any_running else -np.inf]])
    keys = cand if rng is None else cand + rng.gumbel(size=cand.size)
    keys = np.where(np.isfinite(cand), keys, -np.inf)
    order = np.argsort(-keys, kind="stable")
    picks: list[int] = []
    waited = False
    logp = 0.0
    alive = np.isfinite(cand)
    for pos in order[:max_picks]:
        if not alive.any():
            break
        lse = np.logaddexp.reduce(cand[alive])
        logp += cand[pos] - lse
        alive[pos] = False
        if pos == len(valid):
            waited = True
            break
        picks.append(int(valid[pos]))
        if len(picks) == len(valid) and not qf.any_running:
            break
    return Action(picks=tuple(picks), waited=waited, logp=float(logp), value=value)


def ordering(qf: QueueFeatures, action: Action, net: NumpyActorCritic) -> tuple[str, ...]:
    """Job ids to try in order: the picks, then (unless it waited) the rest by score."""
    ids = [qf.job_ids[i] for i in action.picks]
    if action.waited:
        return tuple(ids)
    logits, _, _ = _logits(net, qf)
    chosen = set(action.picks)
    rest = [i for i in np.argsort(-logits, kind="stable").tolist() if i not in chosen]
    return tuple(ids + [qf.job_ids[i] for i in rest])


@dataclass
class Rollout:
    """Decisions of one or more episodes, for a PPO update."""

    matrices: list[np.ndarray] = field(default_factory=list)
    can_start: list[np.ndarray] = field(default_factory=list)
    running: list[bool] = field(default_factory=list)
    picks: list[tuple[int, ...]] = field(default_factory=list)
    waited: list[bool] = field(default_factory=list)
    logp: list[float] = field(default_factory=list)
    episode: list[int] = field(default_factory=list)

    def add(self, qf: QueueFeatures, action: Action, episode: int) -> None:
        self.matrices.append(qf.matrix)
        self.can_start.append(qf.can_start)
        self.running.append(qf.any_running)
        self.picks.append(action.picks)
        self.waited.append(action.waited)
        self.logp.append(action.logp)
        self.episode.append(episode)

    def __len__(self) -> int:
        return len(self.logp)


def _batch_logp(net, batch: dict):
    """Log-probability of the recorded picks under ``net`` (Plackett-Luce over valid jobs + wait)."""
    import torch

    logits, wait, value = net(batch["x"], batch["present"], batch["running"])
    b, n = logits.shape
    neg = torch.tensor(-1e9)
    cand = torch.cat([logits, wait.unsqueeze(-1)], dim=1)                 # (B, N+1)
    alive = torch.cat([batch["valid"], batch["running"].bool().unsqueeze(-1)], dim=1)
    logp = torch.zeros(b)
    entropy = torch.zeros(b)
    for j in range(batch["picks"].shape[1]):
        idx = batch["picks"][:, j]                                         # (B,), -1 = none
        has = idx >= 0
        masked = torch.where(alive, cand, neg)
        logsm = torch.log_softmax(masked, dim=1)
        if j == 0:
            p = logsm.exp() * alive
            entropy = -(p * torch.where(alive, logsm, torch.zeros_like(logsm))).sum(1)
        chosen = logsm.gather(1, idx.clamp(min=0).unsqueeze(1)).squeeze(1)
        logp = logp + torch.where(has, chosen, torch.zeros_like(chosen))
        alive = alive & ~(torch.nn.functional.one_hot(idx.clamp(min=0), n + 1).bool() & has.unsqueeze(1))
    return logp, value, entropy


def _tensors(rollout: Rollout, idx: np.ndarray, max_picks: int) -> dict:
    import torch

    size = max(len(rollout.matrices[i]) for i in idx)
    x = np.zeros((len(idx), size, rollout.matrices[idx[0]].shape[1]), dtype=np.float32)
    present = np.zeros((len(idx), size), dtype=bool)
    valid = np.zeros((len(idx), size), dtype=bool)
    picks = np.full((len(idx), max_picks), -1, dtype=np.int64)
    for row, i in enumerate(idx):
        m = rollout.matrices[i]
        x[row, : len(m)] = m
        present[row, : len(m)] = True
        valid[row, : len(m)] = rollout.can_start[i]
        seq = list(rollout.picks[i]) + ([size] if rollout.waited[i] else [])
        picks[row, : len(seq)] = seq[:max_picks]
    return {"x": torch.from_numpy(x), "present": torch.from_numpy(present), "valid": torch.from_numpy(valid),
            "picks": torch.from_numpy(picks),
            "running": torch.tensor([float(rollout.running[i]) for i in idx])}


def ppo_update(net, optimizer, rollout: Rollout, rewards: dict[int, float], config: PpoConfig,
               rng: np.random.Generator) -> dict[str, float]:
    """One PPO update on ``rollout``; ``rewards`` maps episode -> end-of-episode reward.

    Returns the mean losses. Minibatches are drawn with ``rng``.
    """
    import torch

    n = len(rollout)
    if n == 0:
        return {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0}
    returns = np.array([rewards[e] for e in rollout.episode], dtype=np.float32)
    old_logp = torch.tensor(rollout.logp, dtype=torch.float32)
    ret = torch.from_numpy(returns)
    stats = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0}
    steps = 0
    for _ in range(config.epochs):
        perm = rng.permutation(n)
        for start in range(0, n, config.minibatch):
            idx = perm[start:start + config.minibatch]
            batch = _tensors(rollout, idx, config.max_picks + 1)
            logp, value, entropy = _batch_logp(net, batch)
            adv = ret[idx] - value.detach()
            if len(idx) > 1:
                adv = (adv - adv.mean()) / (adv.std() + 1e-6)
            ratio = torch.exp(logp - old_logp[idx])
            policy_loss = -torch.min(ratio * adv, ratio.clamp(1 - config.clip, 1 + config.clip) * adv).mean()
            value_loss = ((value - ret[idx]) ** 2).mean()
            loss = policy_loss + config.value_coef * value_loss - config.entropy_coef * entropy.mean()
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
            optimizer.step()
            stats["policy_loss"] += float(policy_loss.detach())
            stats["value_loss"] += float(value_loss.detach())
            stats["entropy"] += float(entropy.mean().detach())
            steps += 1
    return {k: v / steps for k, v in stats.items()}


def imitation_update(net, optimizer, rollout: Rollout, *, epochs: int, minibatch: int, max_picks: int,
                     rng: np.random.Generator) -> float:
    """Warm start: maximise the likelihood of the recorded picks (a teacher's choices).

    Returns the mean negative log-likelihood of the last epoch.
    """
    n = len(rollout)
    loss_sum, steps = 0.0, 0
    for _ in range(epochs):
        loss_sum, steps = 0.0, 0
        perm = rng.permutation(n)
        for start in range(0, n, minibatch):
            idx = perm[start:start + minibatch]
            logp, _, _ = _batch_logp(net, _tensors(rollout, idx, max_picks + 1))
            loss = -logp.mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss_sum += float(loss.detach())
            steps += 1
    return loss_sum / max(steps, 1)


def bounded_slowdown(jct_s: np.ndarray, duration_s: np.ndarray, *, min_s: float = 10.0) -> float:
    """Mean of max(1, JCT / max(duration, min_s))."""
    return float(np.mean(np.maximum(1.0, jct_s / np.maximum(duration_s, min_s))))


def episode_reward(policy_bsld: float, baseline_bsld: float) -> float:
    """Relative improvement over the baseline's bounded slowdown (> 0 is better), clipped to [-1, 1]."""
    return float(np.clip((baseline_bsld - policy_bsld) / max(baseline_bsld, 1e-9), -1.0, 1.0))


__all__ = ["Action", "NumpyActorCritic", "PpoConfig", "Rollout", "act", "bounded_slowdown", "build_net",
           "episode_reward", "imitation_update", "ordering", "ppo_update", "MAX_JOBS"]
