"""The simulator and JobScheduler run the same scheduling pass: given the same jobs and a
fake clock, they start the same jobs at the same times and ask the preemptor the same
questions with the same answers.

JobScheduler's only stand-in is its Ray edge: a backend whose attempts end after their setup
plus their remaining work, progress after setup kept across a preemption (the simulator's
rule), on a clock that jumps to the next event. Its pipelines follow the simulator's rule for
elastic jobs: GPUs lent are warm (the pipeline is cold-starting until then) ``setup_s`` after
its budget grew, and it progresses in proportion to its warm GPUs."""
import math
from types import SimpleNamespace

import numpy as np
import pytest

from trident.jobs.base import Job, Node
from trident.jobs.ray_backend import Attempt
from trident.jobs.scheduler import JobScheduler
from trident.sim.engine import EngineConfig, SetupModel, Simulator
from trident.sim.progress import finish_s, work_done

NODES = (Node(node_id="a0", gpu_model="A", num_gpus=4, cpus=16), Node(node_id="a1", gpu_model="A", num_gpus=2, cpus=8),
         Node(node_id="b0", gpu_model="B", num_gpus=4, cpus=16))


def _trace(seed: int, n: int = 24, elastic: bool = False) -> list[Job]:
    """Jobs arriving ~400 s apart; with ``elastic``, every fourth is a pipeline of 1 to 4 GPUs
    (60% of its run time divides over its GPUs)."""
    rng = np.random.default_rng(seed)
    t, jobs = 0.0, []
    for k in range(n):
        t += float(rng.exponential(400.0))
        duration_s, gpus = float(rng.lognormal(7.0, 1.0)), dict(num_gpus=float(rng.choice([0.5, 1, 2, 4])))
        if elastic and k % 4 == 1:
            gpus = dict(num_gpus=1.0, max_gpus=4.0, parallel_fraction=0.6)
        jobs.append(Job(job_id=f"j{k:02d}", arrival_s=round(t, 3), duration_s=duration_s,
                        setup_s=float(rng.choice([30.0, 300.0])), gpu_models=("A",) if k % 5 == 0 else (), **gpus))
    return jobs


class FakePipeline:
    """A pipeline on the simulated clock: ``set_budget`` lends or takes back GPUs (see the module
    docstring); it is its own ``run`` (``trident.autoscale``'s, as the scheduler reads it)."""

    rewarm_s = None
    executions = (SimpleNamespace(snapshots=[1]),)

    def __init__(self, backend: "EventBackend", job: Job, budget_gpus: float) -> None:
        self.backend, self.job, self.future = backend, job, job.job_id
        now = backend.clock.t
        self.groups = [(now + job.setup_s, budget_gpus)]
        self.at, self.remaining, self.run = now, job.duration_s, self
        backend.observe_at.add(self.groups[0][0])

    @property
    def cold_starting(self) -> bool:
        return self.backend.clock.t < max(w for w, _ in self.groups)

    def set_budget(self, gpus: float) -> None:
        now = self.backend.clock.t
        self.remaining -= work_done(self.groups, 1.0, self.job.max_gpus, self.at, now, self.job.parallel_fraction)
        self.at = now
        held = sum(g for _, g in self.groups)
        self.groups = self.groups + [(now + self.job.setup_s, gpus - held)] if gpus > held else self.groups[:1]
        self.backend.observe_at |= {now, now + self.job.setup_s}

    def finish_s(self) -> float:
        return finish_s(self.groups, 1.0, self.job.max_gpus, self.at, self.remaining, self.job.parallel_fraction)


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
        self.pipelines: dict[str, FakePipeline] = {}
        self.observe_at: set[float] = set()
        """When a pipeline's cold start begins or ends: the scheduler polls then."""
        self.sched: JobScheduler | None = None

    def arrive(self) -> None:
        while self.pending and self.pending[0].arrival_s <= self.clock.t:
            j = self.pending.pop(0)
            if j.elastic:
                self.sched.submit_pipeline(lambda: None, name=j.job_id, min_gpus=j.num_gpus, max_gpus=j.max_gpus,
                                           gpu_models=j.gpu_models, setup_s=j.setup_s,
                                           parallel_fraction=j.parallel_fraction)
            else:
                self.sched.submit(lambda: None, name=j.job_id, num_gpus=j.num_gpus, gpu_models=j.gpu_models,
                                  setup_s=j.setup_s)

    def nodes(self):
        return list(NODES)

    def launch(self, fn, args, kwargs, *, name, num_gpus, num_cpus, node_id, state=None):
        setup_end = self.clock.t + self.jobs[name].setup_s
        self.live[name] = (setup_end, setup_end + self.remaining[name])
        return Attempt(ref=name, ready_ref=("ready", name))  # as a trainable's actor says its setup is over

    def launch_pipeline(self, fn, args, kwargs, *, name, budget_gpus, autoscale):
        self.pipelines[name] = FakePipeline(self, self.jobs[name], budget_gpus)
        return self.pipelines[name]

    def _end(self, ref) -> float:
        if isinstance(ref, tuple):  # a trainable's end of setup
            return self.live[ref[1]][0]
        return self.pipelines[ref].finish_s() if ref in self.pipelines else self.live[ref][1]

    def wait(self, refs, timeout_s):
        polls = [t for t in self.observe_at if t >= self.clock.t]
        nxt = min([*map(self._end, refs), *polls, self.clock.t + timeout_s, *(j.arrival_s for j in self.pending[:1])])
        self.observe_at = {t for t in self.observe_at if t > nxt}
        self.clock.t = nxt
        self.arrive()
        return [r for r in refs if self._end(r) <= nxt]

    def get(self, ref):
        if self.pipelines.pop(ref, None) is None:
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


@pytest.mark.parametrize("policy, preemption, elastic", [
    ("fifo", "never", False), ("tiresias", "eager", False), ("tiresias", "lazy", False), ("rltune", "never", False),
    ("rltune", "lazy", False), ("fifo", "eager", True), ("tiresias", "lazy", True), ("rltune", "lazy", True)])
@pytest.mark.parametrize("seed", [0, 1])
def test_simulator_and_scheduler_make_the_same_decisions(policy, preemption, elastic, seed):
    from trident.jobs.base import PREEMPTORS, create_policy

    jobs = _trace(seed, elastic=elastic)
    sim = Simulator(nodes=NODES, policy=create_policy(policy, preemption), placer=_placer(),
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
    if elastic:  # the trace exercises lending to pipelines
        assert any(e.startswith("grown") for r in records.values() for _, e in r.events)
    assert math.isfinite(max(r.finished_at for r in records.values()))


def _placer():
    from trident.jobs.base import PLACERS

    return PLACERS.create("best-fit")
