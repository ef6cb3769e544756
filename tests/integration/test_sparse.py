"""SparseGP (SoR/DIC, DTC, FITC, VFE) and the Nyström module against independent dense
O(N^3) formulas (notes/sep-modulated-sparse.md §3), the exact GP, SVGP at its optimal q(u),
finite differences, and bad input."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.cli import main
from latentgp.kernels.nystrom import best_rank_error, nystrom, nystrom_error
from latentgp.parameters import inv_softplus

METHODS = ["sor", "dtc", "fitc", "vfe"]
HYP = {"ls": [0.8, 1.5], "var": 1.3, "noise": 0.05}


def _data(n=40, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, d))
    y = np.sin(2 * X[:, 0]) + 0.3 * X[:, 1] + 0.1 * rng.standard_normal(n)
    return X, y


def _set_hypers(model, ls=HYP["ls"], var=HYP["var"], noise=HYP["noise"]):
    with torch.no_grad():
        k = model.kernel
        k.lengthscale = ls
        k.raw_variance.copy_(inv_softplus(torch.tensor(var, dtype=torch.float64)))
        lik = model.likelihood
        lik.raw_variance.copy_(inv_softplus(torch.tensor(noise - lik.min_variance)))


def _sparse(method, X, y, Z, normalize_y=False, **kw):
    """A SparseGP with the fixed hyperparameters HYP, inducing inputs Z, conditioned on y."""
    m = lg.SparseGP(method=method, Z=Z, normalize_y=normalize_y, **kw).fit(X, y, max_steps=1)
    _set_hypers(m)
    m.Z = Z
    return m.set_data(X, y)


def _exact(X, y, normalize_y=False):
    m = lg.ExactGP(normalize_y=normalize_y).fit(X, y, max_steps=1)
    _set_hypers(m)
    return m


# ------------------------------------------------------- independent dense references --
def _dense_blocks(model, X, Xs=None):
    """Dense Kxx, Qxx (and test blocks) with the model's kernel and jittered Kzz."""
    k = model.kernel
    X = torch.as_tensor(X, dtype=torch.float64)
    Z = model.Z.detach()
    Kzz = k(Z).detach()
    Kzz = Kzz + model.last_jitter * Kzz.diagonal().mean() * torch.eye(Z.shape[0], dtype=Kzz.dtype)
    Kxz = k(X, Z).detach()
    out = {"Kxx": k(X).detach(), "Qxx": Kxz @ torch.linalg.solve(Kzz, Kxz.T)}
    if Xs is not None:
        Xs = torch.as_tensor(Xs, dtype=torch.float64)
        Ksz = k(Xs, Z).detach()
        out["Kss"] = k(Xs).detach()
        out["Qss"] = Ksz @ torch.linalg.solve(Kzz, Ksz.T)
        out["Qsx"] = Ksz @ torch.linalg.solve(Kzz, Kxz.T)
        out["Ksx"] = k(Xs, X).detach()
    return out


def _dense_objective(method, blocks, y, s2):
    """O(N^3) objective from the notes' table (§3.2) and Titsias' bound (§3.3)."""
    Kxx, Qxx = blocks["Kxx"], blocks["Qxx"]
    N = Kxx.shape[0]
    eye = torch.eye(N, dtype=torch.float64)
    cov = Qxx + s2 * eye
    if method == "fitc":
        cov = cov + torch.diag(torch.diagonal(Kxx - Qxx))
    lp = torch.distributions.MultivariateNormal(torch.zeros(N, dtype=torch.float64), cov)
    value = float(lp.log_prob(torch.as_tensor(y)))
    if method == "vfe":
        value -= float(torch.trace(Kxx - Qxx)) / (2 * s2)
    return value


def _dense_predict(method, blocks, y, s2):
    """Q-form predictive of the notes' table (§3.2); vfe uses the dtc form (§3.3)."""
    Kxx, Qxx, Qsx = blocks["Kxx"], blocks["Qxx"], blocks["Qsx"]
    N = Kxx.shape[0]
    Lam = s2 * torch.eye(N, dtype=torch.float64)
    if method == "fitc":
        Lam = Lam + torch.diag(torch.diagonal(Kxx - Qxx))
    C = Qxx + Lam
    yt = torch.as_tensor(y)
    mean = Qsx @ torch.linalg.solve(C, yt)
    reduce = (Qsx * torch.linalg.solve(C, Qsx.T).T).sum(1)
    prior = torch.diagonal(blocks["Qss"] if method == "sor" else blocks["Kss"])
    return mean.numpy(), (prior - reduce).numpy()


# ------------------------------------------------------------------------------ tests --
@pytest.mark.parametrize("method", METHODS)
def test_objective_and_predictions_match_dense_formulas(method):
    X, y = _data(50)
    Z = X[::6] + 0.05
    m = _sparse(method, X, y, Z)
    Xs = np.random.default_rng(3).uniform(-3, 3, size=(20, 2))
    blocks = _dense_blocks(m, X, Xs)
    s2 = float(m.likelihood.variance.detach())
    assert m.log_marginal_likelihood() == pytest.approx(
        _dense_objective(method, blocks, y, s2), rel=1e-10
    )
    mean, var = m.predict_f(Xs)
    ref_mean, ref_var = _dense_predict(method, blocks, y, s2)
    np.testing.assert_allclose(mean, ref_mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(var, ref_var, rtol=1e-7, atol=1e-10)
    # predict_y adds the noise variance
    _, vy = m.predict_y(Xs)
    np.testing.assert_allclose(vy, var + s2, rtol=1e-12)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("normalize_y", [False, True])
def test_Z_equal_X_reproduces_the_exact_gp(method, normalize_y):
    X, y = _data(40)
    y = 3.0 * y + 2.0
    Xs = np.random.default_rng(1).uniform(-2.5, 2.5, size=(25, 2))
    with lg.config(jitter=1e-10):
        m = _sparse(method, X, y, X, normalize_y=normalize_y)
        exact = _exact(X, y, normalize_y=normalize_y)
        lml = exact.log_marginal_likelihood()
        assert m.log_marginal_likelihood() == pytest.approx(lml, rel=1e-6)
        me, ve = exact.predict_y(Xs)
        ms, vs = m.predict_y(Xs)
        np.testing.assert_allclose(ms, me, rtol=1e-6, atol=1e-6)
        if method == "sor":
            # SoR's test prior is Q** = K*x Kxx^-1 Kx*, not K**: its variance falls short of
            # the exact one by exactly diag(K** - Q**), and is exact at the training inputs.
            blocks = _dense_blocks(m, X, Xs)
            gap = torch.diagonal(blocks["Kss"] - blocks["Qss"]).numpy()
            gap = gap * (exact.y_scale[0].item() ** 2 if normalize_y else 1.0)
            np.testing.assert_allclose(vs + gap, ve, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(m.predict_y(X)[1], exact.predict_y(X)[1], rtol=1e-5)
        else:
            np.testing.assert_allclose(vs, ve, rtol=1e-6, atol=1e-6)


def test_vfe_bound_below_exact_and_equal_to_svgp_elbo_at_optimal_q():
    X, y = _data(60)
    rng = np.random.default_rng(2)
    exact = _exact(X, y)
    lml = exact.log_marginal_likelihood()
    for M in (3, 8, 20):
        Z = rng.uniform(-2, 2, size=(M, 2))
        with lg.config(jitter=1e-12):  # SVGP's optimal q(u) jitters I + A A^T / s^2
            _check_vfe_against_svgp(X, y, Z, lml, rng)


def _check_vfe_against_svgp(X, y, Z, lml, rng):
    if True:
        vfe = _sparse("vfe", X, y, Z)
        bound = vfe.log_marginal_likelihood()
        assert bound < lml
        svgp = lg.SVGP(Z=Z, normalize_y=False).fit(X, y, max_steps=1)
        _set_hypers(svgp)
        svgp.Z = Z
        svgp.set_optimal_variational(X, y)
        assert svgp.elbo(X, y) == pytest.approx(bound, rel=1e-9)
        # and the same predictions as SVGP with that q(u)
        Xs = rng.uniform(-3, 3, size=(10, 2))
        np.testing.assert_allclose(vfe.predict_y(Xs)[0], svgp.predict_y(Xs)[0], rtol=1e-7)
        np.testing.assert_allclose(vfe.predict_y(Xs)[1], svgp.predict_y(Xs)[1], rtol=1e-7)


def test_vfe_and_dtc_predictives_agree_sor_dtc_objectives_agree():
    X, y = _data(50)
    Z = X[::5]
    Xs = np.random.default_rng(4).uniform(-3, 3, size=(15, 2))
    vfe, dtc, sor = (_sparse(k, X, y, Z) for k in ("vfe", "dtc", "sor"))
    for a, b in zip(vfe.predict_y(Xs), dtc.predict_y(Xs), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    np.testing.assert_allclose(sor.predict_y(Xs)[0], dtc.predict_y(Xs)[0], rtol=1e-12)
    assert sor.log_marginal_likelihood() == pytest.approx(dtc.log_marginal_likelihood(), rel=1e-14)
    # VFE = DTC evidence minus the trace penalty (>= 0)
    assert vfe.log_marginal_likelihood() < dtc.log_marginal_likelihood()
    # SoR's variance never exceeds DTC's (they differ by diag(K** - Q**) >= 0)
    assert np.all(sor.predict_f(Xs)[1] <= dtc.predict_f(Xs)[1] + 1e-12)


def test_fitc_effective_prior_has_the_exact_prior_variances():
    X, y = _data(30)
    m = _sparse("fitc", X, y, X[::4])
    Kxx = m.kernel(torch.as_tensor(X)).detach()
    approx, Q = nystrom(m.kernel, X, m.Z.detach(), dense=True)
    prior_fitc = Q + torch.diag(torch.diagonal(Kxx - Q))
    np.testing.assert_allclose(
        torch.diagonal(prior_fitc).numpy(),
        m.kernel.diag(torch.as_tensor(X)).detach().numpy(),
        rtol=1e-14,
    )
    # off the diagonal it is the Nystrom matrix, which underestimates Kxx in the PSD order
    assert torch.linalg.eigvalsh(Kxx - Q).min() > -1e-9
    assert not torch.allclose(prior_fitc, Kxx, atol=1e-3)


@pytest.mark.parametrize("method", METHODS)
def test_chunked_and_unchunked_objective_and_gradients_agree(method):
    X, y = _data(57)
    Z = X[::7]
    one = _sparse(method, X, y, Z)
    many = _sparse(method, X, y, Z, chunk_size=8)
    many.checkpoint_min_elements = 0  # checkpointed chunks
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y)
    values, grads = [], []
    for m in (one, many):
        m.zero_grad()
        v = m.objective(Xt, yt, 57)
        v.backward()
        values.append(float(v.detach()))
        grads.append(torch.cat([p.grad.reshape(-1) for p in m.parameters()]))
    assert values[0] == pytest.approx(values[1], rel=1e-12)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-10, atol=1e-12)
    assert one.log_marginal_likelihood() == pytest.approx(many.log_marginal_likelihood(), rel=1e-12)


@pytest.mark.parametrize("method", METHODS)
def test_gradients_match_finite_differences(method):
    X, y = _data(17)
    m = _sparse(method, X, y, X[::4] + 0.1, chunk_size=5)
    m.checkpoint_min_elements = 0  # exercise the checkpointed chunks
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y)
    names = [n for n, p in m.named_parameters() if p.requires_grad]
    vals = tuple(p.detach().clone().requires_grad_(True) for p in m.parameters())

    def obj(*v):
        return torch.func.functional_call(
            m, dict(zip(names, v, strict=True)), (Xt, yt, 17), strict=False
        )

    m.forward = m.objective
    assert torch.autograd.gradcheck(obj, vals, eps=1e-6, atol=1e-6, rtol=1e-5)


def test_multi_output_is_a_sum_over_columns():
    X, y = _data(40)
    Y = np.column_stack([y, np.cos(X[:, 1])])
    Z = X[::5]
    both = _sparse("fitc", X, Y, Z)
    cols = [_sparse("fitc", X, Y[:, j], Z) for j in range(2)]
    total = sum(c.log_marginal_likelihood() for c in cols)
    assert both.log_marginal_likelihood() == pytest.approx(total, rel=1e-12)
    Xs = X[:7] + 0.3
    np.testing.assert_allclose(both.predict_y(Xs)[0][:, 1], cols[1].predict_y(Xs)[0], rtol=1e-12)


@pytest.mark.parametrize("method", METHODS)
def test_training_increases_objective_and_fits(method):
    X, y = lg.datasets.make_snelson(300, seed=1)
    m = lg.SparseGP(method=method, num_inducing=15)
    m.fit(X, y, max_steps=1, seed=0)
    first = m.log_marginal_likelihood()
    m.fit(X, y, max_steps=25, seed=0)
    assert m.log_marginal_likelihood() > first + 10
    # the history holds the objective at the start of each step: the last is the value
    # one step before the end, reported in the same (original) units
    assert m.history_.objective[-1] == pytest.approx(m.log_marginal_likelihood(), rel=1e-2)
    assert m.history_.objective[-1] <= m.log_marginal_likelihood() + 1e-8
    Xs = np.linspace(-1.5, 1.5, 50)[:, None]
    mean, _ = m.predict_y(Xs)
    assert np.sqrt(np.mean((mean - lg.datasets.snelson_function(Xs[:, 0])) ** 2)) < 0.15


def test_adam_full_batch_works_and_minibatches_are_refused():
    X, y = _data(60)
    m = lg.SparseGP(method="vfe", num_inducing=6).fit(X, y, optimizer="adam", lr=0.05, max_steps=30)
    assert m.history_.objective[-1] > m.history_.objective[0]
    with pytest.raises(ValueError, match="full data"):
        lg.SparseGP(num_inducing=6).fit(X, y, batch_size=10, optimizer="adam")
    with pytest.raises(ValueError, match="full data set"):
        m.objective(torch.as_tensor(X[:10]), torch.as_tensor(y[:10]), 60)


def test_save_load_round_trip(tmp_path):
    X, y = _data(50)
    m = lg.SparseGP(method="fitc", num_inducing=7).fit(X, 5 * y + 1, max_steps=20)
    path = tmp_path / "fitc.pt"
    m.save(path)
    m2 = lg.load(path)
    assert isinstance(m2, lg.SparseGP) and m2.method == "fitc"
    Xs = X[:9] + 0.1
    for a, b in zip(m.predict_y(Xs), m2.predict_y(Xs), strict=True):
        np.testing.assert_array_equal(a, b)
    assert m2.log_marginal_likelihood() == m.log_marginal_likelihood()
    np.testing.assert_array_equal(
        m.log_predictive_density(Xs, y[:9]), m2.log_predictive_density(Xs, y[:9])
    )


def test_stale_statistics_are_detected_and_refreshed():
    X, y = _data(40)
    m = lg.SparseGP(method="dtc", num_inducing=5).fit(X, y, max_steps=5)
    with torch.no_grad():
        m.likelihood.raw_variance.add_(0.5)
    with pytest.raises(RuntimeError, match="set_data"):
        m.predict_y(X[:3])
    m.set_data(X, y)
    assert np.all(np.isfinite(m.predict_y(X[:3])[1]))


def test_bad_input():
    X, y = _data(20)
    with pytest.raises(ValueError, match="unknown sparse GP method"):
        lg.SparseGP(method="pitc")
    with pytest.raises(ValueError, match="Gaussian likelihood"):
        lg.SparseGP(likelihood="bernoulli")
    with pytest.raises(ValueError, match="num_inducing"):
        lg.SparseGP(num_inducing=0)
    with pytest.warns(lg.SizeCappedWarning, match="larger than the 20 training rows"):
        assert lg.SparseGP(num_inducing=30).fit(X, y, max_steps=1).num_inducing == 20
    with pytest.raises(ValueError, match="Z has 3 columns"):
        lg.SparseGP(Z=np.zeros((4, 3))).fit(X, y, max_steps=1)
    with pytest.raises(ValueError, match="Z contains NaN"):
        lg.SparseGP(Z=np.full((4, 2), np.nan))
    with pytest.raises(RuntimeError, match="not fitted"):
        lg.SparseGP().predict_y(X)
    Xbad = X.copy()
    Xbad[3, 1] = np.inf
    with pytest.raises(ValueError, match="X contains NaN or inf"):
        lg.SparseGP(num_inducing=4).fit(Xbad, y, max_steps=1)
    m = lg.SparseGP(num_inducing=4).fit(X, y, max_steps=1)
    with pytest.raises(ValueError, match="columns"):
        m.predict_y(np.zeros((3, 5)))
    with pytest.raises(ValueError, match="kernel must be a latentgp Kernel"):
        nystrom("rbf", X, X[:3])
    with pytest.raises(ValueError, match="Z has 1 columns"):
        nystrom(lg.kernels.RBF(), X, X[:3, :1])


# --------------------------------------------------------------------------- Nystrom --
def test_nystrom_factors_dense_and_errors():
    rng = np.random.default_rng(0)
    grid = np.linspace(-2, 2, 10)[:, None]  # well-separated inducing inputs, part of X
    X = np.vstack([grid, rng.standard_normal((110, 1))])
    kern = lg.kernels.RBF(lengthscale=0.4)
    with lg.config(jitter=1e-12):
        approx, Q = nystrom(kern, X, grid, dense=True)
        err = nystrom_error(kern, X, grid)
    assert approx.factor.shape == (120, 10) and approx.rank == 10
    torch.testing.assert_close(approx.diag(), torch.diagonal(Q))
    Kxx = kern(torch.as_tensor(X)).detach()
    # Z inside X: Q reproduces the rows/columns of those points (up to round-off)
    torch.testing.assert_close(Q[:10], Kxx[:10], atol=1e-9, rtol=0)
    E = (Kxx - Q).numpy()
    w = np.linalg.eigvalsh(E)
    assert err["frobenius"] == pytest.approx(np.linalg.norm(E), rel=1e-9)
    assert err["spectral"] == pytest.approx(np.abs(w).max(), rel=1e-9)
    assert err["trace"] == pytest.approx(np.abs(w).sum(), rel=1e-9)
    assert err["trace"] == pytest.approx(np.trace(E), rel=1e-6)  # Kxx - Qxx is PSD
    assert err["relative_frobenius"] == pytest.approx(err["frobenius"] / np.linalg.norm(Kxx))
    # Eckart-Young: no rank-10 matrix beats the truncated eigendecomposition
    for key in ("frobenius", "spectral", "trace"):
        assert err[f"best_{key}"] <= err[key] * (1 + 1e-9)
    # more (nested) inducing points never increase the trace error
    traces = [nystrom_error(kern, X, X[:k])["trace"] for k in (3, 6, 10)]
    assert all(a >= b - 1e-9 for a, b in zip(traces, traces[1:], strict=False))


def test_best_rank_error_closed_form():
    eig = torch.tensor([0.1, 0.5, 2.0, 3.0], dtype=torch.float64)
    best = best_rank_error(eig, 2)
    assert float(best["spectral"]) == pytest.approx(0.5)
    assert float(best["trace"]) == pytest.approx(0.6)
    assert float(best["frobenius"]) == pytest.approx(math.sqrt(0.26))
    assert float(best_rank_error(eig, 4)["trace"]) == 0.0


# ------------------------------------------------------------------------------- CLI --
@pytest.mark.parametrize("method", ["sor", "fitc"])
def test_cli_fits_sparse_models(tmp_path, capsys, method):
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, 150)
    path = tmp_path / "d.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["x", "y"])
        for a, b in zip(x, np.sin(x) + 0.1 * rng.standard_normal(150), strict=True):
            w.writerow([a, b])
    rc = main(
        [
            "fit",
            "--data",
            str(path),
            "--model",
            method,
            "--inducing",
            "10",
            "--max-steps",
            "30",
            "--json",
            "--out",
            str(tmp_path / "m.pt"),
        ]
    )
    assert rc == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["rmse"] < 0.3
    assert lg.load(tmp_path / "m.pt").method == method


@pytest.mark.parametrize("method", METHODS)
def test_joint_predictive_covariance_matches_marginals(method):
    X, y = _data(40)
    m = _sparse(method, X, y, X[::5])
    Xs = np.random.default_rng(5).uniform(-2, 2, size=(12, 2))
    mean, cov = m.predict_f_full_cov(Xs)
    mf, vf = m.predict_f(Xs)
    np.testing.assert_allclose(mean[:, 0], mf, rtol=1e-12)
    np.testing.assert_allclose(np.diagonal(cov[0]), vf, rtol=1e-9, atol=1e-12)
    assert np.linalg.eigvalsh(cov[0]).min() > -1e-10
    if method in ("dtc", "vfe"):  # the exact test conditional: correlated test points
        blocks = _dense_blocks(m, X, Xs)
        s2 = float(m.likelihood.variance.detach())
        C = blocks["Qxx"] + s2 * torch.eye(40, dtype=torch.float64)
        ref = blocks["Kss"] - blocks["Qsx"] @ torch.linalg.solve(C, blocks["Qsx"].T)
        np.testing.assert_allclose(cov[0], ref.numpy(), rtol=1e-7, atol=1e-10)
