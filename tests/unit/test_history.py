"""Run-time history: an observable estimate of a queued job's run time from finished jobs of its
class, the history features, the orders built on it, and the hook that feeds it."""
from dataclasses import replace

import numpy as np
import pytest

from trident.core.errors import ConfigError
from trident.jobs.base import Job, JobView, Node, SchedState
from trident.jobs.capacity import Cluster
from trident.jobs.features import (FEATURE_NAMES, HISTORY_FEATURE_NAMES, NUM_FEATURES, FeatureConfig,
                                    queue_features)
from trident.jobs.history_order import ShortestExpectedFirst, ShortestRemainingExpectedFirst
from trident.jobs.predict import RunTimeHistory, RuntimePrior
from trident.jobs.rl import build_net
from trident.jobs.rltune import RLTunePolicy, load_net
from trident.sim.engine import EngineConfig, SetupModel, Simulator

H = {name: NUM_FEATURES + i for i, name in enumerate(HISTORY_FEATURE_NAMES)}


def _job(jid, app, gpus=1.0, duration=100.0, arrival=0.0):
    return Job(jid, arrival, duration, gpus, user=app)


def test_history_estimates_by_class_then_application():
    h = RunTimeHistory()
    assert h.estimate_s(_job("a", "bert")) is None
    h.observe(_job("f1", "bert", 2.0), 100.0)
    h.observe(_job("f2", "bert", 2.0), 300.0)
    h.observe(_job("f3", "bert", 2.0), 200.0)
    h.observe(_job("f4", "bert", 8.0), 50.0)
    assert h.estimate_s(_job("q", "bert", 2.0, duration=1e9)) == 200.0       # median of its class
    assert h.estimate_s(_job("q", "bert", 4.0)) == pytest.approx(150.0)      # no class: its application
    assert h.estimate_s(_job("q", "ncf", 2.0)) is None
    assert len(h) == 4
    h.clear()
    assert h.estimate_s(_job("q", "bert", 2.0)) is None
    with pytest.raises(ConfigError, match="run_s"):
        h.observe(_job("f", "bert"), -1.0)


def test_history_keeps_pipelines_and_rigid_jobs_apart():
    h = RunTimeHistory()
    h.observe(replace(_job("pipe", "", 1.0), max_gpus=4.0), 16.0)
    assert h.estimate_s(_job("train", "", 1.0)) is None          # a pipeline's run says nothing of it
    assert h.estimate_s(_job("train", "", 2.0)) is None
    assert h.estimate_s(replace(_job("pipe-2", "", 1.0), max_gpus=2.0)) == 16.0
    h.observe(_job("t", "", 1.0), 8.0)
    assert h.estimate_s(_job("train", "", 2.0)) == 8.0


def test_history_keeps_the_most_recent_runs_of_a_class():
    h = RunTimeHistory(max_per_class=2)
    for run in (10.0, 1000.0, 1000.0):
        h.observe(_job("f", "x"), run)
    assert h.estimate_s(_job("q", "x")) == 1000.0


def _state(jobs, now=1000.0):
    c = Cluster([Node("n0", "A", 4), Node("n1", "A", 4)])
    queued = [JobView(job=j, running=False, as_of_s=j.arrival_s, wait_base_s=0.0, attained_base_s=0.0) for j in jobs]
    return SchedState(now=now, queued=queued, running={}, total_gpus_by_model=c.total_gpus_by_model(),
                      free_gpus_by_model=c.free_gpus_by_model(), queue_length=len(queued), capacity=c)


def test_history_features_read_finished_jobs_never_a_queued_duration():
    jobs = [_job("q0", "ncf"), _job("q1", "yolo"), _job("q2", "new")]
    h = RunTimeHistory()
    h.observe(_job("f0", "ncf"), 60.0)
    h.observe(_job("f1", "yolo"), 36000.0)
    config = FeatureConfig(history=True)
    qf = queue_features(_state(jobs), config, h)
    assert qf.matrix.shape == (3, NUM_FEATURES + 2) and config.num_features == NUM_FEATURES + 2
    assert np.all(qf.matrix >= 0) and np.all(qf.matrix <= 1)
    ncf, yolo, new = qf.matrix
    assert ncf[H["expected_run"]] < yolo[H["expected_run"]]
    assert (ncf[H["known"]], yolo[H["known"]], new[H["known"]]) == (1.0, 1.0, 0.0)
    # The unknown class gets the prior's median, between the two.
    assert ncf[H["expected_run"]] < new[H["expected_run"]] < yolo[H["expected_run"]]
    longer = [replace(j, duration_s=j.duration_s * 1000) for j in jobs]
    assert np.array_equal(qf.matrix, queue_features(_state(longer), config, h).matrix)
    # The base features are the same as without history.
    assert np.array_equal(qf.matrix[:, :NUM_FEATURES], queue_features(_state(jobs)).matrix)
    assert len(FEATURE_NAMES) == NUM_FEATURES


def test_simulator_books_every_finished_job_with_its_measured_run_time():
    seen = []

    class Recorder(ShortestExpectedFirst):
        def observe_finish(self, job, run_s):
            seen.append((job.job_id, run_s))
            super().observe_finish(job, run_s)

    jobs = [_job(f"j{i}", "a" if i % 2 else "b", 4.0, duration=100.0 * (i + 1), arrival=float(i)) for i in range(6)]
    policy = Recorder()
    Simulator(nodes=[Node("n0", "A", 4)], policy=policy, placer=_placer(),
              config=EngineConfig(seed=0, setup=SetupModel(kind="fixed", median_s=50.0))).run(jobs)
    assert sorted(seen) == sorted((j.job_id, pytest.approx(j.duration_s)) for j in jobs)  # setups left out
    assert len(policy.history) == 6


def _placer():
    from trident.jobs.base import PLACERS

    return PLACERS.create("first-fit")


def test_shortest_expected_first_orders_by_history():
    policy = ShortestExpectedFirst()
    policy.observe_finish(_job("f0", "long"), 5000.0)
    policy.observe_finish(_job("f1", "short"), 50.0)
    jobs = [_job("a", "long", duration=1.0), _job("b", "unknown", duration=1.0), _job("c", "short", duration=1e6)]
    assert policy.order(_state(jobs), np.random.default_rng(0)) == ("c", "b", "a")


def test_shortest_remaining_expected_uses_the_prior_once_a_job_outlives_its_history():
    prior = RuntimePrior()
    policy = ShortestRemainingExpectedFirst(prior=prior)
    policy.observe_finish(_job("f", "x"), 100.0)
    view = JobView(job=_job("r", "x"), running=True, as_of_s=0.0, wait_base_s=0.0, attained_base_s=0.0,
                   setup_ends_s=0.0)
    assert policy.remaining_s(view, 40.0) == pytest.approx(60.0)
    assert policy.remaining_s(view, 400.0) == pytest.approx(prior.quantile_remaining_s(400.0, 0.5))


def test_rltune_reads_history_features_when_its_net_does(tmp_path):
    import torch

    path = tmp_path / "w.pt"
    torch.save(build_net(0, num_features=NUM_FEATURES + 2).state_dict(), path)
    assert load_net(path).job[0].in_features == NUM_FEATURES + 2
    policy = RLTunePolicy(weights=path)
    policy.observe_finish(_job("f", "a"), 10.0)
    order = policy.order(_state([_job("q0", "a"), _job("q1", "b")]), np.random.default_rng(0))
    assert sorted(order) == ["q0", "q1"] and policy.features.history
    plain = RLTunePolicy(net=build_net(0))
    plain.order(_state([_job("q0", "a")]), np.random.default_rng(0))
    assert not plain.features.history
    with pytest.raises(ConfigError, match="input features"):
        _ = RLTunePolicy(net=build_net(0, num_features=5)).fast


def test_history_copy_is_independent():
    h = RunTimeHistory(max_per_class=3)
    h.observe(_job("f", "a"), 10.0)
    c = h.copy()
    c.observe(_job("g", "a"), 1000.0)
    c.observe(_job("g", "b"), 5.0)
    assert h.estimate_s(_job("q", "a")) == 10.0 and h.estimate_s(_job("q", "b")) is None
    assert c.estimate_s(_job("q", "a")) == pytest.approx(505.0) and c.max_per_class == 3 and len(h) == 1


def _warm():
    """A history pre-filled before the run: 'short' jobs finished in 60 s, 'long' ones in 36,000 s."""
    h = RunTimeHistory()
    for k in range(3):
        h.observe(_job(f"s{k}", "short"), 60.0)
        h.observe(_job(f"l{k}", "long"), 36000.0)
    return h


def test_a_prefilled_history_ranks_the_known_short_class_first_from_the_first_decision():
    # Queued long first: with no history the two look alike and keep their queue order.
    jobs = [_job("q-long", "long", duration=1.0), _job("q-short", "short", duration=1e6)]
    rng = np.random.default_rng(0)
    assert ShortestExpectedFirst().order(_state(jobs), rng) == ("q-long", "q-short")
    assert ShortestExpectedFirst(history=_warm()).order(_state(jobs), rng) == ("q-short", "q-long")
    assert RLTunePolicy().order(_state(jobs), rng)[0] == "q-long"           # the shipped weights, cold
    warm = RLTunePolicy(history=_warm())
    assert warm.order(_state(jobs), rng)[0] == "q-short" and len(warm.history) == 6
    assert RLTunePolicy(history=_warm(), preemptive=True).order(_state(jobs), rng)[0] == "q-short"


def _full_state(queued, now=1000.0):
    """One 4-GPU node held by 'short' (2 GPUs) and 'long' (2 GPUs) jobs, both running since 0."""
    from trident.jobs.base import Allocation

    node = Node("n0", "A", 4, cpus=32, memory_mib=1e5)
    c = Cluster([node])
    running = {}
    for k, app in enumerate(("long", "short")):
        job = _job(f"r-{app}", app, 2.0, duration=1.0)
        alloc = Allocation("A", ((0, 2 * k, 1000), (0, 2 * k + 1, 1000)), ("n0",))
        c.allocate(job, alloc)
        running[job.job_id] = JobView(job=job, running=True, as_of_s=0.0, wait_base_s=0.0, attained_base_s=0.0,
                                      setup_ends_s=0.0, allocation=alloc)
    views = [JobView(job=j, running=False, as_of_s=j.arrival_s, wait_base_s=0.0, attained_base_s=0.0) for j in queued]
    return SchedState(now=now, queued=views, running=running, total_gpus_by_model=c.total_gpus_by_model(),
                      free_gpus_by_model=c.free_gpus_by_model(), queue_length=len(views), capacity=c)


def test_preemptive_rltune_ranks_blocked_jobs_and_merges_running_ones_by_expected_remaining():
    h = _warm()
    h.observe(_job("m", "mid", 2.0), 5000.0)
    state = _full_state([_job("q-mid", "mid", 2.0, duration=1.0)], now=30.0)  # cannot start: the node is full
    rng = np.random.default_rng(0)
    # Non-preemptive: only queued jobs (none can start, so the net waits and ranks none).
    assert RLTunePolicy(history=h.copy()).order(state, rng) == ()
    # Preemptive: the blocked job stays ranked (expected 5,000 s), after the running 'short' job
    # (30 s left) and before 'long' (35,970 s left): only 'long' may be its victim.
    assert RLTunePolicy(history=h.copy(), preemptive=True).order(state, rng) == ("r-short", "q-mid", "r-long")
