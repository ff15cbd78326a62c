"""How actors come up when k are asked for at once, or at most c at a time (the shim's start gate).

On ``ray.init(num_cpus=12, num_gpus=4)`` (logical GPUs), ``--actors`` actors of 0.5 GPU each, whose
constructor imports what a Ray Data map actor imports (numpy, pyarrow, ray.data), are started
with at most ``c`` starting at once, for each ``c`` in ``--slots`` (the next starts when one is up);
each start's seconds from the first request to the actor's answer are recorded. Rounds alternate
the slot counts after one warm-up. No stand-in: the actors and their imports are real; only the
GPUs are logical. Writes benchmarks/results/actor_starts.json (RESULTS.md shape) and
actor_starts.png.

    python benchmarks/actor_starts.py --actors 6 --slots 6 2 1 --rounds 2
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import ray  # noqa: E402

import trident  # noqa: E402
from trident.autoscaler.shim.starts import host_cores  # noqa: E402


@ray.remote(num_gpus=0.5, num_cpus=0)
class _MapLike:
    def __init__(self):
        import numpy  # noqa: F401
        import pyarrow  # noqa: F401

        import ray.data  # noqa: F401

    def ready(self) -> float:
        return time.time()


def up_times(k: int, slots: int) -> list[float]:
    """Seconds from the first request until each of ``k`` actors answers, at most ``slots`` starting."""
    t0 = time.time()
    pending, up, held, started = {}, [], [], 0
    while len(up) < k:
        while started < k and len(pending) < slots:
            actor = _MapLike.remote()
            pending[actor.ready.remote()] = actor
            started += 1
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            up.append(ray.get(ref) - t0)
            held.append(pending.pop(ref))
    for actor in held:
        ray.kill(actor)
    time.sleep(2.0)  # the killed actors' processes leave before the next round
    return sorted(up)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--actors", type=int, default=6, help="actors per round (default 6; at most 8 fit)")
    parser.add_argument("--slots", type=int, nargs="+", default=[6, 2, 1], help="starts at once to compare")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per slot count (default 2)")
    parser.add_argument("--out", default="benchmarks/results", help="results folder (default benchmarks/results)")
    args = parser.parse_args()
    if not 1 <= args.actors <= 8 or args.rounds < 1 or min(args.slots) < 1:
        parser.error("--actors in 1..8, --rounds >= 1, --slots >= 1")
    os.makedirs(args.out, exist_ok=True)
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    ray.init(num_cpus=12, num_gpus=4, include_dashboard=False, log_to_driver=False)
    up_times(2, 2)  # warm-up: worker processes, imports
    runs: dict[int, list[list[float]]] = {c: [] for c in args.slots}
    for r in range(args.rounds):
        for c in (args.slots if r % 2 == 0 else args.slots[::-1]):
            runs[c].append(up_times(args.actors, c))
            print(f"round {r} slots {c}: up at " + ", ".join(f"{t:.2f}" for t in runs[c][-1]) + " s", flush=True)
    ray.shutdown()
    rows = []
    for c, rounds in runs.items():
        means = [statistics.mean(u) for u in rounds]
        rows.append({"policy": f"{c} at once", "slots": c, "up_s_runs": rounds,
                     "mean_up_s": statistics.median(means), "first_up_s": statistics.median(u[0] for u in rounds),
                     "last_up_s": statistics.median(u[-1] for u in rounds)})
    base = rows[0]["mean_up_s"]
    for row in rows:
        row["ratio_to_baseline"] = base / row["mean_up_s"]
    result = {
        "benchmark": "actor_starts", "trident_version": trident.__version__, "ray_version": ray.__version__,
        "started_at": started, "machine": {"cpus": os.cpu_count(), "host_cores": host_cores(), "gpus": 0,
                                           "logical_gpus": 4},
        "workload": {"name": f"{args.actors} actors of 0.5 GPU importing numpy, pyarrow and ray.data",
                     "seed": 0, "mode": "real", "rounds": args.rounds, "stand_in": "GPUs are logical"},
        "baseline": rows[0]["policy"], "rows": rows,
    }
    with open(os.path.join(args.out, "actor_starts.json"), "w") as f:
        json.dump(result, f, indent=1)
    plot(result, os.path.join(args.out, "actor_starts.png"))
    return 0


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, row in enumerate(result["rows"]):
        for j, up in enumerate(row["up_s_runs"]):
            ax.plot(up, range(1, len(up) + 1), drawstyle="steps-post", color=f"C{i}",
                    label=f"{row['policy']} (mean up {row['mean_up_s']:.2f} s)" if j == 0 else None)
    ax.set_xlabel("seconds after the first request")
    ax.set_ylabel("actors up")
    ax.set_title(f"{result['workload']['name']}\n(host cores: {result['machine']['host_cores']})", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
