"""How far a pool scales on the driver's machine: a replica adds throughput only with a core to run on.

Ray places actors on logical CPUs and GPUs; their work runs on the machine's cores. Where the
logical resources exceed the cores (a workstation declaring 4 CPUs and 2 GPUs on 2 cores, a GPU
pool whose model runs on the CPU), a replica Ray can place may add nothing: it shares the cores
the others keep busy. The planner's rate per replica times the replicas then overstates what a
grown pool makes (the PDF demo: OCR 2 -> 3 replicas on 2 busy cores, planned at 1.7 -> 2.5
rows/s, made 0.74; the third replica's start took 7 s of those cores).

The scaling curve of a pool that keeps ``u`` cores busy per busy replica, on a machine with
``idle`` cores idle: ``rate(n) = r * min(n, running + idle / u)``. So a pool gets at most
``floor(idle / u)`` replicas more than it runs, or what it has asked for already when that is more
(:meth:`HostCores.caps`), read over the last
``window_s`` seconds of snapshots: the pool's CPU time and its busy replicas, the machine's busy
time. Pools with an actor off the driver's machine, or keeping less than ``min_cores`` of a core
busy per busy replica (a GPU's work, I/O; ``saturated_cores`` where no core is idle), are not
capped. Pure: no Ray, no clock.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field, replace

from trident.autoscaler.policies.trident.records import Bounds
from trident.core.plan.placement import PlacementProblem
from trident.core.types import Snapshot


@dataclass
class HostCores:
    """The last ``window_s`` seconds of snapshots, and the caps they imply."""

    window_s: float = 4.0
    min_cores: float = 0.5
    """Cores a busy replica keeps busy, at least, for its pool to count as bound by the cores."""
    saturated_cores: float = 0.25
    """The same where the machine has less than ``saturated_idle`` cores idle: its replicas share
    cores the other pools keep busy too, and each gets less of one than it would alone (the PDF
    demo: two OCR replicas beside Embed on 2 busy cores kept 0.498 of a core each, uncapped, and a
    third was planned and started for nothing)."""
    saturated_idle: float = 0.25
    seen: deque[Snapshot] = field(default_factory=deque)

    def see(self, snap: Snapshot) -> None:
        """Keep ``snap``; drop what the window no longer needs (one snapshot at its start stays)."""
        if snap.cluster.host_busy_s is None:
            return
        self.seen.append(snap)
        while len(self.seen) > 2 and self.seen[1].time_s <= snap.time_s - self.window_s:
            self.seen.popleft()

    def caps(self, snap: Snapshot) -> dict[str, Bounds]:
        """The most replicas of each pool bound by the cores, with why (pools not bound: absent)."""
        if len(self.seen) < 2 or self.seen[-1] is not snap:
            return {}
        first = self.seen[0]
        dt = snap.time_s - first.time_s
        cores, busy1, busy0 = snap.cluster.host_cores, snap.cluster.host_busy_s, first.cluster.host_busy_s
        if dt < self.window_s or not cores or busy0 is None or busy1 is None:
            return {}
        idle = max(0.0, cores - (busy1 - busy0) / dt)
        before = {o.name: o for o in first.operators}
        out: dict[str, Bounds] = {}
        for o in snap.operators:
            old = before.get(o.name)
            if o.config.kind != "actor" or o.completed or old is None or o.cpu_s is None or old.cpu_s is None:
                continue
            busy = sum(min(s.operator(o.name).tasks_in_flight, s.operator(o.name).actors_running)
                       for s in list(self.seen)[1:]) / (len(self.seen) - 1)  # busy replicas, on average
            if busy < 0.5:
                continue
            u = (o.cpu_s - old.cpu_s) / dt / busy
            if u < (self.saturated_cores if idle < self.saturated_idle else self.min_cores):
                continue
            # what is asked already stays (its starts are what keeps the cores busy now)
            hi = max(o.actors_running + math.floor(idle / u + 1e-9), o.config.replicas or 0, 1)
            out[o.name] = Bounds(lo=0, hi=hi, why=(
                f"at most {hi} replicas: each busy one keeps {u:.2f} of a core busy and the machine's "
                f"{cores} cores had {idle:.2f} idle over the last {dt:.0f} s (another replica would share them)"))
        return out

    def limit(self, prob: PlacementProblem, snap: Snapshot,
              highest: dict[str, int]) -> tuple[PlacementProblem, list[str]]:
        """``prob`` with each pool at most ``highest`` replicas and what the cores feed (a cap below a
        pool's minimum is not applied), and a note per pool the cores cap below its other bounds."""
        caps, notes = self.caps(snap), []
        for sp in prob.operators:
            b = caps.get(sp.name)
            if b is not None and sp.min_replicas <= b.hi < min(sp.max_replicas or math.inf,
                                                                highest.get(sp.name, math.inf)):
                highest = {**highest, sp.name: b.hi}
                notes.append(f"{sp.name} {b.why}")
        ops = tuple(replace(sp, max_replicas=min(sp.max_replicas or hi, hi))
                    if (hi := highest.get(sp.name)) is not None and hi >= sp.min_replicas else sp
                    for sp in prob.operators)
        return replace(prob, operators=ops), notes
