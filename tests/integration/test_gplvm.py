"""BayesianGPLVM: its collapsed bound against SparseGP's VFE bound at fixed latents, the
uncollapsed bound against the collapsed one at the optimal q(u), gradients against finite
differences, recovery of a 1-D latent, save/load and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import latentgp as lg


def _data(N: int = 60, P: int = 5, seed: int = 0):
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(-2, 2, N))
    Y = np.stack([np.sin(t * (k + 1) / 3 + k) for k in range(P)], 1)
    Y = Y + 0.05 * rng.standard_normal((N, P))
    return t, Y


def _initialized(bound: str = "collapsed", Q: int = 2, M: int = 8):
    _, Y = _data()
    model = lg.BayesianGPLVM(Q, num_inducing=M, bound=bound).initialize(Y, seed=0)
    with torch.no_grad():  # move away from the initial values (a generic point)
        model.kernel.lengthscale = torch.linspace(0.8, 1.7, Q, dtype=torch.float64)
        model.kernel.variance = 1.4
        model.likelihood.variance = 0.07
        model.raw_latent_variance.add_(
            0.3 * torch.randn(model.raw_latent_variance.shape, generator=torch.Generator()
                              .manual_seed(3), dtype=torch.float64))
    Yt = model.scale_targets(Y)
    rows = torch.arange(len(Y), dtype=torch.float64)[:, None]
    return model, rows, Yt


def test_bgplvm_bound_with_fixed_latents_equals_the_vfe_bound():
    model, _, Yt = _initialized()
    X = model.latent_mean.detach().clone()
    sparse = lg.SparseGP("vfe", num_inducing=8, normalize_y=False).build(2, Yt.shape[1])
    with torch.no_grad():
        sparse.kernel.lengthscale = model.kernel.lengthscale
        sparse.kernel.variance = model.kernel.variance
        sparse.likelihood.variance = model.likelihood.variance
        sparse.Z = model.Z
        vfe = sparse.objective(X, Yt, len(X))
        point_mass = model.collapsed_bound(Yt, X, torch.zeros_like(X))
        blurred = model.collapsed_bound(Yt, X, torch.full_like(X, 0.2))
    assert abs(float(point_mass) - float(vfe)) < 1e-10 * max(1.0, abs(float(vfe)))
    assert float(blurred) < float(point_mass)  # input uncertainty costs fit (not equal)


def test_uncollapsed_bound_at_the_optimal_q_u_equals_the_collapsed_bound():
    collapsed, rows, Yt = _initialized("collapsed")
    unc, _, _ = _initialized("uncollapsed")
    with torch.no_grad():
        unc.set_optimal_inducing(Yt)
        a = float(collapsed.objective(rows, Yt, len(rows)))
        b = float(unc.objective(rows, Yt, len(rows)))
        unc.q.q_mu.add_(0.05)  # any other q(u) gives a lower bound
        c = float(unc.objective(rows, Yt, len(rows)))
    assert abs(a - b) < 1e-9 * abs(a)
    assert c < b - 1e-6


def test_uncollapsed_minibatch_estimates_average_to_the_full_bound():
    model, rows, Yt = _initialized("uncollapsed")
    N = len(rows)
    perm = torch.randperm(N, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = float(model.objective(rows, Yt, N))
        parts = [float(model.objective(rows[i], Yt[i], N)) for i in perm.split(15)]
        with pytest.raises(ValueError, match="full data set"):
            _initialized("collapsed")[0].objective(rows[:15], Yt[:15], N)
    assert abs(np.mean(parts) - full) < 1e-10 * abs(full)


@pytest.mark.parametrize("bound", ["collapsed", "uncollapsed"])
def test_gradients_match_central_differences(bound):
    model, rows, Yt = _initialized(bound)
    params = [p for p in model.parameters() if p.requires_grad]
    obj = model.objective(rows, Yt, len(rows))
    grads = torch.autograd.grad(obj, params)
    g = torch.Generator().manual_seed(5)
    for _ in range(3):
        dirs = [torch.randn(p.shape, generator=g, dtype=p.dtype) for p in params]
        analytic = sum(float((gr * d).sum()) for gr, d in zip(grads, dirs, strict=True))
        eps, values = 1e-5, []
        for sign in (1.0, -1.0):
            with torch.no_grad():
                for p, d in zip(params, dirs, strict=True):
                    p.add_(sign * eps * d)
                values.append(float(model.objective(rows, Yt, len(rows))))
                for p, d in zip(params, dirs, strict=True):
                    p.sub_(sign * eps * d)
        numeric = (values[0] - values[1]) / (2 * eps)
        assert abs(numeric - analytic) < 1e-5 * max(1.0, abs(analytic))


def test_recovers_a_one_dimensional_latent():
    t, Y = _data()
    model = lg.BayesianGPLVM(1, num_inducing=10).fit(Y, seed=0, progress=False)
    mean, var = model.latent_posterior()
    assert mean.shape == var.shape == (60, 1) and np.all(var > 0)
    assert abs(np.corrcoef(mean[:, 0], t)[0, 1]) > 0.99  # PCA's start: 0.897
    assert model.history_.stopped.startswith("converged")
    # the mapping reconstructs the data from the latent means
    rec = model.predict_y(mean)[0]
    assert np.sqrt(np.mean((rec - Y) ** 2)) < 0.5 * Y.std()


def test_save_load_round_trip(tmp_path):
    _, Y = _data()
    for bound in ("collapsed", "uncollapsed"):
        model = lg.BayesianGPLVM(2, num_inducing=6, bound=bound).fit(
            Y, max_steps=5, seed=0, progress=False
        )
        model.save(tmp_path / f"{bound}.pt")
        back = lg.load(tmp_path / f"{bound}.pt")
        assert isinstance(back, lg.BayesianGPLVM) and back.bound == bound
        Xs = np.linspace(-1, 1, 8)[:, None].repeat(2, 1)
        np.testing.assert_array_equal(back.predict_f(Xs)[1], model.predict_f(Xs)[1])
        np.testing.assert_array_equal(back.latent_posterior()[0], model.latent_posterior()[0])


def test_bad_input_is_refused():
    _, Y = _data()
    with pytest.raises(ValueError, match="RBF kernel only"):
        lg.BayesianGPLVM(2, kernel="matern32")
    with pytest.raises(ValueError, match="bound"):
        lg.BayesianGPLVM(2, bound="tight")
    with pytest.raises(ValueError, match="Gaussian likelihood"):
        lg.BayesianGPLVM(2, likelihood="bernoulli")
    with pytest.raises(TypeError, match="fit\\(Y\\)"):
        lg.BayesianGPLVM(2).fit(Y, Y[:, 0])
    bad = Y.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="Y"):
        lg.BayesianGPLVM(2).fit(bad)
    model = lg.BayesianGPLVM(2, num_inducing=5).fit(Y, max_steps=2, progress=False)
    with pytest.raises(ValueError, match="rows"):
        model.fit(Y[:30], max_steps=1, progress=False)
    with pytest.raises(ValueError, match="columns"):
        model.predict_f(np.zeros((3, 3)))
    with torch.no_grad():
        model.kernel.variance = 2.0
    with pytest.raises(RuntimeError, match="changed since"):
        model.predict_f(np.zeros((3, 2)))


def test_latent_plot_from_the_cli(tmp_path):
    pytest.importorskip("matplotlib")
    from latentgp import plotting
    from latentgp.cli import main

    t, Y = _data()
    model = lg.BayesianGPLVM(2, num_inducing=6).fit(Y, max_steps=5, seed=0, progress=False)
    model.save(tmp_path / "g.pt")
    np.savetxt(tmp_path / "labels.txt", (t > 0).astype(int), fmt="%d")
    out = tmp_path / "latent.png"
    assert main(["plot", "--model-file", str(tmp_path / "g.pt"), "--labels",
                 str(tmp_path / "labels.txt"), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="labels has 3 entries"):
        plotting.plot_latent(model, [0, 1, 2])
