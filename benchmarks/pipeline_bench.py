"""Pipeline benchmark: PDF and video curation with regime shifts under static, ray, ds2 and
trident, side by side, with the per-phase oracle. Calibrated mode (stand-ins following curves
measured from the real models; logical GPUs). Same as ``trident bench``.

    python benchmarks/pipeline_bench.py --scale 0.5
"""
import argparse
import sys

from trident.demos import bench_cli

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench_cli.add_arguments(parser)
    sys.exit(bench_cli.main(parser.parse_args()))
