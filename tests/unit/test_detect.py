"""Online changepoint detection on seeded piecewise signals with known breakpoints."""
import numpy as np
import pytest

from trident.core.detect import ChangeDetector, bic_penalty, robust_sigma
from trident.core.detect.synthetic import piecewise_constant
from trident.core.errors import ConfigError


def _stream(detector, x, times=None):
    events = []
    for i, v in enumerate(x):
        e = detector.update(v, now=float(i), times_s=None if times is None else [times[i]])
        if e is not None:
            events.append(e)
    return events


@pytest.mark.parametrize("seed", [0, 1])
def test_breaks_found_within_10_samples_and_few_false_alarms(seed):
    rng = np.random.default_rng(seed)
    x, breaks = piecewise_constant(n_samples=600, n_breaks=3, rng=rng, min_segment=100)
    events = _stream(ChangeDetector(), x)
    matched = {b: [e for e in events if abs(e.index - b) <= 10] for b in breaks}
    assert all(matched.values()), (breaks, [e.index for e in events])
    false_alarms = [e for e in events if all(abs(e.index - b) > 10 for b in breaks)]
    assert len(false_alarms) <= 1
    for b, (e, *_) in matched.items():
        assert e.samples_since_change <= 15  # reported soon after the break
        assert np.sign(e.mean_after - e.mean_before) == np.sign(x[b:b + 50].mean() - x[b - 50:b].mean())


def test_stationary_signal_has_at_most_one_false_alarm_per_thousand():
    rng = np.random.default_rng(5)
    x, _ = piecewise_constant(n_samples=2000, n_breaks=0, rng=rng)
    assert len(_stream(ChangeDetector(), x)) <= 2


def test_change_drops_stale_samples_and_reports_time():
    rng = np.random.default_rng(2)
    x = np.r_[rng.normal(100, 3, 80), rng.normal(60, 3, 40)]
    det = ChangeDetector(signal="input_bytes_per_row")
    events = _stream(det, x, times=[10.0 + 0.5 * i for i in range(len(x))])
    assert len(events) == 1
    e = events[0]
    assert abs(e.index - 80) <= 2 and e.changed_at_s == pytest.approx(10.0 + 0.5 * e.index)
    assert e.signal == "input_bytes_per_row" and "changed" in e.reason
    assert len(det.values) == len(x) - e.index and max(det.values) < 80  # only the new regime is held
    det.reset()
    assert det.values == () and det.n_seen == len(x)


def test_window_is_bounded_and_penalty_is_scale_free():
    det = ChangeDetector(window=50, min_samples=20)
    rng = np.random.default_rng(0)
    for v in rng.normal(5, 1, 120):
        det.update(v, now=0.0)
    assert len(det.values) <= 50
    x = rng.normal(0, 2, 500)
    assert robust_sigma(x) == pytest.approx(2, rel=0.15)
    assert bic_penalty(1000 * x, penalty_scale=4) == pytest.approx(1e6 * bic_penalty(x, penalty_scale=4))
    assert det.update(float("nan"), now=1.0) is None


def test_bad_configuration_raises():
    with pytest.raises(ConfigError, match="min_size"):
        ChangeDetector(min_size=1)
    with pytest.raises(ConfigError, match="window"):
        ChangeDetector(window=10, min_samples=20)
    with pytest.raises(ConfigError, match="times_s"):
        ChangeDetector().update([1.0, 2.0], now=0.0, times_s=[0.0])
