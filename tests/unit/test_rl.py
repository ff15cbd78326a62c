"""PPO agent: masking, determinism, numpy/torch agreement, a tiny training run that learns,
and the shipped ``rltune`` policy."""
from importlib import resources

import numpy as np
import pytest
import torch

from trident.core.errors import ConfigError
from trident.jobs.base import JOB_POLICIES, Job, JobView, Node, SchedState
from trident.jobs.features import NUM_FEATURES, QueueFeatures
from trident.jobs.rl import (NumpyActorCritic, PpoConfig, Rollout, _batch_logp, _tensors, act, build_net,
                              episode_reward, ordering, ppo_update)
from trident.jobs.rltune import WEIGHTS_FILE, RLTunePolicy
from trident.jobs.capacity import Cluster



@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny tensors: one thread is fastest, and the machine is shared."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _qf(rng, n=6, can_start=None, running=True):
    m = rng.uniform(0, 1, size=(n, NUM_FEATURES)).astype(np.float32)
    cs = np.ones(n, dtype=bool) if can_start is None else np.asarray(can_start)
    return QueueFeatures(job_ids=tuple(f"j{i}" for i in range(n)), matrix=m, can_start=cs, any_running=running)


def test_masked_jobs_are_never_picked_and_wait_needs_running_jobs():
    net = NumpyActorCritic.from_torch(build_net(0, wait_bias=5.0))  # waiting strongly preferred
    rng = np.random.default_rng(0)
    for _ in range(50):
        qf = _qf(rng, can_start=[True, False, True, False, False, True], running=False)
        a = act(net, qf, rng, max_picks=8)
        assert not a.waited  # nothing runs: waiting could stall the cluster, so it is masked
        assert set(a.picks) <= {0, 2, 5} and len(a.picks) == 3
    qf = _qf(rng, running=True)
    assert act(net, qf, None, max_picks=8).waited  # greedy, with a dominant wait token
    none_valid = _qf(rng, can_start=[False] * 6, running=False)
    a = act(net, none_valid, rng, max_picks=8)
    assert a.picks == () and ordering(none_valid, a, net) == none_valid.job_ids[:0] + tuple(
        none_valid.job_ids[i] for i in np.argsort(-net(none_valid.matrix.astype(float), False)[0], kind="stable"))


def test_same_seed_same_net_and_same_actions():
    a, b = build_net(3), build_net(3)
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)
    assert not torch.equal(build_net(4).state_dict()["score.weight"], a.state_dict()["score.weight"])
    net = NumpyActorCritic.from_torch(a)
    qf = _qf(np.random.default_rng(1))
    acts = [act(net, qf, np.random.default_rng(7), max_picks=4) for _ in range(2)]
    assert acts[0] == acts[1]
    order = ordering(qf, acts[0], net)
    assert sorted(order) == sorted(qf.job_ids) or acts[0].waited


def test_numpy_actor_and_torch_log_probability_agree():
    net = build_net(0)
    fast = NumpyActorCritic.from_torch(net)
    rng = np.random.default_rng(2)
    rollout = Rollout()
    for _ in range(5):
        qf = _qf(rng, n=int(rng.integers(2, 9)), can_start=None, running=bool(rng.integers(0, 2)))
        rollout.add(qf, act(fast, qf, rng, max_picks=4), 0)
    with torch.no_grad():
        logp, _, _ = _batch_logp(net, _tensors(rollout, np.arange(len(rollout)), 5))
    assert np.allclose(logp.numpy(), rollout.logp, atol=1e-4)


def test_tiny_ppo_run_learns_a_toy_better_than_random():
    # Toy: the job to pick first is the one with the smallest feature 1; reward 1 for it, else 0.
    net = build_net(0)
    config = PpoConfig(lr=2e-2, epochs=4, minibatch=48, entropy_coef=0.0, max_picks=1)
    opt = torch.optim.Adam(net.parameters(), lr=config.lr)
    rng = np.random.default_rng(0)

    def accuracy(greedy_net, n=200):
        r = np.random.default_rng(123)
        hits = 0
        for _ in range(n):
            qf = _qf(r, running=False)
            hits += act(greedy_net, qf, None, max_picks=1).picks[0] == int(np.argmin(qf.matrix[:, 1]))
        return hits / n

    before = accuracy(NumpyActorCritic.from_torch(net))
    for _ in range(12):
        fast = NumpyActorCritic.from_torch(net)
        rollout, rewards = Rollout(), {}
        for e in range(48):
            qf = _qf(rng, running=False)
            a = act(fast, qf, rng, max_picks=1)
            rollout.add(qf, a, e)
            rewards[e] = float(a.picks[0] == int(np.argmin(qf.matrix[:, 1])))
        ppo_update(net, opt, rollout, rewards, config, rng)
    after = accuracy(NumpyActorCritic.from_torch(net))
    assert before < 0.4 and after > 0.6, (before, after)  # random picking: 1 in 6


def test_reward_and_config_validation():
    assert episode_reward(5.0, 10.0) == pytest.approx(0.5)
    assert episode_reward(30.0, 10.0) == -1.0
    with pytest.raises(ConfigError, match="max_picks"):
        PpoConfig(max_picks=0)


def _state():
    nodes = [Node("n0", "A", 4), Node("n1", "A", 4)]
    c = Cluster(nodes)
    jobs = [Job(f"q{i}", float(i), 100.0, float([1, 4, 2, 8, 0.5][i])) for i in range(5)]
    queued = [JobView(job=j, running=False, as_of_s=j.arrival_s, wait_base_s=0.0, attained_base_s=0.0) for j in jobs]
    return SchedState(now=10.0, queued=queued, running={}, total_gpus_by_model=c.total_gpus_by_model(),
                      free_gpus_by_model=c.free_gpus_by_model(), queue_length=5, capacity=c)


def test_shipped_policy_loads_and_orders_every_queued_job():
    data = resources.files("trident.jobs").joinpath(WEIGHTS_FILE).read_bytes()
    assert 0 < len(data) < 1_000_000
    policy = JOB_POLICIES.create("rltune")
    assert policy.preemptive is False and policy.oracle is False
    order = policy.order(_state(), np.random.default_rng(0))
    assert sorted(order) == [f"q{i}" for i in range(5)]
    assert order == policy.order(_state(), np.random.default_rng(1))  # greedy: the rng is not used


def test_online_fine_tuning_changes_the_weights_only_when_enabled():
    frozen = RLTunePolicy(net=build_net(0))
    with pytest.raises(ConfigError, match="fine_tune"):
        frozen.fine_tune(policy_bsld=2.0, baseline_bsld=3.0, rng=np.random.default_rng(0))
    policy = RLTunePolicy(net=build_net(0), fine_tune=True)
    before = {k: v.clone() for k, v in policy.net.state_dict().items()}
    policy.order(_state(), np.random.default_rng(0))
    assert len(policy.rollout) == 1
    stats = policy.fine_tune(policy_bsld=2.0, baseline_bsld=3.0, rng=np.random.default_rng(0))
    assert stats["reward"] == pytest.approx(1 / 3)
    assert any(not torch.equal(before[k], v) for k, v in policy.net.state_dict().items())
    assert len(policy.rollout) == 0
