"""Pipelines from different drivers on one cluster: stock Ray Data against ``trident.autoscale()`` in each.

One Ray cluster (``ray.init(num_cpus=12, num_gpus=4)``, logical GPUs) held by this script; three
drivers, each its own process connected to it, run the first-try pipeline (a CPU task stage,
then two actor pools of 0.5 GPU, ``ActorPoolStrategy(min_size=1, max_size=6)``; see
``benchmarks/first_try.py``): 16,000 rows arriving at 0 s, 3,000 rows at 8 s and 3,000 at 16 s
Contenders (``--contenders``): ``stock``, plain Ray Data in each driver (its autoscaling
coordinator reserves resources per dataset, first come first served, and splits what is left);
``alone``, ``trident.autoscale(arbiter=False)`` in each (each plans as if the cluster were its
own); ``trident``, ``trident.autoscale()`` in each and the cluster's arbiter dividing the cluster
(its defaults: ``srtf`` order, ``lazy`` preemption); ``fifo``, the same with the arbiter in
first-come order that never shrinks a run; ``trident-killed``, ``trident`` with the arbiter killed
``--kill-at`` seconds after the first arrival (Ray restarts it; each run registers again, and the
row's ``arbiter_takeover_s`` is the longest wait from the kill to a run joining the new one). Every driver is started before its arrival, connects,
and waits for it, so completion times (arrival to last row written) do not count a process
start. Contenders take turns, their order rotating round by round; each pipeline also runs alone
on stock Ray Data once, so every completion time has its slowdown. Every run checks that each row
was written exactly once.

Writes benchmarks/results/multi_driver.json (RESULTS.md shape: average, p50 and max completion
time and slowdown per contender, each pipeline's times) and multi_driver.png.

    python benchmarks/multi_driver.py --rounds 2
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

ARRIVALS = ((0.0, 16_000), (8.0, 3_000), (16.0, 3_000))
CONTENDERS = {  # name -> (what each driver runs, the arbiter's settings)
    "stock": ("stock", None),
    "alone": ("alone", None),
    "trident": ("arbiter", dict(policy="srtf", preemption="lazy")),
    "fifo": ("arbiter", dict(policy="fifo", preemption="never")),
    "trident-killed": ("arbiter", dict(policy="srtf", preemption="lazy")),
}
KILLED = {"trident-killed"}
"""Contenders whose arbiter is killed mid-round (``--kill-at``)."""
MODES = ("stock", "alone", "arbiter")
HERE = os.path.dirname(os.path.abspath(__file__))


def driver(args: argparse.Namespace) -> int:
    """One driver: connect, wait for the arrival time, run the pipeline, check its rows, write the times."""
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
    out = tempfile.mkdtemp(prefix=f"multi-driver-{args.name}-")
    ds = first_try.pipeline(args.rows)
    time.sleep(max(0.0, args.at - time.time()))
    start = time.time()
    events = []
    try:
        if args.mode == "stock":
            ds.write_parquet(out)
        else:
            with trident.autoscale(history=False, name=args.name, arbiter=args.mode == "arbiter") as run:
                ds.write_parquet(out)
            events = [[round(e.time_s, 2), e.kind, e.message] for e in run.record.events if e.kind.startswith("arbiter")]
        end = time.time()
        ids = pq.read_table(out, columns=["id"]).column("id").to_numpy()
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if len(ids) != args.rows or len(np.unique(ids)) != args.rows:
        raise SystemExit(f"{args.name}: {len(ids)} rows written, {len(np.unique(ids))} distinct, of {args.rows}")
    with open(args.out, "w") as f:
        json.dump({"name": args.name, "rows": args.rows, "arrival_unix_s": args.at, "start_unix_s": start,
                   "end_unix_s": end, "completion_s": end - args.at, "arbiter_events": events}, f)
    return 0


def one_round(mode: str, address: str, arrivals, work: str, lead_s: float,
              kill_at: float | None = None) -> list[dict]:
    """All drivers of one contender, started together; each waits for its arrival (``lead_s`` after
    now, plus its offset). ``kill_at``: seconds after the first arrival at which the arbiter is
    killed (Ray restarts it); each driver's result then says whether it ``ran_at_kill`` and its
    ``takeover_s``, from the kill to its joining the new arbiter (``None``: it had ended, or never
    joined again)."""
    t0 = time.time() + lead_s
    killed = None
    if kill_at is not None:
        killed = threading.Timer(t0 + kill_at - time.time(), _kill_arbiter)
        killed.start()
    drivers = []
    for i, (offset, rows) in enumerate(arrivals):
        out = os.path.join(work, f"{mode}-{i}-{rows}.json")
        drivers.append(([sys.executable, os.path.abspath(__file__), "driver", "--address", address, "--mode", mode,
                         "--rows", str(rows), "--name", f"p{i}-{rows}", "--at", str(t0 + offset), "--out", out], out))
    results = run_drivers(drivers, mode)
    if killed is not None:
        killed.cancel()  # every driver ended before the kill: nothing to kill
        killed.join()
        for r in results:
            at = t0 + kill_at
            joined = [r["start_unix_s"] + t for t, kind, text in r["arbiter_events"]
                      if kind == "arbiter" and text.startswith("joined") and r["start_unix_s"] + t > at]
            r["ran_at_kill"] = r["end_unix_s"] > at
            r["takeover_s"] = min(joined) - at if joined and r["ran_at_kill"] else None
    return results


def run_drivers(drivers: list[tuple[list[str], str]], mode: str) -> list[dict]:
    """Start every driver (its command line, and the JSON file it writes its result to) at once,
    wait for them all and return their results in order; a driver that fails stops the benchmark
    with the end of its log."""
    procs = [(subprocess.Popen(cmd, cwd=HERE, stdout=subprocess.DEVNULL, stderr=open(out + ".log", "w")), out)
             for cmd, out in drivers]
    results = []
    for proc, out in procs:
        if proc.wait() != 0:
            with open(out + ".log") as f:
                tail = "".join(f.readlines()[-30:])
            raise SystemExit(f"a {mode} driver failed:\n{tail}")
        with open(out) as f:
            results.append(json.load(f))
    return results


def _kill_arbiter() -> None:
    """Kill the cluster's arbiter as a crash would (Ray restarts it, empty)."""
    import ray

    from trident.jobs.arbiter.actor import find

    handle = find()
    if handle is not None:
        ray.kill(handle, no_restart=False)


def set_arbiter(settings: dict | None) -> None:
    """The cluster's arbiter, started anew with ``settings`` (``None``: none runs)."""
    import ray

    from trident.jobs.arbiter.actor import find, start

    old = find()
    if old is not None:
        ray.kill(old, no_restart=True)
        while find() is not None:
            time.sleep(0.2)
    if settings is not None:
        ray.get(start(**settings).status.remote())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    d = sub.add_parser("driver", help="(internal) one driver")
    d.add_argument("--address", required=True)
    d.add_argument("--mode", choices=MODES, required=True)
    d.add_argument("--rows", type=int, required=True)
    d.add_argument("--name", required=True)
    d.add_argument("--at", type=float, required=True)
    d.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=2, help="rounds; contenders take turns in each (default 2)")
    parser.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=list(CONTENDERS),
                        help="the first is the baseline (default: %(default)s)")
    parser.add_argument("--out", default="benchmarks/results", help="results folder (default benchmarks/results)")
    parser.add_argument("--kill-at", type=float, default=24.0,
                        help="seconds after the first arrival at which trident-killed's arbiter is killed (default 24)")
    parser.add_argument("--name", default="multi_driver", help="results file stem (default multi_driver)")
    parser.add_argument("--lead-s", type=float, default=12.0,
                        help="seconds the drivers get to start and connect before the first arrival (default 12)")
    args = parser.parse_args()
    if args.command == "driver":
        return driver(args)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    import psutil
    import ray

    import trident
    from harness.bench import wait_until_idle

    os.makedirs(args.out, exist_ok=True)
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    ray.init(num_cpus=12, num_gpus=4, include_dashboard=False, log_to_driver=False)
    address = ray.get_runtime_context().gcs_address
    work = tempfile.mkdtemp(prefix="multi-driver-")
    runs: dict[str, list[list[dict]]] = {c: [] for c in args.contenders}
    try:
        solo = {}
        for offset, rows in sorted(set(ARRIVALS), key=lambda a: a[1]):
            if rows not in solo:
                wait_until_idle()
                solo[rows] = one_round("stock", address, [(0.0, rows)], work, args.lead_s)[0]["completion_s"]
                print(f"alone on stock Ray Data: {rows:,} rows in {solo[rows]:.1f} s", flush=True)
        for i in range(args.rounds):
            k = i % len(args.contenders)
            for name in args.contenders[k:] + args.contenders[:k]:
                mode, settings = CONTENDERS[name]
                set_arbiter(settings)
                wait_until_idle()
                runs[name].append(one_round(mode, address, ARRIVALS, work, args.lead_s,
                                            kill_at=args.kill_at if name in KILLED else None))
                times = [r["completion_s"] for r in runs[name][-1]]
                print(f"round {i} {name}: " + ", ".join(f"{t:.1f}" for t in times)
                      + f" s (average {statistics.mean(times):.1f})", flush=True)
    finally:
        ray.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    result = _result(runs, solo, args.rounds, started, trident.__version__, ray.__version__,
                     round(psutil.virtual_memory().total / 2**30))
    path = os.path.join(args.out, f"{args.name}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    plot(result, os.path.join(args.out, f"{args.name}.png"))
    for row in result["rows"]:
        print(f"{row['policy']:8s} average {row['avg_jct_s']:5.1f} s  max {row['max_jct_s']:5.1f} s  "
              f"max slowdown {row['max_slowdown']:.2f}  {row['ratio_to_baseline']:.2f}x {result['baseline']}"
              + (f"  arbiter taken over in {row['arbiter_takeover_s']:.1f} s" if "arbiter_takeover_s" in row else ""))
    print(f"wrote {path}")
    return 0


def _result(runs, solo, rounds, started, trident_version, ray_version, memory_gib) -> dict:
    rows = []
    base = None
    for name, rounds_ in runs.items():
        averages = [statistics.mean(r["completion_s"] for r in rnd) for rnd in rounds_]
        avg = statistics.median(averages)
        base = avg if base is None else base
        per = [[r["completion_s"] for r in rnd] for rnd in rounds_]
        slowdowns = [[r["completion_s"] / solo[r["rows"]] for r in rnd] for rnd in rounds_]
        rows.append({"policy": name, "avg_jct_s": avg, "avg_jct_s_rounds": averages,
                     "p50_jct_s": statistics.median(per[-1]), "max_jct_s": max(max(p) for p in per),
                     "completion_s_rounds": per, "max_slowdown": max(max(s) for s in slowdowns),
                     "slowdown_rounds": slowdowns, "ratio_to_baseline": base / avg, "jobs": len(per[-1]),
                     "rows_lost": 0, "arbiter_events_last_round": [r["arbiter_events"] for r in rounds_[-1]]})
        takeovers = [r["takeover_s"] for rnd in rounds_ for r in rnd if r.get("takeover_s") is not None]
        if name in KILLED:  # every run still going at the kill joined the new arbiter (None: one never did)
            missed = any(r.get("ran_at_kill") and r["takeover_s"] is None for rnd in rounds_ for r in rnd)
            rows[-1]["arbiter_takeover_s"] = None if missed or not takeovers else max(takeovers)
    return {
        "benchmark": "multi_driver", "trident_version": trident_version, "ray_version": ray_version,
        "started_at": started, "machine": {"cpus": os.cpu_count(), "memory_gib": memory_gib, "gpus": 0,
                                           "logical_gpus": 4},
        "workload": {"name": "three drivers: the first-try pipeline, " + ", ".join(
                         f"{rows:,} rows at {at:g} s" for at, rows in ARRIVALS),
                     "seed": 0, "mode": "calibrated", "rounds": rounds, "alone_on_stock_s": solo,
                     "contenders": {n: CONTENDERS[n] for n in runs},
                     "stand_in": "time.sleep stands in for model work (benchmarks/first_try.py); GPUs are "
                                 "logical; ray.init(num_cpus=12, num_gpus=4)"},
        "baseline": next(iter(runs)), "rows": rows,
    }


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    names = [f"{rows_:,} rows at {at:g} s" for at, rows_ in ARRIVALS]
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(rows)
    for k, row in enumerate(rows):
        last = row["completion_s_rounds"][-1]
        ax.bar([i + k * width for i in range(len(last))], last, width,
               label=f"{row['policy']}: average {row['avg_jct_s']:.1f} s ({row['ratio_to_baseline']:.2f}x)")
    ax.set_xticks([i + width * (len(rows) - 1) / 2 for i in range(len(names))], names)
    ax.set_ylabel("completion time [s] (arrival to last row)")
    ax.set_title("three drivers on one cluster (last round; bars: completion, arrival to last row)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
