"""Natural-gradient training of Gaussian q(u) (``fit(optimizer="natural")``, issue 24).

- with a Gaussian likelihood, one full-batch natural step of rate 1 lands q at the
  closed-form optimum (``set_optimal_variational``), whitened or not;
- the step equals the Fisher-preconditioned ordinary gradient, computed independently:
  the gradient in natural-parameter coordinates (autograd through theta -> (m, R)) solved
  against the Hessian of the Gaussian log-partition function;
- on Bernoulli and Poisson data it needs fewer steps than Adam to reach Adam's objective;
- a checkpointed run resumes exactly; models without a Gaussian q(u) are refused;
- the default step size is 1 in full batch, 0.1 with minibatches (which averages q(u) to
  near its full-data optimum where rate 1 ends at the last minibatch's); SVGP Poisson's
  default fit on more than FULL_BATCH_ROWS rows (natural gradients) stops "converged" at
  a long reference fit's ELBO and test NLPD.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from small_sets import one_torch_thread  # noqa: F401 (fixture)

import latentgp as lg
from latentgp.training.natural import NaturalAdam, make_natural_adam, natural_step_size

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _reg(n=200, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, d))
    return X, np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=n)


def _q_grads(model, X, y):
    model.zero_grad()
    model.objective(torch.as_tensor(X), model.scale_targets(y), X.shape[0]).backward()
    return model.q.q_mu.grad.abs().max().item(), model.q.q_sqrt_raw.grad.abs().max().item()


@pytest.mark.parametrize("whiten", [True, False])
@pytest.mark.parametrize("M", [5, 15])
def test_one_natural_step_lands_at_the_optimal_q(whiten, M):
    X, y = _reg()
    m = lg.SVGP(num_inducing=M, whiten=whiten)
    # Adam's rate ~0 keeps the hyperparameters and Z where initialisation put them
    m.fit(X, y, optimizer="natural", lr=1e-300, max_steps=1, batch_size=len(X), seed=0)
    ref = copy.deepcopy(m)
    ref.set_optimal_variational(X, y)
    Xs = np.random.default_rng(3).uniform(-3, 3, (50, 2))
    for a, b in zip(m.predict_f(Xs), ref.predict_f(Xs), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-9)
    assert max(_q_grads(m, X, y)) < 1e-7  # objective ~ 1e3 (not divided by N)


def test_optimal_q_is_a_stationary_point_of_the_objective():
    """set_optimal_variational factorises I + A A^T / s^2 without jitter: the configured
    jitter moved its q(u) off the optimum (gradients of 2e-4 before the fix)."""
    X, y = _reg()
    m = lg.SVGP(num_inducing=8)
    m.fit(X, y, max_steps=1, seed=0)
    m.set_optimal_variational(X, y)
    assert max(_q_grads(m, X, y)) < 1e-7  # objective ~ 1e3 (not divided by N)


def _theta_coordinates(m, R):
    """Natural parameters in minimal coordinates: theta_1 = S^{-1} m and the lower
    triangle of Theta_2 = -S^{-1} / 2 (S = R R^T)."""
    P = torch.cholesky_inverse(R)
    theta1 = torch.cholesky_solve(m[:, None], R)[:, 0]
    rows, cols = torch.tril_indices(len(m), len(m))
    return torch.cat([theta1, (-0.5 * P)[rows, cols]])


def _moments_from_theta(theta, M):
    rows, cols = torch.tril_indices(M, M)
    T2 = torch.zeros(M, M, dtype=theta.dtype)
    T2 = T2.index_put((rows, cols), theta[M:]).index_put((cols, rows), theta[M:])
    P = -2.0 * T2
    S = torch.linalg.solve(P, torch.eye(M, dtype=theta.dtype))
    S = 0.5 * (S + S.mT)
    return S @ theta[:M], torch.linalg.cholesky(S)


def _log_partition(theta, M):
    """A(theta) = -theta_1^T Theta_2^{-1} theta_1 / 4 - log|-2 Theta_2| / 2."""
    m, R = _moments_from_theta(theta, M)
    # theta_1^T Theta_2^{-1} theta_1 = -2 theta_1^T S theta_1 = -2 m^T S^{-1} m
    return 0.5 * (m @ theta[:M]) + torch.log(torch.diagonal(R)).sum()


@pytest.mark.parametrize("lik", ["bernoulli", "gaussian"])
def test_natural_step_is_the_fisher_preconditioned_gradient(lik):
    rng = np.random.default_rng(1)
    X = rng.uniform(-2, 2, (60, 1))
    y = (np.sin(2 * X[:, 0]) > 0).astype(float) if lik == "bernoulli" else np.sin(X[:, 0])
    M, N, gamma = 3, len(X), 0.3
    model = lg.SVGP(num_inducing=M, likelihood=lik)
    model.fit(X, y, max_steps=5, lr=0.05, seed=0)  # a q away from its start
    q = model.q
    m0, R0 = q.q_mu.detach()[0].clone(), torch.tril(q.q_sqrt_raw.detach()[0]).clone()
    theta0 = _theta_coordinates(m0, R0)

    # independent: d ELBO / d theta by autograd through theta -> (m, R), then F^{-1} g
    theta = theta0.clone().requires_grad_()
    m_t, R_t = _moments_from_theta(theta, M)
    model.zero_grad()
    loss = -model.objective(torch.as_tensor(X), model.scale_targets(y), N) / N
    loss.backward()
    g_m, g_R = -N * q.q_mu.grad[0], -N * torch.tril(q.q_sqrt_raw.grad[0])
    (g_theta,) = torch.autograd.grad((m_t, R_t), theta, (g_m, g_R))
    F = torch.autograd.functional.hessian(lambda t: _log_partition(t, M), theta0)
    expected = torch.linalg.solve(F, g_theta)

    opt = NaturalAdam([q], [], lr=0.01, num_data=N, natural_lr=gamma)
    opt.step()  # the gradients of the loss above are still on q's parameters
    theta1 = _theta_coordinates(q.q_mu.detach()[0], torch.tril(q.q_sqrt_raw.detach()[0]))
    np.testing.assert_allclose((theta1 - theta0) / gamma, expected, rtol=1e-6, atol=1e-8)


def _steps_to_reach(history, target):
    hits = [i for i, v in enumerate(history.objective) if v >= target]
    return hits[0] + 1 if hits else None


@pytest.mark.parametrize("lik,cov", [("bernoulli", "full"), ("poisson", "full"),
                                     ("bernoulli", "diag")])
def test_fewer_steps_than_adam_on_non_conjugate_likelihoods(lik, cov):
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (300, 2))
    if lik == "bernoulli":
        y = (np.sin(X[:, 0]) * np.cos(X[:, 1]) + 0.3 * rng.normal(size=300) > 0).astype(float)
    else:
        y = rng.poisson(np.exp(np.sin(X[:, 0]) + 0.5)).astype(float)
    kw = dict(max_steps=100, batch_size=300, seed=0)
    adam = lg.SVGP(num_inducing=15, likelihood=lik, covariance=cov).fit(X, y, **kw)
    natural = lg.SVGP(num_inducing=15, likelihood=lik, covariance=cov).fit(
        X, y, optimizer="natural", **kw
    )
    steps = _steps_to_reach(natural.history_, adam.history_.objective[-1])
    # measured: bernoulli 42 (diag 42), poisson 12 steps to Adam's 100-step objective
    assert steps is not None and steps <= 60, steps


def test_step_budget_then_resume_equals_uninterrupted(tmp_path):
    X, y = _reg(n=120)
    X, y = X, (y > 0).astype(float)
    kw = dict(optimizer="natural", batch_size=40, seed=0)
    ref = lg.SVGP(num_inducing=8, likelihood="bernoulli").fit(X, y, max_steps=12, **kw)
    ck = tmp_path / "run.ckpt"
    lg.SVGP(num_inducing=8, likelihood="bernoulli").fit(X, y, max_steps=7, checkpoint=ck, **kw)
    resumed = lg.SVGP(num_inducing=8, likelihood="bernoulli").fit(
        X, y, max_steps=12, checkpoint=ck, resume=True, **kw
    )
    for a, b in zip(resumed.state_dict().values(), ref.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_models_without_gaussian_q_are_refused():
    X, y = _reg(n=40)
    with pytest.raises(ValueError, match="needs a model with a Gaussian q"):
        lg.SparseGP(num_inducing=5).fit(X, y, optimizer="natural", max_steps=2)
    with pytest.raises(ValueError, match="natural_lr must be in"):
        lg.SVGP(num_inducing=5).fit(
            X, y, optimizer="natural", optimizer_kwargs={"natural_lr": 2.0}, max_steps=2
        )


def _loss_closure(m, X, y):
    Xt, yt = torch.as_tensor(X), m.scale_targets(y)

    def closure():
        m.zero_grad(set_to_none=True)
        loss = -m.objective(Xt, yt, X.shape[0]) / X.shape[0]
        loss.backward()
        return loss

    return closure


def test_alternating_step_takes_adam_from_the_gradient_at_the_new_q():
    """``alternate``: the natural step on q, then Adam on the rest from the gradient at the
    new q; rebuilt by hand from a q-only natural step and a plain torch Adam step, and
    different from the shared-gradient step."""
    X, y = _reg()
    m = lg.SVGP(num_inducing=6)
    m.fit(X, y, max_steps=1, seed=0)
    ref, shared = copy.deepcopy(m), copy.deepcopy(m)

    def others(model):
        own = {id(model.q.q_mu), id(model.q.q_sqrt_raw)}
        return [p for p in model.parameters() if p.requires_grad and id(p) not in own]

    closure = _loss_closure(m, X, y)
    opt = NaturalAdam([m.q], list(m.parameters()), lr=0.05, num_data=len(X), natural_lr=0.5)
    closure()
    assert opt.step(closure) is True

    # by hand: the same natural step alone, then torch's Adam from a fresh gradient
    rc = _loss_closure(ref, X, y)
    q_only = NaturalAdam([ref.q], [ref.q.q_mu, ref.q.q_sqrt_raw], lr=0.05,
                         num_data=len(X), natural_lr=0.5)
    rc()
    q_only.step()
    adam = torch.optim.Adam(others(ref), lr=0.05)
    rc()
    adam.step()
    for a, b in zip(m.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)

    sc = _loss_closure(shared, X, y)
    opt2 = NaturalAdam([shared.q], list(shared.parameters()), lr=0.05, num_data=len(X),
                       natural_lr=0.5, alternate=False)
    sc()
    opt2.step(sc)
    pairs = zip(others(m), others(shared), strict=True)
    diffs = [float((a - b).detach().abs().max()) for a, b in pairs]
    assert max(diffs) > 1e-6  # the two rules differ in Adam's step


def test_alternating_conjugate_step_lands_q_at_the_optimum_of_the_old_hyperparameters():
    """Full batch, Gaussian likelihood, rate 1: q lands at the closed-form optimum for the
    hyperparameters the step started from, while Adam moves the hyperparameters."""
    X, y = _reg()
    m = lg.SVGP(num_inducing=8)
    m.fit(X, y, max_steps=1, seed=0)
    ref = copy.deepcopy(m)
    ref.set_optimal_variational(X, y)
    closure = _loss_closure(m, X, y)
    opt = NaturalAdam([m.q], list(m.parameters()), lr=0.05, num_data=len(X), natural_lr=1.0)
    closure()
    opt.step(closure)
    torch.testing.assert_close(m.q.q_mu, ref.q.q_mu, rtol=1e-8, atol=1e-9)
    torch.testing.assert_close(torch.tril(m.q.q_sqrt_raw), torch.tril(ref.q.q_sqrt_raw),
                               rtol=1e-8, atol=1e-9)
    assert abs(float(m.likelihood.variance - ref.likelihood.variance)) > 1e-4


def test_alternating_step_refuses_a_non_finite_second_evaluation():
    X, y = _reg()
    m = lg.SVGP(num_inducing=6)
    m.fit(X, y, max_steps=1, seed=0)
    before = [p.detach().clone() for p in m.parameters() if p is not m.q.q_mu
              and p is not m.q.q_sqrt_raw]
    closure = _loss_closure(m, X, y)
    opt = NaturalAdam([m.q], list(m.parameters()), lr=0.05, num_data=len(X), natural_lr=0.5)
    closure()

    def broken():
        closure()
        return torch.tensor(float("nan"))

    assert opt.step(broken) is False
    after = [p.detach() for p in m.parameters() if p is not m.q.q_mu
             and p is not m.q.q_sqrt_raw]
    for a, b in zip(before, after, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # Adam's step not taken
    with pytest.raises(ValueError, match="natural_alternate"):
        NaturalAdam([m.q], list(m.parameters()), lr=0.05, num_data=len(X), alternate="yes")

def test_default_step_size_depends_on_the_batch_fraction():
    """Rate 1 (one step to the optimum) only where a step sees every row of a conjugate
    model; 0.1 with minibatches; non-conjugate: 0.1 after a 5-step warm-up."""
    X, y = _reg(n=60)
    gauss = lg.SVGP(num_inducing=5).initialize(X, y)
    assert natural_step_size(gauss) == (1.0, 0)
    assert natural_step_size(gauss, batch_size=60, num_data=60) == (1.0, 0)
    assert natural_step_size(gauss, batch_size=20, num_data=60) == (0.1, 0)
    bern = lg.SVGP(num_inducing=5, likelihood="bernoulli").initialize(X, (y > 0) * 1.0)
    assert natural_step_size(bern, batch_size=60, num_data=60) == (0.1, 5)
    # the fit passes its batch size: a minibatch fit steps at 0.1, a full-batch one at 1
    for B, gamma in ((20, 0.1), (60, 1.0)):
        m = lg.SVGP(num_inducing=5).fit(X, y, optimizer="natural", batch_size=B, max_steps=1)
        assert m.history_.optimizer == "natural"
        opt = make_natural_adam(m, list(m.parameters()), 0.01, 60, None, batch_size=B)
        assert opt.gamma() == gamma


def test_minibatch_rate_averages_to_the_optimal_q():
    """Gaussian likelihood, minibatches of a quarter of the rows, kernel, noise and Z held
    (Adam's rate ~0): 100 natural steps at the default minibatch rate (0.1) leave q(u)
    near the full-data optimum (set_optimal_variational), much nearer than rate 1, which
    ends at the last minibatch's optimum."""
    X, y = _reg(n=400)

    def gap(gamma):
        m = lg.SVGP(num_inducing=10)
        m.fit(X, y, optimizer="natural", lr=1e-300, max_steps=100, batch_size=100, seed=0,
              optimizer_kwargs={} if gamma is None else {"natural_lr": gamma})
        ref = copy.deepcopy(m)
        ref.set_optimal_variational(X, y)
        with torch.no_grad():
            Xt, yt = torch.as_tensor(X), m.scale_targets(y)
            return (ref.objective(Xt, yt, len(X)) - m.objective(Xt, yt, len(X))).item() / len(X)

    default, one = gap(None), gap(1.0)
    assert 0 <= default < 0.01 and default < 0.2 * one, (default, one)


def test_default_fit_on_large_poisson_data_is_natural_and_converges():
    """SVGP Poisson on more than FULL_BATCH_ROWS rows, no options: natural steps on q(u)
    with Adam on the rest (svgp.NATURAL_LIKELIHOODS), stopped by the rule at the ELBO and
    test NLPD of a long full-batch L-BFGS reference fit (Gauss-Hermite ELBO)."""
    rng = np.random.default_rng(2)
    n = 1500
    X = rng.uniform(-3, 3, (n + 500, 1))
    y = rng.poisson(np.exp(np.sin(2 * X[:, 0]) + 0.5)).astype(float)
    Xtr, ytr, Xte, yte = X[:n], y[:n], X[n:], y[n:]
    default = lg.SVGP(num_inducing=15, likelihood="poisson").fit(Xtr, ytr, seed=0,
                                                                 progress=False)
    h = default.history_
    assert (h.optimizer, h.batch_size, h.reason) == ("natural", 1024, "converged")
    ref = lg.SVGP(num_inducing=15, likelihood="poisson", learn_inducing=True).fit(
        Xtr, ytr, optimizer="lbfgs", max_steps=200, seed=0, progress=False)

    def elbo(model):
        with torch.no_grad():
            return model.objective(torch.as_tensor(Xtr), model.scale_targets(ytr),
                                   n).item() / n

    def nlpd(model):
        return -float(np.mean(np.asarray(model.log_predictive_density(Xte, yte))))

    assert elbo(default) > elbo(ref) - 0.01, (elbo(default), elbo(ref))
    assert nlpd(default) < nlpd(ref) + 0.01, (nlpd(default), nlpd(ref))
