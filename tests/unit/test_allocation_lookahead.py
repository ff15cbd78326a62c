"""``fgd-lookahead``: its typical-shape table against FGD's own score (and exact with pod
counts), a cluster where the lookahead provably beats FGD's choice, ties to FGD's node
order, seeded runs that repeat exactly, and the stranding candidate and relief."""
from dataclasses import replace

import numpy as np

from trident.jobs.frag_lookahead import typical_table
from trident.jobs.frag_placers import FragPlacer
from trident.jobs.fragmentation import NodeArrays, PodShape, frag_drop, sigmoid_score, typical_pods
from trident.sim.allocation import Cluster, run

SHARE = PodShape(4000, 1024, 1, 500)
WHOLE = PodShape(8000, 1024, 1, 1000)
CPU = PodShape(4000, 1024, 0, 0)


def test_typical_table_is_fgds_score_of_each_typical_shape_on_each_node():
    rng = np.random.default_rng(4)
    n = NodeArrays([64000, 64000, 16000, 64000, 6000], [1 << 20] * 5, [4, 4, 4, 2, 8], [0, 0, 0, 1, 1])
    for _ in range(6):
        node = int(rng.integers(3))
        if n.feasible(SHARE)[node]:
            n.place(node, SHARE, (int(np.argmax(n.gpu[node] >= 500)),))
    typ = typical_pods([SHARE] * 4 + [WHOLE] * 3 + [CPU, PodShape(20000, 10, 2, 1000),
                                                    PodShape(3000, 10, 1, 300, np.array([False, True]))], 2)
    score, drop = typical_table(n.gpu, n.cpu, n.model, typ)
    for t in range(len(typ.freq)):
        pod = PodShape(int(typ.cpu[t]), 0, int(typ.num[t]), int(typ.milli[t]), typ.models[t] if typ.num[t] else None)
        idx = np.flatnonzero(n.feasible(pod))
        expected = np.full(len(n.cpu), -1)
        expected[idx] = frag_drop(n, pod, idx, typ, sigmoid_score)[0]
        assert (score[:, t] == expected).all()
        assert (sigmoid_score(drop[idx, t]) == score[idx, t]).all()


def test_lookahead_keeps_the_last_whole_gpu_that_fgd_gives_to_a_share():
    n = NodeArrays([16000, 64000], [1 << 20] * 2, [2, 2], [0, 0])
    n.place(0, PodShape(0, 0, 1, 1000), (0,))              # node 0: (0, 1000), 16 CPUs
    n.place(1, PodShape(0, 0, 1, 200), (0,))               # node 1: (800, 800), 64 CPUs
    n.place(1, PodShape(0, 0, 1, 200), (1,))
    typ = typical_pods([WHOLE, PodShape(4000, 10, 1, 700), PodShape(4000, 10, 1, 500),
                        PodShape(4000, 10, 1, 700)], 1)
    pod = PodShape(4000, 10, 1, 250)
    rng = np.random.default_rng(0)
    rank = np.array([0, 1])
    fgd = FragPlacer("fgd", typ, node_rank=rank)
    # FGD scores node 0 at 45 and node 1 at 44 (25 milli-GPU more fragmentation) and takes
    # the cluster's last whole GPU; a typical 1-GPU pod (a quarter of them) then fits
    # nowhere, which the lookahead counts as 1,000 milli lost, so it takes node 1's 800
    assert fgd._fgd(n, pod, np.array([0, 1]), rng)[0].tolist() == [45, 44]
    choices = [fgd.choose(n, pod, rng), FragPlacer("fgd-lookahead", typ, node_rank=rank).choose(n, pod, rng)]
    assert choices == [(0, (1,)), (1, (0,))]
    fits = []
    for node, devs in choices:
        after = NodeArrays(n.cpu, n.mem, n.num_gpus, n.model)
        after.gpu = n.gpu.copy()
        after.place(node, pod, devs)
        fits.append(fgd.choose(after, WHOLE, rng) is not None)
    assert fits == [False, True]


def test_lookahead_runs_are_seeded_and_match_fgd_on_one_node():
    cl = Cluster(np.array([32000] * 6), np.array([1 << 20] * 6), np.array([4] * 6), np.zeros(6, int), ("T4",))
    pods = [SHARE, WHOLE, PodShape(4000, 10, 2, 1000), CPU, PodShape(2000, 10, 1, 250)]
    a, b = (run(cl, pods, "fgd-lookahead", seed=3) for _ in range(2))
    assert np.array_equal(a.allocated_pct, b.allocated_pct, equal_nan=True) and a.failed == b.failed
    one = Cluster(np.array([64000]), np.array([1 << 20]), np.array([8]), np.zeros(1, int), ("T4",))
    assert np.array_equal(run(one, pods, "fgd-lookahead", seed=5).allocated_pct,
                          run(one, pods, "fgd", seed=5).allocated_pct, equal_nan=True)


def test_counted_typical_table_is_exact_and_scores_as_fgd():
    rng = np.random.default_rng(7)
    n = NodeArrays([64000, 32000, 9000, 64000], [1 << 20] * 4, [4, 8, 4, 2], [0, 1, 0, 1])
    for _ in range(9):
        node = int(rng.integers(4))
        if n.feasible(SHARE)[node]:
            n.place(node, SHARE, (int(np.argmax(n.gpu[node] >= 500)),))
    pods = [SHARE] * 3 + [WHOLE] * 7 + [CPU] * 2 + [PodShape(3000, 10, 1, 300)] * 5
    typ = typical_pods(pods, 2, popularity=1.0)
    assert typ.count.tolist() == [7, 5, 3, 2] and np.array_equal(typ.freq, typ.count / 17)
    counted = replace(typ, freq=typ.count.astype(float))
    score, drop = typical_table(n.gpu, n.cpu, n.model, typ)
    c_score, c_drop = typical_table(n.gpu, n.cpu, n.model, counted, 17.0)
    assert (c_score == score).all() and (c_drop == np.round(c_drop)).all()
    assert np.allclose(c_drop, 17 * drop)


def test_lookahead_ties_go_to_fgds_node_order():
    n = NodeArrays([64000] * 3, [1 << 20] * 3, [4] * 3, [0] * 3)
    typ = typical_pods([SHARE] * 3 + [WHOLE] * 7 + [CPU] * 2, 1)
    for rank in ([0, 1, 2], [2, 0, 1], [1, 2, 0]):
        node, _ = FragPlacer("fgd-lookahead", typ, node_rank=np.array(rank)).choose(n, SHARE, np.random.default_rng(0))
        assert node == int(np.argmin(rank))


def test_lookahead_takes_the_node_where_a_cpu_pod_strands_no_gpu(monkeypatch):
    # five empty 4-GPU nodes; the typical GPU pod asks 8 CPUs per GPU. Nodes 0-3 have 16
    # CPUs (already 2,000 milli-GPU stranded), node 4 has 64. FGD scores a CPU pod 50
    # everywhere (every typical pod still fits) and takes node 0, first in the node order;
    # the lookahead's fifth candidate is node 4 (no stranding relief lost there), where
    # nodes 0-3 would strand 1,000 milli-GPU more
    import trident.jobs.frag_lookahead as la

    n = NodeArrays([16000] * 4 + [64000], [1 << 20] * 5, [4] * 5, [0] * 5)
    typ = typical_pods([WHOLE] * 3 + [CPU], 1)
    pod = PodShape(8000, 10, 0, 0)
    rank = np.arange(5)
    rng = np.random.default_rng(0)
    assert FragPlacer("fgd", typ, node_rank=rank).choose(n, pod, rng) == (0, ())
    look = FragPlacer("fgd-lookahead", typ, node_rank=rank)
    assert look.choose(n, pod, rng) == (4, ())
    assert look.lookahead.relief(n, pod, np.arange(5)).tolist() == [-1000.0] * 4 + [0.0]
    monkeypatch.setattr(la, "STRAND_EXTRA", 0)           # FGD's first four only: all alike, FGD's wins
    assert FragPlacer("fgd-lookahead", typ, node_rank=rank).choose(n, pod, rng) == (0, ())
