"""The discrete-event simulator: timing, heterogeneity, fractional GPUs, preemption, determinism."""
from dataclasses import dataclass

import numpy as np
import pytest

from trident.core.errors import ConfigError
from trident.jobs.base import Job, Node, PreemptDecision, Verdict
from trident.jobs.baselines import FifoPolicy, SrtfPolicy
from trident.jobs.placement import BestFitPlacer, FirstFitPlacer
from trident.sim.engine import EngineConfig, SetupModel, Simulator
from trident.sim.metrics import summarize

NO_SETUP = EngineConfig(setup=SetupModel(kind="none"), restore_s=0.0)


@dataclass
class ScriptedPreemptor:
    """Answers every request with one verdict (DELAY_UNTIL: ``delay_s`` after now)."""

    verdict: Verdict
    delay_s: float = 0.0
    name: str = "scripted"
    oracle: bool = False

    def decide(self, *, blocked, victim, state, predictor) -> PreemptDecision:
        if self.verdict is Verdict.DELAY_UNTIL:
            return PreemptDecision(self.verdict, "test: later", until_s=state.now + self.delay_s)
        return PreemptDecision(self.verdict, f"test: {self.verdict.value}")


def _sim(nodes, policy=None, preemptor=None, config=NO_SETUP, placer=None):
    return Simulator(nodes=nodes, policy=policy or FifoPolicy(), placer=placer or FirstFitPlacer(),
                     preemptor=preemptor, config=config)


def _jct(result, job_id):
    i = result.job_ids.index(job_id)
    return result.finish_s[i] - result.arrival_s[i]


def test_one_job_runs_setup_then_its_duration_scaled_by_speed():
    nodes = [Node(node_id="n0", gpu_model="A", num_gpus=1)]
    cfg = EngineConfig(setup=SetupModel(kind="fixed", median_s=50.0))
    job = Job(job_id="j", arrival_s=10.0, duration_s=400.0, num_gpus=1.0, speed_by_model={"A": 2.0})
    r = _sim(nodes, config=cfg).run([job])
    assert r.first_start_s[0] == 10.0
    assert r.finish_s[0] == pytest.approx(10.0 + 50.0 + 200.0)
    assert r.wasted_gpu_s[0] == pytest.approx(0.0)


def test_second_job_queues_behind_the_first_on_one_gpu():
    nodes = [Node(node_id="n0", gpu_model="A", num_gpus=1)]
    jobs = [Job(job_id="a", arrival_s=0.0, duration_s=100.0, num_gpus=1.0),
            Job(job_id="b", arrival_s=10.0, duration_s=100.0, num_gpus=1.0)]
    r = _sim(nodes).run(jobs)
    assert _jct(r, "b") == pytest.approx(190.0)
    assert r.queued_s[r.job_ids.index("b")] == pytest.approx(90.0)
    m = summarize(r)
    assert m["avg_jct_s"] == pytest.approx(145.0)
    assert m["gpu_util_pct"] == pytest.approx(100.0)


def test_fractional_jobs_share_a_device_and_a_third_waits():
    nodes = [Node(node_id="n0", gpu_model="A", num_gpus=1)]
    jobs = [Job(job_id=f"j{k}", arrival_s=0.0, duration_s=100.0, num_gpus=0.5) for k in range(3)]
    r = _sim(nodes).run(jobs)
    assert sorted(r.finish_s.tolist()) == pytest.approx([100.0, 100.0, 200.0])
    assert r.used_gpus.max() == pytest.approx(1.0)


def test_gpu_model_constraint_and_speed_pick_the_allowed_model():
    nodes = [Node(node_id="slow", gpu_model="K80", num_gpus=1), Node(node_id="fast", gpu_model="V100", num_gpus=1)]
    job = Job(job_id="j", arrival_s=0.0, duration_s=300.0, num_gpus=1.0, gpu_models=("V100",),
              speed_by_model={"V100": 3.0})
    r = _sim(nodes).run([job])
    assert r.finish_s[0] == pytest.approx(100.0)


def test_job_that_can_never_fit_is_reported_not_replayed():
    nodes = [Node(node_id="n0", gpu_model="A", num_gpus=2)]
    jobs = [Job(job_id="big", arrival_s=0.0, duration_s=10.0, num_gpus=4.0, gpu_models=("B",)),
            Job(job_id="ok", arrival_s=0.0, duration_s=10.0, num_gpus=2.0)]
    r = _sim(nodes).run(jobs)
    assert r.unschedulable == ("big",)
    assert r.job_ids == ("ok",)


def _preemption_case(verdict, delay_s=0.0, setup_s=0.0, checkpoints=True):
    nodes = [Node(node_id="n0", gpu_model="A", num_gpus=1)]
    cfg = EngineConfig(setup=SetupModel(kind="fixed", median_s=setup_s) if setup_s else SetupModel(kind="none"),
                       restore_s=20.0, tick_s=None)
    jobs = [Job(job_id="long", arrival_s=0.0, duration_s=1000.0, num_gpus=1.0, checkpoints=checkpoints),
            Job(job_id="short", arrival_s=100.0, duration_s=50.0, num_gpus=1.0)]
    return _sim(nodes, policy=SrtfPolicy(), preemptor=ScriptedPreemptor(verdict, delay_s), config=cfg).run(jobs)


def test_srtf_with_eager_preemption_evicts_the_long_job():
    r = _preemption_case(Verdict.PREEMPT_NOW)
    assert _jct(r, "short") == pytest.approx(50.0)
    # long: 100 s done, waits 50 s, restores 20 s, then its last 900 s.
    assert r.finish_s[r.job_ids.index("long")] == pytest.approx(100 + 50 + 20 + 900)
    m = summarize(r)
    assert m["preemptions"] == 1 and m["futile_preemptions"] == 0
    assert r.wasted_gpu_s[r.job_ids.index("long")] == pytest.approx(20.0)
    assert r.verdicts["preempt_now"] == 1


def test_a_job_that_does_not_checkpoint_restarts_from_zero_and_its_progress_is_wasted():
    r = _preemption_case(Verdict.PREEMPT_NOW, checkpoints=False)
    # long: 100 s done and lost, waits 50 s, then all 1000 s again (nothing to restore)
    assert r.finish_s[r.job_ids.index("long")] == pytest.approx(100 + 50 + 1000)
    assert r.wasted_gpu_s[r.job_ids.index("long")] == pytest.approx(100.0)
    assert summarize(r)["preemptions"] == 1


def test_preempting_during_setup_is_futile_and_wastes_the_setup():
    r = _preemption_case(Verdict.PREEMPT_NOW, setup_s=300.0)
    m = summarize(r)
    assert m["futile_preemptions"] == 1
    # 100 s of lost setup; the restart sets up again (no progress, so no restore).
    assert r.wasted_gpu_s[r.job_ids.index("long")] == pytest.approx(100.0)
    assert m["wasted_gpu_pct"] > 0


def test_do_not_preempt_keeps_the_long_job_running():
    r = _preemption_case(Verdict.DO_NOT)
    assert summarize(r)["preemptions"] == 0
    assert _jct(r, "short") == pytest.approx(1000.0 - 100.0 + 50.0)
    assert r.verdicts["do_not"] >= 1


def test_delay_until_retries_at_the_given_time():
    r = _preemption_case(Verdict.DELAY_UNTIL, delay_s=200.0)
    assert summarize(r)["preemptions"] == 0  # every retry is delayed again
    assert r.verdicts["delay_until"] >= 2
    assert any(d[3] == "delay_until" and d[0] == pytest.approx(300.0) for d in r.decisions)


def _random_jobs(n, seed):
    rng = np.random.default_rng(seed)
    gpus = rng.choice([0.25, 0.5, 1.0, 2.0, 4.0, 8.0], size=n)
    return [Job(job_id=f"j{k}", arrival_s=float(a), duration_s=float(d), num_gpus=float(g),
                speed_by_model={"B": 1.5})
            for k, (a, d, g) in enumerate(zip(np.cumsum(rng.exponential(30, n)), rng.lognormal(6, 1, n), gpus))]


CLUSTER = [Node(node_id=f"a{k}", gpu_model="A", num_gpus=4) for k in range(3)] + \
          [Node(node_id=f"b{k}", gpu_model="B", num_gpus=8) for k in range(2)]


@pytest.mark.parametrize("placer", [FirstFitPlacer(), BestFitPlacer()])
def test_every_job_finishes_once_and_capacity_is_never_exceeded(placer):
    jobs = _random_jobs(300, seed=1)
    r = _sim(CLUSTER, config=EngineConfig(seed=3), placer=placer).run(jobs)
    assert sorted(r.job_ids) == sorted(j.job_id for j in jobs)
    assert np.all(np.isfinite(r.finish_s))
    assert np.all(r.finish_s >= r.first_start_s) and np.all(r.first_start_s >= r.arrival_s)
    assert r.used_gpus.max() <= r.total_gpus + 1e-9
    assert r.used_gpus[-1] == pytest.approx(0.0)
    assert 0 < summarize(r)["gpu_util_pct"] <= 100


def test_same_seed_same_result_other_seed_other_setup_times():
    jobs = _random_jobs(120, seed=2)
    a = _sim(CLUSTER, config=EngineConfig(seed=7)).run(jobs)
    b = _sim(CLUSTER, config=EngineConfig(seed=7)).run(jobs)
    c = _sim(CLUSTER, config=EngineConfig(seed=8)).run(jobs)
    assert summarize(a) == summarize(b)
    assert np.array_equal(a.finish_s, b.finish_s)
    assert not np.array_equal(a.finish_s, c.finish_s)


def test_default_setup_is_minutes_to_tens_of_minutes():
    s = SetupModel().sample(np.random.default_rng(0), 20000)
    assert 270 < np.median(s) < 330
    assert 1300 < np.percentile(s, 95) < 1700


def test_bad_config_names_the_parameter():
    with pytest.raises(ConfigError, match="queue_window"):
        EngineConfig(queue_window=0)
    with pytest.raises(ConfigError, match="setup.kind"):
        SetupModel(kind="gamma")
