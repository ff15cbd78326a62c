"""The cluster as Ray schedules on it: one :class:`NodeShape` per live node, grouped into identical
nodes for the planner.

Ray places an actor's whole bundle (CPUs, GPUs, custom resources) on one node, so a plan is only
as good as its model of the nodes: four GPU nodes of 2 GPUs and 3 CPUs hold 12 one-CPU GPU actors,
whatever the head's CPUs add to the cluster's total. :func:`node_shapes` reads the records of
``ray.nodes()`` (pure: the caller passes them in); :func:`node_groups` groups identical nodes so the
placement MILP stays small at hundreds of nodes.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from trident.core.errors import ConfigError

ACCELERATOR_PREFIX = "accelerator_type:"
"""Ray's custom resource that names a node's accelerator type (``accelerator_type:A100``)."""
_OWN = {"CPU", "GPU", "memory", "object_store_memory"}


@dataclass(frozen=True)
class NodeShape:
    """One live node: what Ray can schedule on it."""

    node_id: str
    cpus: float
    gpus: float = 0.0
    accelerator_type: str | None = None
    memory_bytes: int | None = None
    """Ray's schedulable ``memory`` resource of the node (bytes)."""
    object_store_bytes: int | None = None
    resources: tuple[tuple[str, float], ...] = ()
    """Custom resources, ``node:<ip>`` and the accelerator type left out."""

    def __post_init__(self) -> None:
        if self.cpus < 0 or self.gpus < 0:
            raise ConfigError(f"node {self.node_id}.cpus/gpus", (self.cpus, self.gpus), "numbers >= 0")

    @property
    def group_key(self) -> tuple:
        """Nodes with equal keys hold the same bundles."""
        return (self.accelerator_type or "", self.cpus, self.gpus, self.resources)


@dataclass(frozen=True)
class NodeGroup:
    """``count`` identical nodes of one shape."""

    name: str
    count: int
    cpus: float
    gpus: float
    accelerator_type: str | None


def node_shapes(records: Iterable[Mapping]) -> tuple[NodeShape, ...]:
    """The live nodes of ``ray.nodes()`` records (dead ones and nodes with no resources left out)."""
    out = []
    for rec in records:
        res = rec.get("Resources") or {}
        if not rec.get("Alive") or not res:
            continue
        types = sorted(k[len(ACCELERATOR_PREFIX):] for k in res if k.startswith(ACCELERATOR_PREFIX))
        custom = tuple(sorted((k, float(v)) for k, v in res.items()
                              if k not in _OWN and not k.startswith(ACCELERATOR_PREFIX) and not k.startswith("node:")))
        out.append(NodeShape(node_id=str(rec.get("NodeID", "")), cpus=float(res.get("CPU", 0.0)),
                             gpus=float(res.get("GPU", 0.0)), accelerator_type=types[0] if types else None,
                             memory_bytes=int(res["memory"]) if "memory" in res else None,
                             object_store_bytes=int(res["object_store_memory"]) if "object_store_memory" in res
                             else None, resources=custom))
    return tuple(sorted(out, key=lambda n: (n.group_key, n.node_id)))


def node_groups(nodes: Iterable[NodeShape]) -> tuple[NodeGroup, ...]:
    """Identical nodes as ``count x shape``, named by shape (``A-3cpu-2gpu``, ``cpu-6cpu``)."""
    counts = Counter(n.group_key for n in nodes)
    out = []
    for (acc, cpus, gpus, res), count in sorted(counts.items()):
        name = f"{acc or ('gpu' if gpus else 'cpu')}-{cpus:g}cpu" + (f"-{gpus:g}gpu" if gpus else "")
        name += "".join(f"-{k}{v:g}" for k, v in res)
        out.append(NodeGroup(name=name, count=count, cpus=cpus, gpus=gpus, accelerator_type=acc or None))
    return tuple(out)


def most_per_node(nodes: Iterable[NodeShape], *, cpus: float, gpus: float, accelerator_type: str | None = None) -> int:
    """How many bundles of ``cpus`` and ``gpus`` (on ``accelerator_type``, when named) the nodes hold,
    each bundle whole on one node."""
    total = 0
    for n in nodes:
        if gpus > 0 and (n.gpus <= 0 or (accelerator_type is not None and n.accelerator_type != accelerator_type)):
            continue
        fits = [int(have / need + 1e-9) for need, have in ((cpus, n.cpus), (gpus, n.gpus)) if need > 0]
        total += min(fits) if fits else 0
    return total
