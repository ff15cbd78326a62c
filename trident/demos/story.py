"""What a demo prints after its runs: the side-by-side table and what trident changed and why.

Pure: built from :class:`~trident.report.record.RunRecord` s (or saved run JSON), no Ray.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from trident.report.plot import short_name
from trident.report.record import RunRecord, summarize

CHANGE_KINDS = ("plan", "replan", "tune")
"""Decision kinds told one by one; the inner loop's many small moves are counted instead."""
HELD = re.compile(r"^inner loop: (?P<pool>.+) held at (?P<n>\d+): .*\((?P<want>\d+) wanted; (?P<why>.+)\)$")
"""A decision's note that the inner loop held a pool below what Ray's rule asked (``inner.inner_targets``)."""


@dataclass(frozen=True)
class RunFigures:
    """One run's figures for the side-by-side table (units in the names)."""

    label: str
    wall_s: float
    rows: int
    failed_tasks: int
    peak_heap_mib: float | None
    reconfigurations: int
    oom_kills: int | None = None
    """Processes the kernel killed over the run's memory cgroup (``None``: no cgroup)."""

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.wall_s if self.wall_s > 0 else 0.0


def figures(label: str, record: RunRecord, *, wall_s: float, rows: int, oom_kills: int | None = None) -> RunFigures:
    """``wall_s`` and ``rows`` as the demo measured them (pipeline wall time, rows written);
    ``oom_kills`` as its memory cgroup counted them."""
    s = summarize(record)
    peaks = s["peak_heap_rss_per_replica_bytes"].values()
    return RunFigures(label=label, wall_s=wall_s, rows=rows, failed_tasks=sum(s["failed_tasks"].values()),
                      peak_heap_mib=max(peaks) / 2**20 if peaks else None, reconfigurations=s["reconfigurations"],
                      oom_kills=oom_kills)


def side_by_side(runs: list[RunFigures], *, unit: str = "rows") -> str:
    """A small table, one column per run, and how much faster the last run was than the first
    (``speedup``: the first's wall time over the last's, and the last's rows/s over the first's;
    above 1 the last run was faster)."""
    heads = [""] + [r.label for r in runs]
    lines = [
        ["wall time"] + [f"{r.wall_s:.1f} s" for r in runs],
        [f"{unit}/s"] + [f"{r.rows_per_s:.2f}" for r in runs],
        ["tasks failed (as Ray Data counts)"] + [str(r.failed_tasks) for r in runs],
        ["peak heap per replica"] + [f"{r.peak_heap_mib:.0f} MiB" if r.peak_heap_mib else "-" for r in runs],
        ["reconfigurations"] + [str(r.reconfigurations) for r in runs],
    ]
    if any(r.oom_kills is not None for r in runs):
        lines.insert(3, ["processes OOM-killed (kernel)"] + [str(r.oom_kills) if r.oom_kills is not None else "-"
                                                             for r in runs])
    if len(runs) > 1 and runs[0].rows_per_s > 0:
        heads.append("speedup")
        lines[0].append(f"{runs[0].wall_s / runs[-1].wall_s:.2f}x" if runs[-1].wall_s else "-")
        lines[1].append(f"{runs[-1].rows_per_s / runs[0].rows_per_s:.2f}x")
        for row in lines[2:]:
            row.append("")
    table = [heads] + lines
    widths = [max(len(row[i]) for row in table) for i in range(len(heads))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
                     for row in table)


def _why(reason: str, kind: str) -> str:
    """The first clause of a decision's reason, without its kind prefix, at most ~90 characters."""
    text = reason.split(" | ")[0]
    if text.startswith(kind + ":"):
        text = text[len(kind) + 1:]
    text = text.split("; ")[0].strip()
    return text if len(text) <= 90 else text[:87] + "..."


def changes(record: RunRecord, *, limit: int = 8) -> list[str]:
    """What trident changed and why, one line each (at most ``limit``): regime changes, plans,
    re-plans and batch-size trials with their targets, what a plan revisited after a regime
    change kept, and a count of the inner loop's moves."""
    lines: list[str] = []
    inner = 0
    for e in record.executions:
        times = [s.time_s for s in e.snapshots]
        replicas: dict[str, int | None] = {}
        revisiting = False
        for d in e.decisions:
            t = e.started_at_s + d.time_s
            at = bisect.bisect_right(times, d.time_s + 1e-9) - 1  # the pools as they were (Ray's rule moves them too)
            replicas.update({op.name: op.config.replicas for op in e.snapshots[max(at, 0)].operators} if times else {})
            for m in filter(None, map(HELD.match, d.notes)):
                lines.append(f"{t:6.1f} s  held: {short_name(m['pool'])} at {m['n']} where Ray's rule asked "
                             f"{m['want']} ({m['why']})")
            for op in d.regime_changes:
                lines.append(f"{t:6.1f} s  data changed at {short_name(op)}: new regime, plan revisited")
                revisiting = True
            if d.kind == "keep" and revisiting:  # the revisited plan's outcome: nothing worth changing
                kept = ", ".join(f"{short_name(n)} x{r}" for n, r in replicas.items() if r is not None)
                lines.append(f"{t:6.1f} s  keep: {kept or 'targets'} kept: {_why(d.reason, d.kind)}")
            if d.kind in CHANGE_KINDS or d.kind == "keep":
                revisiting = False
            if d.plan is None:
                continue
            if d.kind not in CHANGE_KINDS:
                inner += d.kind == "inner"
                for tgt in d.plan.targets:
                    replicas[tgt.name] = tgt.replicas if tgt.replicas is not None else replicas.get(tgt.name)
                continue
            moves = []
            for tgt in d.plan.targets:
                if tgt.replicas is not None:
                    moves.append(f"{short_name(tgt.name)} {replicas.get(tgt.name) or '?'}->{tgt.replicas}")
                    replicas[tgt.name] = tgt.replicas
                if tgt.batch_size is not None:
                    moves.append(f"{short_name(tgt.name)} batch {tgt.batch_size}")
            lines.append(f"{t:6.1f} s  {d.kind}: {', '.join(moves) or 'targets kept'} ({_why(d.reason, d.kind)})")
    if len(lines) > limit:
        hidden = len(lines) - (limit - 1)
        lines = lines[:limit - 1] + [f"          ... and {hidden} more (run.report() lists every decision)"]
    if inner:
        lines.append(f"          inner loop: {inner} pool moves by Ray's reactive rule within the planner's bounds")
    if not lines:
        lines.append("          no change: trident kept the configuration (nothing it measured was worth a change)")
    return lines


def meanwhile(record: RunRecord, kill_times_s: list[float] | None, *, limit: int = 6) -> list[str]:
    """What another policy's run did, one line each in time order: its actor pools' sizes as they
    changed (at most ``limit`` moves) and the processes the kernel killed (``kill_times_s``:
    seconds since the run began, one per kill; ``None``: not counted)."""
    moves: list[tuple[float, str]] = []
    for e in record.executions:
        sizes: dict[str, int] = {}
        for snap in e.snapshots:
            for op in snap.operators:
                n = op.config.replicas
                if op.config.kind != "actor" or n is None or op.completed or sizes.get(op.name) == n:
                    continue
                if op.name in sizes:
                    moves.append((e.started_at_s + snap.time_s, f"{short_name(op.name)} {sizes[op.name]}->{n}"))
                sizes[op.name] = n
    told = moves[:limit] + ([(moves[limit][0], f"... and {len(moves) - limit} more pool moves")]
                            if len(moves) > limit else [])
    if kill_times_s:
        told.append((min(kill_times_s), kills(kill_times_s)[0][10:]))
    lines = [f"{t:6.1f} s  {text}" for t, text in sorted(told, key=lambda x: x[0])]
    if not moves:
        lines.insert(0, "          no pool moved")
    return lines + (kills(kill_times_s) if not kill_times_s else [])


def kills(kill_times_s: list[float] | None) -> list[str]:
    """One line on the processes the kernel killed in a run (``kill_times_s``: seconds since the
    run began, one per kill), none when they were not counted."""
    if kill_times_s is None:
        return []
    if not kill_times_s:
        return ["          no process OOM-killed"]
    n, first = len(kill_times_s), min(kill_times_s)
    return [f"{first:6.1f} s  {'the first of ' if n > 1 else ''}{n} process{'es' if n > 1 else ''} OOM-killed "
            "by the kernel (Ray ran their tasks again)"]
