"""The fluid simulator's model of a pipeline: its operators (rates per device and batch,
heap, regimes), the cluster's nodes and the run's limits (see :mod:`trident.autoscaler.sim.pipeline`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trident.core.cluster import NodeShape
from trident.core.errors import ConfigError
from trident.core.types import ClusterView

CPU = "cpu"


@dataclass(frozen=True)
class Regime:
    """From ``start`` on (seconds or dataset rows, per the operator's ``regime_by``), the
    operator runs at ``rate_scale`` x its speed, ``memory_scale`` x its per-batch heap, and its
    input rows are ``bytes_per_row_scale`` x as large."""

    start: float
    rate_scale: float = 1.0
    memory_scale: float = 1.0
    bytes_per_row_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.start < 0:
            raise ConfigError("Regime.start", self.start, "a number >= 0")
        if min(self.rate_scale, self.memory_scale, self.bytes_per_row_scale) <= 0:
            raise ConfigError("Regime scales", (self.rate_scale, self.memory_scale, self.bytes_per_row_scale),
                              "numbers > 0")


@dataclass(frozen=True, kw_only=True)
class SimOperator:
    """One operator: its cost and memory curves, resources per replica, and starting configuration."""

    name: str
    kind: Literal["task", "actor"]
    peak_rows_per_s: tuple[tuple[str, float], ...]
    """Input rows per second of one replica at a very large batch, per device ('cpu' or a GPU type)."""
    half_batch_rows: float = 0.0
    selectivity: float = 1.0
    replicas: int
    min_replicas: int = 1
    max_replicas: int | None = None
    batch_size: int | None = None
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    accelerator_type: str | None = None
    heap_base_bytes: float = 0.0
    heap_per_batch_row_bytes: float = 0.0
    cold_start_s: float = 0.0
    regimes: tuple[Regime, ...] = ()
    regime_by: Literal["time", "rows"] = "time"

    def __post_init__(self) -> None:
        if self.kind not in ("task", "actor"):
            raise ConfigError(f"{self.name}.kind", self.kind, "'task' or 'actor'")
        if not self.peak_rows_per_s or any(r <= 0 for _, r in self.peak_rows_per_s):
            raise ConfigError(f"{self.name}.peak_rows_per_s", self.peak_rows_per_s, "(device, rows/s > 0) pairs")
        if self.selectivity <= 0:
            raise ConfigError(f"{self.name}.selectivity", self.selectivity, "a number > 0")
        if self.replicas < 0 or self.cold_start_s < 0 or self.half_batch_rows < 0:
            raise ConfigError(f"{self.name}.replicas/cold_start_s/half_batch_rows",
                              (self.replicas, self.cold_start_s, self.half_batch_rows), "numbers >= 0")
        if self.regime_by not in ("time", "rows"):
            raise ConfigError(f"{self.name}.regime_by", self.regime_by, "'time' or 'rows'")
        if self.num_gpus > 0 and self.device(self.accelerator_type, self.num_gpus) not in dict(self.peak_rows_per_s):
            raise ConfigError(f"{self.name}.accelerator_type", self.accelerator_type,
                              f"a device of peak_rows_per_s ({[d for d, _ in self.peak_rows_per_s]})")

    def device(self, accelerator_type: str | None, num_gpus: float) -> str:
        if num_gpus <= 0:
            return CPU
        return accelerator_type or next(d for d, _ in self.peak_rows_per_s if d != CPU)

    def regime(self, time_s: float, dataset_row: float) -> Regime:
        pos = time_s if self.regime_by == "time" else dataset_row
        current = Regime(start=0.0)
        for r in sorted(self.regimes, key=lambda r: r.start):
            if r.start <= pos:
                current = r
        return current

    def rate_rows_per_s(self, device: str, batch_size: int | None, regime: Regime) -> float:
        """Input rows per second of one warm replica (0 on a device it cannot use)."""
        peak = dict(self.peak_rows_per_s).get(device, 0.0)
        b = batch_size or 1024
        return peak * (b / (b + self.half_batch_rows)) * regime.rate_scale

    def heap_bytes(self, batch_size: int | None, regime: Regime) -> float:
        return self.heap_base_bytes + self.heap_per_batch_row_bytes * (batch_size or 1024) * regime.memory_scale


@dataclass(frozen=True, kw_only=True)
class SimNodes:
    """``count`` identical nodes."""

    count: int
    cpus: float
    gpus: float = 0.0
    gpu_type: str | None = None


@dataclass(frozen=True, kw_only=True)
class PipelineSpec:
    """A pipeline (operators in order; the first reads the dataset), its cluster and data."""

    operators: tuple[SimOperator, ...]
    nodes: tuple[SimNodes, ...]
    total_rows: int
    input_bytes_per_row: float = 1e5
    memory_limit_bytes: int | None = None
    queue_limit_rows: float = 5_000.0
    rows_per_block: int = 100
    noise: float = 0.05
    """Relative standard deviation of a replica's speed from one step to the next."""
    spike_prob: float = 0.02
    """Chance per operator per step of a burst (continuous batching) of 1.5-2.5x speed."""
    start_slots: int | None = None
    """Actor replicas starting at once at most, over all operators, as the shim's start gate
    (:mod:`trident.autoscaler.shim.starts`); ``None``: no limit. The model's cold start does not grow
    with the replicas starting beside it."""
    actor_spawn_s: float = 0.0
    """CPU-seconds an actor replica's process takes to start (interpreter, imports) before its cold
    start, on ``host_cores`` cores that every replica starting at once shares (the nodes of a
    ``ray.cluster_utils.Cluster`` are one machine); 0: free, as where each node is its own host."""
    host_cores: int = 1
    """The cores replicas' process starts share (with ``actor_spawn_s``)."""
    task_latency_s: float = 0.0
    """Seconds a task operator's task takes beyond its work (scheduling, its block's transfer): a
    task of ``rows_per_block`` rows takes ``rows / rate + task_latency_s``. Actor pools keep a
    second task in flight and hide it."""
    task_overhead_s: float = 0.0
    """CPU-seconds of the host's each task costs beyond its work, on ``host_cores`` cores shared by
    every task running at once: with ``c`` tasks at once a task's latency is at least
    ``c * task_overhead_s / host_cores`` (the host handles at most ``host_cores / task_overhead_s``
    tasks a second)."""

    def __post_init__(self) -> None:
        if not self.operators:
            raise ConfigError("operators", self.operators, "at least one SimOperator")
        if self.total_rows <= 0:
            raise ConfigError("total_rows", self.total_rows, "an integer > 0")
        if self.queue_limit_rows <= 0 or self.rows_per_block <= 0:
            raise ConfigError("queue_limit_rows/rows_per_block", (self.queue_limit_rows, self.rows_per_block),
                              "numbers > 0")
        if self.noise < 0 or not 0 <= self.spike_prob <= 1:
            raise ConfigError("noise/spike_prob", (self.noise, self.spike_prob), "noise >= 0, spike_prob in [0, 1]")
        if self.start_slots is not None and self.start_slots < 1:
            raise ConfigError("start_slots", self.start_slots, "None or an integer >= 1")
        if not (self.actor_spawn_s >= 0 and self.host_cores >= 1 and self.task_latency_s >= 0
                and self.task_overhead_s >= 0):
            raise ConfigError("actor_spawn_s/host_cores/task_latency_s/task_overhead_s",
                              (self.actor_spawn_s, self.host_cores, self.task_latency_s, self.task_overhead_s),
                              "actor_spawn_s >= 0, host_cores >= 1, task_latency_s >= 0, task_overhead_s >= 0")

    def cluster_view(self) -> ClusterView:
        by_type: dict[str, float] = {}
        cpus_by_type: dict[str, float] = {}
        for n in self.nodes:
            if n.gpus > 0:
                t = n.gpu_type or "gpu"
                by_type[t] = by_type.get(t, 0.0) + n.count * n.gpus
                cpus_by_type[t] = cpus_by_type.get(t, 0.0) + n.count * n.cpus
        nodes = tuple(NodeShape(node_id=f"{g}-{k}", cpus=n.cpus, gpus=n.gpus,
                                accelerator_type=(n.gpu_type or "gpu") if n.gpus > 0 else None)
                      for g, n in enumerate(self.nodes) for k in range(n.count))
        return ClusterView(cpus=sum(n.count * n.cpus for n in self.nodes),
                           gpus=sum(n.count * n.gpus for n in self.nodes),
                           gpus_by_type=tuple(sorted(by_type.items())),
                           cpus_by_type=tuple(sorted(cpus_by_type.items())), memory_limit_bytes=self.memory_limit_bytes,
                           nodes=nodes)
