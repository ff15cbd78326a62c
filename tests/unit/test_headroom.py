"""Headroom around a prior option (trident.core.plan.headroom) and its use by the MILP and the planner."""
from trident.core.plan.headroom import with_headroom
from trident.core.plan.milp import solve_placement
from trident.core.plan.placement import (
    Allocation,
    DeviceOption,
    NodeType,
    OperatorSpec,
    PlacementProblem,
    throughput_of,
    violations,
)
from trident.autoscaler.policies.trident.problem import unmeasured_options


def _two_types(*, upside: float = 4.0, b_gpus: int = 4, horizon_s: float = 260.0,
               cold_start_s: float = 3.2) -> PlacementProblem:
    """Detect measured on A (slow) and B (4x faster); Embed measured on B only, its rate on A a prior."""
    detect = OperatorSpec("detect", (DeviceOption("A", 11.5, cpus=0, gpus=1), DeviceOption("B", 45.5, cpus=0, gpus=1)),
                          min_replicas=1, max_replicas=6, cold_start_s=cold_start_s, single_device=True)
    embed = OperatorSpec("embed", (DeviceOption("B", 24.5, cpus=0, gpus=1),
                                   DeviceOption("A", 24.5, cpus=0, gpus=1, upside=upside)),
                         min_replicas=1, max_replicas=6, cold_start_s=cold_start_s, single_device=True)
    nodes = (NodeType("cpu", 1, cpus=8), NodeType("A", 1, cpus=4, gpus=4, gpu_type="A"),
             NodeType("B", 1, cpus=4, gpus=b_gpus, gpu_type="B"))
    current = Allocation.of({("detect", "A", "A"): 3, ("detect", "B", "B"): 3, ("embed", "B", "B"): 2})
    return PlacementProblem((detect, embed), nodes, current=current, horizon_s=horizon_s)


def test_the_partner_of_a_prior_option_gets_the_gpus_the_plan_leaves_free():
    neutral = solve_placement(_two_types(upside=1.0))
    hopeful = solve_placement(_two_types())
    assert neutral.allocation.by_device("embed") == hopeful.allocation.by_device("embed") == {"A": 4}
    assert neutral.allocation.by_device("detect") == {"B": neutral.allocation.replicas("detect")}
    assert neutral.allocation.replicas("detect") < 4 and neutral.notes == ()
    assert hopeful.allocation.by_device("detect") == {"B": 4}  # all of B: Embed on A may run 4x its prior
    assert hopeful.throughput_rows_per_s >= neutral.throughput_rows_per_s  # nothing lost at the prior rates
    assert "embed on A" in hopeful.notes[0] and "detect" in hopeful.notes[0]


def test_headroom_stays_within_the_resources():
    r = solve_placement(_two_types(b_gpus=3))
    assert r.allocation.by_device("detect") == {"B": 3}
    assert not violations(_two_types(b_gpus=3), r.allocation)


def test_no_headroom_when_a_start_does_not_pay_or_no_prior_is_used():
    p = _two_types(horizon_s=1.0, cold_start_s=30.0)  # every start costs more than it could gain
    alloc = Allocation.of({("detect", "B", "B"): 2, ("embed", "A", "A"): 2})
    assert with_headroom(p, alloc) == (alloc, [])
    measured_only = Allocation.of({("detect", "B", "B"): 2, ("embed", "B", "B"): 2})
    assert with_headroom(_two_types(), measured_only) == (measured_only, [])


def test_headroom_only_adds_replicas_and_keeps_the_prior_throughput():
    p = _two_types()
    alloc = Allocation.of({("detect", "B", "B"): 1, ("embed", "A", "A"): 4})
    grown, notes = with_headroom(p, alloc)
    before, after = alloc.as_dict(), grown.as_dict()
    assert all(after[k] >= c for k, c in before.items()) and after != before and notes
    assert throughput_of(p, grown) >= throughput_of(p, alloc)
    assert not violations(p, grown)


def test_unmeasured_options_carry_the_upside():
    measured = [DeviceOption("B", 10.0, cpus=0, gpus=1), DeviceOption("C", 20.0, cpus=0, gpus=1)]
    (prior,) = unmeasured_options(measured, {"A": 4, "B": 4, "C": 4}, upside=3.0)
    assert (prior.device, prior.rate_rows_per_s, prior.upside) == ("A", 10.0, 3.0)
    assert all(o.upside == 1.0 for o in unmeasured_options(measured, {"A": 4, "B": 4, "C": 4}))
