"""Microsoft Philly traces: Gavel's Philly-derived traces and the full ``cluster_job_log``."""
from __future__ import annotations

import ast
import json
import math
from pathlib import Path

from trident.core.errors import ConfigError, TraceFormatError
from trident.jobs.base import Job, Node
from trident.sim.loaders.common import (BadRow, Rows, Trace, existing, find_beside, finish, gpus_demand, node_gpus,
                                        parse_time)


# --- Gavel's Philly-derived traces ---------------------------------------------------------------

GAVEL_MODELS = ("v100", "p100", "k80")
"""Order of GPU counts in a Gavel cluster spec ``"v100:p100:k80"``; v100 is the reference GPU."""


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
    path = existing(Path(path))
    tp = Path(throughputs_path) if throughputs_path else find_beside(path, "simulation_throughputs.json")
    if tp is None:
        raise TraceFormatError(str(path), 0, "simulation_throughputs.json (Gavel's measured throughputs) not "
                                             "found in the trace's folder or the folder above it")
    table = _gavel_throughputs(existing(tp, "throughputs file"))
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
    rows = Rows(path, skip_bad)
    jobs = []
    cols = ("job_type", "command", "steps_arg", "needs_data", "total_steps", "arrival_time", "scale_factor")
    for line, row in rows.read(columns=cols, delimiter="\t"):
        try:
            if row["needs_data"].strip() not in ("0", "1", "True", "False"):
                raise BadRow(f"needs_data={row['needs_data']!r} is not 0 or 1")
            steps = rows.num(line, row, "total_steps")
            sf = int(rows.num(line, row, "scale_factor"))
            if steps <= 0 or sf < 1:
                raise BadRow(f"total_steps={steps:g} and scale_factor={sf} must be positive")
            measured = [s for (t, s) in table if t == row["job_type"] and s <= sf]
            if not measured:
                raise BadRow(f"job type {row['job_type']!r} at scale {sf} has no measured throughput")
            per_model = table[(row["job_type"], max(measured))]
            ref = per_model.get("v100") or max(per_model.values())
            jobs.append(Job(job_id=f"{path.stem}-{line}", arrival_s=rows.num(line, row, "arrival_time"),
                            duration_s=steps / ref, num_gpus=float(sf), gpu_models=tuple(per_model),
                            speed_by_model={m: v / ref for m, v in per_model.items()},
                            user=row["job_type"]))
        except (BadRow, ConfigError) as exc:
            rows.bad(line, str(exc))
    return finish("philly-gavel", jobs, nodes, rows)


# --- Full Philly (msr-fiddle/philly-traces cluster_job_log) ----------------------------------------

def load_philly(path: str | Path, *, gpu_model: str = "philly", skip_bad: bool = False) -> Trace:
    """Philly's ``cluster_job_log``: a JSON array of jobs with ``jobid``, ``user``, ``vc``,
    ``status``, ``submitted_time`` and ``attempts`` (each ``start_time``, ``end_time`` and
    ``detail``: machines ``ip`` with their ``gpus``). GPUs = devices of the first attempt;
    duration = summed attempt run times. Nodes are the machines seen, each with as many
    GPUs as the highest device index used on it. Error "lines" count jobs in the array (1-based)."""
    path = Path(path)
    rows = Rows(path, skip_bad)
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
                raise BadRow("a job needs 'jobid' and 'attempts'")
            submitted = parse_time(e.get("submitted_time"))
            if submitted is None:
                raise BadRow("submitted_time is missing")
            run_s = 0.0
            gpus = 0
            seen: dict[str, int] = {}
            for a_index, attempt in enumerate(e["attempts"]):
                start, end = parse_time(attempt.get("start_time")), parse_time(attempt.get("end_time"))
                if start is not None and end is not None:
                    if end < start:
                        raise BadRow(f"attempt {a_index} ends before it starts")
                    run_s += end - start
                for d in attempt.get("detail", []):
                    ids = [int(str(gid).removeprefix("gpu")) for gid in d.get("gpus", [])]
                    if a_index == 0:
                        gpus += len(ids)
                    if ids:
                        ip = str(d["ip"])
                        seen[ip] = max(seen.get(ip, 0), node_gpus(max(ids) + 1, "gpu index + 1"))
                        if min(ids) < 0:
                            raise BadRow(f"gpu index {min(ids)} is negative")
            if gpus == 0:
                rows.exclude("no_gpus")
                continue
            if run_s <= 0:
                rows.exclude("never_ran")
                continue
            jobs.append(Job(job_id=str(e["jobid"]), arrival_s=submitted, duration_s=run_s, num_gpus=gpus_demand(gpus),
                            user=str(e.get("user", "")), vc=str(e.get("vc", "")), status=str(e.get("status", ""))))
            for ip, g in seen.items():
                machines[ip] = max(machines.get(ip, 0), g)
        except (BadRow, ConfigError, ValueError, TypeError, KeyError, AttributeError) as exc:
            rows.bad(k, str(exc))
    nodes = [Node(node_id=ip, gpu_model=gpu_model, num_gpus=g) for ip, g in sorted(machines.items())]
    return finish("philly", jobs, nodes, rows)
