"""S-Lab's Helios traces (``cluster_log.csv``)."""
from __future__ import annotations

import math
from pathlib import Path

from trident.core.errors import ConfigError
from trident.jobs.base import Job, Node
from trident.sim.loaders.common import BadRow, Rows, Trace, finish, gpus_demand, parse_time


# --- Helios (S-Lab HeliosData cluster_log.csv) ------------------------------------------------------

def load_helios(path: str | Path, *, num_nodes: int | None = None, gpus_per_node: int = 8,
                gpu_model: str = "V100", skip_bad: bool = False) -> Trace:
    """Helios ``cluster_log.csv`` (job_id, user, vc, gpu_num, cpu_num, node_num, state,
    submit_time, start_time, end_time, duration, ...). Times are 'YYYY-MM-DD HH:MM:SS';
    ``duration`` in seconds. CPU-only jobs and jobs with no run time are excluded.
    The cluster is ``num_nodes`` nodes of ``gpus_per_node`` (default: just enough nodes
    for the largest job, at least 8)."""
    path = Path(path)
    rows = Rows(path, skip_bad)
    jobs = []
    for line, row in rows.read(required=("job_id", "gpu_num", "submit_time", "duration")):
        try:
            gpus = rows.num(line, row, "gpu_num")
            duration = rows.num(line, row, "duration", default=0.0)
            submitted = parse_time(row["submit_time"])
            if submitted is None:
                raise BadRow("submit_time is empty")
            if gpus <= 0:
                rows.exclude("cpu_only")
                continue
            if duration <= 0:
                rows.exclude("no_run_time")
                continue
            jobs.append(Job(job_id=row["job_id"], arrival_s=submitted, duration_s=duration, num_gpus=gpus_demand(gpus),
                            cpus=rows.num(line, row, "cpu_num", default=0.0), user=row.get("user", ""),
                            vc=row.get("vc", ""), status=row.get("state", "")))
        except (BadRow, ConfigError) as exc:
            rows.bad(line, str(exc))
    if num_nodes is None:
        num_nodes = max(8, math.ceil(max((j.num_gpus for j in jobs), default=1) / gpus_per_node))
    nodes = [Node(node_id=f"node-{k}", gpu_model=gpu_model, num_gpus=gpus_per_node) for k in range(num_nodes)]
    return finish("helios", jobs, nodes, rows)
