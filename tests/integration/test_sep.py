"""SEP (scalable EP, seed 002) and the GFITC-EP baseline.

References used: 1-D quadrature of tilted distributions and site normalisers, closed-form
Gaussian integrals in numpy, finite differences of the re-converged EP evidence, and a
small dense full-EP implementation (below) for the M = N, Z = X limit.
"""

from __future__ import annotations

import os
import socket
import warnings

import numpy as np
import pytest
import torch
from scipy.special import log_ndtr
from scipy.stats import norm
from small_sets import one_torch_thread, sep_check_data  # noqa: F401 (fixture)

import latentgp as lg
from latentgp.models.ep_sites import cavity_projection, probit_site_update

GRID = np.linspace(-30, 30, 200001)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _sep(ell=1.0, sf2=1.5, m=6, **kw):
    Z = np.linspace(-2.5, 2.5, m)[:, None]
    return lg.SEP(Z=Z, kernel=lg.kernels.RBF(lengthscale=ell, variance=sf2), **kw)


def _projections(model, X):
    """upsilon_i (M, N), FITC variance s_i, q's mean/cov in fbar space (numpy)."""
    with torch.no_grad():
        Z = model.Z
        Xt = torch.as_tensor(X, dtype=torch.float64)
        K = model.kernel(Z).numpy() + model.last_jitter * np.eye(Z.shape[0]) * float(
            model.kernel(Z).diagonal().mean()
        )
        Kzx = model.kernel(Z, Xt).numpy()
        U = np.linalg.solve(K, Kzx)
        s = model.kernel.diag(Xt).numpy() - np.einsum("mn,mn->n", Kzx, U)
        mu = model.q_mean.numpy()
        Sigma = model.q_sqrt.numpy() @ model.q_sqrt.numpy().T
    return K, U, s, mu, Sigma


def test_tilted_moments_match_q_at_ep_fixed_point():
    X, y = sep_check_data()
    with lg.config(jitter=1e-8 / 1.5):
        model = _sep()
        model.converge_sites(X, y, max_sweeps=3000, tol=1e-13)
        K, U, s, mu, Sigma = _projections(model, X)
    nu, mut = model.site_nu.numpy(), model.site_mu.numpy()
    ypm = 2 * y - 1
    errs = []
    for i in range(0, 60, 7):
        u = U[:, i]
        d, c = u @ Sigma @ u, u @ mu
        v = d / (1 - nu[i] * d)  # cavity along upsilon_i
        a = c + v * (nu[i] * c - mut[i])
        w = norm.cdf(ypm[i] * GRID / np.sqrt(1 + s[i])) * norm.pdf(GRID, a, np.sqrt(v))
        Zi = np.trapezoid(w, GRID)
        mt = np.trapezoid(GRID * w, GRID) / Zi
        vt = np.trapezoid(GRID**2 * w, GRID) / Zi - mt**2
        errs.append(max(abs(mt - c), abs(vt - d)))
    assert max(errs) < 1e-8


def test_log_evidence_equals_brute_force():
    """log Z_q = sum_i log st_i + log int N(fbar|0,K) prod exp(-nu/2 (u'f)^2 + mu u'f), with
    log st_i = log Z_i - log int(site x cavity) by quadrature and the Gaussian integral in
    closed form (numpy, independent of the model's whitened algebra)."""
    X, y = sep_check_data()
    with lg.config(jitter=1e-8 / 1.5):
        model = _sep()
        model.converge_sites(X, y, max_sweeps=400, tol=1e-9)
        value = model.log_evidence(X, y)
        K, U, s, mu, Sigma = _projections(model, X)
    nu, mut = model.site_nu.numpy(), model.site_mu.numpy()
    ypm = 2 * y - 1
    log_st = []
    for i in range(X.shape[0]):
        u = U[:, i]
        d, c = u @ Sigma @ u, u @ mu
        v = d / (1 - nu[i] * d)
        a = c + v * (nu[i] * c - mut[i])
        pdf = norm.pdf(GRID, a, np.sqrt(v))
        Zi = np.trapezoid(norm.cdf(ypm[i] * GRID / np.sqrt(1 + s[i])) * pdf, GRID)
        Ii = np.trapezoid(np.exp(-0.5 * nu[i] * GRID**2 + mut[i] * GRID) * pdf, GRID)
        log_st.append(np.log(Zi) - np.log(Ii))
    A = (U * nu) @ U.T
    c = U @ mut
    P = np.linalg.inv(K) + A  # test reference: plain numpy
    _, ld_K = np.linalg.slogdet(K)
    _, ld_P = np.linalg.slogdet(P)
    log_gauss = -0.5 * ld_K - 0.5 * ld_P + 0.5 * c @ np.linalg.solve(P, c)
    assert value == pytest.approx(sum(log_st) + log_gauss, abs=1e-7)
    # the notes' value for this problem (checks/sep_check.py, corrected eq. 29)
    assert value == pytest.approx(-21.970169, abs=2e-6)


def test_evidence_gradient_matches_finite_differences():
    X, y = sep_check_data()
    h = 1e-5

    def evidence(ell=1.0, sf2=1.5, dz=0.0):
        m = _sep(ell, sf2)
        m.initialize(X, y)
        Z = m.Z.detach().clone()
        Z[2, 0] += dz
        m.Z = Z
        m.converge_sites(X, y, max_sweeps=3000, tol=1e-13)
        return m.log_evidence(X, y), m

    with lg.config(jitter=1e-8 / 1.5):
        _, model = evidence()
        g = model.log_evidence_grad(X, y)
        raw_ell = model.kernel.raw_lengthscale.detach()
        raw_var = model.kernel.raw_variance.detach()
        fd_ell = (evidence(1.0 + h)[0] - evidence(1.0 - h)[0]) / (2 * h)
        fd_var = (evidence(sf2=1.5 + h)[0] - evidence(sf2=1.5 - h)[0]) / (2 * h)
        fd_z = (evidence(dz=h)[0] - evidence(dz=-h)[0]) / (2 * h)
    # chain rule: lengthscale = softplus(raw) * unit, Z = Z_raw * unit
    unit = float(model.kernel.input_unit[0])
    got_ell = float(g["kernel.raw_lengthscale"][0] / torch.sigmoid(raw_ell)[0]) / unit
    got_var = float(g["kernel.raw_variance"] / torch.sigmoid(raw_var))
    assert got_ell == pytest.approx(fd_ell, rel=1e-5)
    assert got_var == pytest.approx(fd_var, rel=1e-5)
    got_z = float(g["Z_raw"][2, 0] / model.input_unit[0])
    assert got_z == pytest.approx(fd_z, rel=1e-5, abs=1e-7)


# ------------------------------------------------------------------ dense full EP --
def _full_ep(K, y, iters=3000, rho=0.5):
    """Reference parallel EP with a dense prior K (R&W ch. 3), numpy only."""
    n = K.shape[0]
    ypm = 2 * y - 1
    tau, nu = np.zeros(n), np.zeros(n)
    eye = np.eye(n)
    for _ in range(iters):
        Sigma = np.linalg.solve(eye + K * tau, K)  # (K^-1 + T)^-1
        mu = Sigma @ nu
        sd2 = np.diag(Sigma)
        tc = 1 / sd2 - tau
        nc = mu / sd2 - nu
        mc, vc = nc / tc, 1 / tc
        z = ypm * mc / np.sqrt(1 + vc)
        r = np.exp(norm.logpdf(z) - log_ndtr(z))
        mhat = mc + ypm * vc * r / np.sqrt(1 + vc)
        vhat = vc - vc**2 * r * (z + r) / (1 + vc)
        tau_new = 1 / vhat - tc
        nu_new = mhat / vhat - nc
        done = max(abs(tau_new - tau).max(), abs(nu_new - nu).max()) < 1e-12
        tau = rho * tau_new + (1 - rho) * tau
        nu = rho * nu_new + (1 - rho) * nu
        if done:
            break
    Sigma = np.linalg.solve(eye + K * tau, K)
    mu = Sigma @ nu
    sd2 = np.diag(Sigma)
    tc, nc = 1 / sd2 - tau, mu / sd2 - nu
    mc, vc = nc / tc, 1 / tc
    log_st = []
    for i in range(n):  # site normalisers by quadrature
        pdf = norm.pdf(GRID, mc[i], np.sqrt(vc[i]))
        Zi = np.trapezoid(norm.cdf(ypm[i] * GRID) * pdf, GRID)
        Ii = np.trapezoid(np.exp(-0.5 * tau[i] * GRID**2 + nu[i] * GRID) * pdf, GRID)
        log_st.append(np.log(Zi) - np.log(Ii))
    _, ld = np.linalg.slogdet(eye + K * tau)
    log_z = sum(log_st) - 0.5 * ld + 0.5 * nu @ Sigma @ nu
    return log_z, tau, nu


def test_sparse_ep_with_all_points_as_inducing_equals_full_ep():
    rng = np.random.default_rng(1)
    X = rng.uniform(-2, 2, (20, 2))
    y = (X[:, 0] * X[:, 1] + 0.3 * rng.standard_normal(20) > 0).astype(float)
    Xs = rng.uniform(-2, 2, (7, 2))
    kern = dict(lengthscale=0.8, variance=2.0)
    with lg.config(jitter=1e-11):
        sep = lg.SEP(Z=X, kernel=lg.kernels.RBF(**kern), learn_inducing=False)
        sep.converge_sites(X, y, max_sweeps=3000, tol=1e-12)
        gf = lg.GFITC(Z=X, kernel=lg.kernels.RBF(**kern), ep_tol=1e-12, max_sweeps=3000)
        gf.initialize(X, y)
        gf_logz = gf.converge(X, y)
        Kt = sep.kernel(torch.as_tensor(X)).detach().numpy()
        sep_logz = sep.log_evidence(X, y)
        p_sep, _ = sep.predict_y(Xs)
        p_gf, _ = gf.predict_y(Xs)
    ref_logz, tau, nu = _full_ep(Kt, y)
    # full-EP predictive: f* ~ N(k*'(K + T^-1)^-1 T^-1 nu, ...), written with Sigma
    Ks = lg.kernels.RBF(**kern)
    Ks.build(2)
    with torch.no_grad():
        kxs = Ks(torch.as_tensor(X), torch.as_tensor(Xs)).numpy()
        kss = np.diag(Ks(torch.as_tensor(Xs)).numpy())
    Sigma = np.linalg.solve(np.eye(20) + Kt * tau, Kt)
    alpha = np.linalg.solve(Kt, Sigma @ nu)
    Kinv_kxs = np.linalg.solve(Kt, kxs)
    m_star = kxs.T @ alpha
    v_star = (
        kss
        - np.einsum("ns,ns->s", kxs, Kinv_kxs)
        + np.einsum("ns,ns->s", Kinv_kxs, Sigma @ Kinv_kxs)
    )
    p_ref = norm.cdf(m_star / np.sqrt(1 + v_star))
    assert sep_logz == pytest.approx(ref_logz, abs=1e-5)
    assert gf_logz == pytest.approx(ref_logz, abs=1e-5)
    np.testing.assert_allclose(sep.site_nu.numpy(), tau, atol=1e-5)
    np.testing.assert_allclose(p_sep, p_ref, atol=1e-6)
    np.testing.assert_allclose(p_gf, p_ref, atol=1e-6)


def test_gfitc_gradient_matches_finite_differences():
    X, y = sep_check_data(40, seed=3)
    Z = np.linspace(-2.5, 2.5, 5)[:, None]
    h = 1e-5

    def model(ell):
        m = lg.GFITC(
            Z=Z, kernel=lg.kernels.RBF(lengthscale=ell, variance=1.5), ep_tol=1e-13, max_sweeps=5000
        )
        m.initialize(X, y)
        return m

    m = model(1.0)
    Xt = torch.as_tensor(X)
    yt = torch.as_tensor(y)
    obj = m.objective(Xt, yt, 40)
    (g,) = torch.autograd.grad(obj, [m.kernel.raw_lengthscale])
    unit = float(m.kernel.input_unit[0])  # lengthscale = softplus(raw) * unit
    got = float(g[0] / torch.sigmoid(m.kernel.raw_lengthscale.detach())[0]) / unit
    fd = (model(1.0 + h).converge(X, y) - model(1.0 - h).converge(X, y)) / (2 * h)
    assert float(obj.detach()) == pytest.approx(model(1.0).converge(X, y), abs=1e-10)
    assert got == pytest.approx(fd, rel=1e-5)


# ------------------------------------------------------------------ training --
def test_batch_and_stochastic_training_improve_evidence_and_fit():
    d = lg.datasets.load("synth")
    mu, sd = d.X_train.mean(0), d.X_train.std(0)
    Xtr, Xte = (d.X_train - mu) / sd, (d.X_test - mu) / sd
    batch = lg.SEP(num_inducing=10).fit(Xtr, d.y_train, max_steps=60, seed=0)
    h = batch.history_.objective
    assert len(h) == 60 and h[-1] > h[0] + 2
    err = np.mean((batch.predict_y(Xte)[0] > 0.5) != d.y_test)
    assert err < 0.15  # synth: Bayes error about 8%
    sto = lg.SEP(num_inducing=10, scheme="stochastic")
    sto.fit(Xtr, d.y_train, batch_size=25, epochs=8, seed=0)
    assert sto.history_.steps == 80
    # running natural-parameter sums equal the sums over the stored sites
    U = sto.site_upsilon
    A = (U.mT * sto.site_nu) @ U
    np.testing.assert_allclose(sto.A.numpy(), A.numpy(), atol=1e-8)
    np.testing.assert_allclose(sto.c.numpy(), (U.mT @ sto.site_mu).numpy(), atol=1e-8)
    nll = -sto.log_predictive_density(Xte, d.y_test).mean()
    nll_b = -batch.log_predictive_density(Xte, d.y_test).mean()
    assert nll < nll_b + 0.05 and sto.skipped_updates_ == 0


def test_invalid_site_updates_are_skipped_and_counted():
    # function level: an invalid cavity (1 - nu d <= 0) and a negative cavity variance
    R = torch.eye(2, dtype=torch.float64)
    from latentgp.models.ep_sites import WhitenedPosterior

    post = WhitenedPosterior(
        R, torch.zeros(2, 2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64)
    )
    V = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    cav = cavity_projection(
        post,
        V,
        V,
        torch.tensor([2.0, 0.5], dtype=torch.float64),
        torch.zeros(2, dtype=torch.float64),
        same=True,
    )
    assert cav["valid"].tolist() == [False, True]
    y = torch.ones(2, dtype=torch.float64)
    zero = torch.zeros(2, dtype=torch.float64)
    nu, mu, _, ok = probit_site_update(y, cav["a"], cav["v"], zero)
    assert ok.tolist() == [False, True]
    assert bool(torch.isfinite(nu).all() & torch.isfinite(mu).all())
    # model level: sites whose precision q does not contain (tampered) are skipped
    X, yy = sep_check_data(40)
    model = _sep(scheme="stochastic")
    model.fit(X, yy, batch_size=10, epochs=2, seed=0)
    with torch.no_grad():
        model.site_nu[:4] = 1e6
    before = model.skipped_updates_
    model.fit(X, yy, batch_size=10, epochs=2, seed=0)
    assert model.skipped_updates_ - before >= 4 * 2
    assert bool(torch.isfinite(model.site_nu).all() & torch.isfinite(model.site_mu).all())
    p, _ = model.predict_y(X)
    assert np.isfinite(p).all()


def test_save_load_round_trip(tmp_path):
    X, y = sep_check_data(40)
    for model in (lg.SEP(num_inducing=5), lg.GFITC(num_inducing=5)):
        model.fit(X, y, max_steps=5, seed=0)
        path = tmp_path / f"{type(model).__name__}.pt"
        model.save(path)
        back = lg.load(path)
        assert type(back) is type(model)
        np.testing.assert_allclose(back.predict_y(X)[0], model.predict_y(X)[0], atol=1e-12)
        np.testing.assert_allclose(
            back.log_predictive_density(X, y), model.log_predictive_density(X, y), atol=1e-12
        )


def test_bad_input():
    X, y = sep_check_data(30)
    with pytest.raises(ValueError, match="y must hold binary labels 0 or 1"):
        lg.SEP(num_inducing=5).fit(X, 2 * y - 1, max_steps=2)
    with pytest.raises(ValueError, match="binary labels"):
        lg.GFITC(num_inducing=5).fit(X, y + 1, max_steps=2)
    with pytest.raises(ValueError, match="scheme"):
        lg.SEP(scheme="online")
    with pytest.raises(ValueError, match="damping"):
        lg.SEP(damping=1.5)
    with pytest.raises(ValueError, match="probit"):
        lg.SEP(likelihood="gaussian")
    with pytest.raises(ValueError, match="stochastic"):
        lg.SEP(num_inducing=5).fit(X, y, batch_size=10, max_steps=2)
    with pytest.raises(ValueError, match="full-batch"):
        lg.GFITC(num_inducing=5).fit(X, y, batch_size=10, max_steps=2)
    with pytest.warns(lg.SizeCappedWarning, match="num_inducing=50 is larger than the"):
        assert lg.SEP(num_inducing=50).fit(X, y, max_steps=2).num_inducing == len(y)
    m = lg.SEP(num_inducing=5).fit(X, y, max_steps=2)
    with pytest.raises(ValueError, match="X has 2 columns"):
        m.predict_y(np.zeros((3, 2)))


# ------------------------------------------------------------------ distributed --
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world, port, out, X, y, Z, steps):
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        from latentgp.training.tasks import distributed_sweep

        shard = slice(rank * len(X) // world, (rank + 1) * len(X) // world)
        model = lg.SEP(Z=Z, kernel=lg.kernels.RBF(lengthscale=1.0, variance=1.0))
        sweep_logz, _, _ = distributed_sweep(model, X[shard], y[shard], None)
        model = lg.SEP(Z=Z, kernel=lg.kernels.RBF(lengthscale=1.0, variance=1.0))
        model.fit(X[shard], y[shard], max_steps=steps, process_group=dist.group.WORLD)
        if rank == 0:
            p, _ = model.predict_y(X)
            np.savez(
                out,
                p=p,
                obj=np.array(model.history_.objective),
                sweep=sweep_logz,
                Z=model.Z.detach().numpy(),
            )
        dist.barrier()  # rank 1 must not tear down while rank 0 still writes
    finally:
        dist.destroy_process_group()


def test_two_processes_equal_one_process(tmp_path):
    import torch.multiprocessing as mp

    rng = np.random.default_rng(4)
    X = rng.uniform(-2, 2, (80, 2))
    y = (np.sin(2 * X[:, 0]) + X[:, 1] > 0).astype(float)
    Z = X[:8].copy()
    steps = 10
    out = str(tmp_path / "dist.npz")
    old_threads = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        # One retry, only when a worker died from a signal (a port taken between
        # `_free_port` and the bind, or a gloo teardown race); the signal is reported.
        for attempt in range(2):
            try:
                mp.spawn(_worker, args=(2, _free_port(), out, X, y, Z, steps), nprocs=2, join=True)
                break
            except mp.ProcessExitedException as e:
                if attempt == 1:
                    raise
                warnings.warn(
                    f"worker died from signal {e.signal_name}; retrying once", stacklevel=1
                )
    finally:
        if old_threads is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = old_threads
    got = np.load(out)
    one = lg.SEP(Z=Z, kernel=lg.kernels.RBF(lengthscale=1.0, variance=1.0))
    Xt, ypm = one.prepare_training(X, y)
    one.sweep(Xt, ypm)
    sweep_one = one.log_evidence(X, y)
    one = lg.SEP(Z=Z, kernel=lg.kernels.RBF(lengthscale=1.0, variance=1.0))
    one.fit(X, y, max_steps=steps)
    assert float(got["sweep"]) == pytest.approx(sweep_one, abs=1e-9)
    np.testing.assert_allclose(got["obj"], one.history_.objective, rtol=1e-9)
    np.testing.assert_allclose(got["Z"], one.Z.detach().numpy(), atol=1e-9)
    np.testing.assert_allclose(got["p"], one.predict_y(X)[0], atol=1e-9)


@pytest.mark.parametrize("name", ["sep", "gfitc"])
def test_cli_model(name, tmp_path, capsys):
    import json

    from latentgp.cli import main

    out = str(tmp_path / "m.pt")
    rc = main(
        [
            "fit",
            "--data",
            "synth",
            "--model",
            name,
            "--inducing",
            "8",
            "--max-steps",
            "15",
            "--out",
            out,
            "--json",
        ]
    )
    assert rc == 0
    m = json.loads(capsys.readouterr().out)
    assert m["error_rate"] < 0.2
    assert type(lg.load(out)).__name__ == name.upper()


def test_sep_and_gfitc_share_fixed_points_with_m_less_than_n():
    """At the same hyperparameters and Z, converged SEP and GFITC-EP give the same evidence
    and predictions (both project the same FITC-type tilted distributions)."""
    X, y = sep_check_data()
    Z = np.linspace(-2.5, 2.5, 6)[:, None]
    kern = dict(lengthscale=1.0, variance=1.5)
    sep = lg.SEP(Z=Z, kernel=lg.kernels.RBF(**kern))
    sep.converge_sites(X, y, max_sweeps=3000, tol=1e-12)
    gf = lg.GFITC(Z=Z, kernel=lg.kernels.RBF(**kern), ep_tol=1e-12, max_sweeps=3000)
    gf.initialize(X, y)
    assert gf.converge(X, y) == pytest.approx(sep.log_evidence(X, y), abs=1e-8)
    Xs = np.linspace(-4, 4, 9)[:, None]
    np.testing.assert_allclose(gf.predict_y(Xs)[0], sep.predict_y(Xs)[0], atol=1e-9)
