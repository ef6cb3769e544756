"""latentgp.botorch: shapes, joint covariances, gradients, noise, conditioning and the
BoTorch acquisition functions on wrapped latentgp models."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

pytest.importorskip("botorch", reason="BoTorch is not installed (pip install 'latentgp[bo]')")

from botorch.acquisition import qKnowledgeGradient  # noqa: E402
from botorch.acquisition.logei import qLogNoisyExpectedImprovement  # noqa: E402
from botorch.optim import optimize_acqf  # noqa: E402
from botorch.sampling.normal import SobolQMCNormalSampler  # noqa: E402

import latentgp as lg  # noqa: E402
from latentgp.botorch import ConditionedModel, LatentGPModel  # noqa: E402

BOUNDS = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)


def _data(n=30, seed=0, outputs=1):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=g, dtype=torch.float64)
    f = torch.sin(6 * X[:, 0]) + X[:, 1]
    y = f + 0.05 * torch.randn(n, generator=g, dtype=torch.float64)
    if outputs == 2:
        y = torch.stack([y, torch.cos(4 * X[:, 1]) + 0.05 * torch.randn(n, generator=g)], 1)
    return X, y


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    X, y = _data()
    out = {
        "ExactGP": lg.ExactGP().fit(X, y, max_steps=30),
        "SparseGP": lg.SparseGP(num_inducing=10).fit(X, y, max_steps=30),
        "SVGP": lg.SVGP(10).fit(X, y, max_steps=100),
        "SHGP": lg.SHGP(10).fit(X, y, max_steps=100),
        "SAVIGP": lg.SAVIGP(10, posterior="mog2").fit(X, y, max_steps=50),
    }
    return out, X, y


FAMILIES = ["ExactGP", "SparseGP", "SVGP", "SHGP", "SAVIGP"]


@pytest.mark.parametrize("name", FAMILIES)
def test_posterior_marginals_are_the_models_predictive(models, name):
    """With observation noise, the marginal mean and variance of the posterior are the
    model's predict_y (SHGP: eq. 11's closed form; SAVIGP: the mixture's moments);
    without, the latent variance (predict_f) where the model has one."""
    fitted, _, _ = models
    model = fitted[name]
    bm = LatentGPModel(model)
    Xq = _data(12, seed=4)[0].reshape(3, 4, 2)
    post = bm.posterior(Xq, observation_noise=True)
    assert post.mean.shape == (3, 4, 1) and bm.num_outputs == 1
    my, vy = model.predict_y(Xq.reshape(-1, 2))
    np.testing.assert_allclose(post.mean.detach().reshape(-1).numpy(), my, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(post.variance.detach().reshape(-1).numpy(), vy, rtol=1e-6)
    if name not in ("SHGP", "SAVIGP"):
        mf, vf = model.predict_f(Xq.reshape(-1, 2))
        v0 = bm.posterior(Xq).variance.detach().reshape(-1).numpy()
        np.testing.assert_allclose(v0, vf, rtol=1e-6)


@pytest.mark.parametrize("name", ["ExactGP", "SparseGP", "SVGP"])
def test_joint_covariance_is_the_models(models, name):
    model = models[0][name]
    Xq = _data(10, seed=5)[0].reshape(2, 5, 2)
    cov = LatentGPModel(model).posterior(Xq).distribution.covariance_matrix.detach()
    for b in range(2):
        _, K = model.predict_f_full_cov(Xq[b])
        np.testing.assert_allclose(cov[b].numpy(), K[0], rtol=1e-7, atol=1e-10)


def test_shgp_joint_covariance_against_monte_carlo(models):
    """Off-diagonal covariance of h = exp(w) f from the log-normal closed form against
    200,000 draws of the latent joint posterior (f and g independent)."""
    model = models[0]["SHGP"]
    Xq = _data(3, seed=6)[0]
    cov = LatentGPModel(model).predictive_joint(Xq)[1][0].detach()
    m, C = model.predict_f_joint(Xq, scaled=True)
    g = torch.Generator().manual_seed(0)
    S = 200_000
    draws = []
    for j in range(2):
        Lj = torch.linalg.cholesky(C[j].detach() + 1e-10 * torch.eye(3, dtype=torch.float64))
        eps = torch.randn(S, 3, generator=g, dtype=torch.float64)
        draws.append(m[:, j].detach() + eps @ Lj.T)
    h = draws[0] * (draws[1] + model.likelihood.w_mean.detach()).exp()
    _, scale = model.target_scaling()
    mc = torch.cov(h.T) * scale**2
    c = h - h.mean(0)
    se = (c[:, :, None] * c[:, None, :]).std(0) * scale**2 / S**0.5  # of each entry
    assert bool(((mc - cov).abs() <= 4 * se).all()), (mc, cov, se)
    assert float((cov - torch.diag(cov.diagonal())).abs().max()) > 10 * float(se.max())


def test_rsample_gradient_matches_finite_differences(models):
    bm = LatentGPModel(models[0]["ExactGP"])
    Xq = _data(6, seed=7)[0].reshape(2, 3, 2).clone().requires_grad_(True)
    shape = torch.Size([5]) + bm.posterior(Xq).base_sample_shape
    base = torch.randn(shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)

    def total(X):
        return bm.posterior(X).rsample_from_base_samples(torch.Size([5]), base).sum()

    (g,) = torch.autograd.grad(total(Xq), Xq)
    h = 1e-6
    for idx in [(0, 1, 0), (1, 2, 1)]:
        E = torch.zeros_like(Xq)
        E[idx] = h
        with torch.no_grad():
            fd = (total(Xq + E) - total(Xq - E)) / (2 * h)
        assert abs(float(fd) - float(g[idx])) < 1e-5 * max(1.0, abs(float(fd)))


def test_multi_output_exact_gp():
    X, Y = _data(25, outputs=2)
    model = lg.ExactGP().fit(X, Y, max_steps=20)
    bm = LatentGPModel(model)
    assert bm.num_outputs == 2
    Xq = _data(6, seed=8)[0].reshape(2, 3, 2)
    post = bm.posterior(Xq, observation_noise=True)
    assert post.mean.shape == (2, 3, 2)
    my, vy = model.predict_y(Xq.reshape(-1, 2))
    np.testing.assert_allclose(post.mean.detach().reshape(-1, 2).numpy(), my, rtol=1e-7)
    np.testing.assert_allclose(post.variance.detach().reshape(-1, 2).numpy(), vy, rtol=1e-6)
    one = bm.posterior(Xq, output_indices=[1])
    np.testing.assert_allclose(one.mean.detach()[..., 0].numpy(), post.mean.detach()[..., 1])
    with pytest.raises(ValueError, match="output_indices"):
        bm.posterior(Xq, output_indices=[2])


def test_condition_on_observations_exact_paths_agree(models):
    """Un-batched observations on an ExactGP use ExactGP.condition_on; the batched (and
    generic) Gaussian conditioning gives the same posterior, batch by batch."""
    model = models[0]["ExactGP"]
    state = copy.deepcopy(model.state_dict())
    bm = LatentGPModel(model)
    Xn, Yn = _data(4, seed=9)
    Yn = Yn[:, None]
    fast = bm.condition_on_observations(Xn, Yn)
    assert type(fast) is LatentGPModel and fast.wrapped.X_train.shape[0] == 34
    Yb = torch.stack([Yn, Yn + 0.3])  # two fantasies
    slow = bm.condition_on_observations(Xn, Yb)
    assert isinstance(slow, ConditionedModel) and slow.batch_shape == (2,)
    Xq = _data(5, seed=10)[0]
    pf, ps = fast.posterior(Xq), slow.posterior(Xq)
    np.testing.assert_allclose(ps.mean[0].detach(), pf.mean.detach(), atol=1e-8)
    cf = pf.distribution.covariance_matrix.detach()
    np.testing.assert_allclose(ps.distribution.covariance_matrix[1].detach(), cf, atol=1e-8)
    shifted = bm.condition_on_observations(Xn, Yn + 0.3).posterior(Xq).mean.detach()
    np.testing.assert_allclose(ps.mean[1].detach(), shifted, atol=1e-8)
    for k, v in model.state_dict().items():
        assert torch.equal(v, state[k]), k


def test_fantasize_and_knowledge_gradient(models):
    bm = LatentGPModel(models[0]["SVGP"])
    Xf = _data(6, seed=11)[0].reshape(3, 2, 2)
    fm = bm.fantasize(Xf, SobolQMCNormalSampler(torch.Size([4])))
    assert fm.batch_shape == (4, 3)
    assert fm.posterior(torch.rand(4, 3, 1, 2, dtype=torch.float64)).mean.shape == (4, 3, 1, 1)
    # conditioning on a value shrinks the variance at that point to about the noise level
    post = fm.posterior(Xf)
    assert bool((post.variance < bm.posterior(Xf).variance).all())
    kg = qKnowledgeGradient(bm, num_fantasies=4)
    x, value = optimize_acqf(kg, bounds=BOUNDS, q=1, num_restarts=2, raw_samples=16)
    assert x.shape == (1, 2) and bool(torch.isfinite(value))


@pytest.mark.parametrize("name", FAMILIES)
def test_qlognei_reuses_the_cached_baseline_root(models, name):
    """A wrapped model gets qLogNEI's cached-root sampling (BoTorch's default for its own
    GPs): the acquisition says so, and its value equals the uncached estimator's to Monte
    Carlo error (both with 4,096 quasi-random draws)."""
    fitted, X, _ = models
    model = LatentGPModel(fitted[name])
    g = torch.Generator().manual_seed(5)
    cand = torch.rand(6, 2, 2, dtype=torch.float64, generator=g)
    values = {}
    for cache in (True, False):
        sampler = SobolQMCNormalSampler(torch.Size([4096]), seed=11)
        acqf = qLogNoisyExpectedImprovement(model, X_baseline=X, sampler=sampler,
                                            cache_root=cache, prune_baseline=False)
        assert acqf._cache_root is cache
        with torch.no_grad():
            values[cache] = acqf(cand)
    assert torch.allclose(values[True], values[False], atol=0.05, rtol=0.05)
    assert not torch.equal(values[True], values[False])  # two estimators, not one


@pytest.mark.parametrize("name", FAMILIES)
def test_qlognei_with_optimize_acqf(models, name):
    fitted, X, _ = models
    acqf = qLogNoisyExpectedImprovement(LatentGPModel(fitted[name]), X_baseline=X)
    torch.manual_seed(0)
    x, value = optimize_acqf(acqf, bounds=BOUNDS, q=2, num_restarts=3, raw_samples=32)
    assert x.shape == (2, 2) and bool(((x >= 0) & (x <= 1)).all())
    # the optimiser improves on (or matches) every raw sample it could have returned
    with torch.no_grad():
        g = torch.Generator().manual_seed(3)
        raw = acqf(torch.rand(32, 2, 2, dtype=torch.float64, generator=g))
    assert float(value) >= float(raw.max()) - 1e-6


def test_latent_f_of_ep_classifiers_and_refused_families():
    X, y = _data(40)
    yb = (y > 1).double()
    for model in (lg.SEP(8).fit(X, yb, max_steps=3), lg.GFITC(8).fit(X, yb, max_steps=3)):
        post = LatentGPModel(model).posterior(X[:5])
        mf, vf = model.predict_f(X[:5])
        np.testing.assert_allclose(post.mean.detach()[:, 0], mf, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(post.variance.detach()[:, 0], vf, rtol=1e-6)
    with pytest.raises(TypeError, match="not a Gaussian of its latent GPs"):
        LatentGPModel(lg.SVHGP(8).fit(X, y, max_steps=2))
    with pytest.raises(TypeError, match="no joint Gaussian predictive"):
        LatentGPModel(lg.QSGP().fit(X, y, max_steps=2))


def test_bad_input():
    with pytest.raises(TypeError, match="latentgp model"):
        LatentGPModel(object())
    with pytest.raises(ValueError, match="not fitted"):
        LatentGPModel(lg.ExactGP())
    X, y = _data(20)
    clf = lg.SVGP(5, likelihood="bernoulli").fit(X, (y > 1).double(), max_steps=5)
    bm = LatentGPModel(clf)
    with pytest.raises(ValueError, match="Gaussian noise"):
        bm.posterior(X[:3], observation_noise=True)
    with pytest.raises(TypeError, match="torch.Tensor"):
        bm.posterior(X[:3].numpy())
    with pytest.raises(ValueError, match="Y must have shape"):
        bm.condition_on_observations(X[:3], y[:3])


@pytest.mark.parametrize("name", ["SparseGP", "SVGP"])
def test_condition_on_observations_uses_the_models_own_update(models, name):
    model = models[0][name]
    Xn, Yn = _data(3, seed=12)
    new = LatentGPModel(model).condition_on_observations(Xn, Yn[:, None])
    assert type(new) is LatentGPModel and type(new.wrapped) is type(model)
    Xq = _data(4, seed=13)[0]
    own = model.condition_on(Xn, Yn).predict_f_full_cov(Xq)
    post = new.posterior(Xq)
    np.testing.assert_allclose(post.mean.detach()[:, 0], own[0][:, 0], atol=1e-10)
    np.testing.assert_allclose(post.distribution.covariance_matrix.detach(), own[1][0], atol=1e-10)


def test_a_batched_exact_gp_is_a_botorch_model_of_batch_shape_b():
    """B independent exact GPs: batch shape (B,), member b's joint posterior at its own q
    points (the single ExactGP's at the same hyperparameters), noise per member, gradients
    with respect to X, and qLogNEI over a t-batch of candidates for every member."""
    g = torch.Generator().manual_seed(4)
    B = 3
    X = torch.rand(B, 20, 2, generator=g, dtype=torch.float64)
    y = torch.sin(6 * X[..., 0]) * torch.arange(1.0, B + 1)[:, None] + X[..., 1]
    y = y + 0.05 * torch.randn(B, 20, generator=g, dtype=torch.float64)
    batched = lg.BatchedExactGP().fit(X, y, max_steps=20)
    bm = LatentGPModel(batched)
    assert bm.batch_shape == torch.Size([B]) and bm.num_outputs == 1
    Xq = torch.rand(5, B, 4, 2, generator=g, dtype=torch.float64, requires_grad=True)
    post = bm.posterior(Xq, observation_noise=True)
    assert post.mean.shape == (5, B, 4, 1)
    for b in range(B):
        single = lg.ExactGP().initialize(X[b], y[b])
        single.kernel.lengthscale = batched.kernel.lengthscale[b].detach()
        single.kernel.variance = batched.kernel.variance[b].detach()
        single.likelihood.variance = batched.likelihood.variance[b].detach()
        sp = LatentGPModel(single).posterior(Xq[:, b].detach(), observation_noise=True)
        torch.testing.assert_close(post.mean[:, b].detach(), sp.mean, rtol=1e-8, atol=1e-10)
        torch.testing.assert_close(post.covariance_matrix[:, b].detach(),
                                   sp.covariance_matrix, rtol=1e-7, atol=1e-10)
    post.mean.sum().backward()
    assert Xq.grad is not None and bool(torch.isfinite(Xq.grad).all())
    acqf = qLogNoisyExpectedImprovement(bm, X_baseline=X, prune_baseline=False)
    values = acqf(torch.rand(6, B, 1, 2, generator=g, dtype=torch.float64))
    assert values.shape == (6, B) and bool(torch.isfinite(values).all())
