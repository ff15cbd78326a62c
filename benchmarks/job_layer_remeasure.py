"""The job layer's claims re-measured on the calibrated simulator: learned priority vs FIFO, SJF,
Tiresias; lazy vs eager preemption.

Workloads (simulated; the setup of each (re)start is lognormal, median 5 min, p95 25 min,
seeded by --seed; a restart after a preemption adds 30 s):

- Pollux workloads 1-4 (16 nodes x 4 T4; each job's run time from its application's measured
  throughput tables), at loads 1.0, 1.5 and 2.0 (Pollux's own ``workloads``,
  ``workloads-1.5``, ``workloads-2.0`` arrival files). The calibrated ``rltune`` is trained on
  workloads 1-2 (``train_rltune.py --calibrated``); 3-4 are unseen.
- A Philly (Gavel) trace of seed 1 (``philly-gavel``, 108 GPUs of 3 models), never trained on,
  at loads 1.0, 1.5, 2.0 and 3.0.

Contenders: fifo, sjf (oracle: true durations), tiresias/eager, tiresias/lazy, rltune with the
shipped weights, smallest-first (fewest GPUs first: an observable order), sef and sref/lazy
(shortest expected (remaining) run time first, from the run times of finished jobs of the same
application and GPUs: observable), srtf/lazy (oracle), and rltune with other weights
(``--weights``). Writes
``<stem>.json`` (default ``job_layer_remeasure``; RESULTS.md shape, one row per workload, load
and contender) and ``<stem>.png`` (average JCT relative to FIFO).

    python benchmarks/train_rltune.py --calibrated --seed 0 --iterations 15 --out rltune_calibrated.pt
    python benchmarks/job_layer_remeasure.py --weights rltune_calibrated.pt --contenders rltune-calibrated \
        --stem job_layer_remeasure-calibrated                # the baselines: without --weights
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

import trident.sched  # noqa: F401  (registers plug-ins)
from trident.sched.base import JOB_POLICIES, PLACERS, PREEMPTORS
from trident.sched.rltune import RLTunePolicy
from trident.sim.compare import result_document
from trident.sim.engine import EngineConfig, Simulator
from trident.sim.metrics import summarize
from trident.sim.traces import load_trace, scale_load

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("TRIDENT_DATA", ROOT / ".." / "shared" / "data")) / "traces"
POLLUX_DIRS = {1.0: "workloads", 1.5: "workloads-1.5", 2.0: "workloads-2.0"}
PHILLY = "seed=1/103959.trace"
PHILLY_LOADS = (1.0, 1.5, 2.0, 3.0)
CONTENDERS = ("fifo", "sjf", "tiresias/eager", "tiresias/lazy", "rltune", "smallest-first", "sef", "sref/lazy",
              "srtf/lazy", "rltune-calibrated")


class SmallestFirst:
    """Observable reference order: fewest GPUs first, then by arrival (what the learned priority
    is warm-started to imitate; on the Pollux workloads GPUs predict run time well)."""

    name = "smallest-first"
    preemptive = False
    oracle = False

    def order(self, state, rng) -> tuple[str, ...]:
        return tuple(v.job_id for v in sorted(state.queued, key=lambda v: (v.job.num_gpus, v.job.arrival_s,
                                                                             v.job_id)))


def workloads(which: str):
    """(name, load, split, trace) to replay."""
    if which in ("all", "pollux"):
        for w in (3, 4, 1, 2):                       # the unseen ones first
            for load, folder in POLLUX_DIRS.items():
                trace = load_trace(f"pollux:{DATA / 'pollux' / folder / f'workload-{w}.csv'}")
                yield f"pollux-w{w}", load, "train" if w <= 2 else "unseen", trace.nodes, trace.jobs
    if which in ("all", "philly"):
        trace = load_trace(f"philly-gavel:{DATA / 'philly-gavel' / PHILLY}")
        for load in PHILLY_LOADS:
            yield "philly-" + Path(PHILLY).stem, load, "unseen", trace.nodes, scale_load(trace.jobs, load)


def replay(contender: str, nodes, jobs, seed: int, weights: Path | None):
    name, _, preemptor = contender.partition("/")
    if name == "rltune-calibrated":
        policy = RLTunePolicy(weights=weights)
    elif name == "smallest-first":
        policy = SmallestFirst()
    else:
        policy = JOB_POLICIES.create(name)
    placer = PLACERS.create(getattr(policy, "placer", None) or "first-fit")
    sim = Simulator(nodes=nodes, policy=policy, placer=placer,
                    preemptor=PREEMPTORS.create(preemptor) if preemptor else None, config=EngineConfig(seed=seed))
    return sim.run(jobs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workloads", choices=("all", "pollux", "philly"), default="all")
    ap.add_argument("--weights", type=Path, default=None, help="calibrated rltune weights (omit: not run)")
    ap.add_argument("--contenders", default=",".join(CONTENDERS[:5]),
                    help=f"comma-separated among {CONTENDERS}; fifo is always run first (the baseline)")
    ap.add_argument("--loads", default=None, help="comma-separated subset of the loads")
    ap.add_argument("--merge", action="store_true", help="keep the rows already in the JSON for other contenders")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--stem", default="job_layer_remeasure", help="name of the JSON and PNG under --out")
    args = ap.parse_args()
    contenders = ["fifo"] + [c for c in args.contenders.split(",") if c and c != "fifo"]
    unknown = set(contenders) - set(CONTENDERS)
    if unknown or ("rltune-calibrated" in contenders and not args.weights):
        ap.error(f"unknown contenders {sorted(unknown)} (rltune-calibrated needs --weights)")
    loads = {float(x) for x in args.loads.split(",")} if args.loads else None
    path = args.out / f"{args.stem}.json"
    old = json.loads(path.read_text())["rows"] if args.merge and path.is_file() else []
    rows = []
    for name, load, split, nodes, jobs in workloads(args.workloads):
        if loads is not None and load not in loads:
            continue
        cell = []
        for c in contenders:
            t0 = time.perf_counter()
            m = summarize(replay(c, nodes, jobs, args.seed, args.weights))
            cell.append({"workload": name, "load": load, "split": split, "policy": c,
                         "wall_s": round(time.perf_counter() - t0, 2), **m})
        fifo = cell[0]["avg_jct_s"]
        for r in cell:
            r["ratio_to_baseline"] = fifo / r["avg_jct_s"]
        done = {(r["workload"], r["load"], r["policy"]) for r in cell}
        rows += cell + [r for r in old if (r["workload"], r["load"]) == (name, load)
                        and (r["workload"], r["load"], r["policy"]) not in done]
        print(f"{name} x{load:g} ({split}): " + "  ".join(f"{r['policy']} {r['avg_jct_s']:.0f}" for r in cell),
              flush=True)
        doc = result_document(rows, workload={"name": "pollux workloads 1-4 and a philly-gavel trace",
                                              "seed": args.seed, "philly_trace": PHILLY,
                                              "pollux_loads": sorted(POLLUX_DIRS), "philly_loads": PHILLY_LOADS,
                                              "setup": "lognormal median 300 s p95 1500 s", "restore_s": 30.0,
                                              "rltune_calibrated_weights": str(args.weights)},
                              benchmark="job_layer_remeasure")
        args.out.mkdir(parents=True, exist_ok=True)
        seen = {(r["workload"], r["load"]) for r in rows}
        doc["rows"] += [r for r in old if (r["workload"], r["load"]) not in seen]
        path.write_text(json.dumps(doc, indent=2) + "\n")
    plot(doc["rows"], [c for c in CONTENDERS if any(r["policy"] == c for r in doc["rows"])],
         args.out / f"{args.stem}.png")
    return 0


def plot(rows: list[dict], contenders: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = list(dict.fromkeys((r["workload"], r["load"]) for r in rows))
    fig, ax = plt.subplots(figsize=(max(8, 0.6 * len(cells)), 4.5))
    width = 0.8 / len(contenders)
    for k, c in enumerate(contenders):
        y = [next(r["avg_jct_s"] / next(f["avg_jct_s"] for f in rows if (f["workload"], f["load"]) == cell
                                          and f["policy"] == "fifo")
                  for r in rows if (r["workload"], r["load"]) == cell and r["policy"] == c) for cell in cells]
        ax.bar(np.arange(len(cells)) + k * width, y, width, label=c)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(np.arange(len(cells)) + 0.4 - width / 2)
    ax.set_xticklabels([f"{w}\nx{ld:g}" for w, ld in cells], fontsize=7)
    ax.set_ylabel("average JCT / FIFO's")
    ax.set_yscale("log")
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
