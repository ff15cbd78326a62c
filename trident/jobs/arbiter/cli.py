"""``trident status``: the runs sharing a Ray cluster, as its arbiter sees them (read only).

Examples::

    trident status                     # the cluster of RAY_ADDRESS, or the local one
    trident status --address 10.0.0.5:6379
    trident status --json

Prints the cluster's CPUs and GPUs, the arbiter's order and preemption, every run in rank
order (its owner, budget, rows done, rate, predicted time left and why it has that budget)
and the arbiter's last decisions. Exit status 1 when no arbiter runs on the cluster.
"""
from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", default=None, help="the Ray cluster (default: RAY_ADDRESS, else 'auto')")
    parser.add_argument("--json", action="store_true", help="print the arbiter's status as JSON")


def main(args: argparse.Namespace) -> int:
    import os

    import ray

    from trident.jobs.arbiter.actor import find

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address=args.address or os.environ.get("RAY_ADDRESS") or "auto", log_to_driver=False,
             logging_level="ERROR")
    try:
        arbiter = find()
        if arbiter is None:
            print("no trident arbiter runs on this cluster (the first trident.autoscale() starts it)",
                  file=sys.stderr)
            return 1
        status = ray.get(arbiter.status.remote(), timeout=30)
    finally:
        ray.shutdown()
    print(json.dumps(status, indent=1) if args.json else format_status(status))
    return 0


def format_status(status: dict) -> str:
    """The status as a table, like ``ray status``."""
    lines = [f"cluster: {status['cpus']:g} CPUs, {status['gpus']:g} GPUs; order {status['policy']}, "
             f"preemption {status['preemption']}", ""]
    runs = status["runs"]
    if not runs:
        lines.append("no runs")
    else:
        lines.append(f"{'rank':>4}  {'run':24s} {'owner':10s} {'CPUs':>5} {'GPUs':>5} {'rows done':>17} "
                     f"{'rows/s':>7} {'left s':>7}  why")
        for r in runs:
            capped = r["budget_cpus"] is not None or r["budget_gpus"] is not None
            done = "-" if r["rows_total"] is None else f"{r['rows_done'] or 0:,.0f}/{r['rows_total']:,.0f}"
            lines.append(f"{r['rank'] + 1:>4}  {r['run_id'][:24]:24s} {(r['owner'] or '-')[:10]:10s} "
                         f"{_num(r['budget_cpus'], capped):>5} {_num(r['budget_gpus'], capped):>5} {done:>17} "
                         f"{_num(r['rate'], True):>7} {_num(r['remaining_s'], True):>7}  {r['reason']}")
    if status["decisions"]:
        lines += ["", "last decisions:"]
        lines += [f"  {t:10.1f}  {text}" for t, text in status["decisions"][-10:]]
    return "\n".join(lines)


def _num(x: float | None, capped: bool) -> str:
    if x is None:
        return "any" if not capped else "-"
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"
