"""What trident keeps across runs: operator keys, the lessons read from a run, the prior a run
believes as far as its own windows agree, and the pipeline simulator run twice."""
import re
from types import SimpleNamespace

import pytest

from trident.autoscaler.policies.trident import TridentSettings, estimates
from trident.autoscaler.policies.trident.records import ConfigKey
from trident.autoscaler.sim.pipeline import PipelineSpec, Regime, SimNodes, SimOperator, simulate
from trident.core.cluster import NodeShape
from trident.core.model.prior import Belief, OperatorPrior, RegimePrior
from trident.core.policy import PolicyContext
from trident.core.types import ClusterView, DecisionKind
from trident.history.fingerprint import cluster_parts, code_hash, key_of_parts, udf_parts
from trident.history.lessons import learn

GiB = 2**30


def _udf(source: str, name: str = "f"):
    ns = {"__name__": "user_udfs"}
    exec(source, ns)  # no source file: the key falls back on the bytecode
    return ns[name]


def _logical(fn, *, args=None, gpus=0.5, batch=16):
    return SimpleNamespace(fn=fn, fn_args=None, fn_kwargs=None, fn_constructor_args=args, fn_constructor_kwargs=None,
                           ray_remote_args={"num_gpus": gpus}, batch_size=batch,
                           compute=SimpleNamespace(min_size=1, max_size=4))


def _key(logical, cluster=None):
    return key_of_parts({"logical": [udf_parts(logical)], "cluster": cluster or {"nodes": [(8, 2, "A")]}})


def test_an_operator_s_key_is_its_code_its_arguments_and_the_cluster_s_shape():
    f = _udf("def f(batch):\n    return batch\n")
    same = _udf("def f(batch):\n    return batch\n")
    changed = _udf("def f(batch):\n    return {k: v * 2 for k, v in batch.items()}\n")
    base = _key(_logical(f))
    assert _key(_logical(same)) == base  # the same code written again: the same operator
    assert code_hash(changed) != code_hash(f)
    assert _key(_logical(changed)) != base
    assert _key(_logical(f, args=("model-v2",))) != base  # constructor arguments
    assert _key(_logical(f, gpus=1.0)) != base  # Ray Data arguments
    assert _key(_logical(f, batch=32)) != base
    assert _key(_logical(f), cluster={"nodes": [(8, 2, "B")]}) != base  # another cluster shape
    # an object without a repr of its own is known by its type, not its address
    assert _key(_logical(f, args=(object(),))) == _key(_logical(f, args=(object(),)))


def test_a_cluster_s_shape_is_its_nodes_not_their_ids():
    a = ClusterView(cpus=16, gpus=4, nodes=(NodeShape("n1", 8, 2, "A"), NodeShape("n2", 8, 2, "B")))
    b = ClusterView(cpus=16, gpus=4, nodes=(NodeShape("x9", 8, 2, "B"), NodeShape("x7", 8, 2, "A")))
    c = ClusterView(cpus=16, gpus=4, nodes=(NodeShape("n1", 8, 2, "A"), NodeShape("n2", 8, 2, "A")))
    assert cluster_parts(a) == cluster_parts(b) != cluster_parts(c)


def _prior(*regimes, run="r1"):
    return OperatorPrior(name="ocr", run=run, regimes=tuple(
        RegimePrior(rates=(((32, "A", 1.0), tuple(rates)),)) for rates in regimes), cold_start_s=4.0, selectivity=1.0)


def test_the_prior_s_weight_falls_as_contrary_windows_come_in_and_it_is_set_aside():
    belief = Belief(_prior([40.0, 41.0, 39.0]))
    cfg = (32, "A", 1.0)
    assert belief.rate(cfg) == 40.0
    assert belief.see(cfg, 44.0) == "" and belief.weight == 3.0  # agrees: kept whole
    assert belief.blend(cfg, 44.0, 1) == pytest.approx((40.0 ** 3 * 44.0) ** 0.25)
    weights = []
    note = ""
    for _ in range(4):  # 4x slower than remembered, window after window
        note = belief.see(cfg, 10.0) or note
        weights.append(belief.weight)
    assert weights == sorted(weights, reverse=True) and weights[0] < 3.0
    assert not belief.live and belief.rate(cfg) is None
    assert "set aside" in note and "learning from this run" in note


def test_a_regime_seen_before_is_recognised_after_the_data_changes():
    belief = Belief(_prior([40.0, 40.0], [10.0, 11.0]))
    cfg = (32, "A", 1.0)
    belief.data_changed()
    assert belief.rate(cfg) is None  # nothing believed until a window matches
    note = belief.see(cfg, 10.4)
    assert "matches regime 2 of 2 remembered from run r1" in note
    assert belief.rate(cfg) == pytest.approx(10.5)
    assert belief.see(cfg, 16.8) == "" and belief.live  # one window 1.6x off: the weight falls, not all of it
    assert 0.5 < belief.weight < 1.5


def _spec(*, ocr_rate=20.0, regimes=(), rows=6_000):
    ops = (SimOperator(name="read", kind="task", peak_rows_per_s=(("cpu", 400.0),), replicas=4, max_replicas=16),
           SimOperator(name="ocr", kind="actor", peak_rows_per_s=(("A", ocr_rate),), replicas=1, max_replicas=8,
                       num_gpus=1, accelerator_type="A", batch_size=16, cold_start_s=4.0, heap_base_bytes=GiB,
                       regimes=regimes, regime_by="rows"),
           SimOperator(name="embed", kind="actor", peak_rows_per_s=(("A", 80.0),), replicas=1, max_replicas=8,
                       num_gpus=1, accelerator_type="A", batch_size=32, cold_start_s=4.0, heap_base_bytes=GiB))
    return PipelineSpec(operators=ops, nodes=(SimNodes(count=1, cpus=16, gpus=8, gpu_type="A"),), total_rows=rows,
                        noise=0.03, spike_prob=0.0)


def _first_plan(res):
    return next(d for d in res.decisions if d.plan is not None)


def test_lessons_read_from_a_run_are_its_rates_heap_and_cold_start():
    res = simulate(_spec(), policy="trident", seed=1)
    lessons = learn(list(res.snapshots), list(res.decisions), run="r1")
    ocr = lessons["ocr"]
    assert ocr.run == "r1" and ocr.cold_start_s is not None and 0 < ocr.cold_start_s <= 8.0
    rate = ocr.regimes[0].rate((16, "A", 1.0))
    assert rate == pytest.approx(20.0, rel=0.2)  # the simulated peak per replica
    assert ocr.regimes[0].heap_of((16, "A", 1.0)) >= GiB


def test_a_second_run_plans_from_the_first_at_its_first_step_and_finishes_sooner():
    first = simulate(_spec(), policy="trident", seed=1)
    priors = tuple(learn(list(first.snapshots), list(first.decisions), run="r1").values())
    second = simulate(_spec(), policy="trident", seed=2, context=PolicyContext(priors=priors))
    blind = simulate(_spec(), policy="trident", seed=2)
    plan = _first_plan(second)
    assert plan.history_runs == ("r1",) and "history of run r1" in plan.reason
    assert plan.time_s <= 1.0 < _first_plan(blind).time_s
    assert second.finished and second.wall_s < blind.wall_s


def test_data_that_behaves_otherwise_sets_the_history_aside_and_costs_nothing():
    first = simulate(_spec(), policy="trident", seed=1)
    priors = tuple(learn(list(first.snapshots), list(first.decisions), run="r1").values())
    slower = _spec(ocr_rate=5.0)  # the same operators, data 4x dearer for OCR
    second = simulate(slower, policy="trident", seed=2, context=PolicyContext(priors=priors))
    blind = simulate(slower, policy="trident", seed=2)
    notes = [n for d in second.decisions for n in d.notes]
    assert any(n.startswith("ocr: measured 5") and "assumed 20" in n for n in notes), notes[:10]
    # the plan made on the history is not rolled out to its end once OCR's tasks contradict it:
    # the same step plans again on what this run measured
    ended = [d for d in second.decisions if "rollout ended: the history of ocr was set aside; planning again" in d.notes]
    assert ended and ended[0].kind == DecisionKind.PLAN and ended[0].plan is not None, [
        (d.time_s, d.kind, d.notes) for d in second.decisions[:8]]
    later = [d for d in second.decisions if d.plan is not None][1:]
    sources = [m for d in later for m in re.findall(r"ocr [\d.]+ rows/s per replica \(([^)]*)\)", d.reason)]
    assert sources and not [s for s in sources if "history" in s]  # OCR is planned on this run's measures
    assert second.finished and second.wall_s <= blind.wall_s * 1.02


def test_before_any_measure_the_estimates_are_the_history_s():
    settings = TridentSettings()
    tr = SimpleNamespace(belief=Belief(_prior([40.0])), heap={}, cold_start_s=None)
    key = ConfigKey(32, "A", 1.0)
    op = SimpleNamespace(config=SimpleNamespace(kind="actor"))
    assert estimates.cold_start_s(tr, op, settings) == 4.0
    assert estimates.heap(tr, key, settings) == 0.0  # no heap remembered: charged as unmeasured


def test_a_step_the_run_did_not_call_a_regime_change_is_remembered_as_two_regimes():
    from trident.history.lessons import levels

    assert levels([40.0, 41.0, 39.0, 40.5]) == [[40.0, 41.0, 39.0, 40.5]]
    assert levels([40.0, 41.0, 39.0, 10.0, 11.0, 10.5]) == [[40.0, 41.0, 39.0], [10.0, 11.0, 10.5]]
    assert levels([40.0, 10.0, 11.0]) == [[40.0, 10.0, 11.0]]  # one window is not a level


def test_an_operator_whose_data_varied_is_believed_only_once_a_measure_names_its_regime():
    cfg = (32, "A", 1.0)
    assert Belief(_prior([40.0, 41.0, 39.0])).rate(cfg) == 40.0  # steady: believed from the start
    assert Belief(_prior([40.0, 41.0], [44.0, 45.0], [38.0])).rate(cfg) == 40.5  # runs that agree: steady too
    spread = Belief(_prior([20.0, 40.0, 90.0, 41.0]))  # one regime, windows spread 2x and more
    stepped = Belief(_prior([40.0, 40.0], [10.0, 11.0]))  # two regimes
    for belief in (spread, stepped):
        assert belief.rate(cfg) is None and belief.open
    note = stepped.see(cfg, 10.2)
    assert "matches regime 2 of 2 remembered from run r1" in note and stepped.rate(cfg) == pytest.approx(10.5)
    assert spread.see(cfg, 200.0) == "" and spread.rate(cfg) is None  # matches nothing: learned from this run
