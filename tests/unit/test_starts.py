"""The shim's pool driver: how many actors it starts side by side (trident.autoscaler.shim.starts),
and when Ray's own rule drives a pool."""
import pytest

from trident.autoscaler.shim.starts import SPAWN_HOLD_S, StartClock, StartGate, start_slots, starting


def _node(host, cpus, alive=True):
    return {"Alive": alive, "NodeManagerAddress": host, "Resources": {"CPU": cpus}}


def test_nodes_on_this_host_share_its_cores_whatever_cpus_they_declare():
    # a ray.cluster_utils.Cluster: four nodes of 8 logical CPUs on one 2-core machine
    nodes = [_node("10.0.0.1", 8) for _ in range(4)]
    assert start_slots(nodes, local_host="10.0.0.1", local_cores=2) == 2


def test_other_hosts_count_their_largest_node_and_dead_nodes_none():
    nodes = [_node("10.0.0.1", 12), _node("10.0.0.2", 32), _node("10.0.0.2", 16), _node("10.0.0.3", 64, alive=False)]
    assert start_slots(nodes, local_host="10.0.0.1", local_cores=2) == 2 + 32


def test_at_least_one_slot():
    assert start_slots([], local_host="x", local_cores=4) == 1


def test_pending_actors_waiting_for_room_are_not_starting():
    # pool a: 4 running at 0.5 GPU and 2 pending; pool b: 2 running at 1 GPU and 3 pending (4 GPUs held)
    pools = [(4, 2, 0.5, 2), (2, 3, 1.0, 3)]
    assert starting(pools, gpus=5.0) == 2  # a's two fit in the free GPU; none of b's
    assert starting(pools, gpus=6.0) == 3  # one GPU more: one of b's starts too
    assert starting([(1, 3, 0.0, 3)], gpus=0.0) == 3  # GPU-less actors always count
    assert starting([(4, 2, 0.5, 1), (2, 3, 1.0, 0)], gpus=6.0) == 1  # only those still starting hold a slot


def test_a_started_actor_holds_its_slot_briefly_on_an_idle_host_and_until_up_on_a_busy_one():
    clock = StartClock()
    cores, busy = 2, [0.0]
    clock.read_host(0.0, lambda: (cores, busy[0]))
    clock.start("a", 2, 0.0)
    assert clock.holding("a", 2, 0.5) == 2  # busy until the host's load is read: both hold
    busy[0] += 0.2  # 0.2 core-seconds in 1 s on 2 cores: idle (constructors that wait)
    clock.read_host(1.0, lambda: (cores, busy[0]))
    assert not clock.busy
    assert clock.holding("a", 2, SPAWN_HOLD_S + 0.01) == 0  # past the hold: the next starts may go
    clock.start("a", 1, 2.0)
    assert clock.holding("a", 3, 2.5) == 1  # the newest is still within its hold
    assert clock.holding("a", 1, 2.5) == 1  # two came up: the oldest ones left the clock
    busy[0] += 1.8  # 1.8 of 2 cores busy over 1 s (constructors that compute)
    clock.read_host(2.0, lambda: (cores, busy[0]))
    assert clock.busy and clock.holding("a", 1, 9.0) == 1
    assert clock.holding("b", 2, 9.0) == 2  # started by Ray's rule: counted from when first seen
    clock.read_host(3.0, lambda: (None, None))
    assert clock.busy  # a load that cannot be read counts as busy


def test_the_gate_grants_in_order_and_keeps_what_it_held_back():
    def unread():
        raise AssertionError("read although nothing was asked to start")

    assert StartGate(unread).grant("a", 0) == 0  # a step that starts nothing reads nothing
    gate = StartGate(lambda: 3)
    assert gate.grant("a", 2) == 2
    assert gate.grant("b", 4) == 1
    assert gate.grant("c", 1) == 0
    assert gate.held == {"b": 3, "c": 1}
    assert StartGate(lambda: -2).grant("a", 1) == 0  # more starting than slots: nothing more


@pytest.mark.parametrize("slots", [0, -1, 1.5, True])
def test_a_bad_start_slots_setting_is_refused(slots):
    import trident

    with pytest.raises(trident.ConfigError, match="start_slots"):
        trident.autoscale(start_slots=slots)


def test_ray_drives_a_pool_until_a_plan_names_it_only_for_a_policy_that_asks_and_without_limits():
    """``ExecutionShim._ray_drives``: the trident policy leaves a pool no plan has named to Ray's
    own rule; not under a memory limit or a GPU budget, not once a plan names the pool, and not
    for a policy that does not ask for it (``static`` holds the user's sizes)."""
    from types import SimpleNamespace

    from trident.core.policy import POLICIES
    from trident.autoscaler.shim.shim import ExecutionShim

    stock = SimpleNamespace(_derive_target_scaling_config=lambda *a: None)

    def shim(policy="trident", memory=None, budget=None, named=()):
        s = SimpleNamespace(config=SimpleNamespace(policy=policy, memory_limit_bytes=memory),
                            run=SimpleNamespace(gpu_budget=budget), autoscaler=SimpleNamespace(stock=stock),
                            pool_targets={op: 2 for op in named})
        s.ray_until_named = bool(getattr(ExecutionShim._policy_class(s), "ray_until_named", False))
        return s

    assert "static" in POLICIES.names()
    assert ExecutionShim._ray_drives(shim(), "op")
    assert not ExecutionShim._ray_drives(shim(named=("op",)), "op")
    assert not ExecutionShim._ray_drives(shim(memory=2**30), "op")
    assert not ExecutionShim._ray_drives(shim(budget=2.0), "op")
    assert not ExecutionShim._ray_drives(shim(policy="static"), "op")
