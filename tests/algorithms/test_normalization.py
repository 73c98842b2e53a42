"""Running statistics: merged moments equal those of the concatenated data."""

from __future__ import annotations

import numpy as np
import pytest

from surreal.runtime.normalization import (
    Moments,
    ObsNormalizer,
    RunningMeanStd,
    batch_moments,
    discounted_return_trace,
    merge_moments,
)


def test_merge_of_uneven_splits_equals_batch_statistics():
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(1000, 3)) * np.array([1.0, 10.0, 0.01])
    rms = RunningMeanStd((3,))
    for chunk in np.split(data, [1, 7, 300, 301, 999]):
        rms.merge(batch_moments(chunk))
    assert rms.count == 1000
    np.testing.assert_allclose(rms.mean, data.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(rms.var, data.var(axis=0), rtol=1e-10)


def test_merge_hand_computed():
    # {1, 3} and {5}: mean 3, m2 = 4 + 0 + 4 = 8
    merged = merge_moments(Moments(2.0, np.array(2.0), np.array(2.0)),
                           Moments(1.0, np.array(5.0), np.array(0.0)))  # fmt: skip
    assert merged.count == 3
    assert merged.mean == pytest.approx(3.0)
    assert merged.m2 == pytest.approx(8.0)


def test_empty_statistics_are_identity_and_merging_nothing_changes_nothing():
    rms = RunningMeanStd((2,))
    np.testing.assert_array_equal(rms.var, [1.0, 1.0])
    rms.merge(batch_moments(np.array([[1.0, 2.0], [3.0, 6.0]])))
    before = rms.moments
    rms.merge(Moments(0.0, np.zeros(2), np.zeros(2)))
    assert rms.moments is before
    np.testing.assert_allclose(rms.var, [1.0, 4.0])


def test_wire_round_trip():
    rms = RunningMeanStd((2,))
    rms.merge(batch_moments(np.array([[1.0, 2.0], [3.0, 5.0], [4.0, 0.0]])))
    arrays = rms.to_arrays("obs")
    assert set(arrays) == {"obs_count", "obs_mean", "obs_m2"}
    back = RunningMeanStd.moments_from_arrays(arrays, "obs")
    assert back.count == 3
    np.testing.assert_array_equal(back.mean, rms.mean)
    np.testing.assert_array_equal(back.m2, rms.moments.m2)


def test_obs_normalizer_centers_scales_and_clips():
    norm = ObsNormalizer(np.array([1.0, -2.0]), np.array([4.0, 0.25]), clip=3.0)
    out = norm(np.array([[3.0, -2.0], [1.0, 10.0]], np.float32))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [[1.0, 0.0], [0.0, 3.0]], rtol=1e-6)


def test_discounted_return_trace_resets_after_episode_end():
    rewards = np.array([[1.0], [1.0], [1.0]])
    dones = np.array([[False], [True], [False]])
    trace, carry = discounted_return_trace(rewards, dones, np.array([2.0]), gamma=0.5)
    # 0.5*2 + 1 = 2; 0.5*2 + 1 = 2 (episode ends); then 1
    np.testing.assert_allclose(trace[:, 0], [2.0, 2.0, 1.0])
    np.testing.assert_allclose(carry, [1.0])
