"""Exact multi-task GP in the Hadamard (one row per observation) form: the intrinsic
coregionalisation model ``RBF().on([0]) * Coregion(num_tasks=2).on([1])`` on rows
``(x, task)``, as in the standard Hadamard multi-task example (two related sine tasks,
each observed at its own inputs).  A missing output is a row that is not there."""

import numpy as np
import torch

import latentgp as lg
from latentgp.kernels import RBF, Coregion


def f1(x):
    return np.sin(2 * np.pi * x)


def f2(x):
    return 0.8 * np.sin(2 * np.pi * x + 0.15)


def _data(seed=0):
    r = np.random.default_rng(seed)
    # each task observed at its own inputs, over its own part of the domain (they overlap
    # in [0.4, 0.6]): a separate GP must extrapolate where the other task has data
    x1 = np.sort(r.uniform(0.0, 0.6, 15))
    x2 = np.sort(r.uniform(0.4, 1.0, 15))
    y1 = f1(x1) + 0.1 * r.standard_normal(x1.size)
    y2 = f2(x2) + 0.1 * r.standard_normal(x2.size)
    X = np.r_[np.c_[x1, np.zeros_like(x1)], np.c_[x2, np.ones_like(x2)]]
    return X, np.r_[y1, y2], (x1, y1), (x2, y2)


def _icm():
    return lg.ExactGP(kernel=RBF().on([0]) * Coregion(num_tasks=2, rank=1).on([1]))


def test_each_task_predicts_better_than_a_separate_gp_per_task():
    X, y, (x1, y1), (x2, y2) = _data()
    icm = _icm().fit(X, y, seed=0)
    xt = np.linspace(0.0, 1.0, 200)
    for task, (xs, ys, f) in enumerate([(x1, y1, f1), (x2, y2, f2)]):
        separate = lg.ExactGP().fit(xs[:, None], ys, seed=0)
        m_icm = icm.predict_f(np.c_[xt, np.full_like(xt, task)])[0]
        m_one = separate.predict_f(xt[:, None])[0]
        rmse_icm = np.sqrt(np.mean((m_icm - f(xt)) ** 2))
        rmse_one = np.sqrt(np.mean((m_one - f(xt)) ** 2))
        assert rmse_icm < rmse_one, (task, rmse_icm, rmse_one)
    # the learned task covariance says the tasks are strongly related
    B = icm.kernel.kernels[1].kernel.task_covariance().detach().numpy()
    assert B[0, 1] / np.sqrt(B[0, 0] * B[1, 1]) > 0.7


def _posterior(K, Ks, Kss, y, s2):
    """GP posterior mean and covariance by numpy (an independent re-derivation)."""
    A = K + s2 * np.eye(len(y))
    mean = Ks.T @ np.linalg.solve(A, y)
    cov = Kss - Ks.T @ np.linalg.solve(A, Ks)
    sign, logdet = np.linalg.slogdet(A)
    lml = -0.5 * (y @ np.linalg.solve(A, y) + logdet + len(y) * np.log(2 * np.pi))
    return mean, cov, lml


def test_dropping_an_observation_removes_that_row_and_nothing_else():
    X, y, _, _ = _data()
    full = _icm().fit(X, y, seed=0)
    drop = 7  # one observation of task 0; task 1 keeps all its rows
    keep = np.delete(np.arange(len(y)), drop)
    reduced = full.clone().set_data(X[keep], y[keep])  # same hyperparameters and scaling
    Xt = torch.as_tensor(X)
    with torch.no_grad():
        K_full = full.kernel(Xt).numpy()
        K_red = reduced.kernel(Xt[keep]).numpy()
    # the reduced covariance is the full one without that row and column
    np.testing.assert_allclose(K_red, K_full[np.ix_(keep, keep)], rtol=1e-13, atol=1e-15)
    # and the reduced model is the full prior conditioned on the kept rows only
    xt = np.linspace(0, 1, 15)
    Xs = np.r_[np.c_[xt, np.zeros(15)], np.c_[xt, np.ones(15)]]
    with torch.no_grad():
        Ks = full.kernel(Xt[keep], torch.as_tensor(Xs)).numpy()
        Kss = full.kernel(torch.as_tensor(Xs)).numpy()
    mu, sd = full.y_mean.numpy()[0], full.y_scale.numpy()[0]
    s2 = float(full.likelihood.variance)
    mean, cov, lml = _posterior(K_full[np.ix_(keep, keep)], Ks, Kss, (y[keep] - mu) / sd, s2)
    m_red, c_red = reduced.predict_f_full_cov(Xs)
    np.testing.assert_allclose(m_red[:, 0], mean * sd + mu, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(c_red[0], cov * sd**2, rtol=1e-7, atol=1e-10)
    expected = lml - len(keep) * np.log(sd)  # in the targets' units
    assert abs(reduced.log_marginal_likelihood() - expected) < 1e-8
