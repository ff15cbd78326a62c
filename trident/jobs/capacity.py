"""Free-capacity bookkeeping of a heterogeneous GPU cluster (numpy-backed, fast).

Nodes are grouped by GPU model. Per model the cluster keeps a matrix of free
thousandths per device (rows = nodes, padded with -1 past a node's device count),
the number of wholly free devices per node, and free CPUs and memory per node.
Upper bounds used by :meth:`Cluster.may_fit` are recomputed lazily after a change.
A job's CPUs and memory are split across its nodes in proportion to its GPU share.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from trident.core.errors import ConfigError
from trident.jobs.base import MILLI_PER_GPU, Allocation, Job, Node


class _ModelGroup:
    __slots__ = ("model", "node_idx", "milli", "full", "rowmax", "cpus", "mem", "max_devices",
                 "total_milli", "free_milli_sum", "dirty", "max_full", "max_dev", "full_sum", "max_cpus", "max_mem")

    def __init__(self, model: str, nodes: list[tuple[int, Node]]) -> None:
        self.model = model
        self.node_idx = np.array([i for i, _ in nodes], dtype=np.int64)
        self.max_devices = max(n.num_gpus for _, n in nodes)
        self.milli = np.full((len(nodes), self.max_devices), -1, dtype=np.int64)
        for row, (_, n) in enumerate(nodes):
            self.milli[row, : n.num_gpus] = MILLI_PER_GPU
        self.full = np.array([n.num_gpus for _, n in nodes], dtype=np.int64)
        self.rowmax = np.full(len(nodes), MILLI_PER_GPU, dtype=np.int64)
        self.cpus = np.array([n.cpus for _, n in nodes], dtype=float)
        self.mem = np.array([n.memory_mib for _, n in nodes], dtype=float)
        self.total_milli = int(self.full.sum()) * MILLI_PER_GPU
        self.free_milli_sum = self.total_milli
        self.dirty = True
        self.max_full = 0
        self.max_dev = 0
        self.full_sum = int(self.full.sum())
        self.max_cpus = 0.0
        self.max_mem = 0.0

    def refresh(self) -> None:
        self.max_full = int(self.full.max())
        self.max_dev = int(self.rowmax.max())
        self.max_cpus = float(self.cpus.max())
        self.max_mem = float(self.mem.max())
        self.dirty = False

    def copy(self) -> "_ModelGroup":
        g = object.__new__(_ModelGroup)
        for name in self.__slots__:
            v = getattr(self, name)
            setattr(g, name, v.copy() if isinstance(v, np.ndarray) else v)
        return g


class Cluster:
    """Nodes and their free capacity. Implements :class:`trident.jobs.base.CapacityView`.

    Nodes without GPUs are ignored (the job layer schedules GPU jobs).
    """

    def __init__(self, nodes: Sequence[Node]) -> None:
        gpu_nodes = [n for n in nodes if n.num_gpus > 0]
        if not gpu_nodes:
            raise ConfigError("nodes", len(nodes), "at least one node with GPUs")
        ids = [n.node_id for n in gpu_nodes]
        if len(set(ids)) != len(ids):
            raise ConfigError("nodes", "duplicate node_id", "unique node ids")
        self.nodes: tuple[Node, ...] = tuple(gpu_nodes)
        by_model: dict[str, list[tuple[int, Node]]] = {}
        for i, n in enumerate(self.nodes):
            by_model.setdefault(n.gpu_model, []).append((i, n))
        self.gpu_models: tuple[str, ...] = tuple(sorted(by_model))
        self._groups = {m: _ModelGroup(m, by_model[m]) for m in self.gpu_models}
        self._candidates: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._row = {}
        for g in self._groups.values():
            for row, i in enumerate(g.node_idx.tolist()):
                self._row[i] = row

    # --- CapacityView --------------------------------------------------------------
    def node_indices(self, gpu_model: str) -> np.ndarray:
        return self._groups[gpu_model].node_idx

    def free_full_gpus(self, gpu_model: str) -> np.ndarray:
        return self._groups[gpu_model].full

    def free_milli(self, node_index: int) -> np.ndarray:
        g = self._groups[self.nodes[node_index].gpu_model]
        row = g.milli[self._row[node_index]]
        return row[: self.nodes[node_index].num_gpus]

    def free_milli_matrix(self, gpu_model: str) -> np.ndarray:
        """Per node of ``gpu_model`` x device: free thousandths (-1 = no such device)."""
        return self._groups[gpu_model].milli

    def max_free_milli(self, gpu_model: str) -> np.ndarray:
        """Per node of ``gpu_model``: the most free thousandths on any one device."""
        return self._groups[gpu_model].rowmax

    def free_cpus(self, gpu_model: str) -> np.ndarray:
        return self._groups[gpu_model].cpus

    def free_memory_mib(self, gpu_model: str) -> np.ndarray:
        return self._groups[gpu_model].mem

    def candidate_models(self, job: Job) -> tuple[str, ...]:
        """GPU models present in the cluster that ``job`` may run on."""
        if not job.gpu_models:
            return self.gpu_models
        models = self._candidates.get(job.gpu_models)
        if models is None:
            models = self._candidates[job.gpu_models] = tuple(m for m in job.gpu_models if m in self._groups)
        return models

    def may_fit(self, job: Job) -> bool:
        need = job.gpu_milli
        k = need // MILLI_PER_GPU
        groups = self._groups
        for m in (self.candidate_models(job) if job.gpu_models else self.gpu_models):
            g = groups[m]
            if g.dirty:
                g.refresh()
            if k <= g.max_devices and (job.cpus > g.max_cpus + 1e-9 or job.memory_mib > g.max_mem + 1e-9):
                continue  # a single-node placement needs the CPUs and memory on one node
            if k == 0:
                if g.max_dev >= need:
                    return True
            elif (g.max_full if k <= g.max_devices else g.full_sum) >= k:
                return True
        return False

    def could_ever_fit(self, job: Job) -> bool:
        """Would ``job`` fit on the empty cluster (GPUs, CPUs and memory)?"""
        need = job.gpu_milli
        for m in self.candidate_models(job):
            nodes = [self.nodes[i] for i in self._groups[m].node_idx.tolist()]
            k = max(1, need // MILLI_PER_GPU)
            if any(n.num_gpus >= k and n.cpus >= job.cpus and n.memory_mib >= job.memory_mib for n in nodes):
                return True
            if k > max(n.num_gpus for n in nodes) and sum(n.num_gpus for n in nodes) >= k:
                return True
        return False

    # --- totals --------------------------------------------------------------------
    def total_gpus_by_model(self) -> dict[str, float]:
        return {m: g.total_milli / MILLI_PER_GPU for m, g in self._groups.items()}

    def free_gpus_by_model(self) -> dict[str, float]:
        return {m: g.free_milli_sum / MILLI_PER_GPU for m, g in self._groups.items()}

    @property
    def total_milli(self) -> int:
        return sum(g.total_milli for g in self._groups.values())

    @property
    def used_milli(self) -> int:
        return sum(g.total_milli - g.free_milli_sum for g in self._groups.values())

    # --- changes -------------------------------------------------------------------
    def _apply(self, job: Job, alloc: Allocation, sign: int) -> None:
        g = self._groups[alloc.gpu_model]
        milli_m, full, rows = g.milli, g.full, self._row
        total = 0
        per_node: dict[int, int] = {}
        for node_index, dev, milli in alloc.devices:
            row = rows[node_index]
            before = int(milli_m[row, dev])
            after = before - sign * milli
            if after < 0 or after > MILLI_PER_GPU:
                raise ConfigError("allocation", alloc.devices, f"devices with capacity (device {dev} of node "
                                  f"{self.nodes[node_index].node_id} has {before} milli free)")
            milli_m[row, dev] = after
            delta = (after == MILLI_PER_GPU) - (before == MILLI_PER_GPU)
            if delta:
                full[row] += delta
                g.full_sum += delta
            per_node[row] = per_node.get(row, 0) + milli
            total += milli
        for row, milli in per_node.items():
            g.rowmax[row] = max(milli_m[row].tolist())
            if job.cpus or job.memory_mib:
                frac = milli / total
                g.cpus[row] -= sign * job.cpus * frac
                g.mem[row] -= sign * job.memory_mib * frac
        g.free_milli_sum -= sign * total
        g.dirty = True

    def allocate(self, job: Job, alloc: Allocation) -> None:
        """Take ``alloc``'s devices (and the job's CPUs and memory) from free capacity."""
        self._apply(job, alloc, +1)

    def release(self, job: Job, alloc: Allocation) -> None:
        """Give ``alloc``'s devices (and the job's CPUs and memory) back."""
        self._apply(job, alloc, -1)

    def copy(self) -> "Cluster":
        """An independent copy (for what-if checks such as choosing preemption victims)."""
        c = object.__new__(Cluster)
        c.nodes = self.nodes
        c.gpu_models = self.gpu_models
        c._groups = {m: g.copy() for m, g in self._groups.items()}
        c._row = self._row
        c._candidates = self._candidates
        return c
