"""The ``trident`` policy: the adaptive core wired into one pipeline policy.

Each step it observes every operator: per-replica throughput over short windows (rows
per busy replica-second when the snapshot has ``busy_s``, else sustainable samples),
input bytes per row, heap per replica and cold starts. Changepoints on throughput and
row size end a regime, and so do two rate windows in a row far off the configuration's
median (a fast check for short runs), and so does a stall (no task finishing) that bounds the
rate far below it: samples from before are dropped, the old model is remembered
(a regime that recurs reuses it at once) and the plan is revisited. Per operator, the
filtered samples fit a GP model (on a window, when due or after a change, never on
every step). Memory-constrained BO tunes the bottleneck's batch size when a memory
limit is known. The MILP chooses replicas and device per operator under the cluster's
CPUs, GPUs per type and the memory limit; the rollout orders the change (new replicas
first, bottleneck first) and drops it when the time it saves does not pay for its
cold start. Hysteresis (in the MILP) and a minimum dwell between plans keep a
stationary pipeline still. Every decision says why.
"""
from __future__ import annotations

import math
import warnings
from collections import deque
from dataclasses import dataclass, field, replace

import numpy as np

from trident.control.policy import POLICIES, PolicyContext
from trident.detect.changepoint import ChangeDetector, ChangeEvent
from trident.errors import ConfigError
from trident.model.features import ConfigFeatures, device_type_of
from trident.model.gp import OperatorModel
from trident.model.regimes import RegimeStore
from trident.model.threads import single_threaded
from trident.observe.filters import sustainable_samples
from trident.plan.milp import (
    ANY_GPU,
    CPU,
    Allocation,
    DeviceOption,
    NodeType,
    OperatorSpec,
    PlacementProblem,
    solve_placement,
    throughput_of,
)
from trident.plan.rollout import RolloutInputs, RolloutStep, plan_rollout
from trident.types import Decision, OperatorConfig, OperatorSnapshot, OperatorTarget, Plan, Snapshot

_UNKNOWN_RATE = 1e9
"""Marks the rate of an operator held for lack of evidence (see :func:`_bound_held`)."""


@dataclass(frozen=True, kw_only=True)
class TridentSettings:
    """How often and how cautiously the policy acts (seconds, fractions)."""

    plan_interval_s: float = 5.0
    """Seconds between two looks at the plan when nothing changed."""
    min_dwell_s: float = 15.0
    """Seconds a finished rollout stands before another plan, unless the data changed (at least
    the ``min_rate_windows`` measurements of the new configuration)."""
    dwell_cold_starts: float = 3.0
    """The dwell in cold starts of the slowest operator, when longer than ``min_dwell_s``."""
    hysteresis: float = 0.10
    """Throughput gain a new plan needs over the current one."""
    horizon_s: float = 600.0
    """Seconds over which a cold start is amortised (shortened by the remaining work when known)."""
    rate_window_s: float = 5.0
    """Seconds per throughput measurement."""
    max_rate_window_s: float = 60.0
    """Longest a measurement waits for the rows of a busy operator's long batch (seconds)."""
    min_rate_windows: int = 3
    """Measurements of a configuration needed before it is planned with."""
    refit_interval_s: float = 120.0
    """Seconds between GP refits of one operator (and after each change)."""
    history: int = 240
    """Snapshots per operator kept for the filters and models."""
    memory_margin: float = 0.15
    """Relative margin over the largest heap per replica observed."""
    stable_heap_samples: int = 20
    """Heap samples of one configuration after which a third of the margin is kept."""
    default_cold_start_s: float = 10.0
    """Cold start of an actor before one was observed."""
    solver_time_limit_s: float = 0.5
    rollout_timeout_s: float = 120.0
    """Most seconds a rollout phase waits for its replicas (30 s + twice their cold start, at most
    this) before the next phase goes anyway."""
    bo_trials: int = 3
    """Batch sizes the optimiser may try per operator and regime (0 disables it)."""
    bo_min_remaining_s: float = 300.0
    """Remaining work (seconds at the current rate) below which no batch size is tried."""
    min_change: float = 0.10
    """Relative shift a changepoint needs to start a new regime (smaller ones are noise)."""
    shift_ratio: float = 1.5
    """Factor off its median a configuration's rate must be, ``shift_windows`` windows in a row,
    to end the regime at once (a fast check beside the changepoint detector)."""
    shift_windows: int = 2

    def __post_init__(self) -> None:
        for name in ("plan_interval_s", "rate_window_s", "max_rate_window_s", "refit_interval_s",
                     "solver_time_limit_s", "rollout_timeout_s", "horizon_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(name, getattr(self, name), "a number of seconds > 0")
        if self.shift_ratio <= 1 or self.shift_windows < 1:
            raise ConfigError("shift_ratio/shift_windows", (self.shift_ratio, self.shift_windows), "> 1, >= 1")
        if self.min_dwell_s < 0 or self.dwell_cold_starts < 0 or self.hysteresis < 0 or self.memory_margin < 0:
            raise ConfigError("min_dwell_s/dwell_cold_starts/hysteresis/memory_margin",
                              (self.min_dwell_s, self.dwell_cold_starts, self.hysteresis, self.memory_margin),
                              "numbers >= 0")
        if self.min_rate_windows < 1 or self.history < 20 or self.bo_trials < 0 or self.stable_heap_samples < 1:
            raise ConfigError("min_rate_windows/history/bo_trials/stable_heap_samples",
                              (self.min_rate_windows, self.history, self.bo_trials, self.stable_heap_samples),
                              ">= 1, >= 20, >= 0, >= 1")


ConfigKey = tuple[int | None, str, float]
"""(batch size, device, GPUs per replica): what a measured rate belongs to."""


def _key(cfg: OperatorConfig) -> ConfigKey:
    return (cfg.batch_size, device_type_of(cfg), cfg.num_gpus)


@dataclass
class _Track:
    """What the policy knows about one operator."""

    name: str
    model: OperatorModel
    regimes: RegimeStore
    rate_detector: ChangeDetector
    size_detector: ChangeDetector
    snaps: deque = field(default_factory=deque)
    rates: list = field(default_factory=list)  # (time_s, ConfigKey, output rows per busy replica-second)
    heap: dict = field(default_factory=dict)  # ConfigKey -> largest heap bytes per replica seen
    heap_samples: dict = field(default_factory=dict)  # ConfigKey -> snapshots that carried a heap sample
    key: ConfigKey | None = None
    window: tuple | None = None  # (time_s, rows_out, busy_s, rows_in, bytes_in) at the window start
    pending_since_s: float | None = None
    cold_start_s: float | None = None
    regime_start_s: float = 0.0
    fitted_at_s: float | None = None
    needs_fit: bool = False
    matched: bool = False
    bo_tried: int = 0
    selectivity: float = 1.0
    shifting: list = field(default_factory=list)  # (time_s, rate) of consecutive windows off the median
    stall: tuple | None = None  # (since_s, tasks_finished, replicas, time_s of its bound sample or None)


class TridentPolicy:
    """The adaptive policy (see the module docstring). Pure: no Ray, no clock; seeded."""

    name = "trident"

    def __init__(self, *, context: PolicyContext | None = None, settings: TridentSettings | None = None) -> None:
        self.context = context or PolicyContext()
        self.settings = settings or TridentSettings()
        self.rng = np.random.default_rng(self.context.seed)
        self.tracks: dict[str, _Track] = {}
        self.plan_seq = 0
        self.last_look_s: float | None = None
        self.last_plan_s: float | None = None
        self.changed_since_plan = False
        self.rollout: list[tuple[RolloutStep, ...]] = []
        self.phase_started_s = 0.0
        self.phase: tuple[RolloutStep, ...] = ()
        self.assumed: dict[str, tuple[ConfigKey, float]] = {}

    # --- the step --------------------------------------------------------------------------

    def step(self, snapshot: Snapshot, now: float) -> Decision:
        """One control step; an internal error keeps the current plan and says so (fail open)."""
        try:
            return self._step(snapshot, now)
        except Exception as exc:  # noqa: BLE001 - the pipeline must never fail because the policy did
            self.phase, self.rollout = (), []
            return Decision(time_s=now, reason=f"error: {type(exc).__name__}: {exc}; keeping the current plan")

    def _step(self, snapshot: Snapshot, now: float) -> Decision:
        notes: list[str] = []
        for op in snapshot.operators:
            if op.config.kind in ("task", "actor"):
                notes += self._observe(op, snapshot.time_s)
        due = [tr for tr in self.tracks.values() if self._fit_due(tr, snapshot.time_s)]
        if due:
            with single_threaded():
                for tr in due:
                    notes += self._fit(tr, snapshot.time_s)
        if self.phase:
            return self._continue_rollout(snapshot, now, notes)
        s = self.settings
        due = self.last_look_s is None or now - self.last_look_s >= s.plan_interval_s
        dwell_s = self._dwell_s()
        if self.last_plan_s is not None and now - self.last_plan_s < dwell_s and not self.changed_since_plan:
            return Decision(time_s=now, reason=f"dwell: last plan {now - self.last_plan_s:.0f} s ago "
                                               f"(< {dwell_s:.0f} s)", notes=tuple(notes))
        if not due and not self.changed_since_plan:
            return Decision(time_s=now, reason="observing", notes=tuple(notes))
        return self._plan(snapshot, now, notes)

    # --- observation -----------------------------------------------------------------------

    def _track(self, op: OperatorSnapshot, devices: tuple[str, ...]) -> _Track:
        tr = self.tracks.get(op.name)
        if tr is None:
            seed = int(self.rng.integers(2**31 - 1))
            tr = _Track(
                name=op.name,
                model=OperatorModel(device_types=devices, window_samples=self.settings.history, seed=seed),
                regimes=RegimeStore(),
                rate_detector=ChangeDetector(signal=f"{op.name} rows/s per replica", window=120, min_size=4,
                                             min_samples=12, penalty_scale=6.0),
                size_detector=ChangeDetector(signal=f"{op.name} input bytes per row", window=120, min_size=4,
                                             min_samples=12, penalty_scale=6.0),
                snaps=deque(maxlen=self.settings.history),
            )
            self.tracks[op.name] = tr
        return tr

    def _observe(self, op: OperatorSnapshot, t: float) -> list[str]:
        devices = tuple(sorted({device_type_of(op.config), CPU, ANY_GPU}))
        tr = self._track(op, devices)
        notes: list[str] = []
        done = op.rows_in_done_total if op.rows_in_done_total is not None else op.rows_in_total
        if done > 0 and op.rows_out_total > 0:  # rows in flight are in but not yet out: not counted
            tr.selectivity = op.rows_out_total / done
        key = _key(op.config)
        if key != tr.key:
            if tr.key is not None:  # our own reconfiguration: measurements restart, not a regime change
                tr.rate_detector.reset()
            tr.key, tr.window = key, None
        if op.actors_pending > 0 and tr.pending_since_s is None:
            tr.pending_since_s = t
        elif op.actors_pending == 0 and tr.pending_since_s is not None:
            # the shortest wait seen: longer ones also waited for resources or for a rolling update
            waited = t - tr.pending_since_s
            tr.cold_start_s = waited if tr.cold_start_s is None else min(tr.cold_start_s, waited)
            tr.pending_since_s = None
        if op.heap_rss_per_replica_bytes:
            notes += self._heap_sample(tr, op, key)
        tr.snaps.append((t, op))
        if op.completed:
            return notes
        notes += self._check_stall(tr, op, key, t)
        cur = (t, op.rows_out_total, op.busy_s, op.rows_in_total, op.bytes_in_total)
        if tr.window is None or op.actors_pending > 0:
            tr.window = cur
            return notes
        if t - tr.window[0] < self.settings.rate_window_s:
            return notes
        t0, rows0, busy0, in0, bytes0 = tr.window
        busy = op.busy_s is not None and busy0 is not None and op.busy_s - busy0 > 0.2 * (t - t0)
        working = busy or (op.busy_s is not None and op.tasks_running > 0)
        if working and op.rows_out_total == rows0 and t - t0 < self.settings.max_rate_window_s:
            return notes  # working on a long batch: the window lasts until rows come out
        tr.window = cur
        rate = None
        if busy:
            rate = (op.rows_out_total - rows0) / (op.busy_s - busy0)
        elif op.busy_s is None and not op.backpressured and op.input_queue_blocks > 0:
            running = op.actors_running if op.config.kind == "actor" else op.tasks_running
            if running > 0:
                rate = (op.rows_out_total - rows0) / (t - t0) / running
        events: list[ChangeEvent] = []
        if rate is not None and rate > 0:
            notes += self._check_assumption(tr, key, rate)
            shift = self._level_shift(tr, key, rate, t)
            tr.rates.append((t, key, rate))
            ev = tr.rate_detector.update(rate, now=t, times_s=[t])
            if shift is not None:
                tr.rate_detector.reset()
                events.append(shift)
            elif ev is not None:
                events.append(ev)
        if op.rows_in_total - in0 > 0:
            ev = tr.size_detector.update((op.bytes_in_total - bytes0) / (op.rows_in_total - in0), now=t, times_s=[t])
            if ev is not None:
                events.append(ev)
        for ev in events:
            shift = abs(ev.mean_after - ev.mean_before) / max(abs(ev.mean_before), 1e-12)
            if shift >= self.settings.min_change:
                notes.append(self._new_regime(tr, ev))
        return notes

    def _heap_sample(self, tr: _Track, op: OperatorSnapshot, key: ConfigKey) -> list[str]:
        """Record the largest heap per replica; every running replica is one sample. The plan is
        revisited once the estimate stands on ``stable_heap_samples`` samples (its margin shrinks)."""
        tr.heap[key] = max(tr.heap.get(key, 0.0), float(op.heap_rss_per_replica_bytes))
        before = tr.heap_samples.get(key, 0)
        tr.heap_samples[key] = before + max(1, op.actors_running)
        if before < self.settings.stable_heap_samples <= tr.heap_samples[key]:
            self.changed_since_plan = True
            return [f"{tr.name}: heap {tr.heap[key] / 2**20:.0f} MiB per replica confirmed by "
                    f"{tr.heap_samples[key]} replica samples; a third of the memory margin is kept"]
        return []

    def _check_stall(self, tr: _Track, op: OperatorSnapshot, key: ConfigKey, t: float) -> list[str]:
        """Censored evidence: while no task of a working operator finishes, each replica makes at
        most (rows per task) / (seconds stalled). Once that bound falls ``shift_ratio`` below the
        rate the configuration was measured (or planned) at, the regime ends at the stall's start
        and the bound stands as its first rate sample, tightened while the stall lasts. A slow
        phase of the data is seen one window after it starts, not after two long windows."""
        replicas = op.actors_running if op.config.kind == "actor" else op.tasks_running
        if op.tasks_running == 0 or op.actors_pending > 0 or op.backpressured:
            tr.stall = None
            return []
        if tr.stall is None or tr.stall[1] != op.tasks_finished or tr.stall[2] != replicas:
            tr.stall = (t, op.tasks_finished, replicas, None)
            return []
        since, finished, _, bound_t = tr.stall
        stalled_s = t - since
        if finished == 0 or stalled_s < self.settings.rate_window_s:
            return []
        bound = op.rows_out_total / finished / stalled_s
        if bound_t is not None:  # already a new regime: tighten its first sample
            at = next((i for i, r in enumerate(tr.rates) if r[0] == bound_t and r[1] == key), None)
            if at is not None:
                tr.rates[at] = (t, key, bound)
                tr.stall = (since, finished, replicas, t)
            return []
        measured = [r for _, k, r in tr.rates if k == key][-8:]
        planned = self.assumed.get(tr.name)
        if len(measured) >= self.settings.min_rate_windows:
            ref = float(np.median(measured))
        elif planned is not None and planned[0] == key:
            ref = planned[1]
        else:
            return []
        if bound * self.settings.shift_ratio >= ref:
            return []
        ev = ChangeEvent(signal=f"{tr.name} rows/s per replica", index=len(measured), changed_at_s=since,
                         detected_at_s=t, mean_before=ref, mean_after=bound, samples_since_change=1,
                         reason=f"{tr.name}: no task finished for {stalled_s:.0f} s, at most {bound:.3g} rows/s "
                                f"per replica (was {ref:.3g})")
        tr.rate_detector.reset()
        tr.shifting = []
        note = self._new_regime(tr, ev)
        tr.rates = [r for r in tr.rates if r[0] > since]  # a window that closed as the stall began is the old regime's
        tr.rates.append((t, key, bound))
        tr.stall = (since, finished, replicas, t)
        return [note]

    def _check_assumption(self, tr: _Track, key: ConfigKey, rate: float) -> list[str]:
        """A measured rate far off what the last plan assumed for this configuration ends the
        dwell: that plan was made on a wrong premise (e.g. its first estimate came from a phase
        of the data that has passed)."""
        planned = self.assumed.get(tr.name)
        if planned is None or planned[0] != key:
            return []
        ratio = self.settings.shift_ratio
        if planned[1] / ratio <= rate <= planned[1] * ratio:
            return []
        del self.assumed[tr.name]
        self.changed_since_plan = True
        return [f"{tr.name}: measured {rate:.3g} rows/s per replica, the last plan assumed {planned[1]:.3g}; "
                f"revisiting the plan"]

    def _level_shift(self, tr: _Track, key: ConfigKey, rate: float, t: float) -> ChangeEvent | None:
        """A fast check beside the changepoint detector: ``shift_windows`` windows in a row whose
        rate is off the configuration's median by more than ``shift_ratio`` (either way) end the
        regime at the first of them, long before the detector has its minimum samples."""
        s = self.settings
        before = [(tt, r) for tt, k, r in tr.rates if k == key]
        if len(before) < s.min_rate_windows:
            tr.shifting = []
            return None
        ref = float(np.median([r for tt, r in before if not tr.shifting or tt < tr.shifting[0][0]][-8:]))
        up = rate > ref * s.shift_ratio
        down = rate < ref / s.shift_ratio
        if not (up or down) or (tr.shifting and (tr.shifting[-1][1] > ref) != up):
            tr.shifting = [(t, rate)] if up or down else []
            return None
        tr.shifting.append((t, rate))
        if len(tr.shifting) < s.shift_windows:
            return None
        start, after = tr.shifting[0][0], float(np.median([r for _, r in tr.shifting]))
        tr.shifting = []
        return ChangeEvent(signal=f"{tr.name} rows/s per replica", index=len(before), changed_at_s=start,
                           detected_at_s=t, mean_before=ref, mean_after=after, samples_since_change=s.shift_windows,
                           reason=f"{tr.name} rows/s per replica {ref:.3g} -> {after:.3g} over "
                                  f"{s.shift_windows} windows from t={start:.0f} s")

    def _new_regime(self, tr: _Track, ev: ChangeEvent) -> str:
        """A change: forget what came before it, remember the old model, revisit the plan."""
        start = ev.changed_at_s
        tr.rates = [r for r in tr.rates if r[0] >= start]
        kept = deque(((t, o) for t, o in tr.snaps if t >= start), maxlen=tr.snaps.maxlen)
        tr.snaps = kept
        tr.heap_samples = {}  # the largest heap stays (memory is what must never be underestimated),
        # but the full margin is back until the new regime has confirmed it
        if tr.model.is_fitted:
            tr.regimes.remember(tr.model)
            tr.model = OperatorModel(device_types=tr.model.encoder.device_types, window_samples=self.settings.history,
                                     seed=int(self.rng.integers(2**31 - 1)))
        tr.regime_start_s, tr.needs_fit, tr.matched, tr.bo_tried = start, True, False, 0
        self.changed_since_plan = True
        return f"change: {ev.reason}; dropped samples before t={start:.0f} s"

    def _fit_due(self, tr: _Track, t: float) -> bool:
        if len(tr.snaps) < 12 or tr.fitted_at_s is None:
            return len(tr.snaps) >= 12
        since = t - tr.fitted_at_s
        return since >= self.settings.refit_interval_s or (tr.needs_fit and since >= self.settings.rate_window_s)

    def _fit(self, tr: _Track, t: float) -> list[str]:
        """Filter the regime's snapshots, try a remembered regime, refit the operator's model."""
        notes = []
        with warnings.catch_warnings():  # hyperparameters at their bounds are expected on small windows
            warnings.filterwarnings("ignore", module="sklearn")
            times = [s[0] for s in tr.snaps]
            filt = sustainable_samples([s[1] for s in tr.snaps], times_s=times, seed=self.context.seed)
            if not tr.model.is_fitted and not tr.matched and len(tr.regimes):
                model, match = tr.regimes.match(filt.kept[-8:])
                if model is not None:
                    tr.model, tr.matched = model, True
                    self.changed_since_plan = True
                    notes.append(f"{tr.name}: {match.reason}; its model is reused")
            tr.fitted_at_s = t
            if len(filt.kept) >= tr.model.min_samples:
                rep = tr.model.fit(filt.kept)
                tr.needs_fit = not rep.ok
                notes.append(f"{tr.name}: {filt.reason}; {rep.reason}")
        return notes

    # --- estimates -------------------------------------------------------------------------

    def _rate(self, tr: _Track, op: OperatorSnapshot, key: ConfigKey) -> tuple[float | None, str]:
        """Output rows per second per replica of ``op`` under ``key``, and where it came from."""
        measured = [r for _, k, r in tr.rates if k == key][-8:]
        if len(measured) >= self.settings.min_rate_windows:
            return float(np.median(measured)), "measured"
        if tr.model.is_fitted and key[1] in tr.model.encoder.device_types:
            cfg = ConfigFeatures(batch_size=key[0] or 1024, device_type=key[1],
                                 replicas=max(1, op.config.replicas or op.tasks_running or 1),
                                 input_bytes_per_row=op.input_bytes_per_row or 1.0)
            try:
                return float(tr.model.predict_throughput([cfg]).mean[0]), "model"
            except ConfigError:
                return None, "none"
        if measured:  # a new regime or configuration: its first windows
            return float(np.median(measured)), "first windows"
        if key == _key(op.config) and op.busy_s and op.rows_out_total > 0 and tr.regime_start_s == 0:
            # Before any rate window: rows per busy replica-second since the start, so a slow
            # bottleneck (or a pool waiting to fill a batch) does not hold every plan back.
            return op.rows_out_total / op.busy_s, "busy time so far"
        return None, "none"

    def _heap(self, tr: _Track, key: ConfigKey) -> float:
        """Heap bytes per replica to plan with: the largest seen plus the margin, a third of
        the margin once the largest stands on ``stable_heap_samples`` samples."""
        seen = tr.heap.get(key)
        if seen is None:
            return 0.0
        margin = self.settings.memory_margin
        if tr.heap_samples.get(key, 0) >= self.settings.stable_heap_samples:
            margin /= 3
        return seen * (1 + margin)

    # --- planning --------------------------------------------------------------------------

    def _plan(self, snap: Snapshot, now: float, notes: list[str]) -> Decision:
        ops = [o for o in snap.operators if o.config.kind in ("task", "actor") and not o.completed]
        if not ops:
            return Decision(time_s=now, reason="nothing to plan: every operator is done", notes=tuple(notes))
        problem, rates, why_missing = self._problem(snap, ops)
        if problem is None:  # looked again at the next step: the missing evidence may come any moment
            return Decision(time_s=now, reason=why_missing, notes=tuple(notes))
        self.last_look_s = now
        result = solve_placement(problem)
        self.changed_since_plan = False
        if not result.changed:  # the allocation is settled: tune the bottleneck's batch size
            bo = self._bo_step(snap, ops, problem, rates, now)
            if bo is not None:
                return Decision(time_s=now, reason=bo.reason, plan=bo, notes=tuple(notes) + (result.reason,))
            return Decision(time_s=now, reason=f"keep: {result.reason}", notes=tuple(notes))
        targets = self._targets(ops, result.allocation)
        cur_t = result.current_throughput_rows_per_s or 0.0
        rollout = plan_rollout(
            {o.name: o.config for o in ops}, targets,
            RolloutInputs(current_throughput_rows_per_s=cur_t, new_throughput_rows_per_s=result.throughput_rows_per_s,
                          remaining_rows=self._remaining(snap), utilisation=self._utilisation(problem, cur_t),
                          cold_start_s={o.name: self._cold(o) for o in ops},
                          free_cpus=snap.cluster.cpus - sum(_used(o)[0] for o in ops),
                          free_gpus=snap.cluster.gpus - sum(_used(o)[1] for o in ops),
                          free_gpus_by_type={t: g - sum(_used(o)[1] for o in ops if o.config.accelerator_type == t)
                                             for t, g in snap.cluster.gpus_by_type},
                          **_memory_room(problem, result.allocation)))
        if not rollout.go:
            return Decision(time_s=now, reason=f"keep: {rollout.reason}", notes=tuple(notes) + (result.reason,))
        self.rollout = rollout.phases()
        # what the plan assumed of each operator's rate (rows out per busy replica-second)
        self.assumed = {o.name: (_key(o.config), rates[o.name][0] * self.tracks[o.name].selectivity)
                        for o in ops if rates[o.name][0] < _UNKNOWN_RATE}
        steps = "; ".join(st.reason for st in rollout.steps)
        return self._next_phase(now, f"plan: {result.reason}; {rollout.reason}; steps: {steps}", notes)

    def _problem(self, snap: Snapshot, ops: list[OperatorSnapshot]):
        cluster = snap.cluster
        if cluster.cpus <= 0:
            return None, {}, "observing: the cluster's size is not known yet"
        typed = dict(cluster.gpus_by_type)
        gpu_ops = [o for o in ops if o.config.num_gpus > 0]
        per_type = bool(typed) and all(o.config.accelerator_type in typed for o in gpu_ops)
        nodes = [NodeType(name=CPU, count=1, cpus=cluster.cpus)]
        if per_type:
            nodes += [NodeType(name=t, count=1, cpus=cluster.cpus, gpus=g, gpu_type=t) for t, g in typed.items() if g > 0]
        elif cluster.gpus > 0:
            nodes.append(NodeType(name=ANY_GPU, count=1, cpus=cluster.cpus, gpus=cluster.gpus))
        specs, current, rates, missing = [], {}, {}, []
        # a replica not measured yet is assumed as large as the largest replica measured so far
        heap_prior = max((self._heap(self.tracks[o.name], _key(o.config)) for o in ops
                          if o.config.kind == "actor"), default=0.0)
        f, factors = 1.0, []
        for o in ops:
            factors.append(f)
            f *= self.tracks[o.name].selectivity
        for i, o in enumerate(ops):
            tr = self.tracks[o.name]
            key = _key(o.config)
            rate_out, source = self._rate(tr, o, key)
            if rate_out is None and not _starved(tr):
                return None, rates, f"observing: waiting for {self.settings.min_rate_windows} throughput " \
                                    f"measurements of {o.name} in its current configuration"

            replicas = o.config.replicas if o.config.replicas is not None else max(o.tasks_running, 1)
            device = CPU if o.config.num_gpus <= 0 else (o.config.accelerator_type if per_type else ANY_GPU)
            node = CPU if device == CPU else device
            lo, hi = o.config.min_replicas, o.config.max_replicas
            if rate_out is None:
                missing.append(o.name)
            if rate_out is None or o.config.replicas is None:
                rate_in, lo, hi = _UNKNOWN_RATE, replicas, replicas  # held as it is: no evidence to move it
            else:
                rate_in = rate_out / max(tr.selectivity, 1e-12)
            if o.input_queue_blocks == 0 and all(u.completed for u in snap.operators if u.index < o.index):
                cap = max(replicas, lo or 0)  # its input is all handed out: more replicas would idle
                hi = cap if hi is None else min(hi, cap)
            rates[o.name] = (rate_in, source)
            heap = self._heap(tr, key) or (heap_prior if o.config.kind == "actor" else 0.0)
            options = [DeviceOption(device=device, rate_rows_per_s=rate_in, cpus=o.config.num_cpus,
                                    gpus=o.config.num_gpus, memory_bytes=int(heap))]
            if per_type and device != CPU and rate_out is not None:
                for t in typed:
                    alt = (key[0], t, key[2])
                    if t == device or not any(k == alt for _, k, _ in tr.rates):
                        continue
                    alt_rate, _ = self._rate(tr, o, alt)
                    if alt_rate:
                        options.append(DeviceOption(device=t, rate_rows_per_s=alt_rate / max(tr.selectivity, 1e-12),
                                                    cpus=o.config.num_cpus, gpus=o.config.num_gpus,
                                                    memory_bytes=int(self._heap(tr, alt))))
            sel = factors[i + 1] / factors[i] if i + 1 < len(factors) else tr.selectivity
            specs.append(OperatorSpec(name=o.name, options=tuple(options), selectivity=max(sel, 1e-9),
                                      min_replicas=lo, max_replicas=hi, cold_start_s=self._cold(o),
                                      single_device=o.config.kind == "actor"))
            current[(o.name, device, node)] = replicas
        if len(missing) == len(ops):
            return None, rates, f"observing: no throughput measured yet for {', '.join(missing)}"
        specs = _bound_held(specs, factors, slots=cluster.cpus + cluster.gpus)
        limit = self.context.memory_limit_bytes or cluster.memory_limit_bytes
        problem = PlacementProblem(operators=tuple(specs), node_types=tuple(nodes), current=Allocation.of(current),
                                   memory_limit_bytes=limit, cpus_limit=cluster.cpus, horizon_s=self.settings.horizon_s,
                                   hysteresis=self.settings.hysteresis,
                                   time_limit_s=self.settings.solver_time_limit_s)
        remaining_s = self._remaining_s(snap, problem)
        if remaining_s is not None:  # a cold start is amortised over the work left, at most the horizon
            problem = replace(problem, horizon_s=max(min(self.settings.horizon_s, remaining_s), 1.0))
        return problem, rates, ""

    def _targets(self, ops: list[OperatorSnapshot], alloc: Allocation) -> tuple[OperatorTarget, ...]:
        out = []
        for o in ops:
            if o.config.replicas is None:
                continue
            n = alloc.replicas(o.name)
            devices = alloc.by_device(o.name)
            device = next(iter(devices), None)
            cur_device = o.config.accelerator_type
            if device not in (None, CPU, ANY_GPU) and device != cur_device:
                out.append(OperatorTarget(name=o.name, replicas=n, accelerator_type=device))
            elif n != o.config.replicas:
                out.append(OperatorTarget(name=o.name, replicas=n))
        return tuple(out)

    def _utilisation(self, problem: PlacementProblem, t: float) -> dict[str, float]:
        """Demand over capacity per operator at throughput ``t`` under the current plan."""
        cur = problem.current.as_dict() if problem.current else {}
        out = {}
        for spec, f in zip(problem.operators, problem.demand_factors()):
            cap = sum(spec.option(d).rate_rows_per_s * c for (o, d, _), c in cur.items() if o == spec.name)
            out[spec.name] = t * f / cap if cap > 0 else math.inf
        return out

    def _dwell_s(self) -> float:
        """Seconds a finished rollout stands: ``min_dwell_s``, or ``dwell_cold_starts`` times the
        slowest cold start observed when that is longer (a change must pay for itself)."""
        cold = max((tr.cold_start_s for tr in self.tracks.values() if tr.cold_start_s is not None), default=0.0)
        return max(self.settings.min_dwell_s, self.settings.dwell_cold_starts * cold)

    def _cold(self, o: OperatorSnapshot) -> float:
        if o.config.kind != "actor":
            return 0.0
        seen = self.tracks[o.name].cold_start_s
        return self.settings.default_cold_start_s if seen is None else seen

    def _remaining(self, snap: Snapshot) -> float | None:
        """Input rows the pipeline has still to finish: at the operator furthest behind, its
        rows out counted back to input rows through the selectivities up to it (rows queued
        between operators are not finished)."""
        ops = [o for o in snap.operators if o.config.kind in ("task", "actor") and o.name in self.tracks]
        if snap.input_rows_total is None or not ops:
            return None
        f, done = 1.0, []
        for o in ops:
            f *= max(self.tracks[o.name].selectivity, 1e-12)
            done.append(o.rows_out_total / f)
        return max(snap.input_rows_total - min(done), 0.0)

    def _remaining_s(self, snap: Snapshot, problem: PlacementProblem) -> float | None:
        """Seconds of work left at the current plan's modelled throughput (input rows/s)."""
        left = self._remaining(snap)
        rate = throughput_of(problem, problem.current) if problem.current else 0.0
        if left is None or rate <= 0:
            return None
        return left / rate

    # --- memory-constrained BO on the bottleneck's batch size -----------------------------

    def _bo_step(self, snap: Snapshot, ops, problem: PlacementProblem, rates, now: float) -> Plan | None:
        limit = problem.memory_limit_bytes
        s = self.settings
        if s.bo_trials == 0 or limit is None:
            return None
        remaining_s = self._remaining_s(snap, problem)
        if remaining_s is not None and remaining_s < s.bo_min_remaining_s:
            return None
        util = self._utilisation(problem, throughput_of(problem, problem.current))
        cands = [o for o in ops if o.config.kind == "actor" and o.config.batch_size and o.config.replicas
                 and rates[o.name][1] == "measured" and self.tracks[o.name].bo_tried < s.bo_trials]
        if not cands:
            return None
        o = max(cands, key=lambda c: util.get(c.name, 0.0))
        if util.get(o.name, 0.0) < max(util.values()) - 1e-9:
            return None
        from trident.optimize.safe_bo import SafeBayesOpt
        from trident.optimize.space import KnobSpace, Knobs, Observation

        tr = self.tracks[o.name]
        b, n, dev = o.config.batch_size, o.config.replicas, device_type_of(o.config)
        # larger batches raise throughput until memory runs out; smaller ones measured before stay candidates
        tried = {k[0] for _, k, _ in tr.rates if k[1] == dev and k[2] == o.config.num_gpus and k[0]}
        batches = tuple(sorted({b, b * 2, b * 4} | tried))
        others = sum(self._heap(self.tracks[x.name], _key(x.config)) * (x.config.replicas or 0)
                     for x in ops if x.name != o.name)
        if others >= limit or not tr.heap:
            return None
        obs = []
        for bb in batches:
            key = (bb, dev, o.config.num_gpus)
            r, _ = self._rate(tr, o, key) if any(k == key for _, k, _ in tr.rates) else (None, "")
            if r and key in tr.heap and len([1 for _, k, _ in tr.rates if k == key]) >= s.min_rate_windows:
                obs.append(Observation(knobs=Knobs(bb, n, dev), throughput_rows_per_s=r * n,
                                       memory_per_replica_bytes=tr.heap[key]))
        if not any(ob.knobs.batch_size == b for ob in obs):
            return None
        bo = SafeBayesOpt(space=KnobSpace(batch_sizes=batches, concurrencies=(n,), device_types=(dev,)),
                          memory_limit_bytes=float(limit), initial=Knobs(b, n, dev), seed=self.context.seed,
                          fixed_memory_bytes=float(others))
        with single_threaded():
            sug = bo.suggest(obs)
        if sug.knobs.batch_size == b:
            tr.bo_tried = s.bo_trials  # converged on the current batch size for this regime
            return None
        tr.bo_tried += 1
        self.plan_seq += 1
        self.last_plan_s = now
        reason = (f"tune {o.name} batch_size {b} -> {sug.knobs.batch_size} "
                  f"({'best safe' if sug.converged else f'trial {tr.bo_tried}/{s.bo_trials}'}): {sug.reason}")
        return Plan(seq=self.plan_seq, targets=(OperatorTarget(name=o.name, batch_size=sug.knobs.batch_size),),
                    reason=reason, created_at_s=now)

    # --- rollout ---------------------------------------------------------------------------

    def _next_phase(self, now: float, reason: str, notes: list[str]) -> Decision:
        self.phase = self.rollout.pop(0)
        self.phase_started_s = now
        self.plan_seq += 1
        reason = f"{reason} | now: {'; '.join(st.reason for st in self.phase)}"
        plan = Plan(seq=self.plan_seq, targets=tuple(st.target for st in self.phase), reason=reason, created_at_s=now)
        self.last_plan_s = now
        return Decision(time_s=now, reason=reason, plan=plan, notes=tuple(notes))

    def _continue_rollout(self, snap: Snapshot, now: float, notes: list[str]) -> Decision:
        byname = {o.name: o for o in snap.operators}
        waiting = [st.operator for st in self.phase if st.operator in byname and _settling(byname[st.operator], st)]
        patience = min(self.settings.rollout_timeout_s,
                       30.0 + 2 * max((self.tracks[st.operator].cold_start_s or self.settings.default_cold_start_s)
                                      for st in self.phase))
        timed_out = now - self.phase_started_s >= patience
        if waiting and not timed_out:
            return Decision(time_s=now, reason=f"rollout: waiting for {', '.join(waiting)} to reach its target",
                            notes=tuple(notes))
        if not self.rollout:
            self.phase = ()
            self.last_plan_s = now
            return Decision(time_s=now, reason="rollout complete" + (" (timed out waiting)" if timed_out else ""),
                            notes=tuple(notes))
        return self._next_phase(now, "rollout: next phase" + (" after a timeout" if timed_out else ""), notes)


def _bound_held(specs: list[OperatorSpec], factors: list[float], *, slots: float) -> list[OperatorSpec]:
    """Give each operator held for lack of evidence (rate ``_UNKNOWN_RATE``) a finite rate that
    cannot limit the plan: ten times what the measured operators could sustain at their most
    replicas (``slots`` where unbounded). A finite rate keeps the solver's scaling sane."""
    held = [sp.options[0].rate_rows_per_s >= _UNKNOWN_RATE for sp in specs]
    reach = [sp.options[0].rate_rows_per_s * (sp.max_replicas or slots) / f
             for sp, f, h in zip(specs, factors, held) if not h]
    if not reach:
        return specs
    t_max = 10 * max(min(reach), 1e-9)
    out = []
    for sp, f, h in zip(specs, factors, held):
        if h:
            rate = t_max * f / max(sp.min_replicas, 1)
            sp = replace(sp, options=tuple(replace(o, rate_rows_per_s=rate) for o in sp.options))
        out.append(sp)
    return out


def _settling(o: OperatorSnapshot, st: RolloutStep) -> bool:
    """Whether ``o`` has yet to reach the step's replicas: new ones still starting, or (for a
    drain) old ones still finishing their work, so the next phase's memory is not yet free."""
    if st.action == "scale_down":
        return o.config.kind == "actor" and o.actors_running > st.replicas_to
    return o.actors_pending > 0 or o.config.replicas != st.replicas_to


def _memory_room(problem: PlacementProblem, new: Allocation) -> dict:
    """Memory left under the limit by the current replicas, and what a new replica of each
    operator takes where the new plan puts it (bytes, as the plan estimates them)."""
    if problem.memory_limit_bytes is None or problem.current is None:
        return {}
    specs = {sp.name: sp for sp in problem.operators}
    used = sum(specs[o].option(d).memory_bytes * n for (o, d, _), n in problem.current.as_dict().items())
    each = {}
    for (o, d, _), n in new.as_dict().items():
        if n > 0:
            each[o] = max(each.get(o, 0.0), float(specs[o].option(d).memory_bytes))
    return {"free_memory_bytes": float(problem.memory_limit_bytes - used), "memory_per_replica_bytes": each}


def _starved(tr: _Track, last: int = 10) -> bool:
    """Whether the operator mostly had nothing to run lately: nothing queued, or nothing running
    (a pool waiting to fill a batch). A pool still starting its actors is not starved."""
    recent = list(tr.snaps)[-last:]
    idle = sum((o.input_queue_blocks == 0 or o.tasks_running == 0) and o.actors_pending == 0 for _, o in recent)
    return bool(recent) and idle >= 0.8 * len(recent)


def _used(o: OperatorSnapshot) -> tuple[float, float]:
    n = o.config.replicas if o.config.replicas is not None else o.tasks_running
    return n * o.config.num_cpus, n * o.config.num_gpus


POLICIES.register("trident", TridentPolicy)
