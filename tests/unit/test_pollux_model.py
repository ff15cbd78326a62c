"""The Pollux progress model: rates from the measured tables, checked by hand."""
import math

import pytest

from trident.core.errors import ConfigError
from trident.jobs.elastic import ElasticView, OptimusAlloc, TiresiasAlloc
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


def test_iterations_above_the_largest_validated_batch_cover_the_same_samples_in_larger_steps():
    imagenet = application("imagenet")                         # curves at 200 and 800, trains up to 12,800
    it800 = {0: 2267, 89: 150231}                              # validation-800.csv, epochs 0 and 89
    assert imagenet.iterations(800, 89) == pytest.approx(it800[89])
    assert imagenet.iterations(6400, 89) == pytest.approx(it800[89] * 800 / 6400)
    assert imagenet.iterations(3200, 0) == pytest.approx(it800[0] * 800 / 3200)
    cifar10 = application("cifar10")                           # largest curve and largest batch: 2048
    # a job asking for 4096 trains at 2048, so it takes the 2048 curve's steps
    assert cifar10.iterations(4096, 99) == pytest.approx(cifar10.iterations(2048, 99)) == pytest.approx(3178)


class _FlatApp:
    """A stand-in application: one pass takes ``atomic_bsz`` seconds, no sync; ``total_steps``
    optimizer steps by the end of the last of 3 epochs, none at the end of the first."""

    max_local_bsz = max_batch_size = 1000
    max_epochs = 3

    def __init__(self, total_steps):
        self.total_steps = total_steps

    def step_sync_s(self, placement, atomic_bsz):
        return float(atomic_bsz), 0.0

    def iterations(self, batch_size, epoch):
        return 0.0 if epoch == 0 else float(self.total_steps)


def test_optimus_marginal_gains_by_hand():
    # batch 12: 1 GPU = 2 passes of 6 (accumulation forced) = 12 s; 2 GPUs 6 s; 3 GPUs 4 s; 4 GPUs 3 s
    pol = OptimusAlloc()
    a = ElasticView("a", 4, _FlatApp(100), 12, 0)
    assert [pol.step_s(a, n) for n in (1, 2, 3, 4)] == [12.0, 6.0, 4.0, 3.0]
    assert pol.remaining_steps(a) == 100.0 and pol.remaining_steps(ElasticView("z", 4, _FlatApp(100), 12, 2)) == 1.0
    # one GPU each, 2 left. Gains: a (12-6) x 100 = 600, b (12-6) x 30 = 180 -> a; a (6-4) x 100 = 200 > 180 -> a
    b = ElasticView("b", 4, _FlatApp(30), 12, 0)
    alloc = pol.allocate(60, {"a": a, "b": b}, [2, 2], {})
    assert alloc == {"b": (0,), "a": (1, 1, 0)}    # smallest first onto the emptiest node, ties to the lowest
    # b with 60 steps left: (12-6) x 60 = 360 > a's 200 for its third GPU -> 2 and 2
    b = ElasticView("b", 4, _FlatApp(60), 12, 0)
    alloc = pol.allocate(60, {"a": a, "b": b}, [2, 2], {})
    assert sorted(map(len, alloc.values())) == [2, 2]
    # an unchanged count keeps its GPUs; a job at its maximum gets no more
    kept = pol.allocate(120, {"a": a, "b": b}, [2, 2], {"a": (1, 1)})
    assert kept["a"] == (1, 1) and kept["b"] == (0, 0)
    capped = pol.allocate(60, {"a": ElasticView("a", 1, _FlatApp(100), 12, 0)}, [2, 2], {})
    assert capped == {"a": (0,)}


def test_optimus_counts_an_imagenet_jobs_remaining_steps_at_its_own_batch():
    """imagenet at 6,400 has (150231 - 2267) x 800 / 6400 = 18,495.5 steps left after epoch 0,
    not the 800 curve's 147,964. Its second GPU saves 14.63 s a step: 270,550 s predicted, less
    than the 1,000,000 s a short job's second GPU saves, which therefore gets it (with the 800
    curve's count the imagenet job would save 2.16 million s and take it)."""
    pol = OptimusAlloc()
    big = ElasticView("big", 32, application("imagenet"), 6400, 0)
    assert pol.remaining_steps(big) == pytest.approx((150231 - 2267) * 800 / 6400)
    saved = (pol.step_s(big, 1) - pol.step_s(big, 2)) * pol.remaining_steps(big)
    assert 2e5 < saved < 5e5 < 8 * saved
    short = ElasticView("short", 2, _FlatApp(1_000_000), 2, 0)   # 2 s a step on 1 GPU, 1 s on 2
    alloc = pol.allocate(60, {"big": big, "short": short}, [3], {})
    assert len(alloc["big"]) == 1 and len(alloc["short"]) == 2


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
    from trident.core.errors import TraceFormatError

    f = tmp_path / "workload.csv"
    f.write_text("name,time,application,num_replicas,batch_size\na,0,yolov3,4,64\nb,5,yolov3,100000,64\n")
    with pytest.raises(TraceFormatError, match=r"workload.csv:3: num_replicas=100000 is more GPUs than the 16 x 4"):
        load_pollux(f)
    trace = load_pollux(f, skip_bad=True)
    assert [j.job_id for j in trace.jobs] == ["a"]


def test_a_pollux_job_with_no_batch_is_a_named_bad_row(tmp_path):
    """A zero or negative batch size names the field and the line instead of dividing by zero."""
    from trident.sim.loaders.pollux import load_pollux
    from trident.core.errors import TraceFormatError

    f = tmp_path / "workload.csv"
    f.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,2,0\nb,5,cifar10,1,-4\nc,9,cifar10,1,256\n")
    with pytest.raises(TraceFormatError, match=r"workload.csv:2: batch_size=0"):
        load_pollux(f)
    assert [j.job_id for j in load_pollux(f, skip_bad=True).jobs] == ["c"]
