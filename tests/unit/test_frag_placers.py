"""FGD experiment placers on small clusters with known outcomes; the fragmentation measure by hand."""
import numpy as np
import pytest

from trident.core.errors import ConfigError
from trident.jobs.frag_placers import FragPlacer
from trident.jobs.fragmentation import NodeArrays, PodShape, Typical, fragmentation, typical_pods
from trident.sim.allocation import Cluster, run, tune

SHARE = PodShape(4000, 1024, 1, 500)
WHOLE = PodShape(8000, 1024, 1, 1000)
CPU = PodShape(4000, 1024, 0, 0)


def nodes(*gpus, cpu=64000):
    return NodeArrays([cpu] * len(gpus), [1 << 20] * len(gpus), list(gpus), [0] * len(gpus))


def test_fragmentation_checked_by_hand():
    typ = Typical(cpu=np.array([8000, 4000, 40000, 2000]), milli=np.array([1000, 500, 1000, 0]),
                  num=np.array([1, 1, 2, 0]), models=np.ones((4, 1), bool), freq=np.array([0.4, 0.3, 0.2, 0.1]))
    # free (1000, 500, 200, 0), 32 CPUs left: t0 can run, the 500 and 200 are fragments (700); t1: the
    # 200 (200); t2 lacks CPU: all 1700; t3 uses no GPU: all 1700
    f = fragmentation(np.array([[1000, 500, 200, 0]]), np.array([32000]), np.array([0]), typ)
    assert f[0] == pytest.approx(0.4 * 700 + 0.3 * 200 + 0.2 * 1700 + 0.1 * 1700)
    # a GPU model the shapes may not use: every free milli is a fragment
    typ_other = Typical(cpu=np.array([0]), milli=np.array([500]), num=np.array([1]),
                        models=np.array([[False, True]]), freq=np.array([1.0]))
    assert fragmentation(np.array([[1000, -1]]), np.array([1]), np.array([0]), typ_other)[0] == 1000


def test_feasibility_cpu_memory_gpus_and_model():
    n = NodeArrays([8000, 64000, 64000], [1 << 20, 100, 1 << 20], [2, 2, 2], [0, 0, 1])
    assert n.feasible(WHOLE).tolist() == [True, False, True]
    only_b = PodShape(1000, 10, 1, 1000, np.array([False, True]))
    assert n.feasible(only_b).tolist() == [False, False, True]
    n.place(2, PodShape(1000, 10, 2, 1000), (0, 1))
    assert n.feasible(only_b).tolist() == [False, False, False]


def test_share_pod_goes_where_each_placer_says():
    rng = np.random.default_rng(0)
    for name in ("best-fit", "gpu-packing", "fgd", "dotprod"):
        n = nodes(8, 8)
        n.place(1, SHARE, (2,))                       # node 1 has a half-used GPU
        typ = typical_pods([SHARE] * 3 + [WHOLE] * 3, 1)
        node, devs = FragPlacer(name, typ).choose(n, SHARE, rng)
        assert (node, devs) == (1, (2,)), name
    n = nodes(8, 8)
    n.place(0, WHOLE, (0,))
    n.place(1, SHARE, (0,))
    # clustering: a share pod joins the node that already holds share pods
    assert FragPlacer("gpu-clustering").choose(n, SHARE, rng)[0] == 1
    assert FragPlacer("gpu-clustering").choose(n, WHOLE, rng)[0] == 0


def test_whole_gpu_pods_take_fully_free_devices_and_random_stays_feasible():
    rng = np.random.default_rng(1)
    n = nodes(4, 2)
    n.place(0, SHARE, (0,))
    node, devs = FragPlacer("best-fit").choose(n, PodShape(1000, 10, 2, 1000), rng)
    assert node == 1 and devs == (0, 1)               # node 0 leaves more over
    n.place(1, PodShape(1000, 10, 2, 1000), devs)
    picks = {FragPlacer("random").choose(n, PodShape(1000, 10, 3, 1000), rng) for _ in range(5)}
    assert picks == {(0, (1, 2, 3))}
    assert FragPlacer("random").choose(n, PodShape(1000, 10, 4, 1000), rng) is None


def test_tune_reaches_the_ratio_and_is_seeded():
    cl = Cluster(np.array([64000] * 4), np.array([1 << 20] * 4), np.array([2] * 4), np.zeros(4, int), ("m",))
    pods = [SHARE, WHOLE, CPU]
    a = tune(pods, cl, 1.3, np.random.default_rng(5))
    b = tune(pods, cl, 1.3, np.random.default_rng(5))
    total = sum(p.total_gpu_milli for p in a)
    assert [id(p) for p in a] == [id(p) for p in b]
    assert 1.3 * 8000 - 1000 < total <= 1.3 * 8000 and len(a) > 3
    with pytest.raises(ConfigError, match="ratio"):
        tune(pods, cl, 0, np.random.default_rng(0))


def test_allocation_curve_never_exceeds_arrived_demand():
    cl = Cluster(np.array([32000] * 6), np.array([1 << 20] * 6), np.array([4] * 6), np.zeros(6, int), ("m",))
    for placer in ("random", "best-fit", "fgd"):
        c = run(cl, [SHARE, WHOLE, PodShape(4000, 10, 2, 1000), CPU], placer, seed=3)
        y = c.allocated_pct[np.isfinite(c.allocated_pct)]
        # recorded after the pod that crossed the percent: at most one pod (2 of 24 GPUs) above it
        assert (np.diff(y) >= -1e-9).all() and (y <= np.arange(len(y)) + 1 + 100 * 2 / 24).all()
        assert y[-1] > 50


def test_cli_allocation_experiment_writes_json_and_plot(tmp_path):
    import json

    from trident.cli import main

    (tmp_path / "nodes.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\n"
                                        + "".join(f"n{i},32000,131072,4,T4\n" for i in range(4)))
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
            "scheduled_time"]
    rows += [f"p{i},4000,8192,1,{500 if i % 2 else 1000},,LS,Running,{i},100,{i}" for i in range(12)]
    (tmp_path / "pods.csv").write_text("\n".join(rows) + "\n")
    rc = main(["simulate", "--experiment", "allocation", "--trace", f"alibaba-fgd:{tmp_path / 'pods.csv'}",
               "--nodes", str(tmp_path / "nodes.csv"), "--placer", "fgd,best-fit", "--seeds", "1-2",
               "--out", str(tmp_path / "out")])
    assert rc == 0
    doc = json.loads((tmp_path / "out" / "allocation-pods.json").read_text())
    assert [r["policy"] for r in doc["rows"]] == ["fgd", "best-fit"]
    assert all(0 < r["alloc_at_100_pct"] <= 101 for r in doc["rows"])
    assert (tmp_path / "out" / "allocation-pods.png").stat().st_size > 0
    assert main(["simulate", "--experiment", "allocation", "--trace", "pollux"]) == 2


def test_ties_go_to_the_first_node_of_the_run_order():
    rng = np.random.default_rng(0)
    n = nodes(4, 4, 4)
    fp = FragPlacer("gpu-packing", node_rank=np.array([2, 0, 1]))   # node 1 first, then 2, then 0
    assert [fp.choose(n, CPU, rng)[0] for _ in range(3)] == [1, 1, 1]    # every CPU pod scores 0
    n.place(1, PodShape(61000, 10, 0, 0), ())
    assert fp.choose(n, CPU, rng)[0] == 2                                # node 1 has no CPU left
