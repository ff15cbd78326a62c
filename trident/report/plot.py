"""A run record as a PNG: throughput, replicas and worker memory per operator over time."""
from __future__ import annotations

from trident.report.record import RunRecord


def series(record: RunRecord) -> dict[str, dict[str, list[float]]]:
    """Per operator: ``t_s`` (seconds since the run began), ``rows_per_s``, ``replicas``, ``rss_mib``."""
    out: dict[str, dict[str, list[float]]] = {}
    for e in record.executions:
        for s in e.snapshots:
            for op in s.operators:
                if op.config.kind == "other":
                    continue
                key = op.name if len(record.executions) == 1 else f"{e.execution_id}:{op.name}"
                d = out.setdefault(key, {"t_s": [], "rows_per_s": [], "replicas": [], "rss_mib": []})
                d["t_s"].append(e.started_at_s + s.time_s)
                d["rows_per_s"].append(op.rows_out_per_s)
                d["replicas"].append(float(op.config.replicas) if op.config.replicas is not None
                                     else float(op.tasks_running))
                d["rss_mib"].append(op.heap_rss_bytes / 2**20 if op.heap_rss_bytes is not None else float("nan"))
    return out


def plot_run(record: RunRecord, path: str) -> None:
    """Write a three-panel PNG to ``path`` (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = series(record)
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    for name, d in data.items():
        label = name if len(name) <= 40 else name[:39] + "~"
        axes[0].plot(d["t_s"], d["rows_per_s"], label=label)
        axes[1].step(d["t_s"], d["replicas"], where="post", label=label)
        axes[2].plot(d["t_s"], d["rss_mib"], label=label)
    for e in record.executions:
        for a in e.actions:
            if a.applied and a.kind in ("pool_target", "task_cap", "rollout_started"):
                for ax in axes:
                    ax.axvline(e.started_at_s + a.time_s, color="grey", lw=0.5, ls=":")
    axes[0].set_ylabel("rows out / s")
    axes[1].set_ylabel("replicas (tasks running\nfor uncapped task ops)")
    axes[2].set_ylabel("worker memory [MiB]")
    axes[2].set_xlabel("time since the run began [s]")
    axes[0].set_title(f"trident run, policy {record.policy} (dotted: reconfigurations)")
    if data:
        axes[0].legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
