"""Tests of latentgp.metrics against independent computations (scipy, quadrature, sampling)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from latentgp import metrics


@pytest.fixture
def reg_data():
    rng = np.random.default_rng(0)
    n = 50
    y = rng.normal(size=n)
    mean = y + rng.normal(scale=0.5, size=n)
    var = rng.uniform(0.1, 2.0, size=n)
    return y, mean, var


# ------------------------------------------------------------------------ point metrics
def test_rmse_mae_by_hand():
    y = np.array([1.0, 2.0, 3.0, 4.0])
    m = np.array([1.0, 1.0, 5.0, 4.0])
    assert metrics.rmse(y, m) == pytest.approx(math.sqrt((0 + 1 + 4 + 0) / 4))
    assert metrics.mae(y, m) == pytest.approx((0 + 1 + 2 + 0) / 4)


def test_rmse_accepts_column_vectors_and_torch():
    y = np.array([1.0, 2.0, 3.0])
    m = np.array([[1.5], [2.0], [2.0]])
    expected = math.sqrt((0.25 + 0 + 1) / 3)
    assert metrics.rmse(y, m) == pytest.approx(expected)  # not broadcast to (3, 3)
    assert metrics.rmse(torch.tensor(y, requires_grad=True), torch.tensor(m)) == pytest.approx(
        expected
    )


def test_smse_reference_variances():
    rng = np.random.default_rng(1)
    y_train = rng.normal(3.0, 2.0, size=200)
    y = rng.normal(3.0, 2.0, size=40)
    m = y + 0.3
    mse = np.mean((y - m) ** 2)
    assert metrics.smse(y, m, y_train) == pytest.approx(mse / np.var(y_train))
    assert metrics.smse(y, m, 4.0) == pytest.approx(mse / 4.0)
    assert metrics.smse(y, m) == pytest.approx(mse / np.var(y))
    # predicting the training mean scores about 1
    assert metrics.smse(y_train, np.full_like(y_train, y_train.mean()), y_train) == pytest.approx(
        1.0
    )


# --------------------------------------------------------------------- density metrics
def test_nlpd_gaussian_matches_scipy(reg_data):
    y, m, v = reg_data
    expected = -np.mean(stats.norm.logpdf(y, loc=m, scale=np.sqrt(v)))
    assert metrics.nlpd_gaussian(y, m, v) == pytest.approx(expected, rel=1e-12)
    # scalar variance
    expected = -np.mean(stats.norm.logpdf(y, loc=m, scale=0.7))
    assert metrics.nlpd_gaussian(y, m, 0.49) == pytest.approx(expected, rel=1e-12)


def test_nlpd_is_negative_mean():
    ld = np.array([-1.0, -2.0, -0.5])
    assert metrics.nlpd(ld) == pytest.approx(7.0 / 6.0)


def test_nlpd_mixture_k1_equals_gaussian(reg_data):
    y, m, v = reg_data
    got = metrics.nlpd_mixture(y, m[:, None], v[:, None], np.ones((len(y), 1)))
    assert got == pytest.approx(metrics.nlpd_gaussian(y, m, v), rel=1e-12)


def test_nlpd_mixture_two_components_vs_scipy(reg_data):
    y, m, v = reg_data
    means = np.stack([m, m + 2.0], axis=1)
    vars_ = np.stack([v, 0.5 * v], axis=1)
    w = np.array([0.3, 0.7])
    dens = w[0] * stats.norm.pdf(y, m, np.sqrt(v)) + w[1] * stats.norm.pdf(
        y, m + 2.0, np.sqrt(0.5 * v)
    )
    assert metrics.nlpd_mixture(y, means, vars_, w) == pytest.approx(-np.mean(np.log(dens)))
    # a zero weight is allowed
    w0 = np.tile([1.0, 0.0], (len(y), 1))
    assert metrics.nlpd_mixture(y, means, vars_, w0) == pytest.approx(
        metrics.nlpd_gaussian(y, m, v)
    )


@pytest.mark.parametrize("rule", ["scott", "silverman"])
def test_nlpd_samples_matches_scipy_kde(rule):
    rng = np.random.default_rng(2)
    n, s = 12, 200
    centres = rng.normal(size=n)
    samples = centres + rng.normal(scale=0.8, size=(s, n))
    y = centres + rng.normal(scale=0.8, size=n)
    expected = -np.mean(
        [stats.gaussian_kde(samples[:, i], bw_method=rule).logpdf(y[i])[0] for i in range(n)]
    )
    bw = None if rule == "scott" else rule
    assert metrics.nlpd_samples(y, samples, bandwidth=bw) == pytest.approx(expected, rel=1e-10)


def test_nlpd_samples_fixed_bandwidth_and_large_sample_limit():
    rng = np.random.default_rng(3)
    y = np.array([0.1, -0.4])
    samples = rng.normal(size=(4, 2))
    h = 0.3
    dens = np.mean(stats.norm.pdf(y[None, :], samples, h), axis=0)
    assert metrics.nlpd_samples(y, samples, bandwidth=h) == pytest.approx(-np.mean(np.log(dens)))
    # many samples from N(0, 1): the KDE tends to N(0, 1 + h^2), h = Scott's bandwidth
    n_pts, n_s = 300, 5000
    big = rng.normal(size=(n_s, n_pts))
    y_big = rng.normal(size=n_pts)
    h2 = (n_s**-0.2) ** 2
    assert metrics.nlpd_samples(y_big, big) == pytest.approx(
        metrics.nlpd_gaussian(y_big, np.zeros(n_pts), np.full(n_pts, 1.0 + h2)), abs=0.01
    )


def test_crps_gaussian_vs_quadrature():
    cases = [(0.3, 0.0, 1.0), (-1.2, 0.5, 0.25), (4.0, 1.0, 2.0)]
    for y, m, v in cases:
        sd = math.sqrt(v)

        def integrand(t, y=y, m=m, sd=sd):
            return (stats.norm.cdf(t, m, sd) - (1.0 if t >= y else 0.0)) ** 2

        lo, hi = m - 12 * sd, m + 12 * sd
        val = (
            integrate.quad(integrand, min(lo, y - 1), y, limit=200)[0]
            + integrate.quad(integrand, y, max(hi, y + 1), limit=200)[0]
        )
        assert metrics.crps_gaussian([y], [m], [v]) == pytest.approx(val, rel=1e-6)
    # mean over points, and the zero-variance limit |y - m|
    ys, ms, vs = np.array([0.3, -1.2]), np.array([0.0, 0.5]), np.array([1.0, 0.0])
    first = metrics.crps_gaussian([0.3], [0.0], [1.0])
    assert metrics.crps_gaussian(ys, ms, vs) == pytest.approx(0.5 * (first + 1.7))


def test_coverage_on_samples_from_the_predictive():
    rng = np.random.default_rng(4)
    n = 200_000
    m = rng.normal(size=n)
    v = rng.uniform(0.2, 3.0, size=n)
    y = m + np.sqrt(v) * rng.normal(size=n)
    assert metrics.coverage(y, m, v) == pytest.approx(0.95, abs=0.005)
    out = metrics.coverage(y, m, v, level=[0.5, 0.9, 0.99])
    assert set(out) == {0.5, 0.9, 0.99}
    for lv, frac in out.items():
        assert frac == pytest.approx(lv, abs=0.005)
    # over-confident predictions under-cover
    assert metrics.coverage(y, m, 0.25 * v) < 0.8


# ---------------------------------------------------------------------- classification
def test_error_rate_forms():
    y = np.array([0, 1, 1, 0, 1])
    probs = np.array([0.2, 0.9, 0.4, 0.3, 0.55])  # only point 2 is wrong at threshold 0.5
    assert metrics.error_rate(y, probs) == pytest.approx(1 / 5)
    assert metrics.error_rate(y, (probs > 0.5).astype(float)) == pytest.approx(1 / 5)
    P = np.stack([1 - probs, probs], axis=1)
    assert metrics.error_rate(y, P) == pytest.approx(1 / 5)
    y3 = np.array([0, 2, 1, 2])
    P3 = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.5, 0.4, 0.1], [0.2, 0.3, 0.5]])
    assert metrics.error_rate(y3, P3) == pytest.approx(1 / 4)
    assert metrics.error_rate(y3, np.array([0, 2, 0, 1])) == pytest.approx(2 / 4)


def test_nlp_classes_by_hand():
    y = np.array([1, 0, 1])
    p = np.array([0.8, 0.3, 0.5])
    expected = -np.mean(np.log([0.8, 0.7, 0.5]))
    assert metrics.nlp_classes(y, p) == pytest.approx(expected)
    y3 = np.array([2, 0])
    P3 = np.array([[0.1, 0.2, 0.7], [0.6, 0.3, 0.1]])
    assert metrics.nlp_classes(y3, P3) == pytest.approx(-np.mean(np.log([0.7, 0.6])))
    # a confident mistake is clipped, not infinite
    val = metrics.nlp_classes(np.array([1]), np.array([0.0]))
    assert np.isfinite(val) and val == pytest.approx(-math.log(1e-12))


# -------------------------------------------------------------------------- bad inputs
def test_length_mismatch_names_argument():
    with pytest.raises(ValueError, match=r"mean has shape \(3,\) but y has shape \(4,\)"):
        metrics.rmse(np.zeros(4), np.zeros(3))
    with pytest.raises(ValueError, match="var"):
        metrics.nlpd_gaussian(np.zeros(4), np.zeros(4), np.ones(3))
    with pytest.raises(ValueError, match="samples"):
        metrics.nlpd_samples(np.zeros(4), np.zeros((10, 3)))
    with pytest.raises(ValueError, match="weights"):
        metrics.nlpd_mixture(np.zeros(4), np.zeros((4, 2)), np.ones((4, 2)), np.ones(3) / 3)
    with pytest.raises(ValueError, match="probs"):
        metrics.nlp_classes(np.zeros(4), np.full((3, 2), 0.5))


def test_non_finite_and_negative_variance_rejected():
    with pytest.raises(ValueError, match="NaN or inf"):
        metrics.rmse([1.0, np.nan], [1.0, 2.0])
    with pytest.raises(ValueError, match="mean contains NaN or inf"):
        metrics.nlpd_gaussian([1.0, 2.0], [1.0, np.inf], [1.0, 1.0])
    with pytest.raises(ValueError, match="non-negative"):
        metrics.crps_gaussian([1.0, 2.0], [1.0, 2.0], [1.0, -0.1])
    with pytest.raises(ValueError, match="strictly positive"):
        metrics.nlpd_gaussian([1.0, 2.0], [1.0, 2.0], [1.0, 0.0])
    with pytest.raises(ValueError, match="non-negative"):
        metrics.coverage([1.0], [1.0], [-1.0])
    with pytest.raises(ValueError, match="level"):
        metrics.coverage([1.0], [1.0], [1.0], level=1.5)
    with pytest.raises(ValueError, match="sum to 1"):
        metrics.nlpd_mixture([0.0], [[0.0, 1.0]], [[1.0, 1.0]], [[0.5, 0.6]])
    with pytest.raises(ValueError, match="integer class labels"):
        metrics.error_rate([-1, 1], [0.2, 0.8])
    with pytest.raises(ValueError, match="identical"):
        metrics.nlpd_samples([0.0], np.zeros((5, 1)))
    with pytest.raises(ValueError, match="empty"):
        metrics.rmse([], [])
