"""SAVIGP: the mixture family, both gradient estimators, dense/sparse/Theorem-2 modes
against exact GP regression, black-box likelihoods, save/load and bad input."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
import torch
from small_sets import one_torch_thread  # noqa: F401 (fixture)

import latentgp as lg
from latentgp.likelihoods import Gaussian
from latentgp.models.savigp_options import parse_posterior
from latentgp.variational import mixture as mx

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _data(N=40, seed=0):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(-3, 3, N))[:, None]
    y = np.sin(2 * X[:, 0]) + 0.3 * rng.standard_normal(N)
    return X, y


@pytest.fixture(scope="module")
def exact():
    X, y = _data()
    return X, y, lg.ExactGP().fit(X, y)


def _copy_hypers(model, ex):
    with torch.no_grad():
        model.kernel.lengthscale = ex.kernel.lengthscale
        model.kernel.raw_variance.copy_(ex.kernel.raw_variance)
        model.likelihood.raw_variance.copy_(ex.likelihood.raw_variance)
    for p in list(model.kernel.parameters()) + list(model.likelihood.parameters()):
        p.requires_grad_(False)


def _fit_fixed_hypers(exact, steps=60, **kw):
    X, y, ex = exact
    m = lg.SAVIGP(**kw)
    m.fit(X, y, max_steps=1, lr=1e-12, seed=0)  # build + initialise
    _copy_hypers(m, ex)
    m.fit(X, y, optimizer="lbfgs", lr=1.0, max_steps=steps, seed=0)
    return m


@pytest.fixture(scope="module")
def dense_fg(exact):
    return _fit_fixed_hypers(exact, dense=True, posterior="fg", estimator=_samples(300))


def _samples(num_samples):
    """The estimator option with ``num_samples`` Monte Carlo draws."""
    return lg.SAVIGP.Estimator(num_samples=num_samples)


def _check_matches_exact(m, ex):
    Xs = np.linspace(-3.5, 3.5, 30)[:, None]
    me, ve = ex.predict_y(Xs)
    mu, v = m.predict_y(Xs)
    assert np.max(np.abs(mu - me)) < 0.05
    assert np.max(np.abs(v / ve - 1)) < 0.15


# ------------------------------------------------------------ exact GP limits ----
def test_dense_fg_matches_exact_gp(exact, dense_fg):
    """Appendix G.2: dense FG with a Gaussian likelihood is GP regression (MC tolerance)."""
    _check_matches_exact(dense_fg, exact[2])


@pytest.mark.slow
@pytest.mark.parametrize(
    "kw",
    [
        {"num_inducing": 40, "posterior": "fg", "inducing_init": "random"},
        {"dense": True, "posterior": lg.SAVIGP.Posterior(parameterization="lambda")},
    ],
)
def test_other_fg_modes_match_exact_gp(exact, kw):
    _check_matches_exact(_fit_fixed_hypers(exact, estimator=_samples(300), **kw), exact[2])


@pytest.mark.slow
def test_theorem2_lambda_is_noise_precision(exact):
    """For a Gaussian likelihood the optimal Lambda of Theorem 2 is I / sigma^2."""
    m = _fit_fixed_hypers(
        exact,
        dense=True,
        posterior=lg.SAVIGP.Posterior(parameterization="lambda"),
        estimator=_samples(300),
    )
    lam = torch.nn.functional.softplus(m.lambda_raw).detach().numpy()
    target = 1.0 / float(m.likelihood.variance)
    assert np.median(np.abs(lam / target - 1)) < 0.15


def test_dense_elbo_matches_marginal_likelihood(exact, dense_fg):
    """At the optimum, ELBO = log p(y) - (N/2)(1 - log 2) (the K=1 entropy-bound gap)."""
    X, y, ex = exact
    gap = 0.5 * len(y) * (1 - math.log(2))
    elbo = dense_fg.elbo(X, y, num_samples=20000)
    assert abs(elbo - (ex.log_marginal_likelihood() - gap)) < 1.0


def test_dense_unwhitened_ell_independent_of_hyperparameters(exact):
    """Dense, paper parameterisation: the hyperparameter gradient is the cross-entropy's."""
    X, y, _ = exact
    m = lg.SAVIGP(dense=True, posterior=lg.SAVIGP.Posterior(whiten=False), estimator=_samples(5))
    m.fit(X, y, max_steps=1, lr=1e-12, seed=0)
    Xt = torch.as_tensor(X)
    yt = m.scale_targets(y)
    m.zero_grad()
    m.objective(Xt, yt, len(y)).backward()
    g_full = m.kernel.raw_lengthscale.grad.clone()
    m.zero_grad()
    sum(m.kl_terms()).backward()
    assert torch.allclose(g_full, m.kernel.raw_lengthscale.grad, rtol=1e-10, atol=1e-12)


# --------------------------------------------------------- gradient estimators ----
def _grads(model, X, y, seed):
    model.sample_seed = seed
    model.zero_grad()
    model.expected_log_lik_batch(X, y).backward()
    return torch.cat([model.q.means.grad.reshape(-1), model.q.sqrt_raw.grad.reshape(-1)])


def _estimator_model(estimator, cv, shift=0.0):
    X, y = _data(12, seed=1)

    def loglik(yv, f):  # torch Gaussian log density, optionally shifted by a constant
        return -0.5 * (yv - f) ** 2 / 0.1 - 0.5 * math.log(2 * math.pi * 0.1) + shift

    m = lg.SAVIGP(
        num_inducing=5,
        likelihood=loglik,
        posterior="mog2",
        estimator=lg.SAVIGP.Estimator(method=estimator, control_variates=cv, num_samples=10),
        normalize_y=False,
    )
    m.fit(X, y, max_steps=1, lr=1e-12, seed=3)
    return m, torch.as_tensor(X), torch.as_tensor(y)


def _exact_grad(m, X, y, shift=0.0):
    m.zero_grad()
    w, mean, var = m.batch_marginals(X, m.prior_factor())
    ell = Gaussian(variance=0.1).expected_log_prob(y, mean[..., 0], var[..., 0]).sum(-1)
    (w * (ell + shift * len(y))).sum().backward()
    return torch.cat([m.q.means.grad.reshape(-1), m.q.sqrt_raw.grad.reshape(-1)])


def _sample_grads(estimator, cv, R=120, shift=0.0):
    m, X, y = _estimator_model(estimator, cv, shift)
    G = torch.stack([_grads(m, X, y, s) for s in range(R)])
    return G, _exact_grad(m, X, y, shift)


def _max_z(G, exact_g):
    se = G.std(0) / math.sqrt(G.shape[0])
    return float(((G.mean(0) - exact_g) / se.clamp_min(1e-8)).abs().max())


def test_score_and_reparam_agree_in_expectation():
    """Both estimators (and score + control variates) are unbiased for the exact gradient
    of the closed-form Gaussian ELL: every coordinate within 4.5 standard errors."""
    for estimator, cv in (("reparam", False), ("score", False), ("score", True)):
        G, exact_g = _sample_grads(estimator, cv)
        assert _max_z(G, exact_g) < 4.5, (estimator, cv)


def test_control_variates_reduce_variance():
    """Measurably lower variance; by orders of magnitude when log p has a large offset."""
    G0, _ = _sample_grads("score", cv=False)
    G1, _ = _sample_grads("score", cv=True)
    assert G1.var(0).sum() < 0.9 * G0.var(0).sum()
    # an offset of log p (here -30 per point) inflates the plain score estimator but not
    # the corrected one: its variance stays near the unshifted corrected variance
    G0s, _ = _sample_grads("score", cv=False, shift=-30.0)
    G1s, exact_g = _sample_grads("score", cv=True, shift=-30.0)
    assert G1s.var(0).sum() < 0.35 * G0s.var(0).sum()
    assert G1s.var(0).sum() < 1.5 * G1.var(0).sum()
    assert _max_z(G1s, exact_g) < 4.5


# ------------------------------------------------------------- mixture family ----
def _random_mixture(K=3, Q=2, M=3, diag=False, seed=0):
    torch.manual_seed(seed)
    w = torch.softmax(torch.randn(K, dtype=torch.float64), 0)
    means = torch.randn(K, Q, M, dtype=torch.float64)
    if diag:
        sqrt = 0.3 + torch.rand(K, Q, M, dtype=torch.float64)
    else:
        sqrt = torch.tril(0.3 * torch.randn(K, Q, M, M, dtype=torch.float64))
        sqrt = sqrt + torch.diag_embed(0.5 + torch.rand(K, Q, M, dtype=torch.float64))
    return w, means, sqrt


@pytest.mark.parametrize("diag", [False, True])
def test_entropy_bound_below_true_entropy(diag):
    w, means, sqrt = _random_mixture(diag=diag)
    u = mx.sample(w, means, sqrt, diag, 40000)
    lq = mx.log_density(u, w, means, sqrt, diag)
    H, se = float(-lq.mean()), float(lq.std() / math.sqrt(len(lq)))
    bound = float(mx.entropy_bound(w, means, sqrt, diag))
    assert bound < H + 3 * se


def test_entropy_bound_single_gaussian_gap():
    w, means, sqrt = _random_mixture(K=1)
    Q, M = means.shape[1:]
    logdet = 2 * sqrt.diagonal(dim1=-2, dim2=-1).log().sum()
    true = 0.5 * (Q * M * math.log(2 * math.pi * math.e) + logdet)
    bound = mx.entropy_bound(w, means, sqrt, False)
    assert torch.allclose(bound, true - 0.5 * Q * M * (1 - math.log(2)))


@pytest.mark.parametrize("diag", [False, True])
def test_cross_entropy_exact_vs_monte_carlo(diag):
    w, means, sqrt = _random_mixture(diag=diag, seed=2)
    Q, M = means.shape[1:]
    A = torch.randn(Q, M, M, dtype=torch.float64)
    Kzz = A @ A.mT + M * torch.eye(M, dtype=torch.float64)
    Lzz = torch.linalg.cholesky(Kzz)
    u = mx.sample(w, means, sqrt, diag, 40000)  # (n, Q, M)
    prior = torch.distributions.MultivariateNormal(
        torch.zeros(Q, M, dtype=torch.float64), scale_tril=Lzz
    )
    lp = prior.log_prob(u).sum(-1)
    exact = float(mx.cross_entropy(w, means, sqrt, diag, Lzz))
    assert abs(exact - float(lp.mean())) < 4 * float(lp.std()) / math.sqrt(len(lp))


def test_marginals_match_joint_covariance():
    w, means, sqrt = _random_mixture(K=2, Q=2, M=4)
    X = torch.linspace(-1, 1, 5, dtype=torch.float64)[:, None]
    Z = torch.linspace(-1.2, 1.2, 4, dtype=torch.float64)[:, None]
    k = lg.kernels.RBF(lengthscale=0.7).build(1, (2,))
    Kzz = k(Z) + 1e-8 * torch.eye(4, dtype=torch.float64)
    Lzz = torch.linalg.cholesky(Kzz)
    mean, var = lg.variational.conditional_marginals(k(Z, X), k.diag(X), Lzz, means, sqrt, False)
    A = torch.linalg.solve(Kzz, k(Z, X))  # (Q, M, B), test-only reference
    S = sqrt @ sqrt.mT
    cov = k(X) - k(Z, X).mT @ A + A.mT @ S @ A  # (K, Q, B, B)
    assert torch.allclose(mean, torch.einsum("kqm,qmb->kqb", means, A), atol=1e-8)
    assert torch.allclose(var, cov.diagonal(dim1=-2, dim2=-1), atol=1e-8)


@pytest.mark.parametrize(
    "kw",
    [
        {"posterior": "fg", "num_inducing": 8},
        {"posterior": "fg", "dense": True},
        {"posterior": "fg3", "num_inducing": 6},
    ],
)
def test_whitened_kl_terms_equal_the_unwhitened_formulas(kw):
    """The whitened shortcut (no Lzz C products) gives the entropy bound and cross-entropy
    of the same q(u) written in u-space, values and gradients."""
    X, y = _data(N=30, seed=3)
    m = lg.SAVIGP(likelihood="gaussian", **kw)
    m.fit(X, y, max_steps=2, progress=False)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in m.q.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=p.dtype))
        m.q.sqrt_raw.diagonal(dim1=-2, dim2=-1).add_(0.5)  # well-conditioned S_k + S_l

    def general():
        """u-space formulas; the mixture bound by LU (no jitter: u-space S_k + S_l inherits
        Kzz's conditioning, and the library's Cholesky of it needs jitter here)."""
        Lzz = m.prior_factor()
        w, mm, R, ld = m.posterior_components(Lzz)
        cross = mx.cross_entropy(w, mm, R, False, Lzz)
        if len(w) == 1:
            return mx.entropy_bound(w, mm, R, False, ld), cross
        S = R @ R.mT
        T = S[:, None] + S[None]  # (K, K, Q, M, M)
        d = (mm[:, None] - mm[None])[..., None]
        maha = (d.mT @ torch.linalg.solve(T, d))[..., 0, 0]
        logN = -0.5 * (mm.shape[-1] * math.log(2 * math.pi) + torch.linalg.slogdet(T)[1] + maha)
        log_z = torch.logsumexp(w.log()[None, :] + logN.sum(-1), dim=1)
        return -(w * log_z).sum(), cross

    for got, want in zip(m.kl_terms(), general(), strict=True):
        assert float(got.detach()) == pytest.approx(float(want.detach()), rel=1e-8, abs=1e-8)
    params = [m.q.means, m.q.sqrt_raw, m.q.logits]
    params += list(m.kernel.parameters())
    g1 = torch.autograd.grad(sum(m.kl_terms()), params)
    g2 = torch.autograd.grad(sum(general()), params)
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-8)


def test_fit_seed_picks_the_monte_carlo_draws():
    """Same seed: the same fit to the bit; another seed: other draws, so a dense fit on the
    same data differs (it was identical for every seed before the seed reached the draws)."""
    X, y = _data(N=25, seed=5)

    def fit(seed):
        m = lg.SAVIGP(likelihood="gaussian", dense=True, estimator=_samples(5))
        return m.fit(X, y, optimizer="lbfgs", max_steps=5, seed=seed, progress=False)

    a, b, c = fit(1), fit(1), fit(2)
    assert a.history_.objective == b.history_.objective
    assert a.history_.objective != c.history_.objective
    # L-BFGS holds the draws fixed (one deterministic objective, the sample-average
    # approximation); a continued Adam fit draws new numbers, it does not restart the stream
    s0 = a.sample_seed
    a.fit(X, y, optimizer="lbfgs", max_steps=2, seed=1, progress=False)
    assert a.sample_seed == s0
    a.fit(X, y, optimizer="adam", max_steps=2, seed=1, progress=False)
    assert a.sample_seed == s0 + 2


# ------------------------------------------------------------ black-box / misc ----
def test_numpy_black_box_likelihood_trains_without_torch_gradients(exact):
    X, y, ex = exact
    calls = []

    def loglik(yv, f):  # numpy only, non-differentiable floor to prove no autograd
        assert isinstance(yv, np.ndarray) and isinstance(f, np.ndarray)
        calls.append(f.shape)
        return -0.5 * (yv - f) ** 2 / 0.1 - 0.5 * np.log(2 * np.pi * 0.1) + 0 * np.floor(f)

    m = lg.SAVIGP(num_inducing=15, likelihood=loglik, posterior="fg", estimator=_samples(30))
    assert m.resolved_estimator() is None  # decided on the first batch, never on made-up data
    m.fit(X, (y - y.mean()) / y.std(), optimizer="adam", lr=0.05, max_steps=100, seed=0)
    assert m.resolved_estimator() == "score"
    assert calls and m.history_.objective[-1] > m.history_.objective[0] + 10
    mu, _ = m.predict_f(X)
    target, _ = ex.predict_f(X)
    assert np.corrcoef(mu, target)[0, 1] > 0.95


def test_softmax_mog2_classifies():
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (90, 1))
    y = np.digitize(X[:, 0], [-1, 1]).astype(float)
    m = lg.SAVIGP(
        num_inducing=10,
        likelihood=lg.likelihoods.Softmax(3),
        posterior="mog2",
        estimator=_samples(10),
    )
    m.fit(X, y, optimizer="adam", lr=0.1, max_steps=100, seed=0)
    p, _ = m.predict_y(X)
    assert p.shape == (90, 3) and np.allclose(p.sum(1), 1, atol=1e-6)
    assert (p.argmax(1) == y).mean() > 0.9
    lpd = m.log_predictive_density(X, y)
    assert np.allclose(lpd, np.log(p[np.arange(90), y.astype(int)]), atol=0.05)


def test_alternating_fit_and_paper_adadelta():
    X, y = _data(30)
    m = lg.SAVIGP(num_inducing=8, posterior="mog1", estimator=_samples(20))
    m.fit(X, y, alternate=True, global_iters=2, inner_steps=5, optimizer="lbfgs", lr=1.0)
    assert m.history_.steps == 2 * 4 * 5
    assert m.history_.objective[-1] > m.history_.objective[0]


def test_adadelta_uses_the_papers_settings_unless_overridden(monkeypatch):
    fit_mod = importlib.import_module("latentgp.training.fit")
    made = []

    def recording(name, params, lr, optimizer_kwargs=None):
        opt = fit_mod.make_optimizer.__wrapped__(name, params, lr, optimizer_kwargs)
        made.append(opt)
        return opt

    recording.__wrapped__ = fit_mod.make_optimizer
    monkeypatch.setattr(fit_mod, "make_optimizer", recording)
    X, y = _data(30)
    lg.SAVIGP(num_inducing=8, estimator=_samples(10)).fit(X, y, optimizer="adadelta", max_steps=2)
    assert made[-1].defaults["rho"] == 0.95 and made[-1].defaults["eps"] == 1e-6
    assert made[-1].defaults["lr"] == 1.0
    lg.SAVIGP(num_inducing=8, estimator=_samples(10)).fit(
        X, y, optimizer="adadelta", max_steps=2, optimizer_kwargs={"rho": 0.5}
    )
    assert made[-1].defaults["rho"] == 0.5 and made[-1].defaults["eps"] == 1e-6
    lg.SAVIGP(num_inducing=8, estimator=_samples(10)).fit(
        X, y, optimizer="adadelta", max_steps=2, paper_adadelta=False
    )
    assert made[-1].defaults["rho"] == 0.9  # the loop's default


def test_save_load_roundtrip(tmp_path):
    X, y = _data(30)
    m = lg.SAVIGP(num_inducing=8, posterior="mog2", estimator=_samples(10))
    m.fit(X, y, max_steps=20, seed=0)
    path = tmp_path / "savigp.pt"
    m.save(path)
    m2 = lg.load(path)
    assert isinstance(m2, lg.SAVIGP) and m2.num_components == 2
    a, b = m.predict_y(X), m2.predict_y(X)
    assert np.allclose(a[0], b[0]) and np.allclose(a[1], b[1])
    md = lg.SAVIGP(
        dense=True,
        posterior=lg.SAVIGP.Posterior(parameterization="lambda"),
        estimator=_samples(10),
    ).fit(X, y, max_steps=5)
    md.save(path)
    assert np.allclose(lg.load(path).predict_y(X)[0], md.predict_y(X)[0])


def test_bad_input():
    X, y = _data(20)
    with pytest.raises(ValueError, match="posterior"):
        lg.SAVIGP(posterior="gmm")
    with pytest.raises(ValueError, match="sparsity"):
        lg.SAVIGP(sparsity=1.5)
    with pytest.raises(ValueError, match="estimator"):
        lg.SAVIGP(estimator="magic")
    with pytest.raises(ValueError, match="lambda"):
        lg.SAVIGP(posterior=lg.SAVIGP.Posterior(components=2, parameterization="lambda"))
    with pytest.raises(ValueError, match="Estimator.num_samples"):
        lg.SAVIGP(estimator={"num_samples": 0})
    with pytest.warns(lg.SizeCappedWarning, match="num_inducing=50 is larger than the"):
        assert lg.SAVIGP(num_inducing=50).fit(X, y, max_steps=1).num_inducing == len(y)
    with pytest.raises(ValueError, match="full training set"):
        lg.SAVIGP(dense=True).fit(X, y, batch_size=5, max_steps=1)
    with pytest.raises(ValueError, match="X"):
        lg.SAVIGP(num_inducing=5).fit(np.full((20, 1), np.nan), y, max_steps=1)
    assert parse_posterior("mog3") == (3, "diag") and parse_posterior("FG") == (1, "full")


def test_sparsity_factor_sets_inducing_count():
    X, y = _data(40)
    m = lg.SAVIGP(sparsity=0.2, estimator=_samples(5)).fit(X, y, max_steps=2)
    assert m.M == 8 and m.Z.shape == (8, 1)
    assert isinstance(m.likelihood, Gaussian)


def test_savigp_trains_from_an_out_of_core_source(tmp_path):
    """SAVIGP.fit(source) streams shards like GPModel.fit, and equals the in-memory run."""
    lg.datasets.write_gp_draws_npy(tmp_path / "s", 300, shard_size=100, input_dim=2, seed=0)
    src = lg.datasets.ShardedArrays(tmp_path / "s")
    X, y = src.rows(np.arange(300))
    kw = dict(batch_size=50, max_steps=5, seed=0)
    a = lg.SAVIGP(num_inducing=6, estimator=_samples(5)).fit(src, **kw)
    b = lg.SAVIGP(num_inducing=6, estimator=_samples(5)).fit(X, y, **kw)
    assert a.num_data == 300
    np.testing.assert_allclose(a.predict_y(X[:20])[0], b.predict_y(X[:20])[0], rtol=1e-6)
