"""Every job policy side by side on the shipped dev traces, and the simulator's speed at 100k jobs.

Workloads (all simulated, seed given by --seed; the setup time of each (re)start is
lognormal, median 5 min, p95 25 min; a restart after a preemption adds 30 s):

- ``philly-gavel`` (533 jobs, 108 GPUs of 3 models) at load x3;
- ``pollux`` workload-1 (160 jobs, 64 GPUs) at load x2;
- ``tiresias`` 60-job sample at load x2 (smoke);
- ``alibaba-2023`` (3,772 GPU pods) on 2% of its nodes at load x5.

Contenders: fifo, sjf (oracle), srtf (oracle) and tiresias each with eager / lazy /
never preemption, gavel (oracle), and rltune when registered. One JSON + PNG per
trace under benchmarks/results/ (``simulate_compare-<trace>``).

``--speed``: 100,000 jobs resampled (seeded) from the Alibaba sample, replayed under
FIFO on the full cluster at the trace's own load and on 1% of its nodes at load x20
(a saturated queue); wall and CPU seconds go to ``simulate_speed.json``.

    python benchmarks/simulate_compare.py                  # comparison on all dev traces
    python benchmarks/simulate_compare.py --traces philly-gavel --speed
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tqdm import tqdm

import trident.jobs  # noqa: F401
from trident.jobs.base import JOB_POLICIES, PREEMPTORS
from trident.sim.compare import Entry, compare, result_document, simulate, write
from trident.sim.engine import EngineConfig
from trident.sim.metrics import summarize
from trident.sim.traces import load_trace, resample, scale_cluster, scale_load

WORKLOADS = {  # trace -> (load, cluster fraction)
    "philly-gavel": (3.0, 1.0),
    "pollux": (2.0, 1.0),
    "tiresias": (2.0, 1.0),
    "alibaba-2023": (5.0, 0.02),
}
OUT = Path(__file__).parent / "results"


def contenders() -> list[Entry]:
    entries = [Entry("fifo"), Entry("sjf")]
    modes = [m for m in ("eager", "lazy", "never") if m in PREEMPTORS]
    for policy in ("srtf", "tiresias"):
        entries += [Entry(policy, m) for m in modes] or [Entry(policy)]
    entries.append(Entry("gavel"))
    if "rltune" in JOB_POLICIES:
        rl = JOB_POLICIES.create("rltune")
        entries += [Entry("rltune", m) for m in modes] if getattr(rl, "preemptive", False) else [Entry("rltune")]
    return entries


def run_comparison(trace_kind: str, seed: int) -> Path:
    load, fraction = WORKLOADS[trace_kind]
    trace = load_trace(trace_kind)
    jobs = scale_load(trace.jobs, load)
    nodes = scale_cluster(trace.nodes, fraction) if fraction != 1 else trace.nodes
    entries = contenders()

    def bar(entry: Entry, total: int):
        b = tqdm(total=total, desc=f"{trace_kind} {entry.label}", unit="job", leave=False)
        return lambda done, _t: (b.update(done - b.n), b.close() if done >= _t else None)

    rows, results = compare(entries, nodes, jobs, EngineConfig(seed=seed), progress_factory=bar)
    doc = result_document(rows, workload={"name": trace_kind, "seed": seed, "load": load,
                                          "cluster_fraction": fraction, "jobs": len(jobs),
                                          "gpus": sum(n.num_gpus for n in nodes),
                                          "setup": "lognormal median 300 s p95 1500 s", "restore_s": 30.0},
                          benchmark="simulate_compare")
    json_path, _ = write(doc, results, OUT, f"simulate_compare-{trace_kind}")
    print(f"\n{trace_kind}: load x{load:g}, {len(jobs)} jobs, {doc['workload']['gpus']} GPUs -> {json_path}")
    print(f"{'policy':<16}{'avg JCT s':>11}{'avg queue s':>12}{'bsld':>9}{'util %':>8}{'preempt':>8}"
          f"{'futile':>7}{'wasted %':>9}{'vs fifo':>8}")
    for r in rows:
        print(f"{r['policy']:<16}{r['avg_jct_s']:>11.0f}{r['avg_queue_s']:>12.0f}{r['bounded_slowdown']:>9.2f}"
              f"{r['gpu_util_pct']:>8.1f}{r['preemptions']:>8}{r['futile_preemptions']:>7}"
              f"{r['wasted_gpu_pct']:>9.2f}{r['ratio_to_baseline']:>8.2f}")
    return json_path


def run_speed(seed: int, n_jobs: int) -> Path:
    trace = load_trace("alibaba-2023")
    rows = []
    for label, load, fraction in (("natural load", 1.0, 1.0), ("saturated", 20.0, 0.01)):
        jobs = scale_load(resample(trace, n_jobs, seed=seed), load)
        nodes = scale_cluster(trace.nodes, fraction) if fraction != 1 else trace.nodes
        t0, c0 = time.perf_counter(), time.process_time()
        result = simulate(Entry("fifo"), nodes, jobs, EngineConfig(seed=seed))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        m = summarize(result)
        rows.append({"policy": f"fifo ({label})", "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                     "jobs": m["jobs"], "load": load, "cluster_fraction": fraction,
                     "gpus": sum(n.num_gpus for n in nodes), "scheduling_passes": result.passes,
                     "avg_queue_s": m["avg_queue_s"], "gpu_util_pct": m["gpu_util_pct"]})
        print(f"{n_jobs} jobs, FIFO, {label}: wall {wall:.1f} s, CPU {cpu:.1f} s, {result.passes} passes")
    doc = result_document(rows, workload={"name": "alibaba-2023 resampled", "seed": seed, "jobs": n_jobs},
                          benchmark="simulate_speed")
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "simulate_speed.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=",".join(WORKLOADS), help="comma-separated subset of the dev traces")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--speed", action="store_true", help="also measure the 100k-job replay")
    parser.add_argument("--speed-only", action="store_true")
    parser.add_argument("--speed-jobs", type=int, default=100_000)
    args = parser.parse_args()
    if not args.speed_only:
        for kind in [t.strip() for t in args.traces.split(",") if t.strip()]:
            run_comparison(kind, args.seed)
    if args.speed or args.speed_only:
        print(f"wrote {run_speed(args.seed, args.speed_jobs)}")


if __name__ == "__main__":
    main()
