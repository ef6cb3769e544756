"""latentgp's BO default against BoTorch's SingleTaskGP (issue 28): with the same
hyperparameters the wrapped ExactGP's posterior is SingleTaskGP's (batched joint means and
covariances, observation noise, the acquisition and its gradient in X), and
``default_model`` fits the same hyperparameters as ``SingleTaskGP`` + ``fit_gpytorch_mll``."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

pytest.importorskip("botorch", reason="BoTorch is not installed (pip install 'latentgp[bo]')")

from botorch.acquisition.logei import qLogNoisyExpectedImprovement  # noqa: E402
from botorch.fit import fit_gpytorch_mll  # noqa: E402
from botorch.models import SingleTaskGP  # noqa: E402
from botorch.sampling.normal import SobolQMCNormalSampler  # noqa: E402
from botorch.test_functions import Hartmann  # noqa: E402
from gpytorch.mlls import ExactMarginalLogLikelihood  # noqa: E402

import latentgp as lg  # noqa: E402
from latentgp.botorch import LatentGPModel, default_model  # noqa: E402


def _hartmann(n=20, seed=0):
    X = torch.quasirandom.SobolEngine(6, scramble=True, seed=seed).draw(n).double()
    return X, Hartmann(dim=6, negate=True)(X).unsqueeze(-1)


def _same_hyperparameters(mean: str):
    """A latentgp ExactGP and a SingleTaskGP with the same hand-set hyperparameters."""
    X, Y = _hartmann()
    ls = torch.tensor([0.2, 0.4, 0.9, 0.3, 1.7, 0.2], dtype=torch.float64)
    noise, c = 3e-3, -0.4
    m = lg.ExactGP(lg.kernels.RBF(lengthscale=ls.tolist()), mean=mean, noise_variance=noise)
    m.initialize(X, Y[:, 0])
    st = SingleTaskGP(X, Y)
    with torch.no_grad():
        st.covar_module.lengthscale = ls
        st.likelihood.noise = noise
        if mean == "constant":
            m.mean_function.constant.fill_(c)
        st.mean_module.constant.fill_(c if mean == "constant" else 0.0)
    st.eval()
    return m, st, X


@pytest.mark.parametrize("mean", ["zero", "constant"])
@pytest.mark.parametrize("noise", [False, True])
def test_batched_posterior_is_singletaskgps(mean, noise):
    m, st, _ = _same_hyperparameters(mean)
    Xq = torch.rand(3, 4, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    a = LatentGPModel(m).posterior(Xq, observation_noise=noise)
    b = st.posterior(Xq, observation_noise=noise)
    assert a.mean.shape == b.mean.shape == (3, 4, 1)
    torch.testing.assert_close(a.mean, b.mean, rtol=0, atol=1e-8)
    ca = a.distribution.covariance_matrix
    cb = b.distribution.covariance_matrix
    torch.testing.assert_close(ca, cb, rtol=0, atol=1e-8)


def test_acquisition_and_its_gradient_are_singletaskgps():
    m, st, X = _same_hyperparameters("constant")
    Xq = torch.rand(5, 1, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    out = []
    for model in (LatentGPModel(m), st):
        x = Xq.clone().requires_grad_(True)
        acqf = qLogNoisyExpectedImprovement(
            model, X_baseline=X, sampler=SobolQMCNormalSampler(torch.Size([64]), seed=0),
            prune_baseline=False, cache_root=False,  # SingleTaskGP would sample differently
        )
        v = acqf(x)
        (g,) = torch.autograd.grad(v.sum(), x)
        out.append((v.detach(), g))
    torch.testing.assert_close(out[0][0], out[1][0], rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(out[0][1], out[1][1], rtol=1e-5, atol=1e-8)


def test_constant_mean_is_where_the_posterior_returns():
    X, Y = _hartmann(30)
    m = lg.ExactGP(mean="constant").fit(X, Y[:, 0])
    far = torch.full((1, 6), 50.0, dtype=torch.float64)  # no data within many lengthscales
    mean, _ = m.predict_f(far)
    offset, scale = m.target_scaling()
    c = float(m.mean_function.constant.detach()) * float(scale) + float(offset)
    assert abs(float(mean.reshape(-1)[0]) - c) < 1e-8
    # the fitted constant maximises the evidence: its generalised least-squares value
    L = torch.linalg.cholesky(m.kernel(m.X_train) + m.likelihood.variance * torch.eye(30))
    one = torch.ones(30, 1, dtype=torch.float64)
    a, b = torch.cholesky_solve(one, L), torch.cholesky_solve(m.y_train[:, None], L)
    gls = float((one.T @ b) / (one.T @ a))
    assert abs(gls - float(m.mean_function.constant.detach())) < 1e-4


def test_constant_mean_survives_conditioning_paths_and_files(tmp_path):
    X, Y = _hartmann(25)
    m = lg.ExactGP(mean="constant").fit(X[:20], Y[:20, 0])
    assert float(m.mean_function.constant.detach()) != 0.0
    cond = m.condition_on(X[20:], Y[20:, 0])
    ref = lg.ExactGP.from_config(m.get_config())
    ref.initialize(X[:20], Y[:20, 0])
    ref.load_state_dict(m.state_dict())
    ref.set_data(X, Y[:, 0])
    Xt = torch.rand(7, 6, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    for a, b in zip(cond.predict_f(Xt), ref.predict_f(Xt), strict=True):
        torch.testing.assert_close(torch.as_tensor(a), torch.as_tensor(b), rtol=0, atol=1e-8)
    m.save(tmp_path / "m.lgp")
    back = lg.load(tmp_path / "m.lgp")
    torch.testing.assert_close(
        torch.as_tensor(back.predict_f(Xt)[0]), torch.as_tensor(m.predict_f(Xt)[0])
    )
    # pathwise samples average to the posterior mean, constant included
    paths = m.sample_paths(4000, seed=0)
    mean_paths = torch.as_tensor(paths(Xt)).reshape(4000, -1).mean(0)
    sd = torch.as_tensor(m.predict_f(Xt)[1]).reshape(-1).sqrt()
    mu = torch.as_tensor(m.predict_f(Xt)[0]).reshape(-1)
    assert bool(((mean_paths - mu).abs() < 5 * sd / math.sqrt(4000) + 1e-3).all())


def test_default_model_fits_singletaskgps_hyperparameters():
    X, Y = _hartmann(20, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        st = SingleTaskGP(X, Y)
        fit_gpytorch_mll(ExactMarginalLogLikelihood(st.likelihood, st))
    ours = default_model(X, Y).wrapped
    assert float(ours.kernel.variance.detach()) == 1.0
    torch.testing.assert_close(
        ours.kernel.lengthscale.detach(), st.covar_module.lengthscale.detach()[0], rtol=2e-3,
        atol=0,
    )
    noise = float(ours.likelihood.variance.detach())
    assert abs(math.log(noise / float(st.likelihood.noise.detach()))) < 1e-2
    assert abs(float(ours.mean_function.constant.detach()) - float(st.mean_module.constant)) < 1e-3


def test_default_model_refuses_bad_input():
    X, Y = _hartmann(10)
    with pytest.raises(ValueError, match="train_Y must be"):
        default_model(X, Y[:5])
    with pytest.raises(TypeError, match="torch tensors"):
        default_model(X.numpy(), Y)
    with pytest.raises(ValueError, match="unknown mean"):
        default_model(X, Y, mean="quadratic")


def _singletaskgp_fit(X, Y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        st = SingleTaskGP(X, Y)
        mll = ExactMarginalLogLikelihood(st.likelihood, st)
        fit_gpytorch_mll(mll)
    mll.train()
    with torch.no_grad():
        loss = -float(mll(st(*st.train_inputs), st.train_targets))
    st.eval()
    return st, loss


@pytest.mark.parametrize("seed", [0, 1, 3])
def test_default_model_is_singletaskgp_on_the_same_data(seed):
    """The same model, priors, starting values and optimiser as SingleTaskGP +
    fit_gpytorch_mll: the same MAP objective at the start, and after the fit the same
    hyperparameters and posterior to the optimisers' tolerance (L-BFGS-B stops at a
    relative reduction of 2e-9; the remaining differences are flat directions)."""
    X, Y = _hartmann(20 + 3 * seed, seed=seed)
    st, st_loss = _singletaskgp_fit(X, Y)
    start = default_model(X, Y, fit=False).wrapped
    fresh = SingleTaskGP(X, Y)
    torch.testing.assert_close(start.kernel.lengthscale.detach(),
                               fresh.covar_module.lengthscale.detach()[0], rtol=1e-14, atol=0)
    assert float(start.likelihood.variance.detach()) == pytest.approx(
        float(fresh.likelihood.noise.detach()), rel=1e-12)
    ours = default_model(X, Y).wrapped
    report = ours.map_fit_
    assert report["success"], report
    # the MAP objective of latentgp's model (its own evidence and priors) at its optimum is
    # gpytorch's at SingleTaskGP's, to the optimisers' tolerance
    assert report["fun"] == pytest.approx(st_loss, abs=2e-4)
    torch.testing.assert_close(ours.kernel.lengthscale.detach(),
                               st.covar_module.lengthscale.detach()[0], rtol=1e-2, atol=0)
    assert float(ours.likelihood.variance.detach()) == pytest.approx(
        float(st.likelihood.noise.detach()), rel=1e-2)
    Xt = torch.rand(50, 6, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    a = LatentGPModel(ours).posterior(Xt)
    with torch.no_grad():
        b = st.posterior(Xt)
    scale = float(Y.std())
    assert float((a.mean - b.mean).abs().max()) < 1e-2 * scale
    assert float((a.variance.sqrt() - b.variance.sqrt()).abs().max()) < 1e-2 * scale


def test_map_fit_keeps_the_bounds_and_reaches_a_stationary_point():
    # a smooth noise-free function on many points: the noise goes to its floor (1e-4)
    X = torch.rand(40, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    Y = torch.sin(3 * X[:, :1]) + X[:, 1:] ** 2
    m = default_model(X, Y).wrapped
    noise = float(m.likelihood.variance.detach())
    assert noise >= 1e-4 * (1 - 1e-12) and noise == pytest.approx(1e-4, rel=1e-6)
    assert bool((m.kernel.lengthscale >= 0.025).all())
    # projected gradient of -(log p + log prior) / N in the values: zero but at the floor
    ys = m.scale_targets(Y[:, 0])
    c = m.mean_function.constant
    with torch.enable_grad():
        raw = m.kernel.raw_lengthscale
        loss = -(m.objective(X, ys, 40) + m.log_prior()) / 40
        g_raw, g_c = torch.autograd.grad(loss, [raw, c])
        (slope,) = torch.autograd.grad(m.kernel.lengthscale.sum(), raw)
    assert float((g_raw / slope).abs().max()) < 1e-4
    assert float(g_c.abs().max()) < 1e-4


def test_default_model_fitters():
    X, Y = _hartmann(15)
    with pytest.raises(ValueError, match="fitter must be"):
        default_model(X, Y, fitter="adam")
    with pytest.raises(ValueError, match="need fitter='latentgp'"):
        default_model(X, Y, max_steps=3)
    own = default_model(X, Y, fitter="latentgp", max_steps=3).wrapped
    assert own.history_.steps == 3 and not hasattr(own, "map_fit_")
