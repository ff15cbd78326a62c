"""Observation: what the ``trident`` policy learns of each operator from each snapshot.

Per operator: rate windows (rows out per busy replica-second), input bytes per row, heap per
replica, cold starts and stalls. Changepoints on throughput and row size end a regime, and so
do two rate windows in a row far off the configuration's median (a fast check for short
runs), and so does a stall (no task finishing) that bounds the rate far below it: samples
from before are dropped, the old model is remembered (a regime that recurs reuses it at once)
and the plan is revisited. A step up from a rate measured while actors of the pipeline
started is the pipeline settling instead: the configuration's earlier samples go, the regime
stays. The filtered samples of a regime fit a GP model, when due.
"""
from __future__ import annotations

import warnings
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from trident.detect.changepoint import ChangeDetector, ChangeEvent
from trident.model.features import device_type_of
from trident.model.gp import OperatorModel
from trident.model.regimes import RegimeStore
from trident.observe.filters import sustainable_samples
from trident.plan.placement import ANY_GPU, CPU
from trident.policies.trident.records import Assumed, ConfigKey, Counters, OldActorsSpan, RateSample, Stall, key_of
from trident.policies.trident.settings import TridentSettings
from trident.types import OperatorSnapshot

MIN_TASKS_FOR_SELECTIVITY = 4
"""Finished tasks before rows out per row in is trusted (1 until then): the first tasks' counts
run ahead of the bytes Ray has marked as processed."""


@dataclass
class OperatorTrack:
    """What the policy knows about one operator."""

    name: str
    model: OperatorModel
    regimes: RegimeStore
    rate_detector: ChangeDetector
    size_detector: ChangeDetector
    snaps: deque = field(default_factory=deque)
    """(time_s, OperatorSnapshot) of the current regime, the newest last."""
    rates: list[RateSample] = field(default_factory=list)
    heap: dict[ConfigKey, float] = field(default_factory=dict)
    """Largest heap bytes per replica seen, per configuration."""
    heap_samples: dict[ConfigKey, int] = field(default_factory=dict)
    key: ConfigKey | None = None
    window: Counters | None = None
    pending_since_s: float | None = None
    cold_start_s: float | None = None
    regime_start_s: float = 0.0
    fitted_at_s: float | None = None
    needs_fit: bool = False
    matched: bool = False
    bo_tried: int = 0
    bo_settled: bool = False
    """The batch-size search is over for this regime (converged, or moved to the best found)."""
    batch_shape: dict[tuple[str, float], dict[int, tuple[float, float]]] = field(default_factory=dict)
    """Per (device, GPUs per replica): batch size -> (seconds per batch, heap bytes per replica)
    in the last regime that measured two or more batch sizes there (the search's prior on how a
    batch's time and memory grow, while a new regime has measured one batch size)."""
    selectivity: float = 1.0
    shifting: list[tuple[float, float]] = field(default_factory=list)
    """(time_s, rows/s) of consecutive windows off the median."""
    stall: Stall | None = None
    settling_at: int | None = None
    """While a reconfiguration settles: the operator's finished tasks (rows out, where tasks are
    not counted) when it last had old actors; ``None`` once a task of the new configuration
    has finished after them."""
    measured_from_s: dict[ConfigKey, float] = field(default_factory=dict)
    """When each configuration's measurements began (after its reconfiguration settled)."""
    starting_s: float | None = None
    """The last time an actor of the pipeline was seen starting (pending, or up and not yet
    through a first task)."""
    actors_up: int = 0
    """Running actors at the last snapshot."""
    warm_at: int = 0
    """Finished tasks (:func:`_progress`) at which the actors that came up last have each had
    time for a first task."""
    left: OldActorsSpan | None = None
    """While a rolling update's new actors are not up: the configuration left and what its old
    actors did since (:meth:`Observer._old_actors_at_work`)."""

    def measured(self, key: ConfigKey, last: int = 8) -> list[float]:
        return [r.rows_per_s for r in self.rates if r.key == key][-last:]

    def bounded(self, key: ConfigKey) -> bool:
        """Whether the configuration's rate rests on a stall's bound: in a stall that ended its
        regime, or with no sample in the regime but the bound (a task that ends such a stall may
        be the old regime's straggler, and the bound stays an upper bound)."""
        if self.stall is not None and self.stall.bound_time_s is not None:
            return True
        samples = [r for r in self.rates if r.key == key]
        return bool(samples) and all(r.bound for r in samples)

    def since_s(self, key: ConfigKey) -> float:
        """Snapshots from this time on measure ``key``: the regime's, from the settling of its
        reconfiguration on."""
        return max(self.regime_start_s, self.measured_from_s.get(key, self.regime_start_s))


class Observer:
    """Keeps an :class:`OperatorTrack` per operator; ``changed`` says the plan should be revisited."""

    def __init__(self, *, settings: TridentSettings, rng: np.random.Generator, seed: int) -> None:
        self.settings = settings
        self.rng = rng
        self.seed = seed
        self.tracks: dict[str, OperatorTrack] = {}
        self.assumed: dict[str, Assumed] = {}
        self.changed = False
        self.regime_changes = 0

    def track(self, op: OperatorSnapshot) -> OperatorTrack:
        tr = self.tracks.get(op.name)
        if tr is None:
            devices = tuple(sorted({device_type_of(op.config), CPU, ANY_GPU}))
            detector = dict(window=120, min_size=4, min_samples=12, penalty_scale=6.0)
            tr = OperatorTrack(
                name=op.name,
                model=OperatorModel(device_types=devices, window_samples=self.settings.history,
                                    seed=int(self.rng.integers(2**31 - 1))),
                regimes=RegimeStore(),
                rate_detector=ChangeDetector(signal=f"{op.name} rows/s per replica", **detector),
                size_detector=ChangeDetector(signal=f"{op.name} input bytes per row", **detector),
                snaps=deque(maxlen=self.settings.history),
            )
            self.tracks[op.name] = tr
        return tr

    def starting(self, ops: tuple[OperatorSnapshot, ...]) -> bool:
        """Whether an actor of the pipeline is starting: pending, or up but (counted by the pool's
        finished tasks since it came up, one per running actor) not yet through a first task. A
        first task carries one-off costs: on the batch-size scenario seven new actors took 3.5-5.4 s
        over their first batches, 1.6 s after."""
        out = False
        for op in ops:
            if op.config.kind != "actor":
                continue
            tr = self.track(op)
            if op.actors_running > tr.actors_up:
                tr.warm_at = _progress(op) + op.actors_running
            tr.actors_up = op.actors_running
            out = out or op.actors_pending > 0 or (_progress(op) < tr.warm_at and not op.completed)
        return out

    # --- one snapshot of one operator ------------------------------------------------------------

    def observe(self, op: OperatorSnapshot, t: float, *, starting: bool = False) -> list[str]:
        """``starting``: an actor of the pipeline is starting at ``t`` (:meth:`starting`)."""
        tr = self.track(op)
        notes: list[str] = []
        if starting:
            tr.starting_s = t
        done = op.rows_in_done_total if op.rows_in_done_total is not None else op.rows_in_total
        if done > 0 and op.rows_out_total > 0 and op.tasks_finished >= MIN_TASKS_FOR_SELECTIVITY:
            tr.selectivity = op.rows_out_total / done  # rows in flight are in but not yet out: not counted
        key = key_of(op.config)
        if key != tr.key:
            if tr.key is not None:  # our own reconfiguration: measurements restart, not a regime change
                tr.rate_detector.reset()
                tr.settling_at = _progress(op)
                _keep_busy_rate(tr, tr.key, t, self.settings.min_busy_s)
                warm = busy_of(op) is not None and _progress(op) >= tr.warm_at  # each old actor past a first task
                tr.left = OldActorsSpan(tr.key, _counters(op, t)) if warm else None
            if key.device not in tr.model.encoder.device_types:  # pinned to a type the model has not seen
                devices = tuple(sorted(set(tr.model.encoder.device_types) | {key.device}))
                tr.model = OperatorModel(device_types=devices, window_samples=self.settings.history,
                                         seed=int(self.rng.integers(2**31 - 1)))
                tr.fitted_at_s = None
            tr.key, tr.window = key, None
        self._cold_start(tr, op, t)
        self._old_actors_at_work(tr, op, t)
        settled = self._settled(tr, op, key, t)
        if settled and (op.heap_rss_per_replica_bytes or op.heap_live_per_replica_bytes):
            notes += self._heap_sample(tr, op, key)
        tr.snaps.append((t, op))
        if op.completed:
            return notes
        if not settled:
            tr.window = None
            return notes
        notes += self._check_stall(tr, op, key, t)
        busy_s = busy_of(op)
        cur = _counters(op, t)
        if tr.window is None or (op.actors_pending > 0 and busy_s is None):
            tr.window = cur  # without busy time, starting actors would read as a low rate
            return notes
        window_s = self.settings.rate_window_s
        if tr.shifting:  # the last window was off: confirm (or refute) the shift sooner
            window_s = min(window_s, self.settings.shift_confirm_s)
        if t - tr.window.time_s < window_s and not self._sudden_shift(tr, key, cur):
            return notes
        w = tr.window
        busy = busy_s is not None and w.busy_s is not None and busy_s - w.busy_s > 0.2 * (t - w.time_s)
        working = busy or (busy_s is not None and op.tasks_running > 0)
        if working and op.rows_out_total == w.rows_out and t - w.time_s < self.settings.max_rate_window_s:
            return notes  # working on a long batch: the window lasts until rows come out
        tr.window = cur
        rate = None
        if busy:
            rate = (op.rows_out_total - w.rows_out) / (busy_s - w.busy_s)
        elif busy_s is None and not op.backpressured and op.input_queue_blocks > 0:
            running = op.actors_running if op.config.kind == "actor" else op.tasks_running
            if running > 0:
                rate = (op.rows_out_total - w.rows_out) / (t - w.time_s) / running
        events: list[ChangeEvent] = []
        if rate is not None and rate > 0:
            shift, settling = self._level_shift(tr, key, rate, t)
            notes += self._check_assumption(tr, key, rate)
            if tr.bounded(key) and not [r for r in tr.rates if r.key == key and not r.bound]:
                # the first measure after a stall's bound: the planner looks again at once (a look
                # on the bound alone would otherwise hold the next one a planning interval)
                self.changed = True
            tr.rates.append(RateSample(t, key, rate, starting=tr.starting_s is not None and tr.starting_s >= w.time_s))
            ev = tr.rate_detector.update(rate, now=t, times_s=[t])
            if shift is not None:
                tr.rate_detector.reset()
                if settling:
                    notes.append(self._settle(tr, key, shift))
                else:
                    events.append(shift)
            elif ev is not None:
                events.append(ev)
        if op.rows_in_total - w.rows_in > 0:
            ev = tr.size_detector.update((op.bytes_in_total - w.bytes_in) / (op.rows_in_total - w.rows_in),
                                         now=t, times_s=[t])
            if ev is not None:
                events.append(ev)
        for ev in events:
            shift = abs(ev.mean_after - ev.mean_before) / max(abs(ev.mean_before), 1e-12)
            if shift >= self.settings.min_change:
                notes.append(self.new_regime(tr, ev))
        return notes

    def _old_actors_at_work(self, tr: OperatorTrack, op: OperatorSnapshot, t: float) -> None:
        """Measure the configuration a rolling update left by its old actors' work until the first
        new actor is up. Where that configuration's rate rested on its first tasks alone (fewer than
        ``min_rate_windows`` windows), this warm reading replaces it: on the batch-size scenario
        batch 8's only task before the first plan took 1.85 s for 8 rows where its batches take
        0.84 s, so batch 32 looked no slower per batch than 8, and the batch-size search swapped
        the whole pool to batch 64 and back (43 s of rollouts) where a line through warm readings
        puts 64 on the replicas its memory allows 11% below 32 on all of them."""
        span = tr.left
        if span is None:
            return
        busy_s = busy_of(op)
        if op.old_actors > 0 and op.actors_running <= op.old_actors and busy_s is not None and not op.completed:
            tr.left = span._replace(end=_counters(op, t))
            return
        tr.left = None
        end = span.end
        if end is None or len(tr.measured(span.key)) >= self.settings.min_rate_windows:
            return
        busy, rows = end.busy_s - span.start.busy_s, end.rows_out - span.start.rows_out
        if busy >= self.settings.min_busy_s and rows > 0:
            tr.rates = [r for r in tr.rates if r.key != span.key] + [RateSample(end.time_s, span.key, rows / busy)]
            tr.measured_from_s[span.key] = end.time_s  # its own snapshots (its first tasks) are superseded

    @staticmethod
    def _settled(tr: OperatorTrack, op: OperatorSnapshot, key: ConfigKey, t: float) -> bool:
        """Whether ``op``'s counters measure its configuration ``key``: not while old actors of a
        rolling update still work, nor before a task finished after them. (Until then the rows
        out and busy time are the old actors', and the shim's heap reading is the last finished
        task's: a plan that took batch 32's heap for batch 64 grew the pool to 8 replicas past
        the memory limit, 46 OOM kills.) Nor, once settling, while the pool has no running
        actor: the tasks that finish then are the last ones of old actors that just left (on the
        batch-size scenario, after a swap from batch 64 back to 32, batch 64's heap was taken for
        batch 32's while the seven new actors started, and the rollout held the pool at 4 for
        "no room"). Nor in the snapshot after the last old actors left: their last tasks finished
        in between and its heap reading is theirs (batch 64's 791 MiB, taken for batch 32's, left
        room for 6 of 8 replicas for the rest of a run)."""
        old_left = bool(tr.snaps) and tr.snaps[-1][1].old_actors > 0
        if op.old_actors > 0 or old_left or (tr.settling_at is not None and op.config.kind == "actor"
                                             and op.actors_running == 0 and not op.completed):
            tr.settling_at = _progress(op)
        if tr.settling_at is None:
            return True
        if _progress(op) <= tr.settling_at:
            tr.measured_from_s[key] = float("inf")
            return False
        tr.settling_at = None
        tr.measured_from_s[key] = t
        return True

    @staticmethod
    def _cold_start(tr: OperatorTrack, op: OperatorSnapshot, t: float) -> None:
        """The shortest wait from an actor pending to none pending (longer ones also waited for
        resources or for a rolling update)."""
        if op.actors_pending > 0 and tr.pending_since_s is None:
            tr.pending_since_s = t
        elif op.actors_pending == 0 and tr.pending_since_s is not None:
            waited = t - tr.pending_since_s
            tr.cold_start_s = waited if tr.cold_start_s is None else min(tr.cold_start_s, waited)
            tr.pending_since_s = None

    def _heap_sample(self, tr: OperatorTrack, op: OperatorSnapshot, key: ConfigKey) -> list[str]:
        """Record the largest heap per replica, finished tasks' or read live; with a finished
        task's reading every running replica is one sample. The plan is revisited once the
        estimate stands on ``stable_heap_samples`` samples (its margin shrinks). A live reading
        alone (a task's memory so far) raises the estimate but confirms nothing."""
        seen = max(op.heap_rss_per_replica_bytes or 0, op.heap_live_per_replica_bytes or 0)
        tr.heap[key] = max(tr.heap.get(key, 0.0), float(seen))
        if not op.heap_rss_per_replica_bytes:
            return []
        before = tr.heap_samples.get(key, 0)
        tr.heap_samples[key] = before + max(1, op.actors_running)
        if before < self.settings.stable_heap_samples <= tr.heap_samples[key]:
            self.changed = True
            return [f"{tr.name}: heap {tr.heap[key] / 2**20:.0f} MiB per replica confirmed by "
                    f"{tr.heap_samples[key]} replica samples; a third of the memory margin is kept"]
        return []

    def _check_stall(self, tr: OperatorTrack, op: OperatorSnapshot, key: ConfigKey, t: float) -> list[str]:
        """Censored evidence: while no task of a working operator finishes, each replica makes at
        most (rows per task) / (seconds stalled). Once that bound falls ``shift_ratio`` below the
        rate the configuration was measured (or planned) at - or, for a pool that idled too much
        for a rate window (busy under a fifth of the time), its busy-time rate - the regime ends
        at the stall's start and the bound stands as its first rate sample, tightened while the
        stall lasts. A bound ``shift_ratio_alone`` below ends the regime after ``shift_confirm_s``,
        one ``shift_ratio`` below after ``rate_window_s`` (PDF benchmark: OCR's scanned pages held
        every task 5 s after text pages at 138 rows/s per replica; a plan in between rested on the
        text pages' rate). Replicas that start during a stall do not end it (the running ones'
        tasks still bound the rate); replicas that leave do."""
        replicas = op.actors_running if op.config.kind == "actor" else op.tasks_running
        if op.tasks_running == 0 or op.backpressured:
            tr.stall = None
            return []
        st = tr.stall
        if st is None or st.tasks_finished != op.tasks_finished or replicas < st.replicas:
            tr.stall = Stall(since_s=t, tasks_finished=op.tasks_finished, replicas=replicas)
            return []
        st.replicas = replicas
        stalled_s = t - st.since_s
        if st.tasks_finished == 0 or stalled_s < self.settings.shift_confirm_s:
            return []
        bound = op.rows_out_total / st.tasks_finished / stalled_s
        if st.bound_time_s is not None:  # already a new regime: tighten its first sample
            at = next((i for i, r in enumerate(tr.rates) if r.time_s == st.bound_time_s and r.key == key), None)
            if at is not None:
                tr.rates[at] = RateSample(t, key, bound, bound=True)
                st.bound_time_s = t
            return []
        measured = tr.measured(key)
        planned = self.assumed.get(tr.name)
        if len(measured) >= self.settings.min_rate_windows:
            ref = float(np.median(measured))
        elif planned is not None and planned.key == key:
            ref = planned.rows_per_s
        else:  # cheap rows on a mostly idle pool: no window measured it, its busy time did
            ref = busy_rate(tr, key, self.settings.min_busy_s)
            if ref is None and tasks_since(tr, key) >= self.settings.sudden_tasks:
                # rows so cheap that their tasks' busy time sums under ``min_busy_s``: they still
                # show what the stall is slow against (PDF benchmark: OCR's 24 text-page tasks
                # took 0.46 busy-seconds; its scanned pages then stalled it 12 s, unnoticed)
                ref = busy_rate(tr, key, 1e-3)
            if ref is None:
                return []
        long = stalled_s >= self.settings.rate_window_s
        if bound * (self.settings.shift_ratio if long else self.settings.shift_ratio_alone) >= ref:
            return []
        ev = ChangeEvent(signal=f"{tr.name} rows/s per replica", index=len(measured), changed_at_s=st.since_s,
                         detected_at_s=t, mean_before=ref, mean_after=bound, samples_since_change=1,
                         reason=f"{tr.name}: no task finished for {stalled_s:.0f} s, at most {bound:.3g} rows/s "
                                f"per replica (was {ref:.3g})")
        tr.rate_detector.reset()
        tr.shifting = []
        note = self.new_regime(tr, ev)
        # a window that closed since the stall began, or is open across its start, measures rows that
        # came out before it (no task has finished since): on PDF one such window (~72 rows/s per
        # replica) stood beside the bound (0.8) and the plan took their median for OCR's rate on
        # scanned pages (0.08)
        tr.rates, tr.window = [RateSample(t, key, bound, bound=True)], None
        st.bound_time_s = t
        return [note]

    def _sudden_shift(self, tr: OperatorTrack, key: ConfigKey, cur: Counters) -> bool:
        """Whether the open rate window's last ``shift_confirm_s`` seconds (or more), with
        ``sudden_tasks`` finished tasks, already measure a shift alone (see :meth:`_level_shift`)
        off the steady windows or, before there are ``min_rate_windows`` of them, off what the
        last plan assumed (a short run's step then closes the window 2 s after it, and a short
        window confirms it): then the window is cut to them and closes at once. Busy time counts
        finished tasks only, so a part of a window is as exact as a whole one for the tasks it
        holds, and its end shows a step that the whole window would blur (first-try benchmark:
        Detect's rows cost 4x more from 33.7 s; the window then open closed at 37.9 s 2.9x off,
        and a second confirmed it at 40.0 s)."""
        s, w = self.settings, tr.window
        if tr.shifting or cur.busy_s is None or cur.time_s - w.time_s < s.shift_confirm_s:
            return False
        steady = tr.measured(key)
        planned = self.assumed.get(tr.name)
        if len(steady) >= s.min_rate_windows:
            ref = float(np.median(steady))
        elif planned is not None and planned.key == key:  # too few windows yet: what the plan assumed
            ref, steady = planned.rows_per_s, []
        else:
            return False
        start = next((_counters(o, t) for t, o in reversed(tr.snaps)
                      if w.time_s <= t <= cur.time_s - s.shift_confirm_s), None)
        if (start is None or start.busy_s is None or cur.tasks - start.tasks < s.sudden_tasks
                or cur.busy_s <= start.busy_s or cur.rows_out <= start.rows_out):
            return False
        rate = (cur.rows_out - start.rows_out) / (cur.busy_s - start.busy_s)
        if not _far_off(rate, ref, steady, s.shift_ratio_alone):
            return False
        tr.window = start
        return True

    def _check_assumption(self, tr: OperatorTrack, key: ConfigKey, rate: float) -> list[str]:
        """A measured rate far off what the last plan assumed for this configuration ends the
        dwell: that plan was made on a wrong premise."""
        planned = self.assumed.get(tr.name)
        if planned is None or planned.key != key or planned.flagged:
            return []
        ratio = self.settings.shift_ratio
        if planned.rows_per_s / ratio <= rate <= planned.rows_per_s * ratio:
            return []
        self.assumed[tr.name] = planned._replace(flagged=True)
        self.changed = True
        return [f"{tr.name}: measured {rate:.3g} rows/s per replica, the last plan assumed "
                f"{planned.rows_per_s:.3g}; revisiting the plan"]

    def _level_shift(self, tr: OperatorTrack, key: ConfigKey, rate: float,
                     t: float) -> tuple[ChangeEvent | None, bool]:
        """``shift_windows`` windows in a row whose rate is off the configuration's median (or, before
        it has ``min_rate_windows``, off what the plan assumed) by more than ``shift_ratio`` (either
        way) end the regime at the first of them; a window after an off one lasts ``shift_confirm_s``.
        One window ``shift_ratio_alone`` off steady windows, and far beyond their spread, is enough
        (on the long-shift scenario the rates move 4x: the two-window rule acted 11.5 and 12.8 s
        after the data changed). Also says whether the shift is the pipeline settling rather than
        a new regime: a step up from a rate measured while actors started (see :meth:`_settle`)."""
        s = self.settings
        before = [r for r in tr.rates if r.key == key]
        steady = [r for r in before if not tr.shifting or r.time_s < tr.shifting[0][0]][-8:]
        planned = self.assumed.get(tr.name)
        if len(steady) >= s.min_rate_windows:
            ref = float(np.median([r.rows_per_s for r in steady]))
            at_start = mostly_starting(steady)
        elif planned is not None and planned.key == key:  # too few windows yet: what the plan assumed
            ref, at_start = planned.rows_per_s, planned.starting
        else:
            tr.shifting = []
            return None, False
        up = rate > ref * s.shift_ratio
        down = rate < ref / s.shift_ratio
        if not (up or down):
            tr.shifting = []
            return None, False
        if tr.shifting and (tr.shifting[-1][1] > ref) != up:
            tr.shifting = []
        tr.shifting.append((t, rate))
        alone = (len(steady) >= s.min_rate_windows
                 and _far_off(rate, ref, [r.rows_per_s for r in steady], s.shift_ratio_alone))
        if len(tr.shifting) < s.shift_windows and not alone:
            return None, False
        start, after = tr.shifting[0][0], float(np.median([r for _, r in tr.shifting]))
        windows = len(tr.shifting)
        tr.shifting = []
        return ChangeEvent(signal=f"{tr.name} rows/s per replica", index=len(before), changed_at_s=start,
                           detected_at_s=t, mean_before=ref, mean_after=after, samples_since_change=windows,
                           reason=f"{tr.name} rows/s per replica {ref:.3g} -> {after:.3g} over "
                                  f"{windows} window{'s' if windows > 1 else ''} from t={start:.0f} s"), up and at_start

    def _settle(self, tr: OperatorTrack, key: ConfigKey, ev: ChangeEvent) -> str:
        """A step up from a rate measured while actors of the pipeline started is the pipeline
        settling, not a new regime: starts take CPU from running work, so the configuration's
        samples before the step are dropped and the plan revisited, but the regime (other
        configurations' rates, the batch-size search, the heap's confirmation) stays. On the
        batch-size scenario seven actors started together, batch 32 measured 6.86 rows/s per
        replica meanwhile and 19.8 after; taken for a new regime, the step dropped batch 8's rate
        and the search, with one batch size left, tried batch 64 on 5 replicas (90 rows/s for
        22 s where 32 on 8 ran 162)."""
        start = ev.changed_at_s
        tr.rates = [r for r in tr.rates if r.key != key or r.time_s >= start]
        tr.snaps = deque(((t, o) for t, o in tr.snaps if t >= start or key_of(o.config) != key), maxlen=tr.snaps.maxlen)
        tr.measured_from_s[key] = max(start, tr.measured_from_s.get(key, start))
        tr.needs_fit = True
        self.assumed.pop(tr.name, None)
        self.changed = True
        return (f"settled: {tr.name} rows/s per replica {ev.mean_before:.3g} -> {ev.mean_after:.3g} from "
                f"t={start:.0f} s, up from a rate measured while actors started; its samples before dropped, "
                f"the regime kept")

    def new_regime(self, tr: OperatorTrack, ev: ChangeEvent) -> str:
        """A change: forget what came before it, remember the old model, revisit the plan."""
        start = ev.changed_at_s
        tr.batch_shape.update(batch_shape(tr, before_s=start))
        tr.rates = [r for r in tr.rates if r.time_s >= start]
        tr.snaps = deque(((t, o) for t, o in tr.snaps if t >= start), maxlen=tr.snaps.maxlen)
        tr.heap_samples = {}  # the largest heap stays (memory must never be underestimated),
        # but the full margin is back until the new regime has confirmed it
        if tr.model.is_fitted:
            tr.regimes.remember(tr.model)
            tr.model = OperatorModel(device_types=tr.model.encoder.device_types, window_samples=self.settings.history,
                                     seed=int(self.rng.integers(2**31 - 1)))
        tr.regime_start_s, tr.needs_fit, tr.matched, tr.bo_tried, tr.bo_settled = start, True, False, 0, False
        self.assumed.pop(tr.name, None)
        self.changed = True
        self.regime_changes += 1
        return f"change: {ev.reason}; dropped samples before t={start:.0f} s"

    # --- models ----------------------------------------------------------------------------------

    def fit_due(self, tr: OperatorTrack, t: float) -> bool:
        if len(tr.snaps) < 12 or tr.fitted_at_s is None:
            return len(tr.snaps) >= 12
        since = t - tr.fitted_at_s
        return since >= self.settings.refit_interval_s or (tr.needs_fit and since >= self.settings.rate_window_s)

    def fit(self, tr: OperatorTrack, t: float) -> list[str]:
        """Filter the regime's snapshots, try a remembered regime, refit the operator's model."""
        notes = []
        with warnings.catch_warnings():  # hyperparameters at their bounds are expected on small windows
            warnings.filterwarnings("ignore", module="sklearn")
            times = [s[0] for s in tr.snaps]
            filt = sustainable_samples([s[1] for s in tr.snaps], times_s=times, seed=self.seed)
            if not tr.model.is_fitted and not tr.matched and len(tr.regimes):
                model, match = tr.regimes.match(filt.kept[-8:])
                if model is not None:
                    tr.model, tr.matched = model, True
                    self.changed = True
                    notes.append(f"{tr.name}: {match.reason}; its model is reused")
            tr.fitted_at_s = t
            if len(filt.kept) >= tr.model.min_samples:
                rep = tr.model.fit(filt.kept)
                tr.needs_fit = not rep.ok
                notes.append(f"{tr.name}: {filt.reason}; {rep.reason}")
        return notes


def batch_shape(tr: OperatorTrack, *, before_s: float) -> dict[tuple[str, float], dict[int, tuple[float, float]]]:
    """Per (device, GPUs per replica) with two or more batch sizes measured before ``before_s``:
    batch size -> (seconds per batch at the median rate measured, largest heap seen, bytes)."""
    rates: dict[ConfigKey, list[float]] = {}
    for r in tr.rates:
        if r.time_s < before_s and not r.bound and r.key.batch_size and r.rows_per_s > 0:
            rates.setdefault(r.key, []).append(r.rows_per_s)
    out: dict[tuple[str, float], dict[int, tuple[float, float]]] = {}
    for key, vals in rates.items():
        out.setdefault((key.device, key.num_gpus), {})[key.batch_size] = (
            key.batch_size / float(np.median(vals)), tr.heap.get(key, 0.0))
    return {k: v for k, v in out.items() if len(v) >= 2}


def busy_of(op: OperatorSnapshot) -> float | None:
    """Replica-seconds of ``op``'s finished tasks to plan with: a task operator's slot time
    (its per-task overheads hold the slot too), an actor's busy time."""
    return op.slot_s if op.config.kind == "task" and op.slot_s is not None else op.busy_s


def _keep_busy_rate(tr: OperatorTrack, key: ConfigKey, t: float, min_busy_s: float) -> None:
    """A configuration left before any rate window measured it keeps its busy-time rate as one
    (its snapshots leave the history; the batch-size search would forget it was measured: on the
    batch-size scenario batch 8, left after its first task for a trial of 32, was lost, and the
    search later tried 64 as if 32 were the only batch seen)."""
    if not tr.measured(key):
        rate = busy_rate(tr, key, min_busy_s)
        if rate is not None:
            tr.rates.append(RateSample(t, key, rate))


def _counters(op: OperatorSnapshot, t: float) -> Counters:
    return Counters(t, op.rows_out_total, busy_of(op), op.rows_in_total, op.bytes_in_total, _progress(op))


def busy_rate(tr: OperatorTrack, key: ConfigKey, min_busy_s: float) -> float | None:
    """Output rows per busy replica-second of ``key`` since the regime began (from the first
    finished tasks on), or ``None`` with less than ``min_busy_s`` of busy time."""
    snaps = [o for t, o in tr.snaps if t >= tr.since_s(key) and key_of(o.config) == key and busy_of(o) is not None]
    if len(snaps) < 2:
        return None
    first, last = snaps[0], snaps[-1]
    busy = busy_of(last) - busy_of(first)
    if first.rows_out_total == 0 and busy_of(first) == 0:  # the regime began with the execution
        busy = busy_of(last)
    rows = last.rows_out_total - first.rows_out_total
    if busy < min_busy_s or rows <= 0:
        return None
    return rows / busy


def tasks_since(tr: OperatorTrack, key: ConfigKey) -> int:
    """Tasks of ``key`` finished since the regime began."""
    snaps = [o for t, o in tr.snaps if t >= tr.since_s(key) and key_of(o.config) == key]
    return snaps[-1].tasks_finished - snaps[0].tasks_finished if snaps else 0


def mostly_starting(samples: list[RateSample]) -> bool:
    """Whether most of ``samples`` were measured while actors of the pipeline started."""
    return 2 * sum(r.starting for r in samples) > len(samples)


def _progress(op: OperatorSnapshot) -> int:
    """Finished tasks, or rows out where tasks are not counted (the fluid simulator)."""
    return op.tasks_finished or op.rows_out_total


def _far_off(rate: float, ref: float, steady: list[float], ratio: float) -> bool:
    """Whether ``rate`` is at least ``ratio`` off ``ref`` and three times further off (in log
    terms) than any of the ``steady`` windows (rates of noisy data need a larger step)."""
    off = abs(np.log(rate / ref))
    spread = max((abs(np.log(r / ref)) for r in steady if r > 0), default=0.0)
    return off >= max(np.log(ratio), 3.0 * spread)
