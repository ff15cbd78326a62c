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

import numpy as np

from trident.core.detect.changepoint import ChangeDetector, ChangeEvent
from trident.core.model.features import device_type_of
from trident.core.model.gp import OperatorModel
from trident.core.model.regimes import RegimeStore
from trident.core.observe.filters import sustainable_samples
from trident.core.plan.placement import ANY_GPU, CPU
from trident.autoscaler.policies.trident.records import Assumed, ConfigKey, OldActorsSpan, RateSample, key_of
from trident.autoscaler.policies.trident.settings import TridentSettings
from trident.autoscaler.policies.trident import shifts
from trident.autoscaler.policies.trident.track import (
    OperatorTrack,
    busy_of,
    busy_rate,
    counters,
    keep_busy_rate,
    progress,
)
from trident.core.types import OperatorSnapshot
from trident.core.model.prior import Belief, OperatorPrior

MIN_TASKS_FOR_SELECTIVITY = 4
"""Finished tasks before rows out per row in is trusted (1 until then): the first tasks' counts
run ahead of the bytes Ray has marked as processed."""


class Observer:
    """Keeps an :class:`OperatorTrack` per operator; ``changed`` says the plan should be revisited."""

    def __init__(self, *, settings: TridentSettings, rng: np.random.Generator, seed: int,
                 priors: tuple[OperatorPrior, ...] = ()) -> None:
        self.settings = settings
        self.priors = {p.name: p for p in priors}
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
            prior = self.priors.get(op.name)
            if prior is not None:
                tr.belief = Belief(prior, weight=self.settings.history_weight)
                tr.selectivity = prior.selectivity or 1.0
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
                tr.warm_at = progress(op) + op.actors_running
            tr.actors_up = op.actors_running
            out = out or op.actors_pending > 0 or (progress(op) < tr.warm_at and not op.completed)
        return out

    # --- one snapshot of one operator ------------------------------------------------------------

    def observe(self, op: OperatorSnapshot, t: float, *, starting: bool = False) -> list[str]:
        """``starting``: an actor of the pipeline is starting at ``t`` (:meth:`starting`)."""
        tr = self.track(op)
        notes: list[str] = []
        if starting:
            tr.starting_s = t
        done = op.rows_in_done
        if done > 0 and op.rows_out_total > 0 and op.tasks_finished >= MIN_TASKS_FOR_SELECTIVITY:
            tr.selectivity = op.rows_out_total / done  # rows in flight are in but not yet out: not counted
        key = key_of(op.config)
        if key != tr.key:
            if tr.key is not None:  # our own reconfiguration: measurements restart, not a regime change
                tr.rate_detector.reset()
                tr.settling_at = progress(op)
                keep_busy_rate(tr, tr.key, t, self.settings.min_busy_s)
                warm = busy_of(op) is not None and progress(op) >= tr.warm_at  # each old actor past a first task
                tr.left = OldActorsSpan(tr.key, counters(op, t)) if warm else None
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
        notes += shifts.check_stall(self, tr, op, key, t)
        notes += self._first_tasks(tr, key)
        busy_s = busy_of(op)
        cur = counters(op, t)
        if tr.window is None or (op.actors_pending > 0 and busy_s is None):
            tr.window = cur  # without busy time, starting actors would read as a low rate
            return notes
        window_s = self.settings.rate_window_s
        if tr.shifting:  # the last window was off: confirm (or refute) the shift sooner
            window_s = min(window_s, self.settings.shift_confirm_s)
        if t - tr.window.time_s < window_s and not shifts.sudden_shift(self, tr, key, cur):
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
            shift, settling = shifts.level_shift(self, tr, key, rate, t)
            notes += shifts.check_assumption(self, tr, key, rate)
            believed = tr.belief.see(tuple(key), rate) if tr.belief is not None else ""
            if believed:
                notes.append(believed)
                self.changed = True
            if tr.bounded(key) and not [r for r in tr.rates if r.key == key and not r.bound]:
                # the first measure after a stall's bound: the planner looks again at once (a look
                # on the bound alone would otherwise hold the next one a planning interval)
                self.changed = True
            tr.rates.append(RateSample(t, key, rate, starting=tr.starting_s is not None and tr.starting_s >= w.time_s))
            ev = tr.rate_detector.update(rate, now=t, times_s=[t])
            if shift is not None:
                tr.rate_detector.reset()
                if settling:
                    notes.append(shifts.settle(self, tr, key, shift))
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
            if shift < self.settings.min_change:
                continue
            moved = (shifts.placement_moved(tr, op, key, ev, self.settings.shift_ratio)
                     if ev.signal == tr.rate_detector.signal else None)
            notes.append(shifts.replaced(self, tr, key, ev, moved) if moved else shifts.new_regime(self, tr, ev))
        return notes

    def _first_tasks(self, tr: OperatorTrack, key: ConfigKey) -> list[str]:
        """Before a first rate window, the busy time of a configuration's first finished tasks
        (``min_busy_s`` of it) is held against what earlier runs measured (once): data that behaves
        otherwise sets the history aside, a match names the regime to believe where the history
        held several, and the planner looks again seconds before a window could say so."""
        b = tr.belief
        if b is None or not b.open or key in tr.first_checked or tr.measured(key):
            return []
        rate = busy_rate(tr, key, self.settings.min_busy_s)  # rows out of finished tasks, min_busy_s of them
        if rate is None:
            return []
        tr.first_checked.add(key)
        note = b.see(tuple(key), rate)
        self.changed = self.changed or bool(note)
        return [note] if note else []

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
            tr.left = span._replace(end=counters(op, t))
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
            tr.settling_at = progress(op)
        if tr.settling_at is None:
            return True
        if progress(op) <= tr.settling_at:
            tr.measured_from_s[key] = float("inf")
            return False
        tr.settling_at = None
        tr.measured_from_s[key] = t
        return True

    @staticmethod
    def _cold_start(tr: OperatorTrack, op: OperatorSnapshot, t: float) -> None:
        """The shortest wait from actors pending to the first of them up, or to none pending
        (longer ones also waited for resources or for a rolling update). Not to the last up:
        the others also waited for a start slot (on a 2-core machine twelve actors asked for at
        once were all up after 22 s, the first after 10 s, and a dwell of three cold starts held
        every plan for 66 s)."""
        if op.actors_pending > 0 and tr.pending_since_s is None:
            tr.pending_since_s, tr.running_before = t, op.actors_running
        elif tr.pending_since_s is not None and tr.running_before is not None and (
                op.actors_pending == 0 or op.actors_running > tr.running_before):
            waited = t - tr.pending_since_s
            tr.cold_start_s = waited if tr.cold_start_s is None else min(tr.cold_start_s, waited)
            tr.running_before = None
        if op.actors_pending == 0:
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
