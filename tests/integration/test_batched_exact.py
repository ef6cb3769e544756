"""BatchedExactGP: B independent exact GPs in one call, checked member by member against
the single ExactGP (same closed forms at the same hyperparameters, same optima)."""

import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.linalg import JitterWarning
from latentgp.training import BatchedLBFGS


def _members(B=5, N=40, D=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(B, N, D, generator=g, dtype=torch.float64) * 4
    ls = 0.5 + torch.rand(B, 1, generator=g, dtype=torch.float64) * 1.5
    amp = 0.5 + 3 * torch.rand(B, 1, generator=g, dtype=torch.float64)
    f = amp * (torch.sin(2 * X[..., 0] / ls) + torch.cos(X[..., 1] / ls))
    y = f + 0.1 * amp * torch.randn(B, N, generator=g, dtype=torch.float64) + 5 * amp
    return X, y


def _single_at(batched, b, X, y):
    """An ExactGP on member b's data at member b's hyperparameters."""
    m = lg.ExactGP().initialize(X[b], y[b])
    m.kernel.lengthscale = batched.kernel.lengthscale[b].detach()
    m.kernel.variance = batched.kernel.variance[b].detach()
    m.likelihood.variance = batched.likelihood.variance[b].detach()
    return m


def test_each_member_is_the_exact_gp_of_its_data_at_its_hyperparameters():
    X, y = _members()
    m = lg.BatchedExactGP().fit(X, y, max_steps=3)
    Xs = torch.rand(X.shape[0], 7, 2, dtype=torch.float64) * 4
    lml = m.log_marginal_likelihood()
    mean, var = m.predict_y(Xs)
    fm, fv = m.predict_f(Xs)
    lpd = m.log_predictive_density(Xs, mean + 0.3)
    jm, jK = m.predict_f_full_cov(Xs)
    for b in range(X.shape[0]):
        s = _single_at(m, b, X, y)
        assert lml[b] == pytest.approx(s.log_marginal_likelihood(), rel=1e-10)
        sm, sv = s.predict_y(Xs[b])
        np.testing.assert_allclose(mean[b], sm, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(var[b], sv, rtol=1e-9)
        np.testing.assert_allclose(fv[b], s.predict_f(Xs[b])[1], rtol=1e-8)
        np.testing.assert_allclose(fm[b], s.predict_f(Xs[b])[0], rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(
            lpd[b], s.log_predictive_density(Xs[b], sm + 0.3), rtol=1e-9
        )
        sjm, sjK = s.predict_f_full_cov(Xs[b])
        np.testing.assert_allclose(jm[b], sjm[:, 0], rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(jK[b], sjK[0], rtol=1e-7, atol=1e-9)


def test_members_start_where_single_fits_start():
    X, y = _members()
    m = lg.BatchedExactGP().initialize(X, y)
    for b in range(X.shape[0]):
        s = lg.ExactGP().initialize(X[b], y[b])
        torch.testing.assert_close(m.kernel.lengthscale[b], s.kernel.lengthscale)
        torch.testing.assert_close(m.kernel.input_unit[b], s.kernel.input_unit)
        assert float(m.y_scale[b]) == pytest.approx(float(s.y_scale[0]))
        noise = float(m.likelihood.variance[b].detach())
        assert noise == pytest.approx(float(s.likelihood.variance.detach()))


def test_batched_fit_reaches_the_single_fits_optima():
    X, y = _members(B=6)
    m = lg.BatchedExactGP().fit(X, y)
    assert m.history_.reason == "converged"
    lml = m.log_marginal_likelihood()
    for b in range(X.shape[0]):
        s = lg.ExactGP().fit(X[b], y[b])
        assert lml[b] == pytest.approx(s.log_marginal_likelihood(), abs=1e-5)
        np.testing.assert_allclose(
            m.kernel.lengthscale[b].detach(), s.kernel.lengthscale.detach(), rtol=1e-3
        )


def test_a_members_fit_does_not_depend_on_the_other_members():
    X, y = _members(B=4)
    a = lg.BatchedExactGP().fit(X, y)
    y2 = y.clone()
    y2[1:] = torch.flip(y2[1:], [1]) * 3.0  # other members' data changed completely
    b = lg.BatchedExactGP().fit(X, y2)
    torch.testing.assert_close(a.kernel.lengthscale[0], b.kernel.lengthscale[0],
                               rtol=1e-10, atol=0)
    assert a.log_marginal_likelihood()[0] == pytest.approx(b.log_marginal_likelihood()[0],
                                                           rel=1e-12)


def test_batched_lbfgs_solves_independent_quadratics_each_to_its_own_minimum():
    g = torch.Generator().manual_seed(3)
    B, P = 8, 3
    A = torch.randn(B, P, P, generator=g, dtype=torch.float64)
    H = A @ A.mT + torch.diag_embed(torch.logspace(-2, 2, B, dtype=torch.float64)[:, None]
                                    .expand(B, P))  # condition numbers differ per member
    c = torch.randn(B, P, generator=g, dtype=torch.float64)

    def evaluate(x, idx):
        r = x - c[idx]
        Hr = (H[idx] @ r[..., None])[..., 0]
        return 0.5 * (r * Hr).sum(-1), Hr

    opt = BatchedLBFGS(evaluate, torch.zeros(B, P, dtype=torch.float64), rtol=0.0)
    for _ in range(200):
        opt.step()
        if opt.done:
            break
    assert opt.done
    torch.testing.assert_close(opt.x, c, rtol=0, atol=1e-6)


def test_save_and_load_keep_every_member(tmp_path):
    X, y = _members(B=3)
    m = lg.BatchedExactGP(kernel="matern52").fit(X, y, max_steps=5)
    path = tmp_path / "b.lgp"
    m.save(path)
    back = lg.load(path)
    np.testing.assert_allclose(back.log_marginal_likelihood(), m.log_marginal_likelihood())
    np.testing.assert_allclose(back.predict_y(X[:, :4])[0], m.predict_y(X[:, :4])[0])


def test_bad_shapes_are_refused_at_the_boundary():
    X, y = _members(B=2)
    with pytest.raises(ValueError, match=r"X must have shape \(B, N, D\)"):
        lg.BatchedExactGP().fit(X[0], y[0])
    with pytest.raises(ValueError, match=r"y must have shape \(B, N\)"):
        lg.BatchedExactGP().fit(X, y[:, :-1])
    m = lg.BatchedExactGP().fit(X, y, max_steps=1)
    with pytest.raises(ValueError, match="holds 3 members but the model has 2"):
        m.predict_y(torch.zeros(3, 4, 2))
    with pytest.raises(ValueError, match="stationary kernel"):
        lg.BatchedExactGP(kernel="linear")
    with pytest.raises(ValueError, match="optimizer='adam' is not supported"):
        lg.BatchedExactGP().fit(X, y, optimizer="adam")


def _autograd_value_and_grad(m, state, X, y):
    """member_log_marginal by autograd through the kernel (the general path)."""
    names = list(lg.BatchedExactGP.CLOSED_FORM_PARAMETERS)
    leaves = {n: state[n].detach().clone().requires_grad_() for n in names}
    value = torch.func.functional_call(m, {**state, **leaves}, (X, y))
    grads = torch.autograd.grad(value.sum(), [leaves[n] for n in names])
    return value.detach(), dict(zip(names, grads, strict=True))


@pytest.mark.parametrize("ard", [True, False])
def test_closed_form_gradient_equals_autograd_and_finite_differences(ard):
    X, y = _members(B=4, N=30)
    m = lg.BatchedExactGP(kernel=lg.kernels.RBF(ard=ard)).initialize(X, y)
    assert m.closed_form_gradient
    ys = m.y_train
    g = torch.Generator().manual_seed(1)
    state = {n: t.detach().clone() for n, t in m.member_state().items()}
    for n in lg.BatchedExactGP.CLOSED_FORM_PARAMETERS:  # away from the initial values
        state[n] = state[n] + 0.5 * torch.randn(state[n].shape, generator=g,
                                                dtype=torch.float64)
    value, grads = m.member_log_marginal_and_grad(state, X, ys)
    ref_value, ref_grads = _autograd_value_and_grad(m, state, X, ys)
    torch.testing.assert_close(value, ref_value, rtol=1e-12, atol=1e-10)
    for n, gr in grads.items():
        assert gr.shape == state[n].shape
        torch.testing.assert_close(gr, ref_grads[n], rtol=1e-8, atol=1e-9)
    # central differences, one coordinate of every parameter (an independent check)
    eps = 1e-5
    for n in lg.BatchedExactGP.CLOSED_FORM_PARAMETERS:
        flat = state[n].reshape(state[n].shape[0], -1)
        for j in range(flat.shape[1]):
            plus, minus = dict(state), dict(state)
            plus[n] = (flat + eps * torch.nn.functional.one_hot(
                torch.tensor(j), flat.shape[1])).reshape(state[n].shape)
            minus[n] = (flat - eps * torch.nn.functional.one_hot(
                torch.tensor(j), flat.shape[1])).reshape(state[n].shape)
            fd = (m.member_log_marginal_and_grad(plus, X, ys)[0]
                  - m.member_log_marginal_and_grad(minus, X, ys)[0]) / (2 * eps)
            torch.testing.assert_close(grads[n].reshape(flat.shape)[:, j], fd,
                                       rtol=1e-5, atol=1e-6)


def test_closed_form_fails_only_the_members_whose_matrix_fails():
    X, y = _members(B=3, N=20)
    X[1, 10:] = X[1, :10]  # member 1: duplicated inputs and (below) no noise
    m = lg.BatchedExactGP(likelihood=lg.likelihoods.Gaussian(min_variance=0.0))
    m.initialize(X, y)
    state = {n: t.detach().clone() for n, t in m.member_state().items()}
    state["likelihood.raw_variance"][1] = -60.0  # noise 1e-26: K singular to round-off
    state["kernel.raw_lengthscale"][1] = 5.0
    state["kernel.raw_variance"][2] = float("nan")
    with pytest.warns(JitterWarning):
        value, grads = m.member_log_marginal_and_grad(state, X, m.y_train)
    assert torch.isnan(value[2]) and torch.isfinite(value[:2]).all()
    assert m.last_jitter > 0  # member 1 needed the library's jitter ...
    one = {n: t[1:2] for n, t in state.items()}
    with pytest.warns(JitterWarning):
        alone, _ = m.member_log_marginal_and_grad(one, X[1:2], m.y_train[1:2])
    torch.testing.assert_close(value[1:2], alone, rtol=1e-12, atol=0)  # ... on its own
    first = {n: t[:1] for n, t in state.items()}
    v0, g0 = m.member_log_marginal_and_grad(first, X[:1], m.y_train[:1])
    torch.testing.assert_close(value[:1], v0, rtol=0, atol=0)  # member 0 untouched
    torch.testing.assert_close(grads["kernel.raw_lengthscale"][:1],
                               g0["kernel.raw_lengthscale"], rtol=0, atol=0)


def test_closed_form_is_used_for_the_rbf_only():
    X, y = _members(B=2, N=10)
    assert lg.BatchedExactGP().initialize(X, y).closed_form_gradient
    m = lg.BatchedExactGP(kernel="matern52").initialize(X, y)
    assert not m.closed_form_gradient
    with pytest.raises(ValueError, match="closed_form_gradient is False"):
        m.member_log_marginal_and_grad(m.member_state(), X, m.y_train)
