"""Sustainable-throughput filtering on synthetic traces with planted bad samples."""
import numpy as np
import pytest

from trident.core.errors import ConfigError
from trident.core.model.synthetic import BACKPRESSURED, CLEAN, SPIKE, STARVED, SyntheticOperator, config_grid, synthetic_trace
from trident.core.observe.filters import hampel_mask, state_rejection, sustainable_samples


def test_hampel_flags_planted_spikes_and_keeps_jitter():
    rng = np.random.default_rng(0)
    x = 100 + rng.normal(0, 2, 200)
    spikes = rng.choice(200, 20, replace=False)
    x[spikes] *= rng.choice([0.4, 2.5], 20)
    flagged = set(np.flatnonzero(hampel_mask(x)))
    assert set(spikes) <= flagged
    assert len(flagged - set(spikes)) <= 0.03 * 180  # clean samples wrongly flagged


def test_hampel_ignores_short_and_constant_series():
    assert not hampel_mask([1.0, 50.0]).any()
    assert not hampel_mask([10.0] * 30 + [10.05]).any()  # within the relative floor
    with pytest.raises(ConfigError):
        hampel_mask([1.0, 2.0, 3.0], half_window=0)


@pytest.fixture(scope="module")
def trace():
    rng = np.random.default_rng(7)
    op = SyntheticOperator.random(rng)
    configs = [config_grid()[i] for i in rng.permutation(len(config_grid()))[:24]]
    return synthetic_trace(op, configs, rng=rng, samples_per_config=6, spike_fraction=0.10,
                           starved_fraction=0.05, backpressured_fraction=0.05)


def test_planted_bad_samples_are_removed_and_clean_ones_kept(trace):
    result = sustainable_samples(trace.snapshots, times_s=trace.times_s, seed=0)
    label = dict(zip(trace.times_s, trace.labels))
    planted = {lab: sum(1 for l in trace.labels if l == lab) for lab in (CLEAN, SPIKE, STARVED, BACKPRESSURED)}
    assert planted[SPIKE] >= 8 and planted[STARVED] >= 3 and planted[BACKPRESSURED] >= 3
    kept = [label[s.time_s] for s in result.kept]
    assert kept.count(SPIKE) == kept.count(STARVED) == kept.count(BACKPRESSURED) == 0
    assert kept.count(CLEAN) >= 0.9 * planted[CLEAN]
    state = [r for r in result.rejected if r.stage == "state"]
    assert len(state) == planted[STARVED] + planted[BACKPRESSURED]
    assert {r.reason.split(" ")[0] for r in state} == {"starved", "backpressured"}
    assert result.counts()["kept"] == len(result.kept) and "rejected" in result.reason


def test_samples_carry_config_and_per_replica_values(trace):
    result = sustainable_samples(trace.snapshots[:12], times_s=trace.times_s[:12])
    s = result.kept[0]
    i = trace.times_s.index(s.time_s)
    snap = trace.snapshots[i]
    assert s.config == trace.configs[i]
    assert s.rows_per_s_per_replica == pytest.approx(snap.rows_out_per_s / snap.config.replicas)
    assert s.object_store_bytes_per_replica == pytest.approx(snap.object_store_bytes / snap.config.replicas)
    assert s.heap_bytes_per_replica == snap.heap_rss_per_replica_bytes


def test_state_rejection_reasons(trace):
    from dataclasses import replace

    snap = next(s for s, l in zip(trace.snapshots, trace.labels) if l == CLEAN)
    assert state_rejection(snap) is None
    assert state_rejection(replace(snap, input_queue_blocks=0)).startswith("starved")
    assert state_rejection(replace(snap, backpressured=True)).startswith("backpressured")
    assert state_rejection(replace(snap, actors_pending=2)).startswith("scaling")
    assert state_rejection(replace(snap, completed=True)) == "completed"


def test_times_must_match_history(trace):
    with pytest.raises(ConfigError, match="times_s"):
        sustainable_samples(trace.snapshots[:3], times_s=trace.times_s[:2])
