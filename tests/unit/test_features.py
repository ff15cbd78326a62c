"""RLTune features: observable only, correct capacity-derived values, bounded, windowed."""
from dataclasses import replace

import numpy as np
import pytest

from trident.jobs.base import Allocation, Job, JobView, Node, SchedState
from trident.jobs.features import FEATURE_NAMES, MAX_JOBS, NUM_FEATURES, FeatureConfig, queue_features
from trident.jobs.capacity import Cluster

F = {name: i for i, name in enumerate(FEATURE_NAMES)}


def _cluster(used):
    nodes = [Node(f"n{i}", "A", 4, cpus=32, memory_mib=1e5) for i in range(len(used))]
    c = Cluster(nodes)
    running = {}
    for i, u in enumerate(used):
        if u:
            job = Job(f"r{i}", 0.0, 5000.0, float(u))
            alloc = Allocation("A", tuple((i, d, 1000) for d in range(u)), (nodes[i].node_id,))
            c.allocate(job, alloc)
            running[job.job_id] = JobView(job=job, running=True, as_of_s=0.0, wait_base_s=0.0, attained_base_s=0.0,
                                          setup_ends_s=60.0, expected_setup_s=60.0, allocation=alloc)
    return c, running


def _state(jobs, used, now=1000.0, capacity=True):
    c, running = _cluster(used)
    queued = [JobView(job=j, running=False, as_of_s=j.arrival_s, wait_base_s=0.0, attained_base_s=0.0) for j in jobs]
    return SchedState(now=now, queued=queued, running=running, total_gpus_by_model=c.total_gpus_by_model(),
                      free_gpus_by_model=c.free_gpus_by_model(), queue_length=len(queued),
                      capacity=c if capacity else None)


def test_shape_bounds_and_names():
    jobs = [Job(f"q{i}", float(i), 100.0, float([1, 2, 4, 0.5][i % 4])) for i in range(10)]
    qf = queue_features(_state(jobs, [2, 0, 3]))
    assert qf.matrix.shape == (10, NUM_FEATURES) == (10, len(FEATURE_NAMES))
    assert qf.job_ids == tuple(j.job_id for j in jobs)
    assert np.all(qf.matrix >= 0) and np.all(qf.matrix <= 1)
    assert qf.any_running


def test_true_duration_is_never_read():
    jobs = [Job(f"q{i}", float(i), 100.0, 1.0 + i % 2) for i in range(6)]
    longer = [replace(j, duration_s=j.duration_s * 1000 + i) for i, j in enumerate(jobs)]
    a = queue_features(_state(jobs, [2, 1]))
    b = queue_features(_state(longer, [2, 1]))
    assert np.array_equal(a.matrix, b.matrix)


def test_capacity_features_fragmentation_and_can_start():
    # Two nodes with 2 of 4 GPUs free each: 4 GPUs free in all, but a 4-GPU job fits nowhere.
    jobs = [Job("big", 0.0, 100.0, 4.0), Job("small", 0.0, 100.0, 1.0)]
    qf = queue_features(_state(jobs, [2, 2]))
    big, small = qf.matrix
    assert not qf.can_start[0] and qf.can_start[1]
    assert big[F["fragmentation"]] == pytest.approx(1.0)
    assert small[F["fragmentation"]] == pytest.approx(0.0)
    assert big[F["feasible"]] == 0.0 and small[F["feasible"]] > 0.0
    assert big[F["demand_supply"]] == pytest.approx(4 / (4 + 4))
    assert big[F["can_start"]] == 0.0 and small[F["can_start"]] == 1.0
    # The same demand on an unfragmented cluster can start.
    qf2 = queue_features(_state(jobs, [4, 0]))
    assert qf2.can_start[0] and qf2.matrix[0, F["fragmentation"]] == pytest.approx(0.0)


def test_wait_grows_with_time_and_near_future_with_age_of_running_jobs():
    jobs = [Job("q", 0.0, 100.0, 1.0)]
    early = queue_features(_state(jobs, [4], now=100.0))
    late = queue_features(_state(jobs, [4], now=50000.0))
    assert late.matrix[0, F["wait"]] > early.matrix[0, F["wait"]]
    assert late.matrix[0, F["near_future"]] != early.matrix[0, F["near_future"]]


def test_window_and_fallback_without_capacity():
    jobs = [Job(f"q{i}", float(i), 100.0, 1.0) for i in range(MAX_JOBS + 20)]
    qf = queue_features(_state(jobs, [0]))
    assert qf.matrix.shape[0] == MAX_JOBS
    small = queue_features(_state(jobs[:5], [1], capacity=False), FeatureConfig(max_jobs=3))
    assert small.matrix.shape == (3, NUM_FEATURES) and small.can_start.all()
    with pytest.raises(Exception, match="max_jobs"):
        FeatureConfig(max_jobs=MAX_JOBS + 1)
