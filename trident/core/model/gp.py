"""Per-operator Gaussian-process models: configuration -> throughput and memory per replica.

Three GPs share one input encoding (:class:`~trident.core.model.features.FeatureEncoder`):
rows per second per replica, heap bytes per replica and object-store bytes per replica.
Each is fitted to the logarithm of its target (all are positive and act
multiplicatively), with a Matern-5/2 ARD kernel plus white noise, on a sliding window
of the latest samples. Predictions are returned on the original scale: the mean is
``exp(mu)`` (the median of the log-normal) and the standard deviation ``exp(mu) * sigma``
(first order). A fit that fails keeps the last good model.
"""
from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
import warnings
from typing import TYPE_CHECKING

import numpy as np

from trident.core.errors import ConfigError
from trident.core.model.features import ConfigFeatures, FeatureEncoder
from trident.core.model.threads import single_threaded

if TYPE_CHECKING:
    from trident.core.observe.filters import ThroughputSample


@dataclass(frozen=True)
class Prediction:
    """Mean and standard deviation per configuration (arrays of equal length, target units)."""

    mean: np.ndarray
    std: np.ndarray

    def upper(self, beta: float) -> np.ndarray:
        """``mean + beta * std``: an upper confidence bound."""
        return self.mean + beta * self.std

    def lower(self, beta: float) -> np.ndarray:
        """``mean - beta * std``: a lower confidence bound."""
        return self.mean - beta * self.std


@dataclass(frozen=True)
class MemoryPrediction:
    """Heap and object-store bytes per replica; ``None`` for a kind never measured."""

    heap: Prediction | None
    object_store: Prediction | None


@dataclass(frozen=True)
class FitReport:
    """Outcome of one :meth:`OperatorModel.fit`. ``ok`` is False when the last good model was kept."""

    ok: bool
    n_samples: int
    reason: str


class _LogGP:
    """A scikit-learn GP on log targets with inputs standardised from the training data."""

    def __init__(self, x: np.ndarray, y: np.ndarray, *, n_restarts: int, random_state: int) -> None:
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

        self.x_mean = x.mean(axis=0)
        self.x_scale = np.where(x.std(axis=0) > 1e-9, x.std(axis=0), 1.0)
        kernel = ConstantKernel(1.0, (1e-3, 1e3)) * Matern(
            length_scale=np.ones(x.shape[1]), length_scale_bounds=(5e-2, 1e3), nu=2.5
        ) + WhiteKernel(1e-2, (1e-6, 1.0))
        with single_threaded(), warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.gp = GaussianProcessRegressor(
                kernel=kernel, normalize_y=True, n_restarts_optimizer=n_restarts, random_state=random_state
            ).fit((x - self.x_mean) / self.x_scale, np.log(y))

    def predict(self, x: np.ndarray) -> Prediction:
        with single_threaded():
            mu, sd = self.gp.predict((x - self.x_mean) / self.x_scale, return_std=True)
        # The fitted white noise is measurement noise, not uncertainty about the mean.
        noise = float(np.exp(self.gp.kernel_.k2.theta[0])) * float(self.gp._y_train_std) ** 2
        sd = np.sqrt(np.maximum(sd**2 - noise, 0.0))
        mean = np.exp(mu)
        return Prediction(mean=mean, std=mean * sd)


class OperatorModel:
    """What one operator does under a configuration, learned from sustainable samples.

    ``device_types`` lists every device the operator may run on; ``window_samples``
    bounds the training set to the latest samples; a target needs ``min_samples``
    measured samples to be fitted. Deterministic for a given ``seed``.
    """

    def __init__(
        self,
        *,
        device_types: tuple[str, ...],
        window_samples: int = 256,
        min_samples: int = 5,
        n_restarts: int = 1,
        seed: int = 0,
    ) -> None:
        if window_samples < 2:
            raise ConfigError("window_samples", window_samples, "an integer >= 2")
        if min_samples < 2 or min_samples > window_samples:
            raise ConfigError("min_samples", min_samples, f"an integer in [2, window_samples={window_samples}]")
        if n_restarts < 0:
            raise ConfigError("n_restarts", n_restarts, "an integer >= 0")
        self.encoder = FeatureEncoder(device_types=tuple(device_types))
        self.window_samples = window_samples
        self.min_samples = min_samples
        self.n_restarts = n_restarts
        self._rng = np.random.default_rng(seed)
        self._throughput: _LogGP | None = None
        self._heap: _LogGP | None = None
        self._object_store: _LogGP | None = None
        self.n_samples = 0

    @property
    def is_fitted(self) -> bool:
        """True once a throughput model has been fitted successfully."""
        return self._throughput is not None

    def fit(self, samples: Sequence[ThroughputSample]) -> FitReport:
        """Fit all three GPs to the latest ``window_samples`` of ``samples`` (time order).

        Never raises on bad data: on failure the previous models stay and ``ok`` is False.
        """
        window = list(samples)[-self.window_samples :]
        if len(window) < self.min_samples:
            return FitReport(False, len(window), f"{len(window)} samples < min_samples={self.min_samples}; kept last model")
        try:
            x = self.encoder.encode([s.config for s in window])
            fits = {"throughput": self._fit_one(x, [s.rows_per_s_per_replica for s in window])}
            for name, values in (
                ("heap", [s.heap_bytes_per_replica for s in window]),
                ("object_store", [s.object_store_bytes_per_replica for s in window]),
            ):
                have = np.array([v is not None and v > 0 for v in values])
                if have.sum() >= self.min_samples:
                    fits[name] = self._fit_one(x[have], [v for v, h in zip(values, have) if h])
        except (ValueError, np.linalg.LinAlgError, ConfigError) as exc:
            return FitReport(False, len(window), f"fit failed ({exc}); kept last model")
        self._throughput = fits["throughput"]
        self._heap = fits.get("heap", self._heap)
        self._object_store = fits.get("object_store", self._object_store)
        self.n_samples = len(window)
        return FitReport(True, len(window), f"fitted on {len(window)} samples ({', '.join(fits)})")

    def _fit_one(self, x: np.ndarray, y: Sequence[float]) -> _LogGP:
        y = np.asarray(y, dtype=float)
        if not np.all(np.isfinite(y)) or np.any(y <= 0):
            raise ValueError("targets must be finite and positive")
        return _LogGP(x, y, n_restarts=self.n_restarts, random_state=int(self._rng.integers(2**31 - 1)))

    def predict_throughput(self, configs: Sequence[ConfigFeatures]) -> Prediction:
        """Rows per second per replica (mean, std) for each configuration. Raises when not fitted."""
        if self._throughput is None:
            raise ConfigError("model", "unfitted", "a model fitted on at least min_samples samples")
        return self._throughput.predict(self.encoder.encode(configs))

    def predict_memory(self, configs: Sequence[ConfigFeatures]) -> MemoryPrediction:
        """Heap and object-store bytes per replica (mean, std) for each configuration."""
        x = self.encoder.encode(configs)
        return MemoryPrediction(
            heap=None if self._heap is None else self._heap.predict(x),
            object_store=None if self._object_store is None else self._object_store.predict(x),
        )

    def mape(self, samples: Sequence[ThroughputSample]) -> float:
        """Mean absolute percentage error of predicted throughput on ``samples`` (a fraction)."""
        if not samples:
            return math.nan
        pred = self.predict_throughput([s.config for s in samples]).mean
        y = np.array([s.rows_per_s_per_replica for s in samples])
        return float(np.mean(np.abs(pred - y) / y))

    def copy(self) -> OperatorModel:
        """An independent copy (used by the regime store)."""
        return copy.deepcopy(self)
