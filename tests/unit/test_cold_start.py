"""A pool's cold start is the wait from actors pending to the first of them up, not to the last:
the others also waited for a start slot (the dwell is three cold starts)."""
import numpy as np
import pytest

from trident.autoscaler.policies.trident import TridentSettings
from trident.autoscaler.policies.trident.tracking import Observer
from trident.core.types import OperatorConfig, OperatorSnapshot

# (time s, actors running, actors pending): twelve asked for at 1 s, the first up at 6 s, the
# last at 23 s (two cores start them in turn); then two more asked for at 40 s, both up at 44 s
STARTS = [(0, 1, 0), (1, 1, 11), (3, 1, 11), (6, 2, 10), (9, 4, 8), (15, 8, 4), (23, 12, 0), (30, 12, 0),
          (40, 12, 2), (42, 12, 2), (44, 14, 0)]


def _pool(running, pending):
    return OperatorSnapshot(name="embed", index=1, actors_running=running, actors_pending=pending,
                            config=OperatorConfig(kind="actor", replicas=running + pending, min_replicas=1,
                                                  max_replicas=16, num_gpus=0.5))


def _observed(starts):
    obs = Observer(settings=TridentSettings(), rng=np.random.default_rng(0), seed=0)
    seen = []
    for t, running, pending in starts:
        obs.observe(_pool(running, pending), float(t))
        seen.append(obs.tracks["embed"].cold_start_s)
    return obs.tracks["embed"], seen


def test_the_cold_start_is_the_wait_for_the_first_actor_up():
    tr, seen = _observed(STARTS)
    assert seen[2] is None and seen[3] == pytest.approx(5.0)  # first up 5 s after they were asked for
    assert tr.cold_start_s == pytest.approx(4.0)  # the faster wait of the second scale-up
    assert tr.pending_since_s is None


def test_a_wait_that_ends_with_none_pending_and_none_up_is_a_sample_too():
    # two pending for 30 s (no room), then none pending (the target came down): the only wait seen
    tr, seen = _observed([(0, 2, 0), (1, 2, 2), (16, 2, 2), (31, 2, 0)])
    assert seen[2] is None and tr.cold_start_s == pytest.approx(30.0)
