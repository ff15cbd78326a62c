"""What the ``trident`` policy knows and remembers: one declared record that the step's functions
(:mod:`.policy`, :mod:`.planner`, :mod:`.rollouts`, :mod:`.tuning`) read and update, and the
issuing of a decision's targets. Pure: no Ray, no clock."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from trident.autoscaler.policies.trident import estimates
from trident.autoscaler.policies.trident.check import PredictionCheck
from trident.autoscaler.policies.trident.cores import HostCores
from trident.autoscaler.policies.trident.explore import Tried
from trident.autoscaler.policies.trident.inner import Growth
from trident.autoscaler.policies.trident.learned import Learned
from trident.autoscaler.policies.trident.phases import Phases
from trident.autoscaler.policies.trident.records import Bounds, key_of
from trident.autoscaler.policies.trident.settings import TridentSettings
from trident.autoscaler.policies.trident.track import OperatorTrack
from trident.autoscaler.policies.trident.tracking import Observer
from trident.core.policy import PolicyContext
from trident.core.types import Decision, DecisionKind, OperatorTarget, Plan, Snapshot


@dataclass
class PolicyState:
    """The trident policy's state: what it was given, its components and what it remembers."""

    settings: TridentSettings
    context: PolicyContext
    observer: Observer
    """Each operator's windows, rates, heap and regimes (:mod:`.tracking`)."""
    check: PredictionCheck
    """The last plan's prediction, checked against what comes out (:mod:`.check`)."""
    phases: Phases = field(default_factory=Phases)
    """The rollout under way, phase by phase (:mod:`.phases`)."""
    learned: Learned = field(default_factory=Learned)
    """What mismatches taught: placement caps and saturated pools (:mod:`.learned`)."""
    growth: Growth = field(default_factory=Growth)
    """When each pool last grew (the inner loop's scale-down waits after)."""
    cores: HostCores = field(default_factory=HostCores)
    """How far each pool scales on the machine's cores (:mod:`.cores`)."""
    bounds: dict[str, Bounds] = field(default_factory=dict)
    """The replicas the inner loop may give each pool (the planner's floor and ceiling)."""
    ceilings: dict[str, tuple[Bounds, float]] = field(default_factory=dict)
    """Pools that could not reach a planned size: the most the planner may give them, and since
    when (s); it holds ``ceiling_hold_s``, until the data changes or the room does."""
    explored: dict[tuple[str, float], Tried] = field(default_factory=dict)
    """(pool, its regime's start): the accelerator type it was moved to, to be measured there."""
    inner_sent: dict[str, int] = field(default_factory=dict)
    """The last size the inner loop asked of each pool (the shim keeps a target until changed)."""
    held_back: dict[str, int] = field(default_factory=dict)
    """Sizes the inner loop asked for that the room held back (asked again while input waits)."""
    named: set[str] = field(default_factory=set)
    """Operators some issued target has named (Ray's own rule no longer drives their pools)."""
    finished_ops: set[str] = field(default_factory=set)
    """Operators seen completed (each one's end frees what it held for the operators left)."""
    outrun: set[str] = field(default_factory=set)
    """Operators found unable to carry the standing plan since it was made (:func:`.rollouts.outrun`)."""
    pools: set[str] = field(default_factory=set)
    """The actor pools of the last snapshot."""
    room: tuple[float, float] | None = None
    """(CPUs, GPUs) of the last snapshot's cluster."""
    plan_seq: int = 0
    """The sequence number of the last plan issued."""
    last_look_s: float | None = None
    """When the planner last looked (s; ``None``: it looks at the next step)."""
    last_plan_s: float | None = None
    """When the last plan or rollout phase was issued (s; the dwell counts from it)."""
    last_step_s: float | None = None
    replan_now: bool = False
    """Whether the planner looks at the next step, past the dwell and the planning interval."""
    solve_failures: int = 0
    """Solves in a row that found no plan (the next looks again, longer)."""
    near_gains: int = 0
    """Looks in a row that found a better plan under the hysteresis (:attr:`TridentSettings.near_gain_looks`)."""
    regimes_seen: int = 0
    """The observer's count of regime changes at the last step."""
    looked_per_type: bool = False
    """Whether the planner's last look planned GPU pools per accelerator type."""
    changed_ops: list[str] = field(default_factory=list)
    """Operators whose regime changed in this step."""
    set_aside: list[str] = field(default_factory=list)
    """Operators whose history (:mod:`trident.history`) was set aside in this step."""
    predicted: tuple[tuple[str, float], ...] = ()
    """(operator, rows out/s) the plan made in this step expects."""
    history_runs: tuple[str, ...] = ()
    """Earlier runs the plan made in this step leaned on."""

    @classmethod
    def new(cls, context: PolicyContext, settings: TridentSettings) -> "PolicyState":
        s = settings.for_scope(context.memory_scope)
        observer = Observer(settings=s, rng=np.random.default_rng(context.seed), seed=context.seed,
                            priors=context.priors)
        check = PredictionCheck(shortfall=s.mismatch_shortfall, windows=s.mismatch_windows, window_s=s.rate_window_s)
        return cls(settings=s, context=context, observer=observer, check=check)

    @property
    def tracks(self) -> dict[str, OperatorTrack]:
        return self.observer.tracks

    def look_again(self) -> None:
        """The planner looks at the next step, past the dwell and the planning interval."""
        self.replan_now, self.last_look_s = True, None

    def limit(self, snap: Snapshot) -> int | None:
        """The memory the limit leaves the pipeline's workers (bytes; ``None``: no limit)."""
        return estimates.workers_memory(self.context.memory_limit_bytes, snap.cluster)

    def heaps(self, snap: Snapshot) -> dict[str, float]:
        """Each tracked operator's heap per replica at its configuration (bytes)."""
        return {o.name: estimates.heap(self.tracks[o.name], key_of(o.config), self.settings)
                for o in snap.operators if o.name in self.tracks}

    def dwell_s(self) -> float:
        """Seconds a finished rollout stands: ``min_dwell_s``, or ``dwell_cold_starts`` times the
        slowest cold start observed when that is longer (a change must pay for itself)."""
        cold = max((tr.cold_start_s for tr in self.tracks.values() if tr.cold_start_s is not None), default=0.0)
        return max(self.settings.min_dwell_s, self.settings.dwell_cold_starts * cold)

    def issue(self, targets: tuple[OperatorTarget, ...], reason: str, now: float, notes: list[str], *,
              kind: DecisionKind | str, plan_made: bool = True) -> Decision:
        """A decision carrying a plan of ``targets`` (and of each pinned pool no target names yet);
        ``plan_made``: it starts the dwell and replaces what the inner loop asked."""
        moving = {s.operator for phase in [self.phases.current, *self.phases.pending] for s in phase}
        pinned = self._pinned_unnamed({t.name for t in targets} | moving)
        if pinned:
            targets += pinned
            reason += "; held where the plan has them: " + ", ".join(f"{t.name} at {t.replicas}" for t in pinned)
        self.named.update(t.name for t in targets)
        for t in targets if plan_made else ():  # a plan's targets replace what the inner loop asked
            self.inner_sent.pop(t.name, None)
        self.plan_seq += 1
        self.last_plan_s = now if plan_made else self.last_plan_s
        plan = Plan(seq=self.plan_seq, targets=targets, reason=reason, created_at_s=now)
        return Decision(time_s=now, reason=reason, plan=plan, notes=tuple(notes), kind=kind)

    def issue_phase(self, phase, reason: str, now: float, notes: list[str], *, kind: DecisionKind,
                    held: tuple[tuple[OperatorTarget, ...], str] = ((), "")) -> Decision:
        """A decision issuing a rollout ``phase`` (its steps' targets and reasons after ``reason``,
        and ``held``: task caps with the words for them); the phases note the plan it rides on."""
        caps, words = held
        decision = self.issue(tuple(s.target for s in phase) + caps,
                              f"{reason} | now: " + "; ".join(s.reason for s in phase) + words, now, notes, kind=kind)
        self.phases.plan_seq = self.plan_seq
        return decision

    def _pinned_unnamed(self, exclude: set[str]) -> tuple[OperatorTarget, ...]:
        """A target for each pool the planner pinned (bounds ``n..n``) that no target has named yet,
        added to a decision issued anyway: until one names it, Ray's own rule still drives it
        (``ray_until_named``) and may grow it past the plan, which the inner loop then cuts back
        (first try: Ray grew Detect 2 -> 4 after a plan that held it at 2 beside Embed 2 -> 6, and
        the inner loop stopped two working actors). A keep issues nothing: the inner loop's first
        cut names the pool."""
        return tuple(OperatorTarget(name=n, replicas=b.lo) for n, b in sorted(self.bounds.items())
                     if b.lo == b.hi and n in self.pools and n not in self.named and n not in exclude)
