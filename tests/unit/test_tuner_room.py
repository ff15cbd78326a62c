"""The replicas a pool may run, as the batch-size search and the halved batch size them: its
maximum, the GPUs the other pools leave and the CPUs they leave on the GPU nodes."""
from trident.autoscaler.policies.trident.tuner import most_replicas
from trident.core.types import ClusterView, NodeShape, OperatorConfig, OperatorSnapshot, Snapshot

NODES = tuple(NodeShape(node_id=f"a{i}", cpus=2.0, gpus=4.0, accelerator_type="A") for i in range(3))
"""Seed 142's GPU nodes: 12 GPUs, 6 CPUs."""


def _pool(name: str, replicas: int, gpus: float, *, most: int = 16, index: int = 1) -> OperatorSnapshot:
    return OperatorSnapshot(name=name, index=index, actors_running=replicas, config=OperatorConfig(
        kind="actor", replicas=replicas, min_replicas=1, max_replicas=most, num_cpus=1.0, num_gpus=gpus,
        batch_size=8))


def _snap(*pools: OperatorSnapshot, nodes=NODES) -> Snapshot:
    return Snapshot(execution_id="e", seq=1, time_s=79.0, operators=pools, cluster=ClusterView(
        cpus=8.0, gpus=12.0, gpus_by_type=(("A", 12.0),), cpus_by_type=(("A", 6.0),), nodes=nodes))


def test_a_pool_may_run_no_more_replicas_than_the_gpu_nodes_cpus_the_others_leave():
    op4 = _pool("op4", 2, 0.25, most=13, index=4)
    pools = (_pool("op1", 1, 0.25), _pool("op2", 1, 1.0, index=2), _pool("op3", 1, 0.5, index=3), op4)
    assert most_replicas(_snap(*pools), op4) == 3  # 6 CPUs, 3 held by the others; GPUs would allow 13
    assert most_replicas(_snap(*pools, nodes=()), op4) == 13  # nodes unknown: the GPUs and its maximum
    assert most_replicas(_snap(op4), op4) == 6
    assert most_replicas(_snap(_pool("big", 6, 1.0), op4), op4) == 1  # no CPU left: still its minimum
