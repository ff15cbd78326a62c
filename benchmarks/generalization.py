"""Generated scenarios on real Ray: trident beside stock Ray Data on pipelines and clusters drawn
from seeds (``trident.autoscaler.sim.generate``), each on a ``ray.cluster_utils.Cluster`` of the
drawn shape, with the simulator's wall for the same seed beside the real one (the simulator told
this machine's cores: actors' process starts share them, tasks take their latency, and trident's
shim gates its starts).

    python benchmarks/generalization.py --seeds 8                 # the first 8 seeds this machine can host
    python benchmarks/generalization.py --seeds 1 --work-s 10     # a quick look
    python benchmarks/generalization.py --first 108 --seeds 1 --records /tmp/gen   # one seed, its run records
    python benchmarks/generalization.py --resimulate benchmarks/results/generalization-8.json  # no Ray

Seeds are taken in order from ``--first``, skipping those this machine cannot host (a rule, not a
pick): more than ``--max-nodes`` nodes, more than ``--max-actors`` actors at every pool's maximum,
or more than ``--max-memory-gib`` of stand-in memory there. For each seed the drawn cluster is
started (the head as drawn, CPUs only; every other node with its CPUs, GPUs and
``accelerator_type:<T>``), the pipeline runs once untimed with one row per block (every worker
process and actor the timed runs start is started once: on one host Ray's first run spawns a
worker per free CPU slot, and any run after it reuses them), then ``ray`` (stock Ray Data,
observed by trident) and ``trident`` run in turn, the first alternating by seed and round
(``--repeat`` rounds), each writing parquet; every output key is checked against the keys
the drawn filters and fan-outs make, exactly once.

Stand-ins (mode: calibrated): every operator sleeps its drawn time per batch (the rows over its
drawn rate on its node's accelerator type, at the batch it got, in the regime of each row's
dataset position), keeps or fans out rows by its selectivity, and an actor holds the Python
interpreter (~110 MiB) plus its drawn heap x ``--memory-scale``; its constructor sleeps its drawn
cold start. A drawn memory limit becomes ``limit x scale + 110 MiB x the replicas it holds``,
enforced by a watchdog playing the OOM killer. Task operators run at the drawn concurrency (the
user's setting), actor pools from 1 to their drawn maximum; the user names no accelerator type.
Writes ``benchmarks/results/generalization-<n>.json`` (RESULTS.md shape: a row per seed, round and
policy, real and simulated walls) and a PNG beside it.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from trident.autoscaler.sim.generate import Drawn, draw, work_bound_s
from trident.autoscaler.sim.model import CPU, SimOperator
from trident.core.errors import ConfigError
from trident.report.predictions import plan_checks

AT_REST_BYTES = 110 * 2**20
"""A stand-in replica's own Python, Ray and numpy (unique memory), before its drawn heap."""
POLICIES = ("ray", "trident")
SPAWN_S = 0.85
"""CPU-seconds an actor's process takes to start on this machine (``benchmarks/actor_starts.py``:
one at a time, one every 0.75-0.95 s): the simulator's ``actor_spawn_s`` beside the real runs."""
TASK_LATENCY_S = 0.16
"""Seconds a Ray Data task takes beyond its work on this machine at up to 8 tasks at once
(``benchmarks/task_latency.py``: 0.03, 0.14, 0.19 and 0.22 s at 1, 2, 4 and 8): the simulator's
``task_latency_s`` beside the real runs."""
TASK_OVERHEAD_S = 0.035
"""Host CPU-seconds a task costs on this machine: at 16 tasks at once a task takes 0.28 s beyond its
work (``task_latency.py``), 16 x 0.035 s over the 2 cores (at 32, 0.62 s: 32 x 0.039 s); the
simulator's ``task_overhead_s``."""


# --- which seeds this machine can host -------------------------------------------------------------

def hostable(drawn: Drawn, *, max_nodes: int, max_actors: int, max_memory_gib: float, scale: float) -> str:
    """Why this machine cannot host ``drawn`` ('' when it can)."""
    spec = drawn.spec
    nodes = sum(n.count for n in spec.nodes)
    pools = [o for o in spec.operators if o.kind == "actor"]
    actors = sum(o.max_replicas or o.replicas for o in pools)
    memory = sum((o.max_replicas or o.replicas) * replica_bytes(o, o.batch_size, scale) for o in pools)
    if nodes > max_nodes:
        return f"{nodes} nodes > {max_nodes}"
    if actors > max_actors:
        return f"{actors} actors at the pools' maxima > {max_actors}"
    if drawn.memory_limit_bytes is None and memory > max_memory_gib * 2**30:
        return f"{memory / 2**30:.1f} GiB of stand-ins at the pools' maxima > {max_memory_gib:g}"
    return ""


def replica_bytes(o: SimOperator, batch: int | None, scale: float) -> float:
    """A stand-in replica's unique memory with batches of ``batch`` rows."""
    return AT_REST_BYTES + scale * (o.heap_base_bytes + o.heap_per_batch_row_bytes * (batch or 1024))


def real_limit(drawn: Drawn, scale: float) -> int | None:
    """The drawn memory limit for the stand-ins: scaled, plus an interpreter per replica it holds."""
    limit = drawn.memory_limit_bytes
    pools = [o for o in drawn.spec.operators if o.kind == "actor"]
    if limit is None or not pools:
        return None
    mean = statistics.mean(o.heap_bytes(o.batch_size, o.regime(0.0, 0.0)) for o in pools)
    return int(limit * scale + AT_REST_BYTES * limit / max(mean, 1.0))


# --- the stand-in pipeline -------------------------------------------------------------------------

def expected_keys(drawn: Drawn) -> np.ndarray:
    """The keys the pipeline puts out, sorted: every operator's filter and fan-out applied to 0..rows-1."""
    keys = np.arange(drawn.spec.total_rows, dtype=np.int64)
    for i, o in enumerate(drawn.spec.operators):
        keys = keys[kept(keys, o.selectivity, i)]
        k = int(round(o.selectivity))
        keys = keys if k <= 1 else (keys[:, None] * 4 + np.arange(k)).ravel()
    return np.sort(keys)


def kept(keys: np.ndarray, selectivity: float, salt: int) -> np.ndarray:
    """Which rows an operator of ``selectivity`` keeps: below 1, those whose key, mixed with the
    operator's position ``salt`` (splitmix64), is even: filters one after another each keep half,
    independently. Above 1, every row (each key k then becomes ``4k + j`` for ``j < round(selectivity)``)."""
    if selectivity >= 1:
        return np.ones(len(keys), dtype=bool)
    x = keys.astype(np.uint64) + np.uint64((salt * 0x9E3779B97F4A7C15) % 2**64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return ((x ^ (x >> np.uint64(31))) & np.uint64(1)) == 0


def stand_in(o: SimOperator, index: int, pid_dir: str, scale: float):
    """The callable class (actor pools) or function (task operators) standing in for ``o``, the
    pipeline's operator number ``index``."""
    def work(batch: dict, device: str, held: list) -> dict:
        if "key" not in batch:  # the first operator: every row's key and dataset position is its id
            batch = {"key": batch["id"], "pos": batch["id"]}
        pos, n = batch["pos"], len(batch["pos"])
        peak = dict(o.peak_rows_per_s).get(device) or min(r for _, r in o.peak_rows_per_s)
        scales = np.ones(n)
        for r in sorted(o.regimes, key=lambda r: r.start):
            scales[pos >= r.start] = r.rate_scale
        time.sleep(float(np.sum((n + o.half_batch_rows) / n / (peak * scales))) if n else 0.0)
        need = int(scale * o.heap_per_batch_row_bytes * n)
        if need > len(held[0]):  # kept, as a framework's caching allocator keeps its peak
            held[0] = np.ones(need, dtype=np.uint8)
        if o.selectivity < 1:
            keep = kept(batch["key"], o.selectivity, index)
            return {k: v[keep] for k, v in batch.items()}
        k = int(round(o.selectivity))
        if k == 1:
            return batch
        return {"key": (batch["key"][:, None] * 4 + np.arange(k)).ravel(), "pos": np.repeat(pos, k)}

    if o.kind == "task":
        def task(batch):
            return work(batch, CPU, [np.zeros(0, dtype=np.uint8)])
        task.__name__ = o.name
        return task

    class StandIn:
        def __init__(self):
            import ray

            me = ray.get_runtime_context().get_node_id()
            res = next((n["Resources"] for n in ray.nodes() if n["NodeID"] == me), {})
            gpu = next((k.split(":", 1)[1] for k in res if k.startswith("accelerator_type:")), None)
            self.device = gpu if o.num_gpus > 0 and gpu else CPU
            self.base = np.ones(int(scale * o.heap_base_bytes), dtype=np.uint8)
            self.held = [np.zeros(0, dtype=np.uint8)]
            time.sleep(o.cold_start_s)
            Path(pid_dir, str(os.getpid())).touch()

        def __call__(self, batch):
            return work(batch, self.device, self.held)

    StandIn.__name__ = o.name.capitalize()
    return StandIn


def build(drawn: Drawn, pid_dir: str, scale: float):
    import ray
    from ray.data import ActorPoolStrategy

    spec = drawn.spec
    ds = ray.data.range(spec.total_rows, override_num_blocks=max(1, spec.total_rows // spec.rows_per_block))
    for i, o in enumerate(spec.operators):
        fn = stand_in(o, i, pid_dir, scale)
        if o.kind == "task":
            ds = ds.map_batches(fn, batch_size=o.batch_size, num_cpus=o.num_cpus, concurrency=max(1, o.replicas))
        else:
            ds = ds.map_batches(fn, batch_size=o.batch_size, num_cpus=o.num_cpus, num_gpus=o.num_gpus or None,
                                compute=ActorPoolStrategy(min_size=max(1, o.min_replicas),
                                                          max_size=max(1, o.max_replicas or o.replicas)))
    return ds


def start_cluster(drawn: Drawn):
    """The drawn nodes as a ``ray.cluster_utils.Cluster`` (its first node group is the CPU head)."""
    import ray
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    head, *rest = drawn.spec.nodes
    store = 300 * 2**20
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": int(head.cpus), "num_gpus": int(head.gpus),
                                                       "include_dashboard": False, "object_store_memory": store})
    for group in ([head] * (head.count - 1)) + [g for g in rest for _ in range(g.count)]:
        res = {f"accelerator_type:{group.gpu_type}": 1} if group.gpus > 0 and group.gpu_type else {}
        c.add_node(num_cpus=int(group.cpus), num_gpus=int(group.gpus), resources=res, object_store_memory=store)
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    return c


# --- one run, one seed -----------------------------------------------------------------------------

def run_once(drawn: Drawn, policy: str, *, scale: float, expected: np.ndarray, record: str | None = None) -> dict:
    """One run of ``drawn`` under ``policy`` (its run record written to ``record`` when given)."""
    import pyarrow.parquet as pq

    import trident
    from harness.bench import wait_for_exit, wait_until_idle, write_watched

    wait_until_idle()
    work = Path(tempfile.mkdtemp(prefix="trident-generalization-"))
    (work / "pids").mkdir()
    limit = real_limit(drawn, scale)
    ds = build(drawn, str(work / "pids"), scale)
    run = trident.autoscale(policy=policy, memory_limit=limit, controller_timeout_s=120.0, history=False,
                            memory_scope="workers")  # the watchdog holds the stand-ins alone to the limit
    wall_s, error, kills = write_watched(ds, run, work, limit)
    keys = (np.sort(pq.read_table(str(work / "out"), columns=["key"]).column("key").to_numpy())
            if (work / "out").exists() else np.zeros(0, dtype=np.int64))
    wait_for_exit([int(f.name) for f in (work / "pids").iterdir() if f.name.isdigit()])
    shutil.rmtree(work, ignore_errors=True)
    if record:
        run.to_json(record)
    s = run.summary()
    errors = [c.error for ex in run.executions for c in plan_checks(ex) if c.error is not None]
    return {"policy": policy, "seed": drawn.seed, "wall_s": wall_s, "rows": int(len(keys)),
            "exactly_once": bool(len(keys) == len(expected) and np.array_equal(keys, expected)),
            "rows_lost": int(len(np.setdiff1d(expected, keys))), "rows_duplicated": int(len(keys) - len(np.unique(keys))),
            "oom_kills": kills, "reconfigurations": s.get("reconfigurations"), "error": error,
            "prediction_error_median": statistics.median(errors) if errors else None,
            "decisions": [f"{d.time_s:.1f} s {d.kind}: {d.reason[:200]}" for ex in run.executions
                          for d in ex.decisions if d.kind in ("plan", "mismatch", "replan")]}


def simulated(drawn: Drawn, cores: int) -> dict[str, float]:
    """The simulator's wall for ``drawn`` under each policy (seconds), on a host of ``cores`` cores
    as the real runs are: every node's actors start their processes on those cores
    (:data:`SPAWN_S` each), a task takes :data:`TASK_LATENCY_S` beyond its work (more with many at
    once: :data:`TASK_OVERHEAD_S`), and trident's
    shim starts at most ``cores`` actors side by side."""
    from trident.autoscaler.sim.pipeline import simulate
    from trident.autoscaler.sim.ray_rule import RayRule
    from trident.core.policy import PolicyContext

    ctx = PolicyContext(memory_limit_bytes=drawn.memory_limit_bytes, seed=drawn.seed)
    return {p: simulate(replace(drawn.spec, actor_spawn_s=SPAWN_S, host_cores=cores, task_latency_s=TASK_LATENCY_S,
                                task_overhead_s=TASK_OVERHEAD_S, start_slots=cores if p == "trident" else None),
                        policy=RayRule(context=ctx) if p == "ray" else "trident", seed=drawn.seed,
                        context=ctx, max_time_s=3_600.0).wall_s for p in POLICIES}


def warm_up(drawn: Drawn, scale: float) -> None:
    """The drawn pipeline with one row per block, under stock Ray, untimed: every worker process
    and actor the timed runs would start is started once (on one host, Ray's first run spawns a
    worker per free CPU slot, and a run after it reuses them)."""
    import trident
    from harness.bench import wait_for_exit, wait_until_idle

    wait_until_idle()
    blocks = max(1, drawn.spec.total_rows // drawn.spec.rows_per_block)
    tiny = replace(drawn, spec=replace(drawn.spec, total_rows=blocks, rows_per_block=1))
    work = Path(tempfile.mkdtemp(prefix="trident-generalization-warm-"))
    (work / "pids").mkdir()
    with trident.autoscale(policy="ray", history=False):
        build(tiny, str(work / "pids"), scale).write_parquet(str(work / "out"))
    wait_for_exit([int(f.name) for f in (work / "pids").iterdir() if f.name.isdigit()])
    shutil.rmtree(work, ignore_errors=True)


def run_seed(drawn: Drawn, *, scale: float, repeat: int, records: str | None = None) -> list[dict]:
    """Rounds of both policies on ``drawn``'s cluster after a warm-up; the policy that goes first
    alternates from round to round and from seed to seed (by the seed's parity)."""
    import ray

    expected = expected_keys(drawn)
    bound = work_bound_s(drawn.spec)
    from trident.autoscaler.shim.starts import host_cores

    sim = simulated(drawn, host_cores())
    cluster = start_cluster(drawn)
    rows = []
    try:
        warm_up(drawn, scale)
        for k in range(repeat):
            order = POLICIES if (k + drawn.seed) % 2 == 0 else POLICIES[::-1]
            got = {p: run_once(drawn, p, scale=scale, expected=expected,
                               record=os.path.join(records, f"seed-{drawn.seed}-{p}-{k + 1}.json") if records else None)
                   for p in order}
            for p in POLICIES:
                row = got[p]
                row.update(round=k + 1, first=order[0], bound_s=bound, vs_bound=bound / row["wall_s"],
                           sim_wall_s=sim[p], sim_vs_real=sim[p] / row["wall_s"],
                           ratio_to_baseline=got["ray"]["wall_s"] / row["wall_s"], scenario=drawn.describe())
                rows.append(row)
                print(f"  seed {drawn.seed} round {k + 1} {p:8s} {row['wall_s']:6.1f} s (sim {sim[p]:6.1f} s), "
                      f"{row['ratio_to_baseline']:.2f}x ray, {row['vs_bound']:.2f} of the bound, "
                      f"OOM kills {row['oom_kills']}, exactly once: {row['exactly_once']}, {order[0]} first",
                      file=sys.stderr, flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
    return rows


# --- the benchmark ---------------------------------------------------------------------------------

def pick(first: int, n: int, *, work_s: float, scan: int, **fits) -> tuple[list[Drawn], dict[int, str]]:
    """The first ``n`` seeds from ``first`` this machine can host, and why each one before was skipped."""
    chosen, skipped = [], {}
    for seed in range(first, first + scan):
        drawn = draw(seed, work_s=work_s)
        why = hostable(drawn, **fits)
        if why:
            skipped[seed] = why
        else:
            chosen.append(drawn)
        if len(chosen) == n:
            break
    return chosen, skipped


def summary(rows: list[dict]) -> dict:
    tri = [r for r in rows if r["policy"] == "trident"]
    ratios = [r["ratio_to_baseline"] for r in tri]
    errors = [r["prediction_error_median"] for r in tri if r["prediction_error_median"] is not None]
    return {"runs": len(tri), "median_ratio": statistics.median(ratios), "worst_ratio": min(ratios),
            "median_vs_bound": statistics.median(r["vs_bound"] for r in tri),
            "ray_median_vs_bound": statistics.median(r["vs_bound"] for r in rows if r["policy"] == "ray"),
            "sim_vs_real_median": {p: statistics.median(r["sim_vs_real"] for r in rows if r["policy"] == p)
                                   for p in POLICIES},
            "prediction_error_median": statistics.median(errors) if errors else None,
            "oom_kills": {p: sum(r["oom_kills"] for r in rows if r["policy"] == p) for p in POLICIES},
            "all_exactly_once": all(r["exactly_once"] for r in rows),
            "losses": sorted({r["seed"] for r in tri if r["ratio_to_baseline"] < 0.97})}


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tri = [r for r in rows if r["policy"] == "trident"]
    labels = [f"{r['seed']}" + (f"/{r['round']}" if r["round"] > 1 else "") for r in tri]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
    a.bar(labels, [r["ratio_to_baseline"] for r in tri], color="tab:blue", label="trident vs stock Ray")
    ray = {(r["seed"], r["round"]): r["wall_s"] for r in rows if r["policy"] == "ray"}
    a.scatter(labels, [ray[(r["seed"], r["round"])] / r["bound_s"] for r in tri], color="k", marker="_", s=300,
              label="the work bound vs stock Ray")
    a.axhline(1.0, color="k", lw=0.8)
    a.set_xlabel("seed (/round)")
    a.set_ylabel("stock Ray wall / trident wall")
    a.legend(fontsize=8)
    for p, colour in (("ray", "tab:orange"), ("trident", "tab:blue")):
        pts = [r for r in rows if r["policy"] == p]
        b.scatter([r["wall_s"] for r in pts], [r["sim_wall_s"] for r in pts], color=colour, label=p)
    top = max([r["wall_s"] for r in rows] + [r["sim_wall_s"] for r in rows])
    b.plot([0, top], [0, top], color="k", lw=0.8)
    b.set_xlabel("real wall (s)")
    b.set_ylabel("simulated wall (s)")
    b.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def resimulate(path: Path) -> int:
    """Print the simulator's wall now (on this machine's cores) for every run of an earlier result,
    beside the real wall it measured, and the work bound now beside the one it was judged on; the
    share of runs within 15% and the median fraction of today's bound, per policy."""
    from trident.autoscaler.shim.starts import host_cores

    doc = json.loads(path.read_text())
    work_s, rows = doc["workload"]["work_s"], doc["rows"]
    drawn = {seed: draw(seed, work_s=work_s) for seed in sorted({r["seed"] for r in rows})}
    sims = {seed: simulated(d, host_cores()) for seed, d in drawn.items()}
    bounds = {seed: work_bound_s(d.spec) for seed, d in drawn.items()}
    print(f"{'seed':>5} {'policy':8} {'real s':>7} {'sim s':>6} {'sim/real':>8} {'then':>6} {'bound s':>8} {'then':>6}")
    for r in rows:
        sim = sims[r["seed"]][r["policy"]]
        print(f"{r['seed']:>5} {r['policy']:8} {r['wall_s']:7.1f} {sim:6.1f} {sim / r['wall_s']:8.2f} "
              f"{r['sim_vs_real']:6.2f} {bounds[r['seed']]:8.1f} {r['bound_s']:6.1f}")
    for pol in POLICIES:
        mine = [r for r in rows if r["policy"] == pol]
        ratios = [sims[r["seed"]][pol] / r["wall_s"] for r in mine]
        print(f"{pol}: median sim/real {statistics.median(ratios):.2f}, within 15% on "
              f"{sum(abs(x - 1) <= 0.15 for x in ratios)} of {len(ratios)}, mean |sim/real - 1| "
              f"{statistics.mean(abs(x - 1) for x in ratios):.3f}; median of the bound now "
              f"{statistics.median(bounds[r['seed']] / r['wall_s'] for r in mine):.2f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from trident.sim.compare import result_document

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=8, help="how many seeds to run")
    p.add_argument("--first", type=int, default=0, help="the first seed looked at")
    p.add_argument("--work-s", type=float, default=45.0, help="each scenario's work bound, seconds")
    p.add_argument("--repeat", type=int, default=1, help="rounds of both policies per seed")
    p.add_argument("--memory-scale", type=float, default=0.125, help="stand-in heap / drawn heap")
    p.add_argument("--max-nodes", type=int, default=4)
    p.add_argument("--max-actors", type=int, default=24)
    p.add_argument("--max-memory-gib", type=float, default=10.0)
    p.add_argument("--out", default="benchmarks/results", help="results folder")
    p.add_argument("--records", default=None, help="a folder for every run's record (seed-<n>-<policy>-<round>.json)")
    p.add_argument("--resimulate", metavar="RESULTS_JSON", default=None,
                   help="no Ray: the simulator's walls for the seeds of an earlier result, beside its real ones")
    args = p.parse_args(argv)
    if args.resimulate:
        return resimulate(Path(args.resimulate))
    if min(args.seeds, args.repeat, args.max_nodes, args.max_actors) < 1 or args.first < 0 or \
            args.work_s <= 0 or not 0 < args.memory_scale <= 1 or args.max_memory_gib <= 0:
        raise ConfigError("arguments", vars(args), "seeds, repeat, max-nodes, max-actors >= 1; first >= 0; "
                                                   "work-s, max-memory-gib > 0; 0 < memory-scale <= 1")
    if args.records:
        os.makedirs(args.records, exist_ok=True)
    chosen, skipped = pick(args.first, args.seeds, work_s=args.work_s, scan=50 * args.seeds,
                           max_nodes=args.max_nodes, max_actors=args.max_actors,
                           max_memory_gib=args.max_memory_gib, scale=args.memory_scale)
    print(f"seeds: {[d.seed for d in chosen]} ({len(skipped)} skipped: this machine cannot host them)",
          file=sys.stderr, flush=True)
    rows: list[dict] = []
    for k, drawn in enumerate(chosen):
        print(f"[{k + 1}/{len(chosen)}] {drawn.describe()}", file=sys.stderr, flush=True)
        rows += run_seed(drawn, scale=args.memory_scale, repeat=args.repeat, records=args.records)
    stats = summary(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"generalization-{len(chosen)}"
    doc = result_document(rows, workload={"name": "generated-real", "seeds": [d.seed for d in chosen],
                                          "skipped": skipped, "work_s": args.work_s,
                                          "memory_scale": args.memory_scale, "repeat": args.repeat},
                          benchmark="generalization")
    doc["workload"]["mode"] = "calibrated"
    doc["workload"]["stand_in"] = ("each operator sleeps its drawn time per batch, filters or fans out its rows and "
                                   "holds its drawn heap x memory_scale beside its interpreter; a watchdog plays the "
                                   "OOM killer for a drawn memory limit")
    doc["summary"] = stats
    (out / f"{name}.json").write_text(json.dumps(doc, indent=1))
    plot(rows, out / f"{name}.png", f"{len(chosen)} generated scenarios on real Ray: median "
                                    f"{stats['median_ratio']:.2f}x stock Ray, worst {stats['worst_ratio']:.2f}x")
    print(json.dumps(stats, indent=1))
    print(f"wrote {out / name}.json and .png", file=sys.stderr)
    return 0 if stats["all_exactly_once"] else 1


if __name__ == "__main__":
    sys.exit(main())
