"""Every plan is a prediction: what each plan expected each operator to put out (rows/s), beside
what the operator put out once the plan's targets were reached, until the next plan.

A plan whose pool targets were never all reached (or its rollout finished) before the next plan
(or the end) is not measured; nor is an operator that completed inside the window. A plan
predicts for the data it was made on: its window also ends where the policy saw an operator's
data change (a decision with ``regime_changes``). The error of a plan is ``|predicted / measured
- 1|`` of the last operator it predicted, the pipeline's output (what the operators before it put
out also fills the queues between them).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

REACHED = ("target_reached", "rollout_finished")
"""Actions that say a pool stands where a plan put it."""
MIN_WINDOW_S = 5.0
"""A plan whose measured window is shorter than this (seconds, the policy's rate window) is not
measured: right after a start the queues between operators fill, and a short window reads that."""


@dataclass(frozen=True)
class PlanCheck:
    """One plan's prediction and what came out."""

    time_s: float
    reached_s: float
    until_s: float
    predicted_rows_per_s: tuple[tuple[str, float], ...]
    measured_rows_per_s: tuple[tuple[str, float], ...]

    @property
    def output(self) -> tuple[str, float, float] | None:
        """(operator, predicted, measured rows/s) of the last operator both name."""
        measured = dict(self.measured_rows_per_s)
        last = [(n, p) for n, p in self.predicted_rows_per_s if n in measured]
        return (last[-1][0], last[-1][1], measured[last[-1][0]]) if last else None

    @property
    def error(self) -> float | None:
        out = self.output
        return abs(out[1] / out[2] - 1.0) if out is not None and out[2] > 0 else None


def plan_checks(execution: Any, *, min_window_s: float = MIN_WINDOW_S) -> list[PlanCheck]:
    """The measured plans of one :class:`~trident.report.record.ExecutionRecord`."""
    plans = [d for d in execution.decisions if d.plan is not None]
    end_s = execution.ended_at_s if execution.ended_at_s is not None else (
        execution.snapshots[-1].time_s if execution.snapshots else 0.0)
    actors = {o.name for s in execution.snapshots[-1:] for o in s.operators if o.config.kind == "actor"}
    out = []
    for i, d in enumerate(plans):
        if not d.predicted_rows_per_s:
            continue
        until = min([plans[i + 1].time_s if i + 1 < len(plans) else end_s]
                    + [c.time_s for c in execution.decisions if c.regime_changes and c.time_s > d.time_s])
        pools = {t.name for t in d.plan.targets if t.replicas is not None and t.name in actors}
        reached = []
        for name in pools:
            hits = [a.time_s for a in execution.actions
                    if a.operator == name and a.kind in REACHED and d.time_s <= a.time_s <= until]
            if not hits:
                break
            reached.append(min(hits))
        else:
            start = max(reached, default=d.time_s)
            measured = _rates(execution.snapshots, start, until, [n for n, _ in d.predicted_rows_per_s],
                              min_window_s)
            if measured:
                out.append(PlanCheck(time_s=d.time_s, reached_s=start, until_s=until,
                                     predicted_rows_per_s=d.predicted_rows_per_s,
                                     measured_rows_per_s=tuple(sorted(measured.items()))))
    return out


def _rates(snapshots, start_s: float, until_s: float, names: list[str], min_window_s: float) -> dict[str, float]:
    window = []
    for s in snapshots:  # up to the first snapshot in which one of the operators has finished
        if start_s <= s.time_s <= until_s:
            if any(o.completed for o in s.operators if o.name in names):
                break
            window.append(s)
    if len(window) < 2 or window[-1].time_s - window[0].time_s < min_window_s:
        return {}
    first, last = window[0], window[-1]
    out = {}
    ops_a, ops_b = {o.name: o for o in first.operators}, {o.name: o for o in last.operators}
    for name in names:
        a, b = ops_a.get(name), ops_b.get(name)
        if a is None or b is None:
            continue
        out[name] = (b.rows_out_total - a.rows_out_total) / (last.time_s - first.time_s)
    return out


def prediction_error(checks: list[PlanCheck]) -> float | None:
    """Median over measured plans of each plan's error (``None`` when no plan was measured)."""
    errs = [c.error for c in checks if c.error is not None]
    return statistics.median(errs) if errs else None
