"""ExactGP.condition_on (a rank-k update of the cached Cholesky factor), ExactGP.set_data,
linalg.cholesky_append and the differentiable joint predictive GPModel.predict_f_joint."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import latentgp as lg
import latentgp.models.exact as exact_module
from latentgp.linalg import cholesky_append


def _data(n=160, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=g, dtype=torch.float64)
    y = torch.sin(6 * X[:, 0]) + X[:, 1] + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    return X, y


@pytest.fixture(scope="module")
def fitted():
    X, y = _data()
    return lg.ExactGP().fit(X[:120], y[:120], max_steps=30), X, y


def test_cholesky_append_equals_a_new_factor():
    g = torch.Generator().manual_seed(1)
    A = torch.randn(30, 30, generator=g, dtype=torch.float64)
    K = A @ A.T + 30 * torch.eye(30, dtype=torch.float64)
    L = torch.linalg.cholesky(K[:25, :25])
    out = cholesky_append(L, K[:25, 25:], K[25:, 25:])
    assert torch.allclose(out, torch.linalg.cholesky(K), atol=1e-12, rtol=0)


def test_condition_on_equals_the_model_on_all_data(fitted):
    model, X, y = fitted
    state = copy.deepcopy(model.state_dict())
    new = model.condition_on(X[120:], y[120:])
    ref = copy.deepcopy(model).set_data(X, y)
    Xs = _data(40, seed=5)[0]
    m1, K1 = new.predict_f_full_cov(Xs)
    m2, K2 = ref.predict_f_full_cov(Xs)
    np.testing.assert_allclose(m1, m2, rtol=0, atol=1e-8)
    np.testing.assert_allclose(K1, K2, rtol=0, atol=1e-8)
    assert abs(new.log_marginal_likelihood() - ref.log_marginal_likelihood()) < 1e-8
    # the original is untouched: same state, same predictions as before
    for k, v in model.state_dict().items():
        assert torch.equal(v, state[k]), k
    assert model.X_train.shape[0] == 120 and new.X_train.shape[0] == 160


def test_condition_on_does_not_refactorise(fitted, monkeypatch):
    model, X, y = fitted
    model.prediction_cache()  # the factor of the 120 points exists before

    def refuse(*args, **kwargs):
        raise AssertionError("a full Cholesky factorisation was computed")

    monkeypatch.setattr(exact_module, "cholesky", refuse)
    new = model.condition_on(X[120:130], y[120:130])
    new.predict_f(X[:5])  # served by the updated factor


def test_condition_on_checks_its_input(fitted):
    model, X, y = fitted
    with pytest.raises(ValueError, match="X_new"):
        model.condition_on(X[:3, :1], y[:3])
    with pytest.raises(ValueError, match="y_new"):
        model.condition_on(X[:3], y[:4])


def test_predict_f_joint_is_batched_and_differentiable(fitted):
    model, _, _ = fitted
    Xb = _data(12, seed=3)[0].reshape(4, 3, 2).clone().requires_grad_(True)
    mean, cov = model.predict_f_joint(Xb)
    assert mean.shape == (4, 3, 1) and cov.shape == (4, 1, 3, 3)
    m1, K1 = model.predict_f_full_cov(Xb[2].detach())
    np.testing.assert_allclose(cov[2, 0].detach().numpy(), K1[0], atol=1e-12)
    np.testing.assert_allclose(mean[2, :, 0].detach().numpy(), m1[:, 0], atol=1e-12)
    # gradient of the mean against central finite differences
    (g,) = torch.autograd.grad(mean.sum(), Xb)
    h = 1e-6
    E = torch.zeros_like(Xb)
    E[1, 2, 0] = h
    with torch.no_grad():
        fd = (model.predict_f_joint(Xb + E)[0].sum() - model.predict_f_joint(Xb - E)[0].sum())
    assert abs(float(fd) / (2 * h) - float(g[1, 2, 0])) < 1e-6
    with pytest.raises(TypeError, match="torch.Tensor"):
        model.predict_f_joint(Xb.detach().numpy())
    with pytest.raises(ValueError, match="shape"):
        model.predict_f_joint(Xb[..., :1])


def test_a_chain_of_updates_never_changes_a_model(fitted):
    model, X, y = fitted
    Xs = _data(20, seed=6)[0]
    a = model.condition_on(X[120:130], y[120:130])
    before_a = a.predict_f_full_cov(Xs)
    b = a.condition_on(X[130:140], y[130:140])
    c = a.condition_on(X[140:150], y[140:150])
    d = b.condition_on(X[150:], y[150:])
    for u, v in zip(a.predict_f_full_cov(Xs), before_a, strict=True):
        np.testing.assert_array_equal(u, v)
    chains = ((b, [*range(140)]), (c, [*range(130), *range(140, 150)]),
              (d, [*range(140), *range(150, 160)]))
    for new, rows in chains:
        ref = copy.deepcopy(model).set_data(X[rows], y[rows])
        for u, v in zip(new.predict_f_full_cov(Xs), ref.predict_f_full_cov(Xs), strict=True):
            np.testing.assert_allclose(u, v, rtol=0, atol=1e-8)
    # the factor kept in blocks is the Cholesky factor of the whole matrix
    L = d.prediction_cache()[0]
    Xd = d.X_train
    K = model.kernel(Xd) + model.likelihood.variance * torch.eye(150, dtype=X.dtype)
    with torch.no_grad():
        assert torch.allclose(L.dense(), torch.linalg.cholesky(K), atol=1e-10, rtol=0)
        B = torch.randn(4, 150, 3, dtype=X.dtype, generator=torch.Generator().manual_seed(0))
        assert torch.allclose(L.solve_lower(B), torch.linalg.solve_triangular(
            L.dense(), B, upper=False), atol=1e-10)
        assert torch.allclose(L.solve_upper_t(B), torch.linalg.solve_triangular(
            L.dense().mT, B, upper=True), atol=1e-10)


@pytest.mark.parametrize("method", ["vfe", "fitc", "sor"])
def test_sparse_condition_on_equals_set_data_on_all_data(method):
    X, y = _data(160, seed=2)
    model = lg.SparseGP(num_inducing=12, method=method).fit(X[:120], y[:120], max_steps=20)
    state = copy.deepcopy(model.state_dict())
    new = model.condition_on(X[120:], y[120:])
    ref = copy.deepcopy(model).set_data(X, y)
    Xs = _data(30, seed=8)[0]
    for u, v in zip(new.predict_f_full_cov(Xs), ref.predict_f_full_cov(Xs), strict=True):
        np.testing.assert_allclose(u, v, rtol=0, atol=1e-8)
    assert abs(new.log_marginal_likelihood() - ref.log_marginal_likelihood()) < 1e-8
    for k, v in model.state_dict().items():
        assert torch.equal(v, state[k]), k
    # and the statistics changed: the new data moved the posterior
    assert np.abs(new.predict_f(Xs)[0] - model.predict_f(Xs)[0]).max() > 1e-3


@pytest.mark.parametrize("whiten", [True, False])
def test_svgp_online_conditioning_reaches_the_titsias_optimum(whiten):
    """From q(u) at the Titsias optimum of the first points, conditioning on the rest
    gives the Titsias optimum of all the points (the update is exact Gaussian algebra),
    and in two steps the same as in one."""
    X, y = _data(160, seed=3)
    model = lg.SVGP(10, whiten=whiten).fit(X, y, max_steps=50)
    first = model.clone()
    first.set_optimal_variational(X[:100], y[:100])
    state = copy.deepcopy(first.state_dict())
    new = first.condition_on(X[100:], y[100:])
    two = first.condition_on(X[100:130], y[100:130]).condition_on(X[130:], y[130:])
    ref = model.clone()
    ref.set_optimal_variational(X, y)
    Xs = _data(30, seed=9)[0]
    for m in (new, two):
        for u, v in zip(m.predict_f_full_cov(Xs), ref.predict_f_full_cov(Xs), strict=True):
            np.testing.assert_allclose(u, v, rtol=0, atol=1e-7)
    for k, v in first.state_dict().items():
        assert torch.equal(v, state[k]), k
    with pytest.raises(ValueError, match="Gaussian likelihood"):
        lg.SVGP(5, likelihood="bernoulli").fit(X, (y > 1).double(), max_steps=2).condition_on(
            X[:2], (y[:2] > 1).double()
        )
