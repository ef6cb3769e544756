"""Per-point Gaussian mixtures ``p(y) = sum_k w_k N(y | m_k, v_k)``: moments, log
density and CDF.

Every mixture predictive of the library is one of these (SAVIGP's q(u) components,
Gauss-Hermite nodes in the heteroscedastic likelihoods, SMGP's experts, SLGP's Monte
Carlo components), so likelihoods and models share these functions.
"""

from __future__ import annotations

import math

import torch

from .constants import LOG_2PI


def mixture_moments(
    weights: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, dim: int = -1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and variance of Gaussian mixtures whose components run along axis ``dim`` of
    ``mean`` and ``var``; ``weights`` broadcasts against them (law of total variance,
    the variance clamped at 0)."""
    m = (weights * mean).sum(dim)
    v = (weights * (var + mean.square())).sum(dim) - m.square()
    return m, v.clamp_min(0.0)


def mixture_joint_moments(
    weights: torch.Tensor, mean: torch.Tensor, cov: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean ``(..., N)`` and covariance ``(..., N, N)`` of a mixture of joint Gaussians
    whose K components run along the first axis: ``mean`` ``(K, ..., N)``, ``cov``
    ``(K, ..., N, N)``, ``weights`` ``(K,)``:
    ``m = sum_k w_k m_k``, ``C = sum_k w_k (C_k + m_k m_k^T) - m m^T`` (the joint form of
    :func:`mixture_moments`; its diagonal is their variance)."""
    w = weights.reshape((-1,) + (1,) * (mean.ndim - 1))
    m = (w * mean).sum(0)
    second = (w[..., None] * (cov + mean[..., :, None] * mean[..., None, :])).sum(0)
    return m, second - m[..., :, None] * m[..., None, :]


def mixture_log_density(
    y: torch.Tensor, log_w: torch.Tensor, mean: torch.Tensor, var: torch.Tensor
) -> torch.Tensor:
    """``log sum_k w_k N(y | m_k, v_k)``; ``y`` ``(..., B)``, mixture ``(B, K)`` -> ``(..., B)``."""
    comp = -0.5 * (LOG_2PI + var.log() + (y[..., None] - mean) ** 2 / var)
    return torch.logsumexp(log_w + comp, dim=-1)


def mixture_cdf(
    y: torch.Tensor, log_w: torch.Tensor, mean: torch.Tensor, var: torch.Tensor
) -> torch.Tensor:
    """``P(Y <= y)`` for ``y`` ``(..., B)`` under the mixture ``(B, K)``."""
    z = (y[..., None] - mean) / var.sqrt()
    return (log_w.exp() * 0.5 * torch.erfc(-z / math.sqrt(2.0))).sum(-1)
