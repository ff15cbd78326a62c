"""The per-operator knobs the optimiser searches, and what one evaluation of them measured."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trident.core.errors import ConfigError


@dataclass(frozen=True)
class Knobs:
    """One operator configuration: rows per batch, replicas (actor concurrency) and device type."""

    batch_size: int
    concurrency: int
    device_type: str

    def __post_init__(self) -> None:
        if self.batch_size <= 0:
            raise ConfigError("batch_size", self.batch_size, "a positive integer")
        if self.concurrency <= 0:
            raise ConfigError("concurrency", self.concurrency, "a positive integer")


@dataclass(frozen=True)
class KnobSpace:
    """The discrete grid of knobs: every combination of the listed values (each sorted, distinct)."""

    batch_sizes: tuple[int, ...]
    concurrencies: tuple[int, ...]
    device_types: tuple[str, ...]

    def __post_init__(self) -> None:
        for name in ("batch_sizes", "concurrencies"):
            vals = getattr(self, name)
            if not vals or any(v <= 0 for v in vals) or list(vals) != sorted(set(vals)):
                raise ConfigError(name, vals, "a non-empty, strictly increasing tuple of positive integers")
        if not self.device_types or len(set(self.device_types)) != len(self.device_types):
            raise ConfigError("device_types", self.device_types, "a non-empty tuple of distinct names")

    def contains(self, knobs: Knobs) -> bool:
        return (
            knobs.batch_size in self.batch_sizes
            and knobs.concurrency in self.concurrencies
            and knobs.device_type in self.device_types
        )

    def grid(self) -> tuple[Knobs, ...]:
        """Every configuration, device-major, then batch size, then concurrency."""
        return tuple(
            Knobs(b, c, d) for d in self.device_types for b in self.batch_sizes for c in self.concurrencies
        )

    def minimal(self, device_type: str) -> Knobs:
        """The smallest configuration on ``device_type`` (smallest batch, fewest replicas)."""
        return Knobs(self.batch_sizes[0], self.concurrencies[0], device_type)

    def encode(self, knobs: Sequence[Knobs]) -> np.ndarray:
        """Shape ``(n, 2 + len(device_types))``: log2 batch and log2 concurrency scaled to [0, 1], device one-hot."""

        def unit(v: int, vals: tuple[int, ...]) -> float:
            lo, hi = math.log2(vals[0]), math.log2(vals[-1])
            return 0.0 if hi == lo else (math.log2(v) - lo) / (hi - lo)

        x = np.zeros((len(knobs), 2 + len(self.device_types)))
        for i, k in enumerate(knobs):
            if not self.contains(k):
                raise ConfigError("knobs", k, "a configuration on the KnobSpace grid")
            x[i, 0] = unit(k.batch_size, self.batch_sizes)
            x[i, 1] = unit(k.concurrency, self.concurrencies)
            x[i, 2 + self.device_types.index(k.device_type)] = 1.0
        return x


@dataclass(frozen=True)
class Observation:
    """One evaluated configuration: operator throughput (rows/s, all replicas) and heap per replica (bytes)."""

    knobs: Knobs
    throughput_rows_per_s: float
    memory_per_replica_bytes: float

    def __post_init__(self) -> None:
        if not (self.throughput_rows_per_s > 0 and math.isfinite(self.throughput_rows_per_s)):
            raise ConfigError("throughput_rows_per_s", self.throughput_rows_per_s, "a finite number > 0")
        if not (self.memory_per_replica_bytes > 0 and math.isfinite(self.memory_per_replica_bytes)):
            raise ConfigError("memory_per_replica_bytes", self.memory_per_replica_bytes, "a finite number > 0")
