"""The scenario suite: six pipelines where an autoscaler's choices matter, each run under the
user's static setup, the best static setup in hindsight, Ray Data's autoscaler, DS2 and trident
side by side, with the work bound.

Every stage is a calibrated stand-in on logical GPUs: a batch sleeps ``fixed_s + per_row_s x
rows`` (the per-row cost may differ by row position, in equal phases of the rows, for a regime
shift, and by the node's accelerator type) and its process holds ``base_mb + per_row_mb x rows`` MiB
of unique memory (USS; ``base_mb`` counts the process's own Python and Ray, ~110 MiB, as the watchdog
and the work bound do) for the largest batch it has run (kept between batches, as a framework's
caching allocator keeps its peak). The cluster is a
``ray.cluster_utils.Cluster``: a CPU head and two GPU nodes of types A and B. A watchdog plays the
OOM killer for the stand-ins' summed memory (as in :mod:`harness.bench`).

- ``stationary``: two GPU stages, the second 1.5x as costly; nothing changes.
- ``regime-shift``: the bottleneck moves from the second stage to the first halfway through.
- ``long-shift``: the bottleneck moves between the stages three times in a long run, and rows
  are large (100 kB), so Ray Data's object store budget bounds the queues between the stages:
  a stage cannot work ahead through the next phase while the other one is the bottleneck.
- ``memory-bound``: large replicas; the best split (3 Detect and 4 Embed replicas, 4,100 MiB) fits
  the limit, and every split that fills the 8 GPU slots breaks it.
- ``two-types``: the first stage is 4x faster on type B, the second 2x faster on type A; the
  user names no type.
- ``batch-size``: one stage with a large fixed cost per batch and memory that grows with the
  batch; the user's batch size is small.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import os
import shutil
import statistics
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import ship
from harness.bench import wait_for_exit, wait_until_idle, write_watched
from trident.core.errors import ConfigError

POLICIES = ("static", "tuned", "ray", "ds2", "trident")
GPU_TYPES = ("A", "B")


@dataclass(frozen=True)
class Stage:
    """One GPU actor stage of a scenario (seconds and MiB per batch; per type, per phase)."""

    name: str
    per_row_s: tuple[float, ...]
    """Seconds per row in each phase (equal shares of the rows, in order; type A)."""
    fixed_s: float = 0.0
    speed: dict = field(default_factory=dict)
    """Speed-up per accelerator type (default 1)."""
    base_mb: float = 0.0
    """MiB the replica's process holds at rest, its Python and Ray included (when it is larger)."""
    per_row_mb: float = 0.0
    batch_size: int = 20
    max_replicas: int = 6
    num_gpus: float = 0.5

    def batch_s(self, per_phase: list[int], gpu_type: str) -> float:
        """Seconds for a batch with ``per_phase[k]`` rows of phase ``k``."""
        work = sum(n * c for n, c in zip(per_phase, self.per_row_s))
        return (self.fixed_s + work) / self.speed.get(gpu_type, 1.0)


@dataclass(frozen=True)
class Scenario:
    name: str
    rows: int
    stages: tuple[Stage, ...]
    memory_limit_mb: float | None = None
    block_rows: int = 20
    row_bytes: int = 0
    """Payload per row (bytes) the first stage adds and the last drops."""
    object_store_mb: float | None = None
    """Ray Data's object store budget for the dataset (None: Ray's default)."""

    def scaled(self, scale: float) -> "Scenario":
        rows = max(200, int(self.rows * scale)) // self.block_rows * self.block_rows
        return dataclasses.replace(self, rows=rows)


def scenarios() -> dict[str, Scenario]:
    """The suite at scale 1 (each at least three minutes of work at Ray's speed on 4 GPUs)."""
    return {s.name: s for s in (
        Scenario("stationary", 24_000, (Stage("detect", (0.040, 0.040)), Stage("embed", (0.060, 0.060)))),
        Scenario("regime-shift", 24_000, (Stage("detect", (0.020, 0.080)), Stage("embed", (0.080, 0.020)))),
        Scenario("long-shift", 32_000, (Stage("detect", (0.020, 0.080, 0.020, 0.080)),
                                        Stage("embed", (0.080, 0.020, 0.080, 0.020))),
                 row_bytes=100_000, object_store_mb=300),
        Scenario("memory-bound", 24_000, (Stage("detect", (0.040, 0.040), base_mb=700),
                                          Stage("embed", (0.060, 0.060), base_mb=500)), memory_limit_mb=4350),
        Scenario("two-types", 48_000, (Stage("detect", (0.080, 0.080), speed={"B": 4.0}),
                                       Stage("embed", (0.040, 0.040), speed={"A": 2.0}))),
        Scenario("batch-size", 27_000, (Stage("embed", (0.030, 0.030), fixed_s=0.6, base_mb=150, per_row_mb=10,
                                             batch_size=8, max_replicas=8),), memory_limit_mb=5000, block_rows=8),
    )}


def work_bound_s(sc: Scenario, *, gpus: float = 4.0) -> float:
    """The faster of two ideal schedules with no cold start, fill or drain: per phase of the rows,
    the stages' work (at their best type and the largest batch the memory limit allows) on the
    best split of the GPU slots that fits the memory limit, the phases summed (no schedule without
    a queue between the stages beats it); and, where the queues between the stages are unbounded
    (no ``object_store_mb``), the best fixed setup's time with every stage working ahead
    (:func:`tuned_setup`; on regime-shift one 4 + 4 split does each stage's whole work in 150 s
    where the phases take 160)."""
    slots = [int(gpus / st.num_gpus) for st in sc.stages]
    phases = len(sc.stages[0].per_row_s)
    total = 0.0
    for phase in range(phases):
        rows = sc.rows / phases
        best = math.inf
        for split in itertools.product(*[range(1, min(s, st.max_replicas) + 1) for s, st in zip(slots, sc.stages)]):
            if sum(n * st.num_gpus for n, st in zip(split, sc.stages)) > gpus + 1e-9:
                continue
            times, mem = [], 0.0
            for n, st in zip(split, sc.stages):
                b = _best_batch(st, n, sc, split)
                per_batch = st.fixed_s + b * st.per_row_s[phase]
                fastest = max([1.0] + list(st.speed.values()))
                times.append(rows / b * per_batch / fastest / n)
                mem += n * (st.base_mb + st.per_row_mb * b)
            if sc.memory_limit_mb is None or mem <= sc.memory_limit_mb:
                best = min(best, max(times))
        total += best
    if sc.object_store_mb is None:
        total = min(total, tuned_setup(sc, gpus=gpus)[1])
    return total


def _best_batch(st: Stage, n: int, sc: Scenario, split) -> int:
    """The largest batch (a multiple of the user's, up to 8x) whose memory fits the limit."""
    if sc.memory_limit_mb is None or st.per_row_mb == 0:
        return st.batch_size
    others = sum(m * (o.base_mb + o.per_row_mb * o.batch_size) for m, o in zip(split, sc.stages) if o is not st)
    b = st.batch_size
    while b * 2 <= 8 * st.batch_size and others + n * (st.base_mb + st.per_row_mb * b * 2) <= sc.memory_limit_mb:
        b *= 2
    return b


@dataclass(frozen=True)
class StageSetup:
    """A fixed setup of one stage: replicas, batch size and accelerator type (None: any node)."""

    replicas: int
    batch_size: int
    accelerator_type: str | None = None


def tuned_setup(sc: Scenario, *, gpus: float = 4.0,
                gpus_per_type: float = 2.0) -> tuple[tuple[StageSetup, ...], float]:
    """The best fixed setup in hindsight, as a user who knew every stage's calibrated cost would set
    it by hand: one (replicas, batch, type) per stage for the whole run, within the GPUs (each
    type's included), the stages' ``max_replicas`` and the memory limit, minimising the work time
    (no cold start, fill or drain): the busiest stage's summed work over its replicas where the
    queues between the stages are unbounded (a stage works ahead through the next phase while the
    other is the bottleneck; regime-shift's fixed 4 + 4 ran in 172.7 s, where phase by phase it
    would take 240), the phases' summed bottleneck where Ray Data's object store budget bounds
    them (``object_store_mb``). An untyped stage is charged its slowest type's speed (its replicas
    may land on either). Returns (setups, predicted seconds)."""
    phases = len(sc.stages[0].per_row_s)
    options = []
    for st in sc.stages:
        batches = [st.batch_size * 2**k for k in range(4)] if st.per_row_mb else [st.batch_size]
        types = [None] + [t for t in GPU_TYPES if st.speed] if st.speed else [None]
        options.append([StageSetup(n, b, t) for n in range(1, min(int(gpus / st.num_gpus), st.max_replicas) + 1)
                        for b in batches for t in types])
    best, best_s = None, math.inf
    for combo in itertools.product(*options):
        used = sum(c.replicas * st.num_gpus for c, st in zip(combo, sc.stages))
        per_type = {t: sum(c.replicas * st.num_gpus for c, st in zip(combo, sc.stages) if c.accelerator_type == t)
                    for t in GPU_TYPES}
        mem = sum(c.replicas * (st.base_mb + st.per_row_mb * c.batch_size) for c, st in zip(combo, sc.stages))
        if used > gpus + 1e-9 or max(per_type.values()) > gpus_per_type + 1e-9 or (
                sc.memory_limit_mb is not None and mem > sc.memory_limit_mb):
            continue
        work = [[sc.rows / phases / c.batch_size * (st.fixed_s + c.batch_size * st.per_row_s[phase])
                 / _speed(st, c.accelerator_type) / c.replicas for phase in range(phases)]
                for c, st in zip(combo, sc.stages)]
        if sc.object_store_mb is None:
            total = max(sum(w) for w in work)
        else:
            total = sum(max(w[phase] for w in work) for phase in range(phases))
        if total < best_s - 1e-9:
            best, best_s = combo, total
    return best, best_s


def _speed(st: Stage, accelerator_type: str | None) -> float:
    if accelerator_type is None:
        return min(st.speed.get(t, 1.0) for t in GPU_TYPES)
    return st.speed.get(accelerator_type, 1.0)


def stage_class(st: Stage, rows_total: int, pid_dir: str, *, last: bool = False):
    """The actor class standing in for ``st``: sleeps and holds memory per batch as calibrated
    (the ``last`` stage drops the rows' payload)."""
    import numpy as np

    class StandIn:
        def __init__(self):
            import ray

            me = ray.get_runtime_context().get_node_id()
            res = next((n["Resources"] for n in ray.nodes() if n["NodeID"] == me), {})
            self.gpu_type = next((k.split(":", 1)[1] for k in res if k.startswith("accelerator_type:")), "A")
            import psutil

            at_rest = psutil.Process().memory_full_info().uss  # the interpreter, Ray and numpy
            self.base = bytearray(max(0, int(st.base_mb * 2**20) - at_rest)) if st.base_mb else b""
            for i in range(0, len(self.base), 4096):
                self.base[i] = 1
            self.held = bytearray()
            Path(pid_dir, str(os.getpid())).touch()

        def __call__(self, batch):
            ids = batch["id"]
            n = len(ids)
            need = int(st.per_row_mb * n * 2**20)
            if need > len(self.held):  # kept, as a framework's caching allocator keeps its peak
                self.held = bytearray(need)
                for i in range(0, need, 4096):
                    self.held[i] = 1
            phases = len(st.per_row_s)
            per_phase = np.bincount(np.minimum(ids * phases // rows_total, phases - 1), minlength=phases)
            time.sleep(st.batch_s(per_phase.tolist(), self.gpu_type))
            batch[f"{st.name}_on"] = [self.gpu_type] * n
            if last:
                batch.pop("pad", None)
            return batch

    StandIn.__name__ = st.name.capitalize()
    return StandIn


def _pre(batch, row_bytes: int = 0):
    import numpy as np

    n = len(batch["id"])
    time.sleep(0.002 * n)
    if row_bytes:
        batch["pad"] = np.ones((n, row_bytes), dtype=np.uint8)
    return batch


def build(sc: Scenario, policy: str, pid_dir: str):
    import ray
    from ray.data import ActorPoolStrategy

    ds = ray.data.range(sc.rows, override_num_blocks=sc.rows // sc.block_rows).map_batches(
        _pre, num_cpus=1, fn_kwargs={"row_bytes": sc.row_bytes})
    tuned = tuned_setup(sc)[0] if policy == "tuned" else None
    for i, st in enumerate(sc.stages):
        size, batch, typed = max(1, st.max_replicas // 2), st.batch_size, {}
        if tuned is not None:
            size, batch = tuned[i].replicas, tuned[i].batch_size
            typed = {"accelerator_type": tuned[i].accelerator_type} if tuned[i].accelerator_type else {}
        pool = ActorPoolStrategy(size=size) if policy in ("static", "tuned") else ActorPoolStrategy(
            min_size=1, max_size=st.max_replicas)
        ds = ds.map_batches(stage_class(st, sc.rows, pid_dir, last=i == len(sc.stages) - 1), compute=pool,
                            num_gpus=st.num_gpus, batch_size=batch, **typed)
    if sc.object_store_mb is not None:
        ds.context.execution_options.resource_limits = ds.context.execution_options.resource_limits.copy(
            object_store_memory=int(sc.object_store_mb * 2**20))
    return ds


@dataclass
class Run:
    policy: str
    wall_s: float
    rows_lost: int
    rows_duplicated: int
    oom_kills: int
    summary: dict
    error: str | None = None
    reach_s: list = field(default_factory=list)
    """Seconds from each plan to its pool target reached (the shim's ``target_reached`` actions)."""
    starting_s: list = field(default_factory=list)
    """Of each of those, the seconds an actor of the pool was starting (its cold starts)."""
    replans: int = 0
    record: object = None
    first_tenth_s: float | None = None
    """Seconds until a tenth of the rows were out of the last model stage (start-up and fill)."""
    steady_rows_per_s: float | None = None
    """Rows per second out of the last model stage between a quarter and three quarters of the rows."""
    round: int = 1
    """Which round of the policies this run was in (``--repeat``; each round runs every policy once)."""


def run_once(sc: Scenario, policy: str, *, interval_s: float = 1.0, history: bool | str = False) -> Run:
    """One run of ``sc`` under ``policy`` (``history``: as ``trident.autoscale``'s; off by default,
    so that the suite's runs never teach each other)."""
    import pyarrow.parquet as pq

    import trident

    wait_until_idle()
    work = Path(tempfile.mkdtemp(prefix="trident-suite-"))
    (work / "pids").mkdir()
    limit = int(sc.memory_limit_mb * 2**20) if sc.memory_limit_mb else None
    ds = build(sc, policy, str(work / "pids"))
    run = trident.autoscale(policy="static" if policy == "tuned" else policy, memory_limit=limit,
                            interval_s=interval_s, controller_timeout_s=120.0, history=history,
                            memory_scope="workers")  # the watchdog holds the stand-ins alone to the limit
    wall_s, error, kills = write_watched(ds, run, work, limit)
    ids = pq.read_table(str(work / "out"), columns=["id"]).column("id").to_pylist() if (work / "out").exists() else []
    wait_for_exit([int(f.name) for f in (work / "pids").iterdir() if f.name.isdigit()])
    shutil.rmtree(work, ignore_errors=True)
    seen = set(ids)
    reached = [reach_and_start(ex) for ex in run.executions]
    first_tenth_s, steady = start_and_steady(run.executions[0], sc.rows) if run.executions else (None, None)
    return Run(policy=policy, wall_s=wall_s, rows_lost=sc.rows - len(seen & set(range(sc.rows))),
               rows_duplicated=len(ids) - len(seen), oom_kills=kills, summary=run.summary(), error=error,
               reach_s=[r for ex in reached for r, _ in ex], starting_s=[st for ex in reached for _, st in ex],
               replans=sum(d.kind == "replan" for ex in run.executions for d in ex.decisions), record=run.record,
               first_tenth_s=first_tenth_s, steady_rows_per_s=steady)


def reach_and_start(ex) -> list[tuple[float, float]]:
    """Per pool target an execution reached: (seconds from the plan, seconds of them an actor of
    the pool was pending: as the shim counted them at every scheduling step, else over the
    snapshots between). The difference is what the plan's actuation added to the cold starts
    (waiting for drains or for another pool's room)."""
    out = []
    for a in ex.actions:
        if a.kind != "target_reached" or a.value is None:
            continue
        if a.starting_s is not None:
            out.append((a.value, a.starting_s))
            continue
        snaps = [s for s in ex.snapshots if a.time_s - a.value <= s.time_s <= a.time_s]
        starting = 0.0
        for s0, s1 in itertools.pairwise(snaps):
            op = next((o for o in s0.operators if o.name == a.operator), None)
            if op is not None and op.actors_pending > 0:
                starting += s1.time_s - s0.time_s
        out.append((a.value, starting))
    return out


def start_and_steady(ex, rows: int) -> tuple[float | None, float | None]:
    """Start-up and steady pace of an execution, from the rows out of its last actor pool (the
    last model stage) in its snapshots: (seconds until a tenth of ``rows`` were out, rows per
    second between a quarter and three quarters of them; above the pipeline's own pace while that
    stage works off a queue built earlier); ``None`` where the run fell short."""
    pools = [o for o in (ex.snapshots[0].operators if ex.snapshots else ()) if o.config.kind == "actor"]
    if not pools or rows <= 0:
        return None, None
    last = max(pools, key=lambda o: o.index).name
    pts = [(s.time_s, o.rows_out_total) for s in ex.snapshots for o in s.operators if o.name == last]

    def first(frac: float) -> tuple[float, int] | None:
        return next(((t, r) for t, r in pts if r >= frac * rows), None)

    tenth, quarter, three = first(0.1), first(0.25), first(0.75)
    steady = None
    if quarter and three and three[0] > quarter[0]:
        steady = (three[1] - quarter[1]) / (three[0] - quarter[0])
    return (tenth[0] if tenth else None), steady


def start_cluster():
    """A CPU head and two GPU nodes (types A and B, 2 logical GPUs each); connects this driver."""
    import ray
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 4, "include_dashboard": False})
    for t in GPU_TYPES:
        c.add_node(num_cpus=6, num_gpus=2, resources={f"accelerator_type:{t}": 1})
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    ship()
    return c


def result(sc: Scenario, runs: list[Run], *, scale: float, started: str) -> dict:
    """One scenario's runs as a RESULTS.md-shaped dict, ratios to the ``ray`` run of the same round
    and to the work bound; with several rounds each row names its round, and ``medians`` sums the
    rounds up per policy."""
    import platform

    import ray

    import trident

    bound = work_bound_s(sc)
    even = all(len(set(st.per_row_s)) == 1 for st in sc.stages)  # no shift: the bound's pace is even
    rounds = max(r.round for r in runs) if runs else 1
    rows = []
    for r in runs:
        base, tuned = _first(runs, "ray", r.round), _first(runs, "tuned", r.round)  # ratios within a round
        row = {"policy": r.policy, "wall_s": round(r.wall_s, 2),
               "throughput_rows_per_s": round(sc.rows / r.wall_s, 2) if r.wall_s > 0 else 0.0,
               "rows_lost": r.rows_lost, "rows_duplicated": r.rows_duplicated, "oom_kills": r.oom_kills,
               "ratio_to_bound": round(bound / r.wall_s, 3) if r.wall_s > 0 else None}
        if base is not None:
            row["ratio_to_baseline"] = round(base.wall_s / r.wall_s, 3)
        if tuned is not None:
            row["ratio_to_tuned"] = round(tuned.wall_s / r.wall_s, 3)
        if r.policy == "tuned":
            setups, predicted = tuned_setup(sc)
            row["setup"] = [dataclasses.asdict(x) for x in setups]
            row["work_s"] = round(predicted, 2)
            row["note"] = ("the best fixed setup in hindsight (replicas, batch, type per stage for the whole run, "
                           "from the calibrated costs), run under Ray Data with fixed pools")
        if "reconfigurations" in r.summary:
            row["reconfigurations"] = r.summary["reconfigurations"]
        if r.reach_s and r.policy == "trident":
            row["plan_to_target_median_s"] = round(statistics.median(r.reach_s), 2)
            row["plan_to_target_max_s"] = round(max(r.reach_s), 2)
            beyond = [reach - start for reach, start in zip(r.reach_s, r.starting_s)]
            row["plan_to_target_beyond_cold_start_median_s"] = round(statistics.median(beyond), 2)
            row["cold_start_median_s"] = round(statistics.median(r.starting_s), 2)
            row["replans"] = r.replans
        if r.first_tenth_s is not None:
            row["first_tenth_s"] = round(r.first_tenth_s, 2)
        if r.steady_rows_per_s is not None:
            row["steady_rows_per_s"] = round(r.steady_rows_per_s, 2)
            if even:
                row["steady_ratio_to_bound"] = round(r.steady_rows_per_s * bound / sc.rows, 3)
        if r.error:
            row["error"] = r.error
        if rounds > 1:
            row["round"] = r.round
        rows.append(row)
    ray_walls = [r.wall_s for r in runs if r.policy == "ray" and not r.error]
    bound_row = {"policy": "bound", "wall_s": round(bound, 2), "throughput_rows_per_s": round(sc.rows / bound, 2),
                 "note": "calibrated work on the best memory-feasible split and type, largest safe batch; "
                         "no cold start, fill or drain"}
    if ray_walls:  # over rounds, to Ray's median run
        bound_row["ratio_to_baseline"] = round(statistics.median(ray_walls) / bound, 3)
    if even:
        bound_row["first_tenth_s"] = round(bound / 10, 2)
    rows.append(bound_row)
    return {
        "benchmark": "scenario_suite", "trident_version": trident.__version__, "ray_version": ray.__version__,
        "started_at": started,
        "machine": {"cpus": os.cpu_count(), "gpus": 0, "logical_gpus": 4, "host": platform.node(),
                    "cluster": "ray.cluster_utils.Cluster: head 4 CPUs; nodes A and B, 6 CPUs and 2 GPUs each"},
        "workload": {"name": sc.name, "seed": 0, "mode": "calibrated", "rows": sc.rows, "scale": scale,
                     "memory_limit_bytes": int(sc.memory_limit_mb * 2**20) if sc.memory_limit_mb else None,
                     "stages": [{"name": s.name, "per_row_s": s.per_row_s, "fixed_s": s.fixed_s, "speed": s.speed,
                                 "base_mb": s.base_mb, "per_row_mb": s.per_row_mb, "batch_size": s.batch_size,
                                 "max_replicas": s.max_replicas, "num_gpus": s.num_gpus} for s in sc.stages],
                     "stand_in": "each stage sleeps its calibrated time per batch and its process holds its calibrated "
                                 "unique memory (its Python and Ray included); "
                                 "logical GPUs; a watchdog kills the largest stand-in while their summed USS "
                                 "exceeds the memory limit",
                     "warm_up": "one unmeasured run of 200 rows under ray on the new cluster before the measured "
                                "runs; each run starts once the last one's stand-ins have exited"},
        "baseline": "ray",
        "rows": rows,
        **({"rounds": rounds, "medians": medians(rows)} if rounds > 1 else {}),
    }


def _first(runs: list[Run], policy: str, round_: int | None = None) -> Run | None:
    """The first run of ``policy`` that finished (in round ``round_`` where given)."""
    return next((r for r in runs if r.policy == policy and not r.error and round_ in (None, r.round)), None)


def medians(rows: list[dict]) -> dict:
    """Per policy over its rounds: the median wall and the median, lowest and highest of its ratios
    to ``ray`` (each taken within its own round, where that round's ``ray`` run finished)."""
    out = {}
    for policy in dict.fromkeys(r["policy"] for r in rows if "round" in r):
        mine = [r for r in rows if r["policy"] == policy and "round" in r and "error" not in r]
        if not mine:
            continue
        entry = {"runs": len(mine), "median_wall_s": round(statistics.median(r["wall_s"] for r in mine), 2)}
        ratios = [r["ratio_to_baseline"] for r in mine if "ratio_to_baseline" in r]
        if ratios:
            entry.update(median_ratio_to_baseline=round(statistics.median(ratios), 3),
                         min_ratio_to_baseline=min(ratios), max_ratio_to_baseline=max(ratios))
        out[policy] = entry
    return out


def plot(results: list[dict], path: str) -> None:
    """Throughput relative to Ray's autoscaler per scenario and policy, the work bound dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(3.2 * len(results), 3.6), squeeze=False)
    for ax, res in zip(axes[0], results):
        rows = [r for r in res["rows"] if r["policy"] != "bound"]
        names = list(dict.fromkeys(r["policy"] for r in rows))
        per = {n: [r.get("ratio_to_baseline", 0.0) for r in rows if r["policy"] == n] for n in names}
        mid = [statistics.median(per[n]) for n in names]
        spread = [[m - min(per[n]) for n, m in zip(names, mid)], [max(per[n]) - m for n, m in zip(names, mid)]]
        ax.bar(names, mid, yerr=spread if res.get("rounds", 1) > 1 else None, capsize=3,
               color=[{"trident": "#1f77b4", "tuned": "#2ca02c"}.get(n, "#999999") for n in names])
        bound = next(r for r in res["rows"] if r["policy"] == "bound")
        if "ratio_to_baseline" in bound:
            ax.axhline(bound["ratio_to_baseline"], linestyle=":", color="k", label="work bound")
        for i, n in enumerate(names):
            kills = sum(r.get("oom_kills", 0) for r in rows if r["policy"] == n)
            if kills:
                ax.text(i, 0.05, f"{kills} OOM", ha="center", color="#d62728", fontsize=8, rotation=90)
        ax.set_title(res["workload"]["name"], fontsize=10)
        ax.set_ylabel("throughput / ray")
        ax.tick_params(axis="x", labelsize=8)
    axes[0][0].legend(fontsize=8, loc="upper left")
    rounds = max(res.get("rounds", 1) for res in results)
    title = "scenario suite (calibrated stand-ins, logical GPUs; " + (
        "one run per policy, side by side)" if rounds == 1 else
        f"{rounds} rounds of every policy side by side: median ratio within a round, whiskers min-max)")
    fig.suptitle(textwrap.fill(title, width=int(11 * 3.2 * len(results)), break_on_hyphens=False), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_suite(*, names: tuple[str, ...], policies: tuple[str, ...] = POLICIES, scale: float = 1.0,
              out_dir: str = "benchmarks/results", interval_s: float = 1.0, repeat: int = 1,
              log=print) -> list[str]:
    """Every scenario under every policy on one cluster, ``repeat`` rounds of the policies in turn
    (a round runs each policy once, so a ratio is taken within a round); one JSON per scenario and
    one PNG."""
    import json

    import ray

    all_ = scenarios()
    unknown = [n for n in names if n not in all_]
    if unknown:
        raise ConfigError("scenario", unknown, f"names from {sorted(all_)}")
    if repeat < 1:
        raise ConfigError("repeat", repeat, "a whole number of rounds, at least 1")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cluster = start_cluster()
    written, results = [], []
    try:
        # one unmeasured run first: the first run on a fresh cluster pays its worker start-up
        # (Ray's first actor at 5.6-8.7 s where the next policy's came at 3.3-6.5 s)
        run_once(all_[names[0]].scaled(0.0), "ray", interval_s=interval_s)
        for name in names:
            sc = all_[name].scaled(scale)
            started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            runs = []
            for round_, policy in itertools.product(range(1, repeat + 1), policies):
                r = dataclasses.replace(run_once(sc, policy, interval_s=interval_s), round=round_)
                runs.append(r)
                tag = f"{policy}-{round_}" if repeat > 1 else policy
                if r.record is not None:  # the full run record, for reading what each policy did
                    (out / "runs").mkdir(exist_ok=True)
                    r.record.to_json(str(out / "runs" / f"scenario_suite-{name}-{tag}.json"))
                log(f"{name:13s} {tag:10s} {r.wall_s:7.1f} s  OOM kills {r.oom_kills}  lost {r.rows_lost}  "
                    f"dup {r.rows_duplicated}" + (f"  error {r.error}" if r.error else ""))
            res = result(sc, runs, scale=scale, started=started)
            results.append(res)
            path = out / f"scenario_suite-{name}.json"
            path.write_text(json.dumps(res, indent=1) + "\n")
            written.append(str(path))
            plot(results, str(out / "scenario_suite.png"))
    finally:
        ray.shutdown()
        cluster.shutdown()
    return written + [str(out / "scenario_suite.png")]
