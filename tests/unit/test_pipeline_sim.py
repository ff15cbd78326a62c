"""The fluid pipeline simulator: conservation, backpressure, cold starts, OOM, regimes, rolling updates."""
import pytest

from trident.core.errors import ConfigError
from trident.autoscaler.sim.pipeline import PipelineSim, PipelineSpec, Regime, SimNodes, SimOperator, simulate
from trident.core.types import Decision, OperatorTarget, Plan

GiB = 2**30


class Scripted:
    """A policy that issues given targets at given times (and records the snapshots it saw)."""

    name = "scripted"

    def __init__(self, script):
        self.script = sorted(script, key=lambda s: s[0])
        self.seq = 0
        self.seen = []

    def step(self, snapshot, now):
        self.seen.append(snapshot)
        due = [t for at, t in self.script if at <= now]
        self.script = [(at, t) for at, t in self.script if at > now]
        if not due:
            return Decision(time_s=now, reason="scripted: nothing due")
        self.seq += 1
        return Decision(time_s=now, reason="scripted", plan=Plan(seq=self.seq, targets=tuple(due), reason="scripted",
                                                                 created_at_s=now))


def _spec(**kw):
    ops = (
        SimOperator(name="read", kind="task", peak_rows_per_s=(("cpu", 100.0),), replicas=4, max_replicas=16),
        SimOperator(name="ocr", kind="actor", peak_rows_per_s=(("A", 50.0), ("B", 25.0)), replicas=4, max_replicas=16,
                    num_gpus=1, accelerator_type="A", batch_size=32, selectivity=2.0, cold_start_s=10.0,
                    heap_base_bytes=1 * GiB, heap_per_batch_row_bytes=GiB / 32),
        SimOperator(name="embed", kind="actor", peak_rows_per_s=(("A", 200.0), ("B", 120.0)), replicas=4,
                    max_replicas=16, num_gpus=1, accelerator_type="B", cold_start_s=5.0),
    )
    base = dict(operators=ops, nodes=(SimNodes(count=1, cpus=16, gpus=8, gpu_type="A"),
                                      SimNodes(count=1, cpus=16, gpus=4, gpu_type="B")),
                total_rows=20_000, noise=0.0, spike_prob=0.0)
    base.update(kw)
    return PipelineSpec(**base)


def test_every_row_comes_out_exactly_once_and_throughput_matches_the_bottleneck():
    res = simulate(_spec(), policy=Scripted([]), seed=0)
    assert res.finished and res.source_rows == 20_000
    assert res.rows_out == pytest.approx(40_000, rel=1e-9)  # ocr doubles the rows
    # ocr, the bottleneck: 4 replicas x 50 rows/s; embed takes 2 x 200 of 4 x 120 rows/s; ocr's cold start 10 s
    assert res.wall_s == pytest.approx(10 + 20_000 / 200, abs=2)


def test_backpressure_bounds_queues_and_marks_the_upstream():
    pol = Scripted([])
    simulate(_spec(queue_limit_rows=500), policy=pol, seed=0)
    read = [s.operator("read") for s in pol.seen[20:60]]
    ocr_q = [s.operator("ocr").input_queue_blocks * 100 for s in pol.seen]
    assert max(ocr_q) <= 500
    assert all(r.backpressured for r in read)


def test_cold_start_delays_new_replicas_and_snapshot_reports_them_pending():
    pol = Scripted([(20.0, OperatorTarget(name="ocr", replicas=8))])
    res = simulate(_spec(), policy=pol, seed=0)
    at = {round(s.time_s): s.operator("ocr") for s in pol.seen}
    assert at[25].actors_pending == 4 and at[25].actors_running == 4
    assert at[32].actors_pending == 0 and at[32].actors_running == 8
    assert res.reconfigurations == 1
    assert res.wall_s < 10 + 20_000 / 200  # the pipeline sped up


def test_actors_starting_together_share_the_host_s_cores_before_their_cold_start():
    """4 new ocr replicas at 20 s, each 2 CPU-seconds of process start on a host of 2 cores: they
    start side by side at half speed, 4 s, then their 10 s cold start; without a host model, 10 s."""
    ups = {}
    for spawn_s in (0.0, 2.0):
        pol = Scripted([(20.0, OperatorTarget(name="ocr", replicas=8))])
        simulate(_spec(actor_spawn_s=spawn_s, host_cores=2), policy=pol, seed=0)
        ups[spawn_s] = min(s.time_s for s in pol.seen if s.time_s > 20 and s.operator("ocr").actors_running == 8)
        assert all(s.operator("ocr").actors_running + s.operator("ocr").actors_pending == 8 for s in pol.seen
                   if 21 <= s.time_s < ups[spawn_s])  # the starting ones are pending all along
    assert ups[0.0] == pytest.approx(20 + 10, abs=1.5)
    assert ups[2.0] == pytest.approx(ups[0.0] + 4 * 2.0 / 2, abs=1.5)
    with pytest.raises(ConfigError, match="actor_spawn_s/host_cores/task_latency_s"):
        _spec(actor_spawn_s=-1.0)


def test_a_task_s_latency_slows_task_operators_and_not_actor_pools():
    """Blocks of 100 rows at 100 rows/s per task: 1 s of work; with 0.5 s of latency a task takes
    1.5 s, so 4 read tasks at once carry 267 rows/s instead of 400. The actor pools keep a second
    task in flight and do not wait on it."""
    ops = (SimOperator(name="read", kind="task", peak_rows_per_s=(("cpu", 100.0),), replicas=4, max_replicas=4),)
    walls = {lat: simulate(_spec(operators=ops, task_latency_s=lat), policy=Scripted([]), seed=0).wall_s
             for lat in (0.0, 0.5)}
    assert walls[0.0] == pytest.approx(20_000 / 400, abs=1.5)
    assert walls[0.5] == pytest.approx(20_000 / (400 / 1.5), abs=1.5)
    pooled = [simulate(_spec(task_latency_s=lat), policy=Scripted([]), seed=0).wall_s for lat in (0.0, 0.5)]
    assert pooled[0] == pooled[1]  # the read tasks (4 x 100 rows/s) are not the bottleneck: ocr's pool is


def test_many_tasks_at_once_share_the_host_s_cores_for_their_overhead():
    """16 read tasks at once of 1 s of work, each costing the host 0.25 CPU-seconds on 2 cores:
    a task's latency is 16 x 0.25 / 2 = 2 s, so a task takes 3 s; 2 tasks at once stay at the
    0.1 s floor (2 x 0.25 / 2 = 0.25 s)."""
    def wall(n):
        ops = (SimOperator(name="read", kind="task", peak_rows_per_s=(("cpu", 100.0),), replicas=n, max_replicas=n),)
        return simulate(_spec(operators=ops, nodes=(SimNodes(count=1, cpus=16, gpus=0),), task_latency_s=0.1,
                              task_overhead_s=0.25, host_cores=2), policy=Scripted([]), seed=0).wall_s
    assert wall(16) == pytest.approx(20_000 / (1600 / 3.0), rel=0.08)
    assert wall(2) == pytest.approx(20_000 / (200 / 1.25), rel=0.05)
    with pytest.raises(ConfigError, match="task_overhead_s"):
        _spec(task_overhead_s=-0.1)


def test_ray_s_rule_adds_no_more_actors_than_the_free_gpus_hold_and_shrinks_a_starved_pool():
    """Ray 2.60's autoscaler caps a scale-up at what the cluster's free resources hold in all (a
    pool asking for more would hold pending actors, and Ray shrinks no pool with actors pending),
    and a pool starved of input shrinks."""
    from trident.autoscaler.sim.ray_rule import RayRule

    ops = (SimOperator(name="read", kind="task", peak_rows_per_s=(("cpu", 200.0),), replicas=2, max_replicas=2,
                       regimes=(Regime(start=4_000, rate_scale=0.1),), regime_by="rows"),
           SimOperator(name="embed", kind="actor", peak_rows_per_s=(("A", 40.0),), replicas=1, max_replicas=16,
                       num_gpus=1, cold_start_s=2.0))
    spec = _spec(operators=ops, nodes=(SimNodes(count=1, cpus=16, gpus=6, gpu_type="A"),), total_rows=6_000)
    sim = PipelineSim(spec, policy=RayRule(), seed=0)
    res = sim.run()
    embed = [s.operator("embed") for s in res.snapshots]
    assert res.finished and res.source_rows == 6_000
    assert max(o.config.replicas for o in embed) == 6  # its backlog asks for more: 6 fit
    assert max(o.actors_running for o in embed) == 6  # and all of them start
    from trident.autoscaler.policies.trident.inner import Room
    from trident.autoscaler.sim.ray_rule import _budget
    from trident.core.types import OperatorConfig

    room = Room(cpus=3.0, gpus=1.0, gpus_by_type={}, memory_bytes=0.0)
    assert _budget(room, OperatorConfig(kind="actor", replicas=1, num_cpus=1, num_gpus=0.5)) == 2
    assert _budget(room, OperatorConfig(kind="actor", replicas=1, num_cpus=0, num_gpus=0)) is None  # Ray caps it at nothing
    peak = max(range(len(embed)), key=lambda i: embed[i].config.replicas)
    assert min(o.config.replicas for o in embed[peak:]) < embed[peak].config.replicas  # read starves it: it shrinks


def test_replicas_wait_for_free_gpus():
    pol = Scripted([(5.0, OperatorTarget(name="ocr", replicas=12))])  # 8 A GPUs in the cluster
    simulate(_spec(), policy=pol, seed=0)
    late = pol.seen[40].operator("ocr")
    assert late.actors_running == 8 and late.actors_pending == 4


def test_oom_kills_when_heap_exceeds_the_limit():
    # ocr replicas hold 1 GiB + 32 rows x 1/32 GiB = 2 GiB each: 4 fit in 9 GiB, 8 do not
    fine = simulate(_spec(memory_limit_bytes=9 * GiB), policy=Scripted([]), seed=0)
    assert fine.oom_kills == 0
    res = simulate(_spec(memory_limit_bytes=9 * GiB), policy=Scripted([(5.0, OperatorTarget(name="ocr", replicas=8))]),
                   seed=0, max_time_s=400)
    assert res.oom_kills > 0


def test_the_tasks_a_killed_actor_held_wait_for_it_and_no_row_is_lost():
    """Ray retries an actor's tasks on that actor once it restarts: the rows its two tasks in
    flight held leave ocr's queue at the kill and come back when it is up again (its 10 s cold
    start later); every row still comes out once."""
    sim = PipelineSim(_spec(memory_limit_bytes=9 * GiB), policy=Scripted([]), seed=0)
    ocr = sim.ops[1]
    held_at = None
    while not sim.ops[-1].completed and sim.time_s < 400:
        sim._advance(0.5)
        if sim.time_s == 5.0:
            sim.actuation.apply(OperatorTarget(name="ocr", replicas=8))
        if held_at is None and ocr.held_rows > 0:
            held_at = sim.time_s
            assert ocr.held_rows <= sim.oom_kills * 2 * 32  # two tasks of 32 rows per killed replica
        if held_at is not None and sim.time_s < held_at + 9.5:
            assert ocr.held_rows > 0  # none of the killed replicas is up again yet
    assert held_at is not None and ocr.held_rows == 0
    assert sim.ops[-1].rows_out == pytest.approx(40_000, rel=1e-9)


def test_regime_by_rows_slows_the_operator():
    ops = list(_spec().operators)
    ops[1] = SimOperator(**{**ops[1].__dict__, "regimes": (Regime(start=10_000, rate_scale=0.5),), "regime_by": "rows"})
    res = simulate(_spec(operators=tuple(ops)), policy=Scripted([]), seed=0)
    assert res.wall_s == pytest.approx(10 + 10_000 / 200 + 10_000 / 100, abs=3)


def test_rolling_update_brings_new_replicas_up_before_draining_old():
    pol = Scripted([(20.0, OperatorTarget(name="ocr", replicas=4, batch_size=64))])
    simulate(_spec(), policy=pol, seed=0)
    at = {round(s.time_s): s.operator("ocr") for s in pol.seen}
    assert at[25].config.batch_size == 64
    assert at[25].actors_running == 4 and at[25].rows_out_per_s > 0  # old replicas still serve
    assert at[35].actors_running == 4 and at[35].actors_pending == 0  # new ones warm, old drained
    assert at[35].heap_rss_per_replica_bytes == 3 * GiB  # 1 GiB + 64 x 1/32 GiB


def test_snapshots_carry_busy_time_and_cluster_view():
    pol = Scripted([])
    simulate(_spec(), policy=pol, seed=0)
    s = pol.seen[30]
    assert dict(s.cluster.gpus_by_type) == {"A": 8.0, "B": 4.0} and s.cluster.cpus == 32
    embed = s.operator("embed")
    # embed is not the bottleneck: busy less than its replicas x wall time, but its true rate is its peak
    first, last = pol.seen[20].operator("embed"), pol.seen[30].operator("embed")
    true_rate = (last.rows_out_total - first.rows_out_total) / (last.busy_s - first.busy_s)
    assert true_rate == pytest.approx(120.0, rel=0.02)
    assert embed.busy_s == pytest.approx(4 * (s.time_s - 10.0) * 400 / 480, rel=0.02)  # busy 5/6 of the time


def test_same_seed_same_run_and_noise_changes_it():
    a = simulate(_spec(noise=0.1, spike_prob=0.05), policy="static", seed=3)
    b = simulate(_spec(noise=0.1, spike_prob=0.05), policy="static", seed=3)
    c = simulate(_spec(noise=0.1, spike_prob=0.05), policy="static", seed=4)
    assert a.wall_s == b.wall_s and a.timeline == b.timeline
    assert a.timeline != c.timeline


def test_bad_spec_names_the_parameter():
    with pytest.raises(ConfigError, match="total_rows"):
        _spec(total_rows=0)
    with pytest.raises(ConfigError, match="accelerator_type"):
        SimOperator(name="x", kind="actor", peak_rows_per_s=(("A", 1.0),), replicas=1, num_gpus=1,
                    accelerator_type="Z")
    with pytest.raises(ConfigError, match="dt_s"):
        PipelineSim(_spec(), policy="static", dt_s=2.0, interval_s=1.0)


def test_rolling_update_on_a_full_cluster_keeps_most_replicas_serving():
    # ocr holds all 8 A GPUs; its new configuration can only start where old replicas drained:
    # after the guard the update goes on as a swap, half the pool at a time
    ops = list(_spec().operators)
    ops[1] = SimOperator(**{**ops[1].__dict__, "replicas": 8})
    pol = Scripted([(20.0, OperatorTarget(name="ocr", replicas=8, batch_size=64))])
    res = simulate(_spec(operators=tuple(ops)), policy=pol, seed=0)
    after = [s.operator("ocr") for s in pol.seen if 21 <= s.time_s <= 80]
    assert min(o.actors_running for o in after) >= 4  # never more than half down
    assert after[-1].actors_running == 8 and after[-1].heap_rss_per_replica_bytes == 3 * GiB
    assert res.finished
