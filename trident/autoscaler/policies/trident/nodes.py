"""The nodes a plan places replicas on: Ray's live nodes grouped by shape (each replica whole on
one node), the spread of what runs now over them, and the most a one-device pool fits. Pure."""
from __future__ import annotations

import math

from trident.core.cluster import node_groups
from trident.core.plan.placement import ANY_GPU, CPU, DeviceOption, NodeType, OperatorSpec
from trident.core.types import ClusterView


def one_device_most(options: list[DeviceOption], nodes: list[NodeType]) -> float:
    """The most replicas of a one-device pool that any one of its options' devices holds alone
    (each replica whole on one node: its CPUs and GPUs)."""
    most = 0
    for opt in options:
        if opt.cpus <= 0 and opt.gpus <= 0:  # it needs neither: any number fits
            return math.inf
        most = max(most, sum(_per_node(opt, n) * n.count for n in nodes if opt.fits(n)))
    return most


def node_types(cluster: ClusterView, typed: dict[str, float], per_type: bool) -> list[NodeType]:
    """The nodes a plan places replicas on: Ray's live nodes grouped by shape, each replica whole on
    one node (a node without GPUs hosts no GPU replica, a GPU replica's CPUs come from its node);
    GPU nodes named by their accelerator type when pools are planned per type. Where the nodes are
    not known, the cluster's totals: CPUs for CPU replicas, GPUs (per type) for GPU ones."""
    if cluster.nodes:
        return [NodeType(name=g.name, count=g.count, cpus=g.cpus, gpus=g.gpus,
                         gpu_type=g.accelerator_type if per_type else None) for g in node_groups(cluster.nodes)]
    nodes = [NodeType(name=CPU, count=1, cpus=cluster.cpus)]
    if per_type:
        cpus_of = dict(cluster.cpus_by_type)
        nodes += [NodeType(name=t, count=1, cpus=min(cpus_of.get(t, cluster.cpus), cluster.cpus), gpus=g, gpu_type=t)
                  for t, g in typed.items()]
    elif cluster.gpus > 0:
        nodes.append(NodeType(name=ANY_GPU, count=1, cpus=cluster.cpus, gpus=cluster.gpus))
    return nodes


def on_nodes(current: dict[tuple[str, str], int], specs: list[OperatorSpec],
             nodes: list[NodeType]) -> dict[tuple[str, str, str], int]:
    """The replicas running now per (operator, device), spread over the node types their option
    fits, GPU replicas first, each node type filled before the next and the last taking what is
    left (Ray does not say which node an actor is on; a plan names devices, not nodes, so only the
    start costs see this spread)."""
    options = {(sp.name, o.device): o for sp in specs for o in sp.options}
    free = {n.name: [n.cpus * n.count, n.gpus * n.count] for n in nodes}
    out: dict[tuple[str, str, str], int] = {}
    for (op, device), count in sorted(current.items(), key=lambda kv: -options[kv[0]].gpus if kv[0] in options else 0):
        opt = options.get((op, device))
        fitting = [n for n in nodes if n.count > 0 and opt is not None and opt.fits(n)]
        for k, n in enumerate(fitting):
            room = free[n.name]
            take = count if k == len(fitting) - 1 else min(count, _fit(opt, room[0], room[1]))
            if take > 0:
                out[(op, device, n.name)] = out.get((op, device, n.name), 0) + take
                room[0] -= take * opt.cpus
                room[1] -= take * opt.gpus
                count -= take
            if not count:
                break
    return out


def _fit(opt: DeviceOption, cpus: float, gpus: float) -> int:
    """Replicas of ``opt`` that ``cpus`` and ``gpus`` hold (a large number when it needs neither)."""
    fits = [math.floor(have / need + 1e-9) for need, have in ((opt.cpus, cpus), (opt.gpus, gpus)) if need > 0]
    return max(0, min(fits)) if fits else 10**6


def _per_node(opt: DeviceOption, node: NodeType) -> int:
    return _fit(opt, node.cpus, node.gpus)
