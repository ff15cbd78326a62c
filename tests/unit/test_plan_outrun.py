"""A task stage the plan could not size (no rate when the plan was made) that proves too slow for
it ends the plan's rollout: replayed on the snapshots a real run recorded (generated scenario 97
on a ``ray.cluster_utils.Cluster``: read -> a pool of 0.25 GPU -> op2 -> op3, op3 a task stage at
the user's concurrency of 1 whose first input came after the first plan)."""
import gzip
import json
import pathlib
from dataclasses import replace

from trident.autoscaler.policies.trident import TridentPolicy
from trident.core.policy import PolicyContext
from trident.core.types import DecisionKind
from trident.report.record import RunRecord

RECORDED = pathlib.Path(__file__).parent / "fixtures" / "generated_seed97_first_13s.json.gz"
OP3 = "MapBatches(op3)"


def _snapshots():
    return RunRecord.from_dict(json.loads(gzip.decompress(RECORDED.read_bytes()))).executions[0].snapshots


def _replay():
    policy = TridentPolicy(context=PolicyContext(seed=0))
    return [policy.step(s, s.time_s) for s in _snapshots()]


def test_a_task_stage_measured_too_slow_for_the_plan_ends_its_rollout_and_is_scaled():
    decisions = _replay()
    plans = [d for d in decisions if d.plan is not None]
    first = plans[0]
    assert first.kind == DecisionKind.PLAN and all(t.name != OP3 for t in first.plan.targets), first.reason
    assert f"{OP3} " not in first.reason.split("from ")[1].split(";")[0]  # no rate of op3 when it was made
    ended = [d for d in decisions if any(n.startswith(f"rollout ended: {OP3} puts out") for n in d.notes)]
    assert len(ended) == 1, [d.notes for d in decisions]
    replan = ended[0]
    assert replan.plan is not None and replan.time_s - first.time_s < 10  # the pool's rollout waited 20 s
    (op3,) = [t for t in replan.plan.targets if t.name == OP3]
    assert op3.replicas > 1, replan.reason
    assert not any(d.kind == DecisionKind.ROLLOUT for d in decisions[decisions.index(first):decisions.index(replan)]
                   if "next phase" in d.reason)


def test_a_stage_whose_concurrency_carries_the_plan_leaves_the_rollout_alone():
    """The same snapshots with op3 allowed 8 tasks at once (8 x its rate carries the plan): the
    rollout is waited for."""
    policy = TridentPolicy(context=PolicyContext(seed=0))
    notes = []
    for s in _snapshots():
        ops = tuple(replace(o, config=replace(o.config, replicas=8)) if o.name == OP3 else o for o in s.operators)
        notes += policy.step(replace(s, operators=ops), s.time_s).notes
    assert not [n for n in notes if n.startswith("rollout ended")], notes
