"""The score-function integrators: exact under quadrature, unbiased by Monte Carlo, and
usable by any model with a likelihood that can only be evaluated (numpy code)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.likelihoods import integrators

DT = torch.float64


def _gaussian_case():
    """log p = -(y - f)^2 / 2: E = -((y - m)^2 + v) / 2, dE/dm = y - m, dE/dv = -1/2."""
    y = torch.tensor([0.3, -1.0, 2.0], dtype=DT)
    m = torch.tensor([0.1, 0.5, 1.0], dtype=DT, requires_grad=True)
    v = torch.tensor([0.2, 1.5, 0.7], dtype=DT, requires_grad=True)
    exact = -0.5 * ((y - m.detach()) ** 2 + v.detach())
    return y, m, v, exact, (y - m.detach()), torch.full_like(exact, -0.5)


def test_quadrature_score_is_exact_for_a_polynomial_log_density():
    y, m, v, exact, gm, gv = _gaussian_case()
    x, w = lg.likelihoods.gauss_hermite(20, DT, "cpu")
    out = integrators.quadrature_score(lambda f: (-0.5 * (y - f) ** 2).detach(), m, v, x, w)
    torch.testing.assert_close(out.detach(), exact, rtol=1e-12, atol=1e-12)
    dm, dv = torch.autograd.grad(out.sum(), (m, v))
    torch.testing.assert_close(dm, gm, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(dv, gv, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("control_variates", [True, False])
def test_score_function_gradient_is_unbiased(control_variates):
    """Mean of the estimator over many draws equals the exact gradient, to 4 standard
    errors; control variates lower the spread."""
    y, m, v, exact, gm, gv = _gaussian_case()
    g = torch.Generator().manual_seed(0)
    grads = []
    for _ in range(300):
        eps = torch.randn((50, 3, 1), generator=g, dtype=DT)

        def log_p(f):
            return (-0.5 * (y[:, None] - f) ** 2)[..., 0].detach()

        out = integrators.score_function(log_p, m[:, None], v[:, None], eps, control_variates)
        grads.append(torch.cat(torch.autograd.grad(out.sum(), (m, v))))
    G = torch.stack(grads)
    se = G.std(0) / np.sqrt(len(G))
    assert torch.all((G.mean(0) - torch.cat([gm, gv])).abs() < 4 * se + 1e-12)


def test_svgp_trains_with_a_numpy_likelihood_by_the_score_integrator():
    """SVGP (not only SAVIGP) with a numpy log density: the objective and its gradient
    equal those of the closed-form Gaussian likelihood (quadrature is exact here)."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (50, 1))
    y = np.sin(2 * X[:, 0]) + 0.2 * rng.normal(size=50)
    s2 = 0.3

    def numpy_log_lik(yv, f):
        assert isinstance(f, np.ndarray)
        return -0.5 * np.log(2 * np.pi * s2) - 0.5 * (yv - f) ** 2 / s2

    kw = dict(num_inducing=8, normalize_y=False)
    black = lg.SVGP(likelihood=numpy_log_lik, **kw).initialize(X, y, seed=0)
    ref = lg.SVGP(likelihood=lg.likelihoods.Gaussian(variance=s2), **kw).initialize(X, y, seed=0)
    ref.likelihood.raw_variance.requires_grad_(False)
    Xt, yt = torch.tensor(X), torch.tensor(y)
    vals, grads = [], []
    for model in (black, ref):
        obj = model.objective(Xt, yt, 50)
        vals.append(float(obj))
        grads.append(torch.autograd.grad(obj, [model.q.q_mu, model.Z_raw]))
    assert black.likelihood.differentiable is False and black.likelihood.evaluates_numpy
    assert vals[0] == pytest.approx(vals[1], rel=1e-10)
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)
    black.fit(X, y, max_steps=200, progress=False, seed=0)
    assert black.history_.objective[-1] > black.history_.objective[0]
