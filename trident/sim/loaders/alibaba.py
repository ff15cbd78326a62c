"""Alibaba's GPU traces: ``cluster-trace-gpu-v2023`` (openb) and PAI 2020."""
from __future__ import annotations

import math
from pathlib import Path

from trident.core.errors import ConfigError
from trident.jobs.base import Job, Node
from trident.sim.loaders.common import BadRow, Rows, Trace, existing, finish, gpus_demand, node_gpus


# --- Alibaba GPU 2023 (openb) ------------------------------------------------------------------

_ALIBABA_PRIORITY = {"Guaranteed": 2, "LS": 1, "Burstable": 0, "BE": 0}
ALIBABA_POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "qos", "pod_phase",
                       "creation_time", "deletion_time", "scheduled_time")
"""Required pod columns; ``gpu_spec`` is optional (FGD's ``multigpu*`` lists have none)."""
NODE_LISTS = ("nodes.csv", "openb_node_list_gpu_node.csv")
"""The node list beside the pods, first found: this project's sample, else FGD's artifact's."""


def load_alibaba_2023(path: str | Path, *, skip_bad: bool = False) -> Trace:
    """Alibaba ``cluster-trace-gpu-v2023``: a pod list (``pods.csv`` or any FGD
    ``openb_pod_list_*.csv``) and the node list beside it (``nodes.csv``, else FGD's
    ``openb_node_list_gpu_node.csv``); ``path`` = the pod list, or the folder of ``pods.csv``.

    Arrival = ``creation_time``; duration = ``deletion_time - scheduled_time`` for pods
    that were scheduled; GPUs = ``gpu_milli / 1000`` for a one-GPU pod (a fraction when
    below 1000), else ``num_gpu``; ``gpu_spec`` lists the allowed models (``|``-separated;
    empty, or no column at all as in FGD's ``multigpu*`` lists, = any model, as FGD's
    ``pod_csv_to_yaml.py`` reads it). The other columns are required: a list without
    times (FGD's ``multigpu*``) is refused here, it is for ``--experiment allocation``.
    CPU-only pods and pods never scheduled are excluded; a bad row raises
    TraceFormatError naming file and line (or is counted with ``skip_bad``).
    """
    path = existing(Path(path))
    pods_path = existing(path / "pods.csv" if path.is_dir() else path)
    nodes, nrows = _alibaba_nodes(pods_path, skip_bad)
    rows = Rows(pods_path, skip_bad)
    rows.skipped += nrows.skipped
    jobs = []
    for line, row in rows.read(required=ALIBABA_POD_COLUMNS):
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
                raise BadRow(f"gpu_milli={row['gpu_milli']!r} is not in (0, 1000]")
            gpus = milli / 1000.0 if num_gpu == 1 else num_gpu
            models = tuple(dict.fromkeys(m.strip() for m in row.get("gpu_spec", "").split("|") if m.strip()))
            jobs.append(Job(job_id=row["name"], arrival_s=created, duration_s=duration, num_gpus=gpus_demand(gpus),
                            gpu_models=models, cpus=rows.num(line, row, "cpu_milli") / 1000.0,
                            memory_mib=rows.num(line, row, "memory_mib"), qos=row["qos"],
                            priority=_ALIBABA_PRIORITY.get(row["qos"], 0), status=row["pod_phase"]))
        except (BadRow, ConfigError) as exc:
            rows.bad(line, str(exc))
    return finish("alibaba-2023", jobs, nodes, rows)


def _alibaba_nodes(pods_path: Path, skip_bad: bool) -> tuple[list[Node], Rows]:
    """The nodes of the first of ``NODE_LISTS`` beside ``pods_path`` (sn, cpu_milli,
    memory_mib, gpu, model), and their reader (for its skipped rows)."""
    nodes_path = next((pods_path.parent / n for n in NODE_LISTS if (pods_path.parent / n).is_file()),
                      pods_path.parent / NODE_LISTS[0])
    nrows = Rows(nodes_path, skip_bad)
    nodes = []
    for line, row in nrows.read(required=("sn", "cpu_milli", "memory_mib", "gpu", "model")):
        try:
            gpus = node_gpus(nrows.num(line, row, "gpu"), "gpu")
            if gpus > 0 and not row["model"].strip():
                raise BadRow("a node with GPUs has no model")
            nodes.append(Node(node_id=row["sn"], gpu_model=row["model"].strip(), num_gpus=int(gpus),
                              cpus=nrows.num(line, row, "cpu_milli") / 1000.0,
                              memory_mib=nrows.num(line, row, "memory_mib")))
        except (BadRow, ConfigError) as exc:
            nrows.bad(line, str(exc))
    return nodes, nrows


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
    folder = existing(Path(path), "trace folder")
    if folder.is_file():
        folder = folder.parent
    mrows = Rows(folder / "pai_machine_spec.csv", skip_bad)
    nodes = []
    for line, row in mrows.read(columns=PAI_MACHINE_COLUMNS):
        try:
            gpus = node_gpus(math.floor(mrows.num(line, row, "cap_gpu", default=0.0)), "cap_gpu")
            if gpus > 0:
                nodes.append(Node(node_id=row["machine"], gpu_model=row["gpu_type"], num_gpus=gpus,
                                  cpus=mrows.num(line, row, "cap_cpu", default=0.0),
                                  memory_mib=mrows.num(line, row, "cap_mem", default=0.0) * 1024))
        except (BadRow, ConfigError) as exc:
            mrows.bad(line, str(exc))
    jrows = Rows(folder / "pai_job_table.csv", skip_bad)
    submitted: dict[str, tuple[float, str, str, int]] = {}
    for line, row in jrows.read(columns=PAI_JOB_COLUMNS):
        try:
            start = jrows.num(line, row, "start_time", default=math.nan)
            if math.isnan(start):
                jrows.exclude("no_submit_time")
                continue
            submitted[row["job_name"]] = (start, row["user"], row["status"], line)
        except BadRow as exc:
            jrows.bad(line, str(exc))
    trows = Rows(folder / "pai_task_table.csv", skip_bad)
    agg: dict[str, list] = {}
    for line, row in trows.read(columns=PAI_TASK_COLUMNS):
        try:
            inst = trows.num(line, row, "inst_num", default=1.0)
            gpu = trows.num(line, row, "plan_gpu", default=0.0)
            start = trows.num(line, row, "start_time", default=math.nan)
            end = trows.num(line, row, "end_time", default=math.nan)
            cpu = trows.num(line, row, "plan_cpu", default=0.0)
            mem = trows.num(line, row, "plan_mem", default=0.0)
        except BadRow as exc:
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
            jobs.append(Job(job_id=name, arrival_s=arrival, duration_s=end - start, num_gpus=gpus_demand(gpus),
                            gpu_models=tuple(sorted(models)), cpus=cpus, memory_mib=mem, user=user, status=status))
        except (BadRow, ConfigError) as exc:
            jrows.bad(line, f"job {name!r} (summed over its tasks): {exc}")
    trows.skipped += mrows.skipped + jrows.skipped
    for r in (mrows, jrows):
        for k, v in r.excluded.items():
            trows.excluded[k] = trows.excluded.get(k, 0) + v
    return finish("pai-2020", jobs, nodes, trows)
