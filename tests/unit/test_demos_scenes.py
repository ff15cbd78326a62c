"""Scene-cut detection and keyframe quality on synthetic frame arrays with known cuts."""
import numpy as np
import pytest

from trident.demos.scenes import (brightness, colour_histogram, detect_cuts, histogram_distances, match_cuts,
                                  scene_bounds, sharpness)
from trident.demos.videogen import scene_frames
from trident.core.errors import ConfigError


def _clip(rng, lengths, hues):
    return np.concatenate([scene_frames(rng, width=64, height=48, n_frames=n, hue=h) for n, h in zip(lengths, hues)])


def test_cuts_found_at_the_true_scene_starts():
    rng = np.random.default_rng(3)
    frames = _clip(rng, [9, 14, 6, 11], [0.0, 0.3, 0.6, 0.85])
    cuts = detect_cuts(np.array([colour_histogram(f, bins=4) for f in frames]))
    assert cuts == [9, 23, 29]
    assert scene_bounds(cuts, len(frames)) == [(0, 9), (9, 23), (23, 29), (29, 40)]


def test_one_scene_with_motion_and_noise_has_no_cut():
    rng = np.random.default_rng(4)
    frames = scene_frames(rng, width=64, height=48, n_frames=30, hue=0.4)
    assert detect_cuts(np.array([colour_histogram(f, bins=4) for f in frames])) == []


def test_min_scene_length_suppresses_flicker():
    a, b = np.zeros(8), np.zeros(8)
    a[0], b[7] = 1.0, 1.0
    hists = np.array([a] * 4 + [b] + [a] * 4)  # a one-frame flash at frame 4
    assert detect_cuts(hists, min_scene_frames=1) == [4, 5]
    assert detect_cuts(hists, min_scene_frames=3) == [4]
    assert detect_cuts(hists[:3], min_scene_frames=3) == []


def test_histogram_distance_bounds():
    f1 = np.zeros((4, 4, 3), np.uint8)
    f2 = np.full((4, 4, 3), 255, np.uint8)
    d = histogram_distances(np.array([colour_histogram(f1), colour_histogram(f1), colour_histogram(f2)]))
    assert d.tolist() == [0.0, 1.0]


def test_bad_threshold_is_rejected_with_its_name():
    with pytest.raises(ConfigError, match="threshold"):
        detect_cuts(np.zeros((3, 8)), threshold=1.5)


def test_quality_measures_order_sharp_over_flat_and_bright_over_dark():
    rng = np.random.default_rng(0)
    flat = np.full((32, 32, 3), 100, np.uint8)
    textured = rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
    assert sharpness(textured) > 100 * max(sharpness(flat), 1e-9)
    assert brightness(np.full((8, 8, 3), 200, np.uint8)) > brightness(flat)


def test_match_cuts_counts_each_true_cut_once():
    assert match_cuts([10, 11, 30], [10, 30, 50]) == (2, 1, 1)
