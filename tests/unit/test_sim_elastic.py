"""Elastic jobs (pipelines) in the simulator: lent free GPUs up to their maximum while no job
waits, shrunk to their minimum when evicted, grown back when GPUs free up; progress in
proportion to their warm GPUs (Amdahl with a parallel fraction), lent GPUs warm after a
re-warm of ``rewarm_s`` (else ``setup_s``). Times are hand-computed: ``duration_s`` is the run time at max_gpus."""
import numpy as np
import pytest

from trident.core.errors import ConfigError
from trident.jobs.base import Job, Node
from trident.jobs.baselines import FifoPolicy, SrtfPolicy
from trident.jobs.placement import FirstFitPlacer
from trident.jobs.preempt import EagerPreemptor, LazyPreemptor, NeverPreemptor
from trident.sim.engine import EngineConfig, SetupModel, Simulator

NO_SETUP = EngineConfig(setup=SetupModel(kind="none"), restore_s=0.0)
NODE = [Node(node_id="n0", gpu_model="A", num_gpus=4)]


def _run(jobs, preemptor=None, policy=None, nodes=NODE):
    return Simulator(nodes=nodes, policy=policy or FifoPolicy(), placer=FirstFitPlacer(),
                     preemptor=preemptor or EagerPreemptor(), config=NO_SETUP).run(jobs)


def _pipe(setup_s=0.0, parallel_fraction=1.0, rewarm_s=None):
    return Job(job_id="pipe", arrival_s=0.0, duration_s=100.0, num_gpus=1.0, max_gpus=4.0, setup_s=setup_s,
               parallel_fraction=parallel_fraction, rewarm_s=rewarm_s)


def _train(gpus, arrival_s=20.0):
    return Job(job_id="train", arrival_s=arrival_s, duration_s=30.0, num_gpus=gpus)


def _at(result, attr, job_id):
    return getattr(result, attr)[result.job_ids.index(job_id)]


def test_alone_it_is_lent_all_free_gpus_and_runs_its_duration_after_its_setup():
    r = _run([_pipe(setup_s=10.0)])
    assert r.finish_s[0] == pytest.approx(110.0)
    assert r.used_gpus.max() == pytest.approx(4.0)
    assert r.wasted_gpu_s[0] == pytest.approx(0.0)  # one setup at its maximum is what it needs


def test_shrunk_for_a_waiting_job_it_is_lent_the_gpu_left_then_all_when_the_job_ends():
    r = _run([_pipe(), _train(2.0)])
    # 0-20 s at 4 GPUs: 20 s of work; 20-50 s at 2 (1 + the 1 GPU train leaves free): 15;
    # 50 s on at 4: the last 65. 15 s later than alone (2 of 4 GPUs for 30 s).
    assert _at(r, "finish_s", "pipe") == pytest.approx(115.0)
    assert _at(r, "finish_s", "train") == pytest.approx(50.0)
    assert _at(r, "preemptions", "pipe") == 1
    assert [d[1:4] for d in r.decisions] == [("train", "pipe", "preempt_now")]
    assert r.used_gpus.max() == pytest.approx(4.0)


def test_shrunk_to_its_minimum_it_grows_back_after_the_job_ends_and_pays_a_rewarm():
    r = _run([_pipe(setup_s=4.0), _train(3.0)])
    # 0-4 s setup; 4-20 s at 4 GPUs: 16 s of work; 20-50 s at 1 GPU: 7.5; grown back to 4 at
    # 50 s, warm at 54 s (1 more s of work meanwhile); the last 75.5 s from 54 s.
    assert _at(r, "finish_s", "pipe") == pytest.approx(129.5)
    assert _at(r, "finish_s", "train") == pytest.approx(50.0)
    assert _at(r, "futile_preemptions", "pipe") == 0
    assert _at(r, "wasted_gpu_s", "pipe") == pytest.approx(3 * 4.0)  # the re-warm of 3 GPUs


def test_lent_gpus_warm_after_its_rewarm_not_its_setup():
    r = _run([_pipe(rewarm_s=4.0), _train(3.0)])
    # 0-4 s on its 1 GPU (no setup) while the 3 lent warm: 1 s of work; 4-20 s at 4: 16; 20-50 s
    # at 1: 7.5; grown back at 50 s, warm at 54 s (1 more); the last 74.5 s from 54 s.
    assert _at(r, "finish_s", "pipe") == pytest.approx(128.5)
    assert _at(r, "wasted_gpu_s", "pipe") == pytest.approx(3 * 4.0)  # the second re-warm of 3 GPUs


def test_the_lazy_preemptor_prices_its_shrink_with_its_rewarm():
    lazy = LazyPreemptor(checkpoint_restore_s=0.0, min_recheck_s=1.0, max_recheck_s=10.0)
    r = _run([_pipe(setup_s=0.1, rewarm_s=4.0), _train(3.0)], preemptor=lazy)
    assert "swap(s) of 4 s" in r.decisions[0][4]


def test_its_parallel_fraction_sets_its_rate_below_its_maximum():
    r = _run([_pipe(parallel_fraction=0.5), _train(3.0)])
    # At 1 of 4 GPUs it runs 0.5 + 0.5 x 4 = 2.5x longer: 20-50 s do 12 s of work; 100 - 32 = 68 left.
    assert _at(r, "finish_s", "pipe") == pytest.approx(118.0)


def test_shrinking_it_while_its_lent_gpus_warm_up_is_futile():
    r = _run([_pipe(setup_s=10.0), _train(3.0, arrival_s=5.0)])
    assert "(in setup)" in r.decisions[0][4]
    assert _at(r, "futile_preemptions", "pipe") == 1
    # 10-35 s at 1 GPU: 6.25 s of work; grown at 35 s, warm at 45 s (2.5 more); 91.25 left.
    assert _at(r, "finish_s", "pipe") == pytest.approx(136.25)
    # Setup GPU-time: 10 (minimum) + 3 x 5 (lent, until the shrink) + 3 x 10 (lent again) = 55; needs 40.
    assert _at(r, "wasted_gpu_s", "pipe") == pytest.approx(15.0)


def test_never_preemption_lets_it_keep_what_it_was_lent():
    r = _run([_pipe(), _train(2.0)], preemptor=NeverPreemptor())
    assert _at(r, "finish_s", "pipe") == pytest.approx(100.0)
    assert _at(r, "finish_s", "train") == pytest.approx(130.0)
    assert r.decisions == ()


def test_an_elastic_job_at_its_maximum_is_never_evicted_a_rigid_one_is():
    one = [Node(node_id="n0", gpu_model="A", num_gpus=1)]
    short = Job(job_id="short", arrival_s=100.0, duration_s=50.0, num_gpus=1.0)
    for max_gpus, short_jct in ((None, 50.0), (1.0, 950.0)):
        long = Job(job_id="long", arrival_s=0.0, duration_s=1000.0, num_gpus=1.0, max_gpus=max_gpus)
        r = _run([long, short], policy=SrtfPolicy(), nodes=one)
        assert _at(r, "finish_s", "short") - 100.0 == pytest.approx(short_jct)


def test_elastic_jobs_that_cannot_grow_replay_as_rigid_jobs():
    rng = np.random.default_rng(4)
    nodes = [Node(node_id=f"n{k}", gpu_model="A", num_gpus=4) for k in range(3)]
    arrivals, durations = np.cumsum(rng.exponential(60.0, 80)), rng.lognormal(5.0, 1.0, 80)
    gpus = rng.choice([1.0, 2.0, 4.0], 80)

    def trace(elastic):
        return [Job(job_id=f"j{k}", arrival_s=float(a), duration_s=float(d), num_gpus=float(g),
                    max_gpus=float(g) if elastic else None)
                for k, (a, d, g) in enumerate(zip(arrivals, durations, gpus))]

    runs = [Simulator(nodes=nodes, policy=FifoPolicy(), placer=FirstFitPlacer(), preemptor=NeverPreemptor(),
                      config=EngineConfig(seed=1)).run(trace(e)) for e in (False, True)]
    for attr in ("first_start_s", "finish_s", "queued_s", "setup_gpu_s", "wasted_gpu_s", "used_gpus"):
        assert np.array_equal(getattr(runs[0], attr), getattr(runs[1], attr)), attr


@pytest.mark.parametrize("field, value", [("max_gpus", 0.0), ("max_gpus", 2.5), ("parallel_fraction", 0.0),
                                          ("parallel_fraction", 1.5), ("rewarm_s", -1.0)])
def test_bad_elastic_fields_name_the_field(field, value):
    with pytest.raises(ConfigError, match=field):
        Job(job_id="p", arrival_s=0.0, duration_s=1.0, num_gpus=1.0, **{field: value})
