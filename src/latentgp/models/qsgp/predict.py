"""QSGP's predictions (notes B.6): ``phi(x)^T mu`` and ``phi(x)^T Sigma phi(x)``.

For ``basis="inducing"`` (and ``"rvm"``) with a Gaussian likelihood and ``augment`` on,
the augmentation of Appendix G (Prop. 4): one extra basis function at ``x*`` with its
closed-form (Prop. 1) diagonal, adding ``s2 k**^2 / (k*^T k* + s2 k**)`` to the latent
variance.
"""

from __future__ import annotations

import torch

from ...likelihoods import Gaussian
from ..base import GPModel
from .factor import column_values


def predictive_moments(model: GPModel, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Latent mean and variance ``(B, 1)`` each at the inputs ``X`` ``(B, D)``, chunked
    over the basis (O(B m) time, O(B chunk) memory)."""
    B = X.shape[0]
    m, k = model.m, model.k
    mean = X.new_zeros(B)
    var = X.new_zeros(B)
    P = X.new_zeros(B, k)
    knorm = X.new_zeros(B)
    cols = torch.arange(k, device=X.device)
    chunk = max(1, min(m, 2**22 // max(B, 1)))
    for c0 in range(0, m, chunk):
        idx = torch.arange(c0, min(c0 + chunk, m), device=X.device)
        phi = model.features(X, idx)
        mean += phi @ model.mu[idx]
        off = idx >= k
        var += ((phi[:, off] * torch.exp(model.c_raw[idx][off])) ** 2).sum(1)
        if k:
            Cb = column_values(idx, cols, model.c_dense[idx], model.c_raw[idx])
            P += phi @ Cb
        if model.augment:
            knorm += (phi**2).sum(1)
    var = var + (P**2).sum(1)
    if model.augment and model.basis.kind != "rff" and isinstance(model.likelihood, Gaussian):
        s2 = model.likelihood.variance
        kss = model.kernel.diag(X)
        var = var + s2 * kss**2 / (knorm + s2 * kss)
    return mean[:, None], var[:, None]
