"""The pipeline benchmark: the PDF and video curation pipelines over regime-shifting input,
under ``static``, ``ray``, ``ds2`` and ``trident`` side by side, against the per-phase oracle.

Calibrated mode (the only mode here): every stage is a stand-in whose time and memory
follow the curves measured from the real stages on this machine (``calibration.json``):
a batch sleeps its calibrated time (scaled by ``time_scale``, an accelerator faster than
the CPU it was measured on) and holds its calibrated memory (scaled by ``memory_scale``).
Model stages are actor pools on logical GPUs, so a small machine stands in for a GPU
cluster. A watchdog plays the node's OOM killer: when the model replicas' resident memory
exceeds the limit it kills the largest replica (Ray restarts it and retries its task).
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness import ship
from harness.calibration import CostCurve, load_curves, run_calibrated, stand_in

POLICIES = ("static", "ray", "ds2", "trident")


@dataclass(frozen=True)
class Item:
    """One kind of input row: its CPU-stage work and model-stage work."""

    kind: str
    cpu_units: float
    ocr_megapixels: float
    embed_chars: float


@dataclass(frozen=True)
class Phase:
    """A regime: ``pattern`` (kinds of rows, in order) repeated ``repeats`` times, in input
    blocks of ``block_rows`` rows (a block is the unit of a task)."""

    name: str
    pattern: tuple[Item, ...]
    repeats: int
    block_rows: int = 1

    @property
    def rows(self) -> int:
        return len(self.pattern) * self.repeats


@dataclass(frozen=True)
class Workload:
    name: str
    cpu_stage: str
    """Curve of the CPU stage: ``parse`` (units: pages) or ``decode`` (frame megapixels)."""
    phases: tuple[Phase, ...]
    ocr_batch_size: int
    embed_batch_size: int


PAGE_MEGAPIXELS = 0.588
"""A scanned A4 page rendered 1000 px wide (as calibrated)."""
SHORT_TEXT = Item("short-text", cpu_units=2, ocr_megapixels=0.0, embed_chars=5_000)
LONG_SCANNED = Item("long-scanned", cpu_units=4, ocr_megapixels=4 * PAGE_MEGAPIXELS, embed_chars=1_600)
SD_CLIP = Item("sd-clip", cpu_units=60 * 0.307, ocr_megapixels=3 * 0.307, embed_chars=300)
HD_CLIP = Item("hd-clip", cpu_units=60 * 0.922, ocr_megapixels=3 * 0.922, embed_chars=300)
"""Clips: 5 s at 12 fps decoded (frame megapixels), 3 keyframes OCRed, their text embedded."""


def workloads(scale: float = 1.0) -> dict[str, Workload]:
    """PDF: short text, then long scanned, then mixed (8 short : 1 scanned). Video: SD clips,
    then HD clips. ``scale`` multiplies every phase's repeats."""
    n = lambda repeats: max(2, int(round(repeats * scale)))
    return {
        "pdf-regimes": Workload(name="pdf-regimes", cpu_stage="parse", ocr_batch_size=1, embed_batch_size=8, phases=(
            Phase("short-text", (SHORT_TEXT,), n(192), block_rows=8),
            Phase("long-scanned", (LONG_SCANNED,), n(16), block_rows=1),
            Phase("mixed", (LONG_SCANNED,) + (SHORT_TEXT,) * 8, n(8), block_rows=9),
        )),
        "video-regimes": Workload(name="video-regimes", cpu_stage="decode", ocr_batch_size=1, embed_batch_size=8,
                                  phases=(
            Phase("sd", (SD_CLIP,), n(24)),
            Phase("hd", (HD_CLIP,), n(8)),
        )),
    }


def items_of(workload: Workload, phases: tuple[Phase, ...] | None = None) -> list[list[dict]]:
    """Input blocks (lists of rows), phases in order; ``id`` is unique across rows."""
    from harness.measure import UNITS

    cpu_unit = UNITS[workload.cpu_stage]
    blocks: list[list[dict]] = []
    n = 0
    for ph in phases or workload.phases:
        rows = []
        for _ in range(ph.repeats):
            for it in ph.pattern:
                rows.append({"id": n, "phase": ph.name, "kind": it.kind, cpu_unit: it.cpu_units,
                             "megapixels": it.ocr_megapixels, "chars": it.embed_chars})
                n += 1
        blocks += [rows[i:i + ph.block_rows] for i in range(0, len(rows), ph.block_rows)]
    return blocks


@dataclass
class Cluster:
    """The logical cluster and the stand-in scaling."""

    cpus: int = 16
    gpus: int = 8
    time_scale: float = 0.5
    memory_scale: float = 1.0
    memory_limit_bytes: int = 5 * 2**30
    ocr_num_gpus: float = 1.0
    embed_num_gpus: float = 1.0


class MemoryWatchdog:
    """Kills the largest registered replica while the replicas' summed unique memory (USS)
    exceeds the limit; with ``kill=False`` it only records the peak (to test a configuration
    for feasibility)."""

    def __init__(self, pid_dir: str, limit_bytes: int, *, kill: bool = True, poll_s: float = 0.2,
                 cooldown_s: float = 1.0) -> None:
        self.pid_dir = Path(pid_dir)
        self.limit_bytes = limit_bytes
        self.kill = kill
        self.poll_s = poll_s
        self.cooldown_s = cooldown_s
        self.kills = 0
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> "MemoryWatchdog":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _uss(self) -> dict[int, int]:
        import psutil

        out = {}
        for f in self.pid_dir.iterdir():
            try:
                out[int(f.name)] = psutil.Process(int(f.name)).memory_full_info().uss
            except (psutil.Error, ValueError):
                f.unlink(missing_ok=True)
        return out

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            rss = self._uss()
            total = sum(rss.values())
            self.peak_bytes = max(self.peak_bytes, total)
            if self.kill and total > self.limit_bytes and rss:
                victim = max(rss, key=rss.get)
                try:
                    os.kill(victim, signal.SIGKILL)
                    self.kills += 1
                except ProcessLookupError:
                    pass
                (self.pid_dir / str(victim)).unlink(missing_ok=True)
                self._stop.wait(self.cooldown_s)


def write_watched(ds, run, work: Path, limit_bytes: int | None) -> tuple[float, str | None, int]:
    """Write ``ds`` to ``work/out`` as Parquet inside ``run`` (a ``trident.autoscale`` block), a
    :class:`MemoryWatchdog` over the replicas registered in ``work/pids`` playing the OOM killer at
    ``limit_bytes`` (``None``: it kills nothing): (wall seconds, the error if the run failed, OOM kills)."""
    error = None
    with MemoryWatchdog(str(work / "pids"), limit_bytes or 2**62) as dog:
        t0 = time.perf_counter()
        try:
            with run:
                ds.write_parquet(str(work / "out"))
        except Exception as exc:  # a failed run is a result
            error = f"{type(exc).__name__}: {exc}"
        wall_s = time.perf_counter() - t0
    return wall_s, error, dog.kills


def _cpu_stage(curve: CostCurve, time_scale: float):
    def cpu_stage(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return run_calibrated(curve, batch, time_scale=time_scale)

    cpu_stage.__name__ = f"calibrated_{curve.stage}"
    return cpu_stage


def build(workload: Workload, blocks: list[list[dict]], curves: dict[str, CostCurve], cluster: Cluster, *,
          pools: tuple[tuple[int, int], tuple[int, int]], pid_dir: str):
    """The calibrated pipeline: CPU stage (tasks) -> OCR pool -> embed pool."""
    import ray
    from ray.data import ActorPoolStrategy

    ocr = stand_in(curves["ocr"], memory_scale=cluster.memory_scale, time_scale=cluster.time_scale, pid_dir=pid_dir)
    embed = stand_in(curves["embed"], memory_scale=cluster.memory_scale, time_scale=cluster.time_scale,
                     pid_dir=pid_dir)
    cpu_curve = curves[workload.cpu_stage]
    import pandas as pd

    ds = ray.data.from_pandas([pd.DataFrame(b) for b in blocks])
    return (ds.map_batches(_cpu_stage(cpu_curve, cluster.time_scale), batch_size=None, num_cpus=1)
              .map_batches(ocr, compute=ActorPoolStrategy(min_size=pools[0][0], max_size=pools[0][1]),
                           num_gpus=cluster.ocr_num_gpus, batch_size=workload.ocr_batch_size)
              .map_batches(embed, compute=ActorPoolStrategy(min_size=pools[1][0], max_size=pools[1][1]),
                           num_gpus=cluster.embed_num_gpus, batch_size=workload.embed_batch_size))


@dataclass
class Measured:
    policy: str
    wall_s: float
    rows: int
    rows_lost: int
    rows_duplicated: int
    oom_kills: int
    peak_model_uss_bytes: int
    summary: dict = field(default_factory=dict)
    error: str | None = None
    record: object = None

    @property
    def throughput_rows_per_s(self) -> float:
        return self.rows / self.wall_s if self.wall_s > 0 else 0.0


def wait_for_exit(pids: list[int], timeout_s: float = 60.0) -> float:
    """Wait until the model replicas' processes ``pids`` have exited (their memory freed), so that
    the next run does not start beside them. Returns the seconds waited."""
    import psutil

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s and any(psutil.pid_exists(p) for p in pids):
        time.sleep(0.2)
    return time.perf_counter() - t0


def wait_until_idle(timeout_s: float = 120.0) -> float:
    """Wait until every CPU and GPU of the cluster is free again, so that no run starts beside
    actors of the run before it (Ray releases them asynchronously; on two cores the last run's
    exiting workers took CPU from the next run's first actors). Returns the seconds waited."""
    import ray

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        total, free = ray.cluster_resources(), ray.available_resources()
        if all(free.get(k, 0.0) >= total.get(k, 0.0) - 1e-6 for k in ("CPU", "GPU")):
            break
        time.sleep(0.5)
    return time.perf_counter() - t0


def run_once(workload: Workload, blocks: list[list[dict]], curves: dict[str, CostCurve], cluster: Cluster, *,
             policy: str | None, pools, interval_s: float = 1.0, kill: bool = True) -> Measured:
    """Execute once under ``policy`` (``None``: no trident, stock Ray), under the watchdog
    (``kill=False``: it only measures the peak memory)."""
    import pyarrow.parquet as pq

    import trident

    wait_until_idle()
    work = Path(tempfile.mkdtemp(prefix="trident-bench-"))
    pid_dir = work / "pids"
    pid_dir.mkdir()
    ds = build(workload, blocks, curves, cluster, pools=pools, pid_dir=str(pid_dir))
    run = trident.autoscale(policy=policy, memory_limit=cluster.memory_limit_bytes, interval_s=interval_s,
                            controller_timeout_s=120.0, history=False,
                            memory_scope="workers") if policy else None  # the watchdog counts the workers
    error = None
    with MemoryWatchdog(str(pid_dir), cluster.memory_limit_bytes, kill=kill) as dog:
        t0 = time.perf_counter()
        try:
            if run is not None:
                with run:
                    ds.write_parquet(str(work / "out"))
            else:
                ds.write_parquet(str(work / "out"))
        except Exception as exc:  # a failed run is a result, recorded with its error
            error = f"{type(exc).__name__}: {exc}"
        wall_s = time.perf_counter() - t0
    ids = pq.read_table(str(work / "out"), columns=["id"]).column("id").to_pylist() if (work / "out").exists() \
        else []
    want = {row["id"] for b in blocks for row in b}
    seen = set(ids)
    wait_for_exit([int(f.name) for f in pid_dir.iterdir() if f.name.isdigit()])
    shutil.rmtree(work, ignore_errors=True)
    return Measured(policy=policy or "stock", wall_s=wall_s, rows=len(seen & want), rows_lost=len(want - seen),
                    rows_duplicated=len(ids) - len(seen), oom_kills=dog.kills, peak_model_uss_bytes=dog.peak_bytes,
                    summary=run.summary() if run is not None else {}, error=error,
                    record=run.record if run is not None else None)


def static_splits(gpus: int, fits=None) -> list[tuple[int, int]]:
    """(OCR replicas, embed replicas) configurations the oracle sweeps: the GPUs split in half,
    and the two extremes (one replica for one stage, the rest for the other). With ``fits``
    (``fits(ocr, embed) -> bool``), each is shrunk, larger side first, until it fits."""
    out = []
    for o in sorted({1, gpus // 2, gpus - 1}):
        e = gpus - o
        while fits is not None and not fits(o, e) and o + e > 2:
            o, e = (o - 1, e) if o >= e and o > 1 else (o, e - 1)
        if 1 <= o and 1 <= e and (o, e) not in out:
            out.append((o, e))
    return out


REPLICA_OVERHEAD_BYTES = 110 * 2**20
"""Resident memory of an idle Ray worker process beyond a stage's calibrated memory (estimate)."""


def fits_memory(curves, cluster: Cluster):
    """``fits(ocr, embed)``: whether that many model replicas (each its calibrated base memory
    plus :data:`REPLICA_OVERHEAD_BYTES`) stay under the memory limit."""
    per = {k: curves[k].base_bytes * cluster.memory_scale + REPLICA_OVERHEAD_BYTES for k in ("ocr", "embed")}
    return lambda o, e: o * per["ocr"] + e * per["embed"] <= cluster.memory_limit_bytes


def memory_splits(curves, cluster: Cluster) -> list[tuple[int, int]]:
    """Every (OCR, embed) split of the GPUs, at least one replica each, that fits the memory limit."""
    fits = fits_memory(curves, cluster)
    return [(o, e) for o in range(1, cluster.gpus) for e in range(1, cluster.gpus - o + 1) if fits(o, e)]


def oracle(workload: Workload, curves, cluster: Cluster, *, log) -> tuple[float, dict]:
    """Best feasible static split per phase (each phase run alone under every split, nothing
    killed; a split whose model replicas' peak USS exceeds the memory limit is infeasible).
    The oracle's wall time is the sum over phases of the best phase times (inf if a phase
    has no feasible split)."""
    best = {}
    for ph in workload.phases:
        blocks = items_of(workload, (ph,))
        times = {}
        for split in static_splits(cluster.gpus, fits_memory(curves, cluster)):
            m = run_once(workload, blocks, curves, cluster, policy=None, pools=((split[0],) * 2, (split[1],) * 2),
                         kill=False)
            feasible = not m.rows_lost and m.error is None and m.peak_model_uss_bytes <= cluster.memory_limit_bytes
            times[split] = m.wall_s if feasible else float("inf")
            log(f"  oracle sweep {ph.name} ocr={split[0]} embed={split[1]}: {m.wall_s:.1f} s, peak model USS "
                f"{m.peak_model_uss_bytes / 2**30:.2f} GiB" + ("" if feasible else " (infeasible)"))
        split = min(times, key=times.get)
        best[ph.name] = {"ocr_replicas": split[0], "embed_replicas": split[1],
                         "wall_s": round(times[split], 2) if times[split] < float("inf") else None}
    if any(b["wall_s"] is None for b in best.values()):
        return float("inf"), best
    return sum(b["wall_s"] for b in best.values()), best


def _batch_seconds(rows: list[dict], curve: CostCurve, unit: str, batch_rows: int, time_scale: float) -> list[float]:
    """Seconds of each batch of a stage over ``rows`` in consecutive batches of ``batch_rows``,
    in order; a batch with no work costs nothing, as in the stand-in, and is left out."""
    units = (sum(r[unit] for r in rows[i:i + batch_rows]) for i in range(0, len(rows), batch_rows))
    return [curve.time_s(u) * time_scale for u in units if u > 0]


def _stage_work_s(rows: list[dict], curve: CostCurve, unit: str, batch_rows: int,
                  time_scale: float) -> tuple[float, float]:
    """(summed seconds, longest batch seconds) of a stage over ``rows`` (see :func:`_batch_seconds`)."""
    batches = _batch_seconds(rows, curve, unit, batch_rows, time_scale)
    return sum(batches), max(batches, default=0.0)


def work_bound(workload: Workload, curves, cluster: Cluster) -> tuple[float, dict]:
    """A lower bound on the wall time from the calibrated work alone: per phase, the best split
    of the GPUs between OCR and embedding whose memory estimate fits the limit, each stage's
    work spread evenly over its replicas (and the CPU stage's over the CPUs left), with no
    cold start, no pipeline fill or drain and no transition; the phases summed. No schedule
    can beat it; ``ratio_to_bound`` says how close a policy came."""
    from harness.measure import UNITS

    splits = memory_splits(curves, cluster)
    best, total = {}, 0.0
    for ph in workload.phases:
        blocks = items_of(workload, (ph,))
        rows = [r for b in blocks for r in b]
        cpu_curve = curves[workload.cpu_stage]
        cpu = sum(cpu_curve.time_s(sum(r[UNITS[workload.cpu_stage]] for r in b)) * cluster.time_scale for b in blocks)
        ocr, ocr_long = _stage_work_s(rows, curves["ocr"], "megapixels", workload.ocr_batch_size, cluster.time_scale)
        emb, emb_long = _stage_work_s(rows, curves["embed"], "chars", workload.embed_batch_size, cluster.time_scale)
        times = {(o, e): max(cpu / max(cluster.cpus - o - e, 1), ocr / o, emb / e, ocr_long, emb_long)
                 for o, e in splits}
        if not times:
            return float("inf"), {}
        split = min(times, key=times.get)
        best[ph.name] = {"ocr_replicas": split[0], "embed_replicas": split[1], "wall_s": round(times[split], 2)}
        total += times[split]
    return total, best


def in_order_bound(workload: Workload, curves, cluster: Cluster) -> float:
    """A lower bound on the wall time of any schedule that hands each model stage its batches in
    input order, as an actor pool takes its queue: each stage alone, on the most replicas any
    memory-feasible split gives it, from time 0 with no cold start, each replica running one batch
    at a time. Batches go to the replica free first, which starts each as early as in-order
    dispatch allows. Where a few long batches come last (video's HD clips), it sits above
    :func:`work_bound`: with 5 OCR replicas the last 8 clips end in two rounds, not 8/5 of one."""
    import heapq

    splits = memory_splits(curves, cluster)
    if not splits:
        return float("inf")
    rows = [r for b in items_of(workload) for r in b]
    worst = 0.0
    for k, (stage, unit, batch) in enumerate((("ocr", "megapixels", workload.ocr_batch_size),
                                              ("embed", "chars", workload.embed_batch_size))):
        free = [0.0] * max(split[k] for split in splits)
        for t in _batch_seconds(rows, curves[stage], unit, batch, cluster.time_scale):
            heapq.heapreplace(free, free[0] + t)
        worst = max(worst, max(free))
    return worst


def _failed_tasks(summary: dict) -> int | None:
    failed = summary.get("failed_tasks")
    return int(sum(failed.values())) if isinstance(failed, dict) else None


def bench_workload(workload: Workload, curves, cluster: Cluster, *, policies=POLICIES, with_oracle: bool = True,
                   interval_s: float = 1.0, runs_dir: str | None = None, save=None, log=print) -> dict:
    """One workload under every policy, side by side; a RESULTS.md-shaped dict. Each
    policy's full run record (snapshots, decisions) goes to ``runs_dir`` when given;
    ``save(result)`` is called with the policy rows before the oracle sweep and again after."""
    import ray

    import trident

    blocks = items_of(workload)
    n_rows = sum(len(b) for b in blocks)
    half = cluster.gpus // 2
    pools = {"static": ((half, half), (half, half)), "ray": ((1, cluster.gpus), (1, cluster.gpus)),
             "ds2": ((1, cluster.gpus), (1, cluster.gpus)), "trident": ((1, cluster.gpus), (1, cluster.gpus))}
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    # one unmeasured run first: the first run on a fresh Ray pays its worker start-up (Ray's
    # first OCR actor came up at 11.5 s instead of 4-6 s when ray ran first on a new session)
    run_once(workload, items_of(workloads(0.0)[workload.name]), curves, cluster, policy="ray", pools=pools["ray"],
             interval_s=interval_s, kill=False)
    measured = {}
    for policy in policies:
        m = run_once(workload, blocks, curves, cluster, policy=policy, pools=pools[policy], interval_s=interval_s)
        measured[policy] = m
        if runs_dir and m.record is not None:
            Path(runs_dir).mkdir(parents=True, exist_ok=True)
            m.record.to_json(str(Path(runs_dir) / f"{workload.name}-{policy}.json"))
        log(f"{workload.name} {policy:8s} {m.wall_s:6.1f} s  {m.throughput_rows_per_s:6.2f} rows/s  "
            f"OOM kills {m.oom_kills}  lost {m.rows_lost}" + (f"  error {m.error}" if m.error else ""))
    base = measured.get("ray")
    rows = []
    for policy, m in measured.items():
        row = {"policy": policy, "wall_s": round(m.wall_s, 2), "throughput_rows_per_s": round(m.throughput_rows_per_s, 3),
               "rows": m.rows, "rows_lost": m.rows_lost, "rows_duplicated": m.rows_duplicated,
               "oom_kills": m.oom_kills, "peak_model_uss_bytes": m.peak_model_uss_bytes}
        if base is not None and base.throughput_rows_per_s > 0:
            row["ratio_to_baseline"] = round(m.throughput_rows_per_s / base.throughput_rows_per_s, 3)
        if "reconfigurations" in m.summary:
            row["reconfigurations"] = m.summary["reconfigurations"]
        failed = _failed_tasks(m.summary)
        if failed is not None:
            row["failed_tasks"] = failed
        if m.error:
            row["error"] = m.error
        rows.append(row)
    out = {
        "benchmark": "pipeline_bench",
        "trident_version": trident.__version__,
        "ray_version": ray.__version__,
        "started_at": started,
        "machine": {"cpus": os.cpu_count(), "memory_gib": _memory_gib(), "gpus": 0, "logical_cpus": cluster.cpus,
                    "logical_gpus": cluster.gpus, "host": platform.node()},
        "workload": {"name": workload.name, "seed": 0, "mode": "calibrated",
                     "phases": [{"name": p.name, "rows": p.rows, "pattern": [i.kind for i in p.pattern]}
                                for p in workload.phases],
                     "stand_in": ("every stage sleeps its calibrated time x time_scale and holds its calibrated "
                                  "memory x memory_scale (curves measured from the real stages on this machine, "
                                  "benchmarks/harness/calibration.json); model stages are actor pools on logical GPUs; "
                                  "a watchdog kills the largest model replica while their summed USS exceeds "
                                  "memory_limit_bytes"),
                     "warm_up": "one unmeasured run of two rows per phase under ray before the measured runs; "
                                "each run starts once the last one's model processes have exited",
                     "time_scale": cluster.time_scale, "memory_scale": cluster.memory_scale,
                     "memory_limit_bytes": cluster.memory_limit_bytes},
        "baseline": "ray",
        "rows": rows,
    }
    bound_s, bound_split = work_bound(workload, curves, cluster)
    if bound_s < float("inf"):
        tput_bound = n_rows / bound_s
        for row in rows:
            row["ratio_to_bound"] = round(row["throughput_rows_per_s"] / tput_bound, 3)
        bound_row = {"policy": "bound", "wall_s": round(bound_s, 2), "throughput_rows_per_s": round(tput_bound, 3),
                     "per_phase": bound_split, "in_order_wall_s": round(in_order_bound(workload, curves, cluster), 2),
                     "note": "calibrated work / best memory-feasible split per phase; no cold start, fill, drain "
                             "or transition: no schedule can be faster; in_order_wall_s: no schedule that hands "
                             "each model stage its batches in input order can be faster"}
        if base is not None and base.throughput_rows_per_s > 0:
            bound_row["ratio_to_baseline"] = round(tput_bound / base.throughput_rows_per_s, 3)
        rows.append(bound_row)
    if save is not None:
        save(out)
    if with_oracle:
        oracle_s, best = oracle(workload, curves, cluster, log=log)
        feasible = oracle_s < float("inf")
        tput = n_rows / oracle_s if feasible and oracle_s > 0 else 0.0
        for row in rows:
            row["ratio_to_oracle"] = round(row["throughput_rows_per_s"] / tput, 3) if tput > 0 else None
        oracle_row = {"policy": "oracle", "per_phase": best,
                      "note": "best static split per phase within the memory limit, phases run alone "
                              "(no transitions)" + ("" if feasible else "; a phase had no feasible split")}
        if feasible:
            oracle_row.update(wall_s=round(oracle_s, 2), throughput_rows_per_s=round(tput, 3))
        if tput > 0 and base is not None and base.throughput_rows_per_s > 0:
            oracle_row["ratio_to_baseline"] = round(tput / base.throughput_rows_per_s, 3)
        rows.append(oracle_row)
        if save is not None:
            save(out)
    return out


def _memory_gib() -> float:
    import psutil

    return round(psutil.virtual_memory().total / 2**30, 1)


def plot_results(results: list[dict], path: str) -> None:
    """Throughput ratio to ``ray`` per policy (oracle dashed) and OOM kills, one panel pair per workload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(results), figsize=(5 * len(results), 6.5), squeeze=False)
    for col, res in enumerate(results):
        rows = [r for r in res["rows"] if r["policy"] not in ("oracle", "bound")]
        names = [r["policy"] for r in rows]
        ratios = [r.get("ratio_to_baseline", 0.0) for r in rows]
        ax = axes[0][col]
        ax.bar(names, ratios, color=["#999999" if n != "trident" else "#1f77b4" for n in names])
        for name, style, label in (("oracle", "--", "per-phase oracle (measured)"),
                                   ("bound", ":", "work bound (no schedule is faster)")):
            ref = next((r for r in res["rows"] if r["policy"] == name), None)
            if ref and "ratio_to_baseline" in ref:
                ax.axhline(ref["ratio_to_baseline"], linestyle=style, color="k", label=label)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", fontsize=8)
        ax.set_title(f"{res['workload']['name']} ({res['workload']['mode']})")
        ax.set_ylabel("throughput / ray")
        ax2 = axes[1][col]
        ax2.bar(names, [r.get("oom_kills", 0) for r in rows], color="#d62728")
        ax2.set_ylabel("OOM kills (memory limit)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_bench(*, out_dir: str = "benchmarks/results", scale: float = 1.0, policies=POLICIES,
              names: tuple[str, ...] = ("pdf-regimes", "video-regimes"), with_oracle: bool = True,
              cluster: Cluster | None = None, interval_s: float = 1.0, log=print) -> list[str]:
    """Run the benchmark on an embedded Ray; write one JSON per workload and one PNG; return the paths."""
    import ray

    from trident.demos.runner import start_ray

    cluster = cluster or Cluster()
    curves = load_curves()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    start_ray(num_cpus=cluster.cpus, num_gpus=cluster.gpus)
    ship()
    written: list[str] = []
    try:
        for name in names:
            path = out / f"pipeline_bench-{name}.json"

            def save(res: dict, path: Path = path) -> None:
                path.write_text(json.dumps(res, indent=1) + "\n")
                plot_results([res], str(path.with_suffix(".png")))

            bench_workload(workloads(scale)[name], curves, cluster, policies=policies, with_oracle=with_oracle,
                           interval_s=interval_s, runs_dir=str(out / "runs"), save=save, log=log)
            written += [str(path), str(path.with_suffix(".png"))]
    finally:
        ray.shutdown()
    return written
