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


def short_name(op: str) -> str:
    """``MapBatches(OcrPages)`` -> ``OcrPages``; ``ReadFiles->MapBatches(parse)`` -> ``parse``."""
    last = op.split("->")[-1]
    return last[last.find("(") + 1:last.rfind(")")] if "(" in last and last.endswith(")") else last


def _title(record: RunRecord) -> str:
    from trident.report.record import summarize

    s = summarize(record)
    title = f"trident run: policy {record.policy}"
    if "wall_s" in s:
        title += f", {s['wall_s']:.0f} s"
        if s.get("rows") is not None:
            title += f", {s['rows']} rows ({s['throughput_rows_per_s']:.3g} rows/s)" if "throughput_rows_per_s" in s \
                else f", {s['rows']} rows"
    n = s["reconfigurations"]
    return title + f", {n} reconfiguration{'' if n == 1 else 's'}"


def plot_run(record: RunRecord, path: str) -> None:
    """Write a three-panel PNG to ``path`` (matplotlib, Agg backend): throughput, replicas and
    worker heap per operator over time, the memory limit, and when trident reconfigured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = series(record)
    fig, axes = plt.subplots(3, 1, figsize=(10, 8.5), sharex=True)
    for name, d in data.items():
        label = short_name(name.split(":", 1)[-1]) if len(record.executions) == 1 else name
        label = label if len(label) <= 40 else label[:39] + "~"
        axes[0].plot(d["t_s"], d["rows_per_s"], label=label)
        axes[1].step(d["t_s"], d["replicas"], where="post", label=label)
        axes[2].plot(d["t_s"], d["rss_mib"], label=label)
    limit = record.config.get("memory_limit_bytes")
    if limit:
        axes[2].axhline(limit / 2**20, color="red", ls="--", lw=1, label="memory limit")
    marked = False
    for e in record.executions:
        for a in e.actions:
            if a.applied and a.kind in ("pool_target", "task_cap", "rollout_started"):
                for ax in axes:
                    ax.axvline(e.started_at_s + a.time_s, color="grey", lw=0.6, ls=":",
                               label=None if marked or ax is not axes[1] else "reconfiguration")
                marked = True
    axes[0].set_title("throughput per operator")
    axes[0].set_ylabel("rows out / s")
    axes[1].set_title("replicas per operator (running tasks for uncapped task operators)")
    axes[1].set_ylabel("replicas")
    axes[2].set_title("worker heap memory per operator (all its replicas)")
    axes[2].set_ylabel("MiB")
    axes[2].set_xlabel("time since the run began [s]")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.suptitle(_title(record))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
