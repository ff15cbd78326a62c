"""``trident simulate``: replay a GPU-cluster trace through job-layer policies.

Examples::

    trident simulate --trace alibaba-2023 --policy fifo
    trident simulate --trace philly-gavel --load 4 --compare fifo,sjf,srtf/eager,tiresias/eager,gavel
    trident simulate --trace helios:/data/helios/cluster_log.csv --policy tiresias --preemption eager

The results (a JSON table and a PNG plot) are written to --out (default:
./trident-results/); their paths are printed.
"""
from __future__ import annotations

import argparse
import sys

from trident.core.cli_args import integer, number, output_dir, silence_solver_banner
from trident.core.errors import ConfigError

DEFAULT_OUT = "trident-results"

_COLUMNS = [("policy", "policy", "{}"), ("avg_jct_s", "avg JCT s", "{:.0f}"), ("p50_jct_s", "p50 JCT s", "{:.0f}"),
            ("p99_jct_s", "p99 JCT s", "{:.0f}"), ("avg_queue_s", "avg queue s", "{:.0f}"),
            ("bounded_slowdown", "bsld", "{:.2f}"), ("gpu_util_pct", "util %", "{:.1f}"),
            ("makespan_s", "makespan s", "{:.0f}"), ("preemptions", "preempt", "{}"),
            ("futile_preemptions", "futile", "{}"), ("wasted_gpu_pct", "wasted %", "{:.2f}"),
            ("wall_s", "wall s", "{:.1f}")]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", default="alibaba-2023",
                        help="KIND[:PATH]; kinds: alibaba-2023, philly-gavel, pollux, tiresias (samples ship; "
                             "PATH optional), philly, helios, pai-2020 (PATH required)")
    parser.add_argument("--policy", default="fifo", help="job policy (e.g. fifo, sjf, srtf, tiresias, gavel)")
    parser.add_argument("--preemption", default="none", help="preemptor name or 'none'")
    parser.add_argument("--placer", default=None, help="placer (default: the policy's preferred one)")
    parser.add_argument("--compare", default=None,
                        help="comma-separated POLICY[/PREEMPTOR[/PLACER]] entries run side by side; "
                             "writes JSON and PNG under --out")
    parser.add_argument("--seed", type=integer(0), default=0, help="random seed (setup times, resampling)")
    parser.add_argument("--load", type=number(above=0), default=1.0,
                        help="arrival-rate multiplier (2 = twice as fast)")
    parser.add_argument("--cluster-fraction", type=number(above=0, at_most=1), default=1.0,
                        help="keep this fraction of each GPU model's nodes (more contention)")
    parser.add_argument("--jobs", type=integer(0), default=0, help="resample the trace to this many jobs (0 = as is)")
    parser.add_argument("--setup", choices=("lognormal", "fixed", "none"), default="lognormal",
                        help="distribution of a job's setup time per (re)start")
    parser.add_argument("--setup-median-s", type=number(at_least=0), default=300.0, help="median setup time, s")
    parser.add_argument("--setup-p95-s", type=number(at_least=0), default=1500.0,
                        help="95th percentile of the setup time, s (lognormal)")
    parser.add_argument("--restore-s", type=number(at_least=0), default=30.0,
                        help="extra setup after a preemption, s")
    parser.add_argument("--skip-bad", action="store_true", help="skip and count malformed trace rows")
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help="folder the results (JSON table, PNG plot) are written to")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--experiment", choices=("jobs", "allocation"), default="jobs",
                        help="jobs: replay jobs through policies; allocation: FGD's GPU allocation-ratio "
                             "experiment (--trace alibaba-fgd:PODS.csv, --placer fgd,best-fit,...)")
    parser.add_argument("--seeds", default="42-51", help="allocation experiment: seeds, LO-HI or a list")
    parser.add_argument("--nodes", default=None, help="allocation experiment: node list CSV "
                                                      "(default: the one beside the pod list)")


def _entries(args: argparse.Namespace) -> list:
    """The contenders, every name checked against the registries."""
    import trident.jobs  # noqa: F401  (registers the built-in plug-ins)
    from trident.jobs.base import JOB_POLICIES, PLACERS, PREEMPTORS
    from trident.sim.compare import Entry

    if args.compare is not None:
        texts = args.compare.split(",")
        if not all(t.strip() for t in texts):
            raise ConfigError("--compare", args.compare, "comma-separated POLICY[/PREEMPTOR[/PLACER]] entries, "
                                                         "none empty")
        entries = [Entry.parse(t) for t in texts]
        if args.placer:
            entries = [Entry(e.policy, e.preemptor, e.placer or args.placer) for e in entries]
    else:
        entries = [Entry(args.policy, None if args.preemption == "none" else args.preemption, args.placer)]
    for e in entries:
        JOB_POLICIES.get(e.policy)
        if e.preemptor:
            PREEMPTORS.get(e.preemptor)
        if e.placer:
            PLACERS.get(e.placer)
    return entries


def _table(rows: list[dict]) -> str:
    cells = [[head for _, head, _ in _COLUMNS]]
    for r in rows:
        cells.append([fmt.format(r[key]) if key in r else "-" for key, _, fmt in _COLUMNS])
    widths = [max(len(c[i]) for c in cells) for i in range(len(_COLUMNS))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in cells]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    if getattr(args, "experiment", "jobs") == "allocation":
        from trident.sim.allocation_report import cli_main
        return cli_main(args)
    from trident.sim.compare import Entry, compare, result_document, write
    from trident.sim.engine import EngineConfig, SetupModel
    from trident.sim.traces import load_trace, resample, scale_cluster, scale_load

    entries = _entries(args)
    if args.setup == "lognormal" and not args.setup_p95_s > args.setup_median_s > 0:
        raise ConfigError("--setup-median-s/--setup-p95-s", (args.setup_median_s, args.setup_p95_s),
                          "0 < median < p95 for --setup lognormal")
    trace = load_trace(args.trace, skip_bad=args.skip_bad)
    jobs = resample(trace, args.jobs, seed=args.seed) if args.jobs else trace.jobs
    jobs = scale_load(jobs, args.load)
    nodes = scale_cluster(trace.nodes, args.cluster_fraction) if args.cluster_fraction != 1 else trace.nodes
    config = EngineConfig(seed=args.seed, restore_s=args.restore_s,
                          setup=SetupModel(kind=args.setup, median_s=args.setup_median_s, p95_s=args.setup_p95_s))
    out = output_dir(args.out, "--out")  # checked before the (long) replay, not after

    def progress_factory(entry: Entry, total: int):
        if args.no_progress:
            return None
        from tqdm import tqdm

        bar = tqdm(total=total, desc=entry.label, unit="job", leave=False, file=sys.stderr)

        def update(done: int, _total: int) -> None:
            bar.update(done - bar.n)
            if done >= _total:
                bar.close()
        return update

    print(f"trace {trace.name}: {len(jobs)} jobs, {len(nodes)} nodes, "
          f"{sum(n.num_gpus for n in nodes)} GPUs; load x{args.load:g}; seed {args.seed}"
          + (f"; skipped {trace.skipped_rows} malformed rows" if trace.skipped_rows else "")
          + (f"; excluded {trace.excluded}" if trace.excluded else ""))
    silence_solver_banner()
    rows, results = compare(entries, nodes, jobs, config, progress_factory=progress_factory)
    print(_table(rows))
    workload = {"name": args.trace, "seed": args.seed, "load": args.load,
                "cluster_fraction": args.cluster_fraction, "jobs": len(jobs),
                "setup": {"kind": args.setup, "median_s": args.setup_median_s, "p95_s": args.setup_p95_s},
                "restore_s": args.restore_s}
    stem = "simulate-" + args.trace.split(":")[0] + f"-load{args.load:g}-seed{args.seed}"
    json_path, png_path = write(result_document(rows, workload=workload), results, out, stem)
    print(f"wrote {json_path} and {png_path}")
    return 0
