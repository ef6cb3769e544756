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
