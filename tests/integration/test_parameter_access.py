"""Issue 29, item 6: public parameter access.

A model can be evaluated at given parameter values without private names: q(u) through
``SVGP.set_variational_distribution`` / ``variational_distribution``, the likelihood's
parameters through their setters (``likelihood.variance = ...``), the kernel's through
``kernel.lengthscale/variance = ...`` and the inducing inputs through ``model.Z = ...``.

Checked against closed forms: with Z = X and q(u) set to the exact posterior of f(X)
(the optimal, VFE, q when Z = X), SVGP predicts what the exact GP predicts, to
round-off; the exact GP with a noise variance set by hand matches the textbook
posterior written out in numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

import latentgp as lg

LS, SV, NOISE = 0.7, 1.3, 0.05


def _data(n=25, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 1))
    y = np.sin(2 * X[:, 0]) + 0.2 * rng.standard_normal(n)
    return X, y, np.linspace(-2.5, 2.5, 11)[:, None]


def _rbf(A, B, ls=LS, var=SV):
    return var * np.exp(-0.5 * (A[:, None, 0] - B[None, :, 0]) ** 2 / ls**2)


def _exact_posterior(X, y, Xs, noise):
    """The textbook GP posterior at Xs, and of u = f(X) (numpy, float64)."""
    K = _rbf(X, X)
    A = np.linalg.solve(K + noise * np.eye(len(X)), np.c_[y, K])  # [alpha, (K+s2)^-1 K]
    Ks = _rbf(Xs, X)
    mean_s = Ks @ A[:, 0]
    var_s = SV - np.einsum("ij,ji->i", Ks, np.linalg.solve(K + noise * np.eye(len(X)), Ks.T))
    return mean_s, var_s, K @ A[:, 0], K - K @ A[:, 1:]


def _set_hypers(model, noise=NOISE):
    model.kernel.lengthscale = LS
    model.kernel.variance = SV
    model.likelihood.variance = noise


@pytest.mark.parametrize("whiten", [True, False])
def test_svgp_at_the_exact_posterior_predicts_as_the_exact_gp(whiten):
    """Inputs on a jittered grid keep Kzz = K well conditioned, and the configured jitter
    is 1e-12, so the only differences are round-off (the default 1e-6 jitter on Kzz
    alone moves the extrapolated means by ~1e-3 on 25 random points)."""
    X, y, _ = _data(n=12)
    X = np.linspace(-3, 3, 12)[:, None] + 0.05 * X
    Xs = np.linspace(-3.5, 3.5, 11)[:, None]
    with lg.config(jitter=1e-12):
        _compare_svgp_with_exact(X, y, Xs, whiten)


def _compare_svgp_with_exact(X, y, Xs, whiten):
    exact = lg.ExactGP(normalize_y=False).initialize(X, y)
    _set_hypers(exact)
    svgp = lg.SVGP(Z=X, whiten=whiten, learn_inducing=False, normalize_y=False).initialize(X, y)
    _set_hypers(svgp)
    mean_s, var_s, m_u, S_u = _exact_posterior(X, y, Xs, NOISE)
    svgp.set_variational_distribution(m_u, S_u)
    m_e, v_e = exact.predict_f(Xs)
    m_v, v_v = svgp.predict_f(Xs)
    np.testing.assert_allclose(m_e, mean_s, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(v_e, var_s, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(m_v, m_e, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(v_v, v_e, rtol=1e-6, atol=1e-8)
    # and it is the optimum the library computes itself (Titsias' q with Z = X)
    svgp.set_optimal_variational(X, y)
    m_opt, S_opt = svgp.variational_distribution()
    np.testing.assert_allclose(m_opt[0], m_u, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(S_opt[0], S_u, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize(("covariance", "whiten"), [("full", True), ("full", False),
                                                     ("diag", False)])
def test_set_then_read_q_u_round_trips(covariance, whiten):
    X, y, _ = _data()
    m = lg.SVGP(num_inducing=6, covariance=covariance, whiten=whiten).initialize(X, y, seed=0)
    rng = np.random.default_rng(1)
    mean = rng.normal(size=(1, 6))
    if covariance == "full":
        B = rng.normal(size=(6, 6))
        cov = B @ B.T + 0.1 * np.eye(6)
    else:
        cov = np.diag(rng.uniform(0.1, 2.0, size=6))
    before = m.predict_f(X[:3])
    m.set_variational_distribution(mean[0], cov)  # (M,) and (M, M) for one latent
    got_mean, got_cov = m.variational_distribution()
    np.testing.assert_allclose(got_mean, mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got_cov[0], cov, rtol=1e-10, atol=1e-12)
    assert not np.allclose(m.predict_f(X[:3])[0], before[0])  # the cache was refreshed


def test_set_q_u_refuses_bad_values_with_a_clear_message():
    X, y, _ = _data()
    m = lg.SVGP(num_inducing=4).initialize(X, y, seed=0)
    diag = lg.SVGP(num_inducing=4, covariance="diag").initialize(X, y, seed=0)
    ok_cov = np.eye(4)
    bad = [
        (m, np.zeros(5), ok_cov, r"q\(u\) mean has shape \(5,\); expected \(1, 4\)"),
        (m, np.zeros(4), np.eye(3), r"q\(u\) covariance has shape \(3, 3\); expected \(1, 4, 4\)"),
        (m, np.full(4, np.nan), ok_cov, r"q\(u\) mean contains NaN or inf"),
        (m, np.zeros(4), np.triu(np.ones((4, 4))), r"q\(u\) covariance is not symmetric"),
        (m, np.zeros(4), -np.eye(4), r"not positive semi-definite \(smallest eigenvalue -1\)"),
        (diag, np.zeros(4), np.ones((4, 4)) + np.eye(4), "covariance='diag'"),
    ]
    for model, mean, cov, message in bad:
        with pytest.raises(ValueError, match=message):
            model.set_variational_distribution(mean, cov)
    with pytest.raises(RuntimeError, match="not fitted yet"):
        lg.SVGP().set_variational_distribution(np.zeros(4), ok_cov)


def test_exact_gp_with_noise_set_by_hand_matches_the_closed_form():
    X, y, Xs = _data(seed=2)
    model = lg.ExactGP(normalize_y=False).initialize(X, y)
    for noise in (0.37, 1e-3):
        _set_hypers(model, noise)
        assert model.likelihood.variance.item() == pytest.approx(noise, rel=1e-12)
        mean_s, var_s, _, _ = _exact_posterior(X, y, Xs, noise)
        m, v = model.predict_y(Xs)
        np.testing.assert_allclose(m, mean_s, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(v, var_s + noise, rtol=1e-8, atol=1e-10)
        # the log marginal likelihood at the values set, against numpy
        K = _rbf(X, X) + noise * np.eye(len(X))
        _, logdet = np.linalg.slogdet(K)
        lml = -0.5 * (y @ np.linalg.solve(K, y) + logdet + len(X) * np.log(2 * np.pi))
        assert model.log_marginal_likelihood() == pytest.approx(lml, rel=1e-10)


def test_likelihood_setters_set_and_check_their_values():
    L = lg.likelihoods
    cases = [
        (L.Gaussian(), "variance", 0.25),
        (L.StudentT(), "scale", 0.8),
        (L.StudentT(), "df", 7.0),
        (L.Laplace(), "scale", 1.5),
        (L.GPRN(num_outputs=2, num_nodes=1), "variance", [0.2, 0.3]),
        (L.GaussianExperts(num_experts=2), "expert_noise", [0.1, 0.4]),
        (L.NegativeBinomial(), "size", 3.5),
        (L.Gamma(), "shape", 2.5),
        (L.Beta(), "precision", 12.0),
    ]
    for lik, name, value in cases:
        setattr(lik, name, value)
        np.testing.assert_allclose(getattr(lik, name).detach().numpy(), value, rtol=1e-12)
        with pytest.raises(ValueError, match="must be positive and finite"):
            setattr(lik, name, -1.0)
    with pytest.raises(ValueError, match="larger than its lower bound 0.01"):
        L.Gaussian(min_variance=0.01).variance = 0.005
    with pytest.raises(ValueError, match=r"has shape \(3,\), which does not fit"):
        L.GPRN(num_outputs=2, num_nodes=1).variance = [0.1, 0.2, 0.3]
