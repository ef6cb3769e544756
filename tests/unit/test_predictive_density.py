"""Predictive log densities against independent adaptive quadrature (scipy), per
likelihood, including q(f) much wider than the likelihood (issue 29: the Poisson log
density was off by 1.7 nats at predictive variance 50)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import latentgp as lg

integrate = pytest.importorskip("scipy.integrate", reason="scipy gives the reference quadrature")
stats = pytest.importorskip("scipy.stats")


def _reference(pdf, y, m, v):
    """``log int p(y | f) N(f | m, v) df`` by adaptive quadrature on m +- 14 sd."""
    s = math.sqrt(v)
    lo, hi = m - 14 * s, m + 14 * s
    val, _ = integrate.quad(
        lambda f: pdf(y, f) * stats.norm.pdf(f, m, s), lo, hi, limit=2000, epsabs=0, epsrel=1e-12,
        points=[p for p in (math.log(y + 0.5) - 1, math.log(y + 0.5), math.log(y + 0.5) + 1)
                if lo < p < hi] or None,
    )
    return math.log(val)


CASES = [(m, v, y) for m in (-5.0, 0.0, 5.0) for v in (0.01, 1.0, 50.0) for y in (0.0, 3.0, 40.0)]


def test_poisson_log_density_matches_adaptive_quadrature_for_wide_q():
    lik = lg.likelihoods.Poisson()
    m, v, y = (torch.tensor(c, dtype=torch.float64) for c in zip(*CASES, strict=True))
    with torch.no_grad():
        got = lik.predictive_log_density(y, m, v).numpy()
    def pmf(yy, f):
        return stats.poisson.pmf(yy, math.exp(f))

    ref = [_reference(pmf, yy, mm, vv) for mm, vv, yy in CASES]
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4)


@pytest.mark.parametrize(
    "lik, pdf, ys",
    [
        (lg.likelihoods.Laplace(scale=0.3), lambda y, f: stats.laplace.pdf(y, f, 0.3), (0.0, 2.5)),
        (lg.likelihoods.StudentT(df=4.0, scale=0.5),
         lambda y, f: stats.t.pdf(y, 4.0, f, 0.5), (0.0, 3.0)),
    ],
)
def test_location_likelihoods_match_adaptive_quadrature(lik, pdf, ys):
    for y in ys:
        for m, v in ((0.0, 0.05), (1.0, 4.0), (-2.0, 50.0)):
            t = [torch.tensor([c], dtype=torch.float64) for c in (y, m, v)]
            with torch.no_grad():
                got = float(lik.predictive_log_density(*t))
            s = math.sqrt(v)
            def integrand(f, y=y, m=m, s=s):
                return pdf(y, f) * stats.norm.pdf(f, m, s)

            val, _ = integrate.quad(integrand, m - 14 * s, m + 14 * s, points=[y], limit=2000,
                                    epsabs=0, epsrel=1e-12)
            ref = math.log(val)
            assert abs(got - ref) < 1e-4, (y, m, v, got, ref)


def test_the_quadrature_node_knob_improves_the_density():
    """``lg.config(num_quadrature_nodes=n)``: 8 nodes miss the wide-q Poisson density,
    the default 128 and 256 meet the reference."""
    lik = lg.likelihoods.Poisson()
    y, m, v = (torch.tensor([c], dtype=torch.float64) for c in (40.0, 0.0, 50.0))

    def pmf(yy, f):
        return stats.poisson.pmf(yy, math.exp(f))

    ref = _reference(pmf, 40.0, 0.0, 50.0)
    errors = {}
    for n in (8, 128, 256):
        with lg.config(num_quadrature_nodes=n), torch.no_grad():
            errors[n] = abs(float(lik.predictive_log_density(y, m, v)) - ref)
    assert errors[8] > 1e-3 and errors[128] < 1e-6 and errors[256] < 1e-6, errors


def test_the_predictive_sample_knob_improves_a_two_latent_density():
    """``lg.config(num_predictive_samples=S)`` for a likelihood of two latents without a
    closed form (y ~ N(f_1, exp(f_2)) as a plain function): the Monte Carlo density
    approaches a 80 x 80 Gauss-Hermite product rule as S grows."""
    lik = lg.likelihoods.CallableLikelihood(
        lambda y, f: -0.5 * (math.log(2 * math.pi) + f[..., 1] + (y - f[..., 0]) ** 2
                             / torch.exp(f[..., 1])),
        latent_dim=2,
    )
    y = torch.tensor([0.7, -1.5], dtype=torch.float64)
    mean = torch.tensor([[0.2, -1.0], [0.0, 0.5]], dtype=torch.float64)
    var = torch.tensor([[0.3, 0.4], [0.5, 0.2]], dtype=torch.float64)
    x, w = np.polynomial.hermite_e.hermegauss(80)
    w = w / w.sum()
    ref = []
    for n in range(2):
        f1 = mean[n, 0].item() + math.sqrt(var[n, 0].item()) * x[:, None]
        f2 = mean[n, 1].item() + math.sqrt(var[n, 1].item()) * x[None, :]
        dens = stats.norm.pdf(y[n].item(), f1, np.exp(0.5 * f2))
        ref.append(math.log((w[:, None] * w[None, :] * dens).sum()))
    errors = {}
    for S in (50, 200_000):
        with lg.config(num_predictive_samples=S), torch.no_grad():
            got = lik.predictive_log_density(y, mean, var).numpy()
        errors[S] = float(np.abs(got - ref).max())
    assert errors[200_000] < 5e-3 and errors[200_000] < errors[50], errors


def test_the_new_knobs_are_checked():
    with pytest.raises(ValueError, match="num_quadrature_nodes must be an integer >= 2"):
        lg.config(num_quadrature_nodes=1).__enter__()
    with pytest.raises(ValueError, match="num_predictive_samples must be an integer >= 1"):
        lg.config(num_predictive_samples=0).__enter__()


@pytest.mark.parametrize("link", ["logit", "probit"])
def test_bernoulli_log_density_matches_adaptive_quadrature_for_wide_q(link):
    lik = lg.likelihoods.Bernoulli(link=link)
    cdf = (lambda f: 1 / (1 + math.exp(-f))) if link == "logit" else stats.norm.cdf
    for y in (0.0, 1.0):
        for m, v in ((-3.0, 0.01), (0.5, 1.0), (2.0, 50.0)):
            t = [torch.tensor([c], dtype=torch.float64) for c in (y, m, v)]
            with torch.no_grad():
                got = float(lik.predictive_log_density(*t))
            s = math.sqrt(v)
            val, _ = integrate.quad(
                lambda f, y=y, m=m, s=s: (cdf(f) if y else 1 - cdf(f)) * stats.norm.pdf(f, m, s),
                m - 14 * s, m + 14 * s, limit=2000, epsabs=0, epsrel=1e-12,
            )
            assert abs(got - math.log(val)) < 1e-6, (link, y, m, v, got, math.log(val))
