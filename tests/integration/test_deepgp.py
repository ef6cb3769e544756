"""Deep GPs (doubly stochastic VI): one layer is SVGP, the sampled bound against
quadrature, gradients against finite differences, a step function, model files."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import latentgp as lg


def _toy(n=12, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 1))
    return X, np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(n)


def _randomise_q(model, seed=1, scale=0.3):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in model.layers:
            q = layer.q
            q.q_mu.copy_(torch.randn(q.q_mu.shape, generator=g, dtype=q.q_mu.dtype))
            R = torch.tril(scale * torch.randn(q.q_sqrt_raw.shape, generator=g,
                                               dtype=q.q_mu.dtype), -1)
            d = 0.2 + torch.rand(q.q_mu.shape, generator=g, dtype=q.q_mu.dtype)
            q.q_sqrt_raw.copy_(R + torch.diag_embed(d))


def test_one_layer_equals_svgp_elbo():
    X, y = _toy(30)
    dgp = lg.DeepGP(1, num_inducing=7).initialize(X, y, seed=0)
    _randomise_q(dgp)
    layer = dgp.layers[0]
    with torch.no_grad():
        layer.kernel.lengthscale = 0.7
        layer.kernel.variance = 1.3
        dgp.likelihood.raw_variance.fill_(-1.1)
    Xs = dgp.standardize_inputs(torch.as_tensor(X))
    svgp = lg.SVGP(Z=layer.Z.detach().numpy()).initialize(Xs.numpy(), y, seed=0)
    with torch.no_grad():
        svgp.Z = layer.Z
        svgp.kernel.lengthscale = 0.7
        svgp.kernel.variance = 1.3
        svgp.likelihood.raw_variance.fill_(-1.1)
        svgp.q.q_mu.copy_(layer.q.q_mu)
        svgp.q.q_sqrt_raw.copy_(layer.q.q_sqrt_raw)
    ys = dgp.scale_targets(y)
    assert torch.equal(ys, svgp.scale_targets(y))
    with torch.no_grad():
        a = dgp.objective(torch.as_tensor(X), ys, 30)
        b = svgp.objective(Xs, ys, 30)
    assert float(a) == float(b)  # the same operations on the same numbers
    assert dgp.elbo(X, y) == pytest.approx(svgp.elbo(Xs.numpy(), y), rel=1e-13)
    # and the predictions of a single layer are SVGP's (no sampling)
    mf, vf = dgp.predict_f(X)
    ms, vs = svgp.predict_f(Xs.numpy())
    np.testing.assert_allclose(mf, ms, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(vf, vs, rtol=1e-12)
    np.testing.assert_allclose(dgp.log_predictive_density(X, y),
                               svgp.log_predictive_density(Xs.numpy(), y), rtol=1e-10)


def _layer_marginals(layer, H):
    """Independent re-derivation of a whitened layer's marginals at ``H`` ``(K, D)``."""
    L = layer.prior_factor()
    A = torch.linalg.solve_triangular(L, layer.kernel(layer.Z, H), upper=False)  # (M, K)
    m = A.mT @ layer.q.q_mu.mT  # (K, Q)
    S = layer.q.q_sqrt  # (Q, M, M)
    SA = S.mT @ A  # (Q, M, K)
    v = layer.kernel.diag(H)[:, None] - A.square().sum(0)[:, None] + SA.square().sum(1).mT
    if layer.linear_mean:
        m = m + H @ layer.mean_weight
    return m, v


def _gauss_hermite(n=80):
    x, w = np.polynomial.hermite.hermgauss(n)
    return torch.as_tensor(x * math.sqrt(2.0)), torch.as_tensor(w / math.sqrt(math.pi))


def _ell_at_nodes(model, y, m1, v1, x):
    """``E[log N(y | f_2, s2)]`` under the second layer's q(f_2 | h) at the nodes
    ``h = m1 + sqrt(v1) x`` ``(..., n)``."""
    h = m1[..., None] + v1[..., None].sqrt() * x
    m2, v2 = _layer_marginals(model.layers[1], h.reshape(-1, 1))
    m2, v2 = m2[:, 0].reshape(h.shape), v2[:, 0].reshape(h.shape)
    s2 = model.likelihood.variance
    return -0.5 * (math.log(2 * math.pi) + s2.log() + ((y[..., None] - m2) ** 2 + v2) / s2)


def _elbo_reference(model, X, ys):
    """Per point, with h ~ q(f_1(x)) (q(u_1) integrated out) by Gauss-Hermite: the mean
    and variance of ELL(h), and log E[exp ELL(h)] (two layers, one hidden dimension)."""
    x, w = _gauss_hermite()
    Xs = model.standardize_inputs(torch.as_tensor(X))
    with torch.no_grad():
        m1, v1 = _layer_marginals(model.layers[0], Xs)
        ell = _ell_at_nodes(model, torch.as_tensor(ys), m1[:, 0], v1[:, 0], x)
        mean = (w * ell).sum(-1)
        var = (w * ell**2).sum(-1) - mean**2
        log_mean_exp = torch.logsumexp(ell + w.log(), -1)
    return mean.numpy(), var.numpy(), log_mean_exp.numpy()


def _iw_reference(model, X, ys, draws=4000):
    """Per point: the large-S limit of the importance-weighted bound,
    ``E_{v ~ q(v_1)}[log E_{h ~ p(f_1 | v)}[exp ELL(h)]]`` (outer Monte Carlo over the
    first layer's whitened inducing values, inner Gauss-Hermite), and its standard error."""
    x, w = _gauss_hermite()
    l1 = model.layers[0]
    g = torch.Generator().manual_seed(99)
    Xs = model.standardize_inputs(torch.as_tensor(X))
    with torch.no_grad():
        L = l1.prior_factor()
        A = torch.linalg.solve_triangular(L, l1.kernel(l1.Z, Xs), upper=False)  # (M, B)
        eps = torch.randn((draws, A.shape[0]), generator=g, dtype=A.dtype)
        v = l1.q.q_mu[0] + eps @ l1.q.q_sqrt[0].mT  # (draws, M)
        m1 = v @ A + (Xs @ l1.mean_weight)[:, 0]  # (draws, B)
        v1 = (l1.kernel.diag(Xs) - A.square().sum(0)).expand_as(m1)
        ell = _ell_at_nodes(model, torch.as_tensor(ys), m1, v1, x)  # (draws, B, n)
        inner = torch.logsumexp(ell + w.log(), -1)  # (draws, B)
    return inner.mean(0).numpy(), (inner.std(0) / math.sqrt(draws)).numpy()


def test_sampled_elbo_matches_quadrature_for_two_layers():
    X, y = _toy(6, seed=3)
    model = lg.DeepGP(2, num_inducing=5, hidden_dim=1).initialize(X, y, seed=0)
    _randomise_q(model, seed=4)
    ys = model.scale_targets(y)
    mean, var, _ = _elbo_reference(model, X, ys.numpy())
    S = 20000
    torch.manual_seed(5)
    with torch.no_grad():
        got = model.point_bounds(torch.as_tensor(X), ys, model.prior_factors(), S).numpy()
    se = np.sqrt(var / S)
    assert np.all(np.abs(got - mean) < 5 * se + 1e-12), (got - mean) / se
    # the inner layer is far from a point mass: the spread is much larger than the error
    assert np.max(np.sqrt(var)) > 50 * np.max(se)


def test_importance_weighted_bound_matches_its_limit_and_is_a_bound():
    X, y = _toy(6, seed=3)
    model = lg.DeepGP(2, num_inducing=5, hidden_dim=1, bound="iw").initialize(X, y, seed=0)
    _randomise_q(model, seed=4)
    ys = model.scale_targets(y)
    want, want_se = _iw_reference(model, X, ys.numpy())
    runs, S = 400, 2000  # each run draws u_1 once; bias of the log-mean-exp ~ 1/S
    torch.manual_seed(6)
    with torch.no_grad():
        factors = model.prior_factors()
        got = np.stack([
            model.point_bounds(torch.as_tensor(X), ys, factors, S).numpy() for _ in range(runs)
        ])
    se = np.sqrt(got.var(0) / runs + want_se**2)
    assert np.all(np.abs(got.mean(0) - want) < 5 * se), (got.mean(0) - want) / se
    mean, _, marginal_limit = _elbo_reference(model, X, ys.numpy())
    # at least the ELBO's expected log term (Jensen; up to the reference's own error) ...
    assert np.all(want > mean - 5 * want_se)
    # ... and below the limit of log-mean-exp over q(u)-marginalised samples, which is
    # not a bound (the test would catch samples that do not share u_1)
    gap = (marginal_limit - want) / se
    assert np.all(gap > -5) and np.max(gap) > 10, gap


def test_importance_weighted_bound_with_one_sample_is_the_elbo_in_expectation():
    X, y = _toy(10)
    elbo = lg.DeepGP(3, num_inducing=4, hidden_dim=2, num_samples=1).initialize(X, y, seed=0)
    _randomise_q(elbo)
    iw = lg.DeepGP(3, num_inducing=4, hidden_dim=2, num_samples=1, bound="iw")
    iw.initialize(X, y, seed=0).load_state_dict(elbo.state_dict())
    ys, Xt = elbo.scale_targets(y), torch.as_tensor(X)
    runs, reps = 200, 20  # each call: the points repeated; the iw calls share one u draw
    Xr, yr = Xt.repeat(reps, 1), ys.repeat(reps)
    torch.manual_seed(0)
    with torch.no_grad():
        a = np.stack([elbo.point_bounds(Xr, yr, elbo.prior_factors()).reshape(reps, -1)
                      .mean(0).numpy() for _ in range(runs)])
        b = np.stack([iw.point_bounds(Xr, yr, iw.prior_factors()).reshape(reps, -1)
                      .mean(0).numpy() for _ in range(runs)])
    se = np.sqrt((a.var(0) + b.var(0)) / runs)
    assert np.all(np.abs(a.mean(0) - b.mean(0)) < 5 * se)


def test_gradients_match_finite_differences():
    X, y = _toy(5, seed=2)
    model = lg.DeepGP(2, num_inducing=3, hidden_dim=2, num_samples=3).initialize(X, y, seed=0)
    _randomise_q(model, seed=7)
    ys = model.scale_targets(y)
    Xt = torch.as_tensor(X)
    params = [p for p in model.parameters() if p.requires_grad]

    def f():
        with torch.random.fork_rng():
            torch.manual_seed(11)
            return model.objective(Xt, ys, 5)

    model.zero_grad()
    f().backward()
    g = torch.cat([p.grad.reshape(-1) for p in params])
    assert torch.isfinite(g).all() and g.abs().max() > 0
    gen = torch.Generator().manual_seed(3)
    eps = 1e-6
    for _ in range(4):
        d = [torch.randn(p.shape, generator=gen, dtype=p.dtype) for p in params]
        with torch.no_grad():
            for p, di in zip(params, d, strict=True):
                p.add_(eps * di)
            up = float(f())
            for p, di in zip(params, d, strict=True):
                p.sub_(2 * eps * di)
            down = float(f())
            for p, di in zip(params, d, strict=True):
                p.add_(eps * di)
        fd = (up - down) / (2 * eps)
        an = float(g @ torch.cat([di.reshape(-1) for di in d]))
        assert fd == pytest.approx(an, rel=1e-5, abs=1e-6)


def _step(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 1))
    return X, np.where(X[:, 0] > 0, 1.0, -1.0) + 0.05 * rng.standard_normal(n)


@pytest.mark.slow
def test_two_layers_fit_a_step_better_than_svgp():
    X, y = _step(150, 0)
    Xt, yt = _step(400, 1)
    fit = {"max_steps": 1500, "seed": 0, "progress": False, "batch_size": 150}
    dgp = lg.DeepGP(2, num_inducing=15, hidden_dim=1, num_samples=5).fit(X, y, **fit)
    svgp = lg.SVGP(15).fit(X, y, **fit)
    nlpd_dgp = -float(np.mean(dgp.log_predictive_density(Xt, yt)))
    nlpd_svgp = -float(np.mean(svgp.log_predictive_density(Xt, yt)))
    assert nlpd_dgp < nlpd_svgp - 0.05, (nlpd_dgp, nlpd_svgp)


def test_save_load_round_trip(tmp_path):
    X, y = _toy(20)
    model = lg.DeepGP(3, num_inducing=5, hidden_dim=2, num_predict_samples=7, bound="iw")
    model.fit(X, y, max_steps=5, seed=0, progress=False)
    path = tmp_path / "dgp.lgm"
    model.save(path)
    back = lg.load(path)
    assert isinstance(back, lg.DeepGP) and back.get_config() == model.get_config()
    for a, b in zip(model.state_dict().values(), back.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    Xn = np.linspace(-3, 3, 11)[:, None]
    for got, want in zip(back.predict_y(Xn), model.predict_y(Xn), strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(back.log_predictive_density(X, y),
                                  model.log_predictive_density(X, y))


def test_predictions_are_mixtures_of_the_samples_and_independent_of_the_batch():
    X, y = _toy(20)
    model = lg.DeepGP(2, num_inducing=5, num_predict_samples=9).initialize(X, y, seed=0)
    _randomise_q(model)
    m, v = model.predict_y(X)
    m1, v1 = model.predict_y(X[:3])
    np.testing.assert_allclose(m[:3], m1, rtol=1e-12)
    np.testing.assert_allclose(v[:3], v1, rtol=1e-12)
    lpd = model.log_predictive_density(X, y)
    # against the mixture written out: the components' Gaussian densities
    mf, vf = model.predict_f(X)
    assert np.all(v > vf)  # predictive variance adds the noise to the latent's
    assert np.all(np.isfinite(lpd))
    # a single sample's mixture is one Gaussian: its density is the Gaussian's
    one = lg.DeepGP(2, num_inducing=5, num_predict_samples=1).initialize(X, y, seed=0)
    one.load_state_dict(model.state_dict())
    m1, v1 = one.predict_y(X)
    want = -0.5 * (np.log(2 * np.pi * v1) + (y - m1) ** 2 / v1)
    np.testing.assert_allclose(one.log_predictive_density(X, y), want, rtol=1e-9)


def test_classification_and_bad_arguments():
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (40, 2))
    y = (X[:, 0] * X[:, 1] > 0).astype(float)
    model = lg.DeepGP(2, num_inducing=8, likelihood="bernoulli")
    model.fit(X, y, max_steps=20, seed=0, progress=False)
    p, _ = model.predict_y(X)
    assert p.shape == (40,) and np.all((p > 0) & (p < 1))
    with pytest.raises(ValueError, match="num_layers"):
        lg.DeepGP(0)
    with pytest.raises(ValueError, match="bound"):
        lg.DeepGP(2, bound="tight")
    with pytest.raises(TypeError):
        lg.DeepGP(2, 10)


def test_float32_model_computes_and_predicts_in_float32():
    X, y = _toy(20)
    model = lg.DeepGP(2, num_inducing=5, dtype=torch.float32)
    model.fit(X, y, max_steps=5, seed=0, progress=False)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    m, v = model.predict_y(X, as_numpy=False)
    assert m.dtype == v.dtype == torch.float32 and torch.isfinite(m).all()
    assert model.layers[1].Z.dtype == torch.float32


def test_fixed_samples_make_the_bound_deterministic_smooth_and_unbiased():
    X, y = _toy(6, seed=3)
    model = lg.DeepGP(2, num_inducing=5, hidden_dim=1).initialize(X, y, seed=0)
    _randomise_q(model, seed=4)
    ys, Xt = model.scale_targets(y), torch.as_tensor(X)
    with torch.no_grad():
        kl = float(model.kl_divergence())
    mean, var, _ = _elbo_reference(model, X, ys.numpy())
    S = 20000
    model.fix_training_samples(S, seed=7)
    with torch.no_grad():
        a, b = float(model.objective(Xt, ys, 6)), float(model.objective(Xt, ys, 6))
    assert a == b  # the same samples at every evaluation, whatever the global RNG did
    # a sample average of the bound: unbiased for the quadrature value (5 standard errors)
    assert abs(a + kl - mean.sum()) < 5 * math.sqrt(var.sum() / S)
    # and a smooth function of the parameters: central differences match autograd
    model.fix_training_samples(10, seed=7)
    params = [p for p in model.parameters() if p.requires_grad]
    model.zero_grad()
    model.objective(Xt, ys, 6).backward()
    g = torch.cat([p.grad.reshape(-1) for p in params])
    d = [torch.randn(p.shape, generator=torch.Generator().manual_seed(1), dtype=p.dtype)
         for p in params]
    eps = 1e-6
    with torch.no_grad():
        for p, di in zip(params, d, strict=True):
            p.add_(eps * di)
        up = float(model.objective(Xt, ys, 6))
        for p, di in zip(params, d, strict=True):
            p.sub_(2 * eps * di)
        down = float(model.objective(Xt, ys, 6))
    an = float(g @ torch.cat([di.reshape(-1) for di in d]))
    assert (up - down) / (2 * eps) == pytest.approx(an, rel=1e-5, abs=1e-6)
    # released: fresh samples again
    model.fix_training_samples(None)
    with torch.no_grad():
        assert float(model.objective(Xt, ys, 6)) != float(model.objective(Xt, ys, 6))


def test_small_data_default_is_lbfgs_with_fixed_samples_and_stops_when_converged():
    X, y = _step(120, 0)
    assert "automatic" in lg.DeepGP(2).fit_defaults(1024)
    assert "automatic" not in lg.DeepGP(2).fit_defaults(1025)  # minibatch Adam above
    model = lg.DeepGP(2, num_inducing=10, hidden_dim=1)
    model.fit(X, y, seed=0, progress=False)
    h = model.history_
    assert h.optimizer == "lbfgs" and h.reason == "converged" and h.steps < 2000
    Xt, ys = torch.as_tensor(X), model.scale_targets(y)
    with torch.no_grad():  # the fixed samples belonged to the fit: fresh ones after it
        assert float(model.objective(Xt, ys, 120)) != float(model.objective(Xt, ys, 120))
    # the rule fired where it should: 200 more L-BFGS steps on the same fixed samples
    # (the same seed draws them) gain less than 1e-3 nats per point
    before = h.objective[-1]
    model.fit(X, y, seed=0, progress=False, optimizer="lbfgs", max_steps=200)
    assert model.history_.optimizer == "lbfgs"
    assert model.history_.objective[-1] - before < 1e-3 * 120
    # naming Adam gives the paper's fresh samples and minibatch-style steps
    adam = lg.DeepGP(2, num_inducing=10, hidden_dim=1)
    adam.fit(X, y, seed=0, progress=False, optimizer="adam", max_steps=3)
    assert adam.history_.optimizer == "adam"


def test_one_layer_default_fit_agrees_with_svgps_default():
    rng = np.random.default_rng(4)
    X = rng.uniform(-3, 3, (80, 1))
    y = np.sin(1.5 * X[:, 0]) + 0.2 * rng.standard_normal(80)
    Xt = np.linspace(-3, 3, 50)[:, None]
    yt = np.sin(1.5 * Xt[:, 0])
    dgp = lg.DeepGP(1, num_inducing=12, learn_inducing=False).fit(X, y, seed=0, progress=False)
    svgp = lg.SVGP(12, learn_inducing=False).fit(X, y, seed=0, progress=False)
    assert dgp.history_.optimizer == svgp.history_.optimizer == "lbfgs"
    assert dgp.history_.reason == svgp.history_.reason == "converged"
    # the same model and the same optimum, reached in other coordinates (standardised x)
    assert dgp.elbo(X, y) == pytest.approx(svgp.elbo(X, y), abs=0.05)
    nl = [-float(np.mean(m.log_predictive_density(Xt, yt))) for m in (dgp, svgp)]
    assert nl[0] == pytest.approx(nl[1], abs=0.01)
