"""Per-operator GP models against synthetic operators with known curves."""
import numpy as np
import pytest

from trident.core.errors import ConfigError
from trident.core.model import ConfigFeatures, FeatureEncoder, OperatorModel, RegimeStore
from trident.core.model.synthetic import SyntheticOperator, config_grid, synthetic_trace
from trident.core.observe.filters import ThroughputSample, sustainable_samples


def _split(rng, n_train=40, n_test=30):
    grid = config_grid()
    perm = rng.permutation(len(grid))
    return [grid[i] for i in perm[:n_train]], [grid[i] for i in perm[n_train:n_train + n_test]]


def _clean_samples(op, configs, rng, **kw):
    tr = synthetic_trace(op, configs, rng=rng, samples_per_config=4, **kw)
    return sustainable_samples(tr.snapshots, times_s=tr.times_s).kept


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(3)
    op = SyntheticOperator.random(rng)
    train, test = _split(rng)
    samples = _clean_samples(op, train, rng, spike_fraction=0.10)
    model = OperatorModel(device_types=("cpu", "gpu"), window_samples=400, n_restarts=0, seed=0)
    report = model.fit(samples)
    return op, model, report, samples, test


def test_throughput_mape_on_held_out_configs_with_spike_noise(fitted):
    op, model, report, _, test = fitted
    assert report.ok and model.is_fitted
    pred = model.predict_throughput(test)
    truth = np.array([op.rows_per_s_per_replica(c) for c in test])
    mape = float(np.mean(np.abs(pred.mean - truth) / truth))
    assert mape <= 0.05, mape
    assert np.all(pred.std > 0)


def test_memory_predictions_per_replica(fitted):
    op, model, _, _, test = fitted
    mem = model.predict_memory(test)
    heap = np.array([op.heap_bytes_per_replica(c) for c in test])
    store = np.array([op.object_store_bytes_per_replica(c) for c in test])
    assert np.mean(np.abs(mem.heap.mean - heap) / heap) <= 0.05
    assert np.mean(np.abs(mem.object_store.mean - store) / store) <= 0.05
    assert np.all(mem.heap.upper(2.0) >= mem.heap.mean)


def test_failed_fit_keeps_last_good_model(fitted):
    _, model, _, samples, test = fitted
    before = model.predict_throughput(test).mean
    bad = [ThroughputSample(s.time_s, s.operator, s.config, -1.0, None, None) for s in samples[:10]]
    report = model.fit(bad)
    assert not report.ok and "kept last model" in report.reason
    assert np.array_equal(model.predict_throughput(test).mean, before)
    assert not model.fit(samples[:2]).ok  # too few samples


def test_unfitted_model_and_unknown_device_raise():
    model = OperatorModel(device_types=("cpu",))
    assert not model.is_fitted
    with pytest.raises(ConfigError):
        model.predict_throughput([ConfigFeatures(8, "cpu", 1, 100.0)])
    with pytest.raises(ConfigError, match="device_type"):
        FeatureEncoder(device_types=("cpu",)).encode([ConfigFeatures(8, "tpu", 1, 100.0)])
    with pytest.raises(ConfigError):
        OperatorModel(device_types=("cpu",), min_samples=1)


def test_same_seed_same_model(fitted):
    _, _, _, samples, test = fitted
    a = OperatorModel(device_types=("cpu", "gpu"), n_restarts=1, seed=5)
    b = OperatorModel(device_types=("cpu", "gpu"), n_restarts=1, seed=5)
    a.fit(samples[:60])
    b.fit(samples[:60])
    assert np.array_equal(a.predict_throughput(test).mean, b.predict_throughput(test).mean)


def test_window_keeps_latest_samples(fitted):
    _, _, _, samples, _ = fitted
    model = OperatorModel(device_types=("cpu", "gpu"), window_samples=30, n_restarts=0)
    assert model.fit(samples).n_samples == 30


def test_regime_store_reuses_a_recurring_regime(fitted):
    op_a, model_a, _, _, test = fitted
    rng = np.random.default_rng(11)
    op_b = SyntheticOperator.random(rng)
    train_b, _ = _split(rng)
    model_b = OperatorModel(device_types=("cpu", "gpu"), n_restarts=0, seed=1)
    assert model_b.fit(_clean_samples(op_b, train_b, rng, spike_fraction=0.0)).ok
    store = RegimeStore(match_mape=0.1)
    id_a, id_b = store.remember(model_a), store.remember(model_b)
    fresh_a = _clean_samples(op_a, test[:3], rng, spike_fraction=0.0)
    reused, match = store.match(fresh_a)
    assert match.regime_id == id_a and reused is not None and "recurs" in match.reason
    fresh_b = _clean_samples(op_b, test[:3], rng, spike_fraction=0.0)
    assert store.match(fresh_b)[1].regime_id == id_b
    op_c = SyntheticOperator.random(np.random.default_rng(99))
    reused, match = store.match(_clean_samples(op_c, test[:3], rng, spike_fraction=0.0))
    assert reused is None and match.regime_id is None


def test_a_regime_remembered_before_a_move_to_another_device_is_not_matched_there(fitted):
    """A pool pinned to accelerator type B after a regime was remembered on 'gpu': matching its
    samples on B used to raise in the old model's encoder (every later step of the two-types
    scenario failed with "device_type='B' is not valid")."""
    from dataclasses import replace

    _, model, _, samples, _ = fitted
    store = RegimeStore(match_mape=0.1)
    store.remember(model)
    on_b = [replace(s, config=replace(s.config, device_type="B")) for s in samples[:5]]
    reused, match = store.match(on_b)
    assert reused is None and match.regime_id is None and "devices" in match.reason
