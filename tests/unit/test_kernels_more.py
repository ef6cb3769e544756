"""The kernels of issue 25, item 5: rational quadratic, polynomial, cosine, spectral
mixture (with its initialisation from the empirical spectrum), change-point, active
dimensions and the coregionalisation (index) kernel.

Each is checked against its formula written out here, for positive semi-definiteness,
``diag`` against the diagonal of ``K``, batch shapes, and a model-file round trip; the
index kernel in an exact multi-task GP beats one GP per task on two related tasks
observed at different inputs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.kernels import (
    RBF,
    ChangePoint,
    Coregion,
    Cosine,
    Matern32,
    Polynomial,
    RationalQuadratic,
    SpectralMixture,
    kernel_from_config,
)

rng = np.random.default_rng(0)
X = torch.as_tensor(rng.normal(size=(25, 2)))
Z = torch.as_tensor(rng.normal(size=(6, 2)))


def _built(k, X=X, batch=()):
    k.build(X.shape[1], batch)
    k.init_from_data(X)
    return k


KERNELS = {
    "rq": lambda: RationalQuadratic(lengthscale=0.7, alpha=0.5),
    "poly": lambda: Polynomial(degree=3, offset=0.5),
    "cosine": lambda: Cosine(period=1.3),
    "sm": lambda: SpectralMixture(num_mixtures=3),
    "changepoint": lambda: ChangePoint([RBF(), Matern32()], location=0.0, steepness=3.0),
    "active": lambda: RBF(lengthscale=0.5).on([1]),
}


@pytest.mark.parametrize("name", KERNELS)
@pytest.mark.parametrize("batch", [(), (2,)])
def test_psd_diag_and_shapes(name, batch):
    k = _built(KERNELS[name](), batch=batch)
    K, Kxz, d = k(X), k(X, Z), k.diag(X)
    assert K.shape == batch + (25, 25) and Kxz.shape == batch + (25, 6) and d.shape == batch + (25,)
    torch.testing.assert_close(K, K.mT)
    ev = torch.linalg.eigvalsh(K)
    assert bool((ev > -1e-9 * ev.abs().max()).all())
    torch.testing.assert_close(torch.diagonal(K, dim1=-2, dim2=-1), d)
    torch.testing.assert_close(k(X, X), K, rtol=1e-9, atol=1e-10)


def test_formulas_written_out():
    x, z = X[:4], Z[:3]
    tau = (x[:, None, :] - z[None, :, :]).numpy()
    rq = _built(RationalQuadratic(lengthscale=0.7, alpha=0.5, variance=2.0))
    r2 = (tau**2 / 0.49).sum(-1)
    np.testing.assert_allclose(rq(x, z).detach(), 2.0 * (1 + r2 / 1.0) ** -0.5, rtol=1e-12)
    poly = _built(Polynomial(degree=3, offset=0.5, variance=1.5))
    np.testing.assert_allclose(poly(x, z).detach(), 1.5 * (0.5 + x @ z.T) ** 3, rtol=1e-12)
    cos = _built(Cosine(period=1.3, variance=0.8))
    np.testing.assert_allclose(
        cos(x, z).detach(), 0.8 * np.cos(2 * math.pi * tau.sum(-1) / 1.3), rtol=1e-10,
        atol=1e-12,
    )
    sm = _built(SpectralMixture(num_mixtures=2))
    w, mu, v = (t.detach().numpy() for t in (sm.weights, sm.means, sm.scales))
    ref = sum(
        w[q] * np.exp(-2 * math.pi**2 * (tau**2 * v[q] ** 2).sum(-1))
        * np.cos(2 * math.pi * (tau * mu[q]).sum(-1))
        for q in range(2)
    )
    np.testing.assert_allclose(sm(x, z).detach(), ref, rtol=1e-10, atol=1e-12)


def test_rational_quadratic_tends_to_the_rbf():
    rq = _built(RationalQuadratic(lengthscale=0.7, alpha=1e7))
    rbf = _built(RBF(lengthscale=0.7))
    torch.testing.assert_close(rq(X, Z), rbf(X, Z), rtol=1e-6, atol=1e-8)


def test_changepoint_follows_each_kernel_on_its_side():
    k1, k2 = RBF(lengthscale=0.3), Matern32(lengthscale=2.0)
    cp = _built(ChangePoint([k1, k2], location=0.0, steepness=50.0))
    before = torch.tensor([[-3.0, 0.0], [-2.5, 1.0]], dtype=torch.float64)
    after = before.abs()
    torch.testing.assert_close(cp(before), cp.kernels[0](before), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(cp(after), cp.kernels[1](after), rtol=1e-12, atol=1e-12)
    assert float(cp(before, after).detach().abs().max()) < 1e-20


def test_active_dimensions_use_only_their_columns():
    k = _built(RBF(lengthscale=0.5).on([1]))
    alone = _built(RBF(lengthscale=0.5), X=X[:, 1:])
    torch.testing.assert_close(k(X, Z), alone(X[:, 1:], Z[:, 1:]))
    with pytest.raises(ValueError, match="data have 2 columns"):
        RBF().on([3]).build(2)


def test_coregion_is_w_wt_plus_kappa_on_the_labels():
    k = Coregion(num_tasks=3, rank=2).on([1])
    Xt = torch.tensor([[0.1, 0.0], [0.2, 2.0], [0.3, 1.0]], dtype=torch.float64)
    _built(k, X=Xt)
    with torch.no_grad():
        k.kernel.W.copy_(torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.0, 2.0]]))
    W, kappa = k.kernel.W.detach(), k.kernel.kappa.detach()
    B = W @ W.T + torch.diag(kappa)
    torch.testing.assert_close(k(Xt), B[[0, 2, 1]][:, [0, 2, 1]])
    with pytest.raises(ValueError, match="integer labels 0..2"):
        k(torch.tensor([[0.0, 1.5]], dtype=torch.float64))


def test_spectral_mixture_initialised_from_the_spectrum_finds_the_frequencies():
    x = np.sort(np.random.default_rng(1).uniform(0, 20, 400))
    y = np.sin(2 * math.pi * 0.5 * x) + 0.6 * np.sin(2 * math.pi * 1.7 * x)
    sm = SpectralMixture(num_mixtures=2).initialize_from_spectrum(x[:, None], y)
    found = np.sort(sm.means.detach().numpy()[:, 0])
    np.testing.assert_allclose(found, [0.5, 1.7], rtol=0.1)
    # a fit keeps them (init_from_data does not reset a spectrum initialisation)
    sm.init_from_data(torch.as_tensor(x[:, None]))
    np.testing.assert_allclose(np.sort(sm.means.detach().numpy()[:, 0]), found)


@pytest.mark.parametrize("name", KERNELS)
def test_model_file_round_trip(name, tmp_path):
    Xd = rng.normal(size=(40, 2))
    y = np.sin(Xd[:, 0]) + 0.1 * rng.normal(size=40)
    model = lg.ExactGP(kernel=KERNELS[name]()).fit(Xd, y, max_steps=3, seed=0)
    path = tmp_path / "m.lgp"
    model.save(path)
    back = lg.load(path)
    np.testing.assert_array_equal(back.predict_f(Xd[:5])[0], model.predict_f(Xd[:5])[0])
    cfg = model.kernel.to_config()
    assert kernel_from_config(cfg).to_config() == cfg


def test_exact_multitask_gp_beats_separate_gps_on_related_tasks():
    """Two related sine tasks observed at different inputs (task 1 only on the left half):
    the coregionalised GP predicts task 1's right half from task 0."""
    r = np.random.default_rng(3)
    x0, x1 = r.uniform(-3, 3, 60), r.uniform(-3, 0, 30)
    f = np.sin
    X = np.r_[np.c_[x0, np.zeros(60)], np.c_[x1, np.ones(30)]]
    y = np.r_[f(x0), 0.9 * f(x1)] + 0.05 * r.normal(size=90)
    xt = np.linspace(0.5, 3, 40)
    icm = lg.ExactGP(kernel=RBF().on([0]) * Coregion(num_tasks=2).on([1]))
    icm.fit(X, y, seed=0)
    single = lg.ExactGP().fit(x1[:, None], y[60:], seed=0)
    rmse_icm = np.sqrt(np.mean((icm.predict_f(np.c_[xt, np.ones(40)])[0] - 0.9 * f(xt)) ** 2))
    rmse_one = np.sqrt(np.mean((single.predict_f(xt[:, None])[0] - 0.9 * f(xt)) ** 2))
    assert rmse_icm < 0.5 * rmse_one, (rmse_icm, rmse_one)
