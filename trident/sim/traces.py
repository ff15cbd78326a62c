"""Loaders of public GPU-cluster traces into one job schema (:class:`trident.sched.base.Job`).

Every loader returns a :class:`Trace` (jobs, the cluster's nodes, and counts of rows
left out and why). A malformed row raises :class:`~trident.errors.TraceFormatError`
naming the file and line; with ``skip_bad=True`` it is skipped and counted instead.
Rows that are well formed but cannot be replayed (CPU-only pods, jobs that never
ran) are left out and counted under ``excluded``.

Kinds (``kind:path`` in the CLI): ``alibaba-2023``, ``philly-gavel``, ``pollux``,
``tiresias``, ``philly``, ``helios``, ``pai-2020``. The first four ship a small sample
inside the package (``trident/sim/data``), used when no path is given.
"""
from __future__ import annotations

import ast
import csv
import json
import math
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from trident.errors import ConfigError, TraceFormatError
from trident.sched.base import Job, Node


@dataclass(frozen=True, eq=False)
class Trace:
    """Jobs (sorted by arrival) and nodes of one trace; ``skipped_rows`` malformed rows
    skipped on request; ``excluded`` counts well-formed rows left out, by reason."""

    name: str
    jobs: tuple[Job, ...]
    nodes: tuple[Node, ...]
    skipped_rows: int = 0
    excluded: dict[str, int] = field(default_factory=dict)


class _Rows:
    """Reads a delimited file with line numbers; collects or raises row errors."""

    def __init__(self, path: Path, skip_bad: bool) -> None:
        self.path = path
        self.skip_bad = skip_bad
        self.skipped = 0
        self.excluded: dict[str, int] = {}

    def exclude(self, reason: str) -> None:
        self.excluded[reason] = self.excluded.get(reason, 0) + 1

    def bad(self, line: int, problem: str) -> None:
        if not self.skip_bad:
            raise TraceFormatError(str(self.path), line, problem)
        self.skipped += 1

    def read(self, *, columns: Sequence[str] | None = None, delimiter: str = ",",
             required: Sequence[str] = ()) -> Iterator[tuple[int, dict[str, str]]]:
        """Rows as dicts. ``columns`` names a header-less file's columns; a first line equal
        to them is taken as a header and skipped."""
        if not self.path.is_file():
            raise TraceFormatError(str(self.path), 0, "trace file not found")
        with open(self.path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f, delimiter=delimiter)
            header = list(columns) if columns is not None else None
            for line, row in enumerate(reader, start=1):
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue
                if header is None or (line == 1 and columns is not None and row == list(columns)):
                    header = [c.strip() for c in row]
                    missing = [c for c in required if c not in header]
                    if missing:
                        raise TraceFormatError(str(self.path), line, f"missing columns {missing}; found {header}")
                    continue
                if len(row) != len(header):
                    self.bad(line, f"expected {len(header)} fields ({','.join(header)}), found {len(row)}")
                    continue
                yield line, dict(zip(header, row))

    def num(self, line: int, row: dict[str, str], col: str, *, default: float | None = None) -> float:
        """A finite number from ``row[col]``; raises ``_Bad`` (reported by the caller)."""
        text = row.get(col, "").strip()
        if text == "" and default is not None:
            return default
        try:
            value = float(text)
        except ValueError:
            raise _Bad(f"{col}={text!r} is not a number") from None
        if not math.isfinite(value):
            raise _Bad(f"{col}={text!r} is not finite")
        return value


class _Bad(Exception):
    """A problem with one row (turned into a TraceFormatError with file and line)."""


def _existing(path: Path, what: str = "trace file") -> Path:
    """``path`` if it exists, else a TraceFormatError saying the trace itself is missing."""
    if not path.exists():
        raise TraceFormatError(str(path), 0, f"{what} not found")
    return path


def _finish(name: str, jobs: list[Job], nodes: Sequence[Node], rows: _Rows) -> Trace:
    if not jobs:
        raise TraceFormatError(str(rows.path), 0, "no replayable jobs in the trace")
    t0 = min(j.arrival_s for j in jobs)
    jobs = sorted((replace(j, arrival_s=j.arrival_s - t0) if t0 else j for j in jobs),
                  key=lambda j: (j.arrival_s, j.job_id))
    return Trace(name=name, jobs=tuple(jobs), nodes=tuple(nodes), skipped_rows=rows.skipped,
                 excluded=dict(rows.excluded))


MAX_NODES = 100_000
"""More nodes than this in a trace is a malformed row (a replay would not fit in memory)."""
MAX_GPUS_PER_NODE = 256
"""More devices than this on one node is a malformed row."""
MAX_JOB_GPUS = 1_000_000


def _gpus(value: float) -> float:
    """A GPU demand as the schema wants it: a fraction below one, else whole GPUs (rounded up)."""
    if value > MAX_JOB_GPUS:
        raise _Bad(f"a job asking for {value:g} GPUs (more than {MAX_JOB_GPUS})")
    return value if value < 1 else float(math.ceil(value - 1e-9))


def _node_gpus(value: float, col: str) -> int:
    """A node's device count: a whole number in [0, MAX_GPUS_PER_NODE]."""
    if not (0 <= value <= MAX_GPUS_PER_NODE and float(value).is_integer()):
        raise _Bad(f"{col}={value:g} is not a whole number of GPUs in [0, {MAX_GPUS_PER_NODE}]")
    return int(value)


# --- Alibaba GPU 2023 (openb) ------------------------------------------------------------------

_ALIBABA_PRIORITY = {"Guaranteed": 2, "LS": 1, "Burstable": 0, "BE": 0}


def load_alibaba_2023(path: str | Path, *, skip_bad: bool = False) -> Trace:
    """Alibaba ``cluster-trace-gpu-v2023``: ``pods.csv`` and ``nodes.csv`` (``path`` = either
    file's folder, or ``pods.csv`` with ``nodes.csv`` beside it).

    Arrival = ``creation_time``; duration = ``deletion_time - scheduled_time`` for pods
    that were scheduled; GPUs = ``gpu_milli / 1000`` for a one-GPU pod (a fraction when
    below 1000), else ``num_gpu``; ``gpu_spec`` lists the allowed models.
    CPU-only pods and pods never scheduled are excluded.
    """
    path = _existing(Path(path))
    pods_path = _existing(path / "pods.csv" if path.is_dir() else path)
    nodes_path = pods_path.parent / "nodes.csv"
    nrows = _Rows(nodes_path, skip_bad)
    nodes = []
    for line, row in nrows.read(required=("sn", "cpu_milli", "memory_mib", "gpu", "model")):
        try:
            gpus = _node_gpus(nrows.num(line, row, "gpu"), "gpu")
            if gpus > 0 and not row["model"].strip():
                raise _Bad("a node with GPUs has no model")
            nodes.append(Node(node_id=row["sn"], gpu_model=row["model"].strip(), num_gpus=int(gpus),
                              cpus=nrows.num(line, row, "cpu_milli") / 1000.0,
                              memory_mib=nrows.num(line, row, "memory_mib")))
        except (_Bad, ConfigError) as exc:
            nrows.bad(line, str(exc))
    rows = _Rows(pods_path, skip_bad)
    rows.skipped += nrows.skipped
    jobs = []
    cols = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
            "creation_time", "deletion_time", "scheduled_time")
    for line, row in rows.read(required=cols):
        try:
            num_gpu = rows.num(line, row, "num_gpu")
            milli = rows.num(line, row, "gpu_milli", default=0.0)
            created = rows.num(line, row, "creation_time")
            deleted = rows.num(line, row, "deletion_time")
            if num_gpu == 0:
                rows.exclude("cpu_only")
                continue
            if row["scheduled_time"].strip() == "":
                rows.exclude("never_scheduled")
                continue
            duration = deleted - rows.num(line, row, "scheduled_time")
            if duration <= 0:
                rows.exclude("no_run_time")
                continue
            if not 0 < milli <= 1000:
                raise _Bad(f"gpu_milli={row['gpu_milli']!r} is not in (0, 1000]")
            gpus = milli / 1000.0 if num_gpu == 1 else num_gpu
            models = tuple(dict.fromkeys(m.strip() for m in row["gpu_spec"].split("|") if m.strip()))
            jobs.append(Job(job_id=row["name"], arrival_s=created, duration_s=duration, num_gpus=_gpus(gpus),
                            gpu_models=models, cpus=rows.num(line, row, "cpu_milli") / 1000.0,
                            memory_mib=rows.num(line, row, "memory_mib"), qos=row["qos"],
                            priority=_ALIBABA_PRIORITY.get(row["qos"], 0), status=row["pod_phase"]))
        except (_Bad, ConfigError) as exc:
            rows.bad(line, str(exc))
    return _finish("alibaba-2023", jobs, nodes, rows)


# --- Gavel's Philly-derived traces ---------------------------------------------------------------

GAVEL_MODELS = ("v100", "p100", "k80")
"""Order of GPU counts in a Gavel cluster spec ``"v100:p100:k80"``; v100 is the reference GPU."""


def _find_beside(path: Path, name: str) -> Path | None:
    for folder in (path.parent, path.parent.parent):
        if (folder / name).is_file():
            return folder / name
    return None


def _gavel_throughputs(tp: Path) -> dict[tuple[str, int], dict[str, float]]:
    """(job type, scale factor) -> steps/s per GPU model, from ``simulation_throughputs.json``:
    ``{model: {"('<job type>', <scale factor>)": {"null": steps/s, ...}}}``."""
    text = tp.read_text()
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(str(tp), exc.lineno, f"invalid JSON: {exc.msg}") from None

    def bad(key: object, problem: str) -> TraceFormatError:
        at = text.find(json.dumps(key)) if isinstance(key, str) else -1
        return TraceFormatError(str(tp), 1 + text[:at].count("\n") if at >= 0 else 1, problem)

    if not isinstance(raw, dict):
        raise bad(None, "expected an object {gpu model: {\"('job type', scale)\": {\"null\": steps/s}}}")
    table: dict[tuple[str, int], dict[str, float]] = {}
    for model in GAVEL_MODELS:
        entries = raw.get(model, {})
        if not isinstance(entries, dict):
            raise bad(model, f"{model!r} must map \"('job type', scale)\" keys to throughputs")
        for key, entry in entries.items():
            try:
                job_type, sf = ast.literal_eval(key)
                isolated = float(entry["null"] if isinstance(entry, dict) else entry)
                if not isinstance(job_type, str) or isinstance(sf, bool) or not isinstance(sf, int) or sf < 1:
                    raise ValueError
            except (ValueError, TypeError, KeyError, SyntaxError, MemoryError, RecursionError):
                raise bad(key, f"{model}: {key!r} is not \"('job type', scale >= 1)\" with a steps/s number") from None
            if math.isfinite(isolated) and isolated > 0:
                table.setdefault((job_type, sf), {})[model] = isolated
    return table


def load_philly_gavel(path: str | Path, *, throughputs_path: str | Path | None = None,
                      cluster_spec: str = "36:36:36", gpus_per_node: int = 4,
                      skip_bad: bool = False) -> Trace:
    """A Gavel trace file (tab-separated, no header: job_type, command, steps_arg,
    needs_data, total_steps, arrival_time, scale_factor).

    ``simulation_throughputs.json`` (found beside the file or its folder unless given)
    holds measured steps/s per GPU model; duration = total_steps / steps/s on a v100
    for the job's scale factor (the largest measured one not above it), and
    ``speed_by_model`` = steps/s on each model over steps/s on v100.
    ``cluster_spec`` = GPU counts ``"v100:p100:k80"``, in nodes of ``gpus_per_node``.
    """
    path = _existing(Path(path))
    tp = Path(throughputs_path) if throughputs_path else _find_beside(path, "simulation_throughputs.json")
    if tp is None:
        raise TraceFormatError(str(path), 0, "simulation_throughputs.json (Gavel's measured throughputs) not "
                                             "found in the trace's folder or the folder above it")
    table = _gavel_throughputs(_existing(tp, "throughputs file"))
    try:
        counts = [int(c) for c in cluster_spec.split(":")]
    except ValueError:
        counts = []
    if len(counts) != 3 or min(counts) < 0 or sum(counts) == 0:
        raise ConfigError("cluster_spec", cluster_spec, "'v100:p100:k80' GPU counts, e.g. '36:36:36'")
    if gpus_per_node < 1:
        raise ConfigError("gpus_per_node", gpus_per_node, "an integer >= 1")
    nodes = []
    for model, count in zip(GAVEL_MODELS, counts):
        for k in range(math.ceil(count / gpus_per_node)):
            nodes.append(Node(node_id=f"{model}-{k}", gpu_model=model,
                              num_gpus=min(gpus_per_node, count - k * gpus_per_node)))
    rows = _Rows(path, skip_bad)
    jobs = []
    cols = ("job_type", "command", "steps_arg", "needs_data", "total_steps", "arrival_time", "scale_factor")
    for line, row in rows.read(columns=cols, delimiter="\t"):
        try:
            if row["needs_data"].strip() not in ("0", "1", "True", "False"):
                raise _Bad(f"needs_data={row['needs_data']!r} is not 0 or 1")
            steps = rows.num(line, row, "total_steps")
            sf = int(rows.num(line, row, "scale_factor"))
            if steps <= 0 or sf < 1:
                raise _Bad(f"total_steps={steps:g} and scale_factor={sf} must be positive")
            measured = [s for (t, s) in table if t == row["job_type"] and s <= sf]
            if not measured:
                raise _Bad(f"job type {row['job_type']!r} at scale {sf} has no measured throughput")
            per_model = table[(row["job_type"], max(measured))]
            ref = per_model.get("v100") or max(per_model.values())
            jobs.append(Job(job_id=f"{path.stem}-{line}", arrival_s=rows.num(line, row, "arrival_time"),
                            duration_s=steps / ref, num_gpus=float(sf), gpu_models=tuple(per_model),
                            speed_by_model={m: v / ref for m, v in per_model.items()},
                            user=row["job_type"]))
        except (_Bad, ConfigError) as exc:
            rows.bad(line, str(exc))
    return _finish("philly-gavel", jobs, nodes, rows)


# --- Pollux workloads ------------------------------------------------------------------------------

def load_pollux(path: str | Path, *, duration_by_application_s: dict[str, float] | None = None,
                num_nodes: int = 16, gpus_per_node: int = 4, gpu_model: str = "t4",
                skip_bad: bool = False) -> Trace:
    """A Pollux workload CSV (name, time, application, num_replicas, batch_size) on
    Pollux's testbed shape (16 nodes x 4 T4 by default). A job's run time is the time its
    application's measured tables give for its GPUs (packed) and batch size, to its last
    epoch (:func:`trident.sim.pollux_apps.isolated_run_s`); ``duration_by_application_s``
    overrides it per application."""
    from trident.sim.pollux_apps import APP_SETTINGS, isolated_run_s

    if num_nodes < 1 or gpus_per_node < 1:
        raise ConfigError("num_nodes/gpus_per_node", (num_nodes, gpus_per_node), "integers >= 1")
    override = dict(duration_by_application_s or {})
    path = Path(path)
    rows = _Rows(path, skip_bad)
    jobs = []
    for line, row in rows.read(required=("name", "time", "application", "num_replicas")):
        try:
            app = row["application"]
            if app not in override and app not in APP_SETTINGS:
                raise _Bad(f"application={app!r} has no tables; known: {sorted(APP_SETTINGS)}")
            replicas = rows.num(line, row, "num_replicas")
            duration = override.get(app) or isolated_run_s(app, int(replicas), int(rows.num(line, row, "batch_size")),
                                                            gpus_per_node)
            jobs.append(Job(job_id=row["name"], arrival_s=rows.num(line, row, "time"), duration_s=duration,
                            num_gpus=_gpus(replicas), user=app))
        except (_Bad, ConfigError) as exc:
            rows.bad(line, str(exc))
    nodes = [Node(node_id=f"node-{k}", gpu_model=gpu_model, num_gpus=gpus_per_node) for k in range(num_nodes)]
    return _finish("pollux", jobs, nodes, rows)


# --- Tiresias --------------------------------------------------------------------------------------

def load_tiresias(path: str | Path, *, cluster_spec_path: str | Path | None = None,
                  gpu_model: str = "gpu", skip_bad: bool = False) -> Trace:
    """A Tiresias job CSV (job_id, num_gpu, submit_time, iterations, model_name, duration, interval)
    with its cluster spec (num_switch, num_node_p_switch, num_gpu_p_node, num_cpu_p_node,
    mem_p_node in GB; ``cluster_spec.csv`` beside the file unless given)."""
    path = _existing(Path(path))
    spec_path = Path(cluster_spec_path) if cluster_spec_path else _find_beside(path, "cluster_spec.csv")
    if spec_path is None:
        raise TraceFormatError(str(path), 0, "cluster_spec.csv (the cluster's shape) not found in the trace's "
                                             "folder or the folder above it")
    srows = _Rows(spec_path, False)
    spec = next((r for r in srows.read(required=("num_switch", "num_node_p_switch", "num_gpu_p_node"))), None)
    if spec is None:
        raise TraceFormatError(str(spec_path), 1, "no cluster spec row")
    line, s = spec
    try:
        n = srows.num(line, s, "num_switch") * srows.num(line, s, "num_node_p_switch")
        if not (0 < n <= MAX_NODES and float(n).is_integer()):
            raise _Bad(f"num_switch x num_node_p_switch = {n:g} is not a whole number of nodes in [1, {MAX_NODES}]")
        g = _node_gpus(srows.num(line, s, "num_gpu_p_node"), "num_gpu_p_node")
        cpus = srows.num(line, s, "num_cpu_p_node", default=0.0)
        mem = srows.num(line, s, "mem_p_node", default=0.0) * 1024
        nodes = [Node(node_id=f"node-{k}", gpu_model=gpu_model, num_gpus=g, cpus=cpus, memory_mib=mem)
                 for k in range(int(n))]
    except (_Bad, ConfigError) as exc:
        raise TraceFormatError(str(spec_path), line, str(exc)) from None
    rows = _Rows(path, skip_bad)
    jobs = []
    for line, row in rows.read(required=("job_id", "num_gpu", "submit_time", "duration")):
        try:
            jobs.append(Job(job_id=row["job_id"], arrival_s=rows.num(line, row, "submit_time"),
                            duration_s=rows.num(line, row, "duration"),
                            num_gpus=_gpus(rows.num(line, row, "num_gpu")), user=row.get("model_name", "")))
        except (_Bad, ConfigError) as exc:
            rows.bad(line, str(exc))
    return _finish("tiresias", jobs, nodes, rows)


# --- Full Philly (msr-fiddle/philly-traces cluster_job_log) ----------------------------------------

def _parse_time(text: object) -> float | None:
    """'YYYY-MM-DD HH:MM:SS' (UTC) -> epoch seconds; None/'None'/'' -> None."""
    if text is None or str(text).strip() in ("", "None"):
        return None
    try:
        return datetime.strptime(str(text).strip(), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        raise _Bad(f"time {text!r} is not 'YYYY-MM-DD HH:MM:SS'") from None


def load_philly(path: str | Path, *, gpu_model: str = "philly", skip_bad: bool = False) -> Trace:
    """Philly's ``cluster_job_log``: a JSON array of jobs with ``jobid``, ``user``, ``vc``,
    ``status``, ``submitted_time`` and ``attempts`` (each ``start_time``, ``end_time`` and
    ``detail``: machines ``ip`` with their ``gpus``). GPUs = devices of the first attempt;
    duration = summed attempt run times. Nodes are the machines seen, each with as many
    GPUs as the highest device index used on it. Error "lines" count jobs in the array (1-based)."""
    path = Path(path)
    rows = _Rows(path, skip_bad)
    if not path.is_file():
        raise TraceFormatError(str(path), 0, "trace file not found")
    try:
        entries = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise TraceFormatError(str(path), exc.lineno, f"invalid JSON: {exc.msg}") from None
    if not isinstance(entries, list):
        raise TraceFormatError(str(path), 1, "expected a JSON array of jobs")
    machines: dict[str, int] = {}
    jobs = []
    for k, e in enumerate(entries, start=1):
        try:
            if not isinstance(e, dict) or "jobid" not in e or "attempts" not in e:
                raise _Bad("a job needs 'jobid' and 'attempts'")
            submitted = _parse_time(e.get("submitted_time"))
            if submitted is None:
                raise _Bad("submitted_time is missing")
            run_s = 0.0
            gpus = 0
            seen: dict[str, int] = {}
            for a_index, attempt in enumerate(e["attempts"]):
                start, end = _parse_time(attempt.get("start_time")), _parse_time(attempt.get("end_time"))
                if start is not None and end is not None:
                    if end < start:
                        raise _Bad(f"attempt {a_index} ends before it starts")
                    run_s += end - start
                for d in attempt.get("detail", []):
                    ids = [int(str(gid).removeprefix("gpu")) for gid in d.get("gpus", [])]
                    if a_index == 0:
                        gpus += len(ids)
                    if ids:
                        ip = str(d["ip"])
                        seen[ip] = max(seen.get(ip, 0), _node_gpus(max(ids) + 1, "gpu index + 1"))
                        if min(ids) < 0:
                            raise _Bad(f"gpu index {min(ids)} is negative")
            if gpus == 0:
                rows.exclude("no_gpus")
                continue
            if run_s <= 0:
                rows.exclude("never_ran")
                continue
            jobs.append(Job(job_id=str(e["jobid"]), arrival_s=submitted, duration_s=run_s, num_gpus=_gpus(gpus),
                            user=str(e.get("user", "")), vc=str(e.get("vc", "")), status=str(e.get("status", ""))))
            for ip, g in seen.items():
                machines[ip] = max(machines.get(ip, 0), g)
        except (_Bad, ConfigError, ValueError, TypeError, KeyError, AttributeError) as exc:
            rows.bad(k, str(exc))
    nodes = [Node(node_id=ip, gpu_model=gpu_model, num_gpus=g) for ip, g in sorted(machines.items())]
    return _finish("philly", jobs, nodes, rows)


# --- Helios (S-Lab HeliosData cluster_log.csv) ------------------------------------------------------

def load_helios(path: str | Path, *, num_nodes: int | None = None, gpus_per_node: int = 8,
                gpu_model: str = "V100", skip_bad: bool = False) -> Trace:
    """Helios ``cluster_log.csv`` (job_id, user, vc, gpu_num, cpu_num, node_num, state,
    submit_time, start_time, end_time, duration, ...). Times are 'YYYY-MM-DD HH:MM:SS';
    ``duration`` in seconds. CPU-only jobs and jobs with no run time are excluded.
    The cluster is ``num_nodes`` nodes of ``gpus_per_node`` (default: just enough nodes
    for the largest job, at least 8)."""
    path = Path(path)
    rows = _Rows(path, skip_bad)
    jobs = []
    for line, row in rows.read(required=("job_id", "gpu_num", "submit_time", "duration")):
        try:
            gpus = rows.num(line, row, "gpu_num")
            duration = rows.num(line, row, "duration", default=0.0)
            submitted = _parse_time(row["submit_time"])
            if submitted is None:
                raise _Bad("submit_time is empty")
            if gpus <= 0:
                rows.exclude("cpu_only")
                continue
            if duration <= 0:
                rows.exclude("no_run_time")
                continue
            jobs.append(Job(job_id=row["job_id"], arrival_s=submitted, duration_s=duration, num_gpus=_gpus(gpus),
                            cpus=rows.num(line, row, "cpu_num", default=0.0), user=row.get("user", ""),
                            vc=row.get("vc", ""), status=row.get("state", "")))
        except (_Bad, ConfigError) as exc:
            rows.bad(line, str(exc))
    if num_nodes is None:
        num_nodes = max(8, math.ceil(max((j.num_gpus for j in jobs), default=1) / gpus_per_node))
    nodes = [Node(node_id=f"node-{k}", gpu_model=gpu_model, num_gpus=gpus_per_node) for k in range(num_nodes)]
    return _finish("helios", jobs, nodes, rows)


# --- Alibaba PAI 2020 ----------------------------------------------------------------------------------

PAI_JOB_COLUMNS = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
PAI_TASK_COLUMNS = ("job_name", "task_name", "inst_num", "status", "start_time", "end_time",
                    "plan_cpu", "plan_mem", "plan_gpu", "gpu_type")
PAI_MACHINE_COLUMNS = ("machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu")


def load_pai_2020(path: str | Path, *, skip_bad: bool = False) -> Trace:
    """Alibaba PAI 2020 (``cluster-trace-gpu-v2020``): a folder with ``pai_job_table.csv``,
    ``pai_task_table.csv`` and ``pai_machine_spec.csv`` (header-less as released, or with
    a header line). A job's GPUs = sum over its tasks of inst_num x plan_gpu / 100;
    arrival = the job's start_time (submission); duration = last task end - first task
    start; allowed models = its tasks' gpu_type (MISC or empty = any)."""
    folder = _existing(Path(path), "trace folder")
    if folder.is_file():
        folder = folder.parent
    mrows = _Rows(folder / "pai_machine_spec.csv", skip_bad)
    nodes = []
    for line, row in mrows.read(columns=PAI_MACHINE_COLUMNS):
        try:
            gpus = _node_gpus(math.floor(mrows.num(line, row, "cap_gpu", default=0.0)), "cap_gpu")
            if gpus > 0:
                nodes.append(Node(node_id=row["machine"], gpu_model=row["gpu_type"], num_gpus=gpus,
                                  cpus=mrows.num(line, row, "cap_cpu", default=0.0),
                                  memory_mib=mrows.num(line, row, "cap_mem", default=0.0) * 1024))
        except (_Bad, ConfigError) as exc:
            mrows.bad(line, str(exc))
    jrows = _Rows(folder / "pai_job_table.csv", skip_bad)
    submitted: dict[str, tuple[float, str, str, int]] = {}
    for line, row in jrows.read(columns=PAI_JOB_COLUMNS):
        try:
            start = jrows.num(line, row, "start_time", default=math.nan)
            if math.isnan(start):
                jrows.exclude("no_submit_time")
                continue
            submitted[row["job_name"]] = (start, row["user"], row["status"], line)
        except _Bad as exc:
            jrows.bad(line, str(exc))
    trows = _Rows(folder / "pai_task_table.csv", skip_bad)
    agg: dict[str, list] = {}
    for line, row in trows.read(columns=PAI_TASK_COLUMNS):
        try:
            inst = trows.num(line, row, "inst_num", default=1.0)
            gpu = trows.num(line, row, "plan_gpu", default=0.0)
            start = trows.num(line, row, "start_time", default=math.nan)
            end = trows.num(line, row, "end_time", default=math.nan)
            cpu = trows.num(line, row, "plan_cpu", default=0.0)
            mem = trows.num(line, row, "plan_mem", default=0.0)
        except _Bad as exc:
            trows.bad(line, str(exc))
            continue
        a = agg.setdefault(row["job_name"], [0.0, math.inf, -math.inf, 0.0, 0.0, set()])
        a[0] += inst * gpu / 100.0
        if not math.isnan(start):
            a[1] = min(a[1], start)
        if not math.isnan(end):
            a[2] = max(a[2], end)
        a[3] += inst * cpu / 100.0
        a[4] += inst * mem * 1024
        if row["gpu_type"] and row["gpu_type"] != "MISC":
            a[5].add(row["gpu_type"])
    jobs = []
    for name, (gpus, start, end, cpus, mem, models) in agg.items():
        if name not in submitted:
            trows.exclude("task_without_job")
            continue
        if gpus <= 0:
            trows.exclude("cpu_only")
            continue
        if not end > start:
            trows.exclude("no_run_time")
            continue
        arrival, user, status, line = submitted[name]
        try:  # the job's figures add up its tasks; a bad sum is reported at the job's own line
            jobs.append(Job(job_id=name, arrival_s=arrival, duration_s=end - start, num_gpus=_gpus(gpus),
                            gpu_models=tuple(sorted(models)), cpus=cpus, memory_mib=mem, user=user, status=status))
        except (_Bad, ConfigError) as exc:
            jrows.bad(line, f"job {name!r} (summed over its tasks): {exc}")
    trows.skipped += mrows.skipped + jrows.skipped
    for r in (mrows, jrows):
        for k, v in r.excluded.items():
            trows.excluded[k] = trows.excluded.get(k, 0) + v
    return _finish("pai-2020", jobs, nodes, trows)


# --- registry of kinds, shipped samples, load scaling ---------------------------------------------------

LOADERS: dict[str, Callable[..., Trace]] = {
    "alibaba-2023": load_alibaba_2023, "philly-gavel": load_philly_gavel, "pollux": load_pollux,
    "tiresias": load_tiresias, "philly": load_philly, "helios": load_helios, "pai-2020": load_pai_2020,
}

SHIPPED = {"alibaba-2023": "alibaba-2023", "philly-gavel": "philly-gavel/2869ce.csv",
           "pollux": "pollux/workload-1.csv", "tiresias": "tiresias/60_job.csv"}
"""Kinds with a small sample inside the package (``trident/sim/data``)."""


def shipped_path(kind: str) -> Path:
    """Path of the sample shipped for ``kind``."""
    if kind not in SHIPPED:
        raise ConfigError("trace", kind, f"kind:PATH (no sample ships for {kind!r}; samples: {sorted(SHIPPED)})")
    return Path(str(resources.files("trident.sim").joinpath("data", SHIPPED[kind])))


def load_trace(spec: str, *, skip_bad: bool = False) -> Trace:
    """Load ``kind:path`` (or ``kind`` alone for a shipped sample)."""
    kind, _, where = spec.partition(":")
    if kind not in LOADERS:
        raise ConfigError("trace", spec, f"kind:PATH with kind one of {sorted(LOADERS)}")
    return LOADERS[kind](Path(where) if where else shipped_path(kind), skip_bad=skip_bad)


def scale_load(jobs: Sequence[Job], load: float) -> tuple[Job, ...]:
    """Compress arrival times by ``load`` (2.0 = jobs arrive twice as fast)."""
    if not load > 0:
        raise ConfigError("load", load, "a number > 0")
    if load == 1:
        return tuple(jobs)
    return tuple(replace(j, arrival_s=j.arrival_s / load) for j in jobs)


def resample(trace: Trace, n_jobs: int, *, seed: int) -> tuple[Job, ...]:
    """``n_jobs`` jobs drawn with replacement from ``trace`` (seeded), with inter-arrival
    gaps drawn from the trace's own gaps; ids are ``r<k>``."""
    if n_jobs < 1:
        raise ConfigError("n_jobs", n_jobs, "an integer >= 1")
    rng = np.random.default_rng(seed)
    src = trace.jobs
    gaps = np.diff([j.arrival_s for j in src]) if len(src) > 1 else np.array([0.0])
    picks = rng.integers(0, len(src), size=n_jobs)
    arrivals = np.concatenate([[0.0], np.cumsum(rng.choice(gaps, size=n_jobs - 1))])
    return tuple(replace(src[p], job_id=f"r{k}", arrival_s=float(a))
                 for k, (p, a) in enumerate(zip(picks.tolist(), arrivals.tolist())))


def scale_cluster(nodes: Sequence[Node], fraction: float) -> tuple[Node, ...]:
    """Keep the first ``ceil(fraction x count)`` GPU nodes of each GPU model (a smaller,
    same-shaped cluster, for contention on traces recorded on large clusters)."""
    if not 0 < fraction <= 1:
        raise ConfigError("cluster_fraction", fraction, "a number in (0, 1]")
    by_model: dict[str, list[Node]] = {}
    for n in nodes:
        if n.num_gpus > 0:
            by_model.setdefault(n.gpu_model, []).append(n)
    keep = {id(n) for group in by_model.values() for n in group[: math.ceil(fraction * len(group))]}
    return tuple(n for n in nodes if id(n) in keep)
