"""Regimes that recur reuse their model at once.

When a changepoint ends a regime, its fitted model is remembered. After a new change,
the first few fresh samples are scored against every remembered model; one that
explains them (throughput MAPE under ``match_mape``) is reused immediately instead of
waiting for a new model to be learned.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trident.core.errors import ConfigError
from trident.core.model.gp import OperatorModel

if TYPE_CHECKING:
    from trident.core.observe.filters import ThroughputSample


@dataclass(frozen=True)
class RegimeMatch:
    """Result of :meth:`RegimeStore.match`: the regime reused (``None`` if none fits), its MAPE, why."""

    regime_id: int | None
    mape: float
    reason: str


class RegimeStore:
    """Up to ``max_regimes`` fitted models, the oldest forgotten first."""

    def __init__(self, *, max_regimes: int = 8, match_mape: float = 0.08, min_samples: int = 3) -> None:
        if max_regimes < 1:
            raise ConfigError("max_regimes", max_regimes, "an integer >= 1")
        if not 0 < match_mape < 1:
            raise ConfigError("match_mape", match_mape, "a fraction in (0, 1)")
        if min_samples < 1:
            raise ConfigError("min_samples", min_samples, "an integer >= 1")
        self.max_regimes = max_regimes
        self.match_mape = match_mape
        self.min_samples = min_samples
        self._models: dict[int, OperatorModel] = {}
        self._next_id = 0

    def __len__(self) -> int:
        return len(self._models)

    def remember(self, model: OperatorModel) -> int:
        """Store a copy of a fitted ``model``; returns its regime id."""
        if not model.is_fitted:
            raise ConfigError("model", "unfitted", "a fitted OperatorModel")
        regime_id = self._next_id
        self._next_id += 1
        self._models[regime_id] = model.copy()
        while len(self._models) > self.max_regimes:
            del self._models[min(self._models)]
        return regime_id

    def match(self, samples: Sequence[ThroughputSample]) -> tuple[OperatorModel | None, RegimeMatch]:
        """The remembered model that best explains ``samples`` (a copy), if its MAPE is under ``match_mape``."""
        if len(samples) < self.min_samples:
            return None, RegimeMatch(None, float("nan"), f"{len(samples)} samples < min_samples={self.min_samples}")
        if not self._models:
            return None, RegimeMatch(None, float("nan"), "no regime remembered")
        # a model remembered before the operator moved to a device it never ran on cannot score
        # samples there (its encoder does not know the device): not that regime
        devices = {s.config.device_type for s in samples}
        scores = {rid: m.mape(samples) for rid, m in self._models.items() if devices <= set(m.encoder.device_types)}
        if not scores:
            return None, RegimeMatch(None, float("nan"), "no regime remembered on these devices")
        best = min(scores, key=scores.get)
        if scores[best] <= self.match_mape:
            return self._models[best].copy(), RegimeMatch(
                best, scores[best], f"regime {best} recurs (MAPE {scores[best]:.1%} <= {self.match_mape:.0%})"
            )
        return None, RegimeMatch(None, scores[best], f"no regime fits (best MAPE {scores[best]:.1%} > {self.match_mape:.0%})")
