"""The likelihoods for real data (issue 25, item 3): negative binomial, zero-inflated
Poisson, gamma, exponential, beta and ordinal (cumulative probit).

Each is checked against an independent reference: ``log_prob`` against scipy.stats, the
density sums or integrates to one, the expected log-likelihood (closed form or
Gauss-Hermite) against a large Monte Carlo average, the predictive log density against
scipy's adaptive quadrature, the predictive moments against draws of ``sample_y``; a fit
recovers a known dispersion, and a model file round-trips.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import integrate, stats

import latentgp as lg
from latentgp.likelihoods import (
    Beta,
    Exponential,
    Gamma,
    NegativeBinomial,
    Ordinal,
    ZeroInflatedPoisson,
)

F = torch.tensor([-1.2, 0.0, 0.7, 1.5], dtype=torch.float64)


def _t(a):
    return torch.as_tensor(np.asarray(a, dtype=np.float64))


def _scipy_logpdf(lik, y, f):
    """Independent log densities (scipy.stats), elementwise over y and f."""
    y, f = np.asarray(y, float), np.asarray(f, float)
    if isinstance(lik, NegativeBinomial):
        r = float(lik.size.detach())
        mu = np.exp(f)
        return stats.nbinom.logpmf(y, r, r / (r + mu))
    if isinstance(lik, ZeroInflatedPoisson):
        pi, mu = float(lik.zero_probability.detach()), np.exp(f)
        p = (1 - pi) * stats.poisson.pmf(y, mu) + pi * (y == 0)
        return np.log(p)
    if isinstance(lik, Gamma):  # Exponential too (shape 1)
        a = float(lik.shape.detach())
        return stats.gamma.logpdf(y, a, scale=np.exp(f) / a)
    if isinstance(lik, Beta):
        phi, mu = float(lik.precision.detach()), 1 / (1 + np.exp(-f))
        return stats.beta.logpdf(y, mu * phi, (1 - mu) * phi)
    if isinstance(lik, Ordinal):
        b = np.r_[-np.inf, lik.cutpoints().detach().numpy(), np.inf]
        k = y.astype(int)
        return np.log(stats.norm.cdf(b[k + 1] - f) - stats.norm.cdf(b[k] - f))
    raise AssertionError(lik)


LIKELIHOODS = {
    "negbin": (lambda: NegativeBinomial(size=2.5), "count"),
    "zip": (lambda: ZeroInflatedPoisson(zero_probability=0.3), "count"),
    "gamma": (lambda: Gamma(shape=2.0), "positive"),
    "exponential": (lambda: Exponential(), "positive"),
    "beta": (lambda: Beta(precision=6.0), "unit"),
    "ordinal": (lambda: Ordinal(cutpoints=[-1.0, 0.2, 1.5]), "ordinal"),
}


def _support_values(kind):
    return {
        "count": np.array([0, 1, 2, 5, 11]),
        "positive": np.array([0.05, 0.7, 2.0, 6.0]),
        "unit": np.array([0.02, 0.3, 0.5, 0.97]),
        "ordinal": np.array([0, 1, 2, 3]),
    }[kind]


@pytest.mark.parametrize("name", LIKELIHOODS)
def test_log_prob_matches_scipy(name):
    make, kind = LIKELIHOODS[name]
    lik = make()
    y = _support_values(kind)
    Y, Fm = np.meshgrid(y, F.numpy())
    ours = lik.log_prob(_t(Y), _t(Fm)).detach().numpy()
    np.testing.assert_allclose(ours, _scipy_logpdf(lik, Y, Fm), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", LIKELIHOODS)
def test_density_sums_or_integrates_to_one(name):
    make, kind = LIKELIHOODS[name]
    lik = make()
    for f in (-1.0, 0.4, 1.3):
        if kind in ("count", "ordinal"):
            ys = np.arange(0, 4 if kind == "ordinal" else 400)
            total = np.exp(lik.log_prob(_t(ys), _t(np.full(len(ys), f))).detach().numpy()).sum()
        else:
            hi = 1.0 if kind == "unit" else np.inf

            def dens(y, f=f):
                return torch.exp(lik.log_prob(_t([y]), _t([f]))).detach()[0].item()

            total = integrate.quad(dens, 0.0, hi, limit=200)[0]
        assert abs(total - 1.0) < 1e-7, (f, total)


@pytest.mark.parametrize("name", LIKELIHOODS)
def test_expected_log_prob_matches_monte_carlo(name):
    make, kind = LIKELIHOODS[name]
    lik = make()
    y = _support_values(kind)[:4]
    mean, var = _t([-0.5, 0.1, 0.6, 1.1]), _t([0.05, 0.3, 0.8, 0.2])
    ours = lik.expected_log_prob(_t(y), mean, var).detach().numpy()
    rng = np.random.default_rng(0)
    f = mean.numpy() + np.sqrt(var.numpy()) * rng.standard_normal((400_000, 4))
    draws = _scipy_logpdf(lik, np.broadcast_to(y, f.shape), f)
    se = draws.std(0) / np.sqrt(len(draws))
    assert np.all(np.abs(ours - draws.mean(0)) < 5 * se + 1e-6), (ours, draws.mean(0), se)


@pytest.mark.parametrize("name", LIKELIHOODS)
def test_predictive_log_density_matches_adaptive_quadrature(name):
    make, kind = LIKELIHOODS[name]
    lik = make()
    y = _support_values(kind)[:4]
    mean, var = np.array([-0.5, 0.1, 0.6, 1.1]), np.array([0.05, 0.3, 2.0, 6.0])
    ours = lik.predictive_log_density(_t(y), _t(mean), _t(var)).detach().numpy()
    for i in range(4):
        sd = np.sqrt(var[i])

        def integrand(f, i=i, sd=sd):
            return np.exp(_scipy_logpdf(lik, y[i], f) + stats.norm.logpdf(f, mean[i], sd))

        ref = integrate.quad(integrand, mean[i] - 12 * sd, mean[i] + 12 * sd, limit=400,
                             epsabs=1e-14, epsrel=1e-11)[0]
        assert abs(ours[i] - np.log(ref)) < 1e-4, (i, ours[i], np.log(ref))


@pytest.mark.parametrize("name", LIKELIHOODS)
def test_predictive_moments_match_draws(name):
    make, _ = LIKELIHOODS[name]
    lik = make()
    mean, var = _t([-0.4, 0.5]), _t([0.1, 0.4])
    m, v = (t.detach().numpy() for t in lik.predictive_moments(mean, var))
    torch.manual_seed(0)
    n = 400_000
    f = mean + var.sqrt() * torch.randn(n, 2, dtype=torch.float64)
    y = lik.sample_y(f).numpy()
    np.testing.assert_allclose(m, y.mean(0), rtol=0.02, atol=5 * y.std(0).max() / np.sqrt(n))
    np.testing.assert_allclose(v, y.var(0), rtol=0.05)


def test_ordinal_class_probabilities_sum_to_one_and_match_quadrature():
    lik = Ordinal(cutpoints=[-1.0, 0.2, 1.5])
    mean, var = _t([-0.3, 0.9]), _t([0.5, 2.0])
    p = lik.class_probabilities(mean, var).detach().numpy()
    np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-14)
    for i in range(2):
        for k in range(4):
            ref = integrate.quad(
                lambda f, i=i, k=k: np.exp(_scipy_logpdf(lik, np.array(k), f))
                * stats.norm.pdf(f, mean[i].item(), np.sqrt(var[i].item())),
                -15, 15, limit=200)[0]
            assert abs(p[i, k] - ref) < 1e-9


def test_ordinal_takes_the_number_of_classes_from_the_labels_and_refuses_bad_ones():
    lik = Ordinal()
    lik.adapt_to_targets(_t([0, 2, 4]))
    assert lik.num_classes == 5 and lik.cutpoints().shape == (4,)
    with pytest.raises(ValueError, match="ordered integer labels 0..4"):
        lik.validate_targets(_t([0, 5]))
    with pytest.raises(ValueError, match="increase strictly"):
        Ordinal(cutpoints=[0.0, -1.0])


@pytest.mark.parametrize(
    "lik,bad,match",
    [
        (NegativeBinomial(), [1, 2.5], "non-negative integer counts"),
        (ZeroInflatedPoisson(), [-1, 2], "non-negative integer counts"),
        (Gamma(), [1.0, 0.0], "positive values"),
        (Beta(), [0.5, 1.0], "strictly between 0 and 1"),
    ],
)
def test_targets_outside_the_support_are_refused(lik, bad, match):
    with pytest.raises(ValueError, match=match):
        lik.validate_targets(_t(bad))


def test_negative_binomial_fit_recovers_the_dispersion_and_beats_poisson(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (600, 1))
    mu = np.exp(1.0 + np.sin(X[:, 0]))
    r = 2.0
    y = rng.negative_binomial(r, r / (r + mu)).astype(float)
    Xtr, ytr, Xte, yte = X[:450], y[:450], X[450:], y[450:]
    kw = dict(max_steps=100, batch_size=450, seed=0, optimizer="natural", lr=0.03)
    nb = lg.SVGP(num_inducing=10, likelihood="negative_binomial").fit(Xtr, ytr, **kw)
    po = lg.SVGP(num_inducing=10, likelihood="poisson").fit(Xtr, ytr, **kw)
    assert 1.2 < float(nb.likelihood.size.detach()) < 3.5
    nlpd_nb = -nb.log_predictive_density(Xte, yte).mean()
    assert nlpd_nb < -po.log_predictive_density(Xte, yte).mean() - 0.1
    path = tmp_path / "nb.lgp"
    nb.save(path)
    back = lg.load(path)
    np.testing.assert_array_equal(back.predict_y(Xte)[0], nb.predict_y(Xte)[0])
    assert torch.equal(back.likelihood.size, nb.likelihood.size)


def test_ordinal_gradients_are_finite_in_the_outer_classes():
    """The outer cut-points are finite stand-ins for -+inf: with infinities the gradient
    of the lowest and highest class was NaN and every fit failed at its first step."""
    lik = Ordinal(3)
    f = torch.tensor([-2.0, 0.0, 2.0, 0.5], dtype=torch.float64, requires_grad=True)
    lik.log_prob(_t([0, 1, 2, 2]), f).sum().backward()
    grads = [f.grad, lik.first_cutpoint.grad, lik.raw_gaps.grad]
    assert all(bool(torch.isfinite(g).all()) for g in grads)
    # d/df log Phi(b_0 - f) at y = 0, f = -2: -phi(b_0 - f) / Phi(b_0 - f), b_0 = -0.5
    z = -0.5 + 2.0
    np.testing.assert_allclose(f.grad[0].item(), -stats.norm.pdf(z) / stats.norm.cdf(z),
                               rtol=1e-10)


def test_ordinal_fit_predicts_the_grades():
    rng = np.random.default_rng(2)
    X = rng.uniform(-3, 3, (300, 1))
    grades = np.digitize(np.sin(X[:, 0]) + 0.2 * rng.standard_normal(300), [-0.5, 0.5])
    model = lg.SVGP(num_inducing=10, likelihood="ordinal")
    model.fit(X[:200], grades[:200].astype(float), optimizer="natural", max_steps=80, lr=0.03,
              seed=0)
    probs = model.likelihood.class_probabilities(*model.predict_f(X[200:]))
    accuracy = np.mean(probs.detach().numpy().argmax(-1) == grades[200:])
    majority = np.bincount(grades[200:]).max() / 100
    assert model.likelihood.num_classes == 3
    assert accuracy > majority + 0.2, (accuracy, majority)
