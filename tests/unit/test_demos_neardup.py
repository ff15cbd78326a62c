"""Near-duplicate filter (cosine on unit-norm embeddings, greedy in order)."""
import numpy as np
import pytest

from trident.demos.neardup import near_duplicates, normalise_rows
from trident.core.errors import ConfigError


def test_near_copies_point_at_the_first_kept_item():
    rng = np.random.default_rng(0)
    base = rng.normal(size=(3, 16))
    emb = np.vstack([base, base[1] + 0.01 * rng.normal(size=16), base[0] * 3.0])
    assert near_duplicates(emb, threshold=0.95) == [None, None, None, 1, 0]


def test_distinct_and_zero_rows_are_kept():
    emb = np.vstack([np.eye(4), np.zeros((2, 4))])
    assert near_duplicates(emb, threshold=0.9) == [None] * 6


def test_threshold_decides():
    a = np.array([1.0, 0.0])
    b = np.array([np.cos(0.3), np.sin(0.3)])  # cosine 0.955
    assert near_duplicates(np.vstack([a, b]), threshold=0.95) == [None, 0]
    assert near_duplicates(np.vstack([a, b]), threshold=0.96) == [None, None]


def test_normalise_rows_unit_norm_and_zero_safe():
    out = normalise_rows(np.array([[3.0, 4.0], [0.0, 0.0]]))
    assert np.allclose(out, [[0.6, 0.8], [0.0, 0.0]])


def test_bad_threshold_named():
    with pytest.raises(ConfigError, match="threshold"):
        near_duplicates(np.eye(2), threshold=0.0)
