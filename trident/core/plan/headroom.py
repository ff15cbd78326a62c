"""Headroom around a placement whose rate is only a prior.

An operator planned onto a device it never ran on carries a prior rate there (its slowest measured
rate: nothing says it is faster). Sizing the operators around it for that prior leaves them short
when the device turns out faster: on the two-types scenario Embed moved to type A on a prior of
24.5 rows/s per replica (it ran at 48.5 there), and the plan gave Detect 2 of type B's 4 GPUs for
it; B's other two idled for 16 s, until Embed was measured on A and a second plan and cold start
followed. :func:`with_headroom` grows the operators that would limit the plan if every prior
option ran ``upside`` times its prior rate, one replica at a time, in resources the plan leaves
free (every constraint of the problem still holds) and only while the start pays for itself at
that upside. It never removes a replica, so the plan's throughput at the prior rates never drops.
"""
from __future__ import annotations

import dataclasses

from trident.core.plan.placement import (
    TOL,
    Allocation,
    PlacementProblem,
    change_costs,
    throughput_of,
    violations,
)


def with_headroom(problem: PlacementProblem, allocation: Allocation) -> tuple[Allocation, list[str]]:
    """``allocation`` with headroom for its prior options' upside; (allocation, notes)."""
    priors = {(op.name, o.device): o for op in problem.operators for o in op.options if o.upside > 1}
    used = [(o, d) for o, d, _, c in allocation.counts if c > 0 and (o, d) in priors]
    if not used:
        return allocation, []
    hopeful = dataclasses.replace(problem, operators=tuple(
        dataclasses.replace(op, options=tuple(dataclasses.replace(o, rate_rows_per_s=o.rate_rows_per_s * o.upside)
                                              for o in op.options))
        for op in problem.operators))
    up_cost, _ = change_costs(hopeful)
    counts = allocation.as_dict()
    start = dict(counts)
    t = throughput_of(hopeful, allocation)
    while grow := _limiting(hopeful, counts, t):
        trial = dict(counts)
        for k in grow:
            trial[k] += 1
        if violations(problem, Allocation.of(trial)):
            break
        t_trial = throughput_of(hopeful, Allocation.of(trial))
        if t_trial - t <= sum(up_cost.get(k, 0.0) for k in grow) + TOL:
            break
        counts, t = trial, t_trial
    if counts == start:
        return allocation, []
    grown = ", ".join(f"{k[0]} {start[k]} -> {counts[k]}" for k in counts if counts[k] != start[k])
    why = "; ".join(f"{o} on {d}, where it never ran, at up to {priors[(o, d)].upside:.1f}x its prior rate"
                    for o, d in used)
    return Allocation.of(counts), [f"headroom for {why}: {grown}"]


def _limiting(problem: PlacementProblem, counts: dict, t: float) -> list:
    """The key of each operator whose capacity holds the throughput at ``t``; empty when one of them
    has no single key to grow (no replica, or replicas on several devices)."""
    out = []
    for op, f in zip(problem.operators, problem.demand_factors()):
        mine = [k for k, c in counts.items() if k[0] == op.name and c > 0]
        cap = sum(op.option(k[1]).rate_rows_per_s * counts[k] for k in mine) / f
        if cap > t * (1 + TOL) + TOL:
            continue
        if len(mine) != 1:
            return []
        out.append(mine[0])
    return out
