"""Regime ends in the ``trident`` policy's observation: a stall's bound, a sudden shift within a
rate window, two windows far off the configuration's rate, a measure far off the last plan's
assumption, and a step up while actors started (the pipeline settling, not a new regime). Each a
function of what it reads and updates of the observer (:class:`Observed`: the
:class:`~trident.autoscaler.policies.trident.tracking.Observer`)."""
from __future__ import annotations

from collections import deque
from typing import Protocol

import numpy as np

from trident.core.detect.changepoint import ChangeEvent
from trident.core.model.gp import OperatorModel
from trident.autoscaler.policies.trident.estimates import MIN_TYPED_TASKS
from trident.autoscaler.policies.trident.records import Assumed, ConfigKey, Counters, RateSample, Stall, key_of
from trident.autoscaler.policies.trident.settings import TridentSettings
from trident.autoscaler.policies.trident.track import (OperatorTrack, batch_shape, busy_rate, counters, far_off,
                                                      mostly_starting, tasks_since, type_deltas)
from trident.core.types import OperatorSnapshot


class Observed(Protocol):
    """What the checks read and update of the observer."""

    settings: TridentSettings
    rng: np.random.Generator
    assumed: dict[str, Assumed]
    """What the last plan assumed of each operator's rate."""
    changed: bool
    """Whether the plan should be revisited."""
    regime_changes: int
    """Regime changes so far."""


def check_stall(obs: Observed, tr: OperatorTrack, op: OperatorSnapshot, key: ConfigKey, t: float) -> list[str]:
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
    if st.tasks_finished == 0 or stalled_s < obs.settings.shift_confirm_s:
        return []
    bound = op.rows_out_total / st.tasks_finished / stalled_s
    if st.bound_time_s is not None:  # already a new regime: tighten its first sample
        at = next((i for i, r in enumerate(tr.rates) if r.time_s == st.bound_time_s and r.key == key), None)
        if at is not None:
            tr.rates[at] = RateSample(t, key, bound, bound=True)
            st.bound_time_s = t
        return []
    measured = tr.measured(key)
    planned = obs.assumed.get(tr.name)
    if len(measured) >= obs.settings.min_rate_windows:
        ref = float(np.median(measured))
    elif planned is not None and planned.key == key:
        ref = planned.rows_per_s
    else:  # cheap rows on a mostly idle pool: no window measured it, its busy time did
        ref = busy_rate(tr, key, obs.settings.min_busy_s)
        if ref is None and tasks_since(tr, key) >= obs.settings.sudden_tasks:
            # rows so cheap that their tasks' busy time sums under ``min_busy_s``: they still
            # show what the stall is slow against (PDF benchmark: OCR's 24 text-page tasks
            # took 0.46 busy-seconds; its scanned pages then stalled it 12 s, unnoticed)
            ref = busy_rate(tr, key, 1e-3)
        if ref is None:
            return []
    long = stalled_s >= obs.settings.rate_window_s
    if bound * (obs.settings.shift_ratio if long else obs.settings.shift_ratio_alone) >= ref:
        return []
    ev = ChangeEvent(signal=f"{tr.name} rows/s per replica", index=len(measured), changed_at_s=st.since_s,
                     detected_at_s=t, mean_before=ref, mean_after=bound, samples_since_change=1,
                     reason=f"{tr.name}: no task finished for {stalled_s:.0f} s, at most {bound:.3g} rows/s "
                            f"per replica (was {ref:.3g})")
    tr.rate_detector.reset()
    tr.shifting = []
    note = new_regime(obs, tr, ev)
    # a window that closed since the stall began, or is open across its start, measures rows that
    # came out before it (no task has finished since): on PDF one such window (~72 rows/s per
    # replica) stood beside the bound (0.8) and the plan took their median for OCR's rate on
    # scanned pages (0.08)
    tr.rates, tr.window = [RateSample(t, key, bound, bound=True)], None
    st.bound_time_s = t
    return [note]


def sudden_shift(obs: Observed, tr: OperatorTrack, key: ConfigKey, cur: Counters) -> bool:
    """Whether the open rate window's last ``shift_confirm_s`` seconds (or more), with
    ``sudden_tasks`` finished tasks, already measure a shift alone (see :func:`level_shift`)
    off the steady windows or, before there are ``min_rate_windows`` of them, off what the
    last plan assumed (a short run's step then closes the window 2 s after it, and a short
    window confirms it): then the window is cut to them and closes at once. Busy time counts
    finished tasks only, so a part of a window is as exact as a whole one for the tasks it
    holds, and its end shows a step that the whole window would blur (first-try benchmark:
    Detect's rows cost 4x more from 33.7 s; the window then open closed at 37.9 s 2.9x off,
    and a second confirmed it at 40.0 s)."""
    s, w = obs.settings, tr.window
    if tr.shifting or cur.busy_s is None or cur.time_s - w.time_s < s.shift_confirm_s:
        return False
    steady = tr.measured(key)
    planned = obs.assumed.get(tr.name)
    if len(steady) >= s.min_rate_windows:
        ref = float(np.median(steady))
    elif planned is not None and planned.key == key:  # too few windows yet: what the plan assumed
        ref, steady = planned.rows_per_s, []
    else:
        return False
    start = next((counters(o, t) for t, o in reversed(tr.snaps)
                  if w.time_s <= t <= cur.time_s - s.shift_confirm_s), None)
    if (start is None or start.busy_s is None or cur.tasks - start.tasks < s.sudden_tasks
            or cur.busy_s <= start.busy_s or cur.rows_out <= start.rows_out):
        return False
    rate = (cur.rows_out - start.rows_out) / (cur.busy_s - start.busy_s)
    if not far_off(rate, ref, steady, s.shift_ratio_alone):
        return False
    tr.window = start
    return True


def check_assumption(obs: Observed, tr: OperatorTrack, key: ConfigKey, rate: float) -> list[str]:
    """A measured rate far off what the last plan assumed for this configuration ends the
    dwell: that plan was made on a wrong premise."""
    planned = obs.assumed.get(tr.name)
    if planned is None or planned.key != key or planned.flagged:
        return []
    ratio = obs.settings.shift_ratio
    if planned.rows_per_s / ratio <= rate <= planned.rows_per_s * ratio:
        return []
    obs.assumed[tr.name] = planned._replace(flagged=True)
    obs.changed = True
    return [f"{tr.name}: measured {rate:.3g} rows/s per replica, the last plan assumed "
            f"{planned.rows_per_s:.3g}; revisiting the plan"]


def level_shift(obs: Observed, tr: OperatorTrack, key: ConfigKey, rate: float,
                 t: float) -> tuple[ChangeEvent | None, bool]:
    """``shift_windows`` windows in a row whose rate is off the configuration's median (or, before
    it has ``min_rate_windows``, off what the plan assumed) by more than ``shift_ratio`` (either
    way) end the regime at the first of them; a window after an off one lasts ``shift_confirm_s``.
    One window ``shift_ratio_alone`` off steady windows, and far beyond their spread, is enough
    (on the long-shift scenario the rates move 4x: the two-window rule acted 11.5 and 12.8 s
    after the data changed). Also says whether the shift is the pipeline settling rather than
    a new regime: a step up from a rate measured while actors started (see :func:`settle`)."""
    s = obs.settings
    before = [r for r in tr.rates if r.key == key]
    steady = [r for r in before if not tr.shifting or r.time_s < tr.shifting[0][0]][-8:]
    planned = obs.assumed.get(tr.name)
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
             and far_off(rate, ref, [r.rows_per_s for r in steady], s.shift_ratio_alone))
    if len(tr.shifting) < s.shift_windows and not alone:
        return None, False
    start, after = tr.shifting[0][0], float(np.median([r for _, r in tr.shifting]))
    windows = len(tr.shifting)
    tr.shifting = []
    return ChangeEvent(signal=f"{tr.name} rows/s per replica", index=len(before), changed_at_s=start,
                       detected_at_s=t, mean_before=ref, mean_after=after, samples_since_change=windows,
                       reason=f"{tr.name} rows/s per replica {ref:.3g} -> {after:.3g} over "
                              f"{windows} window{'s' if windows > 1 else ''} from t={start:.0f} s"), up and at_start


def settle(obs: Observed, tr: OperatorTrack, key: ConfigKey, ev: ChangeEvent) -> str:
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
    obs.assumed.pop(tr.name, None)
    obs.changed = True
    return (f"settled: {tr.name} rows/s per replica {ev.mean_before:.3g} -> {ev.mean_after:.3g} from "
            f"t={start:.0f} s, up from a rate measured while actors started; its samples before dropped, "
            f"the regime kept")


MIX_MOVED = 0.25
"""Busy time that moved between accelerator types (a fraction of it) beyond which an unpinned
pool's pooled rate measures another placement."""


def placement_moved(tr: OperatorTrack, op: OperatorSnapshot, key: ConfigKey, ev: ChangeEvent,
                    shift_ratio: float) -> dict[str, float] | None:
    """Whether a change of an unpinned GPU pool's rate (``ev``) is its actors' placement, not its
    data: on every accelerator type measured before the change and after it (``MIN_TYPED_TASKS``
    tasks each) its tasks per busy second moved less than ``shift_ratio``, or, with no such type,
    its busy time moved more than :data:`MIX_MOVED` between types. Returns the busy share per
    type since the change, or ``None``. Ray places an unpinned pool's new actors where GPUs are
    free, and a type several times slower may take most of them: the pooled rate then falls
    although no row costs more."""
    if op.config.accelerator_type is not None or op.config.num_gpus <= 0 or not op.by_type:
        return None
    # since the detector last started afresh: what its mean before the change covers
    since = max(tr.since_s(key), tr.placed_from_s)
    before = [o for t, o in tr.snaps if since <= t <= ev.changed_at_s and key_of(o.config) == key]
    if len(before) < 2:
        return None
    one, two = _per_type(before[0], before[-1]), _per_type(before[-1], op)
    if len(set(one) | set(two)) < 2:
        return None  # one type: the pooled rate is its rate
    both = [t for t in set(one) & set(two) if min(one[t][1], two[t][1]) >= MIN_TYPED_TASKS]
    if any(not one[t][0] / shift_ratio <= two[t][0] <= one[t][0] * shift_ratio for t in both):
        return None  # a type it ran on before and after got slower or faster: the data
    after = {t: b / sum(v[2] for v in two.values()) for t, (_, _, b) in two.items()}
    if both:
        return after  # as fast as before on each type measured on both sides: the pooled rate moved with the mix
    was = {t: b / sum(v[2] for v in one.values()) for t, (_, _, b) in one.items()}
    moved = sum(abs(after.get(t, 0.0) - was.get(t, 0.0)) for t in set(after) | set(was)) / 2
    return after if was and moved > MIX_MOVED else None


def _per_type(a: OperatorSnapshot, b: OperatorSnapshot) -> dict[str, tuple[float, int, float]]:
    """Per accelerator type busy from ``a`` to ``b``: (tasks per busy second, tasks, busy seconds)."""
    return {t: (n / busy, n, busy) for t, (n, busy) in type_deltas(a, b).items() if busy > 0}


def replaced(obs: Observed, tr: OperatorTrack, key: ConfigKey, ev: ChangeEvent, shares: dict[str, float]) -> str:
    """The pool's actors moved between accelerator types: its rates from before the change
    measured another placement and leave (as after a reconfiguration of its own); no regime
    ends, and the plan is revisited. Taken for a regime change, such a move (seed 175 of the
    generated scenarios: 7 of 9 actors on a type 4x slower) dropped the check of the plan's
    prediction and held the pool at its size for "it got slower"."""
    start = ev.changed_at_s
    tr.rate_detector.reset()
    tr.placed_from_s = start
    tr.rates = [r for r in tr.rates if r.key != key or r.time_s >= start]
    obs.assumed.pop(tr.name, None)
    obs.changed = True
    where = ", ".join(f"{t} {v:.0%}" for t, v in sorted(shares.items()))
    return (f"{tr.name}: rows/s per replica {ev.mean_before:.3g} -> {ev.mean_after:.3g} from t={start:.0f} s "
            f"as its busy time moved between accelerator types (now {where}): its rate measured anew, the regime kept")


def new_regime(obs: Observed, tr: OperatorTrack, ev: ChangeEvent) -> str:
    """A change: forget what came before it, remember the old model, revisit the plan."""
    start = ev.changed_at_s
    tr.batch_shape.update(batch_shape(tr, before_s=start))
    tr.rates = [r for r in tr.rates if r.time_s >= start]
    tr.snaps = deque(((t, o) for t, o in tr.snaps if t >= start), maxlen=tr.snaps.maxlen)
    tr.heap_samples = {}  # the largest heap stays (memory must never be underestimated),
    # but the full margin is back until the new regime has confirmed it
    if tr.model.is_fitted:
        tr.regimes.remember(tr.model)
        tr.model = OperatorModel(device_types=tr.model.encoder.device_types, window_samples=obs.settings.history,
                                 seed=int(obs.rng.integers(2**31 - 1)))
    tr.regime_start_s, tr.needs_fit, tr.matched, tr.bo_tried, tr.bo_settled = start, True, False, 0, False
    tr.shift = ev.mean_after / ev.mean_before if ev.mean_before > 0 else None
    obs.assumed.pop(tr.name, None)
    if tr.belief is not None:
        tr.belief.data_changed()
    obs.changed = True
    obs.regime_changes += 1
    return f"change: {ev.reason}; dropped samples before t={start:.0f} s"
