"""A user's first try: stock Ray Data against ``with trident.autoscale():`` on a plain local Ray.

The pipeline a new user writes: a CPU task stage, then two actor pools of 0.5 GPU each
(``ActorPoolStrategy(min_size=1, max_size=6)``), on ``ray.init(num_cpus=12, num_gpus=4)``
(logical GPUs, no accelerator types), 16,000 rows written to Parquet; the bottleneck moves from
the second pool to the first half-way through the rows (Detect costs 4 ms a row, then 16 ms;
Embed 16 ms, then 4 ms; ``--shift-at`` moves the step, ``--shift-at 1`` leaves it out).
Policies alternate run by run on one Ray: ``stock`` (no trident at all),
``ray`` (Ray Data's autoscaler, observed by trident) and ``trident`` (the default policy). Each
run checks that every row was written exactly once. The work bound: each pool's work over its
share of the 8 GPU slots, the best fixed split (4 + 4), no start-up, fill or drain.

Writes benchmarks/results/first_try.json (RESULTS.md shape) and first_try.png.

    python benchmarks/first_try.py --runs 2
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import shutil
import statistics
import tempfile
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import ray  # noqa: E402
from ray.data import ActorPoolStrategy  # noqa: E402

import trident  # noqa: E402

ROWS = 16_000
PREP_S = 0.0005
"""CPU stage: seconds per row."""
DETECT_S = (0.004, 0.016)
EMBED_S = (0.016, 0.004)
"""Seconds per row before and after the step (by default half-way through the rows)."""
SLOTS, MAX_REPLICAS = 8, 6
"""0.5-GPU replicas that fit 4 GPUs; the user's ``max_size`` per pool."""
POLICIES = ("stock", "ray", "trident")


def _per_row(ids: np.ndarray, costs: tuple[float, float], step: int) -> float:
    return float(np.sum(np.where(ids < step, costs[0], costs[1])))


def _prep(batch):
    time.sleep(PREP_S * len(batch["id"]))
    return batch


class _Stage:
    """A GPU stage stand-in: sleeps its seconds per row, by whether the row comes before the step."""

    costs: tuple[float, float] = (0.0, 0.0)

    def __init__(self, step: int):
        self.step = step

    def __call__(self, batch):
        time.sleep(_per_row(batch["id"], self.costs, self.step))
        return batch


class Detect(_Stage):
    costs = DETECT_S


class Embed(_Stage):
    costs = EMBED_S


def pipeline(rows: int, shift_at: float = 0.5, accelerator_type: str | None = None):
    """The first try's pipeline; ``accelerator_type``: both pools need GPUs of that type."""
    pool = ActorPoolStrategy(min_size=1, max_size=MAX_REPLICAS)
    step = int(rows * shift_at)
    typed = {"resources": {f"accelerator_type:{accelerator_type}": 0.01}} if accelerator_type else {}
    return (ray.data.range(rows, override_num_blocks=max(1, rows // 40)).map_batches(_prep)
            .map_batches(Detect, fn_constructor_args=(step,), compute=pool, num_gpus=0.5, batch_size=40, **typed)
            .map_batches(Embed, fn_constructor_args=(step,), compute=pool, num_gpus=0.5, batch_size=40, **typed))


def work_bound_s(rows: int, shift_at: float = 0.5) -> float:
    """The best fixed split of the GPU slots, each pool working ahead through the other's phase."""
    step = int(rows * shift_at)
    work = [step * c[0] + (rows - step) * c[1] for c in (DETECT_S, EMBED_S)]
    return min(max(work[0] / n, work[1] / (SLOTS - n))
               for n in range(SLOTS - MAX_REPLICAS, MAX_REPLICAS + 1))


def timed(policy: str, rows: int, record_path: str | None = None, shift_at: float = 0.5) -> dict:
    """One run: wall seconds, every row written once (checked), and trident's summary and pool sizes
    (its run record written to ``record_path`` when given)."""
    out = tempfile.mkdtemp(prefix="first-try-")
    try:
        ds = pipeline(rows, shift_at)
        t0 = time.perf_counter()
        run = None
        if policy == "stock":
            ds.write_parquet(out)
        else:
            with trident.autoscale(policy=policy, history=False) as run:
                ds.write_parquet(out)
        wall = time.perf_counter() - t0
        ids = pq.read_table(out, columns=["id"]).column("id").to_numpy()
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if len(ids) != rows or len(np.unique(ids)) != rows:
        raise AssertionError(f"{policy}: {len(ids)} rows written, {len(np.unique(ids))} distinct, of {rows}")
    result = {"wall_s": wall}
    if run is not None:
        s = run.summary()
        result.update(reconfigurations=s["reconfigurations"], failed_tasks=sum(s["failed_tasks"].values()),
                      pools=_pool_sizes(run.record))
        if record_path:
            run.to_json(record_path)
    return result


def _pool_sizes(record) -> dict[str, list[list[float]]]:
    """Per pool: [seconds, actors running] at every snapshot of the run's first execution."""
    sizes: dict[str, list[list[float]]] = {}
    for snap in record.executions[0].snapshots:
        for op in snap.operators:
            if op.config.kind == "actor":
                sizes.setdefault(op.name, []).append([round(snap.time_s, 2), op.actors_running])
    return sizes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2, help="runs per policy, after one warm-up (default 2)")
    parser.add_argument("--rows", type=int, default=ROWS, help=f"input rows (default {ROWS:,})")
    parser.add_argument("--policies", nargs="+", default=["stock", "trident"], choices=POLICIES,
                        help="policies, alternating run by run; the first is the baseline (default: stock trident)")
    parser.add_argument("--shift-at", type=float, default=0.5,
                        help="share of the rows after which the costs swap (default 0.5; 1: never)")
    parser.add_argument("--out", default="benchmarks/results", help="results folder (default benchmarks/results)")
    parser.add_argument("--records", default=None,
                        help="folder for each trident-observed run's record, <policy>-<run>.json (default: none)")
    args = parser.parse_args()
    if args.runs < 1 or args.rows < 400 or not 0 < args.shift_at <= 1:
        parser.error("--runs must be >= 1, --rows >= 400 and --shift-at in (0, 1]")
    os.makedirs(args.out, exist_ok=True)
    if args.records:
        os.makedirs(args.records, exist_ok=True)
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    ray.init(num_cpus=12, num_gpus=4, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    timed("stock", min(args.rows, 2_000))  # warm-up: worker processes, imports
    runs: dict[str, list[dict]] = {p: [] for p in args.policies}
    for i in range(args.runs):
        order = args.policies if i % 2 == 0 else args.policies[::-1]
        for policy in order:
            record = os.path.join(args.records, f"{policy}-{i}.json") if args.records else None
            runs[policy].append(timed(policy, args.rows, record, args.shift_at))
            print(f"run {i} {policy}: {runs[policy][-1]['wall_s']:.1f} s", flush=True)
    ray.shutdown()

    import psutil

    bound = work_bound_s(args.rows, args.shift_at)
    base = statistics.median(r["wall_s"] for r in runs[args.policies[0]])
    rows = []
    for policy in args.policies:
        walls = [r["wall_s"] for r in runs[policy]]
        wall = statistics.median(walls)
        row = {"policy": policy, "wall_s": wall, "wall_s_runs": walls, "throughput_rows_per_s": args.rows / wall,
               "ratio_to_baseline": base / wall, "ratio_to_bound": bound / wall, "rows_lost": 0}
        if "reconfigurations" in runs[policy][0]:
            row.update(reconfigurations=[r["reconfigurations"] for r in runs[policy]],
                       failed_tasks=sum(r["failed_tasks"] for r in runs[policy]),
                       pools_last_run=runs[policy][-1]["pools"])
        rows.append(row)
    result = {
        "benchmark": "first_try",
        "trident_version": trident.__version__,
        "ray_version": ray.__version__,
        "started_at": started,
        "machine": {"cpus": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30),
                    "gpus": 0, "logical_gpus": 4},
        "workload": {"name": "first try: task stage -> 2 pools of 0.5 GPU (1..6), " + (
                         "no step: the bottleneck stays" if args.shift_at == 1 else
                         f"bottleneck moves after {args.shift_at:.0%} of the rows"),
                     "seed": 0, "mode": "calibrated", "rows": args.rows, "runs": args.runs, "shift_at": args.shift_at,
                     "stand_in": "time.sleep stands in for model work (Detect 4 then 16 ms a row, Embed 16 "
                                 "then 4); GPUs are logical; ray.init(num_cpus=12, num_gpus=4)"},
        "baseline": args.policies[0],
        "work_bound_s": bound,
        "rows": rows,
    }
    path = os.path.join(args.out, "first_try.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    plot(result, os.path.join(args.out, "first_try.png"))
    for row in rows:
        print(f"{row['policy']:8s} median {row['wall_s']:6.1f} s  {row['ratio_to_baseline']:.2f}x "
              f"{args.policies[0]}  {row['ratio_to_bound']:.2f} of the bound ({bound:.1f} s)")
    print(f"wrote {path}")
    return 0


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    rows = result["rows"]
    for i, row in enumerate(rows):
        a.bar(i, row["wall_s"], color="0.8")
        a.plot([i] * len(row["wall_s_runs"]), row["wall_s_runs"], "ko")
    a.axhline(result["work_bound_s"], color="k", ls="--", label="work bound")
    a.set_xticks(range(len(rows)), [f"{r['policy']}\n{r['ratio_to_baseline']:.2f}x" for r in rows])
    a.set_ylabel("wall time [s] (bar: median; dots: runs)")
    a.set_title(f"first try, {result['workload']['rows']:,} rows")
    a.legend()
    last = next((r for r in reversed(rows) if "pools_last_run" in r), None)
    if last is not None:
        for name, points in last["pools_last_run"].items():
            t, n = zip(*points)
            b.step(t, n, where="post", label=name)
        b.set_title(f"{last['policy']}: actors running per pool (last run)")
        b.set_xlabel("seconds")
        b.set_ylabel("actors")
        b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
