"""A pool grows only as far as the machine's cores feed it (``trident.autoscaler.policies.trident.cores``)."""
from dataclasses import replace

import pytest

from trident.autoscaler.policies.trident import TridentPolicy, TridentSettings
from trident.autoscaler.policies.trident.cores import HostCores
from trident.core.policy import PolicyContext

from test_trident_policy import GiB, _ray_like


def _on_cores(snap, *, t: float, busy_cores: float, ocr_cores_per_busy: float | None, cores: int = 2):
    """``snap`` with the machine's cores busy ``busy_cores`` on average since t=0, and each busy OCR
    replica keeping ``ocr_cores_per_busy`` of a core busy (``None``: an OCR actor on another machine)."""
    ops = []
    for o in snap.operators:
        if o.name == "ocr":
            busy = min(2 * o.actors_running, o.actors_running)
            cpu = None if ocr_cores_per_busy is None else ocr_cores_per_busy * busy * t
            o = replace(o, tasks_in_flight=2 * o.actors_running, cpu_s=cpu)
        elif o.config.kind == "actor":
            o = replace(o, cpu_s=0.01 * t)
        ops.append(o)
    return replace(snap, operators=tuple(ops),
                   cluster=replace(snap.cluster, host_cores=cores, host_busy_s=1000.0 + busy_cores * t))


def _first_plan(**cores):
    policy = TridentPolicy(context=PolicyContext(memory_limit_bytes=5 * GiB, seed=0),
                           settings=TridentSettings(bo_trials=0))
    decisions = []
    for k in range(40):
        t = float(k)
        d = policy.step(_on_cores(_ray_like(t, ocr_replicas=1, ocr_out=k // 4, embed_out=8 * (k // 32)), t=t, **cores), t)
        decisions.append(d)
        if d.plan is not None and d.kind == "plan":
            return {x.name: x.replicas for x in d.plan.targets}, decisions
    return None, decisions


@pytest.mark.parametrize("busy_cores, ocr_cores, grown_to", [
    (1.95, 0.95, None),  # both cores busy, OCR keeps its core busy: another replica shares them
    (0.95, 0.95, 2),     # one core idle: one replica more
    (1.95, 0.45, None),  # the cores shared with the other pools: under half a core each, bound all the same
    (0.95, 0.45, 4),     # a core idle: a replica at under half a core is not bound by the cores
    (1.95, 0.05, 4),     # OCR waits (a GPU's work, I/O): the cores do not bound it (memory does)
    (1.95, None, 4),     # an OCR actor off this machine: its CPU time is not known, nothing capped
])
def test_a_pool_that_keeps_the_cores_busy_grows_only_into_idle_cores(busy_cores, ocr_cores, grown_to):
    """The slow OCR pool of ``_ray_like`` (one replica, a backlog, memory for 4): the planner's rate
    per replica times the replicas says 4 replicas make 4x; on 2 cores kept busy they make 1x."""
    targets, decisions = _first_plan(busy_cores=busy_cores, ocr_cores_per_busy=ocr_cores)
    if grown_to is None:
        assert targets is None, [d.reason for d in decisions if d.plan is not None]
        capped = [n for d in decisions for n in d.notes if n.startswith("ocr at most 1 replicas")]
        assert capped and "2 cores had 0.05 idle" in capped[-1], [d.notes for d in decisions]
    else:
        assert targets is not None and targets["ocr"] == grown_to, [d.reason for d in decisions]


def test_no_cap_before_a_whole_window_is_seen_or_without_the_machine_s_readings():
    cores = HostCores(window_s=4.0)
    snaps = [_on_cores(_ray_like(float(t), ocr_replicas=2, ocr_out=t, embed_out=0), t=float(t), busy_cores=2.0,
                       ocr_cores_per_busy=1.0) for t in range(6)]
    for s in snaps[:4]:
        cores.see(s)
        assert cores.caps(s) == {}  # less than 4 s seen
    cores.see(snaps[4])
    assert cores.caps(snaps[4])["ocr"].hi == 2
    assert cores.caps(snaps[3]) == {}  # only the newest snapshot is judged
    unread = replace(snaps[5], cluster=replace(snaps[5].cluster, host_busy_s=None))
    cores.see(unread)
    assert cores.caps(unread) == {}
    assert [s.time_s for s in cores.seen] == [0.0, 1.0, 2.0, 3.0, 4.0]  # 4 s back and no more; unread: not kept


def test_what_a_pool_has_asked_for_already_is_not_cut():
    """Starting actors keep the cores busy: a cap read then must not cancel them (they were
    planned when cores were idle), only stop more."""
    cores = HostCores(window_s=4.0)
    for t in range(6):
        snap = _on_cores(_ray_like(float(t), ocr_replicas=2, ocr_out=t, embed_out=0), t=float(t), busy_cores=2.0,
                         ocr_cores_per_busy=1.0)
        ops = tuple(replace(o, config=replace(o.config, replicas=4), actors_pending=2) if o.name == "ocr" else o
                    for o in snap.operators)
        snap = replace(snap, operators=ops)
        cores.see(snap)
    b = cores.caps(snap)["ocr"]
    assert b.hi == 4 and "at most 4 replicas" in b.why
