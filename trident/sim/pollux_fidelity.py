"""Replaying Pollux's workloads and comparing with Pollux's published simulator results.

``read_workload`` turns a workload CSV (name, time, application, num_replicas,
batch_size) into :class:`~trident.sim.rounds.ElasticJob` s; ``fidelity`` replays it under
one policy and compares per-job JCTs with ``published/jobload_workloads_1-4.json``
(``{"<policy>-<load>": {"avg_jct_s": {workload: s}, "jct_s": {workload: {job: s}}}}``).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from trident.core.errors import ConfigError, TraceFormatError
from trident.jobs.elastic import OptimusAlloc, TiresiasAlloc
from trident.sim.rounds import ElasticJob, RoundConfig, replay

POLICIES = {"tiresias": TiresiasAlloc, "optimus": OptimusAlloc}


def read_workload(path: str | Path) -> list[ElasticJob]:
    """Jobs of a Pollux workload CSV, in file order."""
    path = Path(path)
    if not path.is_file():
        raise TraceFormatError(str(path), 0, "file not found")
    jobs = []
    with open(path, newline="") as f:
        for line, row in enumerate(csv.DictReader(f), start=2):
            try:
                jobs.append(ElasticJob(row["name"], row["application"], float(row["time"]),
                                       int(row["num_replicas"]), int(row["batch_size"])))
            except (KeyError, ValueError, TypeError) as exc:
                raise TraceFormatError(str(path), line, f"bad row {row}: {exc}") from None
    if not jobs:
        raise TraceFormatError(str(path), 0, "no jobs")
    return jobs


def workload_path(root: str | Path, workload: int, load: float) -> Path:
    """``<root>/workloads[-<load>]/workload-<n>.csv`` (load 1.0 lives in ``workloads/``)."""
    folder = "workloads" if load == 1.0 else f"workloads-{load:g}" if load != 2 else "workloads-2.0"
    if load not in (0.5, 1.0, 1.5, 2.0):
        raise ConfigError("load", load, "one of 0.5, 1.0, 1.5, 2.0")
    return Path(root) / folder / f"workload-{workload}.csv"


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation (average ranks for ties)."""
    from scipy.stats import spearmanr

    return float(spearmanr(a, b)[0])


def fidelity(jobs: list[ElasticJob], policy: str, published: dict, key: str, workload: str,
             config: RoundConfig | None = None) -> dict:
    """Replay ``jobs`` under ``policy`` and compare with ``published[key]`` for ``workload``.

    Returns a row: our and the published average JCT (s), their relative error (%), the
    per-job rank correlation and the replay's rounds."""
    if policy not in POLICIES:
        raise ConfigError("policy", policy, f"one of {sorted(POLICIES)}")
    if key not in published or workload not in published[key]["jct_s"]:
        raise ConfigError("published", f"{key}/{workload}", "an entry of the published results")
    res = replay(jobs, POLICIES[policy](), config)
    ours = dict(zip(res.job_ids, res.jct_s.tolist()))
    theirs = published[key]["jct_s"][workload]
    common = [k for k in theirs if k in ours]
    avg_ours = float(np.mean(res.jct_s))
    avg_pub = float(published[key]["avg_jct_s"][workload])
    return {"policy": policy, "workload": workload, "load": float(key.rsplit("-", 1)[1]), "jobs": len(jobs),
            "avg_jct_s": avg_ours, "published_avg_jct_s": avg_pub,
            "error_pct": 100.0 * (avg_ours - avg_pub) / avg_pub,
            "rank_correlation": spearman(np.array([ours[k] for k in common]), np.array([theirs[k] for k in common])),
            "rounds": res.rounds}


def load_published(path: str | Path) -> dict:
    with open(path) as f:
        return json.load(f)
