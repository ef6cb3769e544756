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
