"""Job-layer value types, placers and baseline policies."""
import numpy as np
import pytest

from trident.core.errors import ConfigError, UnknownNameError
from trident.jobs import JOB_POLICIES, PLACERS
from trident.jobs.base import EwmaArrivalPredictor, Job, JobView, Node, PreemptDecision, SchedState, Verdict
from trident.jobs.capacity import Cluster

RNG = np.random.default_rng(0)


def test_job_validation_names_the_field():
    with pytest.raises(ConfigError, match="num_gpus"):
        Job(job_id="j", arrival_s=0, duration_s=1, num_gpus=1.5)
    with pytest.raises(ConfigError, match="duration_s"):
        Job(job_id="j", arrival_s=0, duration_s=0, num_gpus=1)
    assert Job(job_id="j", arrival_s=0, duration_s=1, num_gpus=0.25).gpu_milli == 250


def test_delay_needs_a_time():
    with pytest.raises(ConfigError, match="until_s"):
        PreemptDecision(Verdict.DELAY_UNTIL, "x")
    with pytest.raises(ConfigError, match="until_s"):
        PreemptDecision(Verdict.PREEMPT_NOW, "x", until_s=3.0)


def test_views_report_time_dependent_features():
    job = Job(job_id="j", arrival_s=0, duration_s=100, num_gpus=2)
    q = JobView(job=job, running=False, as_of_s=10, wait_base_s=5, attained_base_s=20, remaining_base_s=80)
    assert q.wait_s(30) == 25 and q.attained_gpu_s(30) == 40 and q.remaining_s(30) == 80
    assert not q.in_setup(30)
    r = JobView(job=job, running=True, as_of_s=10, wait_base_s=5, attained_base_s=20, setup_ends_s=40,
                speed=2.0, remaining_base_s=80)
    assert r.in_setup(30) and r.setup_elapsed_s(30) == 20 and r.setup_left_s(30) == 10
    assert r.remaining_s(50) == 60  # 10 s past setup at speed 2
    hidden = JobView(job=job, running=True, as_of_s=10, wait_base_s=0, attained_base_s=0)
    assert hidden.remaining_s(50) is None


def test_arrival_predictor_tracks_the_interval():
    p = EwmaArrivalPredictor(alpha=0.5, initial_interval_s=100)
    for t in (0, 10, 20, 30, 40):
        p.observe(t)
    assert 10 < p.predict_interval_s(40) < 20


def test_registries_list_built_ins_and_reject_unknown_names():
    assert {"fifo", "sjf", "srtf", "tiresias", "gavel"} <= set(JOB_POLICIES.names())
    assert {"first-fit", "best-fit", "speed"} <= set(PLACERS.names())
    with pytest.raises(UnknownNameError, match="fifo"):
        JOB_POLICIES.get("lifo")


def _cluster():
    return Cluster([Node(node_id="n0", gpu_model="A", num_gpus=4, cpus=8, memory_mib=1000),
                    Node(node_id="n1", gpu_model="A", num_gpus=2, cpus=8, memory_mib=1000),
                    Node(node_id="n2", gpu_model="B", num_gpus=2, cpus=8, memory_mib=1000)])


def test_first_fit_and_best_fit_choose_different_nodes():
    job = Job(job_id="j", arrival_s=0, duration_s=1, num_gpus=2, gpu_models=("A",))
    c = _cluster()
    assert PLACERS.create("first-fit").place(job, c).node_ids == ("n0",)
    assert PLACERS.create("best-fit").place(job, c).node_ids == ("n1",)


def test_placement_respects_cpu_memory_and_fractions():
    c = _cluster()
    fat = Job(job_id="f", arrival_s=0, duration_s=1, num_gpus=1, cpus=9)
    assert PLACERS.create("first-fit").place(fat, c) is None
    half = Job(job_id="h", arrival_s=0, duration_s=1, num_gpus=0.5)
    a = PLACERS.create("best-fit").place(half, c)
    c.allocate(half, a)
    b = PLACERS.create("best-fit").place(half, c)
    assert b.devices[0][:2] == a.devices[0][:2]  # best-fit fills the half-used device
    c.allocate(half, b)
    assert c.free_gpus_by_model()["A"] + c.free_gpus_by_model()["B"] == pytest.approx(7.0)
    c.release(half, a)
    c.release(half, b)
    assert c.free_gpus_by_model() == {"A": 6.0, "B": 2.0}


def test_gang_job_spans_nodes_of_one_model_and_speed_placer_prefers_fast_model():
    c = _cluster()
    gang = Job(job_id="g", arrival_s=0, duration_s=1, num_gpus=6, gpu_models=("A",))
    a = PLACERS.create("first-fit").place(gang, c)
    assert a.gpu_milli == 6000 and set(a.node_ids) == {"n0", "n1"}
    job = Job(job_id="s", arrival_s=0, duration_s=1, num_gpus=1, speed_by_model={"B": 2.0})
    assert PLACERS.create("speed").place(job, c).gpu_model == "B"


def _view(job_id, arrival, duration, gpus=1.0, running=False, attained=0.0, as_of=None):
    job = Job(job_id=job_id, arrival_s=arrival, duration_s=duration, num_gpus=gpus)
    return JobView(job=job, running=running, as_of_s=arrival if as_of is None else as_of, wait_base_s=0.0,
                   attained_base_s=attained, remaining_base_s=duration, setup_ends_s=0.0)


def _state(now, queued, running=()):
    return SchedState(now=now, queued=list(queued), running={v.job_id: v for v in running},
                      total_gpus_by_model={"A": 8.0}, free_gpus_by_model={"A": 0.0})


def test_fifo_sjf_srtf_orders():
    q = [_view("late-short", 20, 10), _view("early-long", 0, 1000), _view("mid", 10, 100)]
    run = [_view("running", 0, 50, running=True)]
    assert JOB_POLICIES.create("fifo").order(_state(30, q), RNG) == ("early-long", "mid", "late-short")
    assert JOB_POLICIES.create("sjf").order(_state(30, q), RNG) == ("late-short", "mid", "early-long")
    srtf = JOB_POLICIES.create("srtf").order(_state(30, q, run), RNG)
    assert srtf[:2] == ("late-short", "running") and srtf[-1] == "early-long"


def test_tiresias_demotes_by_attained_gpu_service_and_promotes_starving_jobs():
    tir = JOB_POLICIES.create("tiresias", thresholds_gpu_s=(100.0,), promote_factor=2.0, min_promote_wait_s=0.0)
    hog = _view("hog", 0, 1000, gpus=4, running=True, attained=0.0, as_of=0)   # 4 GPUs x 50 s = 200 GPU-s
    new = _view("new", 40, 1000)
    assert tir.order(_state(50, [new], [hog]), RNG) == ("new", "hog")
    starving = _view("starving", 0, 1000, attained=10.0, as_of=20)           # ran 10 s, queued 30 s since
    fresh = _view("fresh", 45, 1000)
    assert tir.queue_index(starving, 50) == 0
    assert tir.order(_state(50, [fresh, starving]), RNG) == ("starving", "fresh")


def test_gavel_ranks_the_job_furthest_behind_its_isolated_run_first():
    gav = JOB_POLICIES.create("gavel")
    short_waited = _view("short", 0, 100)     # rho = (1000 + 100) / 100
    long_waited = _view("long", 0, 10000)     # rho = (1000 + 10000) / 10000
    assert gav.order(_state(1000, [long_waited, short_waited]), RNG) == ("short", "long")


def test_a_policy_that_can_rank_running_jobs_does_so_only_beside_a_preemptor_that_may_evict():
    from trident.jobs.base import create_policy
    from trident.jobs.scheduler import JobScheduler

    assert create_policy("rltune", "lazy").preemptive and create_policy("rltune", "eager").preemptive
    assert not create_policy("rltune", None).preemptive and not create_policy("rltune", "never").preemptive
    assert not create_policy("fifo", "lazy").preemptive  # a policy that never ranks running jobs is left as it is
    assert create_policy("srtf", None).preemptive  # and one that always does
    assert JobScheduler(policy="rltune", preemption="lazy").policy.preemptive
    assert not JobScheduler(policy="rltune").policy.preemptive
