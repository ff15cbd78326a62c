"""What earlier runs taught of one operator (:class:`OperatorPrior`), and how much a run still
believes it (:class:`Belief`). Pure: no Ray, no clock, no store.

A configuration is ``(batch_size, device, num_gpus)``: the device is ``"cpu"``, ``"gpu"``
(any GPU) or an accelerator type, as the policy keys its measurements.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

Config = tuple  # (batch_size | None, device, num_gpus)

AGREE_RATIO = 1.5
"""A window within this factor of the remembered rate agrees with it (either way)."""
DROP_WEIGHT = 1.0
"""Below this weight (pseudo-windows) the history is set aside for the operator: from a weight of
3, by one window 1.8x or more off the remembered rate, or two 1.5x off."""


@dataclass(frozen=True)
class RegimePrior:
    """One regime of an operator's data as a run saw it: rows out per busy replica-second per
    configuration (the windows measured, oldest first), per accelerator type, heap bytes per
    replica per configuration, and input bytes per row."""

    rates: tuple[tuple[Config, tuple[float, ...]], ...] = ()
    typed: tuple[tuple[str, float], ...] = ()
    heap: tuple[tuple[Config, float], ...] = ()
    bytes_per_row: float | None = None

    def rate(self, config: Config) -> float | None:
        """The median window of ``config`` (``None``: never measured)."""
        for c, windows in self.rates:
            if tuple(c) == tuple(config) and windows:
                return _median(windows)
        return None

    def heap_of(self, config: Config) -> float | None:
        return next((h for c, h in self.heap if tuple(c) == tuple(config)), None)


@dataclass(frozen=True)
class OperatorPrior:
    """An operator's history under one fingerprint: the regimes seen (the latest run's first
    regime first: a run usually starts on data like the last run's start), its cold start
    (seconds), rows out per row in, and the run it came from."""

    name: str
    run: str
    regimes: tuple[RegimePrior, ...]
    cold_start_s: float | None = None
    selectivity: float | None = None
    runs: int = 1
    """Runs of this fingerprint the store holds."""


def steady(prior: OperatorPrior) -> bool:
    """Whether ``prior`` says what a run will start at: the latest run's first regime, whose
    windows (the first left out where there are three or more: it is often a start's) stay within
    ``AGREE_RATIO`` of their median, and every other regime kept (a later one of that run, or an
    earlier run's) within ``AGREE_RATIO`` of it. An operator whose data varied (a step inside a
    run, windows spread wider, runs that disagree) is believed only once a measure of this run
    matches one of its regimes."""
    first = prior.regimes[0] if prior.regimes else None
    if first is None:
        return False
    for _, windows in first.rates:
        w = tuple(windows[1:] if len(windows) >= 3 else windows)
        m = _median(w)
        if m <= 0 or not all(_agrees(x, m) for x in w):
            return False
    return all(_agrees(b, a) for r in prior.regimes[1:] for c, _ in r.rates
               if (a := first.rate(c)) is not None and (b := r.rate(c)) is not None)


@dataclass
class Belief:
    """How far a run still believes an operator's history: a weight in pseudo-windows that falls
    with every window measured more than ``AGREE_RATIO`` off the remembered rate, by the square of
    how far off it is (at least halved: one window 1.8x off sets a weight of 3 aside, one 1.6x off
    leaves it at 1.2), and the regime that matched last (``None`` after the data changed until a
    window matches one)."""

    prior: OperatorPrior
    weight: float = 3.0
    active: int | None = None
    contrary: int = 0

    def __post_init__(self) -> None:
        self.start_weight = self.weight
        if self.active is None and steady(self.prior):
            self.active = 0

    @property
    def open(self) -> bool:
        """Whether the history may still be believed (not set aside)."""
        return self.weight >= DROP_WEIGHT

    @property
    def live(self) -> bool:
        """Whether a regime is believed now."""
        return self.active is not None and self.open

    @property
    def regime(self) -> RegimePrior | None:
        return self.prior.regimes[self.active] if self.live else None

    def rate(self, config: Config) -> float | None:
        """The remembered rate of ``config`` in the regime believed (``None``: none believed)."""
        r = self.regime
        return None if r is None else r.rate(config)

    def blend(self, config: Config, measured: float, windows: int) -> float:
        """``measured`` (from ``windows`` windows of this run) weighed with the remembered rate:
        a geometric mean, the history counting ``weight`` windows."""
        p = self.rate(config)
        if p is None or p <= 0 or measured <= 0:
            return measured
        w, n = self.weight, max(windows, 1)
        return math.exp((w * math.log(p) + n * math.log(measured)) / (w + n))

    def see(self, config: Config, rate: float) -> str:
        """A window of this run measured ``rate`` under ``config``: the belief follows the evidence.
        Returns a note when it changed what it believes ('' otherwise)."""
        if rate <= 0:
            return ""
        p = self.rate(config)
        if p is not None and _agrees(rate, p):
            return ""
        match = self._match(config, rate) if self.open else None
        if match is not None and match != self.active:
            self.active, self.weight = match, max(self.weight, self.start_weight)
            return (f"{self.prior.name}: {rate:.3g} rows/s per replica matches regime {match + 1} of "
                    f"{len(self.prior.regimes)} remembered from run "
                    f"{self.prior.run} ({self.prior.regimes[match].rate(config):.3g}): its history is used")
        if p is None:
            return ""
        self.contrary += 1
        off = max(rate / p, p / rate)
        was_live, self.weight = self.live, self.weight * min(0.5, off ** -2)
        if was_live and not self.live:
            return (f"{self.prior.name}: history of run {self.prior.run} set aside ({rate:.3g} rows/s per replica "
                    f"measured, {p:.3g} remembered, {self.contrary} windows off): learning from this run")
        return ""

    def data_changed(self) -> None:
        """The run saw its data change: no regime is believed until a window matches one."""
        self.active = None

    def _match(self, config: Config, rate: float) -> int | None:
        best = None
        for i, r in enumerate(self.prior.regimes):
            p = r.rate(config)
            if p is not None and _agrees(rate, p) and (best is None or abs(math.log(rate / p)) < best[0]):
                best = (abs(math.log(rate / p)), i)
        return None if best is None else best[1]


def _agrees(rate: float, remembered: float) -> bool:
    return remembered > 0 and 1 / AGREE_RATIO <= rate / remembered <= AGREE_RATIO


def _median(values: tuple[float, ...]) -> float:
    s = sorted(values)
    m = len(s) // 2
    return s[m] if len(s) % 2 else 0.5 * (s[m - 1] + s[m])
