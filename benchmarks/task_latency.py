"""How long a Ray Data task takes beyond its work on this machine, at a few concurrencies.

On ``ray.init(num_cpus=max(16, c))``, ``ray.data.range`` of ``--blocks`` blocks of 100 rows goes through
one ``map_batches`` task operator (fused with the read: one task a block) whose function sleeps
``--sleep-s`` a block, at ``concurrency=c`` for each ``c`` of ``--concurrency``; each run's wall
gives the seconds a task takes, ``wall x c / blocks``, and its latency, that less the sleep.
Rounds alternate the order after one warm-up. No stand-in beyond the sleep: Ray Data's scheduling,
its blocks' transfer and the driver's executor are real. Its latency at low concurrency is the
pipeline simulator's ``task_latency_s`` beside real runs (``benchmarks/generalization.py``).
Writes benchmarks/results/task_latency.json (RESULTS.md shape) and task_latency.png.

    python benchmarks/task_latency.py --concurrency 1 2 4 8 16 32 --rounds 2
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import statistics
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import ray  # noqa: E402

import trident  # noqa: E402
from trident.autoscaler.shim.starts import host_cores  # noqa: E402


def _sleep(batch, seconds: float):
    time.sleep(seconds)
    return batch


def task_s(blocks: int, concurrency: int, sleep_s: float) -> float:
    """Seconds one task took, on average: the run's wall x ``concurrency`` / ``blocks`` (every row
    read back and counted)."""
    ds = ray.data.range(blocks * 100, override_num_blocks=blocks).map_batches(
        _sleep, fn_kwargs={"seconds": sleep_s}, batch_size=None, concurrency=concurrency)
    t0 = time.perf_counter()
    rows = sum(len(b["id"]) for b in ds.iter_batches(batch_size=None))
    wall = time.perf_counter() - t0
    if rows != blocks * 100:
        raise AssertionError(f"{rows} rows read back of {blocks * 100}")
    return wall * concurrency / blocks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8], help="tasks at once to compare")
    parser.add_argument("--blocks", type=int, default=60, help="blocks (tasks) per run at concurrency 1 (default 60; "
                                                               "c times as many at concurrency c)")
    parser.add_argument("--sleep-s", type=float, default=0.1, help="a task's work, seconds (default 0.1)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds (default 2)")
    parser.add_argument("--out", default="benchmarks/results", help="results folder (default benchmarks/results)")
    args = parser.parse_args()
    if args.rounds < 1 or args.blocks < 1 or args.sleep_s < 0 or min(args.concurrency) < 1:
        parser.error("--rounds, --blocks, --concurrency >= 1; --sleep-s >= 0")
    os.makedirs(args.out, exist_ok=True)
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    ray.init(num_cpus=max(16, *args.concurrency), include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    task_s(4 * max(args.concurrency), max(args.concurrency), 0.0)  # warm-up: worker processes
    runs: dict[int, list[float]] = {c: [] for c in args.concurrency}
    for r in range(args.rounds):
        for c in (args.concurrency if r % 2 == 0 else args.concurrency[::-1]):
            runs[c].append(task_s(args.blocks * c, c, args.sleep_s))
            print(f"round {r} concurrency {c}: {runs[c][-1]:.3f} s a task", flush=True)
    ray.shutdown()
    rows = [{"policy": f"concurrency {c}", "concurrency": c, "task_s_runs": t, "task_s": statistics.median(t),
             "latency_s": statistics.median(t) - args.sleep_s} for c, t in runs.items()]
    for row in rows:
        row["ratio_to_baseline"] = rows[0]["task_s"] / row["task_s"]
    result = {
        "benchmark": "task_latency", "trident_version": trident.__version__, "ray_version": ray.__version__,
        "started_at": started, "machine": {"cpus": os.cpu_count(), "host_cores": host_cores(), "gpus": 0},
        "workload": {"name": f"map_batches tasks sleeping {args.sleep_s:g} s a block of 100 rows, "
                             f"{args.blocks} x c blocks", "seed": 0, "mode": "real", "rounds": args.rounds,
                     "stand_in": "time.sleep is the task's work"},
        "baseline": rows[0]["policy"], "rows": rows,
    }
    with open(os.path.join(args.out, "task_latency.json"), "w") as f:
        json.dump(result, f, indent=1)
    plot(result, os.path.join(args.out, "task_latency.png"))
    for row in rows:
        print(f"concurrency {row['concurrency']:3d}: {row['task_s']:.3f} s a task, {row['latency_s']:.3f} s beyond its work")
    return 0


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [r["concurrency"] for r in rows]
    ax.plot(xs, [r["task_s"] for r in rows], marker="o", label="seconds a task (median of rounds)")
    ax.plot(xs, [r["task_s"] - r["latency_s"] for r in rows], ls="--", color="k", label="its work (the sleep)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tasks at once (concurrency)")
    ax.set_ylabel("seconds")
    ax.set_title(f"{result['workload']['name']}\n(host cores: {result['machine']['host_cores']})", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
