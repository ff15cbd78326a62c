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
  plus a part that grows at most proportionally to the batch, and ever more slowly, so above
  an observed batch it is at most the observed value (plus ``memory_margin``) times the batch
  ratio (only its part above ``rest_memory_bytes``, what a replica holds at rest, when that is
  known) and, once two batches are seen, at most the steepest secant between them carried on;
  below an observed batch it is at most that batch's value (a GP fitted to two or three noisy
  points can be overconfident; this bound cannot be);
* the safe set grows by at most ``max_batch_growth`` x the largest batch seen on the
  device per step (a trust region: the GP is not trusted far from its data).

``U`` is the larger of the two bounds within the trust region and infinite outside it.
A device not observed yet is only tried at its minimal configuration (smallest batch,
fewest replicas), assumed safe.

Throughput is modelled as log throughput minus ``log(batch x replicas)``, the rate per
row of batch per replica, by a GP whose kernel is a sum of one over (batch, concurrency)
shared by all devices and one over all inputs: a device first seen at its smallest
configuration is compared with the others per row and per replica (not undervalued for
its small batch), and the batch trend learned on one device carries over to the others.

Goal-oriented safe exploration: the candidate with the highest log expected improvement
is evaluated when it is certified safe. When a configuration not certified safe promises
more, is plausibly safe (its memory lower bound, from the observed memory at smaller
batches and the memory GP's lower confidence bound, is under the limit) and has an
expander on its device (a safe configuration at a batch not yet observed there, no
larger than the goal's), the expander at the largest such batch is evaluated instead:
learning memory there grows the safe set toward the goal. When nothing promises a
relative gain of ``min_improvement`` it returns the best safe observation
(``converged``). The first suggestion is the known-safe ``initial`` configuration; with one
batch size measured on a one-device space the step needs no fit (see :meth:`SafeBayesOpt._first_step`).
Deterministic for a given ``seed``; torch is seeded inside a forked RNG.
"""
from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trident.core.errors import ConfigError
from trident.core.model.threads import single_threaded
from trident.core.optimize.space import KnobSpace, Knobs, Observation


MAX_FIT_ITERATIONS = 40
"""L-BFGS iterations per GP hyperparameter fit (a few dozen points need no more)."""


@dataclass(frozen=True)
class Suggestion:
    """The next configuration to evaluate, with why.

    ``memory_ucb_bytes`` is the operator's memory upper bound at ``knobs`` (``None`` when
    assumed safe without a model); ``safe_candidates`` counts the unevaluated safe set;
    ``converged`` is True when ``knobs`` is the best observation, not a new trial;
    ``expected_improvement`` is the relative gain expected of ``knobs`` itself over the best
    observation (for a step that expands the safe set, of the step, not of its goal); ``goal``
    and ``goal_improvement``: what a step that expands the safe set aims at, and its gain.
    """

    knobs: Knobs
    reason: str
    predicted_throughput_rows_per_s: float | None = None
    memory_ucb_bytes: float | None = None
    safe_candidates: int = 0
    converged: bool = False
    expected_improvement: float = 0.0
    goal: Knobs | None = None
    goal_improvement: float = 0.0


class SafeBayesOpt:
    """Safe BO over a :class:`KnobSpace` under ``memory_limit_bytes`` (see the module docstring).

    ``initial`` is the known-safe configuration running now; ``fixed_memory_bytes`` is
    memory used regardless of the knobs (counted against the limit); ``rest_memory_bytes`` what
    one replica holds at rest, before its first batch (a part of its memory that does not grow
    with the batch; 0 when unknown); ``beta`` the width of
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
        rest_memory_bytes: float = 0.0,
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
        if beta < 0 or memory_margin < 0 or min_improvement < 0 or rest_memory_bytes < 0:
            raise ConfigError("beta/memory_margin/min_improvement/rest_memory_bytes",
                              (beta, memory_margin, min_improvement, rest_memory_bytes), "numbers >= 0")
        self.space = space
        self.memory_limit_bytes = float(memory_limit_bytes)
        self.initial = initial
        self.seed = seed
        self.fixed_memory_bytes = float(fixed_memory_bytes)
        self.rest_memory_bytes = float(rest_memory_bytes)
        self.beta = beta
        self.memory_margin = memory_margin
        self.max_batch_growth = max_batch_growth
        self.min_improvement = min_improvement

    # --- memory -----------------------------------------------------------------------

    def memory_upper_bytes(self, candidates: Sequence[Knobs], observations: Sequence[Observation]) -> np.ndarray:
        """Upper bound on the operator's memory (bytes) at each candidate; ``inf`` where nothing is known."""
        return self.memory_bounds_bytes(candidates, observations)[1]

    def memory_lower_bytes(self, candidates: Sequence[Knobs], observations: Sequence[Observation]) -> np.ndarray:
        """Optimistic lower bound on the operator's memory (bytes) at each candidate; ``fixed_memory_bytes`` where nothing is known."""
        return self.memory_bounds_bytes(candidates, observations)[0]

    def memory_bounds_bytes(
        self, candidates: Sequence[Knobs], observations: Sequence[Observation]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper bounds on the operator's memory (bytes) at each candidate."""
        lower, upper = np.zeros(len(candidates)), np.full(len(candidates), math.inf)
        for d in self.space.device_types:
            idx = [i for i, k in enumerate(candidates) if k.device_type == d]
            obs = [o for o in observations if o.knobs.device_type == d]
            if idx and obs:
                lower[idx], upper[idx] = self._per_replica_bounds([candidates[i].batch_size for i in idx], obs)
        conc = np.array([k.concurrency for k in candidates], dtype=float)
        return self.fixed_memory_bytes + conc * lower, self.fixed_memory_bytes + conc * upper

    def _per_replica_bounds(self, batches: Sequence[int], obs: Sequence[Observation]) -> tuple[np.ndarray, np.ndarray]:
        """Memory per replica bounds (bytes) at ``batches`` on one device from that device's observations.

        Upper: see the module docstring. Lower: memory per replica does not shrink as the
        batch grows, so it is at least the largest value observed at a batch no larger
        (less ``memory_margin``), and at least the memory GP's lower confidence bound.
        """
        anchors: dict[int, float] = {}
        for o in obs:
            b = o.knobs.batch_size
            anchors[b] = max(anchors.get(b, 0.0), o.memory_per_replica_bytes)
        b_max = max(anchors)
        upper, lower = np.empty(len(batches)), np.zeros(len(batches))
        for i, b in enumerate(batches):
            below = [a for a in anchors if a <= b]
            above = [a for a in anchors if a >= b]
            bound = anchors[min(above)] if above else math.inf
            if below:  # the part above the replica at rest grows at most with the batch (a reading
                b0 = max(below)  # at rest not below the batch's is inconsistent: not used)
                rest = self.rest_memory_bytes if self.rest_memory_bytes < anchors[b0] else 0.0
                bound = min(bound, rest + (anchors[b0] - rest) * b / b0)
                lower[i] = max(anchors[a] for a in below) * (1 - self.memory_margin)
            if len(below) >= 2 and b > max(below):  # the steepest secant seen, carried on from the last
                xs = sorted(below)
                slope = max(max((anchors[y] - anchors[x]) / (y - x) for x, y in zip(xs, xs[1:])), 0.0)
                bound = min(bound, anchors[xs[-1]] + slope * (b - xs[-1]))
            upper[i] = bound * (1 + self.memory_margin)
        if len(anchors) >= 2:
            scale = float(self.space.batch_sizes[-1])
            x = np.array([[o.knobs.batch_size / scale] for o in obs])
            y = np.array([o.memory_per_replica_bytes for o in obs])
            y_scale = float(y.max())
            mu, sd = _fit_predict(x, y / y_scale, np.array([[b / scale] for b in batches]), seed=self.seed, linear_mean=True)
            upper = np.maximum(upper, y_scale * (mu + self.beta * sd))
            lower = np.maximum(lower, y_scale * (mu - self.beta * sd))
        upper[np.asarray(batches) > self.max_batch_growth * b_max] = math.inf
        return lower, upper

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
        lower, upper = self.memory_bounds_bytes(candidates, observations)
        is_safe = np.array([
            u <= self.memory_limit_bytes or (k.device_type not in seen_devices and k == self.space.minimal(k.device_type))
            for k, u in zip(candidates, upper)
        ], dtype=bool)
        best = self.best(observations)
        if not is_safe.any():
            return self._converged(best, "no unevaluated configuration is certainly safe")
        first = self._first_step(candidates, is_safe, lower <= self.memory_limit_bytes, upper, best, observations)
        if first is not None:
            return first
        x_train = self.space.encode([o.knobs for o in observations])
        y_train = np.log([o.throughput_rows_per_s for o in observations])
        best_f = math.log(best.throughput_rows_per_s) if best is not None else float(y_train.max())
        # The GP learns the rate per row of batch per replica; the scale log(batch x replicas)
        # is added back, so a device first seen at its smallest configuration is not undervalued.
        scale_train, scale_new = _log_scale([o.knobs for o in observations]), _log_scale(candidates)
        log_ei, mu, _ = _log_expected_improvement(
            x_train, y_train - scale_train, self.space.encode(candidates), best_f=best_f - scale_new,
            seed=self.seed + len(observations),
        )
        mu = mu + scale_new
        safe_idx = np.flatnonzero(is_safe)
        i = int(safe_idx[np.argmax(log_ei[safe_idx])])
        goal, expander = self._expansion(candidates, is_safe, lower <= self.memory_limit_bytes, log_ei, observations)
        threshold = math.log(self.min_improvement)
        g = None
        if goal is not None and log_ei[goal] > max(log_ei[i], threshold):
            g, i = candidates[goal], expander
            why = (
                f"expand the safe set toward {g.device_type} batch {g.batch_size} x{g.concurrency} "
                f"(expected improvement {math.exp(log_ei[goal]):.1%} if safe): learn memory at batch "
                f"{candidates[i].batch_size} on {candidates[i].device_type}"
            )
        elif log_ei[i] >= threshold:
            why = f"max expected improvement ({math.exp(log_ei[i]):.1%}) among {len(safe_idx)} safe configurations"
        else:
            return self._converged(best, f"expected gain {math.exp(log_ei[i]):.2%} < {self.min_improvement:.2%}")
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
            expected_improvement=float(math.exp(log_ei[i])),
            goal=g,
            goal_improvement=float(math.exp(log_ei[goal])) if g is not None else 0.0,
        )

    def _first_step(
        self,
        candidates: Sequence[Knobs],
        is_safe: np.ndarray,
        plausible: np.ndarray,
        upper: np.ndarray,
        best: Observation | None,
        observations: Sequence[Observation],
    ) -> Suggestion | None:
        """The step after one batch size was measured on a one-device space, found without a fit.

        Measured at one batch, the throughput model knows nothing of the batch trend beyond its
        prior (the rate per row of batch per replica is constant), so its mean grows in proportion
        to batch x replicas and the search's step is known: the safe configuration at the largest
        batch above the measured one (the trust region's edge), at its most replicas, toward the
        largest batch x replicas not known unsafe. A fit of the model costs seconds of CPU when it
        matters most, as the pipeline's first actors start on a small machine. ``None`` when more
        is known, or no larger batch is certified safe (the model then decides)."""
        if len(self.space.device_types) != 1 or best is None or len({o.knobs.batch_size for o in observations}) != 1:
            return None
        b = observations[0].knobs.batch_size
        up = [j for j, k in enumerate(candidates) if is_safe[j] and k.batch_size > b]
        if not up:
            return None
        per_row = best.throughput_rows_per_s / (best.knobs.batch_size * best.knobs.concurrency)

        def gain(k: Knobs) -> float:
            return per_row * k.batch_size * k.concurrency / best.throughput_rows_per_s - 1

        i = max(up, key=lambda j: (candidates[j].batch_size, candidates[j].concurrency))
        k, u = candidates[i], float(upper[i])
        goals = [j for j, g in enumerate(candidates) if not is_safe[j] and plausible[j] and g.batch_size > k.batch_size]
        g = candidates[max(goals, key=lambda j: (gain(candidates[j]), candidates[j].batch_size))] if goals else None
        prior = "if throughput grows with the batch: one batch size measured says nothing against it"
        why = (f"expand the safe set toward {g.device_type} batch {g.batch_size} x{g.concurrency} ({gain(g):+.0%} "
               f"{prior}): learn memory at batch {k.batch_size} on {k.device_type}" if g is not None else
               f"the largest certified safe batch ({gain(k):+.0%} {prior})")
        return Suggestion(
            knobs=k,
            reason=f"{why}; memory bound {u / 2**30:.2f} GiB <= limit {self.memory_limit_bytes / 2**30:.2f} GiB",
            predicted_throughput_rows_per_s=per_row * k.batch_size * k.concurrency,
            memory_ucb_bytes=u,
            safe_candidates=int(is_safe.sum()),
            expected_improvement=gain(k),
            goal=g,
            goal_improvement=gain(g) if g is not None else 0.0,
        )

    def _expansion(
        self,
        candidates: Sequence[Knobs],
        is_safe: np.ndarray,
        plausible: np.ndarray,
        log_ei: np.ndarray,
        observations: Sequence[Observation],
    ) -> tuple[int | None, int | None]:
        """The most promising uncertified goal and the safe configuration that expands toward it (indices).

        A goal is an unevaluated configuration not certified safe but not known unsafe
        (its memory lower bound is under the limit) with a safe expander on its device: an
        unevaluated safe configuration at a batch not observed there, no larger than the
        goal's. The expander is at the largest such batch (the safe set grows most), with
        the highest expected improvement among those.
        """
        observed = {(o.knobs.batch_size, o.knobs.device_type) for o in observations}
        expanders: dict[str, list[int]] = {}
        for j, k in enumerate(candidates):
            if is_safe[j] and (k.batch_size, k.device_type) not in observed:
                expanders.setdefault(k.device_type, []).append(j)
        goals = [
            j for j, k in enumerate(candidates)
            if not is_safe[j] and plausible[j]
            and any(candidates[e].batch_size <= k.batch_size for e in expanders.get(k.device_type, ()))
        ]
        if not goals:
            return None, None
        goal = max(goals, key=lambda j: log_ei[j])
        g = candidates[goal]
        steps = [e for e in expanders[g.device_type] if candidates[e].batch_size <= g.batch_size]
        return goal, max(steps, key=lambda e: (candidates[e].batch_size, log_ei[e]))

    def _converged(self, best: Observation | None, why: str) -> Suggestion:
        chosen = best.knobs if best is not None else self.initial
        return Suggestion(chosen, f"converged: {why}; keep the best safe configuration", converged=True)


_warming = threading.Event()


class ModelLoading(RuntimeError):
    """A suggestion needed a model fit while :func:`warm_up` was still loading the GP stack in
    another thread: a control step must not wait on that thread's imports; ask again later."""


def _not_loading() -> None:
    if _warming.is_set():
        raise ModelLoading("the batch-size search's model is still loading in the background")


def warm_up() -> None:
    """Import the GP stack (torch, gpytorch, botorch) and fit each of its models once ahead of
    the next suggestion that needs a fit: seconds of CPU on a small machine (about 4 s here,
    16 s under a running pipeline). Safe to call from a background thread; while it runs, a
    suggestion that needs a fit raises :class:`ModelLoading`."""
    _warming.set()
    try:
        import botorch.acquisition.analytic  # noqa: F401
        import botorch.fit  # noqa: F401
        import botorch.models  # noqa: F401
        import gpytorch  # noqa: F401

        # one tiny fit of each model: their first construction costs more than the imports (1.4 s
        # of a 2.2 s first suggestion in a kernel's first ``batch_shape``; 21 s while 7 actors
        # started) (no RNG fork or thread limit here: a policy step may run beside this thread)
        import torch

        x = np.array([[0.0, 0.0, 0.0], [0.5, 1.0, 0.0], [1.0, 0.5, 1.0]])
        for model in (_fit_gp(x, np.array([0.0, 0.3, 0.1]), linear_mean=False, shared_dims=2),
                      _fit_gp(x[:, :1], np.array([1.0, 1.2, 1.5]), linear_mean=True)):
            with torch.no_grad():
                model.posterior(torch.as_tensor(x[:1, :model.train_inputs[0].shape[-1]], dtype=torch.float64))
    finally:
        _warming.clear()


def _fit_gp(x: np.ndarray, y: np.ndarray, *, linear_mean: bool, shared_dims: int = 0):
    """A fitted ``SingleTaskGP``; with ``shared_dims`` its kernel is a sum of one over the first
    ``shared_dims`` inputs (a trend shared across the rest, e.g. device types) and one over all."""
    import torch
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from botorch.models.utils.gpytorch_modules import get_covar_module_with_dim_scaled_prior
    from gpytorch.kernels import ScaleKernel
    from gpytorch.means import LinearMean
    from gpytorch.mlls import ExactMarginalLogLikelihood
    from gpytorch.priors import GammaPrior

    tx = torch.as_tensor(x, dtype=torch.float64)
    ty = torch.as_tensor(y, dtype=torch.float64).unsqueeze(-1)
    mean = LinearMean(input_size=tx.shape[-1]).to(torch.float64) if linear_mean else None
    covar = None
    if shared_dims:
        covar = get_covar_module_with_dim_scaled_prior(
            ard_num_dims=shared_dims, active_dims=list(range(shared_dims))
        ) + ScaleKernel(get_covar_module_with_dim_scaled_prior(ard_num_dims=tx.shape[-1]), outputscale_prior=GammaPrior(2.0, 4.0))
    model = SingleTaskGP(tx, ty, mean_module=mean, covar_module=covar).to(torch.float64)
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    try:
        fit_gpytorch_mll(mll, optimizer_kwargs={"options": {"maxiter": MAX_FIT_ITERATIONS}})
    except Exception:  # noqa: BLE001 - an unfitted GP keeps its prior hyperparameters
        pass
    model.eval()
    return model


def _fit_predict(x: np.ndarray, y: np.ndarray, x_new: np.ndarray, *, seed: int, linear_mean: bool) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mean and std of the latent function at ``x_new`` after fitting a GP to (x, y)."""
    _not_loading()
    import torch

    with torch.random.fork_rng(), single_threaded():
        torch.manual_seed(seed)
        model = _fit_gp(x, y, linear_mean=linear_mean)
        with torch.no_grad():
            post = model.posterior(torch.as_tensor(x_new, dtype=torch.float64))
            return post.mean.squeeze(-1).numpy(), post.variance.clamp_min(0).sqrt().squeeze(-1).numpy()


def _log_scale(knobs: Sequence[Knobs]) -> np.ndarray:
    """``log(batch_size x concurrency)``: the log throughput of a configuration that scaled perfectly."""
    return np.array([math.log(k.batch_size * k.concurrency) for k in knobs])


def _log_expected_improvement(
    x: np.ndarray, y: np.ndarray, x_new: np.ndarray, *, best_f: np.ndarray, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Log expected improvement over ``best_f`` (one per row of ``x_new``), posterior mean and std there."""
    _not_loading()
    import torch
    from botorch.acquisition.analytic import _log_ei_helper

    with torch.random.fork_rng(), single_threaded():
        torch.manual_seed(seed)
        model = _fit_gp(x, y, linear_mean=False, shared_dims=2)
        with torch.no_grad():
            post = model.posterior(torch.as_tensor(x_new, dtype=torch.float64))
            mean = post.mean.squeeze(-1)
            sigma = post.variance.clamp_min(1e-12).sqrt().squeeze(-1)
            u = (mean - torch.as_tensor(best_f, dtype=torch.float64)) / sigma
            log_ei = _log_ei_helper(u) + sigma.log()
        return log_ei.numpy(), mean.numpy(), sigma.numpy()
