"""Train the ``rltune`` priority offline with PPO on the shipped dev traces; write the shipped weights.

Workload: windows of consecutive jobs from the first 70% (by arrival) of the shipped
philly-gavel and pollux samples (``trident.sim.traces``), philly-gavel's arrivals
compressed x6 so the cluster is contended; the last 30% of each trace is never
trained on. (The shipped alibaba-2023 sample is left out: on a contended slice of
its cluster every ordering gives the same bounded slowdown, dominated by setup
times, so it carries no learning signal.) Each episode replays one
window through the simulator with the exploring policy; its reward is the relative
improvement in mean bounded slowdown over FIFO on the same window (same placer:
best-fit, same setup draws). The actor is first warm-started by imitating an
observable heuristic (fewest GPUs first, then longest wait), then improved by PPO.
After each PPO update the greedy policy is scored on all training windows; the
best weights (warm start included) are kept. Seeded: the same seed writes the
same weights.

With ``--history`` the net also reads the run-time-history features (median run time of the
finished jobs of the same application / job type and GPUs) and is warm-started on
shortest-expected-first; each window starts with the history of the trace's jobs before it.
``--reward jct`` rewards the gain in average JCT instead of bounded slowdown; ``--window N``
sets the jobs per window (160: whole Pollux traces, as they are evaluated). The shipped weights:

    python benchmarks/train_rltune.py --calibrated --history --reward jct --window 160 --seed 0 --iterations 15
    # -> trident/jobs/rltune.pt, benchmarks/results/train_rltune_calibrated-history-jct-w160.{json,png}
"""
from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

import trident.jobs  # noqa: F401  (registers plug-ins)
from trident.jobs.placement import BestFitPlacer
from trident.jobs.baselines import FifoPolicy
from trident.jobs.features import FeatureConfig, queue_features
from trident.jobs.history_order import ShortestExpectedFirst
from trident.jobs.rl import (Action, PpoConfig, Rollout, bounded_slowdown, build_net, episode_reward,
                              imitation_update, ppo_update)
from trident.jobs.rltune import RLTunePolicy
from trident.jobs.capacity import Cluster
from trident.sim.engine import EngineConfig, Simulator
from trident.sim.traces import load_trace, scale_cluster

ROOT = Path(__file__).resolve().parent.parent
WEIGHTS = ROOT / "trident" / "sched" / "rltune.pt"
TRAIN_FRACTION = 0.7
SOURCES = (("philly-gavel", 6.0, 1.0, 40, 12), ("pollux", 1.0, 1.0, 40, 4))
"""(trace spec, arrival speed-up, fraction of the cluster's nodes kept, jobs per window, most windows)."""
DATA = Path(os.environ.get("TRIDENT_DATA", ROOT / ".." / "shared" / "data")) / "traces"
CALIBRATED_SOURCES = tuple((f"pollux:{DATA / 'pollux' / 'workloads' / f'workload-{w}.csv'}", load, 1.0, 40, 4)
                           for w in (1, 2) for load in (1.0, 1.5, 2.0)) + \
    ((f"philly-gavel:{DATA / 'philly-gavel' / 'seed=0' / '0e4a51.trace'}", 3.0, 1.0, 40, 6),)
"""``--calibrated``: Pollux workloads 1-2 (run times from the measured tables) at loads 1.0-2.0 and one
Philly (Gavel) trace of seed 0 at load 3, whole; workloads 3-4 and seed 1 stay unseen."""


def windows(sources=SOURCES, train_fraction: float = TRAIN_FRACTION) -> list[tuple[str, tuple, tuple, tuple]]:
    """(label, nodes, jobs, past) training windows, arrivals rebased to 0; ``past``: the jobs of
    the same trace before the window (finished by then: the run-time history it starts with)."""
    out = []
    for name, load, fraction, window, most in sources:
        trace = load_trace(name)
        nodes = scale_cluster(trace.nodes, fraction) if fraction < 1 else tuple(trace.nodes)
        jobs = sorted(trace.jobs, key=lambda j: (j.arrival_s, j.job_id))
        train = jobs[: int(train_fraction * len(jobs))]
        cluster = Cluster(nodes)
        train = [j for j in train if cluster.could_ever_fit(j)]
        for start in range(0, max(1, len(train) - window + 1), window)[:most]:
            chunk = train[start:start + window]
            t0 = chunk[0].arrival_s
            out.append((f"{Path(name).stem}x{load:g}[{start}:{start + len(chunk)}]", nodes,
                        tuple(replace(j, arrival_s=(j.arrival_s - t0) / load) for j in chunk), tuple(train[:start])))
    return out


class SmallestFirstTeacher:
    """Observable warm-start teacher: fewest GPUs first, then longest wait. Records its
    picks among the jobs that can start, with their features, into ``rollout``."""

    name = "smallest-first"
    preemptive = False
    oracle = False

    def __init__(self, rollout: Rollout, max_picks: int) -> None:
        self.rollout = rollout
        self.max_picks = max_picks

    def order(self, state, rng):
        qf = queue_features(state)
        now = state.now
        rank = sorted(range(len(qf.job_ids)),
                      key=lambda i: (state.queued[i].job.num_gpus, -state.queued[i].wait_s(now), qf.job_ids[i]))
        picks = tuple(i for i in rank if qf.can_start[i])[: self.max_picks]
        if picks:
            self.rollout.add(qf, Action(picks=picks, waited=False, logp=0.0, value=0.0), 0)
        return tuple(qf.job_ids[i] for i in rank) + tuple(v.job_id for v in state.queued[len(qf.job_ids):])


class ShortestExpectedTeacher(SmallestFirstTeacher):
    """Observable warm-start teacher for the history-reading net: shortest expected run time
    first (``sef``: median run time of finished jobs of the same class), then fewest GPUs,
    then longest wait."""

    name = "shortest-expected"

    def __init__(self, rollout: Rollout, max_picks: int) -> None:
        super().__init__(rollout, max_picks)
        self.sef = ShortestExpectedFirst()
        self.history = self.sef.history
        self.features = FeatureConfig(history=True)

    def observe_finish(self, job, run_s: float) -> None:
        self.history.observe(job, run_s)

    def order(self, state, rng):
        qf = queue_features(state, self.features, self.history)
        now = state.now
        rank = sorted(range(len(qf.job_ids)),
                      key=lambda i: (self.sef.expected_s(state.queued[i]), state.queued[i].job.num_gpus,
                                     -state.queued[i].wait_s(now), qf.job_ids[i]))
        picks = tuple(i for i in rank if qf.can_start[i])[: self.max_picks]
        if picks:
            self.rollout.add(qf, Action(picks=picks, waited=False, logp=0.0, value=0.0), 0)
        return tuple(qf.job_ids[i] for i in rank) + tuple(v.job_id for v in state.queued[len(qf.job_ids):])


REWARDS = ("bsld", "jct")


def replay(nodes, jobs, policy, seed: int, past=(), reward: str = "bsld") -> float:
    """The window's mean bounded slowdown (``reward="bsld"``) or average JCT (``"jct"``);
    a policy with a run-time ``history`` starts it from the ``past`` jobs' run times."""
    history = getattr(policy, "history", None)
    if history is not None:
        history.clear()
        for j in past:
            history.observe(j, j.duration_s)
    result = Simulator(nodes=nodes, policy=policy, placer=BestFitPlacer(),
                       config=EngineConfig(seed=seed)).run(jobs)
    jct = result.finish_s - result.arrival_s
    return float(np.mean(jct)) if reward == "jct" else bounded_slowdown(jct, result.duration_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--episodes", type=int, default=6, help="episodes per PPO update")
    parser.add_argument("--imitation-epochs", type=int, default=30,
                        help="warm-start epochs imitating the smallest-first teacher (0: none)")
    parser.add_argument("--calibrated", action="store_true",
                        help="train on Pollux workloads 1-2 and a Philly seed-0 trace (CALIBRATED_SOURCES)")
    parser.add_argument("--history", action="store_true",
                        help="add the run-time-history features (finished jobs of the same class) and "
                             "warm-start on shortest-expected-first")
    parser.add_argument("--reward", choices=REWARDS, default="bsld",
                        help="episode reward: gain in mean bounded slowdown (bsld) or in average JCT (jct) over FIFO")
    parser.add_argument("--window", type=int, default=None,
                        help="jobs per training window (default: each source's own, 40); a window as long "
                             "as the trace trains on whole traces, as they are evaluated")
    parser.add_argument("--out", type=Path, default=WEIGHTS)
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    started = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    sources = CALIBRATED_SOURCES if args.calibrated else SOURCES
    if args.window is not None:
        sources = tuple((name, load, fraction, args.window, most) for name, load, fraction, _, most in sources)
    data = windows(sources, 1.0) if args.calibrated else windows()
    rw = args.reward
    baseline = [replay(nodes, jobs, FifoPolicy(), args.seed, reward=rw) for _, nodes, jobs, _ in data]
    eval_idx = list(range(len(data)))
    config = PpoConfig()
    features = FeatureConfig(history=args.history)
    net = build_net(args.seed, wait_bias=config.wait_bias, num_features=features.num_features)
    optimizer = torch.optim.Adam(net.parameters(), lr=config.lr)

    def greedy_score() -> float:
        policy = RLTunePolicy(net=net)
        return float(np.mean([episode_reward(replay(data[i][1], data[i][2], policy, args.seed, data[i][3], rw),
                                             baseline[i]) for i in eval_idx]))

    history = []
    print(f"{len(data)} windows; greedy reward of the untrained net {greedy_score():+.4f}", flush=True)
    if args.imitation_epochs:
        demos = Rollout()
        teacher = ShortestExpectedTeacher if args.history else SmallestFirstTeacher
        for _, nodes, jobs, past in data:
            replay(nodes, jobs, teacher(demos, config.max_picks), args.seed, past)
        nll = imitation_update(net, optimizer, demos, epochs=args.imitation_epochs, minibatch=config.minibatch,
                               max_picks=config.max_picks, rng=rng)
        print(f"warm start: {len(demos)} teacher decisions, NLL {nll:.3f}", flush=True)
    best = (greedy_score(), 0, {k: v.clone() for k, v in net.state_dict().items()})
    print(f"greedy reward before PPO {best[0]:+.4f}", flush=True)
    for it in range(1, args.iterations + 1):
        policy = RLTunePolicy(net=net, explore=True, ppo=config)
        rewards = {}
        for e, i in enumerate(rng.choice(len(data), size=args.episodes, replace=False).tolist()):
            policy.episode = e
            _, nodes, jobs, past = data[i]
            sim_seed = int(rng.integers(1 << 30))
            rewards[e] = episode_reward(replay(nodes, jobs, policy, sim_seed, past, rw),
                                        replay(nodes, jobs, FifoPolicy(), sim_seed, reward=rw))
        stats = ppo_update(net, optimizer, policy.rollout, rewards, config, rng)
        score = greedy_score()
        history.append({"iteration": it, "explore_reward": float(np.mean(list(rewards.values()))),
                        "greedy_reward": score, "decisions": len(policy.rollout), **stats})
        print(f"it {it:3d}: explore {history[-1]['explore_reward']:+.4f}  greedy {score:+.4f}  "
              f"decisions {len(policy.rollout)}  {time.perf_counter() - started:.0f} s", flush=True)
        if score > best[0]:
            best = (score, it, {k: v.clone() for k, v in net.state_dict().items()})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(best[2], args.out)
    print(f"best greedy reward {best[0]:+.4f} at iteration {best[1]}; wrote {args.out}")

    net.load_state_dict(best[2])
    trained = RLTunePolicy(net=net)
    learned = [replay(nodes, jobs, trained, args.seed, past, rw) for _, nodes, jobs, past in data]
    metric = "avg_jct_s" if rw == "jct" else "bounded_slowdown"
    rows = [{"policy": "fifo", metric: float(np.mean(baseline)), "ratio_to_baseline": 1.0},
            {"policy": "rltune", metric: float(np.mean(learned)),
             "ratio_to_baseline": float(np.mean(baseline) / np.mean(learned))}]
    args.results.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": "train_rltune", "trident_version": trident_version(),
           "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "machine": {"cpus": os.cpu_count(), "gpus": 0},
           "workload": {"name": ("Pollux workloads 1-2 and a Philly seed-0 trace, whole" if args.calibrated
                                 else "shipped dev traces, windows from the first 70% of each"),
                        "sources": [list(s) for s in sources],
                        "seed": args.seed, "mode": "simulated", "history_features": args.history,
                        "reward": rw},
           "baseline": "fifo", "rows": rows, "best_iteration": best[1], "best_greedy_reward": best[0],
           "wall_s": time.perf_counter() - started, "history": history}
    stem = ("train_rltune_calibrated" if args.calibrated else "train_rltune") + \
        ("-history" if args.history else "") + ("-jct" if rw == "jct" else "") + \
        (f"-w{args.window}" if args.window else "")
    (args.results / f"{stem}.json").write_text(json.dumps(doc, indent=1))
    plot(history, args.results / f"{stem}.png")
    return 0


def trident_version() -> str:
    import trident

    return trident.__version__


def plot(history: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    its = [h["iteration"] for h in history]
    ax.plot(its, [h["explore_reward"] for h in history], label="exploring (sampled windows)")
    ax.plot(its, [h["greedy_reward"] for h in history], label="greedy (all training windows)")
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xlabel("PPO iteration")
    ax.set_ylabel("reward: gain over FIFO")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
