"""The fused Gaussian-likelihood ELBO of ``benchmarks/step_profile.py`` (issue 24, item 4):
its hand-written backward against finite differences (gradcheck), and the whole fused
objective against the library's ``SVGP.objective`` and autograd's gradients."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import numpy as np
import pytest
import torch

import latentgp as lg

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # the script imports its siblings
    try:
        spec = importlib.util.spec_from_file_location(
            "step_profile_bench", ROOT / "benchmarks" / "step_profile.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return module


def test_fused_elbo_backward_matches_finite_differences(bench):
    g = torch.Generator().manual_seed(0)
    M, B = 5, 7
    Kzx = torch.randn(1, M, B, generator=g, dtype=torch.float64)
    A = torch.randn(1, M, M, generator=g, dtype=torch.float64)
    R = 0.1 * (A + A.mT)  # symmetric, as the quadratic-form factor is
    alpha = torch.randn(1, M, generator=g, dtype=torch.float64)
    kxx = 1.0 + torch.rand(1, B, generator=g, dtype=torch.float64)
    s2 = torch.tensor(0.3, dtype=torch.float64)
    y = torch.randn(B, generator=g, dtype=torch.float64)
    args = [t.clone().requires_grad_(True) for t in (Kzx, kxx, alpha, R, s2)]

    def f(Kzx, kxx, alpha, R, s2):
        return bench.FusedGaussianELBO.apply(Kzx, kxx, alpha, R, s2, y, 3.5)

    assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-7, rtol=1e-6)
    # and the value against the per-point Gaussian expectation written out
    mu = (alpha @ Kzx)[0]
    var = kxx[0] - ((R[0] @ Kzx[0]) * Kzx[0]).sum(0)
    ell = -0.5 * torch.log(2 * torch.pi * s2) - 0.5 * ((y - mu) ** 2 + var) / s2
    assert torch.allclose(f(*args), 3.5 * ell.sum(), rtol=1e-12)


def test_fused_objective_equals_the_library_objective(bench):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 3))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=200)
    model = lg.SVGP(num_inducing=12, normalize_y=False)
    model.fit(X, y, max_steps=5, progress=False, seed=0)  # q(u) away from its start
    Xb, yb = torch.as_tensor(X[:40]), torch.as_tensor(y[:40])
    params = [p for p in model.parameters() if p.requires_grad]
    with lg.config(marginals="quad"):  # the library's quadratic-form path, as fused
        ref = model.objective(Xb, yb, 200)
        g_ref = torch.autograd.grad(ref, params)
    fused = bench.fused_objective(model, Xb, yb, 200)
    g_fused = torch.autograd.grad(fused, params)
    assert torch.allclose(fused, ref, rtol=1e-10)
    for a, b in zip(g_fused, g_ref, strict=True):
        assert torch.allclose(a, b, rtol=1e-8, atol=1e-10 * b.abs().max())
