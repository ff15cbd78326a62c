"""Generated scenarios on the fluid simulator: trident beside Ray Data's rule and the work bound,
on pipelines and clusters drawn from seeds (``trident.autoscaler.sim.generate``), not picked.

    python benchmarks/generated_scenarios.py --seeds 200            # seeds 0-199, the development set
    python benchmarks/generated_scenarios.py --holdout --seeds 50   # seeds 100000-100049, looked at last
    python benchmarks/generated_scenarios.py --seeds 20 --work-s 120

For each seed the same drawn pipeline runs under ``ray`` (Ray Data's own rule, as the simulator
plays it: ``trident.autoscaler.sim.ray_rule``) and ``trident`` (told the drawn memory limit),
seeded alike; the work bound is the time
no policy can beat (each regime phase at the best placement the nodes allow, changes free).
Writes ``benchmarks/results/generated_scenarios-<set>-<n>.json`` (RESULTS.md shape: one row per
seed and policy; the ``summary`` gives the share of seeds at >= 0.98x Ray, the median ratio, the
median fraction of the bound and, over trident's plans measured in all seeds, the median prediction
error, ``|predicted / measured - 1|`` of the last operator's rows/s from the plan's targets reached
to the next plan or a change of the data, as the run report reads it) and a PNG beside it. Every
seed where trident is below 0.98x Ray is written to
``benchmarks/results/generated_losses/seed-<n>.json`` with its description and trident's decisions:
replay it with ``draw(seed)``. A run still going at 8x the bound (at least an hour) is stopped and
marked unfinished (``summary.unfinished``): its ratio is a lower bound. Mode: simulated.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from trident.autoscaler.sim.generate import draw, work_bound_s
from trident.autoscaler.sim.pipeline import simulate
from trident.autoscaler.sim.ray_rule import RayRule
from trident.core.errors import ConfigError
from trident.core.policy import PolicyContext
from trident.report.predictions import plan_checks
from trident.sim.compare import result_document

HOLDOUT_FIRST = 100_000
"""Seeds from here on are the held-out set: run them only to judge a change, never to make one."""
LOSS = 0.98


def run_seed(seed: int, *, work_s: float) -> list[dict]:
    """The rows of one seed: ``ray`` then ``trident``, each with its ratio to ``ray`` and the bound."""
    drawn = draw(seed, work_s=work_s)
    bound = work_bound_s(drawn.spec)
    rows, results = [], {}
    context = PolicyContext(memory_limit_bytes=drawn.memory_limit_bytes, seed=seed)
    for policy in ("ray", "trident"):
        started = time.perf_counter()
        res = simulate(drawn.spec, policy=RayRule(context=context) if policy == "ray" else "trident", seed=seed,
                       max_time_s=max(3_600.0, 8 * bound), context=context)
        results[policy] = res
        rows.append({"policy": policy, "seed": seed, "wall_s": res.wall_s, "finished": res.finished,
                     "throughput_rows_per_s": res.throughput_rows_per_s, "oom_kills": res.oom_kills,
                     "reconfigurations": res.reconfigurations, "bound_s": bound,
                     "vs_bound": bound / res.wall_s if res.wall_s else None,
                     "sim_cpu_s": time.perf_counter() - started, "scenario": drawn.describe(),
                     "prediction_errors": [round(c.error, 4) for c in plan_checks(res) if c.error is not None]})
    for row in rows:
        row["ratio_to_baseline"] = results["ray"].wall_s / row["wall_s"] if row["wall_s"] else None
    return rows


def summary(rows: list[dict]) -> dict:
    ratios = [r["ratio_to_baseline"] for r in rows if r["policy"] == "trident"]
    bounds = [r["vs_bound"] for r in rows if r["policy"] == "trident" and r["vs_bound"] is not None]
    ray_bounds = [r["vs_bound"] for r in rows if r["policy"] == "ray" and r["vs_bound"] is not None]
    return {"seeds": len(ratios), "share_at_least_0.98x": sum(x >= LOSS for x in ratios) / len(ratios),
            "median_ratio": statistics.median(ratios), "worst_ratio": min(ratios), "best_ratio": max(ratios),
            "median_vs_bound": statistics.median(bounds), "ray_median_vs_bound": statistics.median(ray_bounds),
            "oom_kills": {p: sum(r["oom_kills"] for r in rows if r["policy"] == p) for p in ("ray", "trident")},
            "unfinished": {p: sorted(r["seed"] for r in rows if r["policy"] == p and not r["finished"])
                           for p in ("ray", "trident")},
            "losses": sorted(r["seed"] for r in rows if r["policy"] == "trident" and r["ratio_to_baseline"] < LOSS),
            **_prediction_summary([e for r in rows if r["policy"] == "trident" for e in r["prediction_errors"]])}


def _prediction_summary(errors: list[float]) -> dict:
    """trident's plans measured (targets reached, a window of data after) and their median error."""
    return {"plans_measured": len(errors), "prediction_error_median": statistics.median(errors) if errors else None,
            "plans_within_15%": sum(e <= 0.15 for e in errors) / len(errors) if errors else None}


def write_loss(seed: int, rows: list[dict], folder: Path, *, work_s: float) -> Path:
    """A seed trident lost, replayable: its description, both walls and trident's decisions."""
    drawn = draw(seed, work_s=work_s)
    res = simulate(drawn.spec, policy="trident", seed=seed,
                   context=PolicyContext(memory_limit_bytes=drawn.memory_limit_bytes, seed=seed))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"seed-{seed}.json"
    path.write_text(json.dumps({
        "seed": seed, "work_s": work_s, "scenario": drawn.describe(), "replay": f"draw({seed}, work_s={work_s})",
        "rows": [r for r in rows if r["seed"] == seed],
        "decisions": [{"time_s": d.time_s, "kind": str(d.kind), "reason": d.reason}
                      for d in res.decisions if d.kind not in ("observe", "dwell")]}, indent=1))
    return path


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tri = [r for r in rows if r["policy"] == "trident"]
    ray = {r["seed"]: r for r in rows if r["policy"] == "ray"}
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    ratios = [r["ratio_to_baseline"] for r in tri]
    a.hist(ratios, bins=np.geomspace(min(ratios + [0.1]), max(ratios + [10.0]), 40), color="tab:blue")
    a.set_xscale("log")
    a.axvline(1.0, color="k", lw=0.8)
    a.axvline(LOSS, color="tab:red", lw=0.8, ls="--")
    a.set_xlabel("trident vs Ray's rule (Ray wall / trident wall, log scale)")
    a.set_ylabel("seeds")
    b.scatter([ray[r["seed"]]["vs_bound"] for r in tri], [r["vs_bound"] for r in tri], s=10)
    b.plot([0, 1], [0, 1], color="k", lw=0.8)
    b.set_xlabel("Ray's rule: fraction of the work bound")
    b.set_ylabel("trident: fraction of the work bound")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=200, help="how many seeds")
    p.add_argument("--first", type=int, default=0, help="first seed of the development set")
    p.add_argument("--holdout", action="store_true", help=f"the held-out set (seeds from {HOLDOUT_FIRST})")
    p.add_argument("--work-s", type=float, default=240.0, help="each scenario's work bound, seconds")
    p.add_argument("--out", default="benchmarks/results", help="results folder")
    args = p.parse_args(argv)
    if args.seeds < 1 or args.first < 0 or args.work_s <= 0:
        raise ConfigError("--seeds/--first/--work-s", (args.seeds, args.first, args.work_s),
                          "seeds >= 1, first >= 0, work > 0 s")
    first = HOLDOUT_FIRST if args.holdout else args.first
    if not args.holdout and first + args.seeds > HOLDOUT_FIRST:
        raise ConfigError("--first/--seeds", (first, args.seeds), f"development seeds below {HOLDOUT_FIRST}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    for k, seed in enumerate(range(first, first + args.seeds)):
        rows += run_seed(seed, work_s=args.work_s)
        tri = rows[-1]
        print(f"[{k + 1}/{args.seeds}] seed {seed}: trident {tri['ratio_to_baseline']:.2f}x ray, "
              f"{tri['vs_bound']:.2f} of the bound", file=sys.stderr, flush=True)
    stats = summary(rows)
    name = f"generated_scenarios-{'holdout' if args.holdout else 'dev'}-{args.seeds}"
    doc = result_document(rows, workload={"name": "generated", "seeds": [first, first + args.seeds - 1],
                                          "work_s": args.work_s}, benchmark="generated_scenarios")
    doc["summary"] = stats
    (out / f"{name}.json").write_text(json.dumps(doc, indent=1))
    plot(rows, out / f"{name}.png", f"{stats['seeds']} generated scenarios: median {stats['median_ratio']:.2f}x "
                                    f"Ray's rule, {stats['share_at_least_0.98x']:.0%} at >= {LOSS}x")
    for seed in stats["losses"]:
        write_loss(seed, rows, out / "generated_losses", work_s=args.work_s)
    for seed in {r["seed"] for r in rows} - set(stats["losses"]):  # a seed lost no more keeps no case
        (out / "generated_losses" / f"seed-{seed}.json").unlink(missing_ok=True)
    print(json.dumps(stats, indent=1))
    print(f"wrote {out / name}.json and .png", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
