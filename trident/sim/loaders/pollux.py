"""Pollux's workloads (run times from the applications' measured tables)."""
from __future__ import annotations

from pathlib import Path

from trident.core.errors import ConfigError
from trident.jobs.base import Job, Node
from trident.sim.loaders.common import BadRow, Rows, Trace, finish, gpus_demand


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
    rows = Rows(path, skip_bad)
    jobs = []
    for line, row in rows.read(required=("name", "time", "application", "num_replicas")):
        try:
            app = row["application"]
            if app not in override and app not in APP_SETTINGS:
                raise BadRow(f"application={app!r} has no tables; known: {sorted(APP_SETTINGS)}")
            replicas = rows.num(line, row, "num_replicas")
            if replicas > num_nodes * gpus_per_node:
                raise BadRow(f"num_replicas={replicas:g} is more GPUs than the {num_nodes} x {gpus_per_node} cluster has")
            duration = override.get(app) or isolated_run_s(app, int(replicas), int(rows.num(line, row, "batch_size")),
                                                            gpus_per_node)
            jobs.append(Job(job_id=row["name"], arrival_s=rows.num(line, row, "time"), duration_s=duration,
                            num_gpus=gpus_demand(replicas), user=app))
        except (BadRow, ConfigError) as exc:
            rows.bad(line, str(exc))
    nodes = [Node(node_id=f"node-{k}", gpu_model=gpu_model, num_gpus=gpus_per_node) for k in range(num_nodes)]
    return finish("pollux", jobs, nodes, rows)
