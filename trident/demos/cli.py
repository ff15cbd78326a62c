"""``trident demo pdf|video``: a curation pipeline on an embedded local Ray (logical GPUs)
under ``trident.autoscale``, on input whose mix changes half-way (PDF: text documents, then
scanned ones that need OCR; video: SD clips, then HD ones), so that trident re-plans while
it runs. ``--compare ray`` then runs stock Ray Data's autoscaler on the same input and
prints both side by side, with what trident changed and why.

Examples::

    trident demo pdf --compare ray
    trident demo video --small --out /tmp/demo
"""
from __future__ import annotations

import argparse
import shutil
import sys
from contextlib import nullcontext
from pathlib import Path

from trident.core.cli_args import integer, memory_size, output_dir


def autoscale_policy(text: str) -> str:
    """An argument type: a registered ``trident.autoscale`` policy name."""
    from trident.autoscaler.config import valid_policy_names

    names = valid_policy_names()
    if text not in names:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(names)}")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", choices=("pdf", "video"), help="which curation example to run")
    parser.add_argument("--compare", type=autoscale_policy, default=None, metavar="POLICY",
                        help="also run this policy (e.g. ray: stock Ray Data) on the same input, after the first, and "
                             "print both side by side (default: none, one run)")
    parser.add_argument("--out", default=None,
                        help="output folder (default: ./trident-demo-pdf or ./trident-demo-video)")
    parser.add_argument("--small", action="store_true", help="a small input: a quick run (tests use it)")
    parser.add_argument("--verbose", action="store_true", help="show Ray's own log lines and progress bars")
    parser.add_argument("--policy", type=autoscale_policy, default="trident",
                        help="autoscaling policy: trident, ds2, ray or static")
    parser.add_argument("--memory-limit", type=memory_size, default=None,
                        help="memory Ray may use, e.g. 3GiB: where a memory cgroup can be made (Linux, as "
                             "root), Ray's processes run under it in every run; trident plans within it "
                             "(default: no limit)")
    parser.add_argument("--size", type=integer(1), default=None,
                        help="scanned documents (pdf; twice as many text ones) or clips (video) "
                             "(default: the --small or full size)")
    parser.add_argument("--seed", type=integer(0), default=0, help="seed of the generated input")
    parser.add_argument("--cpus", type=integer(3), default=8,
                        help="logical CPUs of the embedded Ray (at least 3: one per model actor and one for "
                             "the parsing tasks)")
    parser.add_argument("--gpus", type=integer(1), default=2, help="logical GPUs of the embedded Ray")
    parser.add_argument("--no-samples", action="store_true", help="pdf: use generated documents only")


def _inputs(args: argparse.Namespace, out: Path):
    from trident.demos.runner import PDF_SIZES, SAMPLES_PDF_DIR, VIDEO_SIZES, pdf_inputs, video_inputs

    size = "small" if args.small else "full"
    if args.workload == "pdf":
        sizes = dict(PDF_SIZES[size])
        if args.size:
            sizes.update(scanned_docs=args.size, text_docs=2 * args.size)
        paths = pdf_inputs(out / "input", seed=args.seed, samples_dir=None if args.no_samples else SAMPLES_PDF_DIR,
                           **sizes)
        what = (f"{len(paths) - sizes['scanned_docs']} text PDFs, then {sizes['scanned_docs']} scanned ones "
                f"({sizes['scanned_pages']} image-only pages each)")
        return paths, None, what
    clips = args.size or VIDEO_SIZES[size]["clips"]
    paths, truth = video_inputs(out / "input", clips=clips, seed=args.seed)
    return paths, truth, f"{clips} clips: {max(1, clips // 2)} at SD, then {clips - max(1, clips // 2)} at HD"


def _print_table(result) -> None:
    key = "path" if result.kind == "pdf" else "clip"
    extra = ["n_pages", "ocr_pages", "chars"] if result.kind == "pdf" else ["n_scenes", "cut_frames", "text"]
    table = result.table[[key, "status", "reason"] + extra].copy()
    table[key] = table[key].map(lambda p: Path(p).name)
    print(table.to_string(index=False, max_colwidth=60))


def _run(args: argparse.Namespace, policy: str, paths, truth, out: Path, progress):
    from trident.demos.runner import run_pdf, run_video

    # side by side, both runs start blind as a first run does (trident's history of earlier runs
    # would give it a start stock Ray never has); alone, the demo keeps and uses it
    kw = dict(policy=policy, memory_limit=args.memory_limit, progress=progress, history=not args.compare)
    if args.workload == "pdf":
        return run_pdf(paths, out, **kw)
    return run_video(paths, truth, out, **kw)


def main(args: argparse.Namespace) -> int:
    from trident.core.units import parse_memory_bytes
    from trident.demos.cgroup import KillClock, limit_for_ray, release
    from trident.demos.runner import quiet_ray, start_ray
    from trident.demos.story import changes, figures, kills, meanwhile, side_by_side

    out = Path(output_dir(args.out or f"trident-demo-{args.workload}", "--out"))
    policies = [args.policy] + ([args.compare] if args.compare and args.compare != args.policy else [])
    for sub in ("input", "warmup", *policies):  # a previous demo's files here would be read again
        shutil.rmtree(out / sub, ignore_errors=True)
    paths, truth, what = _inputs(args, out)
    print(f"trident demo {args.workload}: {what}")
    print(f"runs: {' then '.join(policies)} (the same input"
          + ("; no history of earlier runs: both start blind" if args.compare else "") + f"); output in {out}/")
    cgroup, note = limit_for_ray(parse_memory_bytes(args.memory_limit, "--memory-limit"))
    if note:
        print(note)
    results, kills_s = {}, {}
    ray_log = out / "ray.log"
    with nullcontext(sys.stderr) if args.verbose else quiet_ray(ray_log) as terminal:
        if cgroup is not None:
            cgroup.join()  # Ray's daemons, and every worker they start, inherit the cgroup
        started = False
        try:
            start_ray(num_cpus=args.cpus, num_gpus=args.gpus, verbose=args.verbose)
            started = True
        finally:
            if cgroup is not None:
                cgroup.leave()  # the driver reads the results outside it
                if not started:
                    release(cgroup)
        try:
            if len(policies) > 1:  # the first timed run must not pay for cold caches alone
                # untimed, the whole input: Ray's worker processes, as many as the timed runs use,
                # the models' files and trident's controller (kept for the next run). A warm-up on
                # two inputs left the first timed run ~10% slower than the second on --small.
                print("warm-up (untimed): the whole input under stock Ray, so both timed runs start equally warm",
                      file=terminal, flush=True)
                _run(args, "ray", paths, truth, out / "warmup", None)
                shutil.rmtree(out / "warmup", ignore_errors=True)
            for policy in policies:
                with KillClock(cgroup) if cgroup is not None else nullcontext() as clock:
                    results[policy] = _run(args, policy, paths, truth, out / policy, terminal)
                kills_s[policy] = clock.times_s if clock is not None else None
        finally:
            import ray

            ray.shutdown()
            if cgroup is not None:
                release(cgroup)
    unit = "pages" if args.workload == "pdf" else "scenes"
    ok = True
    print()
    for policy, result in results.items():
        acc = result.accounting
        ok &= acc.complete
        print(f"{policy}: {acc.inputs} inputs, {acc.processed} processed, {len(acc.skipped)} skipped "
              f"({'; '.join(sorted(set(r.split(':')[0] for r in acc.skipped.values()))) or 'none'}), "
              + ("each exactly once" if acc.complete else
                 f"MISSING {list(acc.missing)}, DUPLICATED {list(acc.duplicated)}")
              + f"; {result.rows} {unit} in {result.out_dir}/")
    if args.verbose:
        _print_table(results[args.policy])
        for note in results[args.policy].notes:
            print(note)
    label = {"ray": "stock Ray Data", "trident": "trident"}
    told = "trident" if "trident" in results else args.policy  # the run whose decisions are told
    rows = [figures(label.get(p, p), results[p].run.record, wall_s=results[p].wall_s, rows=results[p].rows,
                    oom_kills=None if kills_s.get(p) is None else len(kills_s[p]))
            for p in sorted(results, key=lambda p: p == told)]  # the baseline's column first, whichever ran first
    print()
    print(side_by_side(rows, unit=unit))
    main_run = results[told].run
    print(f"\nwhat {told} changed and why (seconds since its run began):")
    print("\n".join(changes(main_run.record) + kills(kills_s.get(told))))
    for policy in (p for p in policies if p != told):
        print(f"\nwhat {label.get(policy, policy)} did, for comparison:")
        print("\n".join(meanwhile(results[policy].run.record, kills_s.get(policy))))
    for policy, result in results.items():
        plot = Path(result.out_dir) / "run.png"
        result.run.plot(str(plot))
        result.run.to_json(str(Path(result.out_dir) / "run.json"))
        print(f"plot: {plot}")
    for warning in dict.fromkeys(w for r in results.values() for w in r.run.record.warnings):
        print(f"warning: {warning}")
    if args.verbose:
        main_run.report()
    else:
        print(f"every decision with its reason: {Path(results[args.policy].out_dir) / 'run.json'} "
              f"(or --verbose for the full report); Ray's log lines: {ray_log}")
    return 0 if ok else 1
