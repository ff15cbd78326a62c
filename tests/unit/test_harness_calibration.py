"""Calibration curves: fitting, the shipped measurements, and the stand-in stage's cost."""
import time

import numpy as np
import pytest

from harness.calibration import CostCurve, batch_units, fit_curve, load_curves, stand_in
from trident.core.errors import ConfigError


def test_fit_recovers_a_known_line():
    units = [1.0, 2.0, 4.0, 8.0]
    curve = fit_curve("ocr", "megapixels", units, [0.5 + 0.25 * u for u in units],
                      [100_000_000 + 20_000_000 * int(u) for u in units])
    assert curve.fixed_s == pytest.approx(0.5) and curve.per_unit_s == pytest.approx(0.25)
    assert curve.memory_bytes(3.0) == pytest.approx(160_000_000, rel=1e-6)
    assert curve.time_s(0) == pytest.approx(0.5)


def test_fit_needs_two_points():
    with pytest.raises(ConfigError, match="units"):
        fit_curve("x", "chars", [1.0], [1.0], [1])


def test_negative_cost_rejected():
    with pytest.raises(ConfigError, match="fixed_s"):
        CostCurve(stage="x", unit="chars", fixed_s=-1.0, per_unit_s=0.0, base_bytes=0, per_unit_bytes=0.0)


def test_shipped_curves_are_measurements_that_grow_with_work():
    curves = load_curves()
    assert set(curves) == {"ocr", "embed", "parse", "decode"}
    for c in curves.values():
        assert len(c.points) >= 2 and c.measured_on
        units = [p[0] for p in c.points]
        assert c.time_s(max(units)) > c.time_s(min(units))
        assert c.base_bytes > 10 * 2**20  # a real model is resident


def test_stand_in_sleeps_the_curve_time_and_passes_rows(monkeypatch):
    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)
    curve = CostCurve(stage="embed", unit="chars", fixed_s=0.1, per_unit_s=0.001, base_bytes=1000,
                      per_unit_bytes=10.0)
    stage = stand_in(curve)()
    batch = {"chars": np.array([100, 300]), "path": np.array(["a", "b"], dtype=object)}
    out = stage(batch)
    assert slept == [pytest.approx(0.5)]
    assert out["path"].tolist() == ["a", "b"] and out["embed_s"].tolist() == [pytest.approx(0.25)] * 2
    assert batch_units(batch, "chars") == 400.0
    with pytest.raises(ConfigError, match="unit"):
        batch_units(batch, "megapixels")
