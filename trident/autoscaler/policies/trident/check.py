"""Every plan is a prediction, and the policy checks it.

A plan, and a look that keeps the plan in place, states what each operator is to put out (rows/s).
Once its rollout is over, every ``window_s`` the rows the pipeline's last planned operator put out
are compared with that; when they stay more than ``shortfall`` below it for ``windows`` windows in
a row, or actors of the plan's pools still wait to start a cold start plus two snapshot intervals
after the rollout ended (a rollout under way has its own check for targets that stand still), the
check reports a :class:`Mismatch` whose cause is read from the snapshot (:func:`diagnose`): actors
pending and the resource the nodes lack, the object store full, an operator backpressured, starved
of input or of CPUs, a rate per replica below what the plan assumed, or a pool the plan grew that
puts out no more than it did before (replicas that share what the operator runs on: a saturated
pool). Pure: no Ray, no clock.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from trident.core.cluster import most_per_node, node_groups
from trident.core.types import OperatorSnapshot, Snapshot

STORE_FULL = 0.9
"""Object-store use, as a fraction of the cluster's store, that counts as full."""
SATURATED = 1.1
"""A grown pool whose output is at most this many times what it put out before is saturated."""


@dataclass(frozen=True)
class Cause:
    """One reason what came out is short of the prediction."""

    operator: str
    kind: str
    """``pending`` | ``object_store`` | ``backpressured`` | ``starved`` | ``cpu_starved`` | ``slow`` |
    ``saturated``."""
    text: str
    gpus_cap: float | None = None
    """Pending GPU actors: the GPUs the running actors hold, the most the next plans may use."""
    cpus_cap: float | None = None
    """Pending CPU actors: the CPUs what runs holds, the most the next plans may use."""
    ceiling: int | None = None
    """A saturated pool: the replicas beyond which it put out no more."""


@dataclass(frozen=True)
class Mismatch:
    """A plan whose prediction did not come true, and why."""

    plan_seq: int
    predicted_rows_per_s: float
    measured_rows_per_s: float | None
    causes: tuple[Cause, ...]
    late: bool = False
    """The plan's targets were not reached in time (``measured_rows_per_s`` is then ``None``)."""

    @property
    def reason(self) -> str:
        what = "".join(c.text + "; " for c in self.causes) or "no cause read from the snapshot; "
        plan = f"plan {self.plan_seq}" if self.plan_seq else "the allocation kept (no plan made yet)"
        if self.late:
            return f"mismatch: {plan} not in place in time: {what}planning again"
        return (f"mismatch: {plan} predicted {self.predicted_rows_per_s:.3g} rows/s, "
                f"{self.measured_rows_per_s:.3g} came out: {what}planning again")


@dataclass
class PredictionCheck:
    """The last plan's prediction and the windows measured against it."""

    shortfall: float = 0.2
    windows: int = 2
    window_s: float = 5.0
    seq: int = 0
    predicted: dict[str, float] = field(default_factory=dict)
    cold_start_s: float = 0.0
    due_s: float | None = None
    reached_s: float | None = None
    start: tuple[float, dict[str, int]] | None = None
    low: int = 0
    done: bool = True
    history: list[tuple[float, dict[str, tuple[int, int, bool]]]] = field(default_factory=list)
    """(time, operator -> (rows out, actors running, input queued)) of the last snapshots."""
    before: dict[str, tuple[int, float]] = field(default_factory=dict)
    """Pools the plan found backlogged at a steady size: (replicas, rows out/s) over the window before it."""
    finished: frozenset[str] = frozenset()
    """Operators already finished when the plan was made (it was made for the ones left)."""
    failed: float | None = None
    """What the last prediction that did not come true expected of the pipeline's output (rows/s)."""

    def observe(self, snap: Snapshot, now: float) -> None:
        """Keep the last ``2 x window_s`` of each operator's output, actors and queue."""
        self.history.append((now, {o.name: (o.rows_out_total, o.actors_running, o.input_queue_blocks > 0)
                                   for o in snap.operators}))
        while self.history and now - self.history[0][0] > 2 * self.window_s:
            self.history.pop(0)

    def expect(self, seq: int, predicted: dict[str, float], now: float, *, cold_start_s: float,
               finished: frozenset[str] = frozenset()) -> None:
        """A plan was issued at ``now`` with the operators ``finished`` done: once its rollout is
        over it should be in place within ``cold_start_s`` plus two snapshot intervals, and put out
        ``predicted`` rows/s."""
        self.seq, self.predicted, self.cold_start_s, self.finished = seq, dict(predicted), cold_start_s, finished
        self.due_s, self.reached_s, self.start, self.low, self.done = None, None, None, 0, not predicted
        self.before, self.failed = self._steady_before(now), None

    def keep(self, seq: int, predicted: dict[str, float], now: float, *, cold_start_s: float,
             finished: frozenset[str] = frozenset()) -> None:
        """The plan in place was kept at ``now``, reckoned to put out ``predicted`` rows/s: checked
        as a plan is, unless a prediction stands already or the pipeline's output is the one that
        just failed (within half the ``shortfall``: a keep looked at again is no new prediction)."""
        if not self.done or not predicted:
            return
        failed, out = self.failed, list(predicted.values())[-1]
        if failed is not None and abs(out - failed) <= self.shortfall / 2 * failed:
            return
        self.expect(seq, predicted, now, cold_start_s=cold_start_s, finished=finished)

    def _steady_before(self, now: float) -> dict[str, tuple[int, float]]:
        """Each pool that ran at one size with its input queued over the last ``window_s``: that
        size and what it put out (rows/s)."""
        window = [(t, ops) for t, ops in self.history if now - t <= self.window_s]
        if len(window) < 2 or window[-1][0] - window[0][0] < self.window_s / 2:
            return {}
        (t0, first), (t1, last) = window[0], window[-1]
        out = {}
        for name, (rows, running, _) in last.items():
            sizes = {ops[name][1] for _, ops in window if name in ops}
            if name in first and running > 0 and sizes == {running} and all(ops[name][2] for _, ops in window
                                                                            if name in ops):
                out[name] = (running, (rows - first[name][0]) / (t1 - t0))
        return out

    def drop(self) -> None:
        """The plan no longer stands (a regime change, a new plan, the operators finished)."""
        self.done = True

    def step(self, snap: Snapshot, now: float, *, interval_s: float, rolling_out: bool) -> Mismatch | None:
        if self.done:
            return None
        names = [o.name for o in snap.operators if o.name in self.predicted]
        if not names or any(o.completed and o.name not in self.finished for o in snap.operators
                            if o.config.kind in ("task", "actor")):
            self.done = True  # an operator finished since: the rest run on what it left, not on the plan
            return None
        if self.reached_s is None:
            if rolling_out:
                return None
            if self.due_s is None:
                self.due_s = now + self.cold_start_s
            if not any(snap.operator(n).actors_pending for n in names):
                self.reached_s = now
                self.start = (now, {n: snap.operator(n).rows_out_total for n in names})
            elif now > self.due_s + 2 * interval_s:
                self.done, self.failed = True, self.predicted[names[-1]]
                return Mismatch(self.seq, self.predicted[names[-1]], None,
                                diagnose(snap, self.predicted, {}, shortfall=self.shortfall), late=True)
            return None
        t0, rows0 = self.start
        if now - t0 < self.window_s:
            return None
        measured = {n: (snap.operator(n).rows_out_total - rows0[n]) / (now - t0) for n in names}
        self.start = (now, {n: snap.operator(n).rows_out_total for n in names})
        last = names[-1]
        if measured[last] >= (1 - self.shortfall) * self.predicted[last]:
            self.low = 0
            return None
        self.low += 1
        if self.low < self.windows:
            return None
        self.done, self.failed = True, self.predicted[last]
        return Mismatch(self.seq, self.predicted[last], measured[last],
                        diagnose(snap, self.predicted, measured, shortfall=self.shortfall, before=self.before))


def diagnose(snap: Snapshot, predicted: dict[str, float], measured: dict[str, float], *, shortfall: float = 0.2,
             before: dict[str, tuple[int, float]] | None = None) -> tuple[Cause, ...]:
    """What the snapshot says held the pipeline below ``predicted`` (rows out/s per operator; one
    more than ``shortfall`` below it is short); ``before``: (replicas, rows out/s) of the pools
    that ran steady and backlogged before the plan."""
    causes = [_pending(snap, o) for o in snap.operators if o.actors_pending > 0 and o.config.kind == "actor"]
    store = snap.cluster.object_store_bytes
    used = sum(o.object_store_bytes for o in snap.operators)
    if store and used >= STORE_FULL * store:
        causes.append(Cause("", "object_store", f"the object store is full ({used / 2**20:.0f} of "
                                                f"{store / 2**20:.0f} MiB)"))
    for o in snap.operators:
        if o.name not in predicted or o.completed:
            continue
        got = measured.get(o.name)
        short = got is not None and got < (1 - shortfall) * predicted[o.name]
        if o.backpressured and short:
            causes.append(Cause(o.name, "backpressured", f"{o.name} backpressured by the operators after it"))
        elif short and o.starved:
            causes.append(Cause(o.name, "starved", f"{o.name} starved of input ({got:.3g} of "
                                                   f"{predicted[o.name]:.3g} rows/s)"))
        elif short and o.config.kind == "task" and o.input_queue_blocks > 0 and o.config.replicas \
                and o.tasks_running < o.config.replicas:
            causes.append(Cause(o.name, "cpu_starved", f"{o.name} short of CPUs: {o.tasks_running} task(s) running "
                                                       f"of {o.config.replicas} allowed, {o.input_queue_blocks} "
                                                       f"block(s) queued"))
        elif short and o.actors_pending == 0:
            causes.append(_saturated(o, got, (before or {}).get(o.name)) or _slow(o, got, predicted[o.name]))
    return tuple(causes)


def _pending(snap: Snapshot, o: OperatorSnapshot) -> Cause:
    c = o.config
    need = f"{c.num_cpus:g} CPU" + (f" + {c.num_gpus:g} GPU" if c.num_gpus else "") + (
        f" on {c.accelerator_type}" if c.accelerator_type else "")
    nodes = snap.cluster.nodes
    if nodes:
        fit = most_per_node(nodes, cpus=c.num_cpus, gpus=c.num_gpus, accelerator_type=c.accelerator_type)
        hosts = [g for g in node_groups(nodes) if (c.num_gpus <= 0 or g.gpus > 0)
                 and (c.accelerator_type is None or g.accelerator_type == c.accelerator_type)]
        by_cpus = c.num_gpus > 0 and any(g.cpus / max(c.num_cpus, 1e-9) < g.gpus / c.num_gpus for g in hosts)
        where = ", ".join(f"{g.count} x {g.name}" for g in hosts) or "no node"
        text = (f"{o.actors_pending} actor(s) of {o.name} pending: each needs {need} on one node; the nodes "
                f"that can host one ({where}) hold {fit} in all, bound by their {'CPUs' if by_cpus else 'GPUs'}")
    else:
        text = f"{o.actors_pending} actor(s) of {o.name} pending: each needs {need} on one node"
    actors = [p for p in snap.operators if p.config.kind == "actor"]
    if c.num_gpus > 0:
        return Cause(o.name, "pending", text, gpus_cap=sum(p.actors_running * p.config.num_gpus for p in actors)
                     + _free_elsewhere(snap, actors, c.accelerator_type))
    return Cause(o.name, "pending", text, cpus_cap=sum(p.actors_running * p.config.num_cpus for p in actors) + sum(
        p.tasks_running * p.config.num_cpus for p in snap.operators if p.config.kind == "task"))


def _free_elsewhere(snap: Snapshot, actors: list[OperatorSnapshot], accelerator_type: str | None) -> float:
    """GPUs no running actor holds on the types other than ``accelerator_type`` (0 when the pool
    is not pinned to one): a pool short of room on its own type says nothing of the others (seed 0
    of the generated scenarios: a pool pending on A capped the whole pipeline at the GPUs running,
    and C's four idle GPUs stayed out of every later plan)."""
    if accelerator_type is None:
        return 0.0
    held: dict[str, float] = {}
    for p in actors:
        for u in p.by_type:
            held[u.accelerator_type] = held.get(u.accelerator_type, 0.0) + u.actors * p.config.num_gpus
    return sum(max(0.0, g - held.get(t, 0.0)) for t, g in snap.cluster.gpus_by_type if t != accelerator_type)


def _saturated(o: OperatorSnapshot, got: float, before: tuple[int, float] | None) -> Cause | None:
    """A pool grown past the size it ran at, backlogged still, that puts out no more than then."""
    if before is None or o.config.kind != "actor" or o.input_queue_blocks == 0:
        return None
    size, rate = before
    if o.actors_running <= size or got > SATURATED * rate:
        return None
    return Cause(o.name, "saturated", f"{o.name} put out {got:.3g} rows/s on {o.actors_running} replicas, "
                                      f"{rate:.3g} on {size}: replicas beyond {size} add nothing (they share "
                                      f"what it runs on)", ceiling=size)


def _slow(o: OperatorSnapshot, got: float, want: float) -> Cause:
    n = max(o.actors_running if o.config.kind == "actor" else o.tasks_running, 1)
    typed = ", ".join(f"{u.accelerator_type}: {u.actors} actor(s)" for u in o.by_type)
    return Cause(o.name, "slow", f"{o.name} put out {got / n:.3g} rows/s per replica over {n}, the plan "
                                 f"expected {want / n:.3g}" + (f" ({typed})" if typed else ""))
