"""Generated scenarios: the generator is seeded and stays within its ranges; on a fixed handful
of seeds (small enough for CI) every row comes out once under trident and Ray's rule, trident is
never OOM-killed under the limit it is told, and nobody beats the work bound."""
import pytest

from trident.autoscaler.actuation import pending_guard_s
from trident.autoscaler.sim.generate import draw, starts, work_bound_s
from trident.autoscaler.sim.model import CPU, PipelineSpec, Regime, SimNodes, SimOperator
from trident.autoscaler.sim.pipeline import simulate
from trident.autoscaler.sim.ray_rule import RayRule
from trident.core.errors import ConfigError
from trident.core.policy import PolicyContext
from trident.report.predictions import plan_checks

SEEDS = (2, 6, 11)
"""Development seeds for the property (the benchmark's held-out set starts at 100,000)."""
def _run(seed: int, *, work_s: float):
    drawn = draw(seed, work_s=work_s)
    ctx = PolicyContext(memory_limit_bytes=drawn.memory_limit_bytes, seed=seed)
    ray = simulate(drawn.spec, policy=RayRule(context=ctx), seed=seed, context=ctx)
    tri = simulate(drawn.spec, policy="trident", seed=seed, context=ctx)
    return drawn, ray, tri


def test_the_same_seed_draws_the_same_scenario_and_others_differ():
    assert draw(7) == draw(7)
    assert len({draw(s).describe() for s in range(12)}) == 12
    with pytest.raises(ConfigError):
        draw(1, work_s=0)


@pytest.mark.parametrize("seed", range(40))
def test_drawn_scenarios_stay_within_their_ranges(seed):
    spec = draw(seed, work_s=60).spec
    assert 2 <= len(spec.operators) <= 6 and spec.operators[0].kind == "task"
    assert 2 <= sum(n.count for n in spec.nodes) <= 1 + 3 * 5 + 3
    for n in spec.nodes:
        assert 2 <= n.cpus <= 32 and 0 <= n.gpus <= 8 and (n.gpus == 0) == (n.gpu_type is None)
    for o in spec.operators:
        assert o.num_gpus in (0.0, 0.25, 0.5, 1.0)
        speeds = [r for _, r in o.peak_rows_per_s]
        assert max(speeds) <= 6 * min(speeds) + 1e-9
    assert 0 < work_bound_s(spec) < float("inf")
    assert starts(spec)  # one replica of each operator fits at once: the pipeline can finish


def _slowed(regime_by: str) -> PipelineSpec:
    """1,000 rows; op1 at 10 rows/s on one replica, at half that from row 500 on."""
    read = SimOperator(name="read", kind="task", peak_rows_per_s=((CPU, 1000.0),), replicas=1, max_replicas=1)
    op1 = SimOperator(name="op1", kind="task", peak_rows_per_s=((CPU, 10.0),), replicas=1, max_replicas=1,
                      regimes=(Regime(start=500.0, rate_scale=0.5),), regime_by=regime_by)
    return PipelineSpec(operators=(read, op1), nodes=(SimNodes(count=1, cpus=2.0),), total_rows=1000)


def test_the_work_bound_runs_each_part_of_the_data_at_its_own_rate():
    # 500 rows at 10 rows/s, then 500 at 5: 150 s, not the 100 s of the faster rate throughout
    assert work_bound_s(_slowed("rows")) == pytest.approx(150.0, rel=1e-6)
    # a change by time may come after the last row: the faster rate bounds it
    assert work_bound_s(_slowed("time")) == pytest.approx(100.0, rel=1e-6)
    slowed = simulate(_slowed("rows"), policy="static", seed=0)
    assert slowed.finished and slowed.wall_s >= 0.95 * 150.0


@pytest.mark.parametrize("seed", SEEDS)
def test_rows_once_no_oom_under_trident_and_nobody_beats_the_bound(seed):
    drawn, ray, tri = _run(seed, work_s=60)
    bound = work_bound_s(drawn.spec)
    for res in (ray, tri):
        assert res.finished and res.source_rows == drawn.spec.total_rows
        selectivity = 1.0
        for o in drawn.spec.operators:
            selectivity *= o.selectivity
        assert res.rows_out == pytest.approx(drawn.spec.total_rows * selectivity, rel=1e-6)
        assert res.wall_s >= 0.9 * bound, (res.policy, res.wall_s, bound)  # bursts aside, none is faster
    assert tri.oom_kills == 0


def test_the_simulator_says_when_a_plan_is_in_place_and_its_prediction_is_measured_from_there():
    checks = []
    for seed in SEEDS:
        drawn, _, tri = _run(seed, work_s=60)
        snaps = {s.time_s: s for s in tri.snapshots}
        plans = [d for d in tri.decisions if d.plan is not None]
        for a in tri.actions:  # every pool a plan moved is reported up once all its replicas are
            plan = max((d for d in plans if d.time_s <= a.time_s), key=lambda d: d.time_s)
            want = next(t.replicas for t in plan.plan.targets if t.name == a.operator)
            op = snaps[a.time_s].operator(a.operator)
            want = min(want, op.config.max_replicas or want)  # a plan's size, within the pool's bounds
            assert a.kind == "target_reached" and op.actors_running == want and op.actors_pending == 0
        for c in plan_checks(tri):
            assert c.reached_s in [c.time_s] + [a.time_s for a in tri.actions] and c.reached_s < c.until_s
            checks.append(c)
    errors = sorted(c.error for c in checks)
    assert errors and errors[(len(errors) - 1) // 2] <= 0.15, errors  # the plans' predictions come true


_NO_TASKS = ("the simulator counted no finished tasks, so the policy never measured a selectivity and read "
             "a fan-out's or a filter's rows in as its rows out")
FIXED = {
    86: "the first plan per type came while op3's one actor on A, 6x faster there, was still starting: "
        "it pinned op3 to B and retired that actor before its first task",
    185: _NO_TASKS + " (a x3 fan-out)",
    20: _NO_TASKS,
    47: _NO_TASKS,
    139: _NO_TASKS,
    32: "the pool bounding a settled plan ran on its slow type only; it is now tried once on another type",
    0: "a pool pending for room on its own type capped every later plan at the GPUs running, and the "
       "other types' idle GPUs stayed out of them",
    24: "the bottleneck, 4x faster on B, stayed on A: B's nodes had CPUs for 6 of its 8 replicas and a "
        "move to measure it needed room for all",
    84: "the bottleneck was moved to measure it with too little work left for the move to pay",
    194: "a pool 6x faster on B ran on A and B for 250 s: two backpressured pools on B alone had no "
         "per-type rate, and kept every pool from being planned per type",
    171: "a pool spread over types, planned at its average rate, was held at 3 replicas (no per-type plan, "
         "as for 194)",
    34: "a batch-size trial of twice the batch on half the bottleneck's replicas (all its memory allowed) "
        "stopped the pool for a swap that could at best match what it made",
    61: "a plan 8-9% better than the current one, under the 10% hysteresis, was found at every look for "
        "130 s and never taken",
    60: "Ray's rule ran 32 OOM kills past the memory limit for free: the simulator gave a killed actor's "
        "tasks to the others at once, where Ray retries them on that actor after its cold start",
    45: "the bottleneck, explored on a type where it ran at half its rate, had its windows there at 42 s "
        "and went back only at 61 s, after the dwell",
    152: "a pool explored on a type where its first window showed under half its rate waited for a "
         "second window and the dwell before it went back",
    142: "6 CPUs on the GPU nodes for four pools: the batch search sized a larger batch's trial for 7-13 "
         "replicas of the bottleneck, whose nodes had CPUs for 3, found none safe under the memory limit "
         "and never tried one",
}
"""Development seeds trident once lost to Ray's rule, and why: each stays at >= 0.98x."""


@pytest.mark.parametrize("seed", sorted(FIXED))
def test_a_fixed_loss_stays_fixed(seed):
    drawn, ray, tri = _run(seed, work_s=240)
    assert tri.finished and tri.source_rows == drawn.spec.total_rows
    assert ray.wall_s / tri.wall_s >= 0.98, FIXED[seed]


def test_the_simulator_counts_finished_tasks_per_batch():
    drawn = draw(185, work_s=60)
    res = simulate(drawn.spec, policy="static", seed=185)
    for op, snap in zip(drawn.spec.operators, res.snapshots[-1].operators):
        rows_per_task = op.batch_size or drawn.spec.rows_per_block
        assert snap.tasks_finished == pytest.approx(snap.rows_in_total / rows_per_task, abs=1.0)


def test_a_kept_plan_whose_actor_stays_pending_is_a_mismatch_that_names_it():
    """Seed 47: a replan leaves one actor of op5 pending and the looks after it keep the plan. The
    keep is a prediction too: within a cold start plus a few intervals of it, a ``mismatch`` names
    the pending actor and the resource, and a plan follows."""
    drawn = draw(47, work_s=240)
    ctx = PolicyContext(memory_limit_bytes=drawn.memory_limit_bytes, seed=47)
    res = simulate(drawn.spec, policy="trident", seed=47, context=ctx)
    story = [f"{d.time_s:.0f} {d.kind}: {d.reason[:120]}" for d in res.decisions if d.kind not in ("observe", "dwell")]
    for i, d in enumerate(res.decisions):
        if d.kind != "mismatch":
            continue
        since = [e for e in res.decisions[:i] if e.plan is not None or e.kind in ("keep", "mismatch")]
        if since and since[-1].kind == "keep":
            break
    else:
        raise AssertionError(story)
    assert "pending" in d.reason and "op5" in d.reason, d.reason
    kept = next(e for e in reversed(res.decisions[:i]) if e.kind == "keep" and e.predicted_rows_per_s)
    assert d.time_s - kept.time_s <= 30.0, story  # the keep's own check, not a plan's of long ago
    assert any(e.plan is not None for e in res.decisions[i + 1:i + 4]), story


def test_a_rolling_update_whose_new_actor_finds_no_room_does_not_hold_the_planner():
    """Seed 102: op3's rolling update to A starts its new actors but one finds no room, so an old
    actor keeps working beside them and op3's counters never measure the new configuration.
    Once the actor has waited past a surge's pending guard, the planner plans without that
    measure (it observed for 440 s, its last plan's mismatch naming the pending actor)."""
    drawn = draw(102, work_s=240)
    ctx = PolicyContext(memory_limit_bytes=drawn.memory_limit_bytes, seed=102)
    res = simulate(drawn.spec, policy="trident", seed=102, context=ctx)
    assert res.finished
    first = next(d.time_s for d in res.decisions if d.kind == "plan")
    longest, since = 0.0, None
    for d in res.decisions:
        if d.time_s > first and d.kind == "observe":
            since = d.time_s if since is None else since
            longest = max(longest, d.time_s - since)
        else:
            since = None
    assert longest <= pending_guard_s(None) + 10.0, longest


def test_a_gpu_cap_learned_beside_a_pool_of_quarter_gpus_ends_when_that_pool_finishes():
    """Seed 81: op2's quarter-GPU actors spread over four 1-GPU nodes leave no node for a third
    whole-GPU actor of op4; the mismatch caps the GPUs at what the running actors hold. A task
    operator that finishes frees no GPU and keeps the cap (no second try that leaves op4's actor
    pending again); op2 finishing frees its GPUs, and the next plan grows op4 past the cap."""
    drawn = draw(81, work_s=240)
    ctx = PolicyContext(memory_limit_bytes=drawn.memory_limit_bytes, seed=81)
    res = simulate(drawn.spec, policy="trident", seed=81, context=ctx)
    assert res.finished and res.source_rows == drawn.spec.total_rows
    story = [f"{d.time_s:.0f} {d.kind}: {d.reason[:120]}" for d in res.decisions if d.kind not in ("observe", "dwell")]
    capped = [d for d in res.decisions if d.kind == "mismatch" and "of op4 pending" in d.reason]
    assert len(capped) == 1, story
    op2_done = next(s.time_s for s in res.snapshots if s.operator("op2").completed)
    grown = [t for d in res.decisions if d.plan is not None and d.time_s >= op2_done
             for t in d.plan.targets if t.name == "op4" and (t.replicas or 0) > 2]
    assert grown, story


def test_pools_whose_actors_land_on_a_slower_type_keep_their_regime_and_are_planned_per_type():
    """Seed 175: op2 measured on C; the first plan grew it unpinned and Ray's placement put 7 of its
    9 actors on A, 4x slower, while op1 ran on A and C backpressured by it. Each pool's rate per
    replica fell with the placement, not the data (the drawn op1 and op2 have no regime change):
    none is declared, and with op1's speed per type read from its tasks while backpressured, the
    next plan moves op2 to C."""
    drawn = draw(175, work_s=240)
    assert all(not o.regimes for o in drawn.spec.operators if o.name in ("op1", "op2"))
    res = simulate(drawn.spec, policy="trident", seed=175,
                   context=PolicyContext(memory_limit_bytes=drawn.memory_limit_bytes, seed=175))
    assert res.finished
    assert not [(d.time_s, d.regime_changes) for d in res.decisions if d.regime_changes]
    pins = [t.accelerator_type for d in res.decisions if d.kind == "plan" for t in d.plan.targets if t.name == "op2"]
    assert "C" in pins, [d.reason[:200] for d in res.decisions if d.kind in ("plan", "mismatch")]
