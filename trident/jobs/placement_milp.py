"""The ``milp`` placer: chooses a job's devices with a small mixed-integer program.

For a job of ``k`` whole GPUs, one integer ``x_n`` (GPUs taken on node ``n``) per
candidate node, and binaries for "node used", "node partly free after",
"node full after", "node keeps room for the next job" and "GPU model chosen":

    minimise  w_fragment * #nodes partly free after
            + w_spread   * #nodes the job spans
            + w_room     * [no node keeps room_gpus free GPUs]
            + w_speed    * (1 - speed on the chosen model / best speed)
            + w_fit      * sum_n x_n * free_n / size_n / k          (best-fit tie-break)
    s.t.      sum_n x_n = k;  one GPU model;  x_n <= free whole GPUs, CPU and memory
              shares of node n;  only GPU models the job allows.

Identical nodes (same model, size, free GPUs and host capacity) are
interchangeable: at most ``k`` copies of each such class enter the model, ordered
by symmetry-breaking constraints. HiGHS (in-process) solves it by default, CBC is
the fallback; every solve has a time limit, the solver's real status is checked
and the answer is validated against the capacity before it is returned. If no
valid solution comes back, a best-fit placement is returned and its reason says why.

A fractional job (below one GPU) needs one device: that is a single choice among
candidate devices, scored in closed form by the same terms (breaking a whole GPU
counts as fragmenting it; best fit on the device's free share).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trident.core.errors import ConfigError
from trident.jobs.base import MILLI_PER_GPU, PLACERS, Allocation, CapacityView, Job

_SOLVERS = ("highs", "cbc")


@dataclass(frozen=True)
class _NodeSlot:
    """One candidate node: index into ``capacity.nodes``, model, size, free whole GPUs,
    and ``hold`` = the most GPUs of this job its free GPUs, CPUs and memory can take."""

    index: int
    model: str
    size: int
    free: int
    hold: int


@dataclass(frozen=True)
class MilpPlacer:
    """Keyword-only configuration of the ``milp`` placer (weights are dimensionless).

    ``room_gpus``: free GPUs one node should keep for the next job (``None`` = a
    whole node of the job's model). ``time_limit_s``: solver wall limit per solve.
    ``gap_rel``: relative MIP gap accepted.
    """

    solver: str = "highs"
    time_limit_s: float = 2.0
    gap_rel: float = 1e-4
    room_gpus: int | None = None
    w_fragment: float = 1.0
    w_spread: float = 1.5
    w_room: float = 0.5
    w_speed: float = 2.0
    w_fit: float = 0.1
    name: str = "milp"

    def __post_init__(self) -> None:
        if self.solver not in _SOLVERS:
            raise ConfigError("solver", self.solver, " or ".join(repr(s) for s in _SOLVERS))
        if not self.time_limit_s > 0:
            raise ConfigError("time_limit_s", self.time_limit_s, "a number of seconds > 0")
        if not 0 <= self.gap_rel < 1:
            raise ConfigError("gap_rel", self.gap_rel, "a number in [0, 1)")
        if self.room_gpus is not None and self.room_gpus < 0:
            raise ConfigError("room_gpus", self.room_gpus, "None or an integer >= 0")
        for w in ("w_fragment", "w_spread", "w_room", "w_speed", "w_fit"):
            if getattr(self, w) < 0:
                raise ConfigError(w, getattr(self, w), "a weight >= 0")

    # --- public --------------------------------------------------------------------
    def place(self, job: Job, capacity: CapacityView) -> Allocation | None:
        """Devices for ``job`` on ``capacity``'s free GPUs, or ``None`` when it cannot fit now."""
        models = tuple(m for m in capacity.gpu_models if job.allows(m))
        if not models or not capacity.may_fit(job):
            return None
        if job.gpu_milli < MILLI_PER_GPU:
            return self._place_fraction(job, capacity, models)
        k = job.gpu_milli // MILLI_PER_GPU
        slots = _slots(job, capacity, models, k)
        if sum(s.hold for s in slots) < k:
            return None
        best_speed = max(job.speed_on(m) for m in models)
        if not any(sum(s.hold for s in slots if s.model == m) >= k for m in {s.model for s in slots}):
            return None
        take, status = self._solve(job, k, slots, capacity, best_speed)
        if take is not None:
            alloc = _allocation(take, slots, capacity, f"milp ({self.solver}): {status}")
            if _valid(alloc, job, capacity):
                return alloc
            status = f"{status}, but the solution failed validation"
        take = best_fit(k, slots)
        if take is None:
            return None
        return _allocation(take, slots, capacity, f"best-fit fallback: milp {status}")

    def objective(self, job: Job, capacity: CapacityView, take: dict[int, int]) -> float:
        """The MILP's objective for ``take`` (node index -> whole GPUs) of one GPU model.

        Counts over every node that could hold a GPU of the job (the MILP's value plus a
        constant from the identical nodes it leaves out); used to check solutions.
        """
        models = tuple(m for m in capacity.gpu_models if job.allows(m))
        k = job.gpu_milli // MILLI_PER_GPU
        slots = _slots(job, capacity, models, k, per_class=None)
        model = capacity.nodes[next(iter(take))].gpu_model
        room = {m: self._room(capacity, m) for m in {s.model for s in slots}}
        has_room = _room_outside(capacity, slots, room)
        partial = 0
        for s in slots:
            after = s.free - take.get(s.index, 0)
            partial += int(0 < after < s.size)
            has_room |= after >= room[s.model]
        fit = sum(x * s.free / s.size for s in slots for i, x in take.items() if i == s.index) / k
        best_speed = max(job.speed_on(m) for m in models)
        return (self.w_fragment * partial + self.w_spread * sum(1 for x in take.values() if x > 0)
                + self.w_room * (0 if has_room else 1) + self.w_speed * (1 - job.speed_on(model) / best_speed)
                + self.w_fit * fit)

    # --- whole GPUs: the MILP ------------------------------------------------------
    def _room(self, capacity: CapacityView, model: str) -> int:
        if self.room_gpus is not None:
            return self.room_gpus
        return max(capacity.nodes[i].num_gpus for i in capacity.node_indices(model).tolist())

    def _solve(self, job: Job, k: int, slots: list[_NodeSlot], capacity: CapacityView,
               best_speed: float) -> tuple[dict[int, int] | None, str]:
        import pulp

        models = sorted({s.model for s in slots})
        room = {m: self._room(capacity, m) for m in models}
        room_outside = _room_outside(capacity, slots, room)
        prob = pulp.LpProblem("placement", pulp.LpMinimize)
        n = len(slots)
        x = [pulp.LpVariable(f"x{i}", 0, slots[i].hold, cat="Integer") for i in range(n)]
        u = [pulp.LpVariable(f"u{i}", cat="Binary") for i in range(n)]
        z = [pulp.LpVariable(f"z{i}", cat="Binary") for i in range(n)]
        p = [pulp.LpVariable(f"p{i}", cat="Binary") for i in range(n)]
        r = [pulp.LpVariable(f"r{i}", cat="Binary") for i in range(n)]
        w = {m: pulp.LpVariable(f"w_{j}", cat="Binary") for j, m in enumerate(models)}
        keep = pulp.LpVariable("keep", 0, 1)
        speed_loss = {m: 1 - job.speed_on(m) / best_speed for m in models}
        prob += (self.w_fragment * pulp.lpSum(p) + self.w_spread * pulp.lpSum(u)
                 + self.w_room * (1 - keep)
                 + self.w_speed * pulp.lpSum(speed_loss[m] * w[m] for m in models)
                 + self.w_fit * pulp.lpSum(x[i] * (slots[i].free / slots[i].size / k) for i in range(n)))
        prob += pulp.lpSum(x) == k
        prob += pulp.lpSum(w.values()) == 1
        for i, s in enumerate(slots):
            after = s.free - x[i]
            prob += x[i] <= s.hold * u[i]
            prob += x[i] >= u[i]
            prob += u[i] <= w[s.model]
            prob += after <= s.free * (1 - z[i])
            was_partial = 1 if 0 < s.free < s.size else 0
            prob += p[i] >= was_partial + (1 - was_partial) * u[i] - z[i]
            prob += after >= room[s.model] * r[i]
        prob += keep <= pulp.lpSum(r) + (1 if room_outside else 0)
        for i in range(1, n):  # symmetry breaking inside a class of identical nodes
            a, b = slots[i - 1], slots[i]
            if (a.model, a.size, a.free, a.hold) == (b.model, b.size, b.free, b.hold):
                prob += x[i - 1] >= x[i]
        from trident.core.solver import solve

        try:
            out = solve(prob, solver=self.solver, time_limit_s=self.time_limit_s, gap_rel=self.gap_rel)
        except Exception as exc:  # a broken solver must not stop scheduling
            return None, f"solvers failed ({exc!r})"
        if out.status is None:
            status = pulp.LpStatus.get(prob.status, str(prob.status))
            return None, f"status {status} ({out.solver}{'; ' + out.note if out.note else ''})"
        take = {i: int(round(x[i].value() or 0)) for i in range(n)}
        take = {i: v for i, v in take.items() if v > 0}
        value = pulp.value(prob.objective)
        return take, f"{out.status} ({out.solver}), objective {value:.3f}, {n} candidate nodes"

    # --- a fraction of one GPU: closed-form choice -------------------------------
    def _place_fraction(self, job: Job, capacity: CapacityView, models: tuple[str, ...]) -> Allocation | None:
        need = job.gpu_milli
        best_speed = max(job.speed_on(m) for m in models)
        best: tuple[float, int, int] | None = None
        best_model = ""
        for m in models:
            idx = capacity.node_indices(m)
            ok = (capacity.free_cpus(m) >= job.cpus - 1e-9) & (capacity.free_memory_mib(m) >= job.memory_mib - 1e-9)
            speed_term = self.w_speed * (1 - job.speed_on(m) / best_speed)
            for row in np.flatnonzero(ok).tolist():
                node = int(idx[row])
                free = capacity.free_milli(node)
                fits = np.flatnonzero(free >= need)
                if fits.size == 0:
                    continue
                left = free[fits] - need
                score = (self.w_fragment * (free[fits] == MILLI_PER_GPU) + self.w_fit * left / MILLI_PER_GPU
                         + speed_term)
                j = int(np.argmin(score))
                cand = (float(score[j]), node, int(fits[j]))
                if best is None or cand < best:
                    best, best_model = cand, m
        if best is None:
            return None
        score, node, dev = best
        return Allocation(gpu_model=best_model, devices=((node, dev, need),),
                          node_ids=(capacity.nodes[node].node_id,),
                          reason=f"milp: fraction {need}/{MILLI_PER_GPU} on device {dev} of "
                                 f"{capacity.nodes[node].node_id} (score {score:.3f})")


def _slots(job: Job, capacity: CapacityView, models: tuple[str, ...], k: int,
           per_class: int | None = -1) -> list[_NodeSlot]:
    """Candidate nodes, at most ``per_class`` (default ``k``; ``None``: all) per class of
    identical nodes, grouped by class."""
    limit = k if per_class == -1 else per_class
    cpu_per_gpu = job.cpus / k
    mem_per_gpu = job.memory_mib / k
    classes: dict[tuple, list[int]] = {}
    for m in models:
        idx = capacity.node_indices(m)
        full = capacity.free_full_gpus(m)
        hold = np.minimum(full, k)
        if cpu_per_gpu > 0:
            hold = np.minimum(hold, np.floor(capacity.free_cpus(m) / cpu_per_gpu + 1e-9).astype(np.int64))
        if mem_per_gpu > 0:
            hold = np.minimum(hold, np.floor(capacity.free_memory_mib(m) / mem_per_gpu + 1e-9).astype(np.int64))
        for row in np.flatnonzero(hold > 0).tolist():
            node = int(idx[row])
            key = (m, capacity.nodes[node].num_gpus, int(full[row]), int(hold[row]))
            members = classes.setdefault(key, [])
            if limit is None or len(members) < limit:
                members.append(node)
    slots = []
    for (m, size, free, hold), members in sorted(classes.items()):
        slots.extend(_NodeSlot(index=i, model=m, size=size, free=free, hold=hold) for i in members)
    return slots


def _room_outside(capacity: CapacityView, slots: list[_NodeSlot], room: dict[str, int]) -> bool:
    """Does a node outside the candidates already keep ``room`` free GPUs (so room is kept anyway)?"""
    inside = {s.index for s in slots}
    for m, need in room.items():
        idx = capacity.node_indices(m).tolist()
        full = capacity.free_full_gpus(m).tolist()
        if any(i not in inside and f >= need for i, f in zip(idx, full)):
            return True
    return False


def best_fit(k: int, slots: list[_NodeSlot]) -> dict[int, int] | None:
    """Best fit: the fullest single node that holds ``k`` GPUs, else the fewest nodes of one
    model (largest first). Returns slot position -> GPUs, or ``None``."""
    single = [(s.free, s.index, i) for i, s in enumerate(slots) if s.hold >= k]
    if single:
        return {min(single)[2]: k}
    best: dict[int, int] | None = None
    for m in sorted({s.model for s in slots}):
        order = sorted((i for i, s in enumerate(slots) if s.model == m), key=lambda i: (-slots[i].hold, slots[i].index))
        take, left = {}, k
        for i in order:
            if left == 0:
                break
            take[i] = min(slots[i].hold, left)
            left -= take[i]
        if left == 0 and (best is None or len(take) < len(best)):
            best = take
    return best


def _allocation(take: dict[int, int], slots: list[_NodeSlot], capacity: CapacityView, reason: str) -> Allocation:
    devices: list[tuple[int, int, int]] = []
    node_ids: list[str] = []
    for i in sorted(take, key=lambda i: slots[i].index):
        node = slots[i].index
        whole = np.flatnonzero(capacity.free_milli(node) == MILLI_PER_GPU)[: take[i]]
        devices.extend((node, int(d), MILLI_PER_GPU) for d in whole.tolist())
        node_ids.append(capacity.nodes[node].node_id)
    return Allocation(gpu_model=slots[next(iter(take))].model, devices=tuple(devices), node_ids=tuple(node_ids),
                      reason=reason)


def _valid(alloc: Allocation, job: Job, capacity: CapacityView) -> bool:
    """Does ``alloc`` give ``job`` exactly its GPUs, on free devices of one allowed model,
    within each node's free CPUs and memory?"""
    if alloc.gpu_milli != job.gpu_milli or not job.allows(alloc.gpu_model):
        return False
    if len(set((n, d) for n, d, _ in alloc.devices)) != len(alloc.devices):
        return False
    rows = {int(i): r for r, i in enumerate(capacity.node_indices(alloc.gpu_model).tolist())}
    cpus, mem = capacity.free_cpus(alloc.gpu_model), capacity.free_memory_mib(alloc.gpu_model)
    per_node: dict[int, int] = {}
    for node, dev, milli in alloc.devices:
        if node not in rows or capacity.free_milli(node)[dev] < milli:
            return False
        per_node[node] = per_node.get(node, 0) + milli
    for node, milli in per_node.items():
        share = milli / job.gpu_milli
        if cpus[rows[node]] + 1e-6 < job.cpus * share or mem[rows[node]] + 1e-6 < job.memory_mib * share:
            return False
    return True


PLACERS.register("milp", MilpPlacer)
