"""Pipeline benchmark: PDF and video curation with regime shifts under static, ray, ds2 and
trident, side by side, with the per-phase oracle. Calibrated mode (stand-ins following curves
measured from the real models, :mod:`harness.calibration`; logical GPUs). Writes
``pipeline_bench-<workload>.json`` and ``.png`` per workload.

    python benchmarks/pipeline_bench.py --scale 0.5
"""
from __future__ import annotations

import argparse
import sys

from harness.bench import POLICIES, Cluster, run_bench
from trident.autoscaler.config import MIN_INTERVAL_S
from trident.core.cli_args import Parser, integer, memory_size, number, output_dir
from trident.core.units import parse_memory_bytes


def arguments() -> argparse.ArgumentParser:
    parser = Parser(prog="pipeline_bench.py", description=__doc__)
    parser.add_argument("--out", default="benchmarks/results", help="results folder")
    parser.add_argument("--workload", nargs="+", default=["pdf-regimes", "video-regimes"],
                        choices=["pdf-regimes", "video-regimes"], help="workloads to run")
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=list(POLICIES),
                        help="policies to compare")
    parser.add_argument("--scale", type=number(above=0), default=1.0, help="multiplies every phase's row count")
    parser.add_argument("--no-oracle", action="store_true", help="skip the per-phase static sweep")
    parser.add_argument("--cpus", type=integer(1), default=16, help="logical CPUs")
    parser.add_argument("--gpus", type=integer(1), default=8, help="logical GPUs")
    parser.add_argument("--memory-limit", type=memory_size, default="5GiB",
                        help="model replicas' summed memory limit")
    parser.add_argument("--time-scale", type=number(above=0), default=0.5,
                        help="fraction of the calibrated time a stand-in sleeps (accelerator speed-up)")
    parser.add_argument("--memory-scale", type=number(above=0), default=1.0,
                        help="fraction of the calibrated memory a stand-in allocates")
    parser.add_argument("--interval-s", type=number(at_least=MIN_INTERVAL_S), default=1.0,
                        help="trident's snapshot interval, s")
    return parser


def main(args: argparse.Namespace) -> int:
    output_dir(args.out, "--out")
    cluster = Cluster(cpus=args.cpus, gpus=args.gpus, time_scale=args.time_scale, memory_scale=args.memory_scale,
                      memory_limit_bytes=parse_memory_bytes(args.memory_limit, "memory_limit"))
    print(f"pipeline benchmark, calibrated mode: {args.cpus} logical CPUs, {args.gpus} logical GPUs, "
          f"time x{args.time_scale}, memory x{args.memory_scale}, limit {args.memory_limit}")
    for path in run_bench(out_dir=args.out, scale=args.scale, policies=tuple(args.policies),
                          names=tuple(args.workload), with_oracle=not args.no_oracle, cluster=cluster,
                          interval_s=args.interval_s):
        print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main(arguments().parse_args()))
