"""A pipeline run again: trident's second run (planned from what the first taught, kept in its
history store) beside its first run, a run without history and stock Ray Data.

The pipeline is the first try's (``benchmarks/first_try.py``: a CPU task stage, then Detect and
Embed, two pools of 0.5 GPU, ``ActorPoolStrategy(1, 6)``, on ``ray.init(num_cpus=12,
num_gpus=4)``; the bottleneck moves from Embed to Detect half-way through the rows). For each
size, with the step (``first try``) and without it (``no step``: Detect 4 ms a row and Embed
16 ms all along), in each round, on one Ray, after an untimed warm-up:

- ``first``: trident on a new, empty store (it starts blind and keeps what it learned);
- ``second``, ``third``: trident again on that store (they plan from the runs before at their
  first step);
- ``stock``: Ray Data without trident; ``blind``: trident with ``history=False`` (the two
  alternate their order round by round).

At sizes up to 4,000 rows two more cases, each against ``blind`` on the same input, with the
history of the ``no step`` runs:

- ``changed data``: the same operators (the same keys) on ids past the step, so Detect costs
  16 ms a row and Embed 4: a regime never seen, while the history is steady;
- ``changed operator``: Detect and Embed built with another step (a constructor argument: new
  keys, so nothing is remembered).

Every run checks that each input row was written exactly once. Writes
benchmarks/results/warm_start.json (RESULTS.md shape) and warm_start.png.

    python benchmarks/warm_start.py --sizes 2000 --rounds 3 --scenarios two-types
    python benchmarks/warm_start.py --sizes 16000 --rounds 1 --name warm_start-16000
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import ray  # noqa: E402
from ray.data import ActorPoolStrategy  # noqa: E402

import first_try  # noqa: E402
import trident  # noqa: E402
from first_try import MAX_REPLICAS, Detect, Embed, _prep  # noqa: E402
from harness.bench import wait_until_idle  # noqa: E402


def _offset(batch, by: int):
    batch["id"] = batch["id"] + by
    return batch


def pipeline(rows: int, *, step: int, offset: int = 0):
    """The first try's pipeline with Detect and Embed stepping at ``step``, on ids ``offset..``."""
    pool = ActorPoolStrategy(min_size=1, max_size=MAX_REPLICAS)
    ds = ray.data.range(rows, override_num_blocks=max(1, rows // 40))
    if offset:
        ds = ds.map_batches(_offset, fn_kwargs={"by": offset})
    return (ds.map_batches(_prep)
            .map_batches(Detect, fn_constructor_args=(step,), compute=pool, num_gpus=0.5, batch_size=40)
            .map_batches(Embed, fn_constructor_args=(step,), compute=pool, num_gpus=0.5, batch_size=40))


def timed(mode: str, ds, ids: range, history) -> dict:
    """One run under ``mode`` (``stock`` or trident with ``history``): wall seconds, its first plan
    and whether that plan leaned on history; every id of ``ids`` written exactly once (checked)."""
    wait_until_idle()  # no run starts beside the last one's exiting actors
    time.sleep(2.0)
    out = tempfile.mkdtemp(prefix="warm-start-")
    try:
        t0 = time.perf_counter()
        run = None
        if mode == "stock":
            ds.write_parquet(out)
        else:
            with trident.autoscale(history=history) as run:
                ds.write_parquet(out)
        wall = time.perf_counter() - t0
        got = np.sort(pq.read_table(out, columns=["id"]).column("id").to_numpy())
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if not np.array_equal(got, np.arange(ids.start, ids.stop)):
        raise AssertionError(f"{mode}: {len(got)} rows written, {len(np.unique(got))} distinct, of {len(ids)}")
    result = {"wall_s": wall}
    if run is not None:
        s = run.summary()
        plans = [d for d in run.record.executions[0].decisions if d.plan is not None]
        result.update(first_plan_s=s["first_plan_s"], history_plans=s["history_plans"],
                      first_plan_from_history=bool(plans and plans[0].history_runs),
                      reconfigurations=s["reconfigurations"], prediction_error=s["prediction_error"],
                      history_notes=[n for d in run.record.executions[0].decisions for n in d.notes
                                     if ("regime" in n and "of run" in n) or "set aside" in n][:4])
    return result


def size_round(rows: int, i: int, store: str, *, step: int) -> dict[str, dict]:
    ds = lambda: pipeline(rows, step=step)  # noqa: E731
    out = {"first": timed("trident", ds(), range(rows), store)}
    order = [("second", "trident", store), ("third", "trident", store), ("stock", "stock", None),
             ("blind", "trident", False)]
    for name, mode, history in (order if i % 2 == 0 else order[:2] + order[2:][::-1]):
        out[name] = timed(mode, ds(), range(rows), history)
    return out


def changed_round(rows: int, i: int, store: str) -> dict[str, dict]:
    """``store`` holds runs of ``rows`` rows without a step: the changed cases beside runs without
    history (the data: every row past the step, a regime never seen; the operator: another step)."""
    cases = {"changed data": lambda: (pipeline(rows, step=rows, offset=rows), range(rows, 2 * rows)),
             "changed operator": lambda: (pipeline(rows, step=rows // 2), range(rows))}
    out = {}
    for name, make in cases.items():
        pair = [(name, store), (f"{name}, blind", False)]
        for label, history in (pair if i % 2 == 0 else pair[::-1]):
            ds, ids = make()
            out[label] = timed("trident", ds, ids, history)
    return out


def scenario_round(name: str, scale: float, i: int, store: str) -> dict[str, dict]:
    """The suite's scenario ``name`` (``benchmarks/harness/suite.py``, on its ``ray.cluster_utils.Cluster``):
    trident first and second on ``store``, then stock Ray Data's autoscaler and trident blind."""
    from harness.suite import run_once, scenarios

    sc = scenarios()[name].scaled(scale)
    out = {}
    order = [("first", "trident", store), ("second", "trident", store), ("stock", "ray", False),
             ("blind", "trident", False)]
    if i % 2:
        order = order[:2] + order[2:][::-1]
    for label, policy, history in order:
        r = run_once(sc, policy, history=history)
        if r.rows_lost or r.rows_duplicated or r.error:
            raise AssertionError(f"{name} {label}: {r.rows_lost} rows lost, {r.rows_duplicated} duplicated, {r.error}")
        s = r.summary or {}
        plans = [d for d in r.record.executions[0].decisions if d.plan is not None] if r.record else []
        out[label] = {"wall_s": r.wall_s, "oom_kills": r.oom_kills}
        if policy == "trident":
            out[label].update(first_plan_s=s.get("first_plan_s"), history_plans=s.get("history_plans"),
                              first_plan_from_history=bool(plans and plans[0].history_runs),
                              reconfigurations=s.get("reconfigurations"), prediction_error=s.get("prediction_error"),
                              history_notes=[])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2_000, 16_000], help="rows (default 2000 16000)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per size (default 2)")
    parser.add_argument("--scenarios", nargs="*", default=[], help="suite scenarios run again too (e.g. two-types)")
    parser.add_argument("--scenario-scale", type=float, default=0.25, help="their rows' scale (default 0.25)")
    parser.add_argument("--scenario-rounds", type=int, default=1, help="their rounds (default 1)")
    parser.add_argument("--out", default="benchmarks/results", help="results folder (default benchmarks/results)")
    parser.add_argument("--name", default="warm_start", help="results file stem (default warm_start)")
    args = parser.parse_args()
    if args.rounds < 1 or min(args.sizes) < 400:
        parser.error("--rounds must be >= 1 and every size >= 400")
    os.makedirs(args.out, exist_ok=True)
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    ray.init(num_cpus=12, num_gpus=4, include_dashboard=False, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(first_try)  # the workers need not find benchmarks/ on their path
    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    # warm-up, untimed: worker processes, imports and trident's controller actor (kept for the next runs)
    timed("stock", pipeline(2_000, step=1_000), range(2_000), None)
    timed("trident", pipeline(2_000, step=1_000), range(2_000), False)
    runs: dict[str, dict[str, list[dict]]] = {}
    folder = tempfile.mkdtemp(prefix="warm-start-history-")
    for rows in args.sizes:
        for i in range(args.rounds):
            for case, step in ((f"first try, {rows} rows", rows // 2), (f"no step, {rows} rows", rows)):
                store = os.path.join(folder, f"{rows}-{step}-{i}.sqlite")
                got = size_round(rows, i, store, step=step)
                if step == rows and rows <= CHANGED_MAX_ROWS:
                    got.update(changed_round(rows, i, store))
                for name, r in got.items():
                    runs.setdefault(case, {}).setdefault(name, []).append(r)
                    print(f"{case}, round {i}, {name}: {r['wall_s']:.1f} s"
                          + (f", first plan at {r['first_plan_s']:.1f} s" if r.get("first_plan_s") is not None
                             else "") + (" (from history)" if r.get("first_plan_from_history") else ""), flush=True)
    ray.shutdown()
    if args.scenarios:
        from harness.suite import run_once, scenarios, start_cluster

        cluster = start_cluster()
        try:
            run_once(scenarios()[args.scenarios[0]].scaled(0.0), "ray")  # warm-up: the cluster's workers
            for name in args.scenarios:
                for i in range(args.scenario_rounds):
                    got = scenario_round(name, args.scenario_scale, i, os.path.join(folder, f"{name}-{i}.sqlite"))
                    for label, r in got.items():
                        runs.setdefault(f"{name} (scale {args.scenario_scale:g})", {}).setdefault(label, []).append(r)
                        print(f"{name}, round {i}, {label}: {r['wall_s']:.1f} s"
                              + (f", first plan at {r['first_plan_s']:.1f} s" if r.get("first_plan_s") is not None
                                 else "") + (" (from history)" if r.get("first_plan_from_history") else ""), flush=True)
        finally:
            ray.shutdown()
            cluster.shutdown()
    shutil.rmtree(folder, ignore_errors=True)
    result = _result(args, runs, started)
    path = os.path.join(args.out, f"{args.name}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    plot(result, os.path.join(args.out, f"{args.name}.png"))
    for row in result["rows"]:
        print(f"{row['case']:<26} {row['policy']:<24} median {row['wall_s']:6.1f} s  "
              f"{row['ratio_to_baseline']:.2f}x {row['baseline']}"
              + (f"  first plan {row['first_plan_s']:.1f} s" if row.get("first_plan_s") is not None else ""))
    print(f"wrote {path}")
    return 0


CHANGED_MAX_ROWS = 4_000
"""The changed cases run at sizes up to this."""
BASELINE = {"first": "first", "second": "first", "third": "first", "stock": "first", "blind": "first",
            "changed data": "changed data, blind", "changed data, blind": "changed data, blind",
            "changed operator": "changed operator, blind", "changed operator, blind": "changed operator, blind"}


def _result(args, runs: dict[str, dict[str, list[dict]]], started: str) -> dict:
    import psutil

    rows = []
    for case, by_name in runs.items():
        median = {n: statistics.median(r["wall_s"] for r in rs) for n, rs in by_name.items()}
        for name, rs in by_name.items():
            base = BASELINE[name]
            row = {"policy": name, "case": case, "baseline": base, "wall_s": median[name],
                   "wall_s_runs": [r["wall_s"] for r in rs], "ratio_to_baseline": median[base] / median[name],
                   "rows_lost": 0, **({"oom_kills": [r["oom_kills"] for r in rs]} if "oom_kills" in rs[0] else {})}
            if name in ("second", "third"):
                row["ratio_to_stock"] = median["stock"] / median[name]
                row["ratio_to_blind"] = median["blind"] / median[name]
            if "first_plan_s" in rs[0]:
                plans = [r["first_plan_s"] for r in rs if r["first_plan_s"] is not None]
                row.update(first_plan_s=statistics.median(plans) if plans else None,
                           first_plan_from_history=[r["first_plan_from_history"] for r in rs],
                           history_plans=[r["history_plans"] for r in rs],
                           reconfigurations=[r["reconfigurations"] for r in rs],
                           prediction_error=[r["prediction_error"] for r in rs],
                           history_notes=rs[-1]["history_notes"])
            rows.append(row)
    return {
        "benchmark": "warm_start",
        "trident_version": trident.__version__,
        "ray_version": ray.__version__,
        "started_at": started,
        "machine": {"cpus": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30),
                    "gpus": 0, "logical_gpus": 4},
        "workload": {"name": "first try run again: task stage -> Detect, Embed (0.5 GPU, 1..6 actors), bottleneck "
                             "moves half-way (or no step)", "seed": 0, "mode": "calibrated", "sizes": args.sizes,
                     "rounds": args.rounds, "scenarios": args.scenarios, "scenario_scale": args.scenario_scale,
                     "scenario_rounds": args.scenario_rounds,
                     "stand_in": "time.sleep stands in for model work (benchmarks/first_try.py); GPUs are logical; "
                                 "ray.init(num_cpus=12, num_gpus=4)"},
        "baseline": "first (per size; the changed cases: the same input without history)",
        "rows": rows,
    }


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(dict.fromkeys(r["case"] for r in result["rows"]))
    fig, axes = plt.subplots(1, len(cases), figsize=(6 * len(cases), 4.5), squeeze=False)
    for ax, case in zip(axes[0], cases):
        rows = [r for r in result["rows"] if r["case"] == case]
        for i, row in enumerate(rows):
            ax.bar(i, row["wall_s"], color="tab:green" if row["policy"] in ("second", "third", "changed data")
                   else "tab:blue" if row["policy"] == "stock" else "0.75")
            ax.plot([i] * len(row["wall_s_runs"]), row["wall_s_runs"], "ko", ms=4)
            if row.get("first_plan_s") is not None:
                ax.annotate(f"plan {row['first_plan_s']:.1f}s", (i, row["wall_s"]), ha="center", va="bottom",
                            fontsize=7)
        ax.set_xticks(range(len(rows)), [r["policy"].replace(", ", " ").replace(" ", "\n") + f"\n{r['ratio_to_baseline']:.2f}x"
                                         for r in rows], fontsize=7)
        ax.set_ylabel("wall time [s] (bar: median; dots: rounds)")
        ax.set_title(case)
    fig.suptitle("trident run again: planned from its history beside its first run, a run without history "
                 "(blind) and stock Ray (ratios to first; a changed case's to its blind run)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
