"""Run several job policies on one trace side by side, and write the result (RESULTS.md shape).

An entry names a policy and, optionally, a preemptor and a placer:
``"fifo"``, ``"srtf/eager"``, ``"rltune/lazy/milp"``. Without a placer the policy's
preferred one (its ``placer`` attribute) is used, else first-fit.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

import trident.jobs  # noqa: F401  (registers the built-in plug-ins)
from trident.core.errors import ConfigError
from trident.jobs.base import PLACERS, PREEMPTORS, Job, Node, create_policy
from trident.sim.engine import EngineConfig, SimResult, Simulator
from trident.sim.metrics import summarize


@dataclass(frozen=True)
class Entry:
    """One contender: policy, preemptor (None = no preemption) and placer names."""

    policy: str
    preemptor: str | None = None
    placer: str | None = None

    @classmethod
    def parse(cls, text: str) -> "Entry":
        parts = [p.strip() for p in text.split("/")]
        if not 1 <= len(parts) <= 3 or not all(parts):
            raise ConfigError("policy", text, "POLICY[/PREEMPTOR[/PLACER]], e.g. 'srtf/eager'")
        pre = parts[1] if len(parts) > 1 and parts[1] != "none" else None
        return cls(parts[0], pre, parts[2] if len(parts) > 2 else None)

    @property
    def label(self) -> str:
        return "/".join(p for p in (self.policy, self.preemptor, self.placer) if p)


def simulate(entry: Entry, nodes: Sequence[Node], jobs: Sequence[Job], config: EngineConfig, *,
             progress: Callable[[int, int], None] | None = None) -> SimResult:
    """Build the named plug-ins fresh and replay ``jobs``."""
    policy = create_policy(entry.policy, entry.preemptor)
    placer = PLACERS.create(entry.placer or getattr(policy, "placer", None) or "first-fit")
    preemptor = PREEMPTORS.create(entry.preemptor) if entry.preemptor else None
    return Simulator(nodes=nodes, policy=policy, placer=placer, preemptor=preemptor,
                     config=config).run(jobs, progress=progress)


def compare(entries: Sequence[Entry], nodes: Sequence[Node], jobs: Sequence[Job], config: EngineConfig, *,
            progress_factory: Callable[[Entry, int], Callable[[int, int], None] | None] | None = None,
            ) -> tuple[list[dict], list[SimResult]]:
    """Replay ``jobs`` under each entry; rows carry the metrics, ``wall_s`` and
    ``ratio_to_baseline`` = the first entry's avg JCT / this entry's (above 1 = faster)."""
    rows: list[dict] = []
    results: list[SimResult] = []
    for e in entries:
        cb = progress_factory(e, len(jobs)) if progress_factory else None
        t0 = time.perf_counter()
        result = simulate(e, nodes, jobs, config, progress=cb)
        wall = time.perf_counter() - t0
        row = {"policy": e.label, "wall_s": round(wall, 3), **summarize(result)}
        rows.append(row)
        results.append(result)
    base = rows[0].get("avg_jct_s")
    for row in rows:
        if base and row.get("avg_jct_s"):
            row["ratio_to_baseline"] = base / row["avg_jct_s"]
    return rows, results


def result_document(rows: list[dict], *, workload: dict, benchmark: str = "simulate") -> dict:
    """The RESULTS.md JSON document around ``rows``."""
    def version(pkg: str) -> str | None:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None

    try:
        import psutil
        memory_gib = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        memory_gib = None
    return {
        "benchmark": benchmark,
        "trident_version": version("trident"),
        "ray_version": version("ray"),
        "started_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"cpus": os.cpu_count(), "memory_gib": memory_gib, "gpus": 0},
        "workload": {**workload, "mode": "simulated"},
        "baseline": rows[0]["policy"] if rows else None,
        "rows": rows,
    }


def plot(results: Sequence[SimResult], labels: Sequence[str], path: str | Path, *, title: str = "") -> None:
    """JCT CDF (log scale) and GPU utilisation over time, one line per contender."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for r, label in zip(results, labels):
        jct = np.sort(r.finish_s - r.arrival_s)
        if len(jct):
            ax1.plot(np.maximum(jct, 1.0), np.arange(1, len(jct) + 1) / len(jct), label=label)
        if len(r.timeline_s) > 1:
            t = r.timeline_s
            step = max(1, len(t) // 2000)
            ax2.step(t[::step] / 3600.0, 100.0 * r.used_gpus[::step] / r.total_gpus, where="post", label=label,
                     linewidth=0.8)
    ax1.set_xscale("log")
    ax1.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax1.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax1.set_xlabel("job completion time [s] (log scale)")
    ax1.set_ylabel("fraction of jobs finished")
    ax1.set_title("job completion time (CDF: higher and further left is better)")
    ax2.set_xlabel("simulated time [h]")
    ax2.set_ylabel("GPUs held [% of the cluster]")
    ax2.set_title("GPU utilisation over time")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, title="policy", title_fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(doc: dict, results: Sequence[SimResult], out_dir: str | Path, stem: str) -> tuple[Path, Path]:
    """Write ``<stem>.json`` and ``<stem>.png`` under ``out_dir``; returns both paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = out / f"{stem}.json", out / f"{stem}.png"
    json_path.write_text(json.dumps(doc, indent=2) + "\n")
    w = doc["workload"]
    title = str(w.get("name", "")) + "".join(f", {k} {w[k]}" for k in ("jobs", "load", "seed") if k in w)
    plot(results, [r["policy"] for r in doc["rows"]], png_path, title=title)
    return json_path, png_path
