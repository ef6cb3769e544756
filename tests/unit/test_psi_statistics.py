"""The RBF psi statistics (kernel expectations under Gaussian inputs) against tensor-product
Gauss-Hermite quadrature, Monte Carlo, and the point-mass limit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from latentgp.kernels import RBF, Matern32
from latentgp.kernels.expectations import rbf_psi_statistics


def _kernel() -> RBF:
    k = RBF(lengthscale=[0.7, 1.6], variance=1.3)
    k.build(2, (), torch.float64)
    return k


def _q(n: int = 3):
    g = torch.Generator().manual_seed(1)
    mean = torch.randn(n, 2, generator=g, dtype=torch.float64)
    var = 0.05 + torch.rand(n, 2, generator=g, dtype=torch.float64)
    Z = torch.randn(4, 2, generator=g, dtype=torch.float64) * 1.2
    return mean, var, Z


def test_psi_statistics_equal_gauss_hermite_quadrature():
    k = _kernel()
    mean, var, Z = _q()
    psi0, psi1, psi2 = rbf_psi_statistics(k, Z, mean, var)
    x, w = np.polynomial.hermite_e.hermegauss(60)
    w = w / np.sqrt(2 * np.pi)
    nodes = torch.as_tensor(np.stack(np.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2))
    weights = torch.as_tensor(np.outer(w, w).reshape(-1))
    e1, e2 = [], torch.zeros(4, 4, dtype=torch.float64)
    with torch.no_grad():
        for n in range(mean.shape[0]):
            pts = mean[n] + var[n].sqrt() * nodes
            Kxz = k(pts, Z)  # (G, M)
            e1.append(weights @ Kxz)
            e2 += Kxz.mT @ (weights[:, None] * Kxz)
    torch.testing.assert_close(psi1.detach(), torch.stack(e1), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(psi2.detach(), e2, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(psi0.detach(), torch.full((3,), 1.3, dtype=torch.float64))


def test_psi_statistics_agree_with_monte_carlo():
    k = _kernel()
    mean, var, Z = _q(1)
    _, psi1, psi2 = rbf_psi_statistics(k, Z, mean, var)
    g = torch.Generator().manual_seed(7)
    S = 200_000
    x = mean + var.sqrt() * torch.randn(S, 2, generator=g, dtype=torch.float64)
    with torch.no_grad():
        Kxz = k(x, Z)
        prod = Kxz[:, :, None] * Kxz[:, None, :]
    for est, exact in ((Kxz, psi1[0]), (prod, psi2)):
        se = est.std(0) / S**0.5
        z = (est.mean(0) - exact.detach()).abs() / se.clamp_min(1e-12)
        assert float(z.max()) < 5.0


def test_point_mass_gives_the_kernel_blocks_and_chunks_agree():
    k = _kernel()
    mean, _, Z = _q(7)
    zero = torch.zeros_like(mean)
    psi0, psi1, psi2 = rbf_psi_statistics(k, Z, mean, zero)
    Kxz = k(mean, Z)
    torch.testing.assert_close(psi1, Kxz, rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(psi2, Kxz.mT @ Kxz, rtol=1e-12, atol=1e-14)
    _, _, chunked = rbf_psi_statistics(k, Z, mean, zero, chunk_rows=2)
    torch.testing.assert_close(chunked, psi2, rtol=1e-13, atol=1e-15)


def test_only_the_rbf_kernel_has_psi_statistics():
    k = Matern32()
    k.build(2, (), torch.float64)
    mean, var, Z = _q()
    with pytest.raises(ValueError, match="RBF kernel only"):
        rbf_psi_statistics(k, Z, mean, var)
    with pytest.raises(ValueError, match="mean and var"):
        rbf_psi_statistics(_kernel(), Z, mean, var[:, :1])


def test_checkpointed_chunks_give_the_same_gradients():
    k = _kernel()
    mean, var, Z = _q(9)
    grads = []
    for rows in (None, 2):
        m = mean.clone().requires_grad_(True)
        v = var.clone().requires_grad_(True)
        _, _, psi2 = rbf_psi_statistics(k, Z, m, v, chunk_rows=rows)
        grads.append(torch.autograd.grad((psi2 * psi2).sum(), (m, v)))
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
