"""Pipelines and training jobs from many drivers on one cluster of two accelerator types: stock
Ray Data against ``trident.autoscale()`` without the cluster's arbiter and with it.

A ``ray.cluster_utils.Cluster`` held by this script: a head of 4 CPUs and no GPU, a node of 4 CPUs
and 2 logical GPUs of type A, one of 4 CPUs and 2 of type B (``accelerator_type:<T>``, as Ray
gives it). Drawn from ``--seed``, each its own driver process connected to it:

- six pipelines, the first try's (``benchmarks/first_try.py``: a CPU task stage, then Detect and
  Embed, two pools of 0.5 GPU with 1 to 6 actors; ``time.sleep`` stands in for the models), of
  12,000, 6,000 (two), and 2,000 rows (three), the long one at 0 s and the others at seeded times
  in the first 40 s. One of each size but the long one is *video-like*: both its pools need type B
  (``resources={"accelerator_type:B": 0.01}``); the others run on either type. One short
  any-type pipeline is *urgent* (``priority="high"`` under trident; a driver of stock Ray Data has
  no priority to give);
- two training stand-ins, each a ``JobScheduler`` with one job (a Ray task of one GPU that sleeps
  20-40 s), at seeded times in the first 30 s; under the arbiter each running job holds a seat.

Contenders (``--contenders``; the first is the baseline): ``stock`` (Ray Data's own coordinator,
first come first reserved), ``alone`` (``trident.autoscale(arbiter=False)``: each plans as if the
cluster were its own), and the arbiter under ``fifo`` / ``never``, ``tiresias`` / ``eager`` and its
defaults (``trident``: ``srtf`` / ``lazy``). Every driver starts before its arrival and waits for
it, so a completion time (arrival to the last row written, or to the job's end) counts no process
start. Each pipeline also runs alone on stock Ray Data once: slowdown is a completion time over
that (a training job's: over its sleep). Every pipeline checks that each row was written once.

Under the arbiter a pipeline's GPU budget cut is a *shrink* (it drains actors; no row is lost),
and a *futile* one where the pipeline ended within the arbiter's payoff (its ``payoff_s``, which
the contenders leave at its default) of it: its actors were drained for less time than a shrink
needs to pay off.

Writes benchmarks/results/shared_cluster.json (RESULTS.md shape: per contender the median over
the rounds of the average and p95 completion time of all runs and of the pipelines, the makespan,
the max slowdown, the shrinks and the futile ones, every round's, and the last round's run times
and arbiter events) and shared_cluster.png (the last round).

    python benchmarks/shared_cluster.py --rounds 2   # about 40 minutes on a 2-core machine
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

CONTENDERS = {  # name -> (what each driver runs, the arbiter's settings)
    "stock": ("stock", None),
    "alone": ("alone", None),
    "fifo": ("arbiter", dict(policy="fifo", preemption="never")),
    "tiresias-eager": ("arbiter", dict(policy="tiresias", preemption="eager")),
    "trident": ("arbiter", dict(policy="srtf", preemption="lazy")),
}
MODES = ("stock", "alone", "arbiter")
BUDGET = re.compile(r"^rank \d+: (?:[\d.]+|any) CPUs, (?P<gpus>[\d.]+|any) GPUs")
"""A budget as an ``arbiter_budget`` event says it (``Budget.describe``); "no cap" does not match."""


def arrivals(seed: int) -> list[dict]:
    """The runs of one round, drawn from ``seed``: name, kind (``pipeline`` / ``training``), rows
    or seconds, arrival (s after the first), pinned type, priority."""
    rng = random.Random(seed)
    sizes = [6_000, 6_000, 2_000, 2_000, 2_000]
    times = sorted(round(rng.uniform(2.0, 40.0), 1) for _ in sizes)
    rng.shuffle(sizes)
    runs = [dict(kind="pipeline", rows=12_000, at=0.0, pinned=None, priority=0)]
    video = {s: i for i, s in reversed(list(enumerate(sizes)))}  # the first of each size is video-like
    urgent = next(i for i, s in enumerate(sizes) if s == 2_000 and video[s] != i)
    runs += [dict(kind="pipeline", rows=s, at=t, pinned="B" if video[s] == i else None,
                  priority="high" if i == urgent else 0) for i, (s, t) in enumerate(zip(sizes, times))]
    runs += [dict(kind="training", secs=round(rng.uniform(20.0, 40.0), 1), at=round(rng.uniform(0.0, 30.0), 1))
             for _ in range(2)]
    for i, r in enumerate(sorted(runs, key=lambda r: r["at"])):
        size = f"{r['rows']}" if r["kind"] == "pipeline" else f"{r['secs']:g}s"
        r["name"] = f"{i}-{r['kind'][0]}{size}" + (f"-{r['pinned']}" if r.get("pinned") else "") + (
            "-urgent" if r.get("priority") == "high" else "")
    return sorted(runs, key=lambda r: r["at"])


def _train(secs: float) -> str:
    time.sleep(secs)
    return "trained"


def driver(args: argparse.Namespace) -> int:
    """One driver: connect, wait for the arrival, run the pipeline (rows checked) or the training
    job, write the times."""
    import logging

    import numpy as np
    import pyarrow.parquet as pq
    import ray

    import first_try
    import trident

    ray.cloudpickle.register_pickle_by_value(first_try)  # the workers need not import this script's folder
    ray.init(address=args.address, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    run = json.loads(args.run)
    out, events = tempfile.mkdtemp(prefix=f"shared-{run['name']}-"), []
    try:
        if run["kind"] == "training":
            sched = trident.JobScheduler(arbiter=args.mode == "arbiter", owner="trainer")
            sched.submit(_train, run["secs"], num_gpus=1.0, name=run["name"])
            time.sleep(max(0.0, args.at - time.time()))
            start = time.time()
            sched.run()
            events = [[round(t, 2), "arbiter", text] for t, text in sched.arbiter_events]
        else:
            ds = first_try.pipeline(run["rows"], accelerator_type=run["pinned"])
            time.sleep(max(0.0, args.at - time.time()))
            start = time.time()
            if args.mode == "stock":
                ds.write_parquet(out)
            else:
                with trident.autoscale(history=False, name=run["name"], arbiter=args.mode == "arbiter",
                                       priority=run["priority"]) as r:
                    ds.write_parquet(out)
                events = [[round(e.time_s, 2), e.kind, e.message] for e in r.record.events
                          if e.kind.startswith("arbiter")]
        end = time.time()
        if run["kind"] == "pipeline":
            ids = pq.read_table(out, columns=["id"]).column("id").to_numpy()
            if len(ids) != run["rows"] or len(np.unique(ids)) != run["rows"]:
                raise SystemExit(f"{run['name']}: {len(ids)} rows written, {len(np.unique(ids))} distinct, "
                                 f"of {run['rows']}")
    finally:
        shutil.rmtree(out, ignore_errors=True)
    with open(args.out, "w") as f:
        json.dump({**run, "arrival_unix_s": args.at, "start_unix_s": start, "end_unix_s": end,
                   "completion_s": end - args.at, "arbiter_events": events}, f)
    return 0


def one_round(mode: str, address: str, runs: list[dict], work: str, lead_s: float) -> list[dict]:
    """Every driver of one contender, started together; each waits for its arrival."""
    from multi_driver import run_drivers

    t0 = time.time() + lead_s
    drivers = []
    for r in runs:
        out = os.path.join(work, f"{mode}-{r['name']}.json")
        drivers.append(([sys.executable, os.path.abspath(__file__), "driver", "--address", address, "--mode", mode,
                         "--run", json.dumps(r), "--at", str(t0 + r["at"]), "--out", out], out))
    return run_drivers(drivers, mode)


def summary(results: list[dict], solo: dict[str, float]) -> dict:
    """One contender's round: average and p95 completion (all runs, pipelines), makespan (first
    arrival to last end), slowdowns over each run alone."""
    import numpy as np

    jct = [r["completion_s"] for r in results]
    pipes = [r["completion_s"] for r in results if r["kind"] == "pipeline"]
    slow = {r["name"]: r["completion_s"] / solo[_solo_key(r)] for r in results}
    cut = {r["name"]: shrinks(r["arbiter_events"], r["completion_s"]) for r in results if r["kind"] == "pipeline"}
    first = min(r["arrival_unix_s"] for r in results)
    return {"avg_jct_s": statistics.mean(jct), "p95_jct_s": float(np.percentile(jct, 95)),
            "avg_pipeline_jct_s": statistics.mean(pipes), "p95_pipeline_jct_s": float(np.percentile(pipes, 95)),
            "makespan_s": max(r["end_unix_s"] for r in results) - first, "max_slowdown": max(slow.values()),
            "slowdowns": slow, "completion_s": {r["name"]: r["completion_s"] for r in results},
            "shrinks": sum(cuts[0] for cuts in cut.values()), "futile_shrinks": sum(cuts[1] for cuts in cut.values()),
            "arbiter_events": {r["name"]: r["arbiter_events"] for r in results}}


def shrinks(events: list, completion_s: float) -> tuple[int, int]:
    """A pipeline's GPU budget cuts in its ``arbiter_budget`` events (``[time s, kind, message]``,
    the time from its arrival), and the futile ones: those it ended within the arbiter's default
    ``payoff_s`` of."""
    from trident.jobs.arbiter.state import ArbiterState

    cuts, futile, gpus = 0, 0, None  # None: no budget yet (its first is no cut)
    for t, kind, message in events:
        if kind != "arbiter_budget":
            continue
        m = BUDGET.match(message)
        now = float("inf") if m is None or m["gpus"] == "any" else float(m["gpus"])
        if gpus is not None and now < gpus:
            cuts += 1
            futile += completion_s - t <= ArbiterState.payoff_s
        gpus = now
    return cuts, futile


def _solo_key(r: dict) -> str:
    return f"training {r['secs']:g} s" if r["kind"] == "training" else f"{r['rows']} rows on {r['pinned'] or 'any'}"


def make_cluster():
    import ray
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 4, "include_dashboard": False})
    for t in ("A", "B"):
        c.add_node(num_cpus=4, num_gpus=2, resources={f"accelerator_type:{t}": 1})
    ray.init(address=c.address, log_to_driver=False)
    return c


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    d = sub.add_parser("driver", help="(internal) one driver")
    d.add_argument("--address", required=True)
    d.add_argument("--mode", choices=MODES, required=True)
    d.add_argument("--run", required=True, help="the run, as JSON")
    d.add_argument("--at", type=float, required=True)
    d.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0, help="draws the arrivals (default 0)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds; contenders take turns, their order rotating round by round (default 1)")
    parser.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=list(CONTENDERS),
                        help="the first is the baseline (default: %(default)s)")
    parser.add_argument("--out", default="benchmarks/results", help="results folder (default benchmarks/results)")
    parser.add_argument("--name", default="shared_cluster", help="results file stem (default shared_cluster)")
    parser.add_argument("--lead-s", type=float, default=15.0,
                        help="seconds the drivers get to start and connect before the first arrival (default 15)")
    args = parser.parse_args()
    if args.command == "driver":
        return driver(args)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    import psutil
    import ray

    import trident
    from harness.bench import wait_until_idle
    from multi_driver import set_arbiter

    runs = arrivals(args.seed)
    for r in runs:
        print(f"{r['at']:5.1f} s  {r['name']}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    cluster = make_cluster()
    address = cluster.address
    work = tempfile.mkdtemp(prefix="shared-cluster-")
    rounds: dict[str, list[dict]] = {}
    try:
        solo = {}
        for r in runs:
            key = _solo_key(r)
            if r["kind"] == "training":
                solo[key] = r["secs"]
            elif key not in solo:
                wait_until_idle()
                solo[key] = one_round("stock", address, [{**r, "at": 0.0}], work, args.lead_s)[0]["completion_s"]
                print(f"alone on stock Ray Data: {key} in {solo[key]:.1f} s", flush=True)
        for i in range(args.rounds):
            k = i % len(args.contenders)
            for name in args.contenders[k:] + args.contenders[:k]:
                mode, settings = CONTENDERS[name]
                set_arbiter(settings)
                wait_until_idle()
                s = summary(one_round(mode, address, runs, work, args.lead_s), solo)
                rounds.setdefault(name, []).append(s)
                print(f"round {i} {name}: average {s['avg_jct_s']:.1f} s (pipelines {s['avg_pipeline_jct_s']:.1f} s), "
                      f"p95 {s['p95_jct_s']:.1f} s, makespan {s['makespan_s']:.1f} s, max slowdown "
                      f"{s['max_slowdown']:.2f}, shrinks {s['shrinks']} ({s['futile_shrinks']} futile)", flush=True)
        set_arbiter(None)
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    result = _result(rounds, runs, solo, args.seed, started, trident.__version__, ray.__version__,
                     round(psutil.virtual_memory().total / 2**30))
    path = os.path.join(args.out, f"{args.name}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    plot(result, os.path.join(args.out, f"{args.name}.png"))
    for row in result["rows"]:
        print(f"{row['policy']:15s} average {row['avg_jct_s']:5.1f} s  p95 {row['p95_jct_s']:5.1f} s  "
              f"{row['ratio_to_baseline']:.2f}x {result['baseline']}")
    print(f"wrote {path}")
    return 0


def _result(rounds, runs, solo, seed, started, trident_version, ray_version, memory_gib) -> dict:
    """Per contender: its last round's runs, and each measure's median over the rounds (with every round's)."""
    rows = []
    for name, each in rounds.items():
        row = {"policy": name, **each[-1], "rounds": each}
        for m in ("avg_jct_s", "p95_jct_s", "avg_pipeline_jct_s", "p95_pipeline_jct_s", "makespan_s", "max_slowdown",
                  "shrinks", "futile_shrinks"):
            row[m] = statistics.median(r[m] for r in each)
        rows.append(row)
    base = rows[0]["avg_jct_s"]
    for row in rows:
        row.update(ratio_to_baseline=base / row["avg_jct_s"], jobs=len(runs), rows_lost=0)
    return {
        "benchmark": "shared_cluster", "trident_version": trident_version, "ray_version": ray_version,
        "started_at": started, "machine": {"cpus": os.cpu_count(), "memory_gib": memory_gib, "gpus": 0,
                                           "logical_gpus": 4},
        "workload": {"name": "six pipelines and two training jobs from eight drivers on two accelerator types",
                     "seed": seed, "rounds": len(rows[0]["rounds"]), "mode": "calibrated", "runs": runs, "alone_s": solo,
                     "cluster": "head 4 CPUs; node A 4 CPUs 2 GPUs; node B 4 CPUs 2 GPUs (ray.cluster_utils.Cluster)",
                     "contenders": {n: CONTENDERS[n] for n in rounds},
                     "stand_in": "time.sleep stands in for model work (benchmarks/first_try.py) and for "
                                 "training; GPUs are logical; a training job's time alone is its sleep"},
        "baseline": next(iter(rounds)), "rows": rows,
    }


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, names = result["rows"], [r["name"] for r in result["workload"]["runs"]]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.8 / len(rows)
    for k, row in enumerate(rows):
        ax.bar([i + k * width for i in range(len(names))], [row["completion_s"][n] for n in names], width,
               label=f"{row['policy']}: average {row['avg_jct_s']:.1f} s ({row['ratio_to_baseline']:.2f}x)")
    ax.set_xticks([i + width * (len(rows) - 1) / 2 for i in range(len(names))], names, rotation=20, fontsize=8)
    ax.set_ylabel("completion time [s] (arrival to end)")
    ax.set_title(f"eight drivers on two accelerator types (seed {result['workload']['seed']}; bars: the last "
                 "round; legend: median of the rounds' averages)", fontsize=10)
    ax.set_xlabel("p: a pipeline's rows (B: needs type B), t: a training job's seconds")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
