"""The job layer on a real Ray cluster: pipelines and training jobs sharing GPUs, and the
same scenario in the simulator beside it.

Cluster (``ray.cluster_utils.Cluster``, logical GPUs): a head without GPUs, one node of
4 type-A GPUs and one of 4 type-B GPUs. Workload of the default scenario, ``mixed``
(time-compressed: every time parameter of the policies is scaled by ``SCALE`` = 1/120, so the
scenario's ~2 minutes stand for ~4 hours of a production cluster):

- 3 pipelines on type-B GPUs (at most 4, 2 and 2), arriving at 0, 6 and 14 s: ``ray.data.range`` rows (1,000
  characters each) through a GPU stage that follows the measured ``embed`` cost curve of
  ``benchmarks/harness/calibration.json`` (a calibrated stand-in; time scaled by 0.25, no memory
  held), 20 rows a batch, an actor pool of 1..max_gpus actors of 1 GPU;
- 6 training stand-ins arriving every 4 s (1-3 GPUs, 6-25 s of 0.1 s steps after a 2-3 s
  setup). For FIFO and Tiresias they are plain Ray tasks (a preemption kills and restarts
  them from zero); for trident they are trainables whose preemption checkpoints.

``--scenario elastic``: the same cluster and stand-ins, where a pipeline's elasticity is what
matters: a long pipeline first (2,000 rows, at most 4 GPUs), three training jobs filling type
A, a burst of 12 one-GPU evaluations (2-4 s of steps), a second pipeline and a fourth
training job (:data:`ELASTIC_WORKLOAD`).

Contenders: ``fifo`` (no preemption; pipelines hold their maximum), ``tiresias/eager``
(kill-and-restart; pipelines hold their maximum and are never preempted), ``trident``
(rltune order, lazy preemption, pipelines elastic between min and max GPUs: shrunk for a
waiting job, grown back when GPUs are free). The simulator replays the same jobs under the same
policy objects, a pipeline as an elastic job between the same minimum and maximum (under FIFO
and Tiresias both are its maximum: it is never evicted; its GPUs divide the cost curve's share
of its run time, Amdahl), with setups and durations observed, not declared: before the
contenders (after a short warm-up pipeline), each distinct pipeline and one training stand-in
of each kind (plain task, checkpointing trainable) run alone on the cluster through the same
``JobScheduler``; a pipeline's setup is its start to its first warm actor pool, a training
job's is its declared setup plus the launch overhead seen. The simulator on the declared
figures is reported beside it (``simulated_declared``). A pipeline's re-warm in the simulator
is the one observed in the solo runs (``calibration.pipeline_rewarm_s``).

``--sim-only`` starts no Ray: the simulator on the last real run's calibration, on the nominal
scenario and ``--variants`` perturbed ones (arrivals moved by up to 2 s, run times by up to 10%,
seeded), with ``--search N`` the best of N random priority orders per variant as a reference;
writes ``job_layer_sim_variants.json`` (``-elastic`` added for that scenario, as to the real
run's files).

    python benchmarks/job_layer_real.py            # ~6 min on a 2-core machine
    python benchmarks/job_layer_real.py --scenario elastic
    python benchmarks/job_layer_real.py --sim-only --variants 20 --search 500 --contenders fifo,tiresias/eager,trident,oracle
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

OUT = Path(__file__).parent / "results"
SCALE = 1 / 120
STEP_S = 0.1
ROW_CHARS = 1000
BATCH_ROWS = 20
TIME_SCALE = 0.25  # the calibrated curve's time is slept at this fraction (a faster GPU)


@dataclass(frozen=True)
class Arrival:
    at_s: float
    name: str
    gpus: int  # a training job's GPUs; a pipeline's maximum
    steps: int = 0  # training
    setup_s: float = 0.0
    rows: int = 0  # pipeline
    min_gpus: int = 1


WORKLOAD = (
    Arrival(0, "pipe-1", 4, rows=800), Arrival(0, "train-1", 2, steps=200, setup_s=3),
    Arrival(4, "train-2", 3, steps=250, setup_s=3), Arrival(6, "pipe-2", 2, rows=600),
    Arrival(8, "train-3", 1, steps=80, setup_s=2), Arrival(12, "train-4", 2, steps=150, setup_s=3),
    Arrival(14, "pipe-3", 2, rows=600), Arrival(16, "train-5", 2, steps=200, setup_s=3),
    Arrival(20, "train-6", 1, steps=60, setup_s=2),
)
"""``mixed`` (the default): 3 pipelines and 6 training jobs, arriving over 20 s."""

ELASTIC_WORKLOAD = tuple(sorted((
    Arrival(0, "pipe-1", 4, rows=2000), Arrival(4, "train-1", 2, steps=200, setup_s=3),
    Arrival(5, "train-2", 2, steps=200, setup_s=3), Arrival(7, "train-3", 3, steps=250, setup_s=3),
    *(Arrival(8 + 1.5 * i, f"eval-{i + 1}", 1, steps=(30, 40, 20, 30)[i % 4], setup_s=2) for i in range(12)),
    Arrival(15, "pipe-2", 2, rows=600), Arrival(23, "train-4", 2, steps=100, setup_s=3),
), key=lambda a: a.at_s))
"""``elastic``: a long curation pipeline first (it takes type B's 4 GPUs), three training jobs
filling type A, then a burst of 12 short evaluations (1 GPU, 2-4 s, every 1.5 s from 8 s), a
second pipeline at 15 s and a fourth training job at 23 s."""

SCENARIOS = {"mixed": WORKLOAD, "elastic": ELASTIC_WORKLOAD}
DEFAULT_SCENARIO = "mixed"


# --- stand-ins (run in Ray workers) -------------------------------------------------------
class Train:
    """A training stand-in: ``setup`` sleeps, each ``step`` sleeps ``STEP_S``; checkpoints its step."""

    def __init__(self, steps: int, setup_s: float) -> None:
        self.steps, self.setup_s, self.done = steps, setup_s, 0

    def setup(self) -> None:
        time.sleep(self.setup_s)

    def step(self) -> bool:
        time.sleep(STEP_S)
        self.done += 1
        return self.done >= self.steps

    def checkpoint(self) -> int:
        return self.done

    def restore(self, state: int) -> None:
        self.done = state

    def result(self) -> int:
        return self.done


def train_plain(steps: int, setup_s: float) -> int:
    """The same work as :class:`Train` without checkpoints: a restart begins from zero."""
    time.sleep(setup_s + steps * STEP_S)
    return steps


def embed_stage():
    from harness.calibration import load_curves, stand_in

    return stand_in(load_curves()["embed"], memory_scale=0.0, time_scale=TIME_SCALE)


def pipeline(rows: int, max_actors: int, stage) -> list[int]:
    import ray
    from ray.data import ActorPoolStrategy

    ds = (ray.data.range(rows, override_num_blocks=max(4, rows // 100))
          .map_batches(lambda b: {**b, "chars": np.full(len(b["id"]), ROW_CHARS)}, batch_size=BATCH_ROWS)
          .map_batches(stage, compute=ActorPoolStrategy(min_size=1, max_size=max_actors), num_gpus=1,
                       num_cpus=0.25, resources={"accelerator_type:B": 0.001}, batch_size=BATCH_ROWS))
    return [int(r["id"]) for r in ds.iter_rows()]


def pipeline_seconds(rows: int, actors: int) -> float:
    """Declared run time of a pipeline at ``actors`` actors (the curve's batch time)."""
    from harness.calibration import load_curves

    batch_s = load_curves()["embed"].time_s(BATCH_ROWS * ROW_CHARS) * TIME_SCALE
    return rows / BATCH_ROWS * batch_s / actors


# --- contenders -----------------------------------------------------------------------------
def plug_ins(name: str):
    """(policy, preemptor) objects of a contender, time parameters scaled by SCALE."""
    from trident.jobs.baselines import TiresiasPolicy
    from trident.jobs.preempt import EagerPreemptor, LazyPreemptor, NeverPreemptor
    from trident.jobs.predict import RuntimePrior
    from trident.jobs.rltune import RLTunePolicy

    if name == "fifo":
        from trident.jobs.baselines import FifoPolicy

        return FifoPolicy(), NeverPreemptor()
    if name == "tiresias/eager":
        return TiresiasPolicy(thresholds_gpu_s=(3600 * SCALE, 36000 * SCALE), min_promote_wait_s=3600 * SCALE), \
            EagerPreemptor()
    if name == "oracle":  # simulator only: SRTF on the true remaining times, eager, elastic pipelines
        from trident.jobs.baselines import SrtfPolicy

        return SrtfPolicy(), EagerPreemptor()
    return RLTunePolicy(), LazyPreemptor(checkpoint_restore_s=30 * SCALE, default_setup_s=300 * SCALE,
                                         min_recheck_s=300 * SCALE, max_recheck_s=3600 * SCALE,
                                         prior=RuntimePrior.philly(scale=SCALE), max_waste_fraction=0.5)


def solo_times(a: Arrival, calib: dict) -> tuple[float, float]:
    """(setup s, run s) of a pipeline alone at its maximum GPUs: as measured in ``calib``, else
    (a shape not measured) the setup and the overhead beyond the cost curve (run less curve, s)
    of the measured shape with the nearest GPU count (then fewest rows) plus its own curve time."""
    measured = calib["pipelines"]
    if f"{a.rows}x{a.gpus}" in measured:
        return tuple(measured[f"{a.rows}x{a.gpus}"])
    rows, gpus = min((tuple(map(int, k.split("x"))) for k in measured), key=lambda s: (abs(s[1] - a.gpus), s[0]))
    setup_s, run_s = measured[f"{rows}x{gpus}"]
    return setup_s, run_s - pipeline_seconds(rows, gpus) + pipeline_seconds(a.rows, a.gpus)


def parallel_fraction(a: Arrival, calib: dict | None) -> float:
    """The share of a pipeline's observed solo run time (``calib``) that its cost curve takes, the
    part its GPUs divide (1 on the declared figures, where the curve is its run time)."""
    if calib is None:
        return 1.0
    return min(1.0, pipeline_seconds(a.rows, a.gpus) / max(solo_times(a, calib)[1], 1e-3))


ELASTIC = ("trident", "oracle", "best-order")
"""Contenders whose pipelines are elastic and whose training jobs checkpoint."""


def min_gpus(name: str, a: Arrival) -> int:
    """A pipeline's minimum GPUs: elastic down to ``a.min_gpus`` under :data:`ELASTIC`, else its maximum."""
    return a.min_gpus if name in ELASTIC else a.gpus


def run_real(name: str, stage, workload: tuple[Arrival, ...], calib: dict | None = None) -> dict:
    from trident.jobs.scheduler import JobScheduler

    policy, preemptor = plug_ins(name)
    sched = JobScheduler(policy=policy, preemption=preemptor, placement="first-fit", tick_s=300 * SCALE,
                         node_refresh_s=1.0)
    t0 = time.monotonic()

    def submit_all():
        for a in workload:
            time.sleep(max(0.0, a.at_s - (time.monotonic() - t0)))
            if a.rows:
                sched.submit_pipeline(pipeline, a.rows, a.gpus, stage, name=a.name, gpu_models=("B",),
                                      min_gpus=min_gpus(name, a), max_gpus=a.gpus,
                                      parallel_fraction=parallel_fraction(a, calib),
                                      setup_s=2.0, autoscale=dict(policy="ds2", interval_s=0.5))
            else:
                fn = Train if name == "trident" else train_plain
                sched.submit(fn, a.steps, a.setup_s, num_gpus=a.gpus, name=a.name, setup_s=a.setup_s)

    submitter = threading.Thread(target=submit_all)
    submitter.start()
    results: dict = {}
    while True:
        if sched.queue or sched.running:
            results.update(sched.run(timeout_s=900))
        if not submitter.is_alive() and not sched.queue and not sched.running:
            break
        time.sleep(0.05)
    submitter.join()
    return row(name, sched, results, workload)


def row(name: str, sched, results: dict, workload: tuple[Arrival, ...]) -> dict:
    jct, wasted, held, rows_bad, shrinks = [], 0.0, 0.0, 0, 0
    preemptions = futile = 0
    first = min(sched.record(a.name).job.arrival_s for a in workload)
    for a in workload:
        r = sched.record(a.name)
        jct.append(r.finished_at - r.job.arrival_s)
        held += r.attained_s * (a.gpus if a.rows else r.job.num_gpus)
        preemptions += r.preemptions
        futile += r.futile_preemptions
        if a.rows:
            rows_bad += int(sorted(results.get(a.name, [])) != list(range(a.rows)))
            shrinks += r.preemptions
        elif r.observed_setup_s:
            wasted += sum(r.observed_setup_s[1:]) * r.job.num_gpus  # re-setups after a checkpoint
        else:
            wasted += max(0.0, r.attained_s - (r.finished_at - r.started_at)) * r.job.num_gpus  # killed attempts
    makespan = max(sched.record(a.name).finished_at for a in workload) - first
    return {"policy": name, "avg_jct_s": round(float(np.mean(jct)), 2), "max_jct_s": round(float(np.max(jct)), 2),
            "makespan_s": round(makespan, 2), "preemptions": preemptions, "futile_preemptions": futile,
            "pipeline_shrinks": shrinks, "wasted_gpu_s": round(wasted, 2),
            "wasted_gpu_pct": round(100 * wasted / max(held, 1e-9), 2), "pipelines_rows_exact": rows_bad == 0,
            "jobs": len(workload), "jct_s": {a.name: round(j, 2) for a, j in zip(workload, jct)},
            "verdicts": dict(Counter(d[3] for d in sched.decisions)),
            "first_reasons": [f"{d[0]:.1f} s {d[1]} vs {d[2]}: {d[4]}" for d in list(sched.decisions)[:6]],
            "events": {a.name: [f"{t:.1f} s {e}" for t, e in sched.record(a.name).events] for a in workload}}


def calibrate(stage, workload: tuple[Arrival, ...]) -> dict:
    """Solo runs on the idle cluster (FIFO, one job at a time): (setup s, run s) per distinct
    pipeline (rows, GPUs), and the launch overhead (s, beyond the declared setup and steps) of a
    training stand-in per kind (``plain`` task, checkpointing ``trainable``)."""
    from trident.jobs.baselines import FifoPolicy
    from trident.jobs.preempt import NeverPreemptor
    from trident.jobs.scheduler import JobScheduler

    out: dict = {"pipelines": {}, "train_overhead_s": {}}
    rewarms: list[float] = []
    probe = min((a for a in workload if a.steps), key=lambda a: a.steps)
    widest = max((a for a in workload if a.rows), key=lambda a: a.gpus)
    # a short pipeline first, not measured: the first one on a fresh cluster starts its worker
    # processes (2x slower here), which no contender pays again
    solo = [(Arrival(0, "warm-up", widest.gpus, rows=10 * BATCH_ROWS * widest.gpus), None)]
    solo += [(a, None) for a in {(a.rows, a.gpus): a for a in workload if a.rows}.values()]
    solo += [(probe, "plain"), (probe, "trainable")]
    for a, kind in solo:
        sched = JobScheduler(policy=FifoPolicy(), preemption=NeverPreemptor(), placement="first-fit",
                             tick_s=300 * SCALE, node_refresh_s=1.0)
        if a.rows:
            sched.submit_pipeline(pipeline, a.rows, a.gpus, stage, name=a.name, gpu_models=("B",), min_gpus=a.gpus,
                                  max_gpus=a.gpus, setup_s=2.0, autoscale=dict(policy="ds2", interval_s=0.5))
        else:
            sched.submit(Train if kind == "trainable" else train_plain, a.steps, a.setup_s, num_gpus=a.gpus,
                         name=a.name, setup_s=a.setup_s)
        sched.run(timeout_s=300)
        r = sched.record(a.name)
        wall = r.finished_at - r.started_at
        if a.name == "warm-up":
            continue
        if a.rows:
            warm = [t for t, e in r.events if e.startswith("warm")]
            setup = (warm[0] - r.started_at) if warm else 0.0
            out["pipelines"][f"{a.rows}x{a.gpus}"] = (round(setup, 2), round(wall - setup, 2))
            rewarms += r.observed_setup_s[1:]  # the first is the declared setup, then Run.rewarm_s
        else:
            out["train_overhead_s"][kind] = round(max(0.0, wall - a.setup_s - a.steps * STEP_S), 2)
    out["pipeline_rewarm_s"] = round(float(np.median(rewarms)), 2) if rewarms else 2.0  # else the declared
    return out


def run_sim(name: str, calib: dict | None, workload: tuple[Arrival, ...],
            run_scale: dict[str, float] | None = None, plugs: tuple | None = None) -> dict:
    """The contender in the simulator, on the observed setups and durations of ``calib`` (the
    declared ones when ``None``). A pipeline is an elastic job between :func:`min_gpus` and its
    maximum; its parallel fraction is the cost curve's share of its run time at its maximum
    (1 on the declared figures, where the curve is its run time). A training job restarts from
    zero when preempted unless it is trident's (a trainable that checkpoints). ``run_scale`` (job
    name -> factor on its run time) with a perturbed ``workload`` gives a variant; ``plugs``
    (policy, preemptor) replaces the contender's."""
    from trident.jobs.base import Job, Node
    from trident.jobs.placement import FirstFitPlacer
    from trident.sim.engine import EngineConfig, SetupModel, Simulator
    from trident.sim.metrics import summarize

    policy, preemptor = plugs or plug_ins(name)
    nodes = [Node("a", "A", 4, cpus=6), Node("b", "B", 4, cpus=6)]

    def times(a: Arrival) -> tuple[float, float]:
        if calib is None:
            return (2.0, pipeline_seconds(a.rows, a.gpus)) if a.rows else (a.setup_s, a.steps * STEP_S)
        if a.rows:
            return solo_times(a, calib)
        kind = "trainable" if name in ELASTIC else "plain"
        return a.setup_s + calib["train_overhead_s"][kind], a.steps * STEP_S

    jobs = []
    for a in workload:
        setup_s, run_s = times(a)
        run_s = max(run_s * (run_scale or {}).get(a.name, 1.0), 1e-3)
        if a.rows:  # elastic, as run_real submits it; the cost curve's GPU time is what its GPUs divide
            shape = dict(num_gpus=min_gpus(name, a), max_gpus=a.gpus, gpu_models=("B",),
                         parallel_fraction=parallel_fraction(a, calib),
                         rewarm_s=None if calib is None else calib["pipeline_rewarm_s"])
        else:  # trident's training jobs checkpoint; the others' are Ray tasks, killed and restarted from zero
            shape = dict(num_gpus=a.gpus, checkpoints=name in ELASTIC)
        jobs.append(Job(job_id=a.name, arrival_s=a.at_s, duration_s=run_s, setup_s=setup_s, **shape))
    res = Simulator(nodes=nodes, policy=policy, placer=FirstFitPlacer(), preemptor=preemptor,
                    config=EngineConfig(setup=SetupModel(kind="none"), restore_s=30 * SCALE, tick_s=300 * SCALE)
                    ).run(jobs)
    m = summarize(res)
    jct = res.finish_s - res.arrival_s
    return {"policy": name, "avg_jct_s": round(float(m["avg_jct_s"]), 2), "max_jct_s": round(float(jct.max()), 2),
            "makespan_s": round(float(m["makespan_s"]), 2), "preemptions": int(m["preemptions"]),
            "futile_preemptions": int(m["futile_preemptions"]), "wasted_gpu_pct": round(float(m["wasted_gpu_pct"]), 2),
            "jobs": len(jobs)}


def variant(workload: tuple[Arrival, ...], seed: int, jitter_s: float = 2.0,
            run_spread: float = 0.10) -> tuple[tuple[Arrival, ...], dict]:
    """A perturbed copy of ``workload``: each arrival moved by up to ``jitter_s`` s (not before 0),
    each run time scaled by a factor in ``1 +- run_spread`` (uniform, seeded)."""
    rng = np.random.default_rng(seed)
    shift = rng.uniform(-jitter_s, jitter_s, len(workload))
    scale = rng.uniform(1 - run_spread, 1 + run_spread, len(workload))
    arrivals = tuple(Arrival(**{**a.__dict__, "at_s": round(max(0.0, a.at_s + d), 3)}) for a, d in zip(workload, shift))
    return arrivals, {a.name: float(f) for a, f in zip(workload, scale)}


class StaticPriority:
    """Preemptive: queued and running jobs by a fixed rank (job name -> rank, lowest first)."""

    name = "static-priority"
    preemptive = True
    oracle = False
    placer = "first-fit"

    def __init__(self, rank: dict[str, int]) -> None:
        self.rank = rank

    def order(self, state, rng) -> tuple[str, ...]:
        return tuple(sorted([*(v.job_id for v in state.queued), *state.running], key=self.rank.__getitem__))


def best_order(calib: dict, workload: tuple[Arrival, ...], run_scale: dict | None, tries: int, seed: int) -> dict:
    """The best of ``tries`` random fixed priority orders (seeded), each replayed with eager
    preemption, elastic pipelines and checkpoints: a reference for what an order could reach."""
    from trident.jobs.preempt import EagerPreemptor

    rng = np.random.default_rng(seed)
    best: dict = {}
    for _ in range(tries):
        rank = {a.name: int(r) for a, r in zip(workload, rng.permutation(len(workload)))}
        row = run_sim("best-order", calib, workload, run_scale, plugs=(StaticPriority(rank), EagerPreemptor()))
        if not best or row["avg_jct_s"] < best["avg_jct_s"]:
            best = {**row, "order": sorted(rank, key=rank.__getitem__)}
    return best


def sim_variants(names: list[str], calib: dict, workload: tuple[Arrival, ...], count: int, seed: int = 0,
                 tries: int = 0) -> dict:
    """Every contender in the simulator on ``count`` perturbed variants of ``workload``
    (:func:`variant`, seeds ``seed``..), with ``best-order`` (:func:`best_order` of ``tries``
    orders) when ``tries``: per variant the average JCTs (s), and the median / min / max of the
    ratios of avg JCT ``a/b`` (b's JCT over a's: above 1, b is better)."""
    rows = []
    names = [*names, "best-order"] if tries else names
    for i in range(count):
        arrivals, run_scale = variant(workload, seed + i)
        rows.append({"seed": seed + i, **{n: best_order(calib, arrivals, run_scale, tries, seed + i)
                                          if n == "best-order" else run_sim(n, calib, arrivals, run_scale)
                                          for n in names}})
    pairs = [(a, b) for a, b in (("tiresias/eager", "trident"), ("fifo", "trident"), ("fifo", "oracle"),
                                 ("fifo", "best-order"), ("trident", "oracle"), ("trident", "best-order"),
                                 ("tiresias/eager", "best-order")) if a in names and b in names]
    ratios = {}
    for a, b in pairs:
        r = np.array([v[a]["avg_jct_s"] / v[b]["avg_jct_s"] for v in rows])
        ratios[f"{a}/{b}"] = {"median": round(float(np.median(r)), 3), "min": round(float(r.min()), 3),
                              "max": round(float(r.max()), 3), "at_least_1.5": int((r >= 1.5).sum())}
    return {"variants": rows, "ratios": ratios,
            "avg_jct_s": {n: round(float(np.median([v[n]["avg_jct_s"] for v in rows])), 2) for n in names}}


def start_cluster():
    import ray
    from ray.cluster_utils import Cluster

    for attempt in range(3):  # a node's start may time out on a loaded machine
        try:
            c = Cluster(initialize_head=True, head_node_args=dict(num_cpus=2, num_gpus=0, include_dashboard=False))
            c.add_node(num_cpus=6, num_gpus=4, resources={"accelerator_type:A": 4})
            c.add_node(num_cpus=6, num_gpus=4, resources={"accelerator_type:B": 4})
            ray.init(address=c.address, log_to_driver=False)
            c.wait_for_nodes()
            ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
            from harness import ship

            ship()  # the calibrated stand-ins travel by value too
            return c
        except Exception:
            if attempt == 2:
                raise
            time.sleep(5)


def plot(doc: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["policy"] for r in doc["rows"]]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    x = np.arange(len(names))
    for ax, key in zip(axes, ("avg_jct_s", "max_jct_s")):
        ax.bar(x - 0.27, [r[key] for r in doc["rows"]], 0.27, label="real cluster")
        ax.bar(x, [r[key] for r in doc["simulated"]], 0.27, label="simulator (observed setups, durations)")
        ax.bar(x + 0.27, [r[key] for r in doc["simulated_declared"]], 0.27, label="simulator (declared)")
        ax.set_xticks(x, names)
        ax.set_ylabel(key.replace("_", " "))
        ax.legend(fontsize=7)
    arrivals = doc["workload"]["arrivals"]
    pipes = sum(1 for a in arrivals if a["rows"])
    fig.suptitle(f"job layer ({doc['workload']['scenario']}): {pipes} pipelines + {len(arrivals) - pipes} "
                 "training jobs on 2x4 logical GPUs")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def result_name(stem: str, scenario: str, ext: str = "json") -> str:
    """A result file's name: ``stem.ext`` for the default scenario, ``stem-<scenario>.ext`` else."""
    return f"{stem}.{ext}" if scenario == DEFAULT_SCENARIO else f"{stem}-{scenario}.{ext}"


def last_calibration(scenario: str) -> dict:
    """The calibration of the scenario's last real run, else of the default scenario's (the
    same machine and stand-ins; pipeline shapes it did not run are estimated, :func:`solo_times`),
    with the pipelines' re-warm (s) observed in its solo runs."""
    path = OUT / result_name("job_layer_real", scenario)
    return json.loads((path if path.exists() else OUT / "job_layer_real.json").read_text())["calibration"]


def sim_only(args) -> int:
    """``--sim-only``: the nominal scenario and ``--variants`` perturbed ones in the simulator,
    on the observed setups and durations of the last real run (:func:`last_calibration`);
    writes job_layer_sim_variants[-<scenario>].json."""
    workload = SCENARIOS[args.scenario]
    calib = last_calibration(args.scenario)
    names = args.contenders.split(",")
    doc = {"benchmark": "job_layer_sim_variants", "scenario": args.scenario, "calibration": calib,
           "seed": args.seed, "perturbation": {"arrival_jitter_s": 2.0, "run_time_spread": 0.10},
           "arrivals": [a.__dict__ for a in workload],
           "pipelines_estimated": {f"{a.rows}x{a.gpus}": solo_times(a, calib) for a in workload
                                   if a.rows and f"{a.rows}x{a.gpus}" not in calib["pipelines"]},
           "nominal": {n: run_sim(n, calib, workload) for n in names},
           **sim_variants(names, calib, workload, args.variants, args.seed, args.search)}
    if args.search:
        doc["nominal"]["best-order"] = best_order(calib, workload, None, args.search, args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / result_name("job_layer_sim_variants", args.scenario)).write_text(json.dumps(doc, indent=2) + "\n")
    print("nominal avg JCT (s): " + ", ".join(f"{n} {r['avg_jct_s']:.1f}" for n, r in doc["nominal"].items()))
    print(f"median avg JCT over {args.variants} variants (s): {doc['avg_jct_s']}")
    for k, v in doc["ratios"].items():
        print(f"{k:>24}: median {v['median']:.3f}  min {v['min']:.3f}  max {v['max']:.3f}  >=1.5 in {v['at_least_1.5']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--contenders", default="fifo,tiresias/eager,trident")
    ap.add_argument("--sim-only", action="store_true",
                    help="no Ray: the simulator on the calibration of the scenario's last real run "
                         "(job_layer_real[-<scenario>].json, else job_layer_real.json)")
    ap.add_argument("--variants", type=int, default=20, help="perturbed variants with --sim-only")
    ap.add_argument("--search", type=int, default=0,
                    help="with --sim-only: best of this many random priority orders per variant (best-order)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scenario", choices=sorted(SCENARIOS), default=DEFAULT_SCENARIO)
    args = ap.parse_args(argv)
    if args.sim_only:
        return sim_only(args)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    import trident.jobs  # noqa: F401
    from trident.sim.compare import result_document

    names = args.contenders.split(",")
    workload = SCENARIOS[args.scenario]
    cluster = start_cluster()
    stage = embed_stage()
    rows = []
    try:
        t = time.monotonic()
        calib = calibrate(stage, workload)
        print(f"calibration (solo runs): {json.dumps(calib)} ({time.monotonic() - t:.0f} s)", flush=True)
        for name in names:
            t = time.monotonic()
            rows.append(run_real(name, stage, workload, calib))
            print(f"{name}: {json.dumps({k: v for k, v in rows[-1].items() if k != 'jct_s'})} "
                  f"({time.monotonic() - t:.0f} s)", flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
    simulated = [run_sim(n, calib, workload) for n in names]
    declared = [run_sim(n, None, workload) for n in names]
    base = rows[0]["avg_jct_s"]
    for r, s in zip(rows, simulated):
        r["ratio_to_baseline"] = round(base / r["avg_jct_s"], 3)
        r["sim_vs_real_avg_jct_pct"] = round(100 * (s["avg_jct_s"] - r["avg_jct_s"]) / r["avg_jct_s"], 1)
    doc = result_document(rows, workload={"name": "job-layer-real", "scenario": args.scenario, "seed": 0,
                                          "time_scale": SCALE, "arrivals": [a.__dict__ for a in workload],
                                          "stand_in": "embed cost curve (calibration.json) x0.25; sleep-loop training"},
                          benchmark="job_layer_real")
    doc["workload"]["mode"] = "calibrated"
    doc["machine"]["logical_gpus"] = 8
    doc["simulated"] = simulated
    doc["simulated_declared"] = declared
    doc["calibration"] = calib
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / result_name("job_layer_real", args.scenario)).write_text(json.dumps(doc, indent=2) + "\n")
    plot(doc, out / result_name("job_layer_real", args.scenario, "png"))
    for r, s, s2 in zip(rows, simulated, declared):
        print(f"{r['policy']:>15}  real avg/max JCT {r['avg_jct_s']:6.1f}/{r['max_jct_s']:6.1f} s  "
              f"sim {s['avg_jct_s']:6.1f}/{s['max_jct_s']:6.1f} s ({s2['avg_jct_s']:.1f} declared)  makespan {r['makespan_s']:.1f} s  "
              f"preempt {r['preemptions']} (futile {r['futile_preemptions']})  wasted {r['wasted_gpu_pct']}%  "
              f"rows exact {r['pipelines_rows_exact']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
