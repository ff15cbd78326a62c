"""The placement MILP: optimal against exhaustive enumeration, and safe when it cannot solve."""
import dataclasses
import itertools
import math

import numpy as np
import pytest

from trident.core.errors import ConfigError
from trident.core.plan.milp import solve_placement
from trident.core.plan.placement import (
    CPU,
    Allocation,
    DeviceOption,
    NodeType,
    OperatorSpec,
    PlacementProblem,
    objective_of,
    throughput_of,
    violations,
)


def _random_problem(rng: np.random.Generator, *, bin_packing: bool = False) -> PlacementProblem:
    """2-3 operators, 1-2 device options each, 1-2 node types; small enough to enumerate."""
    gpu_types = ["A", "B"][: int(rng.integers(1, 3))]
    node_types = tuple(
        NodeType(name=f"n{t}", count=int(rng.integers(1, 3)), cpus=float(rng.integers(2, 5)),
                 gpus=float(rng.integers(1, 3)), gpu_type=t, memory_bytes=int(rng.integers(4, 10)))
        for t in gpu_types)
    ops = []
    for i in range(int(rng.integers(2, 4))):
        if rng.random() < 0.4:
            opts = (DeviceOption(device=CPU, rate_rows_per_s=float(rng.uniform(1, 10)), cpus=1.0,
                                 memory_bytes=int(rng.integers(1, 4))),)
        else:
            devs = rng.permutation(gpu_types)[: int(rng.integers(1, len(gpu_types) + 1))]
            opts = tuple(DeviceOption(device=str(d), rate_rows_per_s=float(rng.uniform(2, 20)), cpus=1.0,
                                      gpus=float(rng.choice([0.5, 1.0])), memory_bytes=int(rng.integers(1, 5)))
                         for d in devs)
        mn = int(rng.integers(0, 2))
        mx = None if rng.random() < 0.5 else int(rng.integers(max(mn, 1), 4))
        ops.append(OperatorSpec(name=f"op{i}", options=opts, selectivity=float(rng.uniform(0.5, 2.0)),
                                min_replicas=mn, max_replicas=mx, cold_start_s=float(rng.uniform(0, 30)),
                                single_device=bool(rng.random() < 0.3),
                                demand=None if rng.random() < 0.6 else float(rng.uniform(0.2, 2.0))))
    problem = PlacementProblem(operators=tuple(ops), node_types=node_types, gap_rel=1e-7, hysteresis=0.0,
                               horizon_s=60.0, bin_packing=bin_packing,
                               memory_limit_bytes=None if rng.random() < 0.5 else int(rng.integers(4, 16)),
                               cpus_limit=None if rng.random() < 0.7 else float(rng.integers(1, 6)),
                               max_throughput_rows_per_s=None if rng.random() < 0.7 else float(rng.uniform(1, 20)))
    if rng.random() < 0.5:  # start from a random (possibly invalid) current plan
        keys = problem.keys()
        cur = {k: int(rng.integers(0, 3)) for k in keys if rng.random() < 0.5}
        problem = PlacementProblem(**{**problem.__dict__, "current": Allocation.of(cur)})
    return problem


def _oracle(problem: PlacementProblem) -> float:
    """Best objective by enumerating every integer allocation (per node when bin-packing)."""
    ops = {o.name: o for o in problem.operators}
    nodes = {n.name: n for n in problem.node_types}
    if problem.bin_packing:
        keys = [(o, d, n, i) for (o, d, n) in problem.keys() for i in range(nodes[n].count)]
        bucket_of = [(k[2], k[3]) for k in keys]
        caps = {(n.name, i): (n.cpus, n.gpus, n.memory_bytes) for n in problem.node_types for i in range(n.count)}
    else:
        keys = problem.keys()
        bucket_of = [k[2] for k in keys]
        caps = {n.name: (n.cpus * n.count, n.gpus * n.count, n.memory_bytes * n.count) for n in problem.node_types}
    if not keys:
        return -math.inf
    opts = [ops[k[0]].option(k[1]) for k in keys]
    grid = np.array(list(itertools.product(range(5), repeat=len(keys))), dtype=float)  # 4 replicas per key at most
    ok = np.ones(len(grid), bool)
    need = {r: np.array([getattr(o, r) for o in opts], float) for r in ("cpus", "gpus", "memory_bytes")}
    for b, (cpus, gpus, mem) in caps.items():
        cols = [j for j, bb in enumerate(bucket_of) if bb == b]
        for r, cap in (("cpus", cpus), ("gpus", gpus), ("memory_bytes", mem)):
            ok &= grid[:, cols] @ need[r][cols] <= cap + 1e-9
    if problem.memory_limit_bytes is not None:
        ok &= grid @ need["memory_bytes"] <= problem.memory_limit_bytes
    if problem.cpus_limit is not None:
        ok &= grid @ need["cpus"] <= problem.cpus_limit + 1e-9
    t = np.full(len(grid), np.inf if problem.max_throughput_rows_per_s is None else problem.max_throughput_rows_per_s)
    for op, f in zip(problem.operators, problem.demand_factors()):
        cols = [j for j, k in enumerate(keys) if k[0] == op.name]
        reps = grid[:, cols].sum(axis=1)
        ok &= reps >= op.min_replicas
        if op.max_replicas is not None:
            ok &= reps <= op.max_replicas
        if op.single_device:
            used = [grid[:, [j for j in cols if keys[j][1] == d]].sum(axis=1) > 0 for d in {keys[j][1] for j in cols}]
            ok &= np.sum(used, axis=0) <= 1
        cap = grid[:, cols] @ np.array([opts[j].rate_rows_per_s for j in cols]) if cols else np.zeros(len(grid))
        t = np.minimum(t, cap / f)
    best = -math.inf
    for row in np.flatnonzero(ok):
        agg: dict = {}
        for j, k in enumerate(keys):
            agg[k[:3]] = agg.get(k[:3], 0) + int(grid[row, j])
        val = objective_of(problem, Allocation.of(agg))
        best = max(best, val)
    return best


def test_optimal_against_brute_force_on_random_instances():
    rng = np.random.default_rng(7)
    checked = 0
    while checked < 220:
        problem = _random_problem(rng)
        # the oracle enumerates 0..4 replicas per key; keep instances where no more could ever fit
        if any(u > 4 for u in _key_capacity(problem)) or len(problem.keys()) > 6:
            continue
        truth = _oracle(problem)
        result = solve_placement(problem)
        checked += 1
        if truth == -math.inf:
            assert not result.changed and result.status in ("kept", "failed"), result
            continue
        assert not violations(problem, result.allocation), (result, violations(problem, result.allocation))
        got = objective_of(problem, result.allocation)
        assert got == pytest.approx(truth, rel=1e-5, abs=1e-6), (problem, result, truth)


def _key_capacity(problem: PlacementProblem):
    ops = {o.name: o for o in problem.operators}
    nodes = {n.name: n for n in problem.node_types}
    for o, d, n in problem.keys():
        opt, node = ops[o].option(d), nodes[n]
        lim = [node.cpus * node.count / opt.cpus]
        if opt.gpus:
            lim.append(node.gpus * node.count / opt.gpus)
        if opt.memory_bytes:
            lim.append(node.memory_bytes * node.count / opt.memory_bytes)
        if ops[o].max_replicas is not None:
            lim.append(ops[o].max_replicas)
        yield math.floor(min(lim) + 1e-9)


def test_bin_packing_optimal_per_node_against_brute_force():
    rng = np.random.default_rng(11)
    checked = 0
    while checked < 25:
        problem = _random_problem(rng, bin_packing=True)
        n_keys = sum(nt.count for k in problem.keys() for nt in problem.node_types if nt.name == k[2])
        if n_keys > 6 or any(u > 4 for u in _key_capacity(problem)):
            continue
        truth = _oracle(problem)
        result = solve_placement(problem)
        checked += 1
        if truth == -math.inf:
            assert not result.changed
            continue
        assert not violations(problem, result.allocation)
        assert result.allocation.nodes or not result.allocation.counts, result
        assert objective_of(problem, result.allocation) == pytest.approx(truth, rel=1e-5, abs=1e-6)


def _choice_problem(rng: np.random.Generator) -> PlacementProblem:
    """Operators on one device each, choosing among two or three accelerator types (and maybe a CPU
    operator): the device choice the solver decomposes."""
    gpu_types = ["A", "B", "C"][: int(rng.integers(2, 4))]
    node_types = tuple(NodeType(name=f"n{t}", count=1, cpus=float(rng.integers(2, 6)), gpus=float(rng.integers(1, 4)),
                                gpu_type=t, memory_bytes=int(rng.integers(4, 12))) for t in gpu_types)
    ops = []
    for i in range(int(rng.integers(2, 4))):
        if i and rng.random() < 0.25:
            opts = (DeviceOption(device=CPU, rate_rows_per_s=float(rng.uniform(1, 10)), cpus=1.0),)
        else:
            devs = rng.permutation(gpu_types)[: int(rng.integers(2, len(gpu_types) + 1))]
            opts = tuple(DeviceOption(device=str(d), rate_rows_per_s=float(rng.uniform(2, 20)),
                                      cpus=float(rng.choice([0.5, 1.0])), gpus=float(rng.choice([0.5, 1.0, 2.0])),
                                      memory_bytes=int(rng.integers(1, 5))) for d in devs)
        ops.append(OperatorSpec(name=f"op{i}", options=opts, selectivity=float(rng.uniform(0.5, 2.0)),
                                min_replicas=int(rng.integers(0, 2)), cold_start_s=float(rng.uniform(0, 40)),
                                single_device=True))
    memory_limit = None if rng.random() < 0.7 else int(rng.integers(4, 16))
    problem = PlacementProblem(operators=tuple(ops), node_types=node_types, gap_rel=1e-7, hysteresis=0.0,
                               horizon_s=60.0, memory_limit_bytes=memory_limit,
                               max_throughput_rows_per_s=None if rng.random() < 0.8 else float(rng.uniform(5, 30)))
    if rng.random() < 0.5:
        cur = {k: int(rng.integers(0, 3)) for k in problem.keys() if rng.random() < 0.5}
        problem = PlacementProblem(**{**problem.__dict__, "current": Allocation.of(cur)})
    return problem


def test_device_choice_decomposition_optimal_against_brute_force():
    from trident.core.plan.device_choices import DeviceChoices

    rng = np.random.default_rng(23)
    checked = decomposed = 0
    while checked < 120:
        problem = _choice_problem(rng)
        if any(u > 4 for u in _key_capacity(problem)) or len(problem.keys()) > 6:
            continue
        truth = _oracle(problem)
        result = solve_placement(problem)
        checked += 1
        decomposed += DeviceChoices.of(problem, problem.keys(), {n.name: (n.cpus, n.gpus, n.memory_bytes)
                                                                  for n in problem.node_types}) is not None
        if truth == -math.inf:
            assert not result.changed
            continue
        assert not violations(problem, result.allocation), result
        assert objective_of(problem, result.allocation) == pytest.approx(truth, rel=1e-5, abs=1e-6), (problem, result)
    assert decomposed >= 100


def test_device_choice_bounds_cover_every_plan_of_the_assignment():
    """The bound of a device assignment is at least the objective of any valid plan that uses it."""
    from trident.core.plan.device_choices import DeviceChoices

    rng = np.random.default_rng(5)
    checked = 0
    while checked < 20:
        problem = _choice_problem(rng)
        keys = problem.keys()
        choices = DeviceChoices.of(problem, keys, {n.name: (n.cpus * n.count, n.gpus * n.count,
                                                             n.memory_bytes * n.count) for n in problem.node_types})
        if choices is None or len(keys) > 5:
            continue
        checked += 1
        for counts in itertools.product(range(4), repeat=len(keys)):
            alloc = Allocation.of(dict(zip(keys, counts)))
            if violations(problem, alloc):
                continue
            by_op = {o: alloc.by_device(o) for o in choices.ops}
            if any(len(d) != 1 for d in by_op.values()):
                continue
            choice = np.array([ds.index(next(iter(by_op[o]))) for o, ds in zip(choices.ops, choices.devices)])
            assert choices.bound(choice) >= objective_of(problem, alloc) - 1e-9, (problem, alloc)


def test_device_choice_decomposition_agrees_with_the_full_model(monkeypatch):
    """At a size where enumeration is out of reach: the same objective with and without it."""
    from trident.core.plan import milp

    rng = np.random.default_rng(3)
    node_types = tuple(NodeType(name=t, count=2, cpus=32, gpus=8, gpu_type=t, memory_bytes=256) for t in "ABC")
    ops = tuple(OperatorSpec(name=f"op{i}", selectivity=float(rng.uniform(0.5, 2)), min_replicas=1,
                             cold_start_s=float(rng.uniform(5, 60)), single_device=True,
                             options=tuple(DeviceOption(device=t, rate_rows_per_s=float(rng.uniform(10, 100)),
                                                        cpus=float(rng.choice([1, 2, 4])),
                                                        gpus=float(rng.choice([0.5, 1, 2])),
                                                        memory_bytes=int(rng.integers(2, 16))) for t in "ABC"))
                for i in range(5))
    cold = PlacementProblem(operators=ops, node_types=node_types, gap_rel=1e-6)
    fast = solve_placement(cold)
    steady = PlacementProblem(operators=tuple(dataclasses.replace(o, options=tuple(
        dataclasses.replace(d, rate_rows_per_s=d.rate_rows_per_s * float(rng.uniform(0.8, 1.2))) for d in o.options))
        for o in ops), node_types=node_types, gap_rel=1e-6, current=fast.allocation)
    fast_steady = solve_placement(steady)
    monkeypatch.setattr(milp.DeviceChoices, "of", staticmethod(lambda *a: None))
    for problem, got in ((cold, fast), (steady, fast_steady)):
        full = solve_placement(problem)
        assert got.status == full.status == "optimal"
        assert objective_of(problem, got.allocation) == pytest.approx(objective_of(problem, full.allocation), rel=1e-5)


def test_per_node_packing_respects_fragmentation():
    # two nodes with 3 GPUs each: 2-GPU replicas fit one per node although 6 GPUs are free in total
    node = NodeType(name="n", count=2, cpus=8, gpus=3, gpu_type="A")
    op = OperatorSpec(name="big", options=(DeviceOption(device="A", rate_rows_per_s=10.0, gpus=2.0),))
    agg = solve_placement(PlacementProblem(operators=(op,), node_types=(node,)))
    packed = solve_placement(PlacementProblem(operators=(op,), node_types=(node,), bin_packing=True))
    assert agg.allocation.replicas("big") == 3
    assert packed.allocation.replicas("big") == 2
    assert sorted(k for _, _, _, k, _ in packed.allocation.nodes) == [0, 1]


def test_first_fit_packs_many_replicas_per_node():
    """Runs of identical replicas fill a node before the next: valid, and packed as tightly."""
    nodes = (NodeType(name="a", count=40, cpus=16, gpus=8, gpu_type="A", memory_bytes=64),)
    ops = (OperatorSpec(name="small", options=(DeviceOption(device="A", rate_rows_per_s=1.0, cpus=1.0, gpus=0.5,
                                                            memory_bytes=3),)),
           OperatorSpec(name="big", options=(DeviceOption(device="A", rate_rows_per_s=3.0, cpus=3.0, gpus=2.0,
                                                          memory_bytes=10),)))
    res = solve_placement(PlacementProblem(operators=ops, node_types=nodes, bin_packing=True))
    assert res.status == "optimal" and "first-fit" in res.reason
    assert not violations(PlacementProblem(operators=ops, node_types=nodes, bin_packing=True), res.allocation)
    per_node: dict[int, list] = {}
    for o, _, _, k, c in res.allocation.nodes:
        per_node.setdefault(k, []).append((o, c))
    assert len(per_node) == 40 and res.allocation.replicas("small") + res.allocation.replicas("big") > 100


def _two_op_problem(**kw) -> PlacementProblem:
    ops = (
        OperatorSpec(name="parse", options=(DeviceOption(device=CPU, rate_rows_per_s=10.0, cpus=1.0),),
                     selectivity=2.0, cold_start_s=5.0),
        OperatorSpec(name="embed", options=(DeviceOption(device="A", rate_rows_per_s=40.0, gpus=1.0),
                                            DeviceOption(device="B", rate_rows_per_s=25.0, gpus=1.0)),
                     cold_start_s=30.0),
    )
    nodes = (NodeType(name="a", count=2, cpus=8, gpus=2, gpu_type="A"),
             NodeType(name="b", count=1, cpus=8, gpus=4, gpu_type="B"))
    return PlacementProblem(operators=ops, node_types=nodes, **kw)


def test_balances_pipeline_with_selectivity():
    res = solve_placement(_two_op_problem())
    assert res.status == "optimal" and res.changed
    # embed receives 2 rows per input row: 4xA + 4xB = 260 rows/s caps T at 130; parse is CPU bound at 24 CPUs
    assert res.allocation.by_device("embed") == {"A": 4, "B": 4}
    assert res.throughput_rows_per_s == pytest.approx(130.0, rel=0.01)
    assert res.allocation.replicas("parse") >= 13


def test_hysteresis_keeps_a_nearly_as_good_current_plan():
    base = _two_op_problem()
    best = solve_placement(base).allocation
    counts = best.as_dict()
    counts[("embed", "B", "b")] -= 1  # one replica short: 235 vs 260 rows/s at embed
    current = Allocation.of(counts)
    kept = solve_placement(_two_op_problem(current=current, hysteresis=0.15))
    assert not kept.changed and kept.allocation == current and "hysteresis" in kept.reason
    moved = solve_placement(_two_op_problem(current=current, hysteresis=0.05))
    assert moved.changed and moved.throughput_rows_per_s > kept.throughput_rows_per_s
    # the plan kept back is the one issued under a lower hysteresis (the planner may take it later)
    assert kept.better is not None and kept.better.changed and moved.better is None
    assert kept.better.allocation == moved.allocation


def test_cold_start_cost_blocks_marginal_additions():
    # one more replica adds 10 rows/s; restarting costs 60 s of it amortised over 30 s: not worth it
    op = OperatorSpec(name="op", options=(DeviceOption(device=CPU, rate_rows_per_s=10.0, cpus=1.0),),
                      cold_start_s=60.0)
    node = NodeType(name="n", count=1, cpus=3)
    cur = Allocation.of({("op", CPU, "n"): 2})
    res = solve_placement(PlacementProblem(operators=(op,), node_types=(node,), current=cur, horizon_s=30.0,
                                           hysteresis=0.0))
    assert not res.changed and res.allocation == cur
    cheap = solve_placement(PlacementProblem(operators=(op,), node_types=(node,), current=cur, horizon_s=600.0,
                                             hysteresis=0.0))
    assert cheap.changed and cheap.allocation.replicas("op") == 3


def test_a_fixed_operator_with_a_huge_rate_does_not_block_moving_replicas():
    # ocr (slow) and embed share 6 GPUs; a writer held at 1 replica has a rate that never binds.
    # Moving 3 replicas from the idle embed pool to ocr must pay: the removal tie-breaker may not
    # scale with the writer's rate.
    ops = (OperatorSpec(name="ocr", options=(DeviceOption(device="A", rate_rows_per_s=0.1, gpus=1.0),),
                        cold_start_s=10.0),
           OperatorSpec(name="embed", options=(DeviceOption(device="A", rate_rows_per_s=4.0, gpus=1.0),),
                        cold_start_s=10.0),
           OperatorSpec(name="write", options=(DeviceOption(device=CPU, rate_rows_per_s=1e9, cpus=1.0),),
                        min_replicas=1, max_replicas=1))
    nodes = (NodeType(name="a", count=1, cpus=8, gpus=6, gpu_type="A"), NodeType(name="c", count=1, cpus=8))
    cur = Allocation.of({("ocr", "A", "a"): 2, ("embed", "A", "a"): 4, ("write", CPU, "c"): 1})
    res = solve_placement(PlacementProblem(operators=ops, node_types=nodes, current=cur, horizon_s=500.0))
    assert res.changed and res.allocation.replicas("ocr") == 5 and res.allocation.replicas("embed") == 1


def test_infeasible_keeps_current_plan_without_raising():
    op = OperatorSpec(name="op", options=(DeviceOption(device="A", rate_rows_per_s=5.0, gpus=1.0),), min_replicas=5)
    node = NodeType(name="n", count=1, cpus=8, gpus=2, gpu_type="A")
    cur = Allocation.of({("op", "A", "n"): 2})
    res = solve_placement(PlacementProblem(operators=(op,), node_types=(node,), current=cur))
    assert not res.changed and res.allocation == cur and res.status == "failed"
    assert "keeping the current plan" in res.reason
    assert "infeasible" in res.reason and "time limit" not in res.reason  # not mistaken for a slow solve
    assert res.infeasible  # proven: a longer limit cannot help
    none = solve_placement(PlacementProblem(operators=(op,), node_types=(node,)))
    assert none.status == "failed" and none.allocation == Allocation() and none.infeasible


def test_timeout_keeps_current_plan(monkeypatch):
    from trident.core.plan import milp

    def timed_out(prob, problem, solver, what, start=None):
        return None, "no feasible plan within the time limit"  # what _run reports then

    monkeypatch.setattr(milp, "_run", timed_out)
    base = _two_op_problem()
    cur = Allocation.of({("parse", CPU, "a"): 2, ("embed", "A", "a"): 1})
    res = solve_placement(_two_op_problem(current=cur, time_limit_s=0.001))
    assert not res.changed and res.allocation == cur and "time limit" in res.reason and res.status == "failed"
    assert not res.infeasible  # a longer limit may find one
    assert throughput_of(base, cur) == res.throughput_rows_per_s


def test_solver_crash_and_invalid_solution_keep_current(monkeypatch):
    from trident.core.plan import milp

    cur = Allocation.of({("parse", CPU, "a"): 2, ("embed", "A", "a"): 1})

    def boom(*_a, **_k):
        raise RuntimeError("solver died")

    monkeypatch.setattr(milp, "_run", boom)
    res = solve_placement(_two_op_problem(current=cur))
    assert not res.changed and "solver died" in res.reason

    def bogus(problem, solver):
        return Allocation.of({("embed", "A", "a"): 99}), "optimal", ""

    monkeypatch.setattr(milp, "_solve_aggregated", bogus)
    res = solve_placement(_two_op_problem(current=cur))
    assert not res.changed and "invalid plan" in res.reason


def test_cbc_fallback_agrees_with_highs():
    problem = _two_op_problem()
    h = solve_placement(problem, solver="highs")
    c = solve_placement(problem, solver="cbc")
    assert not violations(problem, c.allocation)
    assert c.throughput_rows_per_s == pytest.approx(h.throughput_rows_per_s, rel=0.02)


def test_user_bounds_and_memory_limit_respected():
    problem = _two_op_problem(memory_limit_bytes=None)
    ops = (problem.operators[0],
           OperatorSpec(name="embed", options=(DeviceOption(device="A", rate_rows_per_s=40.0, gpus=1.0,
                                                            memory_bytes=3),), max_replicas=3, min_replicas=1))
    res = solve_placement(PlacementProblem(operators=ops, node_types=problem.node_types, memory_limit_bytes=7))
    assert 1 <= res.allocation.replicas("embed") <= 2  # 3 bytes each under a 7-byte limit


def test_validation_names_the_parameter():
    with pytest.raises(ConfigError, match="selectivity"):
        OperatorSpec(name="x", options=(DeviceOption(device=CPU, rate_rows_per_s=1.0),), selectivity=0)
    with pytest.raises(ConfigError, match="time_limit_s"):
        _two_op_problem(time_limit_s=0)
    with pytest.raises(ConfigError, match="solver"):
        solve_placement(_two_op_problem(), solver="gurobi")


def test_solves_after_another_highs_user_in_the_same_process():
    """HiGHS's thread pool is process-wide: a solve elsewhere (default threads) must not break ours."""
    import pulp

    other = pulp.LpProblem("other", pulp.LpMaximize)
    y = pulp.LpVariable("y", 0, 10, cat="Integer")
    other += y
    other += 2 * y <= 7
    other.solve(pulp.HiGHS(msg=False))
    assert pulp.LpStatus[other.status] == "Optimal"
    res = solve_placement(_two_op_problem())
    assert res.status == "optimal" and res.throughput_rows_per_s == pytest.approx(130.0, rel=0.01)


def test_an_operator_with_more_work_left_gets_more_replicas():
    """Detect (12.5 rows/s per replica) has 2,600 rows left; Embed (47) has those and 2,000
    queued: 4,600. Sized for the rates alone the 8 slots split 6 + 2 and Embed finishes 59 s on;
    sized for the work left (Detect's demand 2,600 / 4,600 of Embed's) they split 5 + 3: 42 s."""
    def op(name, rate, demand=None):
        return OperatorSpec(name=name, options=(DeviceOption(device="gpu", rate_rows_per_s=rate, cpus=1.0, gpus=0.5),),
                            min_replicas=1, max_replicas=6, single_device=True, demand=demand)

    node = (NodeType(name="gpu", count=1, cpus=16, gpus=4),)
    rates_only = solve_placement(PlacementProblem(operators=(op("detect", 12.5), op("embed", 47.0)), node_types=node))
    work_left = solve_placement(PlacementProblem(operators=(op("detect", 12.5, 2600 / 4600), op("embed", 47.0)),
                                                 node_types=node))
    assert rates_only.allocation.replicas("embed") == 2 and rates_only.allocation.replicas("detect") == 6
    assert work_left.allocation.replicas("embed") == 3 and work_left.allocation.replicas("detect") == 5
    with pytest.raises(ConfigError, match="demand"):
        op("embed", 47.0, demand=0.0)


def test_the_plan_is_the_models_best_not_one_within_a_percent():
    """Regime-shift's record at 120 s: Detect (12.48 rows/s per replica, 0.756 of Embed's rows
    left) and Embed (12.47) on 8 slots, from 2 + 6. The model's best is 4 + 4 (49.4 after its
    start costs), 3 + 5 is 0.3% behind (49.3): within a 1% MIP gap the solver returned 3 + 5, and
    held it for 60 s under the hysteresis as 4 + 4's lead grew to 8%."""
    def op(name, rate, demand, cold_s):
        return OperatorSpec(name=name, options=(DeviceOption(device="gpu", rate_rows_per_s=rate, cpus=1.0, gpus=0.5),),
                            min_replicas=1, max_replicas=6, single_device=True, demand=demand, cold_start_s=cold_s)

    ops = (op("detect", 12.48, 0.756, 6.4), op("embed", 12.47, 1.0, 2.1))
    node = (NodeType(name="gpu", count=1, cpus=16, gpus=4),)
    current = Allocation.of({("detect", "gpu", "gpu"): 2, ("embed", "gpu", "gpu"): 6})
    problem = PlacementProblem(operators=ops, node_types=node, current=current, horizon_s=478.0, hysteresis=0.1)
    res = solve_placement(problem)
    splits = {d: Allocation.of({("detect", "gpu", "gpu"): d, ("embed", "gpu", "gpu"): 8 - d}) for d in range(2, 7)}
    best = max(splits, key=lambda d: objective_of(problem, splits[d]))
    assert best == 4 and objective_of(problem, splits[3]) > 0.99 * objective_of(problem, splits[4])
    assert res.changed and res.allocation.replicas("detect") == best and res.allocation.replicas("embed") == 4


def test_a_pool_ray_spread_over_two_types_is_kept_when_no_one_type_plan_beats_it():
    """A one-device pool is planned on one type, but Ray may have spread it: the spread runs and
    makes what it makes (a generated scenario's 4 replicas on A and 2 on B, read as invalid, were
    replaced by 2 on B: a third less). A plan must beat the spread; one that does still replaces it."""
    def problem(b_nodes, **kw):
        op = OperatorSpec(name="op1", options=(DeviceOption(device="A", rate_rows_per_s=31.0, cpus=1.0, gpus=1.0),
                                               DeviceOption(device="B", rate_rows_per_s=124.0, cpus=1.0, gpus=1.0)),
                          min_replicas=1, max_replicas=16, single_device=True, cold_start_s=10.0)
        nodes = (NodeType(name="a", count=2, cpus=32, gpus=2, gpu_type="A"),
                 NodeType(name="b", count=b_nodes, cpus=32, gpus=2, gpu_type="B"))
        return PlacementProblem(operators=(op,), node_types=nodes, hysteresis=0.1, **kw)

    spread = Allocation.of({("op1", "A", "a"): 4, ("op1", "B", "b"): 2})
    assert any(v.endswith("expected one device") for v in violations(problem(1), spread))
    kept = solve_placement(problem(1, current=spread))  # the best one-type plan: 2 on B, 248 rows/s
    assert not kept.changed and kept.allocation.by_device("op1") == {"A": 4, "B": 2}, kept.reason
    assert kept.throughput_rows_per_s == pytest.approx(4 * 31.0 + 2 * 124.0)
    moved = solve_placement(problem(3, current=spread))  # 6 on B, 744 rows/s, beats 372
    assert moved.changed and moved.allocation.by_device("op1") == {"B": 6}, moved.reason
    assert moved.current_valid and moved.current_throughput_rows_per_s == pytest.approx(372.0)
