"""The job layer's ``milp`` placer in FGD's allocation experiment.

A pod becomes a :class:`~trident.jobs.base.Job` (CPUs = milli-CPU / 1000, GPUs = whole
devices or a share of one, allowed GPU models) and is placed by
:class:`~trident.jobs.placement_milp.MilpPlacer` on a :class:`~trident.sim.cluster.Cluster`
kept in step with the experiment's :class:`~trident.jobs.frag_placers.NodeArrays`. The
experiment's pods live on one node: a placement the MILP spreads over several nodes
counts as a failure. Pods without GPUs (outside the MILP's scope) go to the best-fit node.
"""
from __future__ import annotations

import numpy as np

from trident.jobs.base import Job, Node
from trident.jobs.frag_placers import FragPlacer
from trident.jobs.fragmentation import MILLI, NodeArrays, PodShape
from trident.jobs.placement_milp import MilpPlacer
from trident.sim.cluster import Cluster


class MilpAllocPlacer:
    """``choose(nodes, pod, rng)`` as :class:`FragPlacer`; ``models``: GPU model names by index."""

    name = "milp"

    def __init__(self, nodes: NodeArrays, models: tuple[str, ...], placer: MilpPlacer = MilpPlacer()) -> None:
        self.models = models
        self.placer = placer
        self.cluster = Cluster([Node(f"n{i}", models[int(m)], int(g), float(c) / 1000, float(mem))
                                for i, (c, mem, g, m) in enumerate(zip(nodes.cpu, nodes.mem, nodes.num_gpus,
                                                                       nodes.model))])
        self._cpu_only = FragPlacer("best-fit")
        self._count = 0

    def job(self, pod: PodShape) -> Job:
        self._count += 1
        allowed = () if pod.models is None else tuple(m for m, ok in zip(self.models, pod.models) if ok)
        gpus = pod.num_gpu if pod.gpu_milli >= MILLI else pod.gpu_milli / MILLI
        return Job(f"p{self._count}", 0.0, 1.0, gpus, allowed, cpus=pod.cpu_milli / 1000, memory_mib=pod.memory_mib)

    def choose(self, nodes: NodeArrays, pod: PodShape, rng: np.random.Generator) -> tuple[int, tuple[int, ...]] | None:
        if pod.num_gpu == 0:
            choice = self._cpu_only.choose(nodes, pod, rng)
            if choice is not None:                # the cluster's free CPUs and memory follow
                model = self.cluster.nodes[choice[0]].gpu_model
                row = int(np.flatnonzero(self.cluster.node_indices(model) == choice[0])[0])
                self.cluster.free_cpus(model)[row] -= pod.cpu_milli / 1000
                self.cluster.free_memory_mib(model)[row] -= pod.memory_mib
            return choice
        job = self.job(pod)
        alloc = self.placer.place(job, self.cluster)
        if alloc is None or len(alloc.node_ids) != 1:
            return None
        node = alloc.devices[0][0]
        devices = tuple(d for _, d, _ in alloc.devices)
        if not nodes.feasible(pod)[node]:      # the two views must agree
            raise AssertionError(f"milp placed a pod where it does not fit: node {node}, devices {devices}")
        self.cluster.allocate(job, alloc)
        return node, devices
