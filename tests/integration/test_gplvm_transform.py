"""BayesianGPLVM.transform: the objective is the growth of the bound when a row joins the
data, a training row's q(x_n) at a latent optimum is reproduced, a 1-D latent is
recovered on held-out rows, the model is left as it was, and bad input is refused."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import latentgp as lg


def _data(N: int = 60, P: int = 5, seed: int = 0):
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(-2, 2, N))
    Y = np.stack([np.sin(t * (k + 1) / 3 + k) for k in range(P)], 1)
    return t, Y + 0.05 * rng.standard_normal((N, P))


def _model(bound: str, Y: np.ndarray, Q: int = 2, M: int = 8) -> lg.BayesianGPLVM:
    """A model at a generic point (not the initial values), unscaled data."""
    model = lg.BayesianGPLVM(Q, num_inducing=M, bound=bound, normalize_y=False)
    model.initialize(Y, seed=0)
    with torch.no_grad():
        model.kernel.lengthscale = torch.linspace(0.8, 1.7, Q, dtype=torch.float64)
        model.kernel.variance = 1.4
        model.likelihood.variance = 0.07
        g = torch.Generator().manual_seed(3)
        model.raw_latent_variance.add_(
            0.3 * torch.randn(model.raw_latent_variance.shape, generator=g, dtype=torch.float64)
        )
    return model


def _rows(N: int) -> torch.Tensor:
    return torch.arange(N, dtype=torch.float64)[:, None]


def _bound(model: lg.BayesianGPLVM, Y: np.ndarray) -> float:
    with torch.no_grad():
        return float(model.objective(_rows(len(Y)), torch.as_tensor(Y), len(Y)))


def _grown(model: lg.BayesianGPLVM, Y_plus: np.ndarray, bound: str, extra: torch.Tensor):
    """A ``bound`` model on ``Y_plus`` (one more row) with ``model``'s kernel, Z, noise and
    latents, the new row's (mean, raw variance) being ``extra`` ``(2, Q)``, and q(u) the
    model's (its inducing_posterior)."""
    Q, M = model.latent_dim, model.num_inducing
    big = lg.BayesianGPLVM(Q, num_inducing=M, bound=bound, normalize_y=False)
    big.initialize(Y_plus, seed=0)
    state = {k: v for k, v in model.state_dict().items() if not k.startswith(("q.", "opt_q"))}
    state["latent_mean"] = torch.cat([state["latent_mean"], extra[:1]])
    state["raw_latent_variance"] = torch.cat([state["raw_latent_variance"], extra[1:]])
    own = big.state_dict()
    for k in own:
        if k.startswith(("q.", "opt_q")) or k == "stat_params":
            state[k] = own[k]
    big.load_state_dict(state)
    if bound == "uncollapsed":
        q = model.inducing_posterior()
        with torch.no_grad():
            big.q.q_mu.copy_(q.q_mu)
            big.q.q_sqrt_raw.copy_(q.q_sqrt)
    return big


@pytest.mark.parametrize("bound", ["uncollapsed", "collapsed"])
def test_local_bound_is_the_growth_of_the_bound_when_a_row_joins(bound):
    """Uncollapsed: bound(N + 1 rows) - bound(N rows) at the same q(u) is the new row's
    term.  Collapsed (q(u) its optimum for the N rows): the uncollapsed bound on N + 1 rows
    at that q(u) minus the collapsed bound on N rows, and no more than the collapsed bound's
    own growth (which re-optimises q(u))."""
    _, Y = _data()
    Y_plus = np.vstack([Y, Y[7:8] + 0.3])
    model = _model(bound, Y)
    if bound == "collapsed":
        model.set_optimal_inducing(torch.as_tensor(Y))
    extra = torch.tensor([[0.4, -0.9], [-1.5, -0.5]], dtype=torch.float64)
    big = _grown(model, Y_plus, "uncollapsed", extra)
    with torch.no_grad():
        term = float(model.local_bound(torch.as_tensor(Y_plus[-1:]), big.latent_mean[-1:],
                                       big.latent_var[-1:]))
    growth = _bound(big, Y_plus) - _bound(model, Y)
    assert abs(term - growth) < 1e-9 * max(1.0, abs(growth))
    if bound == "collapsed":
        collapsed_growth = _bound(_grown(model, Y_plus, "collapsed", extra), Y_plus) - _bound(
            model, Y
        )
        assert term < collapsed_growth - 1e-6  # q(u) re-optimised does better (not equal)
    # several rows: the sum of their terms
    with torch.no_grad():
        a = model.local_bound(torch.as_tensor(Y[:4]), model.latent_mean[:4], model.latent_var[:4])
        b = sum(model.local_bound(torch.as_tensor(Y[i : i + 1]), model.latent_mean[i : i + 1],
                                  model.latent_var[i : i + 1]) for i in range(4))
    assert abs(float(a) - float(b)) < 1e-10 * abs(float(a))


def _optimise_latents(model: lg.BayesianGPLVM, Y: np.ndarray) -> None:
    """The bound maximised over q(X) with everything else frozen (to tight convergence)."""
    rows, Yt = _rows(len(Y)), torch.as_tensor(Y)
    params = [model.latent_mean, model.raw_latent_variance]
    opt = torch.optim.LBFGS(params, lr=1.0, max_iter=3000, tolerance_grad=1e-11,
                            tolerance_change=0.0, history_size=50,
                            line_search_fn="strong_wolfe")

    def closure():
        loss = -model.objective(rows, Yt, len(rows))
        grads = torch.autograd.grad(loss, params)
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        return loss.detach()

    opt.step(closure)
    if model.bound == "collapsed":  # its kept q(u): the optimum at the new q(X)
        model.set_optimal_inducing(Yt)


@pytest.mark.parametrize("bound", ["uncollapsed", "collapsed"])
def test_transform_of_training_rows_returns_their_trained_q_x(bound):
    """With q(u) fixed the bound's rows separate, so at an optimum of q(X) (everything else
    frozen) each training row's q(x_n) maximises its own term; for the collapsed bound the
    same holds at its optimal q(u) (the envelope theorem).  transform must find it from a
    start elsewhere."""
    _, Y = _data()
    model = _model(bound, Y)
    _optimise_latents(model, Y)
    mean, var = model.latent_posterior()
    pick = [3, 20, 41, 55]
    start = mean[pick] + 0.5 * np.sqrt(var[pick])  # and variances from latent_variance
    m, v = model.transform(Y[pick], init=start, tol=1e-9, return_variance=True)
    sd = np.sqrt(var[pick])  # a wrong objective moves them by a sizeable part of sd
    np.testing.assert_allclose(m, mean[pick], rtol=0, atol=1e-5 * sd.max())
    np.testing.assert_allclose(v, var[pick], rtol=1e-5)
    # the default start (nearest reconstruction) gets there too
    m2, v2 = model.transform(Y[pick], tol=1e-9, return_variance=True)
    np.testing.assert_allclose(m2, mean[pick], rtol=0, atol=1e-5 * sd.max())
    np.testing.assert_allclose(v2, var[pick], rtol=1e-5)


def test_transform_recovers_a_one_dimensional_latent_on_held_out_rows():
    rng = np.random.default_rng(1)
    N, P = 80, 5
    t = np.sort(rng.uniform(-2, 2, N))
    Y = np.stack([np.sin(t * (k + 1) / 3 + k) for k in range(P)], 1)
    Y = Y + 0.05 * rng.standard_normal((N, P))
    test = np.arange(N) % 4 == 1
    model = lg.BayesianGPLVM(1, num_inducing=10).fit(Y[~test], seed=0, progress=False)
    train_mean = model.latent_posterior()[0][:, 0]
    new_mean, new_var = model.transform(Y[test], return_variance=True)
    assert new_mean.shape == new_var.shape == (test.sum(), 1) and np.all(new_var > 0)
    # held-out means on the same monotone curve as the training ones (sign and scale)
    both = np.empty(N)
    both[~test], both[test] = train_mean, new_mean[:, 0]
    assert abs(np.corrcoef(both, t)[0, 1]) > 0.99
    assert abs(np.corrcoef(new_mean[:, 0], t[test])[0, 1]) > 0.99
    # t read off the training rows' (latent mean, t) curve at the held-out means: within
    # 0.05 (the training rows are 0.067 apart in t on average; measured 0.024)
    order = np.argsort(train_mean)
    t_hat = np.interp(new_mean[:, 0], train_mean[order], t[~test][order])
    assert np.sqrt(np.mean((t_hat - t[test]) ** 2)) < 0.05


def test_transform_leaves_the_model_as_it_was_and_is_deterministic():
    _, Y = _data()
    model = lg.BayesianGPLVM(2, num_inducing=6).fit(Y[:40], max_steps=30, progress=False)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    grads = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
    a = model.transform(Y[40:], return_variance=True)
    b = model.transform(Y[40:], return_variance=True)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    for g, p in zip(grads, model.parameters(), strict=True):  # .grad untouched too
        assert (g is None and p.grad is None) or torch.equal(g, p.grad)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    model.predict_f(a[0])  # the kept q(u) is still current


def test_transform_refuses_bad_input():
    _, Y = _data()
    with pytest.raises(RuntimeError, match="not fitted"):
        lg.BayesianGPLVM(2, num_inducing=5).transform(Y)
    with pytest.raises(RuntimeError, match="not fitted"):
        lg.BayesianGPLVM(2, num_inducing=5).initialize(Y).transform(Y)
    model = lg.BayesianGPLVM(2, num_inducing=5).fit(Y, max_steps=3, progress=False)
    with pytest.raises(ValueError, match="columns"):
        model.transform(Y[:, :3])
    bad = Y[:4].copy()
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="Y"):
        model.transform(bad)
    with pytest.raises(ValueError, match="init has 2 rows"):
        model.transform(Y[:4], init=np.zeros((2, 2)))
    with pytest.raises(ValueError, match="columns"):
        model.transform(Y[:4], init=np.zeros((4, 3)))
    with pytest.raises(ValueError, match="init"):
        model.transform(Y[:4], init="pca")
    with pytest.raises(ValueError, match="max_steps"):
        model.transform(Y[:4], max_steps=0)
    with pytest.raises(TypeError):
        model.transform(Y[:4], "nearest")  # options are keyword-only
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeWarning, match="max_steps=1"):
            model.transform(Y[:4], max_steps=1, tol=1e-12)
    with torch.no_grad():
        model.kernel.variance = 2.0
    with pytest.raises(RuntimeError, match="changed since"):
        model.transform(Y[:4])
