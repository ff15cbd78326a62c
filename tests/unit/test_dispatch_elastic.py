"""The shared pass with an elastic job (a pipeline): evicting it frees only what it was lent
above its minimum, under a non-preemptive policy too, and never under ``never``."""
import numpy as np

from trident.jobs.base import EwmaArrivalPredictor, Job, JobView, Node
from trident.jobs.capacity import Cluster
from trident.jobs.dispatch import SchedulingPass
from trident.jobs.pipelines import free_devices
from trident.jobs.placement import FirstFitPlacer
from trident.jobs.preempt import EagerPreemptor, NeverPreemptor


class Waits:
    """A non-preemptive policy that chose to wait: it ranks nothing."""

    name, preemptive, oracle = "waits", False, False

    def order(self, state, rng):
        return ()


class Host:
    def __init__(self) -> None:
        self.capacity = Cluster([Node("n", "A", 4)])
        self.pipe = Job(job_id="pipe", arrival_s=0.0, duration_s=1.0, num_gpus=1.0)
        self.base = free_devices(self.capacity, "A", 1)
        self.capacity.allocate(self.pipe, self.base)
        self.lent = free_devices(self.capacity, "A", 3)
        self.capacity.allocate(self.pipe, self.lent)
        self.running = {"pipe": JobView(job=self.pipe, running=True, as_of_s=0.0, wait_base_s=0.0,
                                        attained_base_s=0.0, allocation=self.base)}
        job = Job(job_id="train", arrival_s=5.0, duration_s=1.0, num_gpus=2.0)
        self.queue = {"train": JobView(job=job, running=False, as_of_s=5.0, wait_base_s=0.0, attained_base_s=0.0)}
        self.evicted, self.started = [], []

    def start(self, job_id, alloc, now):
        self.capacity.allocate(self.queue.pop(job_id).job, alloc)
        self.started.append(job_id)

    def evict(self, job_ids, now, reason):
        self.evicted += job_ids
        self.capacity.release(self.pipe, self.lent)

    def releasable(self, view):
        return self.lent

    def is_elastic(self, job_id):
        return job_id == "pipe"


def _pass(preemptor):
    return SchedulingPass(policy=Waits(), placer=FirstFitPlacer(), preemptor=preemptor,
                          predictor=EwmaArrivalPredictor(), rng=np.random.default_rng(0))


def test_a_waiting_job_takes_back_the_gpus_lent_to_a_pipeline():
    host = Host()
    out = _pass(EagerPreemptor())(host, 10.0, {"A": 4.0})
    assert host.evicted == ["pipe"] and out.started == ("train",)
    assert [d[1:4] for d in out.decisions] == [("train", "pipe", "preempt_now")]
    assert host.capacity.free_gpus_by_model() == {"A": 1.0}  # the pipeline keeps its minimum


def test_never_preemption_never_shrinks():
    host = Host()
    out = _pass(NeverPreemptor())(host, 10.0, {"A": 4.0})
    assert host.evicted == [] and out.started == () and out.decisions == ()
