"""Loaders of public GPU-cluster traces into one job schema (:class:`trident.jobs.base.Job`).

Every loader returns a :class:`Trace` (jobs, the cluster's nodes, and counts of rows
left out and why). A malformed row raises :class:`~trident.core.errors.TraceFormatError`
naming the file and line; with ``skip_bad=True`` it is skipped and counted instead.
Rows that are well formed but cannot be replayed (CPU-only pods, jobs that never
ran) are left out and counted under ``excluded``.

Kinds (``kind:path`` in the CLI): ``alibaba-2023``, ``philly-gavel``, ``pollux``,
``tiresias``, ``philly``, ``helios``, ``pai-2020``. The first four ship a small sample
inside the package (``trident/sim/data``), used when no path is given.
"""
from __future__ import annotations

import math
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from trident.core.errors import ConfigError
from trident.jobs.base import Job, Node
from trident.sim.loaders.alibaba import PAI_JOB_COLUMNS, PAI_MACHINE_COLUMNS, PAI_TASK_COLUMNS, load_alibaba_2023, \
    load_pai_2020
from trident.sim.loaders.common import MAX_GPUS_PER_NODE, MAX_JOB_GPUS, MAX_NODES, Trace
from trident.sim.loaders.helios import load_helios
from trident.sim.loaders.philly import GAVEL_MODELS, load_philly, load_philly_gavel
from trident.sim.loaders.pollux import load_pollux
from trident.sim.loaders.tiresias import load_tiresias

__all__ = ["GAVEL_MODELS", "LOADERS", "MAX_GPUS_PER_NODE", "MAX_JOB_GPUS", "MAX_NODES", "PAI_JOB_COLUMNS",
           "PAI_MACHINE_COLUMNS", "PAI_TASK_COLUMNS", "SHIPPED", "Trace", "load_alibaba_2023", "load_helios",
           "load_pai_2020", "load_philly", "load_philly_gavel", "load_pollux", "load_tiresias", "load_trace",
           "resample", "scale_cluster", "scale_load", "shipped_path"]


# --- registry of kinds, shipped samples, load scaling ---------------------------------------------------

LOADERS: dict[str, Callable[..., Trace]] = {
    "alibaba-2023": load_alibaba_2023, "philly-gavel": load_philly_gavel, "pollux": load_pollux,
    "tiresias": load_tiresias, "philly": load_philly, "helios": load_helios, "pai-2020": load_pai_2020,
}

SHIPPED = {"alibaba-2023": "alibaba-2023", "philly-gavel": "philly-gavel/2869ce.csv",
           "pollux": "pollux/workload-1.csv", "tiresias": "tiresias/60_job.csv"}
"""Kinds with a small sample inside the package (``trident/sim/data``)."""


def shipped_path(kind: str) -> Path:
    """Path of the sample shipped for ``kind``."""
    if kind not in SHIPPED:
        raise ConfigError("trace", kind, f"kind:PATH (no sample ships for {kind!r}; samples: {sorted(SHIPPED)})")
    return Path(str(resources.files("trident.sim").joinpath("data", SHIPPED[kind])))


def load_trace(spec: str, *, skip_bad: bool = False) -> Trace:
    """Load ``kind:path`` (or ``kind`` alone for a shipped sample)."""
    kind, _, where = spec.partition(":")
    if kind not in LOADERS:
        raise ConfigError("trace", spec, f"kind:PATH with kind one of {sorted(LOADERS)}")
    return LOADERS[kind](Path(where) if where else shipped_path(kind), skip_bad=skip_bad)


def scale_load(jobs: Sequence[Job], load: float) -> tuple[Job, ...]:
    """Compress arrival times by ``load`` (2.0 = jobs arrive twice as fast)."""
    if not load > 0:
        raise ConfigError("load", load, "a number > 0")
    if load == 1:
        return tuple(jobs)
    return tuple(replace(j, arrival_s=j.arrival_s / load) for j in jobs)


def resample(trace: Trace, n_jobs: int, *, seed: int) -> tuple[Job, ...]:
    """``n_jobs`` jobs drawn with replacement from ``trace`` (seeded), with inter-arrival
    gaps drawn from the trace's own gaps; ids are ``r<k>``."""
    if n_jobs < 1:
        raise ConfigError("n_jobs", n_jobs, "an integer >= 1")
    rng = np.random.default_rng(seed)
    src = trace.jobs
    gaps = np.diff([j.arrival_s for j in src]) if len(src) > 1 else np.array([0.0])
    picks = rng.integers(0, len(src), size=n_jobs)
    arrivals = np.concatenate([[0.0], np.cumsum(rng.choice(gaps, size=n_jobs - 1))])
    return tuple(replace(src[p], job_id=f"r{k}", arrival_s=float(a))
                 for k, (p, a) in enumerate(zip(picks.tolist(), arrivals.tolist())))


def scale_cluster(nodes: Sequence[Node], fraction: float) -> tuple[Node, ...]:
    """Keep the first ``ceil(fraction x count)`` GPU nodes of each GPU model (a smaller,
    same-shaped cluster, for contention on traces recorded on large clusters)."""
    if not 0 < fraction <= 1:
        raise ConfigError("cluster_fraction", fraction, "a number in (0, 1]")
    by_model: dict[str, list[Node]] = {}
    for n in nodes:
        if n.num_gpus > 0:
            by_model.setdefault(n.gpu_model, []).append(n)
    keep = {id(n) for group in by_model.values() for n in group[: math.ceil(fraction * len(group))]}
    return tuple(n for n in nodes if id(n) in keep)
