"""Memory-constrained Bayesian optimisation of one operator's knobs (botorch).

Each :meth:`SafeBayesOpt.suggest` looks at every observation so far and proposes the
next configuration to try, only from the *safe set*: configurations whose memory upper
bound, ``fixed_memory_bytes + concurrency * U(batch, device)``, is under the limit.
Memory per replica does not depend on concurrency, so ``U`` is learned per device over
batch size alone:

* a GP on memory per replica over batch size (botorch ``SingleTaskGP`` with a linear
  mean, so it extrapolates the per-row growth) gives the upper confidence bound
  ``mu + beta * sigma`` once two batch sizes have been seen on the device;
* a structural bound must hold as well: memory per replica is assumed to be a fixed part
  plus a part at most proportional to the batch, so above an observed batch it is at most
  the observed value (plus ``memory_margin``) times the batch ratio, and below one at most
  that batch's value (a GP fitted to two or three noisy points can be overconfident; this
  bound cannot be);
* the safe set grows by at most ``max_batch_growth`` x the largest batch seen on the
  device per step (a trust region: the GP is not trusted far from its data).

``U`` is the larger of the two bounds within the trust region and infinite outside it.
A device not observed yet is only tried at its minimal configuration (smallest batch,
fewest replicas), assumed safe. Among safe configurations not evaluated yet, it picks
the one with the highest log expected improvement of a GP on log throughput. When none
promises a relative gain of ``min_improvement`` but an uncertified configuration might
(its optimistic throughput is above the best), it evaluates the safe configuration at
the largest new batch size (expanding the safe set); otherwise it returns the best safe
observation (``converged``). The first suggestion is the known-safe ``initial``
configuration. Deterministic for a given ``seed``; torch is seeded inside a forked RNG.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trident.errors import ConfigError
from trident.model.threads import single_threaded
from trident.optimize.space import KnobSpace, Knobs, Observation


MAX_FIT_ITERATIONS = 40
"""L-BFGS iterations per GP hyperparameter fit (a few dozen points need no more)."""


@dataclass(frozen=True)
class Suggestion:
    """The next configuration to evaluate, with why.

    ``memory_ucb_bytes`` is the operator's memory upper bound at ``knobs`` (``None`` when
    assumed safe without a model); ``safe_candidates`` counts the unevaluated safe set;
    ``converged`` is True when ``knobs`` is the best observation, not a new trial.
    """

    knobs: Knobs
    reason: str
    predicted_throughput_rows_per_s: float | None = None
    memory_ucb_bytes: float | None = None
    safe_candidates: int = 0
    converged: bool = False


class SafeBayesOpt:
    """Safe BO over a :class:`KnobSpace` under ``memory_limit_bytes`` (see the module docstring).

    ``initial`` is the known-safe configuration running now; ``fixed_memory_bytes`` is
    memory used regardless of the knobs (counted against the limit); ``beta`` the width of
    the memory confidence bound; ``memory_margin`` the relative margin on observed memory;
    ``max_batch_growth`` the trust-region factor on batch size; ``min_improvement`` the
    relative expected gain below which the search stops.
    """

    def __init__(
        self,
        *,
        space: KnobSpace,
        memory_limit_bytes: float,
        initial: Knobs,
        seed: int = 0,
        fixed_memory_bytes: float = 0.0,
        beta: float = 3.0,
        memory_margin: float = 0.03,
        max_batch_growth: float = 2.0,
        min_improvement: float = 1e-3,
    ) -> None:
        if memory_limit_bytes <= 0:
            raise ConfigError("memory_limit_bytes", memory_limit_bytes, "a number > 0")
        if not space.contains(initial):
            raise ConfigError("initial", initial, "a configuration on the KnobSpace grid")
        if not 0 <= fixed_memory_bytes < memory_limit_bytes:
            raise ConfigError("fixed_memory_bytes", fixed_memory_bytes, f"a number in [0, memory_limit_bytes={memory_limit_bytes})")
        if max_batch_growth < 1:
            raise ConfigError("max_batch_growth", max_batch_growth, "a number >= 1")
        if beta < 0 or memory_margin < 0 or min_improvement < 0:
            raise ConfigError("beta/memory_margin/min_improvement", (beta, memory_margin, min_improvement), "numbers >= 0")
        self.space = space
        self.memory_limit_bytes = float(memory_limit_bytes)
        self.initial = initial
        self.seed = seed
        self.fixed_memory_bytes = float(fixed_memory_bytes)
        self.beta = beta
        self.memory_margin = memory_margin
        self.max_batch_growth = max_batch_growth
        self.min_improvement = min_improvement

    # --- memory -----------------------------------------------------------------------

    def memory_upper_bytes(self, candidates: Sequence[Knobs], observations: Sequence[Observation]) -> np.ndarray:
        """Upper bound on the operator's memory (bytes) at each candidate; ``inf`` where nothing is known."""
        per_replica = np.full(len(candidates), math.inf)
        for d in self.space.device_types:
            idx = [i for i, k in enumerate(candidates) if k.device_type == d]
            obs = [o for o in observations if o.knobs.device_type == d]
            if idx and obs:
                per_replica[idx] = self._per_replica_upper([candidates[i].batch_size for i in idx], obs)
        conc = np.array([k.concurrency for k in candidates], dtype=float)
        return self.fixed_memory_bytes + conc * per_replica

    def _per_replica_upper(self, batches: Sequence[int], obs: Sequence[Observation]) -> np.ndarray:
        """Memory per replica bound (bytes) at ``batches`` on one device from that device's observations."""
        anchors: dict[int, float] = {}
        for o in obs:
            b = o.knobs.batch_size
            anchors[b] = max(anchors.get(b, 0.0), o.memory_per_replica_bytes * (1 + self.memory_margin))
        b_max = max(anchors)
        out = np.empty(len(batches))
        for i, b in enumerate(batches):
            lower = [a for a in anchors if a <= b]
            upper = [a for a in anchors if a >= b]
            bound = anchors[min(upper)] if upper else math.inf
            if lower:
                bound = min(bound, anchors[max(lower)] * b / max(lower))
            out[i] = bound
        if len(anchors) >= 2:
            scale = float(self.space.batch_sizes[-1])
            x = np.array([[o.knobs.batch_size / scale] for o in obs])
            y = np.array([o.memory_per_replica_bytes for o in obs])
            y_scale = float(y.max())
            mu, sd = _fit_predict(x, y / y_scale, np.array([[b / scale] for b in batches]), seed=self.seed, linear_mean=True)
            out = np.maximum(out, y_scale * (mu + self.beta * sd))
        out[np.asarray(batches) > self.max_batch_growth * b_max] = math.inf
        return out

    # --- suggestion -------------------------------------------------------------------

    def best(self, observations: Sequence[Observation]) -> Observation | None:
        """The highest-throughput observation whose memory was within the limit."""
        ok = [
            o for o in observations
            if self.fixed_memory_bytes + o.knobs.concurrency * o.memory_per_replica_bytes <= self.memory_limit_bytes
        ]
        return max(ok, key=lambda o: o.throughput_rows_per_s, default=None)

    def suggest(self, observations: Sequence[Observation]) -> Suggestion:
        """The next configuration to evaluate given all ``observations`` (pure; same input, same output)."""
        for o in observations:
            if not self.space.contains(o.knobs):
                raise ConfigError("observations", o.knobs, "configurations on the KnobSpace grid")
        if not observations:
            return Suggestion(self.initial, "start from the known-safe current configuration")
        seen = {o.knobs for o in observations}
        seen_devices = {k.device_type for k in seen}
        candidates = [k for k in self.space.grid() if k not in seen]
        upper = self.memory_upper_bytes(candidates, observations) if candidates else np.zeros(0)
        is_safe = np.array([
            u <= self.memory_limit_bytes or (k.device_type not in seen_devices and k == self.space.minimal(k.device_type))
            for k, u in zip(candidates, upper)
        ], dtype=bool)
        best = self.best(observations)
        if not is_safe.any():
            return self._converged(best, "no unevaluated configuration is certainly safe")
        x_train = self.space.encode([o.knobs for o in observations])
        y_train = np.log([o.throughput_rows_per_s for o in observations])
        best_f = math.log(best.throughput_rows_per_s) if best is not None else float(y_train.max())
        log_ei, mu, sd = _log_expected_improvement(
            x_train, y_train, self.space.encode(candidates), best_f=best_f, seed=self.seed + len(observations)
        )
        safe_idx = np.flatnonzero(is_safe)
        i = int(safe_idx[np.argmax(log_ei[safe_idx])])
        if log_ei[i] >= math.log(self.min_improvement):
            why = f"max expected improvement ({math.exp(log_ei[i]):.1%}) among {len(safe_idx)} safe configurations"
        else:
            # Nothing certified safe promises a gain; if an uncertified configuration might
            # (optimistic bound above the best), learn memory at a new batch size instead.
            promising = (~is_safe) & (mu + 2.0 * sd > best_f + math.log1p(self.min_improvement))
            observed = {(o.knobs.batch_size, o.knobs.device_type) for o in observations}
            expanders = [j for j in safe_idx if (candidates[j].batch_size, candidates[j].device_type) not in observed]
            if not promising.any() or not expanders:
                return self._converged(best, f"expected gain {math.exp(log_ei[i]):.2%} < {self.min_improvement:.2%}")
            i = max(expanders, key=lambda j: (candidates[j].batch_size, mu[j]))
            why = f"expand the safe set: learn memory at batch {candidates[i].batch_size} ({int(promising.sum())} uncertified configurations might be better)"
        k, u = candidates[i], float(upper[i])
        return Suggestion(
            knobs=k,
            reason=why + "; " + (
                f"memory bound {u / 2**30:.2f} GiB <= limit {self.memory_limit_bytes / 2**30:.2f} GiB"
                if math.isfinite(u) else f"first look at device {k.device_type} at its minimal configuration (assumed safe)"
            ),
            predicted_throughput_rows_per_s=float(math.exp(mu[i])),
            memory_ucb_bytes=u if math.isfinite(u) else None,
            safe_candidates=len(safe_idx),
        )

    def _converged(self, best: Observation | None, why: str) -> Suggestion:
        chosen = best.knobs if best is not None else self.initial
        return Suggestion(chosen, f"converged: {why}; keep the best safe configuration", converged=True)


def _fit_gp(x: np.ndarray, y: np.ndarray, *, linear_mean: bool):
    import torch
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from gpytorch.means import LinearMean
    from gpytorch.mlls import ExactMarginalLogLikelihood

    tx = torch.as_tensor(x, dtype=torch.float64)
    ty = torch.as_tensor(y, dtype=torch.float64).unsqueeze(-1)
    mean = LinearMean(input_size=tx.shape[-1]).to(torch.float64) if linear_mean else None
    model = SingleTaskGP(tx, ty, mean_module=mean)
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    try:
        fit_gpytorch_mll(mll, optimizer_kwargs={"options": {"maxiter": MAX_FIT_ITERATIONS}})
    except Exception:  # noqa: BLE001 - an unfitted GP keeps its prior hyperparameters
        pass
    model.eval()
    return model


def _fit_predict(x: np.ndarray, y: np.ndarray, x_new: np.ndarray, *, seed: int, linear_mean: bool) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mean and std of the latent function at ``x_new`` after fitting a GP to (x, y)."""
    import torch

    with torch.random.fork_rng(), single_threaded():
        torch.manual_seed(seed)
        model = _fit_gp(x, y, linear_mean=linear_mean)
        with torch.no_grad():
            post = model.posterior(torch.as_tensor(x_new, dtype=torch.float64))
            return post.mean.squeeze(-1).numpy(), post.variance.clamp_min(0).sqrt().squeeze(-1).numpy()


def _log_expected_improvement(
    x: np.ndarray, y: np.ndarray, x_new: np.ndarray, *, best_f: float, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Log expected improvement over ``best_f``, posterior mean and std at each row of ``x_new``."""
    import torch
    from botorch.acquisition import LogExpectedImprovement

    with torch.random.fork_rng(), single_threaded():
        torch.manual_seed(seed)
        model = _fit_gp(x, y, linear_mean=False)
        xt = torch.as_tensor(x_new, dtype=torch.float64)
        with torch.no_grad():
            log_ei = LogExpectedImprovement(model, best_f=best_f)(xt.unsqueeze(1))
            post = model.posterior(xt)
        return log_ei.numpy(), post.mean.squeeze(-1).numpy(), post.variance.clamp_min(0).sqrt().squeeze(-1).numpy()
