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
(``--weights``) and rltune/lazy (``rltune`` with a preemptor ranks running jobs too, merged
into the net's order by expected remaining time; the lazy preemptor decides).

A contender ending in ``+warm`` (e.g. ``rltune+warm``, ``sef+warm``, ``rltune/lazy+warm``)
starts with a warmed run-time history: the finished jobs of the training traces (Pollux
workloads 1-2 at load 1 for the Pollux cells; the Philly training trace of seed 0 at load 1
for the Philly cells), booked in the order they finished when replayed under fifo with the
same seed: jobs that finished earlier on the same cluster, observable to a deployed scheduler.
Writes
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
import signal
import time
from pathlib import Path

import numpy as np

import trident.jobs  # noqa: F401  (registers plug-ins)
from trident.jobs.base import JOB_POLICIES, PLACERS, PREEMPTORS, create_policy
from trident.jobs.predict import RunTimeHistory
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
              "srtf/lazy", "rltune-calibrated", "rltune/lazy")
WARM = "+warm"
HISTORY_READERS = ("rltune", "rltune-calibrated", "sef", "sref")
"""Policies that read the run-time history (the ones a ``+warm`` suffix applies to)."""
PHILLY_TRAIN = "seed=0/0e4a51.trace"


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


def training_traces(workload: str):
    """(nodes, jobs) of the training traces whose finished jobs warm the history for ``workload``."""
    if workload.startswith("pollux"):
        for w in (1, 2):
            trace = load_trace(f"pollux:{DATA / 'pollux' / POLLUX_DIRS[1.0] / f'workload-{w}.csv'}")
            yield trace.nodes, trace.jobs
    else:
        trace = load_trace(f"philly-gavel:{DATA / 'philly-gavel' / PHILLY_TRAIN}")
        yield trace.nodes, trace.jobs


def warm_history(workload: str, seed: int) -> RunTimeHistory:
    """A history pre-filled with the finished jobs of ``workload``'s training traces (replayed under
    fifo, booked as the simulator books them: run time outside setups, in the order they finished)."""
    history = RunTimeHistory()
    for nodes, jobs in training_traces(workload):
        policy = JOB_POLICIES.create("fifo")
        policy.observe_finish = history.observe
        Simulator(nodes=nodes, policy=policy, placer=PLACERS.create("first-fit"),
                  config=EngineConfig(seed=seed)).run(jobs)
    return history


def replay(contender: str, nodes, jobs, seed: int, weights: Path | None, history: RunTimeHistory | None = None):
    """Replay ``jobs`` under ``contender``; ``history`` (copied) pre-fills a history-reading policy's."""
    name, _, preemptor = contender.removesuffix(WARM).partition("/")
    kw = {} if history is None else {"history": history.copy()}
    if name == "rltune-calibrated":
        policy = create_policy("rltune", preemptor or None, weights=weights, **kw)
    elif name == "smallest-first":
        policy = SmallestFirst()
    else:
        policy = create_policy(name, preemptor or None, **kw)
    placer = PLACERS.create(getattr(policy, "placer", None) or "first-fit")
    sim = Simulator(nodes=nodes, policy=policy, placer=placer,
                    preemptor=PREEMPTORS.create(preemptor) if preemptor else None, config=EngineConfig(seed=seed))
    return sim.run(jobs)


def _give_up(signum, frame):
    raise TimeoutError


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workloads", choices=("all", "pollux", "philly"), default="all")
    ap.add_argument("--weights", type=Path, default=None, help="calibrated rltune weights (omit: not run)")
    ap.add_argument("--contenders", default=",".join(CONTENDERS[:5]),
                    help=f"comma-separated among {CONTENDERS}, those of {HISTORY_READERS} also with a "
                         f"'{WARM}' suffix (warmed history); fifo is always run first (the baseline)")
    ap.add_argument("--loads", default=None, help="comma-separated subset of the loads")
    ap.add_argument("--max-wall-s", type=int, default=0,
                    help="give up on a contender's replay after this many seconds (no row; 0: no limit)")
    ap.add_argument("--only", default=None, help="comma-separated workload names (e.g. pollux-w4)")
    ap.add_argument("--split", choices=("all", "unseen", "train"), default="all",
                    help="replay only the unseen (or training) workloads")
    ap.add_argument("--merge", action="store_true", help="keep the rows already in the JSON for other contenders")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--stem", default="job_layer_remeasure", help="name of the JSON and PNG under --out")
    args = ap.parse_args()
    signal.signal(signal.SIGALRM, _give_up)
    contenders = ["fifo"] + [c for c in args.contenders.split(",") if c and c != "fifo"]
    unknown = {c for c in contenders if c.removesuffix(WARM) not in CONTENDERS
               or (c.endswith(WARM) and c.split("/")[0].removesuffix(WARM) not in HISTORY_READERS)}
    if unknown or ("rltune-calibrated" in contenders and not args.weights):
        ap.error(f"unknown contenders {sorted(unknown)} (rltune-calibrated needs --weights)")
    loads = {float(x) for x in args.loads.split(",")} if args.loads else None
    path = args.out / f"{args.stem}.json"
    old = json.loads(path.read_text())["rows"] if args.merge and path.is_file() else []
    rows = []
    warmed: dict[str, RunTimeHistory] = {}
    for name, load, split, nodes, jobs in workloads(args.workloads):
        if ((loads is not None and load not in loads) or args.split not in ("all", split)
                or (args.only and name not in args.only.split(","))):
            continue
        cell = []
        for c in contenders:
            if c.endswith(WARM) and name.split("-")[0] not in warmed:
                warmed[name.split("-")[0]] = warm_history(name, args.seed)
            t0 = time.perf_counter()
            signal.alarm(args.max_wall_s)
            try:
                m = summarize(replay(c, nodes, jobs, args.seed, args.weights,
                                     warmed[name.split("-")[0]] if c.endswith(WARM) else None))
            except TimeoutError:
                print(f"{name} x{load:g}: {c} gave up after {args.max_wall_s} s", flush=True)
                continue
            finally:
                signal.alarm(0)
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
                                              "rltune_calibrated_weights": str(args.weights),
                                              "warm_history": "'+warm' contenders: history pre-filled with the "
                                              "finished jobs of pollux workloads 1-2 (load 1) / philly-gavel "
                                              f"{PHILLY_TRAIN} (load 1), replayed under fifo"},
                              benchmark="job_layer_remeasure")
        args.out.mkdir(parents=True, exist_ok=True)
        seen = {(r["workload"], r["load"]) for r in rows}
        doc["rows"] = rows + [r for r in old if (r["workload"], r["load"]) not in seen]  # cells not run yet
        path.write_text(json.dumps(doc, indent=2) + "\n")
    plot(doc["rows"], list(dict.fromkeys(r["policy"] for r in doc["rows"])),
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
        jct = {(r["workload"], r["load"], r["policy"]): r["avg_jct_s"] for r in rows}
        y = [jct.get((*cell, c), np.nan) / jct[(*cell, "fifo")] for cell in cells]  # nan: gave up
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
