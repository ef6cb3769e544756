"""Every model family on a second device: CUDA where the machine has one (skipped with a
reason where it has not).

The device is ``LATENTGP_TEST_DEVICE`` (default ``cuda``).  ``LATENTGP_TEST_DEVICE=cpu``
runs the same tests with both sides on the CPU, which checks the tests' own logic on a
machine without a GPU (every comparison is then exact).

What is compared with the CPU, same data, same seed, float64:

- families whose fit makes no random draw on the device (all but ``DRAWN``): the fitted
  predictions agree to 1e-6 relative (the two devices' kernels round differently, and a
  fit of tens of steps carries the rounding along);
- families that draw Monte Carlo samples on the model's device (``DRAWN``): the device's
  generator gives other draws than the CPU's, so the two fits differ by Monte Carlo
  noise (on an H200, 40 steps: predictive means 0.11-0.28 of the targets' spread apart);
  both fits' test errors are under 0.6 of the targets' mean's (a device path that does
  not train fails this; the CPU's fits with seeds 0-5 reach 0.06-0.38 of it);
- a model file written on the device loads on the CPU (and back) with the same
  predictions to 1e-10; every parameter and buffer lives on the device, in float64.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from model_families import FAMILIES, Family, family_data

import latentgp as lg

TARGET = os.environ.get("LATENTGP_TEST_DEVICE", "cuda")
HAVE = TARGET == "cpu" or (TARGET.startswith("cuda") and torch.cuda.is_available())
pytestmark = pytest.mark.skipif(
    not HAVE, reason=f"needs a {TARGET} device (set LATENTGP_TEST_DEVICE=cpu to check the "
    "tests' logic without one)")

#: families whose fit draws Monte Carlo samples on the model's device
DRAWN = {"SAVIGP", "SMGP", "SLGP", "DeepGP"}
IDS = [f.name for f in FAMILIES]


def _fit_both(family: Family):
    X, y = family_data(family.task, n=60)
    Xs, _ = family_data(family.task, n=30, seed=5)
    cpu = family.fitted(X, y, device="cpu")
    dev = family.fitted(X, y, device=TARGET)
    return X, y, Xs, cpu, dev


def _module(model):
    return model if isinstance(model, torch.nn.Module) else model.model_


def _on_device(model) -> list[str]:
    """Names of the parameters and floating buffers not on TARGET in float64."""
    want = torch.device(TARGET)
    bad = []
    for name, t in [*_module(model).named_parameters(), *_module(model).named_buffers()]:
        on = t.device.type == want.type
        if not on or (t.is_floating_point() and t.dtype != torch.float64):
            bad.append(f"{name} ({t.device}, {t.dtype})")
    return bad


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_family_fits_on_the_device_as_on_the_cpu(family):
    X, y, Xs, cpu, dev = _fit_both(family)
    assert _on_device(dev) == []
    m_cpu, v_cpu = family.predict(cpu, Xs)
    m_dev, v_dev = family.predict(dev, Xs)
    assert np.all(np.isfinite(m_dev)) and np.all(np.isfinite(v_dev))
    assert np.all(v_dev > 0)
    if family.name not in DRAWN:
        np.testing.assert_allclose(m_dev, m_cpu, rtol=1e-6, atol=1e-6 * np.std(y))
        np.testing.assert_allclose(v_dev, v_cpu, rtol=1e-6)
        return
    # other draws, another fit: both fits' test errors well below the targets' mean's
    # (on the CPU, seeds 0-5 give 0.10-0.38 of it for SMGP, 0.09-0.34 for SLGP)
    _, ys = family_data(family.task, n=30, seed=5)
    mse = {k: float(np.mean((m - ys) ** 2)) for k, m in (("cpu", m_cpu), ("dev", m_dev))}
    assert max(mse.values()) < 0.6 * np.mean((np.mean(y) - ys) ** 2), mse


@pytest.mark.parametrize("family", [f for f in FAMILIES if not f.sklearn],
                         ids=[f.name for f in FAMILIES if not f.sklearn])
def test_a_file_written_on_the_device_loads_on_the_cpu(family, tmp_path):
    X, y = family_data(family.task, n=60)
    Xs, _ = family_data(family.task, n=30, seed=5)
    dev = family.fitted(X, y, device=TARGET)
    path = tmp_path / "model.pt"
    dev.save(path)
    back = lg.load(path, device="cpu")
    assert all(t.device.type == "cpu" for t in back.state_dict().values())
    again = lg.load(path, device=TARGET)
    for other in (back, again):
        for a, b in zip(family.predict(dev, Xs), family.predict(other, Xs), strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)


def _gp_sets(B: int, N: int):
    g = torch.Generator().manual_seed(0)
    X = 4 * torch.rand(B, N, 2, generator=g, dtype=torch.float64)
    ls = torch.exp(torch.empty(B, 1).uniform_(-1, 1, generator=g)).to(torch.float64)
    y = torch.sin(X[..., 0] / ls) + 0.3 * X[..., 1] + 0.1 * torch.randn(
        B, N, generator=g, dtype=torch.float64)
    return X, y


def test_batched_exact_gps_on_the_device_reach_the_cpus_optima():
    X, y = _gp_sets(40, 50)
    cpu = lg.BatchedExactGP().fit(X, y)
    dev = lg.BatchedExactGP(device=TARGET).fit(X.to(TARGET), y.to(TARGET))
    assert _on_device(dev) == []
    np.testing.assert_allclose(dev.log_marginal_likelihood(), cpu.log_marginal_likelihood(),
                               rtol=0, atol=1e-6)


def test_exact_gp_conditioning_and_paths_on_the_device():
    X, y = family_data("regression", n=80)
    Xn, yn = family_data("regression", n=10, seed=3)
    Xs, _ = family_data("regression", n=25, seed=5)
    dev = lg.ExactGP(device=TARGET).fit(X, y, max_steps=30)
    cond = dev.condition_on(Xn, yn)
    assert _on_device(cond) == []
    m_cond, v_cond = cond.predict_f(Xs)
    # the conditioned model equals the CPU model conditioned on the same rows
    cpu = lg.ExactGP(device="cpu").fit(X, y, max_steps=30)
    m_ref, v_ref = cpu.condition_on(Xn, yn).predict_f(Xs)
    np.testing.assert_allclose(np.asarray(m_cond), np.asarray(m_ref), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(np.asarray(v_cond), np.asarray(v_ref), rtol=1e-6, atol=1e-10)
    # pathwise samples live on the device; their mean over many paths is the posterior mean
    paths = dev.sample_paths(2000, seed=0)
    Xt = torch.as_tensor(Xs, dtype=torch.float64, device=TARGET).requires_grad_()
    F = paths(Xt)
    assert F.device.type == torch.device(TARGET).type
    F.sum().backward()
    assert Xt.grad is not None and torch.isfinite(Xt.grad).all()
    m, v = dev.predict_f(Xs)
    se = np.sqrt(np.asarray(v) / 2000)
    assert np.all(np.abs(F.detach().mean(0).cpu().numpy() - np.asarray(m)) < 5 * se + 1e-3)


def test_iterative_exact_gp_on_the_device_with_float32_products():
    """The iterative path on the device: float32 training products (the default at
    ``tol`` 1e-2) give the float64 products' objective to their rounding, and the
    predictive means (float64 solves to ``predict_tol``) are the CPU's."""
    X, y = family_data("regression", n=600)
    Xs, _ = family_data("regression", n=25, seed=5)
    opts = {"rank": 20, "pretrain_rows": 0}
    values = {}
    for pd in ("float32", "float64"):
        m = lg.ExactGP(solver="cg", iterative={**opts, "product_dtype": pd}, device=TARGET)
        m.initialize(X, y, seed=0)
        values[pd] = m.log_marginal_likelihood()
        assert m.last_cg["product_dtype"] == pd and _on_device(m) == []
    assert abs(values["float32"] - values["float64"]) < 1e-3 * abs(values["float64"]), values
    dev = lg.ExactGP(solver="cg", iterative=opts, device=TARGET).initialize(X, y, seed=0)
    cpu = lg.ExactGP(solver="cg", iterative=opts).initialize(X, y, seed=0)
    (m_dev, v_dev), (m_cpu, v_cpu) = dev.predict_f(Xs), cpu.predict_f(Xs)
    np.testing.assert_allclose(np.asarray(m_dev), np.asarray(m_cpu), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(v_dev), np.asarray(v_cpu), rtol=1e-3, atol=1e-4)


def test_cholesky_path_gradient_by_blocks_on_the_device():
    """The Cholesky path's gradient without the kernel's graph (``d log p / dK`` from the
    factor, then the kernel's row blocks) on the device equals autograd through ``K(X)``
    on the same device.  On a GPU, 6,000 rows make two of its 2^25-entry blocks."""
    from latentgp.linalg import add_diagonal, cholesky
    from latentgp.models.exact import gaussian_log_marginal

    n = 400 if TARGET == "cpu" else 6000
    X, y = family_data("regression", n=n)
    m = lg.ExactGP(solver="cholesky", device=TARGET).fit(X, y, max_steps=2, progress=False)
    params = [p for p in m.parameters() if p.requires_grad]
    Xt = m.X_train
    value = m.objective(Xt, m.y_train, Xt.shape[0])
    assert type(value.grad_fn).__name__ == "_CholeskyLogMarginalBackward"
    got = torch.autograd.grad(value, params, allow_unused=True)
    R = m.y_train.reshape(n, -1)
    mean = m.prior_mean_at(Xt)
    R = R if mean is None else R - mean
    K = add_diagonal(m.kernel(Xt), m.likelihood.variance)
    L, _ = cholesky(K.detach(), "K", jitter=0.0)
    ref = gaussian_log_marginal(K, L, R)
    assert float(value.detach()) == pytest.approx(float(ref.detach()), rel=1e-10)
    want = torch.autograd.grad(ref, params, allow_unused=True)
    for a, b in zip(got, want, strict=True):
        if b is not None:
            assert a.device.type == torch.device(TARGET).type
            torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-7 * float(b.abs().max()))


def test_natural_gradient_and_float32_fits_on_the_device():
    X, y = family_data("binary", n=200)
    Xs, _ = family_data("binary", n=30, seed=5)
    kw = {"likelihood": "bernoulli", "num_inducing": 16}
    fits = {d: lg.SVGP(device=d, **kw).fit(X, y, optimizer="natural", max_steps=40, seed=0)
            for d in ("cpu", TARGET)}
    a, b = (np.asarray(fits[d].predict_y(Xs)[0]) for d in ("cpu", TARGET))
    np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-8)
    f32 = lg.SVGP(device=TARGET, dtype=torch.float32, num_inducing=16).fit(
        *family_data("regression", n=200), max_steps=100, seed=0)
    assert f32.kernel.lengthscale.dtype == torch.float32
    assert np.all(np.isfinite(np.asarray(f32.predict_y(Xs)[0])))


def test_botorch_acquisition_on_the_device():
    pytest.importorskip("botorch", reason="BoTorch is not installed")
    from botorch.acquisition.logei import qLogNoisyExpectedImprovement
    from botorch.optim import optimize_acqf

    from latentgp.botorch import LatentGPModel

    X, y = family_data("regression", n=30)
    model = LatentGPModel(lg.ExactGP(device=TARGET).fit(X, -y, max_steps=30))
    Xb = torch.as_tensor(X, dtype=torch.float64, device=TARGET)
    acq = qLogNoisyExpectedImprovement(model, X_baseline=Xb)
    bounds = torch.tensor([[-3.0, -3.0], [3.0, 3.0]], dtype=torch.float64, device=TARGET)
    cand, value = optimize_acqf(acq, bounds=bounds, q=2, num_restarts=2, raw_samples=32)
    assert cand.shape == (2, 2) and cand.device.type == torch.device(TARGET).type
    assert torch.isfinite(value)


def test_svgp_default_on_large_data_on_the_device():
    """The automatic fit of a Gaussian SVGP on more than 1,024 rows (natural steps, the
    probed stopping rule, whose probe rows live on the CPU and are moved to the data's
    device) stops where the CPU's does, with the CPU's predictions."""
    X, y = family_data("regression", n=1300)
    Xs, _ = family_data("regression", n=30, seed=5)
    fits = {d: lg.SVGP(num_inducing=16, device=d).fit(X, y, seed=0, progress=False)
            for d in ("cpu", TARGET)}
    hc, hd = fits["cpu"].history_, fits[TARGET].history_
    assert (hd.optimizer, hd.reason) == ("natural", "converged")
    assert hd.convergence["probes"] == 8.0 and hd.steps == hc.steps
    a, b = (np.asarray(fits[d].predict_y(Xs)[0]) for d in ("cpu", TARGET))
    np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-8)
