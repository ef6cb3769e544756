"""SVGP and ExactGP against closed forms: exact GP equality, Titsias' bound, gradients."""

import math

import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.linalg import solve_lower


def _data(n=40, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, d))
    y = np.sin(2 * X[:, 0]) + 0.3 * X[:, 1] + 0.1 * rng.standard_normal(n)
    return X, y


def _set_hypers(model, ls, var, noise):
    with torch.no_grad():
        k = model.kernel
        k.lengthscale = ls
        k.raw_variance.copy_(lg.parameters.inv_softplus(torch.tensor(var, dtype=torch.float64)))
        lik = model.likelihood
        lik.raw_variance.copy_(
            lg.parameters.inv_softplus(torch.tensor(noise - lik.min_variance, dtype=torch.float64))
        )


def _pair(X, y, Z=None, whiten=True, normalize_y=False):
    exact = lg.ExactGP(normalize_y=normalize_y).fit(X, y, max_steps=1)
    svgp = lg.SVGP(Z=X if Z is None else Z, whiten=whiten, normalize_y=normalize_y)
    svgp.fit(X, y, max_steps=1)
    for m in (exact, svgp):
        _set_hypers(m, [0.8, 1.5], 1.3, 0.05)
    return exact, svgp


@pytest.mark.parametrize("whiten", [True, False])
@pytest.mark.parametrize("normalize_y", [False, True])
def test_svgp_with_Z_equal_X_and_optimal_q_is_exact(whiten, normalize_y):
    X, y = _data()
    with lg.config(jitter=1e-10):
        exact, svgp = _pair(X, y, whiten=whiten, normalize_y=normalize_y)
        svgp.set_optimal_variational(X, y)
        elbo = svgp.elbo(X, y)
    lml = exact.log_marginal_likelihood()  # no jitter: the noise keeps K + s^2 I definite
    assert elbo == pytest.approx(lml, rel=1e-6)
    # the same predictions as the exact GP
    Xs = np.random.default_rng(1).uniform(-2.5, 2.5, size=(25, 2))
    with lg.config(jitter=1e-10):
        me, ve = exact.predict_y(Xs)
        ms, vs = svgp.predict_y(Xs)
    # unwhitened q multiplies by Kzz^{-1} (condition number ~1e8 here): looser round-off
    tol = 1e-6 if whiten else 1e-4
    np.testing.assert_allclose(ms, me, rtol=tol, atol=tol)
    np.testing.assert_allclose(vs, ve, rtol=tol, atol=tol)


def test_exact_log_marginal_matches_dense_formula():
    X, y = _data(30)
    exact, _ = _pair(X, y)
    Xt, yt = torch.tensor(X), torch.tensor(y)
    K = exact.kernel(Xt).detach() + 0.05 * torch.eye(30, dtype=torch.float64)
    dist = torch.distributions.MultivariateNormal(torch.zeros(30, dtype=torch.float64), K)
    assert exact.log_marginal_likelihood() == pytest.approx(float(dist.log_prob(yt)), rel=1e-9)


def test_svgp_elbo_at_optimal_q_equals_titsias_bound():
    X, y = _data(60)
    Z = X[::4]
    _, svgp = _pair(X, y, Z=Z)
    svgp.set_optimal_variational(X, y)
    elbo = svgp.elbo(X, y)
    with torch.no_grad():
        Xt, yt = torch.tensor(X), torch.tensor(y)
        Lzz = svgp.prior_factor()[0]
        A = solve_lower(Lzz, svgp.kernel(svgp.Z, Xt)[0])
        Qxx = A.T @ A
        s2 = float(svgp.likelihood.variance)
        cov = Qxx + s2 * torch.eye(60, dtype=torch.float64)
        dist = torch.distributions.MultivariateNormal(torch.zeros(60, dtype=torch.float64), cov)
        trace = float((svgp.kernel.diag(Xt)[0] - Qxx.diagonal()).sum())
        titsias = float(dist.log_prob(yt)) - trace / (2 * s2)
    assert elbo == pytest.approx(titsias, rel=1e-8)
    # any other q gives a lower ELBO
    with torch.no_grad():
        svgp.q.q_mu.add_(0.01)
    assert svgp.elbo(X, y) < elbo


def test_vfe_bound_below_exact():
    X, y = _data(60)
    exact, svgp = _pair(X, y, Z=X[::5])
    svgp.set_optimal_variational(X, y)
    assert svgp.elbo(X, y) < exact.log_marginal_likelihood()


@pytest.mark.parametrize("lik", ["gaussian", "bernoulli", "poisson"])
def test_elbo_gradients_match_finite_differences(lik):
    X, y = _data(20)
    if lik == "bernoulli":
        y = (y > 0).astype(float)
    if lik == "poisson":
        y = np.round(np.exp(y / 2))
    model = lg.SVGP(num_inducing=5, likelihood=lik).fit(X, y, max_steps=3, seed=0)
    with torch.no_grad():
        model.q.q_mu.normal_()
    Xt, yt = torch.tensor(X), model.scale_targets(y)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    vals = tuple(
        p.detach().clone().requires_grad_(True)
        for _, p in model.named_parameters()
        if p.requires_grad
    )

    def obj(*v):
        return torch.func.functional_call(
            model, dict(zip(names, v, strict=True)), (Xt, yt, 20), strict=False
        )

    model.forward = model.objective
    assert torch.autograd.gradcheck(obj, vals, eps=1e-6, atol=1e-5, rtol=1e-4)


def test_epochs_take_exact_number_of_steps():
    X, y = _data(100)
    m = lg.SVGP(num_inducing=10).fit(X, y, batch_size=30, epochs=3, seed=0)
    assert m.history_.steps == 3 * math.ceil(100 / 30)
    assert len(m.history_.objective) == m.history_.steps


def test_training_improves_elbo_and_predictions():
    X, y = _data(300)
    m = lg.SVGP(num_inducing=20)
    m.fit(X, y, batch_size=64, epochs=1, seed=0)
    first = m.elbo(X, y)
    m.fit(X, y, batch_size=64, epochs=60, seed=0, lr=0.03)
    assert m.elbo(X, y) > first
    mean, var = m.predict_y(X)
    assert np.sqrt(np.mean((mean - y) ** 2)) < 0.2
    assert np.all(var > 0)


def test_seed_makes_runs_reproducible():
    X, y = _data(100)
    a = lg.SVGP(num_inducing=8).fit(X, y, batch_size=20, epochs=2, seed=3)
    b = lg.SVGP(num_inducing=8).fit(X, y, batch_size=20, epochs=2, seed=3)
    np.testing.assert_array_equal(a.predict_f(X)[0], b.predict_f(X)[0])


def test_chunked_prediction_equals_unchunked():
    X, y = _data(100)
    m = lg.SVGP(num_inducing=10).fit(X, y, max_steps=20, seed=0)
    a = m.predict_y(X)
    b = m.predict_y(X, chunk_size=7)
    # matrix products may block differently per chunk size: round-off only
    np.testing.assert_allclose(a[0], b[0], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(a[1], b[1], rtol=1e-13, atol=1e-15)
    e = lg.ExactGP().fit(X, y, max_steps=5)
    np.testing.assert_allclose(e.predict_f(X)[1], e.predict_f(X, chunk_size=9)[1], rtol=1e-12)


def test_classification_probabilities():
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(400, 2))
    y = (np.sin(X[:, 0]) + 0.5 * X[:, 1] > 0).astype(float)
    for link in ("logit", "probit"):
        lik = lg.likelihoods.Bernoulli(link)
        m = lg.SVGP(num_inducing=30, likelihood=lik).fit(
            X, y, batch_size=100, epochs=40, lr=0.05, seed=0
        )
        p, _ = m.predict_y(X)
        assert np.all((p >= 0) & (p <= 1))
        assert np.mean((p > 0.5) != y) < 0.08
        lpd = m.log_predictive_density(X, y)
        np.testing.assert_allclose(lpd, np.log(np.where(y == 1, p, 1 - p)), rtol=1e-6)


def test_softmax_multiclass_with_several_latents():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 2))
    y = np.digitize(X[:, 0] + 0.3 * X[:, 1], [-0.5, 0.5]).astype(float)
    m = lg.SVGP(num_inducing=20, likelihood=lg.likelihoods.Softmax(3))
    m.fit(X, y, batch_size=100, epochs=40, lr=0.05, seed=0)
    assert m.q.q_mu.shape == (3, 20)
    p, _ = m.predict_y(X)
    assert p.shape == (300, 3)
    np.testing.assert_allclose(p.sum(1), 1.0, rtol=1e-10)
    assert np.mean(p.argmax(1) != y) < 0.1


def test_multioutput_regression_independent_latents():
    X, y = _data(150)
    Y = np.stack([y, -2 * y + 1], 1)
    m = lg.SVGP(num_inducing=15).fit(X, Y, batch_size=50, epochs=40, lr=0.03, seed=0)
    mean, var = m.predict_y(X)
    assert mean.shape == (150, 2) and var.shape == (150, 2)
    assert np.sqrt(np.mean((mean - Y) ** 2, 0)).max() < 0.4
    assert m.log_predictive_density(X, Y).shape == (150,)


def test_poisson_counts():
    rng = np.random.default_rng(0)
    X = np.linspace(0, 10, 300)[:, None]
    rate = np.exp(1 + np.sin(X[:, 0]))
    y = rng.poisson(rate).astype(float)
    m = lg.SVGP(num_inducing=20, likelihood="poisson").fit(
        X, y, batch_size=100, epochs=60, lr=0.05, seed=0
    )
    mean, var = m.predict_y(X)
    assert np.mean(np.abs(np.log(mean) - np.log(rate))) < 0.25
    assert np.all(var >= mean * 0.99)


def test_float32_mode_trains_like_float64():
    X, y = _data(200)
    kw = dict(batch_size=50, epochs=30, lr=0.03, seed=0)
    m32 = lg.SVGP(num_inducing=20, dtype=torch.float32).fit(X, y, **kw)
    m64 = lg.SVGP(num_inducing=20).fit(X, y, **kw)
    mean, var = m32.predict_y(X)
    assert mean.dtype == np.float32 and m32.Z.dtype == torch.float32
    rmse32 = np.sqrt(np.mean((mean - y) ** 2))
    rmse64 = np.sqrt(np.mean((m64.predict_y(X)[0] - y) ** 2))
    assert rmse32 < 0.3
    assert abs(rmse32 - rmse64) < 0.02


def test_exact_gp_learns_noise_and_relevance():
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (200, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(200)
    m = lg.ExactGP(normalize_y=False).fit(X, y)
    assert float(m.likelihood.variance) == pytest.approx(0.01, rel=0.4)
    ls = m.kernel.lengthscale.detach().numpy()
    assert ls[1] > 5 * ls[0]  # the irrelevant input gets a long lengthscale


def test_full_cov_and_samples():
    X, y = _data(40)
    m = lg.ExactGP().fit(X, y, max_steps=10)
    Xs = X[:10]
    mean, cov = m.predict_f_full_cov(Xs)
    _, var = m.predict_f(Xs)
    np.testing.assert_allclose(np.diag(cov[0]), var, rtol=1e-8)
    s = m.sample_f(Xs, num_samples=4000, seed=0)
    assert s.shape == (4000, 10)
    np.testing.assert_allclose(s.mean(0), mean[:, 0], atol=4 * np.sqrt(var.max() / 4000) + 1e-6)
    sv = lg.SVGP(num_inducing=10).fit(X, y, max_steps=10)
    mean2, cov2 = sv.predict_f_full_cov(Xs)
    np.testing.assert_allclose(np.diag(cov2[0]), sv.predict_f(Xs)[1], rtol=1e-8)


def test_exact_marginal_gradient_matches_autograd_reference():
    X, y = _data(25)
    exact, _ = _pair(X, y)
    Xt, yt = torch.tensor(X), torch.tensor(y)
    params = [p for p in exact.parameters()]
    lml = exact.objective(Xt, yt, 25)  # the exact log marginal likelihood
    g1 = torch.autograd.grad(lml, params)
    K = exact.kernel(Xt) + exact.likelihood.variance * torch.eye(25, dtype=torch.float64)
    ref = torch.distributions.MultivariateNormal(torch.zeros(25, dtype=torch.float64), K)
    g2 = torch.autograd.grad(ref.log_prob(yt), params)
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_automatic_prediction_chunks_hold_about_a_million_entries():
    X, y = _data(300)
    m = lg.SVGP(num_inducing=256 // 4).fit(X, y, max_steps=1)
    assert m.prediction_chunk_rows(None) == (1 << 20) // 64
    assert m.prediction_chunk_rows(100) == 100
    with lg.config(chunk_size=1000):
        assert m.prediction_chunk_rows(None) == 1000
    e = lg.ExactGP().fit(X, y, max_steps=1)
    assert e.prediction_chunk_rows(None) == (1 << 20) // 300
