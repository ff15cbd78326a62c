"""The fluid simulator applies pool targets as the shim's pool driver does, so that simulated
results carry over: one contract, two implementations (the driver on a stand-in for Ray Data's
actor pool, and :class:`~trident.autoscaler.sim.pipeline.PipelineSim`).

Each case starts a pool in a state, sets a target and reads (serving, draining, pending) replicas
at once and once the drained replicas' work is done."""
from dataclasses import dataclass

import pytest
from fake_pool import FakePool

from trident.autoscaler.shim.rollout import drive_to
from trident.autoscaler.sim.pipeline import PipelineSim, PipelineSpec, SimNodes, SimOperator
from trident.core.types import OperatorTarget


@dataclass(frozen=True)
class Case:
    name: str
    running: int
    pending: int
    targets: tuple[int, ...]
    """Applied one after the other, each before the drained replicas' work is done."""
    now: tuple[int, int, int]
    """(serving, draining, pending) right after the last target."""
    done: tuple[int, int, int]
    """The same once every drained replica finished its batch."""


CASES = [
    Case("pending actors are cancelled before a busy one is drained", running=2, pending=2, targets=(2,),
         now=(2, 0, 0), done=(2, 0, 0)),
    Case("busy surplus actors stop getting work and go once done", running=4, pending=0, targets=(2,),
         now=(2, 2, 0), done=(2, 0, 0)),
    Case("a rising target puts drained actors back to work first", running=4, pending=0, targets=(1, 3),
         now=(3, 1, 0), done=(3, 0, 0)),
    Case("a target above the pool starts new actors (pending until up)", running=2, pending=0, targets=(4,),
         now=(2, 0, 2), done=(2, 0, 2)),
]


def _shim(case: Case) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    pool = _growing(FakePool({f"a{i}": 2 for i in range(case.running)}, pending=case.pending))
    for t in case.targets:
        drive_to(pool, target=t, budget=None, reason="contract")

    def observe():
        retiring = getattr(pool, "trident_retiring", set())
        return len(pool._running_actors) - len(retiring), len(retiring), pool.pending

    now = observe()
    for state in pool._running_actors.values():  # every task in flight finishes
        state.num_tasks_in_flight = 0
    drive_to(pool, target=case.targets[-1], budget=None, reason="contract")
    return now, observe()


def _sim(case: Case) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    # one GPU per replica; the cluster has room for the running ones only, the rest stay pending
    model = SimOperator(name="model", kind="actor", peak_rows_per_s=(("A", 10.0),), replicas=case.running + case.pending,
                        max_replicas=8, num_gpus=1, accelerator_type="A", batch_size=10, cold_start_s=0.0)
    src = SimOperator(name="read", kind="task", peak_rows_per_s=(("cpu", 1e4),), replicas=1)
    spec = PipelineSpec(operators=(src, model), nodes=(SimNodes(count=1, cpus=64, gpus=case.running, gpu_type="A"),),
                        total_rows=100_000, noise=0.0, spike_prob=0.0)
    sim = PipelineSim(spec, policy="ray")
    sim._advance(0.5)
    st = sim.ops[1]
    for t in case.targets:
        sim.actuation.apply(OperatorTarget(name="model", replicas=t))

    def observe():
        serving = sum(g.count for g in st.groups if sim.actuation.is_warm(g) and g.release_at_s is None)
        draining = sum(g.count for g in st.groups if g.release_at_s is not None)
        return serving, draining, sum(g.count for g in st.groups if not sim.actuation.is_warm(g))

    now = observe()
    for _ in range(4):  # a batch of 10 rows at 10 rows/s: one second
        sim._advance(0.5)
    return now, observe()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("actuate", [_shim, _sim], ids=["shim", "sim"])
def test_pool_targets_are_applied_to_the_contract(case, actuate):
    now, done = actuate(case)
    assert now == case.now, f"right after the target: {now}"
    assert done == case.done, f"once the drained work is done: {done}"


def _growing(pool: FakePool) -> FakePool:
    """``pool`` whose scale-ups add pending actors (Ray's scale-down as the stand-in has it)."""

    def scale(req, _orig=pool.scale):
        if req.delta > 0:
            pool.pending += req.delta
            return req.delta
        return _orig(req)

    pool.scale = scale
    return pool


def _fake_op(n: int):
    """A stand-in for an actor operator with ``n`` busy actors (started actors stay pending)."""
    from dataclasses import dataclass as _dc

    @_dc
    class Cfg:
        per_actor_resource_usage: object = None

    class Op:
        _ray_remote_args: dict = {}

        def __init__(self, pool):
            self.pool = pool

        def get_autoscaling_actor_pools(self):
            return [self.pool]

    pool = _growing(FakePool({f"old{i}": 2 for i in range(n)}))
    pool._pending_actors, pool._config = {}, Cfg()
    return Op(pool), pool


def _swap_shim(n: int, size: int | None = None) -> list[tuple[int, int, int]]:
    """A swap of ``n`` busy actors to ``size`` (default ``n``) on the shim's rolling update: (old
    serving, new running, starting) after each step, drained actors finishing and new ones coming
    up between steps."""
    from trident.autoscaler.shim.rollout import Rollout

    size = size or n
    op, pool = _fake_op(n)
    made = []
    roll = Rollout(op=op, target=OperatorTarget(name="m", replicas=size, swap=True), size=size)
    seen = []
    for step in range(40):
        roll.step(float(step))
        old = [a for a in pool._running_actors if a in roll.old and a not in pool.trident_retiring]
        seen.append((len(old), len(pool._running_actors) - len(roll.old), pool.pending))
        # old and new together never above the smaller pool while old actors are left
        assert len(pool._running_actors) + pool.pending <= (min(n, size) if roll.old else size)
        for a in pool.trident_retiring:  # drained actors finish their tasks
            pool._running_actors[a].num_tasks_in_flight = 0
        for _ in range(pool.pending):  # starting actors come up
            made.append(f"new{len(made)}")
            pool._running_actors[made[-1]] = type(pool._running_actors[next(iter(pool._running_actors))])(0)
        pool.pending = 0
        if roll.done:
            break
    assert roll.done and len(pool._running_actors) == size
    assert not set(pool._running_actors) & {f"old{i}" for i in range(n)}
    return seen


def test_a_swap_replaces_old_actors_half_the_pool_at_a_time_on_the_shim():
    seen = _swap_shim(8)
    assert min(old + new for old, new, _ in seen) >= 8 - 4  # at most half the pool away at once
    assert len(seen) <= 16


@pytest.mark.parametrize("n, size", [(2, 4), (2, 2), (3, 8)])
def test_a_growing_swap_keeps_an_old_actor_serving_until_new_ones_are_up_on_the_shim(n, size):
    """Two-types: Embed moved 2 -> 4 to the other type, both old actors left at once, and it ran
    none for 16.5 s while its new actors waited for room and started."""
    seen = _swap_shim(n, size)
    assert all(old + new >= 1 for old, new, _ in seen), seen


def _warm_pool(n: int):
    """A simulator whose pool of ``n`` one-GPU replicas (batch 10, 1 s cold start) is warm, and
    the pool's state."""
    model = SimOperator(name="model", kind="actor", peak_rows_per_s=(("A", 10.0),), replicas=n, max_replicas=8,
                        num_gpus=1, accelerator_type="A", batch_size=10, cold_start_s=1.0)
    src = SimOperator(name="read", kind="task", peak_rows_per_s=(("cpu", 1e4),), replicas=1)
    spec = PipelineSpec(operators=(src, model), nodes=(SimNodes(count=1, cpus=64, gpus=8, gpu_type="A"),),
                        total_rows=100_000, noise=0.0, spike_prob=0.0)
    sim = PipelineSim(spec, policy="ray")
    for _ in range(4):
        sim._advance(0.5)
    return sim, sim.ops[1]


def _sim_swap(n: int, size: int) -> list[int]:
    """A swap of ``n`` replicas to ``size`` at another batch on the simulator: replicas serving
    (warm, not released) at each half-second step until all are new."""
    sim, st = _warm_pool(n)
    sim.actuation.apply(OperatorTarget(name="model", batch_size=20, replicas=size, swap=True))
    serving = []
    for _ in range(60):
        sim._advance(0.5)
        assert sum(g.count for g in st.groups) <= max(n, size)
        serving.append(sum(g.count for g in st.groups if sim.actuation.is_warm(g) and g.release_at_s is None))
        if not any(g.retiring for g in st.groups) and serving[-1] == size:
            break
    assert all(g.batch_size == 20 for g in st.groups) and serving[-1] == size, st.groups
    return serving


def test_a_growing_swap_keeps_an_old_replica_serving_until_new_ones_are_up_on_the_simulator():
    assert min(_sim_swap(2, 4)) >= 1


def test_a_swap_replaces_old_replicas_half_the_pool_at_a_time_on_the_simulator():
    assert min(_sim_swap(8, 8)) >= 8 - 4  # half the pool draining or starting at most


def test_a_surge_waits_for_slow_cold_starts_before_it_swaps():
    """New actors that take long to start are not cancelled for a swap before three of the run's
    observed cold starts (at least 15 s) have passed; then the update goes on as a swap."""
    from trident.autoscaler.actuation import pending_guard_s
    from trident.autoscaler.shim.rollout import Rollout

    assert pending_guard_s(None) == 15.0 and pending_guard_s(2.0) == 15.0 and pending_guard_s(12.0) == 36.0
    op, pool = _fake_op(4)
    roll = Rollout(op=op, target=OperatorTarget(name="m", num_gpus=1.0, replicas=4), size=4,
                   pending_guard_s=pending_guard_s(12.0))
    roll.step(0.0)
    assert pool.pending == 4 and not roll.target.swap  # the surge: 4 new actors starting beside the 4 old
    roll.step(30.0)
    assert pool.pending == 4 and not roll.target.swap and not pool.trident_retiring
    notes = roll.step(37.0)
    assert roll.target.swap and any("swapping instead" in n for n in notes), notes


def test_a_surge_with_room_beside_the_old_actors_waits_for_its_slow_starts():
    """New actors that fit beside the running ones are slow to start, not blocked: the guard does
    not cancel them for a swap (that starts them over); without room it does."""
    from trident.autoscaler.shim.rollout import Rollout

    for room in (True, False):
        op, pool = _fake_op(4)
        asked = []
        roll = Rollout(op=op, target=OperatorTarget(name="m", num_gpus=1.0, replicas=4), size=4, pending_guard_s=15.0,
                       room_beside=lambda n: asked.append(n) or room)
        roll.step(0.0)
        notes = roll.step(40.0)
        assert asked == [4] and roll.target.swap is not room, (room, notes)
        assert (pool.pending == 4 and not pool.trident_retiring) if room else any("swapping instead" in n for n in notes)


def test_a_swap_to_a_type_the_pool_already_holds_enough_of_drains_the_others_at_once():
    """Detect moves to B with a target of 2 and has 2 actors there: its 4 actors on A are all
    surplus and stop getting work in the first step (the GPUs they hold are wanted), none is
    started, and the kept ones on B are never scaled down."""
    pool, roll = _move_to_b(6, on_a=4, replicas=2)
    assert pool.trident_retiring == {f"old{i}" for i in range(4)} and pool.pending == 0
    _drained_step(pool, roll)
    assert roll.done and set(pool._running_actors) == {"old4", "old5"} and not pool.released[4:]


def test_a_swap_beside_kept_actors_drains_its_old_half_at_once():
    """Two-types: Detect moves to B with two of its four actors there (kept, serving): both on A stop
    getting work in the first step, and two new ones start once they are gone (one at a time, the
    second drain waited for the first successor: 9.7 s to the target)."""
    pool, roll = _move_to_b(4, on_a=2, replicas=4)
    assert pool.trident_retiring == {"old0", "old1"} and pool.pending == 0
    _drained_step(pool, roll)
    assert roll.done and pool.pending == 2 and set(pool._running_actors) == {"old2", "old3"}


def _move_to_b(n: int, *, on_a: int, replicas: int):
    """A pool of ``n`` busy actors, the first ``on_a`` on type A and the rest on B, after the first
    step of a swap to ``replicas`` on B (an update of the type alone)."""
    from trident.autoscaler.shim.rollout import Rollout

    op, pool = _fake_op(n)
    for i, state in enumerate(pool._running_actors.values()):
        state.actor_location = "a" if i < on_a else "b"
    roll = Rollout(op=op, target=OperatorTarget(name="m", accelerator_type="B", replicas=replicas, swap=True),
                   size=replicas, node_type={"a": "A", "b": "B"}, type_only=True)
    roll.step(0.0)
    return pool, roll


def _drained_step(pool, roll) -> None:
    """The drained actors finish their tasks; the update's next step."""
    for a in list(pool.trident_retiring):
        pool._running_actors[a].num_tasks_in_flight = 0
    roll.step(1.0)


def _typed_sim(replicas: int, gpus_a: int, gpus_b: int, target: OperatorTarget):
    """A pool of ``replicas`` one-GPU replicas placed on type A's ``gpus_a`` GPUs, then type B's
    ``gpus_b``, on the simulator; ``target`` applied once they are up and half a second run after
    it. Returns the simulator, the pool's state and its replicas serving on each type then."""
    model = SimOperator(name="model", kind="actor", peak_rows_per_s=(("A", 10.0), ("B", 10.0)), replicas=replicas,
                        max_replicas=8, num_gpus=1, batch_size=10, cold_start_s=1.0)
    src = SimOperator(name="read", kind="task", peak_rows_per_s=(("cpu", 1e4),), replicas=1)
    spec = PipelineSpec(operators=(src, model), nodes=(SimNodes(count=1, cpus=64, gpus=gpus_a, gpu_type="A"),
                                                       SimNodes(count=1, cpus=64, gpus=gpus_b, gpu_type="B")),
                        total_rows=100_000, noise=0.0, spike_prob=0.0)
    sim = PipelineSim(spec, policy="ray")
    for _ in range(4):
        sim._advance(0.5)
    st = sim.ops[1]
    assert sorted((g.gpu_type, g.count) for g in st.groups) == [("A", min(replicas, gpus_a)),
                                                               ("B", replicas - min(replicas, gpus_a))]
    sim.actuation.apply(target)
    sim._advance(0.5)
    return sim, st, {t: sum(g.count for g in st.groups if g.gpu_type == t and g.release_at_s is None)
                     for t in ("A", "B")}


def test_a_swap_beside_kept_replicas_drains_its_old_half_at_once_on_the_simulator():
    _, st, serving = _typed_sim(4, 2, 2, OperatorTarget(name="model", accelerator_type="B", replicas=4, swap=True))
    assert serving == {"A": 0, "B": 2}, st.groups


def test_a_swap_to_a_type_the_pool_already_holds_enough_of_drains_the_others_at_once_on_the_simulator():
    sim, st, on = _typed_sim(6, 4, 2, OperatorTarget(name="model", accelerator_type="B", replicas=2, swap=True))
    assert on == {"A": 0, "B": 2} and all(g.ready_at_s is not None for g in st.groups), st.groups
    for _ in range(10):
        sim._advance(0.5)
    assert [(g.gpu_type, g.count, g.retiring, g.kept) for g in st.groups] == [("B", 2, False, False)]


def _slots_shim(running: int, target: int, slots: int) -> list[tuple[int, int, int]]:
    """(serving, starting, waiting) on the shim's pool driver with a start gate of ``slots``:
    right after the target, then once the actors started first are up."""
    from trident.autoscaler.shim.starts import StartGate

    pool = _growing(FakePool({f"a{i}": 1 for i in range(running)}))
    seen = []
    for step in range(2):
        if step:  # the started actors come up
            for i in range(pool.pending):
                pool._running_actors[f"new{step}{i}"] = type(next(iter(pool._running_actors.values())))(0)
            pool.pending = 0
        gate = StartGate(lambda: slots - pool.pending)
        drive_to(pool, target=target, budget=None, reason="contract", starts=lambda n: gate.grant("m", n))
        seen.append((len(pool._running_actors), pool.pending, gate.held.get("m", 0)))
    return seen


def _slots_sim(running: int, target: int, slots: int) -> list[tuple[int, int, int]]:
    model = SimOperator(name="model", kind="actor", peak_rows_per_s=(("A", 10.0),), replicas=running,
                        max_replicas=8, num_gpus=1, accelerator_type="A", batch_size=10, cold_start_s=1.0)
    src = SimOperator(name="read", kind="task", peak_rows_per_s=(("cpu", 1e4),), replicas=1)
    spec = PipelineSpec(operators=(src, model), nodes=(SimNodes(count=1, cpus=64, gpus=8, gpu_type="A"),),
                        total_rows=100_000, noise=0.0, spike_prob=0.0, start_slots=slots)
    sim = PipelineSim(spec, policy="ray")
    st = sim.ops[1]
    for _ in range(3):  # the first replicas come up
        sim._advance(0.5)

    def observe():
        warm = sum(g.count for g in st.groups if sim.actuation.is_warm(g))
        waiting = sum(g.count for g in st.groups if g.ready_at_s is None)
        return warm, sum(g.count for g in st.groups) - warm - waiting, waiting

    sim.actuation.apply(OperatorTarget(name="model", replicas=target))
    seen = [observe()]
    for _ in range(3):  # one cold start: the replicas started first are up
        sim._advance(0.5)
    return seen + [observe()]


@pytest.mark.parametrize("actuate", [_slots_shim, _slots_sim], ids=["shim", "sim"])
def test_at_most_the_start_slots_start_at_once_and_the_rest_follow(actuate):
    assert actuate(running=2, target=5, slots=2) == [(2, 2, 1), (4, 1, 0)]


def test_a_rolling_update_that_shrinks_the_pool_retires_every_old_actor_on_the_shim():
    """5 old actors updated to 2 new ones: once both are up, all 5 old ones go (one per new
    actor up left 3 old ones serving, past the plan and the memory limit)."""
    from trident.autoscaler.shim.rollout import Rollout

    op, pool = _fake_op(5)
    roll = Rollout(op=op, target=OperatorTarget(name="m", replicas=2, accelerator_type="B"), size=2)
    for step in range(10):
        roll.step(float(step))
        for a in pool.trident_retiring:  # drained actors finish their tasks
            pool._running_actors[a].num_tasks_in_flight = 0
        for k in range(pool.pending):  # starting actors come up
            pool._running_actors[f"new{step}-{k}"] = type(pool._running_actors[next(iter(pool._running_actors))])(0)
        pool.pending = 0
        if roll.done:
            break
    assert roll.done and len(pool._running_actors) == 2


def test_a_rolling_update_that_shrinks_the_pool_retires_every_old_replica_on_the_simulator():
    sim, st = _warm_pool(5)
    sim.actuation.apply(OperatorTarget(name="model", batch_size=20, replicas=2))
    for _ in range(20):
        sim._advance(0.5)
    assert sum(g.count for g in st.groups) == 2 and all(g.batch_size == 20 for g in st.groups), st.groups
