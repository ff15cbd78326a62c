"""A pipeline's GPU budget: pool targets that fit it, and GPUs lent to a pipeline."""
from trident.autoscaler.shim.budget import fit_to_budget
from trident.jobs.base import Job, Node
from trident.jobs.capacity import Cluster
from trident.jobs.pipelines import combine, free_devices


def test_the_largest_gpu_pool_shrinks_first_and_never_below_its_minimum():
    pools = {"ocr": (4, 0.5, 1), "embed": (4, 1.0, 1), "parse": (8, 0.0, 1)}
    assert fit_to_budget(pools, 6.0) == {"ocr": 4, "embed": 4, "parse": 8}  # 2 + 4 fits
    out = fit_to_budget(pools, 3.0)
    assert out["parse"] == 8 and out["ocr"] * 0.5 + out["embed"] <= 3.0 and out["embed"] < 4
    assert fit_to_budget(pools, 0.0) == {"ocr": 1, "embed": 1, "parse": 8}  # a pool keeps one actor
    assert fit_to_budget({"embed": (4, 1.0, 2)}, 1.0) == {"embed": 2}


def test_lent_gpus_are_whole_free_devices_preferring_the_pipelines_node():
    c = Cluster([Node("a", "A", 4), Node("b", "A", 4), Node("c", "B", 4)])
    base = free_devices(c, "A", 1, prefer=("b",))
    assert base.node_ids == ("b",)
    job = Job(job_id="p", arrival_s=0.0, duration_s=1.0, num_gpus=1.0)
    c.allocate(job, base)
    more = free_devices(c, "A", 5, prefer=("b",))
    assert more.gpu_milli == 5000 and more.node_ids[0] == "b"
    assert free_devices(c, "A", 8) is None and free_devices(c, "C", 1) is None
    both = combine(base, more)
    assert both.gpu_milli == 6000 and set(both.node_ids) == {"a", "b"}
    c.allocate(job, more)
    assert c.free_gpus_by_model() == {"A": 2.0, "B": 4.0}
