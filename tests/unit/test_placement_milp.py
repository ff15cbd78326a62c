"""The ``milp`` placer: constraints respected, optimal against brute force, validated, fallback."""
import itertools

import numpy as np
import pytest

from trident.core.errors import ConfigError
from trident.jobs.base import PLACERS, Allocation, Job, Node
from trident.jobs.placement_milp import MilpPlacer, _valid
from trident.jobs.capacity import Cluster


def _cluster(sizes, models=None, used=None, cpus=64.0):
    models = models or ["A"] * len(sizes)
    nodes = [Node(f"n{i}", m, s, cpus=cpus, memory_mib=1e6) for i, (s, m) in enumerate(zip(sizes, models))]
    c = Cluster(nodes)
    for i, u in enumerate(used or []):
        if u:
            filler = Job(f"fill{i}", 0.0, 1.0, float(u))
            devices = tuple((i, d, 1000) for d in range(u))
            c.allocate(filler, Allocation(nodes[i].gpu_model, devices, (nodes[i].node_id,)))
    return c


def _per_node(alloc):
    out = {}
    for node, _, milli in alloc.devices:
        out[node] = out.get(node, 0) + milli // 1000
    return out


def test_registered_and_validated():
    assert "milp" in PLACERS
    with pytest.raises(ConfigError, match="solver"):
        MilpPlacer(solver="gurobi")
    with pytest.raises(ConfigError, match="time_limit_s"):
        MilpPlacer(time_limit_s=0)


def test_gpu_model_cpu_and_memory_constraints_are_respected():
    c = _cluster([4, 4, 8], models=["A", "B", "B"], used=[0, 3, 0], cpus=8.0)
    placer = MilpPlacer()
    job = Job("j", 0.0, 10.0, 2.0, gpu_models=("B",), cpus=8.0)
    alloc = placer.place(job, c)
    assert alloc is not None and alloc.gpu_model == "B" and alloc.gpu_milli == 2000
    # Only B nodes; n1 has 1 free GPU: one node (n2) is preferred to a split over n1 and n2.
    assert _per_node(alloc) == {2: 2}
    assert _valid(alloc, job, c)
    too_many_cpus = Job("k", 0.0, 10.0, 1.0, gpu_models=("B",), cpus=9.0)
    assert placer.place(too_many_cpus, c) is None
    only_c = Job("m", 0.0, 10.0, 1.0, gpu_models=("C",))
    assert placer.place(only_c, c) is None


def test_fraction_goes_on_a_device_with_room_preferring_shared_devices():
    c = _cluster([2, 2])
    half = Job("h", 0.0, 10.0, 0.5)
    first = MilpPlacer().place(half, c)
    c.allocate(half, first)
    second = MilpPlacer().place(Job("h2", 0.0, 10.0, 0.4), c)
    # Best fit: the already shared device (500 milli free) rather than breaking a whole GPU.
    assert second.devices[0][:2] == first.devices[0][:2]
    assert MilpPlacer().place(Job("big", 0.0, 10.0, 0.6), _cluster([1], used=[1])) is None


def _brute_force(placer, job, c):
    k = job.gpu_milli // 1000
    best = None
    for model in c.gpu_models:
        if not job.allows(model):
            continue
        idx = c.node_indices(model).tolist()
        full = c.free_full_gpus(model).tolist()
        cpus = c.free_cpus(model).tolist()
        hold = [min(f, k, int(cp // (job.cpus / k)) if job.cpus else k) for f, cp in zip(full, cpus)]
        for xs in itertools.product(*[range(h + 1) for h in hold]):
            if sum(xs) != k:
                continue
            take = {i: x for i, x in zip(idx, xs) if x > 0}
            value = placer.objective(job, c, take)
            best = value if best is None else min(best, value)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_milp_is_optimal_against_brute_force(seed):
    rng = np.random.default_rng(seed)
    sizes = rng.choice([2, 4], size=4).tolist()
    models = rng.choice(["A", "B"], size=4).tolist()
    used = [int(rng.integers(0, s + 1)) for s in sizes]
    c = _cluster(sizes, models=models, used=used, cpus=16.0)
    placer = MilpPlacer()
    job = Job("j", 0.0, 10.0, float(rng.integers(1, 5)), cpus=float(rng.choice([0, 4])),
              speed_by_model={"A": 1.0, "B": float(rng.choice([1.0, 1.5]))})
    alloc = placer.place(job, c)
    best = _brute_force(placer, job, c)
    if best is None:
        assert alloc is None
        return
    assert alloc is not None and "milp" in alloc.reason and "fallback" not in alloc.reason
    assert _valid(alloc, job, c)
    assert placer.objective(job, c, _per_node(alloc)) == pytest.approx(best, abs=1e-6)


def test_milp_packs_instead_of_fragmenting_a_free_node():
    # n0 has 2 of 4 GPUs free, n1 is wholly free: a 2-GPU job should fill n0 and keep n1 whole.
    c = _cluster([4, 4], used=[2, 0])
    alloc = MilpPlacer().place(Job("j", 0.0, 10.0, 2.0), c)
    assert _per_node(alloc) == {0: 2}


def test_cbc_gives_the_same_optimum():
    c = _cluster([4, 4, 2], used=[1, 3, 0])
    job = Job("j", 0.0, 10.0, 3.0)
    a = MilpPlacer(solver="highs").place(job, c)
    b = MilpPlacer(solver="cbc").place(job, c)
    placer = MilpPlacer()
    assert placer.objective(job, c, _per_node(a)) == pytest.approx(placer.objective(job, c, _per_node(b)))


def test_solver_failure_falls_back_to_best_fit(monkeypatch):
    c = _cluster([4, 4], used=[1, 0])
    monkeypatch.setattr(MilpPlacer, "_solve", lambda self, *a: (None, "status Not Solved / No Solution Found"))
    alloc = MilpPlacer().place(Job("j", 0.0, 10.0, 3.0), c)
    assert alloc is not None and "best-fit fallback" in alloc.reason and "Not Solved" in alloc.reason
    assert _per_node(alloc) == {0: 3}


def test_an_invalid_solution_is_rejected(monkeypatch):
    c = _cluster([4, 4], used=[4, 0])
    # A "solution" giving the job 3 GPUs instead of 2 fails validation; the placer falls back to best fit.
    monkeypatch.setattr(MilpPlacer, "_solve", lambda self, job, k, slots, cap, speed: ({0: 3}, "optimal"))
    alloc = MilpPlacer().place(Job("j", 0.0, 10.0, 2.0), c)
    assert alloc is not None and _valid(alloc, Job("j", 0.0, 10.0, 2.0), c)
    assert "fallback" in alloc.reason
