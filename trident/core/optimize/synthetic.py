"""Synthetic operators with an out-of-memory cliff: ground truth for the safe optimiser.

Memory per replica is a fixed part (model weights, runtime) plus a part proportional
to the batch; the operator's memory is replicas x that plus a fixed overhead. Throughput
per replica saturates with batch size, and replicas contend for a shared resource, so
the best configuration lies just below the memory limit.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trident.core.optimize.space import KnobSpace, Knobs, Observation

GIB = 2**30


@dataclass(frozen=True)
class OomCliffObjective:
    """Ground truth per device (dicts keyed by device type, stored as tuples of pairs)."""

    base_memory_bytes: tuple[tuple[str, float], ...]
    memory_per_row_bytes: tuple[tuple[str, float], ...]
    peak_rows_per_s: tuple[tuple[str, float], ...]
    half_batch_rows: tuple[tuple[str, float], ...]
    contention: float
    fixed_memory_bytes: float
    memory_limit_bytes: float
    throughput_noise: float = 0.02
    memory_noise: float = 0.01

    @classmethod
    def random(cls, rng: np.random.Generator, space: KnobSpace) -> OomCliffObjective:
        """A random instance whose memory limit cuts through the grid."""
        devs = space.device_types
        base = {d: rng.uniform(0.5, 2.0) * GIB for d in devs}
        per_row = {d: rng.uniform(2.0, 8.0) * 2**20 for d in devs}
        peak = {d: rng.uniform(50.0, 400.0) * (1 + 3 * i) for i, d in enumerate(devs)}
        half = {d: rng.uniform(16.0, 256.0) for d in devs}
        obj = cls(
            base_memory_bytes=tuple(base.items()),
            memory_per_row_bytes=tuple(per_row.items()),
            peak_rows_per_s=tuple(peak.items()),
            half_batch_rows=tuple(half.items()),
            contention=float(rng.uniform(0.02, 0.1)),
            fixed_memory_bytes=float(rng.uniform(0.5, 1.0) * GIB),
            memory_limit_bytes=0.0,
        )
        totals = np.array([obj.total_memory_bytes(k) for k in space.grid()])
        limit = float(rng.uniform(np.quantile(totals, 0.3), np.quantile(totals, 0.6)))
        return cls(**{**obj.__dict__, "memory_limit_bytes": limit})

    def _get(self, table: tuple[tuple[str, float], ...], device: str) -> float:
        return dict(table)[device]

    def memory_per_replica_bytes(self, k: Knobs) -> float:
        return self._get(self.base_memory_bytes, k.device_type) + self._get(self.memory_per_row_bytes, k.device_type) * k.batch_size

    def total_memory_bytes(self, k: Knobs) -> float:
        return self.fixed_memory_bytes + k.concurrency * self.memory_per_replica_bytes(k)

    def throughput_rows_per_s(self, k: Knobs) -> float:
        b = k.batch_size
        per_replica = self._get(self.peak_rows_per_s, k.device_type) * b / (b + self._get(self.half_batch_rows, k.device_type))
        return k.concurrency * per_replica / (1.0 + self.contention * (k.concurrency - 1))

    def is_safe(self, k: Knobs) -> bool:
        return self.total_memory_bytes(k) <= self.memory_limit_bytes

    def optimum(self, space: KnobSpace) -> tuple[Knobs, float]:
        """The best safe configuration and its throughput (brute force over the grid)."""
        best = max((k for k in space.grid() if self.is_safe(k)), key=self.throughput_rows_per_s)
        return best, self.throughput_rows_per_s(best)

    def evaluate(self, k: Knobs, rng: np.random.Generator) -> Observation:
        """A noisy measurement of ``k`` (multiplicative Gaussian noise)."""
        return Observation(
            knobs=k,
            throughput_rows_per_s=self.throughput_rows_per_s(k) * (1 + self.throughput_noise * rng.standard_normal()),
            memory_per_replica_bytes=self.memory_per_replica_bytes(k) * (1 + self.memory_noise * rng.standard_normal()),
        )
