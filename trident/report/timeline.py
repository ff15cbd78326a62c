"""A run record as text for a terminal: summary, per-operator timeline, every decision with its reason."""
from __future__ import annotations

from trident.report.predictions import plan_checks
from trident.report.record import ExecutionRecord, RunRecord, peak_heap_rss_per_replica, summarize


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return str(n)


def _short(name: str, width: int) -> str:
    return name if len(name) <= width else name[: width - 1] + "~"


def _sampled(items: list, max_rows: int) -> list:
    if len(items) <= max_rows:
        return items
    step = len(items) / max_rows
    picked = [items[int(i * step)] for i in range(max_rows)]
    if picked[-1] is not items[-1]:
        picked[-1] = items[-1]
    return picked


def _history_lines(e: ExecutionRecord, checks: list) -> list[str]:
    """The plans that leaned on earlier runs (:mod:`trident.history`), each with what came out."""
    used = [d for d in e.decisions if d.plan is not None and d.history_runs]
    if not used:
        return []
    by_time = {c.time_s: c for c in checks}
    lines = ["  history (plans made from what earlier runs taught):"]
    for d in used:
        c = by_time.get(d.time_s)
        out = c.output if c is not None else None
        if out is None:
            seen = "not measured (its targets were not all reached before the next plan)"
        else:
            seen = f"predicted {out[1]:.3g} rows/s, measured {out[2]:.3g}"
            seen += f" ({c.error:.0%} off)" if c.error is not None else ""
        lines.append(f"    t={d.time_s:7.1f}s plan #{d.plan.seq} from the history of run {', '.join(d.history_runs)}: "
                     + seen)
    return lines


def format_execution(e: ExecutionRecord, *, max_timeline_rows: int = 30, name_width: int = 28) -> list[str]:
    head = f"execution {e.execution_id} (dataset {e.dataset_id}): {e.status}, mode {e.mode}"
    if e.wall_s is not None:
        head += f", wall {e.wall_s:.2f} s"
    lines = [head + f", trident on the executor thread {e.shim_time_s * 1e3:.0f} ms, "
             f"its controller {sum(d.cpu_s for d in e.decisions) * 1e3:.0f} ms of CPU"]
    if e.snapshots:
        last = e.snapshots[-1]
        peak = peak_heap_rss_per_replica(e.snapshots)
        lines.append(f"  {'operator':<{name_width}} {'kind':<6} {'rows out':>9} {'replicas':>8} {'batch':>6} "
                     f"{'gpus':>5} {'failed':>6} {'peak rss/replica':>16}")
        for op in last.operators:
            c = op.config
            lines.append(f"  {_short(op.name, name_width):<{name_width}} {c.kind:<6} {op.rows_out_total:>9} "
                         f"{'-' if c.replicas is None else c.replicas:>8} {'-' if c.batch_size is None else c.batch_size:>6} "
                         f"{c.num_gpus:>5g} {op.tasks_failed:>6} {_bytes(peak.get(op.name)):>16}")
        ops = [op.name for op in last.operators if op.config.kind != "other"]
        lines.append("  timeline (rows/s, replicas in brackets):")
        lines.append("    " + f"{'t [s]':>7}  " + "  ".join(f"{_short(n, 18):>18}" for n in ops))
        for s in _sampled(e.snapshots, max_timeline_rows):
            cells = []
            for n in ops:
                try:
                    op = s.operator(n)
                except KeyError:
                    cells.append(f"{'':>18}")
                    continue
                r = "-" if op.config.replicas is None else op.config.replicas
                cells.append(f"{op.rows_out_per_s:>12.1f} [{r:>3}]")
            lines.append("    " + f"{s.time_s:>7.1f}  " + "  ".join(cells))
    plans = [d for d in e.decisions if d.plan is not None]
    lines.append(f"  decisions: {len(e.decisions)} ({len(plans)} with a plan)")
    shown = plans if len(e.decisions) > 20 else e.decisions
    for d in shown:
        tag = f"plan #{d.plan.seq}" if d.plan is not None else "keep"
        lines.append(f"    t={d.time_s:7.1f}s {tag}: {d.reason}")
    checks = plan_checks(e)
    lines.extend(_history_lines(e, checks))
    if checks:
        lines.append("  predictions (each plan measured from its targets reached to the next plan):")
        for c in checks:
            if c.output is None:
                continue
            name, predicted, measured = c.output
            lines.append(f"    t={c.time_s:7.1f}s {_short(name, name_width)}: predicted {predicted:.3g} rows/s, "
                         f"measured {measured:.3g} over {c.reached_s:.1f}-{c.until_s:.1f} s"
                         + (f" ({c.error:.0%} off)" if c.error is not None else ""))
    if e.actions:
        lines.append(f"  actions: {len(e.actions)}")
        for a in e.actions:
            flag = "" if a.applied else " (dry run: not applied)"
            lines.append(f"    t={a.time_s:7.1f}s {_short(a.operator, name_width)}: {a.kind} {a.detail}{flag}")
    for ev in e.events:
        lines.append(f"  ! t={ev.time_s:7.1f}s {ev.kind}: {ev.message}")
    return lines


def format_report(record: RunRecord) -> str:
    """The whole run as plain text (fits an 80-120 column terminal)."""
    s = summarize(record)
    head = f"trident run: policy {record.policy}, {s['executions']} execution(s), "
    head += "rows not measured (fused write sink)" if s["rows"] is None else f"{s['rows']} rows"
    if "wall_s" in s:
        head += f", wall {s['wall_s']:.2f} s"
    if "throughput_rows_per_s" in s:
        head += f", {s['throughput_rows_per_s']:.1f} rows/s"
    head += f", {s['reconfigurations']} reconfiguration(s)"
    lines = [head]
    for w in record.warnings:
        lines.append(f"warning: {w}")
    for ev in record.events:
        lines.append(f"! {ev.kind}: {ev.message}")
    for e in record.executions:
        lines.extend(format_execution(e))
    return "\n".join(lines)
