"""Preemptors: never / eager / lazy (Lazer-style) decisions, the runtime prior, and a replay
in which lazy preemption has no futile preemption where eager has several."""
import numpy as np
import pytest

from trident.core.errors import ConfigError
from trident.jobs.base import (
    PREEMPTORS,
    Allocation,
    EwmaArrivalPredictor,
    Job,
    JobView,
    Node,
    SchedState,
    Verdict,
)
from trident.jobs.baselines import SrtfPolicy
from trident.jobs.placement import FirstFitPlacer
from trident.jobs.predict import RuntimePrior
from trident.jobs.preempt import EagerPreemptor, LazyPreemptor, NeverPreemptor
from trident.sim.engine import EngineConfig, SetupModel, Simulator
from trident.sim.metrics import summarize


def _running(job_id, *, gpus=4.0, start=0.0, setup=300.0, attained_before=0.0, model="A"):
    job = Job(job_id, 0.0, 1e5, gpus)
    alloc = Allocation(model, tuple((0, d, 1000) for d in range(int(gpus))), ("n0",))
    return JobView(job=job, running=True, as_of_s=start, wait_base_s=0.0, attained_base_s=attained_before,
                   setup_ends_s=start + setup, expected_setup_s=setup, allocation=alloc)


def _queued(job_id, *, gpus=4.0, setup=300.0, arrival=0.0):
    job = Job(job_id, arrival, 100.0, gpus)
    return JobView(job=job, running=False, as_of_s=arrival, wait_base_s=0.0, attained_base_s=0.0,
                   expected_setup_s=setup)


def _state(now, running, queued, *, free=0.0, total=8.0):
    return SchedState(now=now, queued=queued, running={v.job_id: v for v in running},
                      total_gpus_by_model={"A": total}, free_gpus_by_model={"A": free})


def _predictor(interval_s):
    p = EwmaArrivalPredictor(alpha=1.0, initial_interval_s=interval_s)
    return p


def test_never_and_eager_answer_without_looking():
    v, b = _running("v"), _queued("b")
    st = _state(10.0, [v], [b])
    assert NeverPreemptor().decide(blocked=b, victim=v, state=st, predictor=_predictor(60)).verdict is Verdict.DO_NOT
    eager = EagerPreemptor().decide(blocked=b, victim=v, state=st, predictor=_predictor(60))
    assert eager.verdict is Verdict.PREEMPT_NOW and "in setup" in eager.reason
    assert set(PREEMPTORS.names()) >= {"never", "eager", "lazy"}


def test_lazy_never_evicts_a_job_in_setup_and_comes_back_when_it_ends():
    v = _running("v", start=0.0, setup=600.0)
    b = _queued("b")
    d = LazyPreemptor().decide(blocked=b, victim=v, state=_state(100.0, [v], [b]), predictor=_predictor(60))
    assert d.verdict is Verdict.DELAY_UNTIL
    assert d.until_s == pytest.approx(600.0)
    assert "setting up" in d.reason


def test_lazy_preempts_a_long_running_victim_when_the_blocked_job_would_wait_long():
    # Victim has run 20 h past its setup: Philly's conditional median remaining is long.
    v = _running("v", start=0.0, setup=60.0)
    b = _queued("b", setup=60.0)
    now = 72000.0
    d = LazyPreemptor().decide(blocked=b, victim=v, state=_state(now, [v], [b]), predictor=_predictor(3600))
    assert d.verdict is Verdict.PREEMPT_NOW, d.reason
    assert "pays off" in d.reason


def test_lazy_does_not_preempt_a_victim_about_to_finish():
    prior = RuntimePrior(points_s=tuple(float(x) for x in range(1000, 1101)))  # every job runs 1000-1100 s
    v = _running("v", start=0.0, setup=60.0)
    b = _queued("b")
    lazy = LazyPreemptor(prior=prior)
    now = 60.0 + 1050.0  # 1050 s of work done: the median job has ~25 s left, a swap costs 90 s
    d = lazy.decide(blocked=b, victim=v, state=_state(now, [v], [b]), predictor=_predictor(600))
    assert d.verdict is Verdict.DO_NOT, d.reason
    assert lazy.predicted_remaining_s(v, now) < 90.0


def test_lazy_waits_when_other_gpus_free_up_soon_or_arrivals_are_dense():
    prior = RuntimePrior(points_s=tuple(float(x) for x in np.linspace(100, 20000, 2000)))
    lazy = LazyPreemptor(prior=prior, max_waste_fraction=1.0)  # gain against cost only
    v = _running("v", start=0.0, setup=60.0)
    b = _queued("b", gpus=4.0, setup=60.0)
    now = 60.0 + 50.0
    sparse = lazy.decide(blocked=b, victim=v, state=_state(now, [v], [b]), predictor=_predictor(10000))
    assert sparse.verdict is Verdict.PREEMPT_NOW, sparse.reason
    # Another 4-GPU job nearly done: the blocked job gets GPUs soon without evicting anyone.
    other = _running("o", start=-19900.0, setup=60.0)
    soon = lazy.decide(blocked=b, victim=v, state=_state(now, [v, other], [b]), predictor=_predictor(10000))
    assert soon.verdict is Verdict.DELAY_UNTIL and soon.until_s > now, soon.reason
    # Arrivals twice a second weigh the swap's waste up: not worth it now.
    dense = lazy.decide(blocked=b, victim=v, state=_state(now, [v], [b]), predictor=_predictor(0.5))
    assert dense.verdict is Verdict.DELAY_UNTIL, dense.reason


def test_lazy_evicts_only_once_the_victims_swaps_are_amortised():
    lazy = LazyPreemptor(checkpoint_restore_s=40.0, max_waste_fraction=0.01)
    b = _queued("b", setup=60.0)
    # Overhead of a swap: 60 s setup + 40 s restore = 100 s; 1% => 10,000 s held per swap.
    young = _running("v", start=0.0, setup=60.0)
    d = lazy.decide(blocked=b, victim=young, state=_state(5000.0, [young], [b]), predictor=_predictor(3600))
    assert d.verdict is Verdict.DELAY_UNTIL and d.until_s == pytest.approx(5000.0 + 3600.0), d.reason
    assert "1%" in d.reason
    old = _running("v", start=0.0, setup=60.0)
    d = lazy.decide(blocked=b, victim=old, state=_state(30000.0, [old], [b]), predictor=_predictor(3600))
    assert d.verdict is Verdict.PREEMPT_NOW, d.reason
    # A job already swapped twice needs three times the service before a third swap.
    twice = _running("v", start=20000.0, setup=60.0, attained_before=5000.0)
    twice = JobView(**{**twice.__dict__, "preemptions": 2})
    d = lazy.decide(blocked=b, victim=twice, state=_state(40000.0, [twice], [b]), predictor=_predictor(3600))
    assert d.verdict is Verdict.DELAY_UNTIL, d.reason


def test_lazy_configuration_is_validated():
    with pytest.raises(ConfigError, match="checkpoint_restore_s"):
        LazyPreemptor(checkpoint_restore_s=-1)
    with pytest.raises(ConfigError, match="max_waste_fraction"):
        LazyPreemptor(max_waste_fraction=0.0)
    with pytest.raises(ConfigError, match="remaining_quantile"):
        LazyPreemptor(remaining_quantile=1.0)
    with pytest.raises(ConfigError, match="min_recheck_s"):
        LazyPreemptor(min_recheck_s=10.0, max_recheck_s=5.0)


def test_runtime_prior_conditional_remaining_time():
    prior = RuntimePrior(points_s=(10.0, 20.0, 30.0, 40.0))
    assert prior.expected_remaining_s(0.0) == pytest.approx(25.0)
    assert prior.expected_remaining_s(25.0) == pytest.approx(10.0)   # (30-25 + 40-25) / 2
    assert prior.quantile_remaining_s(25.0, 0.5) == pytest.approx(10.0)
    assert prior.prob_ends_within(15.0, 10.0) == pytest.approx(1 / 3)
    assert np.allclose(prior.prob_ends_within(np.array([0.0, 35.0]), np.array([10.0, 100.0])), [0.25, 1.0])
    assert prior.expected_remaining_s(100.0) == pytest.approx(100.0)  # beyond the sample: its own age
    philly = RuntimePrior.philly()
    # Heavy tail: the longer a Philly job has run, the longer it is expected to keep running.
    assert philly.quantile_remaining_s(36000.0) > philly.quantile_remaining_s(600.0) > 0
    observed = philly.with_observed(np.full(50, 123.0))
    assert observed.quantile_remaining_s(0.0) == pytest.approx(123.0)
    assert philly.with_observed([1.0, 2.0]) is philly


def _synthetic(n, seed):
    rng = np.random.default_rng(seed)
    t, jobs = 0.0, []
    for i in range(n):
        t += float(rng.exponential(150.0))
        g = float(rng.choice([1, 2, 4, 8], p=[0.4, 0.3, 0.2, 0.1]))
        jobs.append(Job(f"j{i}", t, float(np.exp(rng.normal(7.0, 1.2))), g))
    return jobs


def test_lazy_replay_has_no_futile_preemption_where_eager_has_some():
    nodes = [Node(f"n{i}", "A", 8) for i in range(2)]
    jobs = _synthetic(60, 0)
    cfg = EngineConfig(seed=0, setup=SetupModel(kind="lognormal", median_s=300.0, p95_s=1500.0))
    out = {}
    for pre in (EagerPreemptor(), LazyPreemptor()):
        res = Simulator(nodes=nodes, policy=SrtfPolicy(), placer=FirstFitPlacer(), preemptor=pre, config=cfg).run(jobs)
        assert len(res.job_ids) == 60 and np.all(np.isfinite(res.finish_s))
        out[pre.name] = summarize(res)
    assert out["eager"]["futile_preemptions"] > 0
    assert out["lazy"]["futile_preemptions"] == 0
    assert out["lazy"]["wasted_gpu_pct"] < out["eager"]["wasted_gpu_pct"]


def test_a_shrink_counts_the_stretch_of_the_elastic_victims_run():
    """A pipeline held at 4 GPUs (its minimum 1) is shrunk, not stopped: it runs on, 4x slower.
    The same victim as a rigid job is evicted (its swap costs its setup alone); shrunk, the
    stretch of its predicted remaining run outweighs the blocked job's wait."""
    prior = RuntimePrior(points_s=tuple(float(x) for x in np.linspace(100, 4000, 400)))
    lazy = LazyPreemptor(prior=prior, max_waste_fraction=1.0, default_setup_s=10.0, checkpoint_restore_s=0.0)
    alloc = Allocation("A", tuple((0, d, 1000) for d in range(4)), ("n0",))

    def victim(job):
        return JobView(job=job, running=True, as_of_s=0.0, wait_base_s=0.0, attained_base_s=0.0, setup_ends_s=10.0,
                       expected_setup_s=10.0, allocation=alloc)

    rigid = victim(Job("v", 0.0, 1e5, 4.0))
    elastic = victim(Job("v", 0.0, 1e5, 1.0, max_gpus=4.0))
    b, now = _queued("b", gpus=3.0, setup=10.0), 300.0
    st = _state(now, [rigid], [b])
    assert lazy.shrink_stretch_s(rigid, now, 3.0) == 0.0
    remaining = lazy.predicted_remaining_s(elastic, now)
    assert lazy.shrink_stretch_s(elastic, now, 3.0) == pytest.approx(3 * remaining)
    assert lazy.decide(blocked=b, victim=rigid, state=st, predictor=_predictor(1e6)).verdict is Verdict.PREEMPT_NOW
    shrink = lazy.decide(blocked=b, victim=elastic, state=st, predictor=_predictor(1e6))
    assert shrink.verdict is Verdict.DELAY_UNTIL and "stretches its run" in shrink.reason, shrink.reason
    half = victim(Job("v", 0.0, 1e5, 1.0, max_gpus=4.0, parallel_fraction=0.5))  # half its work divides over GPUs
    assert lazy.shrink_stretch_s(half, now, 3.0) == pytest.approx(remaining * (2.5 / 1.0 - 1.0))


def test_a_shrink_is_priced_by_the_gpus_the_blocked_job_takes():
    """A 1-GPU job needs one of a pipeline's 4 GPUs: the pipeline's run stretches as on 3 GPUs, not
    as on its minimum of 1 (the rest goes to the next jobs in line or back to it). Priced as a
    shrink to its minimum, the stretch (3x its remaining run) outweighed the job's wait and a
    pipeline never made room for short jobs."""
    prior = RuntimePrior(points_s=tuple(float(x) for x in np.linspace(100, 4000, 400)))
    lazy = LazyPreemptor(prior=prior, max_waste_fraction=1.0, default_setup_s=10.0, checkpoint_restore_s=0.0)
    alloc = Allocation("A", tuple((0, d, 1000) for d in range(4)), ("n0",))
    pipe = JobView(job=Job("pipe", 0.0, 1e5, 1.0, max_gpus=4.0), running=True, as_of_s=0.0, wait_base_s=0.0,
                   attained_base_s=0.0, setup_ends_s=10.0, expected_setup_s=10.0, allocation=alloc)
    b, now = _queued("b", gpus=1.0, setup=10.0), 300.0
    remaining = lazy.predicted_remaining_s(pipe, now)
    assert lazy.shrink_stretch_s(pipe, now, 1.0) == pytest.approx(remaining / 3)  # 4/3 as long on 3 GPUs
    assert lazy.shrink_stretch_s(pipe, now, 5.0) == pytest.approx(3 * remaining)  # never below its minimum
    d = lazy.decide(blocked=b, victim=pipe, state=_state(now, [pipe], [b]), predictor=_predictor(1e6))
    assert d.verdict is Verdict.PREEMPT_NOW, d.reason
