"""Robit (Bernoulli with a Student-t CDF link) and Dirichlet-based classification
(Milios et al. 2018), against independent references: scipy's Student-t CDF and
density, Monte Carlo averages, scipy's adaptive quadrature, the log-normal moment
matching re-derived, and fits."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import integrate, special, stats

import latentgp as lg
from latentgp.likelihoods import DirichletClassification, Robit


def _t(a):
    return torch.as_tensor(np.asarray(a, dtype=np.float64))


DOFS = [0.7, 1.0, 4.0, 7.5, 60.0]


@pytest.mark.parametrize("dof", DOFS)
def test_robit_log_prob_matches_scipy_into_the_tails(dof):
    lik = Robit(dof)
    f = np.array([-1e4, -200.0, -7.0, -1.0, -1e-3, 0.0, 0.4, 3.0, 40.0, 1e3])
    for y in (0.0, 1.0):
        ours = lik.log_prob(_t(np.full_like(f, y)), _t(f)).numpy()
        ref = np.log(special.stdtr(dof, (2 * y - 1) * f))
        np.testing.assert_allclose(ours, ref, rtol=1e-11, atol=1e-13)
    # the two labels' probabilities sum to one
    p = np.exp(lik.log_prob(_t(np.ones_like(f)), _t(f)).numpy())
    q = np.exp(lik.log_prob(_t(np.zeros_like(f)), _t(f)).numpy())
    np.testing.assert_allclose(p + q, 1.0, atol=1e-14)


@pytest.mark.parametrize("dof", DOFS)
def test_robit_gradient_is_the_t_density_over_the_cdf(dof):
    lik = Robit(dof)
    f = _t([-30.0, -2.0, -0.1, 0.0, 0.3, 5.0]).requires_grad_(True)
    lik.log_prob(_t(np.ones(6)), f).sum().backward()
    x = f.detach().numpy()
    np.testing.assert_allclose(
        f.grad.numpy(), stats.t.pdf(x, dof) / special.stdtr(dof, x), rtol=1e-9
    )


def test_robit_heavier_tails_than_probit_and_logit():
    """A point on the wrong side costs O(log |f|) under the robit link."""
    f = _t([-10.0, -100.0])
    y = _t([1.0, 1.0])
    robit = Robit(4.0).log_prob(y, f).numpy()
    assert robit[1] - robit[0] == pytest.approx(4 * np.log(0.1), rel=0.01)  # ~ nu log|f|
    assert np.all(robit > lg.likelihoods.Bernoulli("probit").log_prob(y, f).numpy())
    assert np.all(robit > lg.likelihoods.Bernoulli("logit").log_prob(y, f).numpy())


@pytest.mark.parametrize("dof", [1.0, 4.0])
def test_robit_expectations_match_monte_carlo_and_quadrature(dof):
    lik = Robit(dof)
    y = np.array([1.0, 0.0, 1.0, 0.0])
    mean, var = np.array([-0.5, 0.1, 1.6, 2.5]), np.array([0.05, 0.3, 2.0, 6.0])
    ours = lik.expected_log_prob(_t(y), _t(mean), _t(var)).numpy()
    rng = np.random.default_rng(0)
    f = mean + np.sqrt(var) * rng.standard_normal((400_000, 4))
    draws = np.log(special.stdtr(dof, (2 * y - 1) * f))
    se = draws.std(0) / np.sqrt(len(draws))
    assert np.all(np.abs(ours - draws.mean(0)) < 5 * se + 1e-6), (ours, draws.mean(0), se)
    lpd = lik.predictive_log_density(_t(y), _t(mean), _t(var)).numpy()
    p1, v1 = (t.numpy() for t in lik.predictive_moments(_t(mean), _t(var)))
    for i in range(4):
        sd = np.sqrt(var[i])

        def integrand(x, i=i, sd=sd):
            return special.stdtr(dof, (2 * y[i] - 1) * x) * stats.norm.pdf(x, mean[i], sd)

        ref = integrate.quad(integrand, mean[i] - 14 * sd, mean[i] + 14 * sd, limit=400,
                             epsabs=1e-14, epsrel=1e-12)[0]
        assert lpd[i] == pytest.approx(np.log(ref), abs=1e-7)
        p_ref = ref if y[i] == 1 else 1 - ref
        assert p1[i] == pytest.approx(p_ref, abs=1e-7)
    np.testing.assert_allclose(v1, p1 * (1 - p1))


def test_robit_model_fits_saves_and_loads(tmp_path):
    rng = np.random.default_rng(1)
    X = rng.uniform(-3, 3, (200, 1))
    y = (np.sin(2 * X[:, 0]) > 0).astype(float)
    flip = rng.random(200) < 0.05
    y[flip] = 1 - y[flip]
    m = lg.SVGP(num_inducing=12, likelihood="robit").fit(X, y, max_steps=150, lr=0.05, seed=0)
    p, _ = m.predict_y(X)
    clean = (np.sin(2 * X[:, 0]) > 0)
    assert np.mean((p > 0.5) == clean) > 0.9
    m.save(tmp_path / "r.lgp")
    back = lg.load(tmp_path / "r.lgp")
    assert isinstance(back.likelihood, Robit) and back.likelihood.dof == 4.0
    np.testing.assert_array_equal(back.predict_y(X)[0], p)
    with pytest.raises(ValueError, match="dof"):
        Robit(dof=0.0)


# --------------------------------------------------------------------- Dirichlet --


def test_dirichlet_targets_match_the_gamma_moments():
    """Log-normal moment matching re-derived: exp(y~ + s^2/2) = alpha (the Gamma(alpha, 1)
    mean) and (exp(s^2) - 1) exp(2 y~ + s^2) = alpha (its variance)."""
    lik = DirichletClassification(num_classes=3, alpha_eps=0.01)
    target, var = (t.numpy() for t in lik.regression_targets(_t([0, 2]), 3))
    alpha = np.array([[1.01, 0.01, 0.01], [0.01, 0.01, 1.01]])
    np.testing.assert_allclose(np.exp(target + var / 2), alpha, rtol=1e-13)
    np.testing.assert_allclose((np.exp(var) - 1) * np.exp(2 * target + var), alpha, rtol=1e-12)


def test_dirichlet_log_prob_and_expected_log_prob():
    lik = DirichletClassification(num_classes=3, alpha_eps=0.05)
    y = _t([0, 1, 2, 1])
    rng = np.random.default_rng(0)
    mean = _t(rng.normal(size=(4, 3)) - 2)
    var = _t(rng.uniform(0.1, 1.0, size=(4, 3)))
    target, noise = lik.regression_targets(y, 3)
    f = mean.numpy()
    ref = stats.norm.logpdf(target.numpy(), f, np.sqrt(noise.numpy())).sum(-1)
    np.testing.assert_allclose(lik.log_prob(y, mean).numpy(), ref, rtol=1e-12)
    draws = mean.numpy() + np.sqrt(var.numpy()) * rng.standard_normal((200_000, 4, 3))
    lp = lik.log_prob(y, _t(draws)).numpy()
    ours = lik.expected_log_prob(y, mean, var).numpy()
    se = lp.std(0) / np.sqrt(len(lp))
    assert np.all(np.abs(ours - lp.mean(0)) < 5 * se), (ours, lp.mean(0), se)


def test_dirichlet_class_probabilities_are_the_softmax_of_the_latents():
    lik = DirichletClassification(num_classes=3, predictive_samples=4096)
    mean, var = _t([[0.5, -1.0, 0.2], [-2.0, 1.0, 1.0]]), _t([[0.3, 1.0, 2.0], [0.1, 0.5, 0.5]])
    p, _ = lik.predictive_moments(mean, var)
    np.testing.assert_allclose(p.sum(-1).numpy(), 1.0, atol=1e-12)
    rng = np.random.default_rng(3)
    f = mean.numpy() + np.sqrt(var.numpy()) * rng.standard_normal((400_000, 2, 3))
    ref = special.softmax(f, -1).mean(0)
    np.testing.assert_allclose(p.numpy(), ref, atol=0.01)
    lpd = lik.predictive_log_density(_t([2, 1]), mean, var).numpy()
    np.testing.assert_allclose(lpd, np.log([p[0, 2].item(), p[1, 1].item()]), rtol=1e-12)


def test_dirichlet_classifier_fits_three_classes(tmp_path):
    rng = np.random.default_rng(2)
    X = rng.uniform(-3, 3, (300, 2))
    lab = ((np.sin(X[:, 0]) + 0.5 * X[:, 1] > 0).astype(int) + (X[:, 1] > 1.5)).astype(float)
    m = lg.SVGP(num_inducing=16, likelihood="dirichlet", mean="constant")
    m.fit(X[:200], lab[:200], max_steps=400, lr=0.05, seed=0)
    p, _ = m.predict_y(X[200:])
    assert m.likelihood.num_classes == 3 and p.shape == (100, 3)
    acc = np.mean(p.argmax(1) == lab[200:])
    majority = np.bincount(lab[200:].astype(int)).max() / 100
    assert acc > majority + 0.25, (acc, majority)
    # the constant means learned the level of the targets (about -6.9 off-label)
    assert float(m.mean_function.constant.detach().mean()) < -2
    m.save(tmp_path / "d.lgp")
    back = lg.load(tmp_path / "d.lgp")
    assert back.likelihood.alpha_eps == 0.01
    np.testing.assert_array_equal(back.predict_y(X[200:])[0], p)
    nlpd = -m.log_predictive_density(X[200:], lab[200:]).mean()
    assert nlpd < np.log(3) - 0.4
