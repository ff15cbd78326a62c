"""``trident demo pdf|video``: a curation example on an embedded local Ray (logical GPUs),
controlled by ``trident.autoscale``; prints the run report and writes the plot."""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from trident.cli_args import autoscale_policy, integer, memory_size, output_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", choices=("pdf", "video"), help="which curation example to run")
    parser.add_argument("--out", default=None, help="output folder (default: a new temporary folder)")
    parser.add_argument("--policy", type=autoscale_policy, default="trident",
                        help="autoscaling policy: trident, ds2, ray or static")
    parser.add_argument("--memory-limit", type=memory_size, default=None,
                        help="memory the pipeline may use, e.g. 8GiB (default: no limit)")
    parser.add_argument("--size", type=integer(1), default=None,
                        help="generated documents (pdf, default 8) or clips (video, default 4)")
    parser.add_argument("--resolution", default="sd", choices=("tiny", "sd", "hd"), help="video frame size")
    parser.add_argument("--seed", type=integer(0), default=0, help="seed of the generated input")
    parser.add_argument("--cpus", type=integer(3), default=8,
                        help="logical CPUs of the embedded Ray (at least 3: one per model actor and one for "
                             "the parsing tasks)")
    parser.add_argument("--gpus", type=integer(1), default=2, help="logical GPUs of the embedded Ray")
    parser.add_argument("--no-samples", action="store_true", help="pdf: use generated documents only")


def _print_table(result) -> None:
    cols = ["status", "reason"]
    key = "path" if result.kind == "pdf" else "clip"
    extra = ["n_pages", "ocr_pages", "chars"] if result.kind == "pdf" else ["n_scenes", "cut_frames", "text"]
    table = result.table[[key] + cols + extra].copy()
    table[key] = table[key].map(lambda p: Path(p).name)
    print(table.to_string(index=False, max_colwidth=60))


def main(args: argparse.Namespace) -> int:
    from trident.demos.runner import SAMPLES_PDF_DIR, run_pdf, run_video, start_ray

    out = Path(output_dir(args.out, "--out") if args.out else tempfile.mkdtemp(prefix=f"trident-demo-{args.workload}-"))
    print(f"trident demo {args.workload}: policy={args.policy}, output in {out}")
    start_ray(num_cpus=args.cpus, num_gpus=args.gpus)
    try:
        if args.workload == "pdf":
            samples = None if args.no_samples else SAMPLES_PDF_DIR
            result = run_pdf(out, docs=args.size or 8, seed=args.seed, samples_dir=samples, policy=args.policy,
                             memory_limit=args.memory_limit)
        else:
            result = run_video(out, clips=args.size or 4, seed=args.seed, resolution=args.resolution,
                               policy=args.policy, memory_limit=args.memory_limit)
    finally:
        import ray

        ray.shutdown()
    print()
    _print_table(result)
    for note in result.notes:
        print(note)
    acc = result.accounting
    print(f"\n{acc.inputs} inputs: {acc.processed} processed, {len(acc.skipped)} skipped"
          + (f"; MISSING {list(acc.missing)}, DUPLICATED {list(acc.duplicated)}" if not acc.complete else "")
          + f"; pipeline wall time {result.wall_s:.1f} s")
    if result.run is not None:
        print()
        result.run.report()
        plot = out / "run.png"
        result.run.plot(str(plot))
        print(f"plot: {plot}")
    return 0 if acc.complete else 1
