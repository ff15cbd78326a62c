"""The Pollux progress model: rates from the measured tables, checked by hand."""
import math

import pytest

from trident.errors import ConfigError
from trident.sched.elastic import ElasticView, OptimusAlloc, TiresiasAlloc
from trident.sim.pollux_apps import application, normal_placement, packed_placement
from trident.sim.rounds import ElasticJob, RoundConfig, replay


def test_placement_normal_form_and_packing():
    assert normal_placement((0, 2, 1, 0, 4)) == (1, 4, 2)
    assert packed_placement(10) == (4, 4, 2) and packed_placement(4) == (4,)


def test_yolov3_step_time_and_gain_from_the_tables():
    app = application("yolov3")
    lb = app.local_batch(64, 4)          # 16 per GPU > cap 8: one accumulation pass of 8
    assert (lb.atomic_bsz, lb.accum_steps) == (8, 1)
    step, sync = 0.5009251087903976, 0.11896183347702027     # placements.csv row "4,8"
    assert app.iteration_s((4,), lb) == pytest.approx(step + (step - sync))
    sqr, var = 3.7324e6, 1.8606e5                              # validation-64.csv, epoch 0
    assert app.gain(64, 0) == pytest.approx((var + sqr) / (var / 8 + sqr))
    assert app.gain(8, 3) == pytest.approx(1.0)                # the base batch gains nothing


def test_interpolation_between_measured_batch_sizes():
    app = application("yolov3")
    # halfway between the 4- and 6-sample rows of placement "1"
    assert app.step_sync_s((1,), 5)[0] == pytest.approx((0.26693882048130035 + 0.45066384971141815) / 2)
    assert app.iterations(48, 0) == pytest.approx((579 + 926) / 2)   # between validation-32 and -64


def test_a_lone_job_finishes_when_the_tables_say():
    app = application("yolov3")
    lb = app.local_batch(64, 4)
    it_s = app.iteration_s((4,), lb)
    p = app.progress_by_epoch
    run_s = sum((p[e + 1] - p[e]) * it_s / app.gain(64, e) for e in range(app.max_epochs))
    res = replay([ElasticJob("y", "yolov3", 0.0, 4, 64)], TiresiasAlloc())
    # allocated at the first round (60 s), 30 s restart, then the epochs (rounded to 1 s each)
    assert res.jct_s[0] == pytest.approx(60 + 30 + run_s, abs=app.max_epochs)
    assert res.restarts[0] == 0


def test_tiresias_gangs_demotes_and_preempts():
    app = application("cifar10")
    pol = TiresiasAlloc(threshold_gpu_s=120.0)
    big = {"a": ElasticView("a", 4, app, 2048, 0)}
    first = pol.allocate(60, big, [4, 4], {})
    assert sorted(first["a"]) == [0, 0, 0, 0]
    jobs = {"a": big["a"], "b": ElasticView("b", 8, app, 2048, 0)}
    # "a" has run 60 s x 4 GPUs = 240 GPU-s >= 120: demoted, so the new "b" (8 GPUs) goes first
    second = pol.allocate(120, jobs, [4, 4], first)
    assert "a" not in second and len(second["b"]) == 8


def test_optimus_gives_every_job_one_gpu_then_marginal_gains():
    app = application("cifar10")
    pol = OptimusAlloc()
    jobs = {k: ElasticView(k, 64, app, 2048, 0) for k in "abc"}
    alloc = pol.allocate(60, jobs, [4, 4], {})
    assert sum(map(len, alloc.values())) == 8 and all(len(v) >= 1 for v in alloc.values())
    assert pol.step_s(jobs["a"], 2) < pol.step_s(jobs["a"], 1)


def test_bad_inputs_are_named():
    with pytest.raises(ConfigError, match="application"):
        application("resnet")
    with pytest.raises(ConfigError, match="restart_s"):
        RoundConfig(restart_s=-1)
    with pytest.raises(ConfigError, match="max_rounds"):
        replay([ElasticJob("y", "yolov3", 0.0, 4, 64)], TiresiasAlloc(), RoundConfig(max_rounds=3))
    assert math.isfinite(application("bert").gain(384, 1))


def test_a_pollux_job_larger_than_the_cluster_is_a_named_bad_row(tmp_path):
    """A job asking for more GPUs than the testbed has is reported with its file and line (its run
    time would need a placement over thousands of nodes)."""
    from trident.sim.loaders.pollux import load_pollux
    from trident.errors import TraceFormatError

    f = tmp_path / "workload.csv"
    f.write_text("name,time,application,num_replicas,batch_size\na,0,yolov3,4,64\nb,5,yolov3,100000,64\n")
    with pytest.raises(TraceFormatError, match=r"workload.csv:3: num_replicas=100000 is more GPUs than the 16 x 4"):
        load_pollux(f)
    trace = load_pollux(f, skip_bad=True)
    assert [j.job_id for j in trace.jobs] == ["a"]
