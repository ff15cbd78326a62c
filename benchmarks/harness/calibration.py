"""Cost curves of the real model stages (seconds and memory per batch vs batch size and
item size), and stand-in stages that follow them on logical GPUs.

A curve is linear in the work of a batch: ``time_s = fixed_s + per_unit_s * units`` and
``memory_bytes = base_bytes + per_unit_bytes * units``, where ``units`` is the batch's
summed item size (characters for text, megapixels for images). ``measure`` fits the
curves on this machine from the real models; ``calibration.json`` holds the last fit.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from trident.core.errors import ConfigError

CALIBRATION_FILE = Path(__file__).with_name("calibration.json")


@dataclass(frozen=True)
class CostCurve:
    """Linear cost of one batch in its work ``units`` (unit named by ``unit``)."""

    stage: str
    unit: str
    fixed_s: float
    per_unit_s: float
    base_bytes: int
    per_unit_bytes: float
    measured_on: str = ""
    points: tuple[tuple[float, float, int], ...] = ()
    """The measurements (units, seconds, peak bytes) the fit came from."""

    def __post_init__(self) -> None:
        if min(self.fixed_s, self.per_unit_s) < 0:
            raise ConfigError(f"{self.stage}.fixed_s/per_unit_s", (self.fixed_s, self.per_unit_s), "numbers >= 0")
        if self.base_bytes < 0 or self.per_unit_bytes < 0:
            raise ConfigError(f"{self.stage}.base_bytes/per_unit_bytes", (self.base_bytes, self.per_unit_bytes),
                              "numbers >= 0")

    def time_s(self, units: float) -> float:
        return self.fixed_s + self.per_unit_s * max(0.0, units)

    def memory_bytes(self, units: float) -> int:
        return int(self.base_bytes + self.per_unit_bytes * max(0.0, units))


def fit_curve(stage: str, unit: str, units: list[float], seconds: list[float], peak_bytes: list[int], *,
              measured_on: str = "") -> CostCurve:
    """Least-squares lines through (units, seconds) and (units, peak bytes), clipped at zero."""
    if len(units) < 2 or not (len(units) == len(seconds) == len(peak_bytes)):
        raise ConfigError("units/seconds/peak_bytes", (len(units), len(seconds), len(peak_bytes)),
                          "equal lengths, at least 2 points")
    u = np.asarray(units, dtype=float)
    t_slope, t_icept = np.polyfit(u, np.asarray(seconds, dtype=float), 1)
    m_slope, m_icept = np.polyfit(u, np.asarray(peak_bytes, dtype=float), 1)
    return CostCurve(stage=stage, unit=unit, fixed_s=max(0.0, float(t_icept)), per_unit_s=max(0.0, float(t_slope)),
                     base_bytes=int(max(0.0, m_icept)), per_unit_bytes=max(0.0, float(m_slope)),
                     measured_on=measured_on,
                     points=tuple((float(a), float(b), int(c)) for a, b, c in zip(units, seconds, peak_bytes)))


def load_curves(path: str | Path = CALIBRATION_FILE) -> dict[str, CostCurve]:
    """Stage name -> curve, from a calibration JSON."""
    data = json.loads(Path(path).read_text())
    return {name: CostCurve(**{**c, "points": tuple(tuple(p) for p in c.get("points", ()))})
            for name, c in data["curves"].items()}


def save_curves(curves: dict[str, CostCurve], path: str | Path = CALIBRATION_FILE) -> None:
    Path(path).write_text(json.dumps({"curves": {k: asdict(v) for k, v in curves.items()}}, indent=1) + "\n")


def batch_units(batch: dict[str, np.ndarray], unit: str) -> float:
    """The work in a batch: summed ``chars`` (text) or ``megapixels`` (images) of its rows."""
    if unit not in batch:
        raise ConfigError("unit", unit, f"a column of the batch: {sorted(batch)}")
    return float(np.asarray(batch[unit], dtype=float).sum())


class CalibratedStage:
    """A stand-in model stage: for each batch it holds the curve's memory and sleeps the
    curve's time, then passes the batch through with a ``<stage>_s`` column added.

    Subclass attributes (set by :func:`stand_in`): ``curve``; ``memory_scale``, the fraction
    of the curve's bytes actually allocated; ``time_scale``, the fraction of the curve's
    time slept (an accelerator faster than the machine the curve was measured on);
    ``pid_dir``, a folder where each replica registers its process id (for a memory watchdog).
    """

    curve: CostCurve
    memory_scale: float = 1.0
    time_scale: float = 1.0
    pid_dir: str | None = None

    def __init__(self) -> None:
        import os

        self._resident = np.ones(int(self.curve.base_bytes * self.memory_scale), dtype=np.uint8)
        if self.pid_dir:
            Path(self.pid_dir, str(os.getpid())).touch()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return run_calibrated(self.curve, batch, memory_scale=self.memory_scale, time_scale=self.time_scale)


def run_calibrated(curve: CostCurve, batch: dict[str, np.ndarray], *, memory_scale: float = 1.0,
                   time_scale: float = 1.0) -> dict[str, np.ndarray]:
    """Hold the batch's extra memory and sleep its time (both from ``curve``, scaled);
    return the batch with a ``<stage>_s`` column (scaled seconds per row). A batch with no
    work (no units: e.g. no image to OCR) passes through at no cost."""
    import time

    units = batch_units(batch, curve.unit)
    n = len(next(iter(batch.values())))
    if units <= 0:
        return {**batch, f"{curve.stage}_s": np.zeros(n)}
    extra = max(0, int((curve.memory_bytes(units) - curve.base_bytes) * memory_scale))
    work = np.ones(extra, dtype=np.uint8) if extra else None  # touched, so it is resident
    seconds = curve.time_s(units) * time_scale
    time.sleep(seconds)
    del work
    return {**batch, f"{curve.stage}_s": np.full(n, seconds / max(1, n))}


def stand_in(curve: CostCurve, *, memory_scale: float = 1.0, time_scale: float = 1.0,
             pid_dir: str | None = None) -> type[CalibratedStage]:
    """A CalibratedStage subclass (an actor class for ``map_batches``) following ``curve``."""
    if memory_scale < 0 or time_scale < 0:
        raise ConfigError("memory_scale/time_scale", (memory_scale, time_scale), "numbers >= 0")
    return type(f"Calibrated_{curve.stage}", (CalibratedStage,),
                {"curve": curve, "memory_scale": memory_scale, "time_scale": time_scale, "pid_dir": pid_dir})
