"""Scenario suite: stationary, regime-shift, long-shift, memory-bound, two accelerator types and batch-size
sensitive pipelines under the user's static setup, the best static setup in hindsight (``tuned``), Ray
Data's autoscaler, DS2 and trident, side by side on one ``ray.cluster_utils.Cluster``, with the work
bound. Calibrated stand-ins on
logical GPUs. Writes ``scenario_suite-<name>.json`` per scenario and ``scenario_suite.png``.

    python benchmarks/scenario_suite.py                      # every scenario at full length
    python benchmarks/scenario_suite.py --scale 0.25 --scenario regime-shift two-types
    python benchmarks/scenario_suite.py --scenario two-types --policies ray trident --repeat 3
"""
import argparse
import sys

from harness.suite import POLICIES, run_suite, scenarios

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", nargs="+", default=list(scenarios()), choices=list(scenarios()),
                        help="scenarios to run (default: all)")
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=list(POLICIES),
                        help="policies to compare (default: all)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies each scenario's rows (default 1)")
    parser.add_argument("--out", default="benchmarks/results", help="results folder (default benchmarks/results)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of the policies in turn per scenario; ratios within a round, medians over them "
                             "(default 1)")
    parser.add_argument("--interval-s", type=float, default=1.0, help="trident's snapshot interval (default 1 s)")
    args = parser.parse_args()
    if args.scale <= 0:
        parser.error("--scale must be > 0")
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    for path in run_suite(names=tuple(args.scenario), policies=tuple(args.policies), scale=args.scale,
                          out_dir=args.out, interval_s=args.interval_s, repeat=args.repeat):
        print("wrote", path)
    sys.exit(0)
