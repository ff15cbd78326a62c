"""The job scheduler's view of a Ray cluster whose nodes come and go.

:func:`ray_gpu_nodes` reads the live nodes from Ray; :func:`rebuild` is pure: given the
live nodes and the running jobs' allocations, it builds a fresh capacity view holding the
jobs whose nodes are all alive and names the jobs that lost a node.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from trident.jobs.base import Allocation, Job, Node
from trident.jobs.capacity import Cluster


def ray_gpu_nodes(ray: Any) -> list[Node]:
    """The alive nodes of the connected Ray cluster (GPU model from ``accelerator_type:X``, else ``"GPU"``)."""
    nodes = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        res = n.get("Resources", {})
        model = next((k.split(":", 1)[1] for k in res if k.startswith("accelerator_type:")), "GPU")
        nodes.append(Node(node_id=n["NodeID"], gpu_model=model, num_gpus=int(res.get("GPU", 0)),
                          cpus=res.get("CPU", 0.0), memory_mib=res.get("memory", 0.0) / 2**20))
    return nodes


@dataclass(frozen=True)
class Rebuilt:
    """A capacity view of the live nodes (``None`` when no node has a GPU), the running jobs'
    allocations re-indexed onto it, and the running jobs that lost a node."""

    cluster: Cluster | None
    allocations: Mapping[str, Allocation]
    lost: tuple[str, ...]


def rebuild(nodes: Sequence[Node], old_nodes: Sequence[Node],
            running: Mapping[str, tuple[Job, Allocation]]) -> Rebuilt:
    """Capacity of ``nodes`` with the jobs of ``running`` (job id -> (job, allocation indexed
    into ``old_nodes``)) that still have all their nodes allocated again; the others are ``lost``."""
    gpu_nodes = [n for n in nodes if n.num_gpus > 0]
    cluster = Cluster(gpu_nodes) if gpu_nodes else None
    index = {n.node_id: i for i, n in enumerate(cluster.nodes)} if cluster else {}
    kept: dict[str, Allocation] = {}
    lost = []
    for job_id, (job, alloc) in running.items():
        if not all(nid in index for nid in alloc.node_ids):
            lost.append(job_id)
            continue
        devices = tuple((index[old_nodes[i].node_id], dev, milli) for i, dev, milli in alloc.devices)
        kept[job_id] = replace(alloc, devices=devices)
        cluster.allocate(job, kept[job_id])
    return Rebuilt(cluster=cluster, allocations=kept, lost=tuple(lost))
