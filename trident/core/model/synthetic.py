"""Synthetic operators with known throughput and memory curves, and snapshot traces of them
with planted starvation, backpressure and spikes (ground truth for the filters and models)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trident.core.model.features import ConfigFeatures
from trident.core.types import OperatorConfig, OperatorSnapshot

REFERENCE_BYTES_PER_ROW = 16_384.0
CLEAN, SPIKE, STARVED, BACKPRESSURED = "clean", "spike", "starved", "backpressured"


@dataclass(frozen=True)
class SyntheticOperator:
    """True curves per device (``"cpu"``/``"gpu"``): rows/s per replica, heap and object-store bytes per replica.

    Throughput per replica: ``peak * b / (b + half_batch) * (ref / bytes_per_row) ** row_size_exponent
    / (1 + contention * (replicas - 1))``. Heap per replica: ``base + heap_per_row * b * bytes_per_row / ref``.
    Object store per replica: ``b * bytes_per_row * blocks_in_flight``.
    """

    peak_rows_per_s: tuple[float, float]
    half_batch_rows: tuple[float, float]
    row_size_exponent: float
    contention: float
    base_heap_bytes: tuple[float, float]
    heap_per_row_bytes: tuple[float, float]
    blocks_in_flight: float
    device_types: tuple[str, str] = ("cpu", "gpu")

    @classmethod
    def random(cls, rng: np.random.Generator) -> SyntheticOperator:
        return cls(
            peak_rows_per_s=(float(rng.uniform(20, 200)), float(rng.uniform(200, 2000))),
            half_batch_rows=(float(rng.uniform(8, 64)), float(rng.uniform(32, 256))),
            row_size_exponent=float(rng.uniform(0.3, 1.0)),
            contention=float(rng.uniform(0.0, 0.08)),
            base_heap_bytes=(float(rng.uniform(0.3, 2.0) * 2**30), float(rng.uniform(0.5, 1.5) * 2**30)),
            heap_per_row_bytes=(float(rng.uniform(2e3, 2e4)), float(rng.uniform(1e3, 1e4))),
            blocks_in_flight=float(rng.uniform(1.0, 3.0)),
        )

    def _dev(self, c: ConfigFeatures) -> int:
        return self.device_types.index(c.device_type)

    def rows_per_s_per_replica(self, c: ConfigFeatures) -> float:
        d, b = self._dev(c), c.batch_size
        rate = self.peak_rows_per_s[d] * b / (b + self.half_batch_rows[d])
        rate *= (REFERENCE_BYTES_PER_ROW / c.input_bytes_per_row) ** self.row_size_exponent
        return rate / (1.0 + self.contention * (c.replicas - 1))

    def heap_bytes_per_replica(self, c: ConfigFeatures) -> float:
        d = self._dev(c)
        return self.base_heap_bytes[d] + self.heap_per_row_bytes[d] * c.batch_size * c.input_bytes_per_row / REFERENCE_BYTES_PER_ROW

    def object_store_bytes_per_replica(self, c: ConfigFeatures) -> float:
        return c.batch_size * c.input_bytes_per_row * self.blocks_in_flight


@dataclass(frozen=True)
class SyntheticTrace:
    """Snapshots of one operator, their times (s) and what was planted in each (``clean``, ``spike``, ...)."""

    snapshots: tuple[OperatorSnapshot, ...]
    times_s: tuple[float, ...]
    labels: tuple[str, ...]
    configs: tuple[ConfigFeatures, ...]


def config_grid(
    *,
    batch_sizes: Sequence[int] = (16, 32, 64, 128, 256, 512, 1024),
    device_types: Sequence[str] = ("cpu", "gpu"),
    replicas: Sequence[int] = (1, 2, 4, 8),
    input_bytes_per_row: Sequence[float] = (4096.0, 16384.0, 65536.0),
) -> tuple[ConfigFeatures, ...]:
    """Every combination of the given values."""
    return tuple(
        ConfigFeatures(b, d, r, s) for d in device_types for b in batch_sizes for r in replicas for s in input_bytes_per_row
    )


def synthetic_trace(
    op: SyntheticOperator,
    configs: Sequence[ConfigFeatures],
    *,
    rng: np.random.Generator,
    samples_per_config: int = 8,
    interval_s: float = 1.0,
    noise: float = 0.03,
    spike_fraction: float = 0.10,
    starved_fraction: float = 0.0,
    backpressured_fraction: float = 0.0,
    name: str = "op",
) -> SyntheticTrace:
    """Run each configuration for ``samples_per_config`` intervals and record snapshots.

    Clean snapshots carry the true rate with multiplicative Gaussian ``noise``. Planted:
    spikes (rate x 1.8-3 for bursts, 70%, or x 0.3-0.55 for stalls), starvation (empty
    input queue, rate x 0.1-0.7) and backpressure (output blocked, rate x 0.1-0.7).
    """
    snaps, times, labels, cfgs = [], [], [], []
    t = 0.0
    rows_in = 0
    p = np.array([spike_fraction, starved_fraction, backpressured_fraction])
    for c in configs:
        for _ in range(samples_per_config):
            t += interval_s
            u = rng.random()
            label = CLEAN if u >= p.sum() else (SPIKE, STARVED, BACKPRESSURED)[int(np.searchsorted(np.cumsum(p), u, side="right"))]
            factor = 1.0 + noise * rng.standard_normal()
            if label == SPIKE:
                factor *= rng.uniform(1.8, 3.0) if rng.random() < 0.7 else rng.uniform(0.3, 0.55)
            elif label in (STARVED, BACKPRESSURED):
                factor *= rng.uniform(0.1, 0.7)
            rate = op.rows_per_s_per_replica(c) * c.replicas * factor
            rows_in += int(rate * interval_s) + 1
            snaps.append(
                OperatorSnapshot(
                    name=name,
                    index=0,
                    config=OperatorConfig(
                        kind="actor",
                        replicas=c.replicas,
                        batch_size=c.batch_size,
                        num_gpus=1.0 if c.device_type != "cpu" else 0.0,
                        accelerator_type=None if c.device_type in ("cpu", "gpu") else c.device_type,
                    ),
                    rows_out_per_s=rate,
                    rows_in_total=rows_in,
                    bytes_in_total=int(rows_in * c.input_bytes_per_row),
                    tasks_running=c.replicas,
                    actors_running=c.replicas,
                    input_queue_blocks=0 if label == STARVED else int(rng.integers(1, 20)),
                    backpressured=label == BACKPRESSURED,
                    heap_rss_per_replica_bytes=int(op.heap_bytes_per_replica(c) * (1 + noise * rng.standard_normal())),
                    object_store_bytes=int(op.object_store_bytes_per_replica(c) * c.replicas * (1 + noise * rng.standard_normal())),
                )
            )
            times.append(t)
            labels.append(label)
            cfgs.append(c)
    return SyntheticTrace(tuple(snaps), tuple(times), tuple(labels), tuple(cfgs))
