"""ES maths against values worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from surreal.runtime.es.maths import (
    adam_step,
    ascent_direction,
    centered_ranks,
    es_gradient,
    top_pairs,
)


def test_centered_ranks_scale_ranks_to_half_unit_and_share_ties():
    # flat [3, 1, 2, 2]: ranks 3, 0, and the two 2s share (1 + 2) / 2 = 1.5; / (n - 1) - 0.5
    out = centered_ranks(np.array([[3.0, 1.0], [2.0, 2.0]]))
    np.testing.assert_allclose(out, [[0.5, -0.5], [0.0, 0.0]])


def test_centered_ranks_ignore_the_scale_of_returns():
    x = np.array([[10.0, -5.0], [1e6, 0.0]])  # ranks 2, 0, 3, 1
    np.testing.assert_allclose(centered_ranks(x), [[1 / 6, -0.5], [0.5, -1 / 6]])
    np.testing.assert_allclose(centered_ranks(x * 1000 + 7), centered_ranks(x))


def test_centered_ranks_of_one_value_is_zero():
    assert centered_ranks(np.array([4.2])).tolist() == [0.0]


def test_es_gradient_is_the_antithetic_weighted_sum_of_the_noise():
    shaped = np.array([[0.5, -0.5], [0.0, 0.0]])
    noise = np.array([[1.0, 2.0], [3.0, 4.0]])
    # weights (1, 0); (1 * [1, 2] + 0 * [3, 4]) / (2 * N * sigma) = [1, 2] / 2
    np.testing.assert_allclose(es_gradient(shaped, noise, sigma=0.5), [0.5, 1.0])


def test_es_gradient_recovers_the_slope_of_a_linear_objective():
    # F(theta) = a . theta around theta = 0, perturbations along e1 and e2, sigma 0.1:
    # F+ - F- = 2 sigma a_i, so the estimate is sum_i 2 sigma a_i e_i / (2 * 2 * sigma) = a / 2.
    a, sigma, noise = np.array([3.0, -1.0]), 0.1, np.eye(2)
    raw = np.array([[a @ (sigma * e), a @ (-sigma * e)] for e in noise])
    np.testing.assert_allclose(es_gradient(raw, noise, sigma), [1.5, -0.5])
    # With centered ranks: returns [0.3, -0.3, -0.1, 0.1] rank [3, 0, 1, 2] -> [1/2, -1/2, -1/6, 1/6];
    # weights (1, -1/3) / (2 * 2 * 0.1) -> [2.5, -5/6]: the same direction up to scale.
    np.testing.assert_allclose(ascent_direction(raw, noise, sigma), [2.5, -5 / 6])


def test_top_pairs_keep_the_best_fraction_by_the_better_return():
    returns = np.array([[1.0, 0.0], [0.0, 9.0], [5.0, 4.0], [2.0, 2.0]])
    assert top_pairs(returns, 0.5).tolist() == [1, 2]
    assert top_pairs(returns, 1.0).tolist() == [0, 1, 2, 3]
    assert top_pairs(returns, 0.01).tolist() == [1]  # at least one


def test_adam_first_step_moves_by_the_learning_rate_then_decays():
    theta, m, v = adam_step(np.array([1.0]), np.array([2.0]), np.zeros(1), np.zeros(1), 1, lr=0.1)
    # m = 0.2, v = 0.004; bias-corrected m / sqrt(v) = 1, so the step is lr.
    np.testing.assert_allclose([theta[0], m[0], v[0]], [0.9, 0.2, 0.004])
    theta, m, v = adam_step(theta, np.array([0.0]), m, v, 2, lr=0.1)
    # m = 0.18, v = 0.003996; step = 0.1 * sqrt(1 - 0.999^2) / (1 - 0.9^2) * 0.18 / sqrt(0.003996)
    expected = 0.9 - 0.1 * np.sqrt(1 - 0.999**2) / (1 - 0.81) * 0.18 / np.sqrt(0.003996)
    assert theta[0] == pytest.approx(expected, rel=1e-6)
    assert theta[0] == pytest.approx(0.83299, abs=1e-5)
