"""Monte Carlo integrators for ``E_{q(f_n)}[log p(y_n | f_n)]`` with Gaussian q(f_n).

Two estimators of the expectation and of its gradient with respect to the marginals
``(mean, var)`` of q (seed 000, A.5), for any leading shape:

- :func:`reparameterised`: ``f = mean + sqrt(var) eps``; autograd differentiates the
  likelihood through ``f`` (it must be differentiable torch code).
- :func:`score_function`: the likelihood is only *evaluated* (numpy code, a simulator, a
  non-differentiable function); the gradient is the score-function estimator
  ``E[h(f) (log p(y | f) - a)]`` with ``h = d log q / d(mean, var)`` and the control
  variate ``a`` of :func:`control_variate_mean` (A.5.7).

Both take standard-normal draws ``eps`` ``(S,) + mean.shape`` from the caller, so a
model can keep them fixed within an optimiser step (common random numbers).  Any model
reaches them through ``Likelihood.expected_log_prob``: a likelihood whose
``differentiable`` attribute is False gets the score-function integrator.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

LogProb = Callable[[torch.Tensor], torch.Tensor]


def reparameterised(
    log_prob: LogProb, mean: torch.Tensor, var: torch.Tensor, eps: torch.Tensor
) -> torch.Tensor:
    """``mean_s log p(y | mean + sqrt(var) eps_s)``.

    ``log_prob(f)`` maps draws ``(S,) + mean.shape`` to log densities ``(S, ...)`` (the
    latent axis, if any, summed or consumed); returns the mean over the S draws.
    """
    return log_prob(mean + var.sqrt() * eps).mean(0)


def control_variate_mean(h: torch.Tensor, L: torch.Tensor, enabled: bool = True) -> torch.Tensor:
    """``mean_s h_s (L_s - a_s)`` over the draws (axis 0).

    ``a = Cov(h L, h) / Var(h) = E[h^2 L] / E[h^2]`` (the score has mean zero) is
    estimated leaving draw s out, so that ``a_s`` is independent of draw s and the
    corrected estimator stays unbiased.  ``enabled=False`` (or fewer than 3 draws): the
    plain ``mean_s h_s L_s``.
    """
    g = h * L
    S = h.shape[0]
    if not enabled or S < 3:
        return g.mean(0)
    h2 = h.square()
    num = (h2 * L).sum(0) - h2 * L
    den = (h2.sum(0) - h2).clamp_min(1e-300)
    return (h * (L - num / den)).mean(0)


def score_function(
    log_prob: LogProb,
    mean: torch.Tensor,
    var: torch.Tensor,
    eps: torch.Tensor,
    control_variates: bool = True,
) -> torch.Tensor:
    """A surrogate whose value is the Monte Carlo estimate ``mean_s log p(y | f_s)`` and
    whose gradient is the score-function estimator.

    ``mean``, ``var``: ``(..., B, Q)`` marginals (Q latents per point); ``eps``
    ``(S, ..., B, Q)``; ``log_prob(f)`` maps draws ``(S, ..., B, Q)`` to ``(S, ..., B)``.
    Returns ``(..., B)``.  Gradients: with respect to ``mean`` and ``var`` by
    ``E[h (log p - a)]`` (``h_b = eps / sqrt(var)``, ``h_v = (eps^2 - 1) / (2 var)``);
    with respect to the likelihood's own parameters, if ``log_prob`` carries a graph, by
    ``E[grad log p(y | f_s)]`` at the draws.
    """
    f = (mean + var.sqrt() * eps).detach()
    lp = log_prob(f)  # (S, ..., B)
    L = lp.detach()[..., None]  # (S, ..., B, 1)
    with torch.no_grad():
        v = var.detach()
        G_b = control_variate_mean(eps / v.sqrt(), L, control_variates)
        G_v = control_variate_mean((eps.square() - 1.0) / (2.0 * v), L, control_variates)
    local = (G_b * mean + G_v * var).sum(-1)  # (..., B): its gradient is the estimator
    out = L[..., 0].mean(0) + (local - local.detach())
    if lp.requires_grad:  # the likelihood's parameters (A.5.5)
        lp_mean = lp.mean(0)
        out = out + (lp_mean - lp_mean.detach())
    return out


def quadrature_score(
    log_prob: LogProb,
    mean: torch.Tensor,
    var: torch.Tensor,
    nodes: torch.Tensor,
    weights: torch.Tensor,
) -> torch.Tensor:
    """The score-function identity under Gauss-Hermite quadrature (one latent per point).

    ``d/dm E[g] = E[g (f - m) / v]`` and ``d/dv E[g] = E[g ((f - m)^2 - v) / (2 v^2)]``
    hold for any integrable ``g``, so a likelihood that is only evaluated gets exact-to-
    quadrature values *and* gradients, without Monte Carlo noise.  ``mean``, ``var``
    ``(...)``; ``nodes``, ``weights`` ``(n,)`` for N(0, 1); ``log_prob(f)`` maps
    ``(n, ...)`` to ``(n, ...)``.  Returns ``(...)``.
    """
    shape = (-1,) + (1,) * mean.ndim
    x, w = nodes.reshape(shape), weights.reshape(shape)
    sd = var.detach().sqrt()
    lp = log_prob(mean.detach() + sd * x)
    g = lp.detach()
    with torch.no_grad():
        G_b = (w * g * x).sum(0) / sd
        G_v = (w * g * (x.square() - 1.0)).sum(0) / (2.0 * var.detach())
    local = G_b * mean + G_v * var
    out = (w * g).sum(0) + (local - local.detach())
    if lp.requires_grad:
        phi = (w * lp).sum(0)
        out = out + (phi - phi.detach())
    return out
