"""The planner's cluster is Ray's live nodes: read from a recorded ``ray.nodes()`` (a head without
GPUs, GPU nodes short of CPUs, two accelerator types, a dead node), grouped by shape, and a plan
that would not fit a node is never issued."""
import json
import pathlib

import pytest

from trident.autoscaler.policies.trident.nodes import node_types, on_nodes
from trident.autoscaler.sim.pipeline import PipelineSpec, SimNodes, SimOperator, simulate
from trident.core.cluster import NodeShape, most_per_node, node_groups, node_shapes
from trident.core.errors import ConfigError
from trident.core.plan.milp import solve_placement
from trident.core.plan.placement import ANY_GPU, CPU, Allocation, DeviceOption, OperatorSpec, PlacementProblem, violations
from trident.core.types import ClusterView

RECORDED = json.loads((pathlib.Path(__file__).parent / "fixtures" / "ray_nodes_gpu_short_of_cpus.json").read_text())


def test_live_nodes_are_read_with_their_type_and_the_dead_one_left_out():
    nodes = node_shapes(RECORDED)
    assert len(RECORDED) == 6 and len(nodes) == 5  # one node of the recording was removed (dead)
    assert [(n.accelerator_type, n.cpus, n.gpus) for n in nodes] == [
        (None, 6.0, 0.0), ("A", 3.0, 2.0), ("A", 3.0, 2.0), ("B", 3.0, 2.0), ("B", 3.0, 2.0)]
    assert all(n.memory_bytes and n.object_store_bytes for n in nodes)
    assert all(not any(k.startswith("node:") for k, _ in n.resources) for n in nodes)


def test_custom_resources_are_kept_and_split_groups():
    rec = [{"NodeID": "x", "Alive": True, "Resources": {"CPU": 4.0, "GPU": 1.0, "accelerator_type:T4": 1.0,
                                                         "fast_disk": 2.0, "node:10.0.0.1": 1.0}},
           {"NodeID": "y", "Alive": True, "Resources": {"CPU": 4.0, "GPU": 1.0, "accelerator_type:T4": 1.0}},
           {"NodeID": "z", "Alive": False, "Resources": {"CPU": 64.0}}]
    nodes = node_shapes(rec)
    assert [n.resources for n in nodes] == [(), (("fast_disk", 2.0),)]
    assert [g.name for g in node_groups(nodes)] == ["T4-4cpu-1gpu", "T4-4cpu-1gpu-fast_disk2"]


def test_identical_nodes_are_grouped():
    groups = node_groups(node_shapes(RECORDED))
    assert [(g.name, g.count, g.cpus, g.gpus, g.accelerator_type) for g in groups] == [
        ("cpu-6cpu", 1, 6.0, 0.0, None), ("A-3cpu-2gpu", 2, 3.0, 2.0, "A"), ("B-3cpu-2gpu", 2, 3.0, 2.0, "B")]
    many = [NodeShape(node_id=str(i), cpus=32, gpus=8, accelerator_type="H100") for i in range(200)]
    assert [(g.count, g.name) for g in node_groups(many)] == [(200, "H100-32cpu-8gpu")]


def test_a_bundle_fits_whole_on_one_node():
    nodes = node_shapes(RECORDED)
    # one CPU and half a GPU: three per GPU node (its CPUs), none on the head (no GPU)
    assert most_per_node(nodes, cpus=1, gpus=0.5) == 12
    assert most_per_node(nodes, cpus=1, gpus=0.5, accelerator_type="B") == 6
    assert most_per_node(nodes, cpus=2, gpus=0.5) == 4  # 18 CPUs in all, but 3 per GPU node
    assert most_per_node(nodes, cpus=1, gpus=0) == 18
    with pytest.raises(ConfigError):
        NodeShape(node_id="bad", cpus=-1)


def _problem(view: ClusterView, *, per_type: bool, bin_packing: bool):
    typed = dict(view.gpus_by_type)
    gpu_dev = ANY_GPU if not per_type else "B"
    ops = (OperatorSpec(name="read", options=(DeviceOption(device=CPU, rate_rows_per_s=100.0),), min_replicas=1),
           OperatorSpec(name="detect", options=(DeviceOption(device=gpu_dev, rate_rows_per_s=10.0, cpus=1, gpus=0.5),),
                        min_replicas=1, max_replicas=8, single_device=True),
           OperatorSpec(name="embed", options=(DeviceOption(device=ANY_GPU if not per_type else "A",
                                                            rate_rows_per_s=10.0, cpus=1, gpus=0.5),),
                        min_replicas=1, max_replicas=8, single_device=True))
    nodes = node_types(view, typed, per_type)
    current = on_nodes({("read", CPU): 2, ("detect", gpu_dev): 1, ("embed", ops[2].options[0].device): 1},
                       list(ops), nodes)
    return PlacementProblem(operators=ops, node_types=tuple(nodes), current=Allocation.of(current),
                            cpus_limit=view.cpus, gpus_limit=view.gpus, bin_packing=bin_packing)


VIEW = ClusterView(cpus=18.0, gpus=8.0, gpus_by_type=(("A", 4.0), ("B", 4.0)), cpus_by_type=(("A", 6.0), ("B", 6.0)),
                   nodes=node_shapes(RECORDED))


@pytest.mark.parametrize("per_type", [False, True])
def test_the_plan_puts_no_more_gpu_actors_than_the_gpu_nodes_cpus_hold(per_type):
    prob = _problem(VIEW, per_type=per_type, bin_packing=True)
    res = solve_placement(prob)
    assert res.changed and not violations(prob, res.allocation)
    gpu_actors = res.allocation.replicas("detect") + res.allocation.replicas("embed")
    assert gpu_actors == 12  # not 16: the head's 6 CPUs host no GPU actor
    per_node = {}
    for o, d, n, k, c in res.allocation.nodes:
        per_node.setdefault((n, k), []).append((o, c))
    assert all(sum(c for o, c in v if o != "read") <= 3 for (n, _), v in per_node.items() if n != "cpu-6cpu")


def test_totals_alone_would_plan_actors_ray_cannot_place():
    """Without the nodes the planner sees 18 CPUs and 8 GPUs: 16 GPU actors (what the run record
    of the uncorrected planner showed), 4 of which Ray leaves pending."""
    totals = ClusterView(cpus=18.0, gpus=8.0)
    res = solve_placement(_problem(totals, per_type=False, bin_packing=False))
    assert res.allocation.replicas("detect") + res.allocation.replicas("embed") == 16


def test_a_gpu_budget_below_the_nodes_gpus_caps_the_plan():
    budget = ClusterView(cpus=18.0, gpus=2.0, nodes=node_shapes(RECORDED))
    prob = _problem(budget, per_type=False, bin_packing=True)
    res = solve_placement(prob)
    assert res.allocation.replicas("detect") + res.allocation.replicas("embed") == 4
    assert not violations(prob, res.allocation)


def short_of_cpus_spec() -> PipelineSpec:
    """A head of 6 CPUs, four GPU nodes of 2 GPUs and 3 CPUs, two of each type; two pools of half
    a GPU and one CPU, up to 8 each, both short of replicas (planned on totals: 8 + 8)."""
    ops = (SimOperator(name="read", kind="task", peak_rows_per_s=(("cpu", 400.0),), replicas=2, max_replicas=6),
           SimOperator(name="detect", kind="actor", peak_rows_per_s=(("A", 10.0), ("B", 10.0)), replicas=1,
                       max_replicas=8, num_gpus=0.5, cold_start_s=3.0),
           SimOperator(name="embed", kind="actor", peak_rows_per_s=(("A", 10.0), ("B", 10.0)), replicas=1,
                       max_replicas=8, num_gpus=0.5, cold_start_s=3.0))
    return PipelineSpec(operators=ops, nodes=(SimNodes(count=1, cpus=6), SimNodes(count=2, cpus=3, gpus=2, gpu_type="A"),
                                              SimNodes(count=2, cpus=3, gpus=2, gpu_type="B")),
                        total_rows=12_000, noise=0.02, spike_prob=0.0)


def test_in_the_simulator_no_plan_asks_for_more_gpu_actors_than_fit():
    """The issue's cluster in the fluid simulator (:func:`short_of_cpus_spec`)."""
    res = simulate(short_of_cpus_spec(), policy="trident", seed=3)
    assert res.finished
    planned = []
    for d in res.decisions:
        if d.plan is None:
            continue
        sizes = {t.name: t.replicas for t in d.plan.targets if t.replicas is not None}
        planned.append(sizes)
    assert planned, [d.reason for d in res.decisions if d.kind not in ("observe", "dwell")][:10]
    last = {}
    for sizes in planned:
        last.update(sizes)
        assert last.get("detect", 1) + last.get("embed", 1) <= 12, last
