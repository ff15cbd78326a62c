"""The job scheduler's pure rebuild of its cluster view when nodes die or join."""
from trident.jobs.base import Job, Node
from trident.jobs.cluster_view import rebuild
from trident.jobs.placement import FirstFitPlacer


def _job(job_id, gpus):
    return Job(job_id=job_id, arrival_s=0.0, duration_s=1.0, num_gpus=gpus)


def test_jobs_on_a_dead_node_are_lost_the_others_keep_their_devices():
    a, b, c = (Node(node_id=n, gpu_model="GPU", num_gpus=2) for n in "abc")
    old = rebuild([a, b], (), {}).cluster
    on_a, on_b = _job("on-a", 2), _job("on-b", 1)
    placer = FirstFitPlacer()
    alloc_a = placer.place(on_a, old)
    old.allocate(on_a, alloc_a)
    alloc_b = placer.place(on_b, old)
    old.allocate(on_b, alloc_b)
    assert alloc_a.node_ids == ("a",) and alloc_b.node_ids == ("b",)

    view = rebuild([c, b], old.nodes, {"on-a": (on_a, alloc_a), "on-b": (on_b, alloc_b)})
    assert view.lost == ("on-a",)
    kept = view.allocations["on-b"]
    assert view.cluster.nodes[kept.devices[0][0]].node_id == "b"  # re-indexed onto the new view
    assert view.cluster.free_gpus_by_model() == {"GPU": 3.0}  # c's two GPUs and b's second one
    assert {n.node_id for n in view.cluster.nodes} == {"b", "c"}


def test_no_gpu_node_left_gives_no_view():
    view = rebuild([Node(node_id="head", gpu_model="GPU", num_gpus=0)], (), {})
    assert view.cluster is None and view.lost == ()
