"""The one conditional (``latentgp.variational.strategy``) against dense references.

Every inducing-point model computes q(f) through these functions, so they are checked
here against the textbook formulas written out with dense solves (test-only):
``mean = Kxz Kzz^-1 m``, ``cov = Kxx - Kxz Kzz^-1 Kzx + Kxz Kzz^-1 S Kzz^-1 Kzx``.
"""

from __future__ import annotations

import pytest
import torch

import latentgp as lg
from latentgp.variational import (
    InducingQ,
    cached_conditional,
    conditional_marginals,
    predictive_cache,
)

DT = torch.float64


def _problem(Q=2, M=5, B=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    Z = torch.randn(M, 2, generator=g, dtype=DT)
    X = torch.randn(B, 2, generator=g, dtype=DT)
    k = lg.kernels.RBF(lengthscale=0.9).build(2, (Q,))
    Kzz = k(Z) + 1e-6 * torch.eye(M, dtype=DT)
    return g, k, Z, X, Kzz, torch.linalg.cholesky(Kzz)


def _reference(k, Z, X, Kzz, Lzz, mu, S, whiten):
    """Dense joint moments of q(f) for u-space or whitened (mu, S S^T); (..., Q, B[, B])."""
    if whiten:
        mu = (Lzz @ mu[..., None])[..., 0]
        S = Lzz @ S
    A = torch.linalg.solve(Kzz, k(Z, X))  # (Q, M, B), test-only reference
    mean = (A * mu[..., None]).sum(-2)
    cov = k(X) - k(Z, X).mT @ A + A.mT @ (S @ S.mT) @ A
    return mean, cov


def _q(g, lead, Q, M, diag):
    mu = torch.randn(lead + (Q, M), generator=g, dtype=DT)
    if diag:
        sd = 0.2 + torch.rand(lead + (Q, M), generator=g, dtype=DT)
        return mu, sd, torch.diag_embed(sd)
    S = torch.tril(0.3 * torch.randn(lead + (Q, M, M), generator=g, dtype=DT))
    S = S + torch.diag_embed(0.5 + torch.rand(lead + (Q, M), generator=g, dtype=DT))
    return mu, S, S


@pytest.mark.parametrize("lead", [(), (3,)])
@pytest.mark.parametrize("whiten", [True, False])
@pytest.mark.parametrize("diag", [True, False])
@pytest.mark.parametrize("B", [3, 30])  # below and above 2 M: both fast paths
def test_marginals_cache_and_joint_agree_with_dense_reference(lead, whiten, diag, B):
    g, k, Z, X, Kzz, Lzz = _problem(B=B)
    mu, sq, S = _q(g, lead, 2, 5, diag)
    mean_ref, cov_ref = _reference(k, Z, X, Kzz, Lzz, mu, S, whiten)
    var_ref = cov_ref.diagonal(dim1=-2, dim2=-1)
    Kzx, kxx = k(Z, X), k.diag(X)

    mean, var = conditional_marginals(Kzx, kxx, Lzz, mu, sq, whiten, diag)
    assert mean.shape == var.shape == lead + (2, B)
    torch.testing.assert_close(mean, mean_ref, rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(var, var_ref, rtol=1e-7, atol=1e-9)

    for mode in ("auto", "solve"):
        with lg.config(marginals=mode):
            cache = predictive_cache(Lzz, InducingQ(mu, sq, whiten, diag))
        # diagonal components on a leading axis share one projection: no quadratic form
        assert cache.uses_quad_form == (mode == "auto" and not (lead and diag))
        m2, v2 = cached_conditional(cache, Kzx, kxx)
        torch.testing.assert_close(m2, mean_ref, rtol=1e-7, atol=1e-9)
        torch.testing.assert_close(v2, var_ref, rtol=1e-7, atol=1e-9)
        m3, c3 = cached_conditional(cache, Kzx, k(X), full_cov=True)
        torch.testing.assert_close(m3, mean_ref, rtol=1e-7, atol=1e-9)
        torch.testing.assert_close(c3, cov_ref, rtol=1e-7, atol=1e-9)


def test_old_cached_spellings_warn_and_equal_cached_conditional():
    """``cached_marginals`` / ``conditional_covariance`` (before ``cached_conditional``)
    still work, with a DeprecationWarning naming the new spelling."""
    g, k, Z, X, Kzz, Lzz = _problem(B=4)
    mu, sq, _ = _q(g, (), 2, 5, diag=False)
    cache = predictive_cache(Lzz, InducingQ(mu, sq, False))
    Kzx = k(Z, X)
    with pytest.warns(DeprecationWarning, match=r"cached_conditional\(\.\.\.\)"):
        old = lg.variational.cached_marginals(cache, Kzx, k.diag(X))
    with pytest.warns(DeprecationWarning, match="full_cov=True"):
        old_joint = lg.variational.conditional_covariance(cache, Kzx, k(X))
    for a, b in zip(old + old_joint, cached_conditional(cache, Kzx, k.diag(X))
                    + cached_conditional(cache, Kzx, k(X), full_cov=True), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_leading_component_axis_has_the_gradients_of_a_loop():
    """Mixture components as a leading axis: values and gradients (w.r.t. Kzx, Lzz and q)
    equal those of one call per component."""
    g, k, Z, X, Kzz, Lzz = _problem(B=4)
    mu, sq, _ = _q(g, (2,), 2, 5, diag=False)
    Kzx = k(Z, X).clone().requires_grad_(True)
    L = Lzz.clone().requires_grad_(True)
    mu.requires_grad_(True)
    sq.requires_grad_(True)
    w = torch.randn(2, 2, 2, 4, generator=g, dtype=DT)

    def loss(batched):
        if batched:
            m, v = conditional_marginals(Kzx, k.diag(X), L, mu, sq, True)
        else:
            parts = [conditional_marginals(Kzx, k.diag(X), L, mu[i], sq[i], True) for i in (0, 1)]
            m, v = (torch.stack([p[j] for p in parts]) for j in (0, 1))
        return (m * w[0]).sum() + (v * w[1]).sum()

    g1 = torch.autograd.grad(loss(True), (Kzx, L, mu, sq))
    g2 = torch.autograd.grad(loss(False), (Kzx, L, mu, sq))
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def test_every_inducing_model_predicts_through_the_strategy_cache():
    """SVGP, SAVIGP and SEP keep the strategy's PredictiveCache: one cache type, and the
    prediction equals the conditional evaluated from the model's own q(u)."""
    torch.manual_seed(0)
    X = torch.linspace(-2, 2, 40, dtype=DT)[:, None]
    y = torch.sin(2 * X[:, 0]) + 0.1 * torch.randn(40, dtype=DT)
    labels = (y > 0).to(DT)
    for model, target in (
        (lg.SVGP(num_inducing=8), y),
        (lg.SAVIGP(num_inducing=8, likelihood="gaussian"), y),
        (lg.SEP(num_inducing=8), labels),
    ):
        model.fit(X, target, max_steps=3, progress=False)
        cache = model.prediction_cache()
        found = [c for c in (cache if isinstance(cache, tuple) else (cache,))]
        assert any(isinstance(c, lg.variational.PredictiveCache) for c in found), model
