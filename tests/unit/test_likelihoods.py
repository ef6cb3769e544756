import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from latentgp import likelihoods as L
from latentgp.likelihoods.base import Likelihood

T = lambda a: torch.as_tensor(np.asarray(a, dtype=np.float64))  # noqa: E731


def _generic_ell(lik, y, m, v):
    """The base class's Gauss-Hermite expectation, bypassing any closed form."""
    return Likelihood.expected_log_prob(lik, y, m, v)


def _mc_ell(lik, y, m, v, S=200_000, seed=0):
    g = torch.Generator().manual_seed(seed)
    f = m + v.sqrt() * torch.randn((S,) + tuple(m.shape), generator=g, dtype=m.dtype)
    lp = lik.log_prob(y, f)
    return lp.mean(0), lp.std(0) / math.sqrt(S)


@pytest.mark.parametrize(
    "lik,y",
    [
        (L.Gaussian(variance=0.3), [0.2, -1.0, 2.5]),
        (L.Poisson(exposure=2.0, offset=0.3), [0.0, 3.0, 7.0]),
        (L.Laplace(scale=0.7), [0.2, -1.0, 2.5]),
    ],
)
def test_closed_form_equals_quadrature_and_monte_carlo(lik, y):
    y = T(y)
    m, v = T([0.1, -0.5, 1.2]), T([0.2, 1.5, 0.05])
    closed = lik.expected_log_prob(y, m, v).detach()
    # adaptive quadrature, independent of the library's integrators
    for i in range(3):
        yi, mi, si = float(y[i]), float(m[i]), float(v[i]) ** 0.5

        def integrand(f, yi=yi, mi=mi, si=si):
            lp = lik.log_prob(T([yi]), T([f])).detach()
            return float(lp) * stats.norm.pdf(f, mi, si)

        ref, _ = integrate.quad(integrand, mi - 12 * si, mi + 12 * si, points=[yi], limit=200)
        assert float(closed[i]) == pytest.approx(ref, rel=1e-7, abs=1e-9)
    if not isinstance(lik, L.Laplace):  # |y - f| is not smooth enough for 20-point GH
        gh = _generic_ell(lik, y, m, v).detach()
        torch.testing.assert_close(closed, gh, rtol=1e-7, atol=1e-8)
    mc, se = _mc_ell(lik, y, m, v)
    assert torch.all((closed - mc.detach()).abs() < 5 * se.detach() + 1e-9)


@pytest.mark.parametrize("lik", [L.Bernoulli("logit"), L.Bernoulli("probit"), L.StudentT(df=5)])
def test_quadrature_equals_monte_carlo(lik):
    y = T([1.0, 0.0, 1.0]) if isinstance(lik, L.Bernoulli) else T([0.3, -2.0, 1.0])
    m, v = T([0.4, -0.2, 2.0]), T([0.5, 2.0, 0.1])
    gh = lik.expected_log_prob(y, m, v).detach()
    mc, se = _mc_ell(lik, y, m, v)
    assert torch.all((gh - mc.detach()).abs() < 5 * se.detach() + 1e-9)


def test_softmax_monte_carlo_ell_is_unbiased():
    lik = L.Softmax(3)
    y = T([0, 2])
    m = T([[0.5, -0.2, 0.1], [1.0, 0.0, -1.0]])
    v = T([[0.3, 0.5, 0.2], [1.0, 0.1, 0.4]])
    torch.manual_seed(0)
    est = torch.stack([lik.expected_log_prob(y, m, v) for _ in range(400)]).mean(0)
    ref, se = _mc_ell(lik, y, m, v, S=400_000)
    assert torch.all((est - ref).abs() < 0.01)


@pytest.mark.parametrize(
    "lik", [L.Gaussian(variance=0.4), L.StudentT(df=3, scale=0.5), L.Laplace(scale=0.6)]
)
def test_continuous_densities_integrate_to_one(lik):
    f = torch.tensor(0.7, dtype=torch.float64)
    dens = lambda t: float(torch.exp(lik.log_prob(T(t), f)).detach())  # noqa: E731
    total, _ = integrate.quad(dens, -np.inf, np.inf, limit=200)
    assert total == pytest.approx(1.0, abs=1e-7)


def test_discrete_densities_sum_to_one():
    f = torch.tensor([0.3], dtype=torch.float64)
    b = L.Bernoulli("probit")
    assert float(sum(torch.exp(b.log_prob(T([c]), f)) for c in (0.0, 1.0))) == pytest.approx(1.0)
    p = L.Poisson(exposure=1.5)
    ys = torch.arange(0, 200, dtype=torch.float64)
    assert float(torch.exp(p.log_prob(ys, f)).sum()) == pytest.approx(1.0, abs=1e-12)
    sm = L.Softmax(4)
    fs = T([[0.1, -2.0, 1.0, 0.5]])
    assert float(sum(torch.exp(sm.log_prob(T([c]), fs)) for c in range(4))) == pytest.approx(1.0)


def test_student_t_matches_scipy():
    lik = L.StudentT(df=4.0, scale=0.5)
    y, f = T([0.3, -2.0]), T([0.0, 1.0])
    ref = stats.t.logpdf(np.array([0.3, -3.0]), df=4.0, scale=0.5)
    np.testing.assert_allclose(lik.log_prob(y, f).detach().numpy(), ref, rtol=1e-9)


def test_predictive_moments_against_monte_carlo():
    g = torch.Generator().manual_seed(3)
    m, v = T([0.3, -1.0]), T([0.4, 0.9])
    f = m + v.sqrt() * torch.randn(400_000, 2, generator=g, dtype=torch.float64)
    pois = L.Poisson(exposure=1.0)
    mean, var = pois.predictive_moments(m, v)
    y = torch.poisson(torch.exp(f), generator=g)
    np.testing.assert_allclose(mean.detach(), y.mean(0), rtol=0.01)
    np.testing.assert_allclose(var.detach(), y.var(0), rtol=0.03)
    for link in ("logit", "probit"):
        b = L.Bernoulli(link)
        p, _ = b.predictive_moments(m, v)
        np.testing.assert_allclose(p, b.conditional_mean(f).mean(0), atol=3e-3)


def test_probit_predictive_density_closed_form_equals_quadrature():
    b = L.Bernoulli("probit")
    y, m, v = T([1.0, 0.0]), T([0.5, 0.7]), T([2.0, 0.3])
    closed = b.predictive_log_density(y, m, v)
    gh = Likelihood.predictive_log_density(b, y, m, v)
    torch.testing.assert_close(closed, gh, rtol=1e-8, atol=1e-10)


def test_gaussian_predictive_density_closed_form():
    g = L.Gaussian(variance=0.2)
    y, m, v = T([0.1]), T([0.5]), T([0.3])
    ref = stats.norm.logpdf(0.1, 0.5, math.sqrt(0.5))
    assert float(g.predictive_log_density(y, m, v)) == pytest.approx(ref, rel=1e-12)
    assert float(Likelihood.predictive_log_density(g, y, m, v)) == pytest.approx(ref, rel=1e-8)


def test_target_validation_messages():
    with pytest.raises(ValueError, match="binary labels 0 or 1.*found 2 at row 1"):
        L.Bernoulli().validate_targets(T([0, 2, 1]))
    with pytest.raises(ValueError, match="non-negative integer counts.*-1 at row 2"):
        L.Poisson().validate_targets(T([0, 1, -1]))
    with pytest.raises(ValueError, match="non-negative integer counts.*1.5"):
        L.Poisson().validate_targets(T([1.5]))
    with pytest.raises(ValueError, match="class labels 0..2"):
        L.Softmax(3).validate_targets(T([0, 3]))


def test_callable_likelihood_and_names():
    lik = L.likelihood_from_name(lambda y, f: -0.5 * (y - f) ** 2)
    y, m, v = T([0.5]), T([0.0]), T([1.0])
    # E[-(y-f)^2/2] = -((y-m)^2 + v)/2
    assert float(lik.expected_log_prob(y, m, v)) == pytest.approx(-0.625, rel=1e-10)
    assert L.likelihood_from_name("probit").link == "probit"
    with pytest.raises(ValueError, match="unknown likelihood"):
        L.likelihood_from_name("weibullish")


def test_softmax_probabilities_are_symmetric_and_accurate():
    """Equal marginals give exactly 1/C (issue 29: 0.305, 0.327, 0.368 before); unequal
    ones match a large independent Monte Carlo estimate within the stated error."""
    lik = L.Softmax(3)
    mean = torch.zeros(2, 3, dtype=torch.float64)
    var = torch.full((2, 3), 2.0, dtype=torch.float64)
    p, _ = lik.predictive_moments(mean, var)
    torch.testing.assert_close(p, torch.full_like(p, 1 / 3), rtol=0, atol=1e-12)
    m = torch.tensor([[0.5, -1.0, 0.2]], dtype=torch.float64)
    v = torch.tensor([[1.0, 3.0, 0.5]], dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    f = m + v.sqrt() * torch.randn(400_000, 1, 3, generator=g, dtype=torch.float64)
    ref = torch.softmax(f, -1).mean(0)
    got, _ = lik.predictive_moments(m, v)
    assert float((got - ref).abs().max()) < 0.5 / (3 * 1024) ** 0.5 * 3
