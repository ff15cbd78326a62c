"""Run FGD's allocation experiment over placers and seeds; JSON (RESULTS.md shape) and the curve plot.

``trident simulate --experiment allocation --trace alibaba-fgd:PODS.csv --placer fgd,best-fit``
(``--nodes NODES.csv``, default the node list beside the pod list; ``--seeds 42-51``).
"""
from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import numpy as np

from trident.core.errors import ConfigError
from trident.jobs.frag_placers import PLACERS
from trident.sim.allocation import EXPERIMENT_PLACERS, AllocationCurve, load_nodes, load_pods, run
from trident.sim.compare import result_document

NODE_LIST = "openb_node_list_gpu_node.csv"
EXPECTED = "expected_allocation_ratio.csv"
PUBLISHED_NAMES = {"random": "01-Random", "dotprod": "02-DotProd", "gpu-clustering": "03-GpuClustering",
                   "gpu-packing": "04-GpuPacking", "best-fit": "05-BestFit", "fgd": "06-FGD"}


def parse_seeds(text: str) -> list[int]:
    """``"42-51"`` or ``"42,43"``."""
    try:
        if "-" in text:
            lo, hi = (int(x) for x in text.split("-"))
            return list(range(lo, hi + 1))
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError("seeds", text, "'LO-HI' or a comma-separated list of integers") from None


def published_at(path: Path, workload: str, pct: int = 100) -> dict[str, float]:
    """Mean over seeds of the published allocation ratio at ``pct`` % arrived demand, per placer."""
    out: dict[str, list[float]] = {}
    if not path.is_file():
        return {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row["workload"] == workload and row.get(str(pct)):
                out.setdefault(row["sc_policy"], []).append(float(row[str(pct)]))
    names = {v: k for k, v in PUBLISHED_NAMES.items()}
    return {names[k]: float(np.mean(v)) for k, v in out.items() if k in names}


def experiment(pods_csv: str | Path, placers: list[str], seeds: list[int], *, nodes_csv: str | Path | None = None,
               ratio: float = 1.3, log=print) -> tuple[list[dict], dict[str, list[AllocationCurve]]]:
    """Rows (one per placer: mean/min/max allocation ratio at 100 % arrived demand, failed
    pods, wall time, the published figure when known) and the curves per placer."""
    pods_csv = Path(pods_csv)
    unknown = [p for p in placers if p not in EXPERIMENT_PLACERS]
    if unknown:
        raise ConfigError("placer", ",".join(unknown), f"placers among {EXPERIMENT_PLACERS}")
    cluster = load_nodes(nodes_csv or pods_csv.parent / NODE_LIST)
    pods = load_pods(pods_csv, cluster)
    published = published_at(pods_csv.parent / EXPECTED, pods_csv.stem)
    rows, curves = [], {}
    for placer in placers:
        t0 = time.perf_counter()
        curves[placer] = [run(cluster, pods, placer, seed=s, ratio=ratio) for s in seeds]
        at100 = np.array([c.allocated_pct[100] for c in curves[placer]])
        row = {"policy": placer, "alloc_at_100_pct": float(at100.mean()), "alloc_at_100_min_pct": float(at100.min()),
               "alloc_at_100_max_pct": float(at100.max()),
               "failed_pods": float(np.mean([c.failed for c in curves[placer]])),
               "seeds": len(seeds), "wall_s": time.perf_counter() - t0}
        if placer in published:
            row["published_alloc_at_100_pct"] = published[placer]
            row["diff_pct_points"] = row["alloc_at_100_pct"] - published[placer]
        rows.append(row)
        log(f"{pods_csv.stem} {placer:15s} allocation at 100% demand {row['alloc_at_100_pct']:6.2f}%"
            + (f"  published {published[placer]:6.2f}%" if placer in published else "")
            + f"  ({len(seeds)} seeds, {row['wall_s']:.0f} s)")
    return rows, curves


def plot(curves: dict[str, list[AllocationCurve]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for placer, cs in curves.items():
        y = np.array([np.nan if v is None else v for v in curve_mean(cs)])
        ax.plot(np.arange(len(y)), y, label=placer)
    ax.plot([0, 100], [0, 100], "k:", linewidth=0.8)
    ax.set_xlabel("arrived GPU demand (% of cluster GPUs)")
    ax.set_ylabel("GPU allocation ratio (%)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(rows: list[dict], curves: dict[str, list[AllocationCurve]], out_dir: str | Path, stem: str,
          workload: dict) -> tuple[Path, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc = result_document(rows, workload=workload, benchmark="allocation")
    doc["curves_pct"] = {p: curve_mean(cs) for p, cs in curves.items()}
    json_path, png_path = out / f"{stem}.json", out / f"{stem}.png"
    json_path.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    plot(curves, png_path, workload.get("name", stem))
    return json_path, png_path


def curve_mean(cs: list[AllocationCurve]) -> list[float | None]:
    """Mean curve over seeds, rounded; percents no run reached are None."""
    y = np.array([c.allocated_pct for c in cs])
    return [round(float(np.mean(col[np.isfinite(col)])), 2) if np.isfinite(col).any() else None for col in y.T]


def cli_main(args) -> int:
    """``trident simulate --experiment allocation``: ``--trace alibaba-fgd:PODS.csv``,
    ``--placer`` (comma-separated, default all six), ``--seeds``, ``--nodes``, ``--out``."""
    import sys

    kind, _, path = args.trace.partition(":")
    if kind != "alibaba-fgd" or not path:
        print("trident simulate: --experiment allocation needs --trace alibaba-fgd:PODS.csv", file=sys.stderr)
        return 2
    placers = args.placer.split(",") if args.placer else list(PLACERS)
    try:
        rows, curves = experiment(path, placers, parse_seeds(args.seeds), nodes_csv=args.nodes)
    except (ConfigError, OSError) as exc:
        print(f"trident simulate: {exc}", file=sys.stderr)
        return 2
    stem = "allocation-" + Path(path).stem
    json_path, png_path = write(rows, curves, args.out, stem,
                                {"name": Path(path).stem, "seed": args.seeds, "tune_ratio": 1.3})
    print(f"wrote {json_path} and {png_path}")
    return 0
