"""Issue 11, part 4: property-based tests (hypothesis) over shapes, dtypes and values.

Kernels: symmetric, positive semi-definite up to round-off, ``diag`` equal to the
diagonal of the full matrix, ``K(X, X)`` equal to ``K(X)``, batch shapes.  Likelihoods:
``expected_log_prob`` (Gauss-Hermite or closed form) inside a Monte Carlo confidence
interval, ``log_prob`` finite on the support, predictive variances >= 0.  Conditionals:
marginal variances >= 0 and equal to a dense computation.  Models and estimators:
predictive variances never negative, predict shapes.  Budgets are set so that the whole
file runs in well under 40 s.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import latentgp as lg
from latentgp import kernels as K
from latentgp import likelihoods as L
from latentgp.variational import conditional_marginals

_QUIET = [HealthCheck.too_slow]
FAST = settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=_QUIET)
SLOWER = settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=_QUIET)

KERNELS = {
    "rbf": lambda ls, v: K.RBF(lengthscale=ls, variance=v),
    "matern12": lambda ls, v: K.Matern12(lengthscale=ls, variance=v),
    "matern32": lambda ls, v: K.Matern32(lengthscale=ls, variance=v),
    "matern52": lambda ls, v: K.Matern52(lengthscale=ls, variance=v),
    "linear": lambda ls, v: K.Linear(variance=v),
    "periodic": lambda ls, v: K.Periodic(period=1.3, lengthscale=ls, variance=v),
    "sum": lambda ls, v: K.RBF(lengthscale=ls, variance=v) + K.Matern32(lengthscale=2 * ls),
    "product": lambda ls, v: K.RBF(lengthscale=ls, variance=v) * K.Linear(),
}
DTYPES = {"float64": torch.float64, "float32": torch.float32}
EPS = {torch.float64: 1e-10, torch.float32: 1e-4}


@st.composite
def kernel_inputs(draw):
    name = draw(st.sampled_from(sorted(KERNELS)))
    dtype = DTYPES[draw(st.sampled_from(sorted(DTYPES)))]
    n = draw(st.integers(1, 12))
    d = draw(st.integers(1, 3))
    scale = 10.0 ** draw(st.integers(-3, 3))
    seed = draw(st.integers(0, 2**16))
    ls = 10.0 ** draw(st.floats(-1.5, 1.5))
    v = 10.0 ** draw(st.floats(-2, 2))
    dup = draw(st.booleans())
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * scale
    if dup and n > 1:
        X[-1] = X[0]  # a duplicated input
    return name, dtype, torch.as_tensor(X, dtype=dtype), ls * scale, v


@FAST
@given(kernel_inputs())
def test_kernel_matrix_is_symmetric_psd_with_matching_diag(args):
    name, dtype, X, ls, v = args
    k = KERNELS[name](ls, v).build(X.shape[1], dtype=dtype)
    with torch.no_grad():
        Kxx = k(X)
        Kxz = k(X, X)
        dg = k.diag(X)
    n = X.shape[0]
    assert Kxx.shape == (n, n) and Kxz.shape == (n, n) and dg.shape == (n,)
    assert Kxx.dtype == dtype and dg.dtype == dtype
    assert torch.isfinite(Kxx).all()
    top = float(Kxx.abs().max().clamp_min(1e-300))
    eps = EPS[dtype]
    assert float((Kxx - Kxx.mT).abs().max()) <= eps * top
    ev = torch.linalg.eigvalsh(Kxx.double())
    assert float(ev.min()) >= -eps * max(float(ev.abs().max()), 1e-300) * n
    torch.testing.assert_close(dg, Kxx.diagonal(), rtol=eps * 10, atol=eps * top)
    torch.testing.assert_close(Kxz, Kxx, rtol=1e-3 if dtype == torch.float32 else 1e-7,
                               atol=eps * top * 10)  # fmt: skip


@FAST
@given(
    name=st.sampled_from(["rbf", "matern32", "linear", "periodic"]),
    batch=st.integers(1, 3),
    n=st.integers(1, 6),
    m=st.integers(1, 5),
)
def test_kernel_batch_shapes(name, batch, n, m):
    k = KERNELS[name](0.8, 1.5).build(2, batch_shape=(batch,))
    with torch.no_grad():
        for p in k.parameters():  # a different value per batch member
            p.add_(torch.linspace(0, 0.5, batch).reshape(batch, *([1] * (p.ndim - 1))))
        X = torch.randn(n, 2, dtype=torch.float64)
        Z = torch.randn(m, 2, dtype=torch.float64)
        assert k(X).shape == (batch, n, n)
        assert k(X, Z).shape == (batch, n, m)
        assert k.diag(X).shape == (batch, n)
        torch.testing.assert_close(k.diag(X), k(X).diagonal(dim1=-2, dim2=-1))


# ---------------------------------------------------------------------- likelihoods
def _draw_y(lik_name, rng, n):
    if lik_name in ("bernoulli", "probit"):
        return rng.integers(0, 2, n).astype(float)
    if lik_name == "poisson":
        return rng.poisson(3.0, n).astype(float)
    return rng.normal(size=n) * 2


LIKELIHOODS = {
    "gaussian": lambda: L.Gaussian(variance=0.3),
    "bernoulli": lambda: L.Bernoulli("logit"),
    "probit": lambda: L.Bernoulli("probit"),
    "poisson": lambda: L.Poisson(),
    "studentt": lambda: L.StudentT(df=4.0, scale=0.5),
    "laplace": lambda: L.Laplace(scale=0.6),
}


@FAST
@given(
    name=st.sampled_from(sorted(LIKELIHOODS)),
    seed=st.integers(0, 2**16),
    mean=st.floats(-3, 3),
    log_var=st.floats(-6, math.log(2.0)),
)
def test_expected_log_prob_matches_monte_carlo(name, seed, mean, log_var):
    lik = LIKELIHOODS[name]()
    rng = np.random.default_rng(seed)
    y = torch.as_tensor(_draw_y(name, rng, 4))
    m = torch.full((4,), mean, dtype=torch.float64)
    v = torch.full((4,), math.exp(log_var), dtype=torch.float64)
    S = 20000
    with torch.no_grad():
        quad = lik.expected_log_prob(y, m, v)
        f = m + v.sqrt() * torch.as_tensor(rng.normal(size=(S, 4)))
        lp = lik.log_prob(y, f)
    mc, se = lp.mean(0), lp.std(0) / math.sqrt(S)
    assert torch.isfinite(quad).all()
    # 5 standard errors, plus the quadrature's own small error
    assert torch.all((quad - mc).abs() <= 5 * se + 1e-3 * (1 + mc.abs())), (quad, mc, se)


@FAST
@given(
    name=st.sampled_from(sorted(LIKELIHOODS)),
    seed=st.integers(0, 2**16),
    f_scale=st.floats(0.0, 30.0),
    dtype=st.sampled_from([torch.float64, torch.float32]),
)
def test_log_prob_finite_on_support_and_predictive_variance_nonnegative(name, seed, f_scale, dtype):
    lik = LIKELIHOODS[name]()
    rng = np.random.default_rng(seed)
    n = 8
    y = torch.as_tensor(_draw_y(name, rng, n), dtype=dtype)
    f = torch.as_tensor(rng.uniform(-1, 1, n) * f_scale, dtype=dtype)
    with torch.no_grad():
        lp = lik.log_prob(y.double(), f.double())
        assert torch.isfinite(lp).all() and (lp <= 1e-9 + 10).all()
        if name in ("bernoulli", "probit", "poisson"):
            assert (lp <= 1e-12).all()  # a probability mass is at most one
        var = torch.as_tensor(rng.uniform(0, 1, n) * f_scale + 1e-12, dtype=torch.float64)
        pm, pv = lik.predictive_moments(f.double(), var)
    assert torch.isfinite(pm).all() and torch.isfinite(pv).all()
    assert (pv >= 0).all()


# --------------------------------------------------------------------- conditionals
@FAST
@given(
    seed=st.integers(0, 2**16),
    m=st.integers(1, 8),
    b=st.integers(1, 10),
    whiten=st.booleans(),
    mode=st.sampled_from(["solve", "quad"]),
    ls=st.floats(0.3, 3.0),
    s_scale=st.floats(0.0, 2.0),
)
def test_conditional_marginals_nonnegative_and_match_dense(seed, m, b, whiten, mode, ls, s_scale):
    rng = np.random.default_rng(seed)
    k = K.RBF(lengthscale=ls).build(1)
    Z = torch.as_tensor(np.sort(rng.uniform(-3, 3, (m, 1)), 0))
    X = torch.as_tensor(rng.uniform(-4, 4, (b, 1)))
    q_mu = torch.as_tensor(rng.normal(size=(1, m)))
    S = np.tril(rng.normal(size=(m, m))) * s_scale
    S[np.diag_indices(m)] = np.abs(S[np.diag_indices(m)]) + 1e-3
    q_sqrt = torch.as_tensor(S)[None]
    with torch.no_grad(), lg.config(marginals=mode):
        Kzz = k(Z) + 1e-6 * torch.eye(m, dtype=torch.float64)
        Lzz = torch.linalg.cholesky(Kzz)[None]
        Kzx = k(Z, X)[None]
        kxx = k.diag(X)[None]
        mean, var = conditional_marginals(Kzx, kxx, Lzz, q_mu, q_sqrt, whiten)
    # dense, independent: q(u) = N(q_mu, S S^T) (or of v = L^{-1} u when whitened)
    Kzz_, Kzx_, L_ = Kzz.numpy(), Kzx[0].numpy(), Lzz[0].numpy()
    A = np.linalg.solve(L_, Kzx_) if whiten else np.linalg.solve(Kzz_, Kzx_)  # (m, b)
    dense_mean = A.T @ q_mu[0].numpy()
    prior = kxx[0].numpy() - np.einsum("mb,mn,nb->b", Kzx_, np.linalg.inv(Kzz_), Kzx_)
    dense_var = prior + np.sum((S.T @ A) ** 2, 0)
    assert mean.shape == (1, b) and var.shape == (1, b)
    assert (var >= 0).all()
    # the solve path loses ~eps * cond(Kzz) of the scale to round-off; the quad-form path
    # folds Kzz^{-1} S Kzz^{-1} into one matrix first and so loses ~eps * cond(Kzz)^2, which
    # is why config.marginals="auto" only takes it when cond(Kzz) is below ~1e6
    size = 1.0 + np.abs(q_mu.numpy()).max() + S.max() ** 2
    cond = np.linalg.cond(Kzz_)
    rel = max(1e-8, 1e-13 * cond) if mode == "solve" else max(1e-8, 1e-13 * cond, 1e-15 * cond**2)
    size = max(size, np.abs(dense_mean).max(), np.abs(dense_var).max())
    np.testing.assert_allclose(mean[0].numpy(), dense_mean, rtol=rel, atol=rel * size)
    np.testing.assert_allclose(var[0].numpy(), np.maximum(dense_var, 0), rtol=rel, atol=rel * size)


# ------------------------------------------------------------------ models, estimators
@SLOWER
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(2, 25),
    ls=st.floats(0.05, 20.0),
    noise=st.floats(1e-6, 1.0),
    far=st.floats(0.0, 1e3),
    dtype=st.sampled_from([torch.float64, torch.float32]),
)
def test_exact_gp_predictive_variance_never_negative(seed, n, ls, noise, far, dtype):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 1))
    X[-1] = X[0]  # duplicated inputs
    y = np.sin(3 * X[:, 0]) + 0.05 * rng.normal(size=n)
    m = lg.ExactGP(kernel=K.RBF(lengthscale=ls), likelihood=L.Gaussian(noise), dtype=dtype)
    m.fit(X, y, max_steps=1)
    Xt = np.r_[X, X + 1e-9, X + far, [[1e4]]]
    fm, fv = m.predict_f(Xt)
    ym, yv = m.predict_y(Xt)
    assert np.all(np.isfinite(fm)) and np.all(np.isfinite(fv))
    assert np.all(fv >= 0) and np.all(yv >= fv * (1 - 1e-5))


@SLOWER
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(6, 20),
    d=st.integers(1, 3),
    nt=st.integers(1, 5),
    which=st.sampled_from(["regressor", "classifier", "count"]),
)
def test_sklearn_predict_shapes(seed, n, d, nt, which):
    from latentgp.sklearn import GPClassifier, GPCountRegressor, GPRegressor

    rng = np.random.default_rng(seed)
    X, Xt = rng.normal(size=(n, d)), rng.normal(size=(nt, d))
    if which == "regressor":
        est = GPRegressor(max_steps=3).fit(X, X[:, 0] + 0.1 * rng.normal(size=n))
        mean, std = est.predict(Xt, return_std=True)
        assert mean.shape == (nt,) and std.shape == (nt,) and np.all(std >= 0)
    elif which == "classifier":
        labels = np.array(["a", "b", "c"])[np.arange(n) % 3]
        est = GPClassifier(max_steps=3, num_inducing=5).fit(X, labels)
        p = est.predict_proba(Xt)
        assert p.shape == (nt, 3) and np.all(p >= 0)
        np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-6)
        assert set(est.predict(Xt)) <= {"a", "b", "c"}
    else:
        est = GPCountRegressor(max_steps=3, num_inducing=5).fit(X, rng.poisson(2.0, n))
        mean, std = est.predict(Xt, return_std=True)
        assert mean.shape == (nt,) and np.all(mean > 0) and np.all(std >= 0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_svgp_predictive_variance_nonnegative_far_and_near(dtype):
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (40, 1))
    y = np.sin(3 * X[:, 0])
    m = lg.SVGP(num_inducing=10, dtype=dtype).fit(X, y, max_steps=20, lr=0.05, seed=0)
    Xt = np.r_[m.Z.detach().numpy().reshape(-1, 1), [[1e3], [-1e3]], X]
    fm, fv = m.predict_f(Xt)
    assert np.all(np.isfinite(fv)) and np.all(fv >= 0)
