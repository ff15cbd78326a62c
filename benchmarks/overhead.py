"""What trident costs when it only watches, and how fast a plan's pool target becomes real.

1. Overhead: the same 3-operator pipeline (task op -> actor op with num_gpus=0.5 -> actor op,
   sleeps standing in for work, logical GPUs) run with and without
   ``trident.autoscale(policy="ray")``, alternating, ``--runs`` times each after one warm-up
   of each; the figure is the ratio of the median wall times (goal <= 1.03).
   Besides the ratio (noisy on a shared machine), the run record gives trident's own
   executor-thread time (``shim_time_s``) and its controller's CPU time (``controller_cpu_s``),
   which no other load distorts.
2. Time to target: a benchmark policy moves the actor pool between 1 and 3 replicas each
   time the previous target was reached (``--reach-runs`` pipelines); every ``target_reached`` action gives the seconds
   from the plan (the snapshot it was decided on) to the pool running exactly that many
   actors. The figure is the median.

Writes benchmarks/results/overhead.json (RESULTS.md shape) and overhead.png.

    python benchmarks/overhead.py --runs 5
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import ray  # noqa: E402
from ray.data import ActorPoolStrategy  # noqa: E402

import trident  # noqa: E402
from trident.core.types import Decision, OperatorTarget, Plan  # noqa: E402


def _pre(batch):
    time.sleep(0.002)
    return batch


class _Gpu:
    def __call__(self, batch):
        time.sleep(0.03)
        return batch


class _Post:
    def __call__(self, batch):
        time.sleep(0.01)
        return batch


def pipeline(rows: int):
    return (ray.data.range(rows, override_num_blocks=max(1, rows // 20))
            .map_batches(_pre, num_cpus=0.5)
            .map_batches(_Gpu, compute=ActorPoolStrategy(min_size=2, max_size=2), num_gpus=0.5, batch_size=20)
            .map_batches(_Post, compute=ActorPoolStrategy(min_size=1, max_size=1), batch_size=20))


def timed(rows: int, with_trident: bool) -> tuple[float, dict | None]:
    ds = pipeline(rows)
    t0 = time.perf_counter()
    if with_trident:
        with trident.autoscale(policy="ray") as run:
            n = len(ds.take_all())
        wall = time.perf_counter() - t0
        summary = run.summary()
    else:
        n = len(ds.take_all())
        wall = time.perf_counter() - t0
        summary = None
    assert n == rows, (n, rows)
    return wall, summary


class Flip:
    """Benchmark policy: pool target 3, then 1, then 3, ... each time the last one was reached."""

    name = "bench-flip"

    def __init__(self, *, context=None):
        self.want = None
        self.seq = 0

    def step(self, snapshot, now):
        op = next(o for o in snapshot.operators if "_Gpu" in o.name)
        if op.rows_out_total == 0 or op.completed:
            return Decision(time_s=now, reason="wait")
        if self.want is not None and (op.actors_running != self.want or op.actors_pending):
            return Decision(time_s=now, reason=f"waiting for {self.want}")
        self.want = 1 if self.want == 3 else 3
        self.seq += 1
        plan = Plan(seq=self.seq, targets=(OperatorTarget(name=op.name, replicas=self.want),),
                    reason=f"flip to {self.want}", created_at_s=now)
        return Decision(time_s=now, reason=plan.reason, plan=plan)


def reach_times(rows: int) -> list[float]:
    ds = (ray.data.range(rows, override_num_blocks=rows // 10)
          .map_batches(_Gpu, compute=ActorPoolStrategy(min_size=1, max_size=4), num_gpus=0.5, batch_size=10))
    with trident.autoscale(policy=Flip, interval_s=0.2) as run:
        assert len(ds.take_all()) == rows
    return run.summary()["target_reach_s"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rows", type=int, default=600)
    parser.add_argument("--reach-rows", type=int, default=900)
    parser.add_argument("--reach-runs", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    ray.init(num_cpus=8, num_gpus=4, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False

    timed(args.rows, False)  # warm-up: worker processes, imports
    timed(args.rows, True)
    bare, observed, summaries = [], [], []
    for i in range(args.runs):
        order = (False, True) if i % 2 == 0 else (True, False)
        for with_trident in order:
            wall, summary = timed(args.rows, with_trident)
            (observed if with_trident else bare).append(wall)
            if summary:
                summaries.append(summary)
            print(f"run {i} {'trident(ray)' if with_trident else 'stock'}: {wall:.2f} s", flush=True)
    reach = [t for _ in range(args.reach_runs) for t in reach_times(args.reach_rows)]
    ray.shutdown()

    ratio = statistics.median(observed) / statistics.median(bare)
    import psutil

    result = {
        "benchmark": "overhead",
        "trident_version": trident.__version__,
        "ray_version": ray.__version__,
        "started_at": started,
        "machine": {"cpus": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30),
                    "gpus": 0, "logical_gpus": 4},
        "workload": {"name": "3-op sleep pipeline (task -> actor num_gpus=0.5 -> actor)", "seed": 0,
                     "mode": "calibrated", "rows": args.rows, "runs": args.runs,
                     "stand_in": "time.sleep stands in for model work; GPUs are logical"},
        "baseline": "stock",
        "rows": [
            {"policy": "stock", "wall_s": statistics.median(bare), "wall_s_runs": bare,
             "throughput_rows_per_s": args.rows / statistics.median(bare), "ratio_to_baseline": 1.0},
            {"policy": "ray", "wall_s": statistics.median(observed), "wall_s_runs": observed,
             "throughput_rows_per_s": args.rows / statistics.median(observed), "ratio_to_baseline": ratio,
             "observed_throughput_rows_per_s": statistics.median(s["throughput_rows_per_s"] for s in summaries),
             "reconfigurations": sum(s["reconfigurations"] for s in summaries), "rows_lost": 0,
             "shim_time_s": statistics.median(s["shim_time_s"] for s in summaries),
             "shim_time_pct": statistics.median(100 * s["shim_time_s"] / s["wall_s"] for s in summaries),
             "controller_cpu_s": statistics.median(s["controller_cpu_s"] for s in summaries)},
        ],
        "wall_time_ratio_median": ratio,
        "target_reach_s_median": statistics.median(reach) if reach else None,
        "target_reach_s_samples": reach,
    }
    path = os.path.join(args.out, "overhead.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    plot(result, os.path.join(args.out, "overhead.png"))
    print(f"median wall ratio trident(ray)/stock = {ratio:.3f} (goal <= 1.03); trident's own executor-thread "
          f"time {result['rows'][1]['shim_time_pct']:.2f}% of wall; "
          f"median time to target = {result['target_reach_s_median']} s over {len(reach)} targets; wrote {path}")
    return 0


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    stock, ray_row = result["rows"]
    a.boxplot([stock["wall_s_runs"], ray_row["wall_s_runs"]])
    a.set_xticks([1, 2], ["stock Ray Data", "trident(policy=ray)"])
    a.set_ylabel("wall time [s]")
    a.set_title(f"overhead: median ratio {result['wall_time_ratio_median']:.3f}")
    samples = result["target_reach_s_samples"]
    if samples:
        b.plot(range(1, len(samples) + 1), samples, "o")
        b.axhline(result["target_reach_s_median"], color="k", ls="--", label="median")
        b.legend()
    b.set_xlabel("pool target, in order (alternating 3 and 1 replicas)")
    b.set_ylabel("plan -> pool at target [s]")
    b.set_title(f"time to target ({len(samples)} targets)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
