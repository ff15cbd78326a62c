"""Operator configuration as model input: what the GP sees of an operator's setup."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trident.core.errors import ConfigError
from trident.core.types import OperatorConfig

DEFAULT_BATCH_SIZE = 1024
"""Rows per batch assumed when an operator leaves ``batch_size`` unset (Ray Data's default)."""


def device_type_of(config: OperatorConfig) -> str:
    """The device an operator runs on: its accelerator type, ``"gpu"`` for an untyped GPU, else ``"cpu"``."""
    if config.accelerator_type:
        return config.accelerator_type
    return "gpu" if config.num_gpus > 0 else "cpu"


@dataclass(frozen=True)
class ConfigFeatures:
    """One operator configuration as the models see it.

    ``batch_size`` in rows, ``device_type`` a name from the encoder's list, ``replicas``
    the number of replicas running, ``input_bytes_per_row`` the mean size of an input row.
    """

    batch_size: int
    device_type: str
    replicas: int
    input_bytes_per_row: float

    def __post_init__(self) -> None:
        if self.batch_size <= 0:
            raise ConfigError("batch_size", self.batch_size, "a positive integer")
        if self.replicas <= 0:
            raise ConfigError("replicas", self.replicas, "a positive integer")
        if not (self.input_bytes_per_row > 0 and math.isfinite(self.input_bytes_per_row)):
            raise ConfigError("input_bytes_per_row", self.input_bytes_per_row, "a finite number > 0")

    @classmethod
    def from_config(cls, config: OperatorConfig, *, replicas: int, input_bytes_per_row: float) -> ConfigFeatures:
        """Features of ``config`` running ``replicas`` replicas on rows of ``input_bytes_per_row``."""
        return cls(
            batch_size=config.batch_size or DEFAULT_BATCH_SIZE,
            device_type=device_type_of(config),
            replicas=replicas,
            input_bytes_per_row=input_bytes_per_row,
        )


@dataclass(frozen=True)
class FeatureEncoder:
    """Turns :class:`ConfigFeatures` into a numeric matrix.

    Columns: log2(batch size), replicas, log2(input bytes per row), then one indicator
    column per device type (in ``device_types`` order). Log scales make the multiplicative
    effects of batch and row size smooth for a stationary kernel.
    """

    device_types: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.device_types or len(set(self.device_types)) != len(self.device_types):
            raise ConfigError("device_types", self.device_types, "a non-empty tuple of distinct names")

    @property
    def n_features(self) -> int:
        return 3 + len(self.device_types)

    def encode(self, configs: Sequence[ConfigFeatures]) -> np.ndarray:
        """An array of shape ``(len(configs), n_features)``; unknown device types raise ConfigError."""
        x = np.zeros((len(configs), self.n_features))
        for i, c in enumerate(configs):
            if c.device_type not in self.device_types:
                raise ConfigError("device_type", c.device_type, f"one of {list(self.device_types)}")
            x[i, 0] = math.log2(c.batch_size)
            x[i, 1] = c.replicas
            x[i, 2] = math.log2(c.input_bytes_per_row)
            x[i, 3 + self.device_types.index(c.device_type)] = 1.0
        return x
