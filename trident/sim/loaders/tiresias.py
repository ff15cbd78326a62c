"""Tiresias' synthetic job traces with their ``cluster_spec.csv``."""
from __future__ import annotations

from pathlib import Path

from trident.core.errors import ConfigError, TraceFormatError
from trident.jobs.base import Job, Node
from trident.sim.loaders.common import (MAX_NODES, BadRow, Rows, Trace, existing, find_beside, finish, gpus_demand,
                                        node_gpus)


# --- Tiresias --------------------------------------------------------------------------------------

def load_tiresias(path: str | Path, *, cluster_spec_path: str | Path | None = None,
                  gpu_model: str = "gpu", skip_bad: bool = False) -> Trace:
    """A Tiresias job CSV (job_id, num_gpu, submit_time, iterations, model_name, duration, interval)
    with its cluster spec (num_switch, num_node_p_switch, num_gpu_p_node, num_cpu_p_node,
    mem_p_node in GB; ``cluster_spec.csv`` beside the file unless given)."""
    path = existing(Path(path))
    spec_path = Path(cluster_spec_path) if cluster_spec_path else find_beside(path, "cluster_spec.csv")
    if spec_path is None:
        raise TraceFormatError(str(path), 0, "cluster_spec.csv (the cluster's shape) not found in the trace's "
                                             "folder or the folder above it")
    srows = Rows(spec_path, False)
    spec = next((r for r in srows.read(required=("num_switch", "num_node_p_switch", "num_gpu_p_node"))), None)
    if spec is None:
        raise TraceFormatError(str(spec_path), 1, "no cluster spec row")
    line, s = spec
    try:
        n = srows.num(line, s, "num_switch") * srows.num(line, s, "num_node_p_switch")
        if not (0 < n <= MAX_NODES and float(n).is_integer()):
            raise BadRow(f"num_switch x num_node_p_switch = {n:g} is not a whole number of nodes in [1, {MAX_NODES}]")
        g = node_gpus(srows.num(line, s, "num_gpu_p_node"), "num_gpu_p_node")
        cpus = srows.num(line, s, "num_cpu_p_node", default=0.0)
        mem = srows.num(line, s, "mem_p_node", default=0.0) * 1024
        nodes = [Node(node_id=f"node-{k}", gpu_model=gpu_model, num_gpus=g, cpus=cpus, memory_mib=mem)
                 for k in range(int(n))]
    except (BadRow, ConfigError) as exc:
        raise TraceFormatError(str(spec_path), line, str(exc)) from None
    rows = Rows(path, skip_bad)
    jobs = []
    for line, row in rows.read(required=("job_id", "num_gpu", "submit_time", "duration")):
        try:
            jobs.append(Job(job_id=row["job_id"], arrival_s=rows.num(line, row, "submit_time"),
                            duration_s=rows.num(line, row, "duration"),
                            num_gpus=gpus_demand(rows.num(line, row, "num_gpu")), user=row.get("model_name", "")))
        except (BadRow, ConfigError) as exc:
            rows.bad(line, str(exc))
    return finish("tiresias", jobs, nodes, rows)
