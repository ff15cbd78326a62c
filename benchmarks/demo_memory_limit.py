"""The PDF demo's pipeline under a real memory limit: stock Ray Data beside ``trident.autoscale``.

Each policy runs in a process of its own whose Ray (the raylet, the GCS and every worker) starts
inside a Linux memory cgroup of ``--limit`` (:mod:`trident.demos.cgroup`): over it the kernel's
OOM killer ends a process, as on a node or container with that much memory. The driver leaves
the cgroup once Ray is up. Each run: an untimed warm-up on the first and the last input (stock
Ray), then the timed run on the demo's full corpus (``trident demo pdf``'s input, seed 0);
``trident`` gets ``--trident-limit`` as its ``memory_limit`` (default ``--limit``: it counts what
Ray's own processes hold beside its workers and plans them within the rest). A run
still going after ``--timeout-s`` is stopped and reported as not finished, with its OOM kills.

Writes ``<out>.json`` (RESULTS.md shape) and ``<out>.png``. Needs a writable memory cgroup
(v1 or v2; these machines: v1, as root).

    python benchmarks/demo_memory_limit.py --limit 2.75GiB
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def _child(args: argparse.Namespace) -> None:
    """One policy's run, inside the cgroup at ``args.cgroup``; prints one JSON line."""
    from trident.demos.cgroup import MemoryCgroup, find_layout
    from trident.demos.runner import run_pdf, start_ray
    from trident.report.record import summarize

    cg = MemoryCgroup.attach(Path(args.cgroup), layout=find_layout())
    paths = json.loads(Path(args.inputs).read_text())
    cg.join()
    start_ray(num_cpus=args.cpus, num_gpus=args.gpus, verbose=False)
    cg.leave()  # Ray stays in; the driver leaves
    work = Path(args.work)
    run_pdf(paths[:1] + paths[-1:], work / "warmup", policy="ray", history=False)
    cg.reset_peak()
    kills = cg.oom_kills()
    limit = args.trident_limit if args.policy == "trident" else None
    result = run_pdf(paths, work / args.policy, policy=args.policy, memory_limit=limit, history=False)
    record = result.run.record
    summary = summarize(record)
    print(json.dumps({
        "policy": args.policy, "wall_s": round(result.wall_s, 2), "rows": result.rows,
        "throughput_rows_per_s": round(result.rows / result.wall_s, 3),
        "every_input_once": result.accounting.complete, "oom_kills": cg.oom_kills() - kills,
        "cgroup_peak_bytes": cg.peak_bytes(), "failed_tasks": sum(summary["failed_tasks"].values()),
        "reconfigurations": summary["reconfigurations"], "trident_memory_limit": limit,
        "decisions": [f"{d.time_s:.1f} {d.kind}: {d.reason[:200]}" for e in record.executions for d in e.decisions
                      if str(d.kind) not in ("observe", "dwell") and not d.reason.startswith("rollout: waiting")][:20],
    }), flush=True)


def _run(policy: str, args: argparse.Namespace, layout, inputs: Path, work: Path) -> dict:
    from trident.demos.cgroup import MemoryCgroup, release

    cg = MemoryCgroup(args.limit, layout=layout, name=f"trident-bench-{os.getpid()}-{policy}")
    cmd = [sys.executable, __file__, "--child", "--policy", policy, "--cgroup", str(cg.path), "--inputs", str(inputs),
           "--work", str(work), "--cpus", str(args.cpus), "--gpus", str(args.gpus)]
    if args.trident_limit:
        cmd += ["--trident-limit", args.trident_limit]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=args.timeout_s)
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        row = json.loads(lines[-1]) if lines else {"policy": policy, "finished": False,
                                                   "error": f"exit status {proc.returncode}"}
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        row = {"policy": policy, "finished": False, "error": f"still running after {args.timeout_s} s"}
    row.setdefault("finished", True)
    row.setdefault("oom_kills", cg.oom_kills())
    row["elapsed_s"] = round(time.monotonic() - t0, 1)
    release(cg)
    return row


def _plot(doc: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = doc["rows"]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    walls = [r.get("wall_s") or r["elapsed_s"] for r in rows]
    bars = ax.bar([r["policy"] for r in rows], walls, color=["#888" if r["finished"] else "#c33" for r in rows])
    for bar, r in zip(bars, rows):
        note = f"{r['oom_kills']} OOM kills" + ("" if r["finished"] else ", not finished")
        ax.annotate(note, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("wall time (s)")
    ax.set_title(f"PDF demo under a {doc['workload']['cgroup_limit_bytes'] / 2**30:.2f} GiB memory cgroup", fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main() -> None:
    from trident.core.cli_args import memory_size

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--limit", type=memory_size, default="3.25GiB", help="the cgroup's memory limit")
    p.add_argument("--trident-limit", type=memory_size, default=None,
                   help="trident's memory_limit (default: --limit, all of Ray as the cgroup holds it)")
    p.add_argument("--policies", nargs="+", default=["ray", "trident"])
    p.add_argument("--timeout-s", type=float, default=300.0)
    p.add_argument("--cpus", type=int, default=8)
    p.add_argument("--gpus", type=int, default=2)
    p.add_argument("--out", default=None,
                   help="output path without suffix (default: benchmarks/results/demo_memory_limit-<limit>)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--policy", "--cgroup", "--inputs", "--work"):
        p.add_argument(hidden, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return _child(args)
    from trident.demos.cgroup import find_layout
    from trident.demos.runner import PDF_SIZES, SAMPLES_PDF_DIR, pdf_inputs

    from trident.core.units import parse_memory_bytes

    args.trident_limit = args.trident_limit or args.limit
    args.out = args.out or f"benchmarks/results/demo_memory_limit-{args.limit}"
    args.limit = parse_memory_bytes(args.limit, "--limit")
    layout = find_layout()
    if isinstance(layout, str):
        sys.exit(f"demo_memory_limit: no memory cgroup to use: {layout}")
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory() as tmp:
        inputs = Path(tmp) / "inputs.json"
        inputs.write_text(json.dumps(pdf_inputs(Path(tmp) / "input", seed=0, samples_dir=SAMPLES_PDF_DIR,
                                                **PDF_SIZES["full"])))
        rows = []
        for i, policy in enumerate(args.policies):
            rows.append(_run(policy, args, layout, inputs, Path(tmp) / f"work-{i}"))
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "decisions"}), flush=True)
    base = next((r for r in rows if r["policy"] == "ray" and r["finished"]), None)
    for r in rows:
        if base and r["finished"]:
            r["ratio_to_baseline"] = round(base["wall_s"] / r["wall_s"], 3)
    import ray

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    doc = {"benchmark": "demo_memory_limit", "trident_version": __import__("trident").__version__, "commit": commit,
           "ray_version": ray.__version__, "started_at": started,
           "machine": {"cpus": os.cpu_count(), "logical_cpus": args.cpus, "logical_gpus": args.gpus},
           "workload": {"name": "pdf-demo-full", "seed": 0, "mode": "real", "cgroup_limit_bytes": args.limit,
                        "cgroup_version": layout.version, "trident_memory_limit": args.trident_limit},
           "baseline": "ray", "rows": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(doc, indent=1))
    _plot(doc, out.with_suffix(".png"))
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
