"""Bounds on the device assignments of one-device operators, pruned level by level: the
decomposition :func:`trident.core.plan.milp.solve_placement` runs before its full model."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trident.core.plan.placement import TOL, PlacementProblem, max_fit

_MAX_DEVICE_CHOICES = 1 << 14
"""Most partial device assignments :class:`DeviceChoices` bounds at one level."""


@dataclass(frozen=True)
class DeviceChoices:
    """Upper bounds on the objective of device assignments of the one-device operators.

    The bound of an assignment relaxes integrality and minimum replicas: an operator reaching ``T``
    on device ``d`` needs ``f * T / rate`` replicas, so ``f * r / rate`` of resource ``r`` per unit
    of ``T`` inside the node types ``d`` fits on; every set of node types that confines some device
    (and the whole cluster) caps the sum of what the operators confined to it need, an operator
    free to use several devices counting its cheapest. The objective is at most
    ``T - sum(alpha * max(T - C, 0))`` over the operators, ``C`` being the throughput its current
    replicas on its device(s) carry and ``alpha`` its cold start over the horizon (what starting the
    missing replicas costs at least). Adding an operator's choice never raises the bound, so
    partial assignments are pruned level by level."""

    ops: tuple[str, ...]
    """Operators with a device to choose, in the order they are assigned."""
    devices: tuple[tuple[str, ...], ...]
    loads: tuple[np.ndarray, ...]
    """Per operator: (devices x rows) resources per unit of T."""
    t_most: tuple[np.ndarray, ...]
    """Per operator: the most T on each device."""
    carried: tuple[np.ndarray, ...]
    """Per operator: the throughput its current replicas carry on each device."""
    alpha: np.ndarray
    """Per operator: cold start over the horizon (0 without a current plan)."""
    fixed_load: np.ndarray
    fixed_alpha: np.ndarray
    fixed_carried: np.ndarray
    t_cap: float
    cap_row: np.ndarray

    @staticmethod
    def of(problem: PlacementProblem, keys: list, caps: dict) -> DeviceChoices | None:
        """None when no one-device operator has a choice."""
        ops = {o.name: o for o in problem.operators}
        factors = dict(zip(ops, problem.demand_factors()))
        nodes = {n.name: n for n in problem.node_types}
        cur = problem.current.as_dict() if problem.current is not None else {}
        where: dict[tuple[str, str], frozenset] = {}
        for o, d, n in keys:
            where[(o, d)] = where.get((o, d), frozenset()) | {n}
        devices: dict[str, list[str]] = {}
        for o, d in where:
            devices.setdefault(o, []).append(d)
        enum = [o for o in ops if ops[o].single_device and len(devices.get(o, ())) > 1]
        if not enum:
            return None
        everywhere = frozenset(caps)
        rows = []  # (node types, resource index, capacity)
        for group in sorted(set(where.values()) | {everywhere}, key=sorted):
            for r in range(3):
                cap = sum(math.inf if caps[n][r] is None else caps[n][r] for n in group)
                if math.isfinite(cap):
                    rows.append((group, r, cap))
        if problem.memory_limit_bytes is not None:
            rows.append((everywhere, 2, float(problem.memory_limit_bytes)))
        if problem.cpus_limit is not None:
            rows.append((everywhere, 0, float(problem.cpus_limit)))
        if problem.gpus_limit is not None:
            rows.append((everywhere, 1, float(problem.gpus_limit)))

        def per_unit(o: str, ds: list[str]) -> tuple[np.ndarray, float, float]:
            """Least resources per unit of T in each row, the most T and the T the current replicas
            carry, of operator ``o`` on devices ``ds``."""
            op, f = ops[o], factors[o]
            load = np.zeros(len(rows))
            for j, (group, r, _) in enumerate(rows):
                if all(where[(o, d)] <= group for d in ds):
                    need = [f * (op.option(d).cpus, op.option(d).gpus, op.option(d).memory_bytes)[r]
                            / op.option(d).rate_rows_per_s for d in ds if op.option(d).rate_rows_per_s > 0]
                    load[j] = min(need, default=0.0)
            most = sum(op.option(d).rate_rows_per_s * sum(max_fit(op, op.option(d), nodes[n], per_node=False)
                                                          for n in where[(o, d)]) for d in ds)
            if op.max_replicas is not None:
                most = min(most, op.max_replicas * max(op.option(d).rate_rows_per_s for d in ds))
            carried = sum(op.option(d).rate_rows_per_s * cur.get((o, d, n), 0) for d in ds for n in where[(o, d)])
            return load, most / f, carried / f

        def alpha(o: str) -> float:
            return 0.0 if problem.current is None else ops[o].cold_start_s / problem.horizon_s

        t_cap = math.inf if problem.max_throughput_rows_per_s is None else problem.max_throughput_rows_per_s
        fixed, fixed_alpha, fixed_carried = np.zeros(len(rows)), [], []
        for o in ops:
            if o not in enum:
                load, most, carried = per_unit(o, devices.get(o, []))
                fixed += load
                t_cap = min(t_cap, most)
                if alpha(o) > 0:
                    fixed_alpha.append(alpha(o))
                    fixed_carried.append(carried)
        cap_row = np.array([c for _, _, c in rows], dtype=float)
        per = {o: [per_unit(o, [d]) for d in devices[o]] for o in enum}
        # the heaviest operators first: they prune the most
        enum.sort(key=lambda o: -min(float(np.max(p[0] / cap_row, initial=0.0)) for p in per[o]))
        return DeviceChoices(
            ops=tuple(enum), devices=tuple(tuple(devices[o]) for o in enum),
            loads=tuple(np.array([p[0] for p in per[o]]) for o in enum),
            t_most=tuple(np.array([p[1] for p in per[o]]) for o in enum),
            carried=tuple(np.array([p[2] for p in per[o]]) for o in enum),
            alpha=np.array([alpha(o) for o in enum]), fixed_load=fixed, fixed_alpha=np.array(fixed_alpha),
            fixed_carried=np.array(fixed_carried), t_cap=t_cap, cap_row=cap_row)

    def _bounds(self, load: np.ndarray, t_most: np.ndarray, carried: np.ndarray) -> np.ndarray:
        """Bounds of states with resources ``load`` (K x rows), most T ``t_most`` (K) and the first
        ``carried.shape[1]`` operators assigned, carrying ``carried`` (K x assigned)."""
        with np.errstate(divide="ignore"):
            ratio = np.where(load > 0, self.cap_row / np.where(load > 0, load, 1.0), np.inf)
        t = np.minimum(t_most, ratio.min(axis=-1, initial=np.inf))
        alpha = np.concatenate([self.fixed_alpha, self.alpha[:carried.shape[1]]])
        if not np.any(alpha > 0):
            return t
        c = np.hstack([np.broadcast_to(self.fixed_carried, (len(t), len(self.fixed_carried))), carried])
        finite = np.where(np.isfinite(t), t, 0.0)
        cand = np.hstack([finite[:, None], np.minimum(c, finite[:, None])])  # the kinks of a concave function
        value = cand - (alpha * np.maximum(cand[:, :, None] - c[:, None, :], 0.0)).sum(axis=2)
        return np.where(np.isfinite(t), value.max(axis=1), np.inf)

    def bound(self, choice: np.ndarray) -> float:
        load = self.fixed_load + sum(ld[c] for ld, c in zip(self.loads, choice))
        t = min([self.t_cap] + [t[c] for t, c in zip(self.t_most, choice)])
        carried = np.array([[cr[c] for cr, c in zip(self.carried, choice)]])
        return float(self._bounds(load[None, :], np.array([t]), carried)[0])

    def greedy(self) -> np.ndarray:
        """An assignment chosen operator by operator, each keeping the partial bound highest."""
        load, t, carried, out = self.fixed_load, self.t_cap, np.zeros(0), []
        for ld, tm, cr in zip(self.loads, self.t_most, self.carried):
            states = np.hstack([np.broadcast_to(carried, (len(cr), len(carried))), cr[:, None]])
            c = int(np.argmax(self._bounds(load + ld, np.minimum(t, tm), states)))
            load, t, carried = load + ld[c], min(t, float(tm[c])), states[c]
            out.append(c)
        return np.array(out)

    def above(self, tau: float, *, strict: bool):
        """Every assignment whose bound is above ``tau`` (or equal, unless ``strict``), as
        (choices, bounds); None when a level would bound more than :data:`_MAX_DEVICE_CHOICES`."""
        grid = np.zeros((1, 0), dtype=np.int64)
        load, t, carried = self.fixed_load[None, :], np.array([self.t_cap]), np.zeros((1, 0))
        bounds = np.array([self.t_cap])
        for ld, tm, cr in zip(self.loads, self.t_most, self.carried):
            k, c = len(grid), len(tm)
            if k * c > _MAX_DEVICE_CHOICES:
                return None
            load = (load[:, None, :] + ld[None, :, :]).reshape(k * c, -1)
            t = np.minimum(t[:, None], tm[None, :]).reshape(-1)
            grid = np.hstack([np.repeat(grid, c, axis=0), np.tile(np.arange(c), k)[:, None]])
            carried = np.hstack([np.repeat(carried, c, axis=0), np.tile(cr, k)[:, None]])
            bounds = self._bounds(load, t, carried)
            keep = bounds > tau if strict else bounds >= tau - TOL * max(1.0, abs(tau))
            grid, load, t, carried, bounds = grid[keep], load[keep], t[keep], carried[keep], bounds[keep]
        return grid, bounds

    def keys_of(self, keys: list, grid: np.ndarray) -> list:
        """``keys`` without the devices no assignment in ``grid`` uses."""
        used = {(o, ds[c]) for i, (o, ds) in enumerate(zip(self.ops, self.devices)) for c in set(grid[:, i].tolist())}
        chosen = set(self.ops)
        return [k for k in keys if k[0] not in chosen or (k[0], k[1]) in used]


