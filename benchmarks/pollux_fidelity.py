"""Fidelity of the job layer's elastic replay against Pollux's published simulator results.

Replays Pollux's workloads 1-4 at job loads 0.5, 1.0, 1.5 and 2.0 under Tiresias (as
Pollux configured it) and the Optimus-like policy on 16 nodes x 4 GPUs, and compares the
average JCT per workload and the per-job JCT ranks with the published figures.

    python benchmarks/pollux_fidelity.py [--data ../shared/data/traces/pollux] [--out benchmarks/results]

Writes ``pollux_fidelity.json`` (RESULTS.md shape; one row per policy, load, workload)
and ``pollux_fidelity.png`` (ours vs published average JCT).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from trident.sim.compare import result_document
from trident.sim.pollux_fidelity import fidelity, load_published, read_workload, workload_path

DEFAULT_DATA = Path(os.environ.get("TRIDENT_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, policy in zip(axes, ("tiresias", "optimus")):
        sel = [r for r in rows if r["policy"] == policy]
        for load, marker in zip((0.5, 1.0, 1.5, 2.0), "os^D"):
            pts = [r for r in sel if r["load"] == load]
            ax.scatter([r["published_avg_jct_s"] / 3600 for r in pts], [r["avg_jct_s"] / 3600 for r in pts],
                       marker=marker, label=f"load {load:g}")
        hi = max([r["published_avg_jct_s"] for r in sel] + [r["avg_jct_s"] for r in sel] + [1]) / 3600 * 1.1
        ax.plot([0, hi], [0, hi], "k-", linewidth=0.8)
        ax.fill_between([0, hi], [0, 0.9 * hi], [0, 1.1 * hi], color="grey", alpha=0.2, label="±10%")
        ax.set_xlabel("published average JCT (h)")
        ax.set_ylabel("trident average JCT (h)")
        ax.set_title(policy)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA / "traces" / "pollux"))
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--policies", default="tiresias,optimus")
    ap.add_argument("--loads", default="0.5,1.0,1.5,2.0")
    ap.add_argument("--workloads", default="1,2,3,4")
    args = ap.parse_args()
    published = load_published(Path(args.data) / "published" / "jobload_workloads_1-4.json")
    rows = []
    for policy in args.policies.split(","):
        for load in (float(x) for x in args.loads.split(",")):
            for w in (int(x) for x in args.workloads.split(",")):
                t0 = time.perf_counter()
                jobs = read_workload(workload_path(args.data, w, load))
                row = fidelity(jobs, policy, published, f"{policy}-{load:.1f}", f"workload-{w}")
                row["wall_s"] = time.perf_counter() - t0
                rows.append(row)
                print(f"{policy:8s} load {load:3.1f} workload-{w}: ours {row['avg_jct_s']:8.0f} s  "
                      f"published {row['published_avg_jct_s']:8.0f} s  error {row['error_pct']:+6.1f}%  "
                      f"rank corr {row['rank_correlation']:.3f}", flush=True)
    for r in rows:
        r["policy_label"] = f"{r['policy']}@{r['load']:g}/{r['workload']}"
    doc = result_document(rows, workload={"name": "pollux-jobload", "seed": 0, "cluster": "16 nodes x 4 GPUs",
                                          "round_s": 60, "restart_s": 30},
                          benchmark="pollux_fidelity")
    doc["baseline"] = "published"
    doc["summary"] = {
        "max_abs_error_pct": max(abs(r["error_pct"]) for r in rows),
        "min_rank_correlation": min(r["rank_correlation"] for r in rows),
        "within_10pct": sum(abs(r["error_pct"]) <= 10 for r in rows), "cases": len(rows)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pollux_fidelity.json").write_text(json.dumps(doc, indent=2) + "\n")
    plot(rows, out / "pollux_fidelity.png")
    print(json.dumps(doc["summary"]), f"-> {out / 'pollux_fidelity.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
