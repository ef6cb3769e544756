"""QSGP (seed 001): estimators against exact ELBOs, quadrature and Monte Carlo."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.kernels.features import RandomFourierFeatures, hashed_uniforms
from latentgp.likelihoods.base import gauss_hermite


def _data(n=40, d=2, seed=0, binary=False):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, d))
    y = np.sin(X[:, 0]) + 0.2 * rng.standard_normal(n)
    if binary:
        y = (y > 0).astype(float)
    return X, y


Basis, Covariance, Newton = lg.QSGP.Basis, lg.QSGP.Covariance, lg.QSGP.Newton


def _model(X, y, basis="rff", **kw):
    """A built model with random (non-optimal) variational parameters; every basis
    function per index draw unless ``basis`` is a Basis."""
    if isinstance(basis, str):
        basis = Basis(kind=basis, batch=10**6)
    # the estimator checks want the initial hyperparameters, not pretrained ones
    kw.setdefault("hyperparameters", {"pretrain_rows": 0})
    m = lg.QSGP(basis=basis, **kw)
    m.fit(X, y, max_steps=1, batch_size=min(10, len(y)), seed=0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        m.mu.copy_(0.5 * torch.randn(m.m, generator=g, dtype=torch.float64))
        m.c_dense.copy_(0.1 * torch.randn(m.c_dense.shape, generator=g, dtype=torch.float64))
        m.c_raw.add_(0.1 * torch.randn(m.m, generator=g, dtype=torch.float64))
        if m.basis.kind == "rvm":
            m.log_s.copy_(0.3 * torch.randn(m.m, generator=g, dtype=torch.float64))
    return m


def _estimates(m, X, y, reps, batch_size, basis_batch, **kw):
    m.basis = m.basis.replace(batch=basis_batch)
    return np.array(
        [m.objective_estimate(X, y, batch_size=batch_size, seed=s, **kw) for s in range(reps)]
    )


CASES = [
    dict(
        basis="rff", num_basis=30, covariance=Covariance(kind="chevron", num_dense=3, num_columns=2)
    ),
    dict(basis="rff", num_basis=25, covariance="meanfield", kernel="matern32"),
    dict(basis="inducing", covariance="meanfield"),
    dict(basis="inducing", covariance=Covariance(kind="chevron", num_dense=4, num_columns=2)),
    dict(basis="rvm", covariance=Covariance(kind="full", num_columns=5)),
]


@pytest.mark.parametrize("kw", CASES)
def test_all_indices_give_exact_elbo(kw):
    X, y = _data()
    m = _model(X, y, **kw)
    if m.covariance.kind != "meanfield":
        m.covariance = m.covariance.replace(num_columns=10**6)
    exact = m.exact_elbo(X, y)
    est = m.objective_estimate(X, y)  # every row, every basis function, every column
    assert est == pytest.approx(exact, rel=1e-10, abs=1e-8)


@pytest.mark.parametrize("kw", CASES)
def test_gaussian_estimator_is_unbiased(kw):
    X, y = _data()
    m = _model(X, y, **kw)
    exact = m.exact_elbo(X, y)
    est = _estimates(m, X, y, reps=1500, batch_size=8, basis_batch=7)
    se = est.std() / np.sqrt(len(est))
    assert abs(est.mean() - exact) < 4.5 * se, (est.mean(), exact, se)
    assert est.std() > 0  # it really is stochastic


def test_control_variate_is_unbiased_and_reduces_variance():
    """Prop. 3 targets the Phi^T Phi terms; with y = 0 they dominate the estimator (as in
    the paper's Fig. 1, which measures that term alone): the variance must drop 5x."""
    X, y = _data(n=400, d=1, seed=3)
    y = np.zeros_like(y)
    m = _model(
        X, y, num_basis=200, covariance=Covariance(kind="chevron", num_dense=2), normalize_y=False
    )
    m.setup_control_variate(X, rank=100)
    exact = m.exact_elbo(X, y)
    plain = _estimates(m, X, y, reps=600, batch_size=20, basis_batch=50)
    with_cv = _estimates(m, X, y, reps=600, batch_size=20, basis_batch=50, use_control_variate=True)
    se = with_cv.std() / np.sqrt(len(with_cv))
    assert abs(with_cv.mean() - exact) < 4.5 * se
    assert with_cv.var() < 0.2 * plain.var(), (with_cv.var(), plain.var())


def test_running_expectation_tracks_sparse_updates():
    """Prop. 3: after sparse steps the O(1)-updated state equals Phi_p mu recomputed."""
    X, y = _data(n=300, d=1, seed=4)
    m = lg.QSGP(
        basis=Basis(kind="rff", batch=40),
        num_basis=500,
        covariance=Covariance(kind="chevron", num_dense=3, closed_form_diagonal=False),
        control_variate=50,
        learn_hyperparameters=False,
    )
    m.fit(X, y, max_steps=60, batch_size=30, seed=1)
    cv = m.training_state()["train_state"]["cv"]
    m.setup_control_variate(X, rank=50, seed=1)  # recomputed at the current parameters
    fresh = m.training_state()["train_state"]["cv"]
    assert torch.allclose(cv["Xp"], fresh["Xp"])
    assert torch.allclose(cv["a"], fresh["a"], atol=1e-9)
    assert torch.allclose(cv["A"], fresh["A"], atol=1e-9)


def test_step_touches_only_sampled_rows():
    X, y = _data(n=100, d=1)
    m = lg.QSGP(
        basis=Basis(kind="rff", batch=20),
        num_basis=5000,
        learn_hyperparameters=False,
        covariance=Covariance(closed_form_diagonal=False),
    )
    m.fit(X, y, max_steps=1, batch_size=10, seed=0)
    before = m.mu.detach().clone(), m.c_raw.detach().clone()
    m.fit(X, y, max_steps=1, batch_size=10, seed=5)
    changed = (m.mu != before[0]) | (m.c_raw != before[1])
    assert 0 < int(changed.sum()) <= 40


def test_rff_kernel_converges_to_exact_kernel():
    rng = np.random.default_rng(0)
    X = torch.as_tensor(rng.normal(size=(15, 3)))
    for name, dof in (("rbf", None), ("matern32", 3), ("matern52", 5), ("matern12", 1)):
        k = lg.kernels.kernel_from_name(name)
        k.build(3, (), torch.float64)
        with torch.no_grad():
            k.raw_lengthscale.copy_(torch.tensor([0.3, 0.8, 1.5]))
            K = k(X)
            errs = []
            for m in (100, 10_000, 200_000):
                f = RandomFourierFeatures(m, 3, dof, seed=2)
                errs.append(float((f.kernel(X, X, k.lengthscale, k.variance) - K).abs().mean()))
        # Monte Carlo error ~ 1/sqrt(m): a factor 10 per 100x features (allow slack)
        assert errs[1] < errs[0] / 4 and errs[2] < errs[1] / 2.5, (name, errs)
        assert errs[2] < 0.01


def test_hashed_features_are_reproducible_and_uniform():
    idx = torch.tensor([0, 5, 9_999_999])
    a, b = hashed_uniforms(idx, 4, 3), hashed_uniforms(idx, 4, 3)
    assert torch.equal(a, b)
    assert not torch.equal(a, hashed_uniforms(idx, 4, 4))
    u = hashed_uniforms(torch.arange(100_000), 2, 0)
    assert abs(float(u.mean()) - 0.5) < 0.005 and abs(float(u.var()) * 12 - 1) < 0.02


@pytest.mark.parametrize("lik", ["bernoulli", "laplace"])
def test_lower_bound_below_true_expected_log_likelihood(lik):
    X, y = _data(n=30, binary=lik == "bernoulli")
    cov = Covariance(kind="chevron", num_dense=2)
    m = _model(X, y, num_basis=20, covariance=cov, likelihood=lik)
    exact = m.exact_elbo(X, y)  # quadrature with the exact phi Sigma phi^T
    m.covariance = cov.replace(num_columns=10**6)
    assert m.objective_estimate(X, y) == pytest.approx(exact, rel=1e-10)  # all indices
    est = _estimates(m, X, y, reps=800, batch_size=30, basis_batch=6)
    se = est.std() / np.sqrt(len(est))
    assert est.mean() + 3 * se < exact, (est.mean(), exact)


def test_theorem3_correction_matches_monte_carlo_not_printed_form():
    """E_q log g(phi w) by sampling w; ours uses sqrt(variance), the printed form does not."""
    X, y = _data(n=25, binary=True)
    m = _model(X, y, basis="rff", num_basis=15, covariance="full", likelihood="bernoulli")
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y)
    with torch.no_grad():
        m.c_raw.add_(np.log(4.0))  # a posterior variance well away from 1
        m.c_dense.mul_(4.0)
        Phi = m.features(Xt, torch.arange(m.m))
        C = m.dense_factor()
        a, v = Phi @ m.mu, ((Phi @ C) ** 2).sum(1)
        g = torch.Generator().manual_seed(0)
        W = m.mu + torch.randn(200_000, m.m, generator=g, dtype=torch.float64) @ C.T
        mc = m.likelihood.log_prob(yt, W @ Phi.T).mean(0)
        ours = m.likelihood.expected_log_prob(yt, a, v)
        z, w = gauss_hermite(60)
        printed = (w[:, None] * m.likelihood.log_prob(yt, a + z[:, None] * v)).sum(0)
    assert torch.allclose(ours, mc, atol=5e-3)
    assert float((printed - mc).abs().max()) > 0.05


def test_closed_form_diagonal_is_optimal():
    X, y = _data()
    m = _model(X, y, basis="rff", num_basis=30, covariance="meanfield")
    m.set_closed_form_diagonal(X)
    best = m.exact_elbo(X, y)
    for eps in (-0.05, 0.05):
        with torch.no_grad():
            m.c_raw.add_(eps)
        assert m.exact_elbo(X, y) < best
        with torch.no_grad():
            m.c_raw.sub_(eps)


@pytest.mark.slow
def test_fit_matches_exact_gp_mean():
    rng = np.random.default_rng(0)
    X = rng.uniform(-4, 4, (300, 1))
    y = np.sinc(X[:, 0]) + 0.1 * rng.standard_normal(300)
    Xs = np.linspace(-4, 4, 50)[:, None]
    ex = lg.ExactGP(
        kernel=lg.kernels.RBF(lengthscale=0.5, variance=0.5),
        likelihood=lg.likelihoods.Gaussian(0.05),
    )
    ex.fit(X, y, max_steps=50)
    # all m = N basis functions per step, data subsampled (n~ = 100) with the control
    # variate (sub-sampling the Phi = S = K basis as well needs many more steps)
    q = lg.QSGP(
        basis=Basis(kind="inducing", batch=300),
        kernel=ex.kernel,
        likelihood=ex.likelihood,
        control_variate=50,
    )
    q.fit(X, y, max_steps=800, batch_size=100, seed=0, lr=0.05)
    me, _ = ex.predict_f(Xs)
    mq, vq = q.predict_f(Xs)
    assert np.sqrt(np.mean((me - mq) ** 2)) < 0.05
    assert isinstance(q.history_, lg.FitHistory) and q.history_.steps == 800


def test_augmentation_restores_prior_variance_far_away():
    X, y = _data(n=20, d=1)
    q = lg.QSGP(
        basis="inducing",
        kernel=lg.kernels.RBF(lengthscale=1.0, variance=2.0),
        likelihood=lg.likelihoods.Gaussian(0.01),
        normalize_y=False,
    )
    q.fit(X, y, max_steps=20, batch_size=20)
    far = np.array([[50.0]])
    _, v_aug = q.predict_f(far)
    q.augment = False
    _, v_plain = q.predict_f(far)
    near = X[:5]
    _, vn_plain = q.predict_f(near)
    q.augment = True
    _, vn_aug = q.predict_f(near)
    assert v_aug[0] == pytest.approx(2.0, rel=1e-6) and v_plain[0] < 1e-6
    assert np.all(vn_aug >= vn_plain)


def test_classification_predicts_probabilities():
    X, y = _data(n=200, binary=True)
    q = lg.QSGP(num_basis=2000, likelihood="bernoulli", basis=Basis(batch=200))
    q.fit(X, y, max_steps=300, batch_size=50, seed=0)
    p, _ = q.predict_y(X)
    assert np.all((p > 0) & (p < 1))
    assert np.mean((p > 0.5) == (y == 1)) > 0.85


def test_save_load_round_trip(tmp_path):
    X, y = _data()
    for kw in (dict(basis="rff", num_basis=50, covariance="chevron"), dict(basis="rvm")):
        q = lg.QSGP(**kw).fit(X, y, max_steps=20, batch_size=10, seed=0)
        path = tmp_path / "q.pt"
        q.save(path)
        r = lg.load(path)
        assert type(r) is lg.QSGP
        np.testing.assert_allclose(r.predict_y(X)[0], q.predict_y(X)[0], rtol=1e-12)
        np.testing.assert_allclose(r.predict_y(X)[1], q.predict_y(X)[1], rtol=1e-12)
        np.testing.assert_allclose(
            r.log_predictive_density(X, y), q.log_predictive_density(X, y), rtol=1e-12
        )


def test_bad_input():
    X, y = _data()
    with pytest.raises(ValueError, match="basis"):
        lg.QSGP(basis="fourier")
    with pytest.raises(ValueError, match="covariance"):
        lg.QSGP(covariance="banded")
    with pytest.raises(ValueError, match="likelihood"):
        lg.QSGP(likelihood="poisson")
    with pytest.raises(ValueError, match="spectral"):
        lg.QSGP(kernel="periodic")
    with pytest.raises(ValueError, match="num_basis"):
        lg.QSGP(num_basis=0)
    with pytest.raises(ValueError, match="control_variate"):
        lg.QSGP(likelihood="bernoulli", control_variate=10)
    with pytest.raises(ValueError, match="optimizer"):
        lg.QSGP().fit(X, y, optimizer="adam", max_steps=1)
    with pytest.raises(ValueError, match="num_basis"):
        lg.QSGP(basis="inducing", num_basis=100).fit(X, y, max_steps=1)
    with pytest.raises(ValueError, match="NaN"):
        lg.QSGP().fit(np.full_like(X, np.nan), y, max_steps=1)
    with pytest.warns(lg.SizeCappedWarning, match="batch_size=1000 is larger than the"):
        lg.QSGP(num_basis=20).fit(X, y, batch_size=1000, max_steps=1)
    q = lg.QSGP(num_basis=20).fit(X, y, max_steps=2)
    with pytest.raises(ValueError, match="columns"):
        q.predict_y(np.zeros((3, 5)))
    with pytest.raises(RuntimeError, match="fit"):
        lg.QSGP().predict_y(X)


def _with_dense(kind, num_dense):
    """The covariance ``kind`` with ``num_dense`` dense columns where it has any."""
    return Covariance(kind=kind, num_dense=num_dense if kind == "chevron" else None)


@pytest.mark.parametrize("covariance", ["meanfield", "chevron"])
def test_rvm_em_update_is_coordinate_ascent_on_the_exact_elbo(covariance):
    """The "em" RVM step sets c_ii (diagonal-only columns, Prop. 1) and then s_i to their
    exact ELBO optima: the ELBO does not decrease, and its derivative with respect to each
    log s_i vanishes afterwards (central finite differences of the exact ELBO)."""
    X, y = _data(n=30)
    m = _model(X, y, basis="rvm", covariance=_with_dense(covariance, 3))
    Xt = torch.as_tensor(X)
    before = m.exact_elbo(X, y)
    U = torch.arange(m.m)
    m.rvm_em_update(U, m.column_norms(Xt))
    after = m.exact_elbo(X, y)
    assert after >= before - 1e-9
    h = 1e-5
    for i in (0, 2, 7, 29):  # dense-column rows (chevron) and diagonal-only rows
        with torch.no_grad():
            m.log_s[i] += h
            up = m.exact_elbo(X, y)
            m.log_s[i] -= 2 * h
            down = m.exact_elbo(X, y)
            m.log_s[i] += h
        assert abs(up - down) / (2 * h) < 1e-6


@pytest.mark.parametrize("covariance", ["meanfield", "chevron"])
def test_rvm_mackay_update_has_em_fixed_points_and_takes_longer_steps(covariance):
    """MacKay's re-estimate s_i = (1 - s_i Sigma_ii) / mu_i^2 moves each s_i in the same
    direction as the em optimum 1 / (mu_i^2 + Sigma_ii), at least as far, and leaves em's
    fixed point where it is."""
    X, y = _data(n=30)
    m = _model(X, y, basis="rvm", covariance=_with_dense(covariance, 3))
    U = torch.arange(m.m)
    colnorm = m.column_norms(torch.as_tensor(X))
    start = m.log_s.detach().clone()
    m.rvm_em_update(U, colnorm)
    em_step = m.log_s.detach() - start
    with torch.no_grad():
        m.log_s.copy_(start)
    m.rvm_em_update(U, colnorm, mackay=True)
    mackay_step = m.log_s.detach() - start
    moved = em_step.abs() > 1e-9
    assert moved.sum() > 20
    assert torch.equal(torch.sign(mackay_step[moved]), torch.sign(em_step[moved]))
    assert (mackay_step.abs() >= em_step.abs() - 1e-12).all()
    assert (mackay_step.abs() > 1.5 * em_step.abs())[moved].any()
    # at em's fixed point (c_ii and s_i iterated jointly with the mean held) MacKay stays
    for _ in range(500):
        m.rvm_em_update(U, colnorm)
    fixed = m.log_s.detach().clone()
    m.rvm_em_update(U, colnorm)
    assert torch.allclose(m.log_s.detach(), fixed, atol=1e-9)
    m.rvm_em_update(U, colnorm, mackay=True)
    assert torch.allclose(m.log_s.detach(), fixed, atol=1e-7)


def test_rvm_update_names_are_checked():
    with pytest.raises(ValueError, match="Basis.rvm_update must be"):
        lg.QSGP(basis=Basis(kind="rvm", rvm_update="tipping"))


@pytest.mark.parametrize("covariance", ["meanfield", "chevron"])
def test_nystrom_control_variate_is_unbiased_and_reduces_variance(covariance):
    """Appendix F.2 (S = K): the Nyström control variate of the prior term mu^T K mu has
    zero mean, and with smooth kernels (K close to its Nyström approximation on the
    support points) it removes most of that term's sampling variance."""
    X, y = _data(n=120, d=1, seed=5)
    y = np.zeros_like(y)
    # a large noise variance makes the data term (scaled by 1 / s2) negligible, so that
    # the estimator's variance is that of the prior term mu^T K mu (and c_r^T K c_r)
    kw = dict(
        basis="inducing",
        covariance=covariance,
        normalize_y=False,
        likelihood=lg.likelihoods.Gaussian(1e4),
    )
    if covariance == "chevron":
        kw.update(covariance=Covariance(kind="chevron", num_dense=3, num_columns=2))
    m = _model(X, y, kernel=lg.kernels.RBF(lengthscale=1.5), **kw)
    exact = m.exact_elbo(X, y)
    m.control_variate = m.control_variate.replace(nystrom=False)
    m.setup_control_variate(X, rank=30)
    prop3 = _estimates(m, X, y, reps=500, batch_size=120, basis_batch=20, use_control_variate=True)
    m.control_variate = m.control_variate.replace(nystrom=True)
    m.setup_control_variate(X, rank=30)
    both = _estimates(m, X, y, reps=500, batch_size=120, basis_batch=20, use_control_variate=True)
    se = both.std() / np.sqrt(len(both))
    assert abs(both.mean() - exact) < 4.5 * se, (both.mean(), exact, se)
    assert both.var() < 0.2 * prop3.var(), (both.var(), prop3.var())


def test_nystrom_running_expectation_tracks_sparse_updates():
    """b = L_P^{-1} K(P, Z) mu and B (dense columns), updated in O(n_bar m~) per step,
    equal their recomputation after training."""
    X, y = _data(n=200, d=1, seed=6)
    m = lg.QSGP(
        basis=Basis(kind="inducing", batch=30),
        covariance=Covariance(kind="chevron", num_dense=3, closed_form_diagonal=False),
        control_variate=40,
        kernel=lg.kernels.RBF(lengthscale=1.0),
    )
    m.fit(X, y, max_steps=40, batch_size=30, seed=2)
    cv = m.training_state()["train_state"]["cv"]
    m.setup_control_variate(X, rank=40, seed=2)  # recomputed at the current parameters
    fresh = m.training_state()["train_state"]["cv"]
    assert torch.allclose(cv["b"], fresh["b"], atol=1e-8)
    assert torch.allclose(cv["B"], fresh["B"], atol=1e-8)


def test_rvm_mackay_update_falls_back_to_em_when_gamma_is_not_positive():
    """A q whose posterior variance exceeds the prior's (Sigma_ii >= 1 / s_i, possible
    before convergence) has gamma_i <= 0: MacKay's formula would send s_i to ~1e-308.
    Those rows take em's 1 / (mu_i^2 + Sigma_ii) instead; the others keep MacKay's value."""
    X, y = _data(n=30)
    m = _model(X, y, basis="rvm", covariance="meanfield")
    U = torch.arange(m.m)
    with torch.no_grad():
        m.log_s.fill_(math.log(10.0))
        m.c_raw[:10] = 0.5 * math.log(0.5)  # Sigma_ii = 0.5 > 1 / s_i = 0.1
        m.c_raw[10:] = 0.5 * math.log(0.01)  # Sigma_ii = 0.01 < 0.1: gamma = 0.9
        m.mu.fill_(0.3)
    m.rvm_em_update(U, None, mackay=True)
    s = torch.exp(m.log_s.detach())
    assert torch.allclose(s[:10], torch.full((10,), 1.0 / (0.09 + 0.5), dtype=s.dtype))
    assert torch.allclose(s[10:], torch.full((20,), 0.9 / 0.09, dtype=s.dtype))


NEWTON_CASES = [
    dict(basis="rff", num_basis=30, covariance="meanfield"),
    dict(basis="inducing", covariance=Covariance(kind="chevron", num_dense=4)),
    dict(basis="rvm", covariance=Covariance(kind="chevron", num_dense=3)),
]


@pytest.mark.parametrize("kw", NEWTON_CASES)
def test_newton_mean_step_with_everything_sampled_is_the_exact_optimum(kw):
    """All rows, all basis functions and rho = 1: one block-Newton step lands on the
    maximiser (Phi^T Phi / s2 + S)^{-1} Phi^T y / s2 of the exact ELBO in mu."""
    X, y = _data()
    m = _model(X, y, mean_step=Newton(damping=1.0), learn_hyperparameters=False, **kw)
    Xt = torch.as_tensor(X, dtype=torch.float64)
    yt = m.scale_targets(y)
    U = torch.arange(m.m)
    with torch.no_grad():
        Phi = m.features(Xt, U)
        s2 = m.likelihood.variance
        S = m.prior_block(U)
        want = torch.linalg.solve(Phi.T @ Phi / s2 + S, Phi.T @ yt / s2)
        m.newton_mean(Xt, yt, U, len(y))
    # compared through the fit Phi mu: with Phi = S = K (inducing) H is ill-conditioned
    # and mu itself is determined only up to its near-null directions
    assert torch.allclose(Phi @ m.mu.detach(), Phi @ want, rtol=1e-6, atol=1e-6)
    best = m.exact_elbo(X, y)
    g = torch.Generator().manual_seed(3)
    for _ in range(3):
        d = 1e-3 * torch.randn(m.m, generator=g, dtype=torch.float64)
        with torch.no_grad():
            m.mu.add_(d)
        assert m.exact_elbo(X, y) < best
        with torch.no_grad():
            m.mu.sub_(d)


def test_newton_mean_step_block_hessian_and_gradient_are_unbiased():
    """Over random row batches, the mean of the batch's block step ingredients equals
    the full-data H_UU and g_U (both are linear in the row weights n / |B|)."""
    X, y = _data(n=30)
    m = _model(
        X, y, basis="rvm", covariance="meanfield", mean_step="newton", learn_hyperparameters=False
    )
    Xt = torch.as_tensor(X, dtype=torch.float64)
    yt = m.scale_targets(y)
    U = torch.tensor([0, 3, 7, 11, 20])
    mu = m.mu.detach()
    s2 = m.likelihood.variance.detach()
    full = m.features(Xt, torch.arange(m.m)).detach()
    want_g = full[:, U].T @ (yt - full @ mu) / s2
    want_H = full[:, U].T @ full[:, U] / s2
    # every 3-row batch of a partition of the rows: the average is the full sum exactly
    rows = torch.randperm(30, generator=torch.Generator().manual_seed(0)).reshape(10, 3)
    got_g = sum((30 / 3) * full[r][:, U].T @ (yt[r] - full[r] @ mu) / s2 for r in rows) / 10
    got_H = sum((30 / 3) * full[r][:, U].T @ full[r][:, U] / s2 for r in rows) / 10
    assert torch.allclose(got_g, want_g) and torch.allclose(got_H, want_H)
    # and the model's step uses exactly these pieces: rho = 1 on one batch
    m.mean_step = m.mean_step.replace(damping=1.0)
    r = rows[0]
    g = (30 / 3) * full[r][:, U].T @ (yt[r] - full[r] @ mu) / s2 - m.prior_block(U) @ mu[U]
    H = (30 / 3) * full[r][:, U].T @ full[r][:, U] / s2 + m.prior_block(U)
    want = mu[U] + torch.linalg.solve(H, g)
    with torch.no_grad():
        got = m.newton_mean(Xt[r], yt[r], U, 30)
    assert torch.allclose(got, want, rtol=1e-8, atol=1e-10)


def test_newton_mean_step_prunes_the_rvm_where_gradient_steps_do_not():
    """Noisy sinc, n = m = 100: the exact-posterior RVM keeps ~12 basis functions.
    AdaGrad on the mean leaves nearly all of them (documented); block-Newton steps with
    the em update of s prune most of them in the same number of steps."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-10, 10, (100, 1))
    y = np.sinc(X[:, 0] / np.pi) + 0.1 * rng.standard_normal(100)
    counts = {}
    for step in ("gradient", Newton(damping=0.5)):
        q = lg.QSGP(
            basis=Basis(kind="rvm", batch=50, rvm_update="em"),
            covariance=Covariance(kind="chevron", num_dense=5, closed_form_diagonal=False),
            kernel=lg.kernels.RBF(lengthscale=1.0),
            likelihood=lg.likelihoods.Gaussian(0.01),
            control_variate=50,
            mean_step=step,
        )
        q.fit(X, y, max_steps=800, batch_size=50, lr=0.01, seed=0, progress=False)
        counts[str(step)] = q.relevance_vectors(1e4).size
    assert counts["gradient"] > 80
    assert counts[str(Newton(damping=0.5))] < 40


def test_newton_mean_step_arguments_are_checked():
    with pytest.raises(ValueError, match="mean_step must be 'auto', 'gradient', 'newton'"):
        lg.QSGP(mean_step="lbfgs")
    with pytest.raises(ValueError, match=r"Newton.damping must be in \(0, 1\]"):
        lg.QSGP(mean_step=Newton(damping=1.5))
    with pytest.raises(ValueError, match="needs the Gaussian likelihood"):
        lg.QSGP(mean_step="newton", likelihood="bernoulli")
    with pytest.raises(ValueError, match="Newton.ridge must be"):
        lg.QSGP(mean_step=Newton(ridge=-1.0))
    with pytest.raises(ValueError, match="newton_mean needs"):
        m = _model(*_data(), basis="rvm", mean_step="gradient")
        m.newton_mean(torch.zeros(2, 2), torch.zeros(2), None, 2)


def test_newton_ridge_shortens_the_step_towards_the_gradient():
    """With a ridge the step solves (H + lam I) d = g: checked against that solve."""
    X, y = _data(n=30)
    m = _model(
        X,
        y,
        basis="rvm",
        covariance="meanfield",
        mean_step=Newton(damping=1.0, ridge=0.05),
        learn_hyperparameters=False,
    )
    Xt = torch.as_tensor(X, dtype=torch.float64)
    yt = m.scale_targets(y)
    U = torch.arange(m.m)
    mu = m.mu.detach().clone()
    with torch.no_grad():
        Phi = m.features(Xt, U)
        H = Phi.T @ Phi / m.likelihood.variance + m.prior_block(U)
        g = Phi.T @ (yt - Phi @ mu) / m.likelihood.variance - m.prior_block(U) @ mu
        lam = 0.05 * torch.diagonal(H).mean()
        want = mu + torch.linalg.solve(H + lam * torch.eye(m.m, dtype=H.dtype), g)
        got = m.newton_mean(Xt, yt, U, 30)
    assert torch.allclose(got, want, rtol=1e-8, atol=1e-10)
    assert m.get_config()["mean_step"] == {"damping": 1.0, "ridge": 0.05, "anchor_every": None}


def test_random_feature_qsgp_is_translation_invariant():
    """Shifting X by a constant (10, 10^6: timestamps, coordinates) leaves the fit and the
    test error unchanged: the features see centred inputs (issue 29: relative RMSE went
    from 0.106 to 0.731 at an offset of 10 and 0.996 at 10^6)."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (600, 2))
    y = np.sin(2 * X[:, 0]) * np.cos(X[:, 1]) + 0.05 * rng.normal(size=600)
    Xt = rng.uniform(-2, 2, (200, 2))
    yt = np.sin(2 * Xt[:, 0]) * np.cos(Xt[:, 1])
    errs = []
    for shift in (0.0, 10.0, 1e6):
        m = lg.QSGP(num_basis=200, basis="rff", learn_hyperparameters=True)
        m.fit(X + shift, y, max_steps=300, seed=0, progress=False)
        mean, _ = m.predict_y(Xt + shift)
        errs.append(np.sqrt(np.mean((mean - yt) ** 2)) / np.std(yt))
    assert errs[0] < 0.5, errs
    np.testing.assert_allclose(errs, errs[0], rtol=0.05)


def _exact_mean(m, X, y):
    """The maximiser ``(Phi^T Phi / s2 + S)^{-1} Phi^T y / s2`` of the exact ELBO in mu at
    the model's current hyperparameters (scaled targets), with ``Phi`` ``(n, m)``."""
    Xt = torch.as_tensor(X, dtype=torch.float64)
    U = torch.arange(m.m)
    with torch.no_grad():
        Phi = m.features(Xt, U)
        s2 = m.likelihood.variance
        H = Phi.T @ Phi / s2 + m.prior_block(U)
        want = torch.linalg.solve(H, Phi.T @ m.scale_targets(y) / s2)
    return Phi, want


def test_anchored_newton_step_with_all_rows_is_the_exact_optimum():
    """With every row in the batch the anchor's correction cancels exactly: from any
    anchor, one rho = 1 step over all basis functions lands on the optimal mean."""
    X, y = _data(n=60)
    m = _model(X, y, basis="rff", num_basis=25, mean_step=Newton(damping=1.0),
               learn_hyperparameters=False)  # fmt: skip
    Xt = torch.as_tensor(X, dtype=torch.float64)
    yt = m.scale_targets(y)
    with torch.no_grad():
        anchor = lg.models.qsgp.newton.refresh_anchor(m, Xt, yt)
        m.mu.add_(0.3)  # the mean has moved since the anchor
        m.newton_mean(Xt, yt, torch.arange(m.m), len(y), anchor=anchor)
    Phi, want = _exact_mean(m, X, y)
    assert torch.allclose(Phi @ m.mu.detach(), Phi @ want, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("basis", ["rff", "inducing"])
def test_mean_objective_is_the_elbo_mean_part_and_the_exact_mean_minimises_it(basis):
    """``mean_objective`` at an anchor equals ``|y - Phi mu|^2 / s2 + mu^T S mu`` computed
    densely (S the full prior block: K(Z, Z) for the inducing basis), and the closed-form
    optimal mean is its minimiser (any perturbation raises it)."""
    newton = lg.models.qsgp.newton
    X, y = _data(n=50)
    m = _model(X, y, basis=basis, num_basis=20, learn_hyperparameters=False)
    Xt = torch.as_tensor(X, dtype=torch.float64)
    yt = m.scale_targets(y)
    U = torch.arange(m.m)
    with torch.no_grad():
        Phi, S, mu = m.features(Xt, U), m.prior_block(U), m.mu.detach()
        s2 = m.likelihood.variance
        r = yt - Phi @ mu
        want = float(r @ r / s2 + mu @ S @ mu)
        got = newton.mean_objective(m, newton.refresh_anchor(m, Xt, yt))
        assert got == pytest.approx(want, rel=1e-10)
        _, best = _exact_mean(m, X, y)
        m.mu.copy_(best)
        j_best = newton.mean_objective(m, newton.refresh_anchor(m, Xt, yt))
        g = torch.Generator().manual_seed(3)
        for _ in range(3):
            m.mu.copy_(best + 1e-3 * torch.randn(m.m, generator=g, dtype=torch.float64))
            assert newton.mean_objective(m, newton.refresh_anchor(m, Xt, yt)) > j_best


def test_guarded_anchor_undoes_steps_that_raised_the_objective():
    """Steps that made the mean worse since the last anchor are undone (the mean is the
    anchor's again, the damping factor halves, the back-off is recorded); steps that made
    it better give a new anchor; after a change of the features the values are not
    comparable and the new anchor is taken as it is."""
    newton = lg.models.qsgp.newton
    X, y = _data(n=50)
    m = _model(X, y, basis="rff", num_basis=20, learn_hyperparameters=False)
    Xt = torch.as_tensor(X, dtype=torch.float64)
    yt = m.scale_targets(y)
    _, best = _exact_mean(m, X, y)
    with torch.no_grad():
        m.mu.copy_(best)
        state = {"anchor": newton.refresh_anchor(m, Xt, yt), "newton_scale": 1.0}
        m.mu.add_(0.2)  # worse
        kept = newton.guarded_anchor(m, Xt, yt, state, step=7)
        assert kept is state["anchor"]
        assert torch.equal(m.mu.detach(), best)
        assert state["newton_scale"] == 0.5 and state["newton_ridge"] == 0.01
        (step, j_old, j_new), = state["newton_backoffs"]
        assert step == 7 and j_new > j_old
        m.mu.zero_()
        state["anchor"] = newton.refresh_anchor(m, Xt, yt)
        m.mu.copy_(best)  # better
        new = newton.guarded_anchor(m, Xt, yt, state, step=9)
        assert new is not state["anchor"] and torch.equal(new["mu"], best)
        assert state["newton_scale"] == 0.5 and len(state["newton_backoffs"]) == 1
        state["anchor"] = new
        m.kernel.lengthscale = 2.0 * m.kernel.lengthscale.detach()
        m.mu.add_(0.2)  # worse, but under other features
        moved = newton.guarded_anchor(m, Xt, yt, state, step=11)
        assert moved is not new and torch.equal(moved["mu"], m.mu.detach())
        assert len(state["newton_backoffs"]) == 1


@pytest.mark.parametrize("basis", ["rff", "inducing"])
def test_guarded_back_off_keeps_the_control_variate_in_step(basis):
    """After a back-off the control variate's running expectations are those of the
    restored mean: ``a = Phi_p mu`` (and, with the Nyström variate, ``b = L_P^{-1} a``)."""
    cvs, newton = lg.models.qsgp.control_variates, lg.models.qsgp.newton
    X, y = _data(n=50)
    m = _model(X, y, basis=basis, num_basis=20, learn_hyperparameters=False,
               control_variate={"rank": 8, "nystrom": True})
    Xt = torch.as_tensor(X, dtype=torch.float64)
    yt = m.scale_targets(y)
    _, best = _exact_mean(m, X, y)
    with torch.no_grad():
        m.mu.copy_(best)
        cv = cvs.make_control_variate(m, Xt, 8, 0)
        state = {"anchor": newton.refresh_anchor(m, Xt, yt), "newton_scale": 1.0, "cv": cv}
        step = 0.3 * torch.ones(m.m, dtype=torch.float64)
        cvs.shift_control_variate(m, cv, step)  # steps that track the variate, as training's
        m.mu.add_(step)
        newton.guarded_anchor(m, Xt, yt, state, step=5)
        assert torch.equal(m.mu.detach(), best)
        fresh = cvs.make_control_variate(m, Xt, 8, 0)
        assert torch.allclose(cv["a"], fresh["a"], rtol=0, atol=1e-10)
        if basis == "inducing":
            assert torch.allclose(cv["b"], fresh["b"], rtol=0, atol=1e-10)


def test_guarded_newton_steps_converge_where_unguarded_ones_diverge(monkeypatch):
    """Heavy-tailed inputs (log-normal, as uci/protein's) and undamped steps (rho = 1) on
    minibatches of 40 of 400 rows: the minibatch block underestimates the curvature and
    the unguarded steps diverge; with the check at each anchor the damping backs off and
    the mean converges to the closed-form optimum."""
    rng = np.random.default_rng(3)
    X = np.exp(1.2 * rng.standard_normal((400, 2)))
    y = np.sin(X[:, 0]) + 0.3 * np.cos(3 * X[:, 1]) + 0.05 * rng.standard_normal(400)

    def fit():
        q = lg.QSGP(40, basis=Basis(kind="rff", batch=8), mean_step=Newton(damping=1.0),
                    kernel=lg.kernels.RBF(lengthscale=0.5),
                    likelihood=lg.likelihoods.Gaussian(0.01),
                    learn_hyperparameters=False)  # fmt: skip
        q.fit(X, y, max_steps=400, batch_size=40, seed=0, progress=False)
        Phi, want = _exact_mean(q, X, y)
        return q, float(torch.sqrt(torch.mean((Phi @ q.mu.detach() - Phi @ want) ** 2)))

    q, err = fit()
    assert err < 1e-2
    assert any("Newton mean step backed off" in e for e in q.history_.events)
    step_module = lg.models.qsgp.step
    monkeypatch.setattr(step_module, "guarded_anchor",
                        lambda model, X, y, state, step: lg.models.qsgp.newton.refresh_anchor(
                            model, X, y))
    _, err_unguarded = fit()
    assert not err_unguarded < 1.0  # diverged (or NaN)


def test_anchored_newton_steps_converge_to_the_exact_mean_where_plain_steps_stall():
    """Minibatch steps (40 of 200 rows, 8 of 40 features per draw) at fixed rho: with the
    variance-reduction anchor the mean converges to the closed-form optimum of the random-
    feature model; without it (anchor_every=0) the minibatch noise leaves it far off."""
    rng = np.random.default_rng(1)
    X = rng.uniform(-3, 3, (200, 1))
    y = np.sin(2 * X[:, 0]) + 0.05 * rng.standard_normal(200)
    err = {}
    for every in (None, 0):
        q = lg.QSGP(40, basis=Basis(kind="rff", batch=8),
                    mean_step=Newton(damping=0.3, anchor_every=every),
                    kernel=lg.kernels.RBF(lengthscale=0.7),
                    likelihood=lg.likelihoods.Gaussian(0.01),
                    learn_hyperparameters=False)  # fmt: skip
        q.fit(X, y, max_steps=600, batch_size=40, seed=0, progress=False)
        Phi, want = _exact_mean(q, X, y)
        f = Phi @ q.mu.detach()
        err[every] = float(torch.sqrt(torch.mean((f - Phi @ want) ** 2)))
    assert err[None] < 1e-3
    assert err[0] > 20 * err[None]


def test_newton_fit_reaches_the_closed_form_posterior_mean():
    """``lg.QSGP(m, mean_step="newton").fit(X, y)`` with every other default (its anchor, learned
    hyperparameters, stopped by the automatic rule or its ceiling): the fitted mean is
    the closed-form posterior mean of the random-feature model at the final
    hyperparameters, and its predictions match."""
    rng = np.random.default_rng(2)
    X = rng.uniform(-3, 3, (400, 2))
    y = np.sin(X[:, 0]) * np.cos(X[:, 1]) + 0.1 * rng.standard_normal(400)
    q = lg.QSGP(60, mean_step="newton").fit(X, y, seed=0, progress=False)
    assert isinstance(q.mean_step, Newton)
    Phi, want = _exact_mean(q, X, y)
    f = Phi @ q.mu.detach()
    assert float(torch.sqrt(torch.mean((f - Phi @ want) ** 2))) < 0.01 * float(f.std())
    mean, _ = q.predict_y(X)
    assert np.sqrt(np.mean((mean - (np.sin(X[:, 0]) * np.cos(X[:, 1]))) ** 2)) < 0.1


def test_anchor_every_is_checked_and_a_file_without_mean_step_loads_as_gradient():
    with pytest.raises(ValueError, match="Newton.anchor_every"):
        Newton(anchor_every=-1)
    assert Newton().anchor_interval(36000, 2000, 250) == 18
    assert Newton().anchor_interval(36000, 500, 250) == 0  # n~ < 4 m~: no anchor
    assert Newton(anchor_every=0).anchor_interval(36000, 2000, 250) == 0
    assert Newton(anchor_every=7).anchor_interval(36000, 500, 250) == 7
    cfg = lg.QSGP(30).get_config()
    del cfg["mean_step"]
    assert lg.QSGP.from_config(cfg).mean_step == "gradient"


def test_default_fit_pretrains_the_kernel_keeps_it_and_picks_the_mean_step():
    """The default Gaussian random-feature fit: the kernel and noise of an exact GP on
    1,000 random rows (re-derived here by fitting that exact GP independently), the
    kernel kept through training and the noise learned; on at least 1,000 rows the
    anchored Newton step with its own fit defaults (n~ = min(N, 2,000)); below, the
    gradient step."""
    from latentgp.models.exact import pretrain_subset

    X, y = _data(n=1200, d=2, seed=5)
    assert lg.QSGP().hyperparameters.pretrain_rows == 1000
    m = lg.QSGP(num_basis=200, hyperparameters={"pretrain_rows": 300})  # 300: a faster test
    m.fit(X, y, max_steps=20, seed=0, progress=False)
    assert isinstance(m.mean_step, Newton) and m.history_.batch_size == 1200
    pre, train = m.history_.stages
    assert pre["stage"] == "pretrain" and pre["rows"] == 300 and pre["reason"] == "converged"
    assert train["rows"] == 1200 and any("pretrained by an exact GP" in e
                                         for e in m.history_.events)
    idx = pretrain_subset(1200, 300, m.basis.seed).numpy()
    ys = m.scale_targets(y).numpy()
    ex = lg.ExactGP(normalize_y=False).fit(X[idx], ys[idx], seed=0, progress=False)
    assert torch.allclose(m.kernel.lengthscale, ex.kernel.lengthscale, rtol=1e-5)
    assert torch.allclose(m.kernel.variance, ex.kernel.variance, rtol=1e-5)
    # the noise was learned in the 20 steps: it left the exact GP's value
    assert not torch.allclose(m.likelihood.variance, ex.likelihood.variance, rtol=1e-3)
    assert m.learn_hyperparameters == "noise" and m.get_config()["learn_hyperparameters"] == "noise"
    small = lg.QSGP(num_basis=50, hyperparameters={"pretrain_rows": 300})
    small.fit(X[:400], y[:400], max_steps=3, seed=0, progress=False)
    assert small.mean_step == "gradient" and small.history_.batch_size == 400


def test_default_basis_has_at_most_one_feature_per_row():
    """On fewer rows than the default's 2,000 random features the default draws one per
    row (an explicit ``num_basis`` is kept, and 2,000 is the default above); the features
    are the first m of the same draw, so the model equals one built with that
    ``num_basis`` explicitly."""
    X, y = _data(n=250, d=2, seed=5)
    m = lg.QSGP().fit(X, y, max_steps=3, seed=0, progress=False)
    same = lg.QSGP(num_basis=250).fit(X, y, max_steps=3, seed=0, progress=False)
    assert m.m == 250 and m.num_inducing == 250
    for a, b in zip(m.state_dict().values(), same.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    more = lg.QSGP(num_basis=400, hyperparameters={"pretrain_rows": 0})
    assert more.fit(X, y, max_steps=1, seed=0, progress=False).m == 400
    Xb, yb = _data(n=2500, d=2, seed=6)
    big = lg.QSGP(hyperparameters={"pretrain_rows": 0})
    assert big.fit(Xb, yb, max_steps=1, seed=0, progress=False).m == 2000


def test_newton_step_without_its_anchor_warns_at_the_fit():
    """A minibatch below 4 x the basis batch leaves the Newton step without its anchor
    (it stalls at a noise floor): the fit says so; the default batch does not."""
    X, y = _data(n=1200, d=2, seed=5)
    kw = {"num_basis": 100, "hyperparameters": {"pretrain_rows": 0}}
    with pytest.warns(lg.TrainingWarning, match="Newton mean step runs without its anchor"):
        lg.QSGP(**kw).fit(X, y, batch_size=300, max_steps=2, seed=0, progress=False)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", lg.TrainingWarning)
        lg.QSGP(**kw).fit(X, y, max_steps=2, seed=0, progress=False)


@pytest.mark.parametrize("cov", ["meanfield", "chevron"])
def test_optimal_noise_variance_maximises_the_exact_elbo(cov):
    """``optimal_noise_variance`` is the maximiser of the exact ELBO over the noise at the
    current q(w) (re-derived: the ELBO at the value beats it at 0.9x and 1.1x, and the
    derivative of the exact ELBO by autograd vanishes there), for the mean-field and the
    chevron factor, with chunks smaller than the basis."""
    from latentgp.models.qsgp.estimator import exact_elbo
    from latentgp.models.qsgp.initial import optimal_noise_variance

    X, y = _data(n=90, d=2, seed=7)
    covariance = Covariance(kind=cov, num_dense=4) if cov == "chevron" else cov
    m = _model(X, y, num_basis=30, covariance=covariance)
    Xt = torch.as_tensor(X)
    yt = m.scale_targets(y)
    s2 = optimal_noise_variance(m, Xt, yt, chunk=7)

    def elbo(v):
        m.likelihood.variance = v
        with torch.no_grad():
            return float(exact_elbo(m, Xt, yt))

    best = elbo(s2)
    assert best > elbo(0.9 * s2) and best > elbo(1.1 * s2)
    m.likelihood.variance = s2
    raw = m.likelihood.raw_variance
    (g,) = torch.autograd.grad(exact_elbo(m, Xt, yt), raw)
    assert abs(float(g)) < 1e-6 * abs(best)
