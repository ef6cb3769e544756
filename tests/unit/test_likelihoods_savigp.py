"""The SAVIGP likelihoods: warped Gaussian, log Gaussian Cox process, GPRN, and the seismic
forward model example: normalisation, closed forms against Monte Carlo, inverse warping."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.likelihoods import GPRN, LogGaussianCox, WarpedGaussian

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import seismic_likelihood as seis  # noqa: E402

T = torch.float64


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Small tensors: one torch thread avoids OpenMP spin-waits on a busy 2-core machine."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _warped():
    lik = WarpedGaussian(num_terms=3, variance=0.2, a=0.8, b=1.5, c=[-1.0, 0.2, 1.0])
    with torch.no_grad():
        lik.c.add_(torch.tensor([0.1, -0.3, 0.2], dtype=T))
    return lik


def test_warped_density_integrates_to_one():
    lik = _warped()
    y = torch.linspace(-15, 15, 30001, dtype=T)
    for f in (-2.0, 0.0, 1.5):
        p = lik.log_prob(y, torch.full_like(y, f)).exp().detach()
        assert abs(float(torch.trapezoid(p, y)) - 1) < 1e-6
    # and the predictive density under q(f) = N(0.3, 0.4)
    pd = lik.predictive_log_density(y, torch.full_like(y, 0.3), torch.full_like(y, 0.4)).exp()
    assert abs(float(torch.trapezoid(pd.detach(), y)) - 1) < 1e-6


def test_warped_inverse_and_predictions():
    lik = _warped()
    y = torch.linspace(-6, 6, 501, dtype=T)
    assert torch.allclose(lik.inverse_warp(lik.warp(y)), y, atol=1e-10)
    mean, var = torch.tensor([0.4, -1.0], dtype=T), torch.tensor([0.3, 0.05], dtype=T)
    m, v = lik.predictive_moments(mean, var)
    z = mean + (var + lik.variance).sqrt() * torch.randn(200000, 2, dtype=T)
    ys = lik.inverse_warp(z)
    assert torch.allclose(m, ys.mean(0), atol=0.01)
    assert torch.allclose(v, ys.var(0), rtol=0.02)
    assert torch.allclose(lik.warp(lik.predictive_median(mean, var)), mean, atol=1e-10)


def test_warped_expected_log_prob_closed_form():
    lik = _warped()
    y = torch.tensor([0.3, -1.2], dtype=T)
    mean, var = torch.tensor([0.1, -0.7], dtype=T), torch.tensor([0.2, 0.5], dtype=T)
    g = torch.Generator().manual_seed(7)
    f = mean + var.sqrt() * torch.randn(400000, 2, dtype=T, generator=g)
    lp = lik.log_prob(y, f)
    se = lp.std(0) / math.sqrt(lp.shape[0])  # Monte Carlo standard error (0.004 for -11.2)
    assert (lik.expected_log_prob(y, mean, var) - lp.mean(0)).abs().le(4 * se).all()


def test_lgcp_sums_to_one_and_offset():
    lik = LogGaussianCox(bin_size=0.5, offset=0.3)
    y = torch.arange(0, 200, dtype=T)
    for f in (-1.0, 0.0, 2.0):
        assert abs(float(lik.log_prob(y, torch.full_like(y, f)).exp().sum().detach()) - 1) < 1e-10
    assert torch.allclose(
        lik.conditional_mean(torch.tensor(0.0, dtype=T)), torch.tensor(0.5 * math.exp(0.3), dtype=T)
    )
    free = LogGaussianCox(bin_size=50.0)
    free.init_offset(torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=T))
    assert math.isclose(float(free.offset), math.log(0.5 / 50.0))
    assert free.offset.requires_grad
    y2, mean, var = torch.tensor([3.0]), torch.tensor([0.2], dtype=T), torch.tensor([0.3], dtype=T)
    f = mean + var.sqrt() * torch.randn(400000, 1, dtype=T)
    mc = free.log_prob(y2, f).mean(0)
    assert torch.allclose(free.expected_log_prob(y2, mean, var), mc, atol=0.01)


def test_gprn_density_integrates_to_one():
    lik = GPRN(num_outputs=2, num_nodes=1, variance=0.5)
    g = torch.linspace(-8, 8, 401, dtype=T)
    Y = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    f = torch.tensor([0.7, 1.2, -0.5], dtype=T).expand(Y.shape[0], 3)
    p = lik.log_prob(Y, f).exp().reshape(401, 401).detach()
    assert abs(float(torch.trapezoid(torch.trapezoid(p, g), g)) - 1) < 1e-6


def test_gprn_expected_log_prob_and_moments_vs_monte_carlo():
    lik = GPRN(num_outputs=3, num_nodes=2, variance=0.3)
    Q = lik.latent_dim
    assert Q == 2 + 3 * 2
    torch.manual_seed(0)
    mean, var = torch.randn(4, Q, dtype=T), 0.2 + torch.rand(4, Q, dtype=T)
    y = torch.randn(4, 3, dtype=T)
    f = mean + var.sqrt() * torch.randn(400000, 4, Q, dtype=T)
    lp = lik.log_prob(y, f)
    se = lp.std(0) / math.sqrt(f.shape[0])
    assert ((lik.expected_log_prob(y, mean, var) - lp.mean(0)).abs() < 5 * se).all()
    m, v = lik.predictive_moments(mean, var)
    mu = lik.conditional_mean(f)
    assert torch.allclose(m, mu.mean(0), atol=0.02)
    assert torch.allclose(v, mu.var(0) + lik.variance, rtol=0.03)


def test_seismic_forward_model_numpy_and_torch_agree():
    d = np.array([200.0, 500.0, 1600.0, 2200.0])
    v = np.array([2000.0, 2500.0, 2750.0, 4000.0])
    f = np.concatenate([d, v])[None]
    times = seis.travel_times_numpy(f)[0]
    expected = np.cumsum(2 * np.diff(d, prepend=0.0) / v)
    assert np.allclose(times, expected)
    y = times[None] + np.array([[0.01, -0.02, 0.03, 0.0]])
    lik = seis.SeismicLikelihood()
    a = seis.seismic_log_lik_numpy(y, f)
    b = lik.log_prob(torch.as_tensor(y), torch.as_tensor(f)).numpy()
    assert np.allclose(a, b)
    s = np.array(seis.NOISE_STD)
    ref = (-0.5 * ((y - times) / s) ** 2 - np.log(s * np.sqrt(2 * np.pi))).sum()
    assert np.allclose(a, ref)


@pytest.mark.parametrize(
    "lik, make_y",
    [
        (lambda: WarpedGaussian(), lambda x: np.sinh(np.sin(2 * x)) + 0.1),
        (lambda: LogGaussianCox(bin_size=1.0), lambda x: np.round(np.exp(np.sin(x)) + 0.2)),
    ],
)
def test_new_likelihoods_usable_by_svgp_and_savigp(lik, make_y):
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (60, 1))
    y = make_y(X[:, 0])
    for model in (
        lg.SVGP(num_inducing=10, likelihood=lik()),
        lg.SAVIGP(num_inducing=10, likelihood=lik(), estimator={"num_samples": 10}),
    ):
        model.fit(X, y, max_steps=40, lr=0.05, seed=0)
        m, v = model.predict_y(X)
        lpd = model.log_predictive_density(X, y)
        assert np.all(np.isfinite(m)) and np.all(v >= 0) and np.all(np.isfinite(lpd))
        assert model.history_.objective[-1] > model.history_.objective[0]
