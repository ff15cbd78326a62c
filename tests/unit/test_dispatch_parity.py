"""The simulator and JobScheduler run the same scheduling pass: given the same jobs and a
fake clock, they start the same jobs at the same times and ask the preemptor the same
questions with the same answers.

JobScheduler's only stand-in is its Ray edge: a backend whose attempts end after their setup
plus their remaining work, progress after setup kept across a preemption (the simulator's
rule), on a clock that jumps to the next event."""
import math

import numpy as np
import pytest

from trident.sched.base import Job, Node
from trident.sched.ray_backend import Attempt
from trident.sched.scheduler import JobScheduler
from trident.sim.engine import EngineConfig, SetupModel, Simulator

NODES = (Node(node_id="a0", gpu_model="A", num_gpus=4, cpus=16), Node(node_id="a1", gpu_model="A", num_gpus=2, cpus=8),
         Node(node_id="b0", gpu_model="B", num_gpus=4, cpus=16))


def _trace(seed: int, n: int = 24) -> list[Job]:
    rng = np.random.default_rng(seed)
    t, jobs = 0.0, []
    for k in range(n):
        t += float(rng.exponential(400.0))
        jobs.append(Job(job_id=f"j{k:02d}", arrival_s=round(t, 3), duration_s=float(rng.lognormal(7.0, 1.0)),
                        num_gpus=float(rng.choice([0.5, 1, 2, 4])), setup_s=float(rng.choice([30.0, 300.0])),
                        gpu_models=("A",) if k % 5 == 0 else ()))
    return jobs


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class EventBackend:
    """JobScheduler's edge on a simulated clock (see the module docstring)."""

    def __init__(self, clock: Clock, jobs: list[Job]) -> None:
        self.clock = clock
        self.jobs = {j.job_id: j for j in jobs}
        self.pending = sorted(jobs, key=lambda j: (j.arrival_s, j.job_id))
        self.remaining = {j.job_id: j.duration_s for j in jobs}
        self.live: dict[str, tuple[float, float]] = {}  # job id -> (setup end, finish)
        self.sched: JobScheduler | None = None

    def arrive(self) -> None:
        while self.pending and self.pending[0].arrival_s <= self.clock.t:
            j = self.pending.pop(0)
            self.sched.submit(lambda: None, name=j.job_id, num_gpus=j.num_gpus, gpu_models=j.gpu_models,
                              setup_s=j.setup_s)

    def nodes(self):
        return list(NODES)

    def launch(self, fn, args, kwargs, *, name, num_gpus, num_cpus, node_id, state=None):
        setup_end = self.clock.t + self.jobs[name].setup_s
        self.live[name] = (setup_end, setup_end + self.remaining[name])
        return Attempt(ref=name)

    def wait(self, refs, timeout_s):
        ends = [self.live[r][1] for r in refs]
        nxt = min([*ends, self.clock.t + timeout_s, *(j.arrival_s for j in self.pending[:1])])
        self.clock.t = nxt
        self.arrive()
        return [r for r in refs if self.live[r][1] <= nxt]

    def get(self, ref):
        del self.live[ref]
        return ref

    def kill(self, attempts, *, wait=True):
        for a in attempts:
            setup_end, _ = self.live.pop(a.ref)
            if self.clock.t > setup_end:
                self.remaining[a.ref] = max(1e-6, self.remaining[a.ref] - (self.clock.t - setup_end))

    def node_lost(self, exc, node_id):
        return False


def _real(jobs, policy, preemption):
    clock = Clock()
    backend = EventBackend(clock, jobs)
    sched = JobScheduler(policy=policy, preemption=preemption, placement="best-fit", poll_s=1e7, tick_s=300.0,
                         clock=clock, backend=backend)
    backend.sched = sched
    clock.t = backend.pending[0].arrival_s
    backend.arrive()
    while True:
        sched.run()
        if not backend.pending:
            break
        clock.t = backend.pending[0].arrival_s
        backend.arrive()
    return sched, {r.job.job_id: r for r in (sched.record(j) for j in backend.jobs)}


@pytest.mark.parametrize("policy, preemption", [("fifo", "never"), ("tiresias", "eager"), ("tiresias", "lazy"),
                                                ("rltune", "never")])
@pytest.mark.parametrize("seed", [0, 1])
def test_simulator_and_scheduler_make_the_same_decisions(policy, preemption, seed):
    from trident.sched.base import JOB_POLICIES, PREEMPTORS

    jobs = _trace(seed)
    sim = Simulator(nodes=NODES, policy=JOB_POLICIES.create(policy), placer=_placer(),
                    preemptor=PREEMPTORS.create(preemption), config=EngineConfig(
                        seed=0, setup=SetupModel(kind="none"), restore_s=0.0, tick_s=300.0))
    res = sim.run(jobs)
    sched, records = _real(jobs, policy, preemption)
    assert res.unschedulable == ()
    # Same decisions: every preemption question, its answer and reason, at the same time.
    assert [d[:4] for d in sched.decisions] == [d[:4] for d in res.decisions]
    assert [d[4] for d in sched.decisions] == [d[4] for d in res.decisions]
    # Same outcomes per job: first start, end, preemptions.
    for i, jid in enumerate(res.job_ids):
        r = records[jid]
        first = next(t for t, e in r.events if e.startswith("start"))
        assert first == pytest.approx(res.first_start_s[i], abs=1e-6), jid
        assert r.finished_at == pytest.approx(res.finish_s[i], abs=1e-6), jid
        assert r.preemptions == res.preemptions[i], jid
    if preemption != "never":
        assert len(res.decisions) > 0  # the trace exercises the preemption path
    assert math.isfinite(max(r.finished_at for r in records.values()))


def _placer():
    from trident.sched.base import PLACERS

    return PLACERS.create("best-fit")
