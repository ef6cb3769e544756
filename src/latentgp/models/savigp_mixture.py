"""SAVIGP's mixture posterior and predictive as plain functions: q(u)'s components in
u-space (as stored, whitened, or in Theorem 2's Lambda form), the two KL terms, the
conditional's view of q(u), the free-form (dense) marginals, the Monte Carlo expected
log-likelihood (by the integrator of the resolved estimator), and the per-chunk
predictive mixture of y.

:class:`~latentgp.models.savigp.SAVIGP` calls them with its state (``q``, the prior
factor ``Lzz``, its posterior options); the formulas are in its module docstring and in
:mod:`latentgp.variational.mixture`.  Shapes: ``K`` components, ``Q`` latents, ``M``
inducing inputs, ``B`` rows, ``S`` draws.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..likelihoods import CallableLikelihood, integrators
from ..linalg import cholesky, solve_lower
from ..variational import InducingQ
from ..variational.mixture import (
    MixtureVariational,
    cross_entropy,
    entropy_bound,
    whitened_cross_entropy,
)
from .predict import mixture_moments
from .savigp_options import Estimator, resolved_method

__all__ = [
    "conditional_args",
    "dense_marginals",
    "eval_log_lik",
    "expected_log_lik",
    "kl_terms",
    "mixture_components",
    "mixture_log_density",
    "mixture_predictive_moments",
    "whitened_full",
    "whitened_kl_terms",
]

Parts = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def whitened_full(q: MixtureVariational, *, whiten: bool, parameterization: str) -> bool:
    """Whether q(u) is stored as whitened full Cholesky factors (``v``, ``C``)."""
    return whiten and not q.is_diag and parameterization == "cholesky"


def mixture_components(
    q: MixtureVariational,
    Lzz: torch.Tensor,
    *,
    whiten: bool,
    lambda_terms: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> Parts:
    """``(weights, means, sqrt, logdet)`` of q(u) in u-space (differentiable) from the prior
    factor ``Lzz`` ``(Q, M, M)``: weights ``(K,)``, means ``(K, Q, M)``, sqrt ``(K, Q, M,
    M)`` or ``(K, Q, M)``, logdet ``(K, Q)``.  ``whiten``: q's means (and full factors) are
    stored as ``Lzz^-1`` times their u-space values.  ``lambda_terms = (Kzx, lam)``
    (``(Q, M, N)``, ``(Q, N)``): Theorem 2's ``S = Lzz (I + G G^T)^-1 Lzz^T`` with ``G =
    Lzz^-1 Kzx Lambda^1/2``, one component."""
    means = q.means
    if whiten:  # m = Lzz v: the same ELBO, better conditioned for the optimiser
        means = (Lzz @ q.means.unsqueeze(-1)).squeeze(-1)
    if lambda_terms is not None:
        # Theorem 2: S = Lzz (I + G G^T)^-1 Lzz^T, G = Lzz^-1 Kzx Lambda^1/2 (Q, M, N)
        Kzx, lam = lambda_terms
        G = solve_lower(Lzz, Kzx) * lam.sqrt()[:, None, :]
        eye = torch.eye(Lzz.shape[-1], dtype=Lzz.dtype, device=Lzz.device)
        LG, _ = cholesky(eye + G @ G.mT, "I + G G^T")
        R = solve_lower(LG, Lzz.mT).mT  # Lzz LG^-T, (Q, M, M)
        logdet = 2.0 * (
            Lzz.diagonal(dim1=-2, dim2=-1).log() - LG.diagonal(dim1=-2, dim2=-1).log()
        ).sum(-1)
        return q.weights, means, R[None], logdet[None]
    if whiten and not q.is_diag:
        logdet_L = 2.0 * Lzz.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        return q.weights, means, Lzz @ q.sqrt(), q.logdet() + logdet_L
    return q.weights, means, q.sqrt(), q.logdet()


def kl_terms(
    q: MixtureVariational, Lzz: torch.Tensor, parts: Parts
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(L_ent bound, L_cross)`` from q(u)'s u-space ``parts``
    (:func:`mixture_components`) and the prior factor ``Lzz``."""
    w, m, R, logdet = parts
    return entropy_bound(w, m, R, q.is_diag, logdet), cross_entropy(w, m, R, q.is_diag, Lzz)


def whitened_kl_terms(
    q: MixtureVariational, Lzz: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`kl_terms` for whitened full factors (:func:`whitened_full`), from the
    whitened variables ``v = Lzz^-1 m``, ``C = Lzz^-1 R`` without forming ``Lzz C`` or
    solving against it.

    With ``u = Lzz v`` every component density picks up ``1 / |Lzz|``, so both the
    entropy bound and ``E_q[log p(u)]`` are their whitened values (prior ``N(0, I)``)
    shifted by ``+- 1/2 log|Kzz|`` per latent:
    ``L_cross`` is :func:`~latentgp.variational.mixture.whitened_cross_entropy`.
    Saves two ``M^3`` products and one ``M^3`` solve per latent and component in the
    forward pass (and their backward), which dominate the dense case (M = N).
    """
    w, v, C = q.weights, q.means, q.sqrt()  # (K,), (K, Q, M), (K, Q, M, M)
    logdet_K = 2.0 * Lzz.diagonal(dim1=-2, dim2=-1).log().sum(-1)  # (Q,)
    ent = entropy_bound(w, v, C, False, q.logdet()) + 0.5 * logdet_K.sum()
    return ent, whitened_cross_entropy(w, v, C, logdet_K)


def conditional_args(q: MixtureVariational, parts: Parts, *, whitened: bool) -> InducingQ:
    """q(u)'s components as the conditional takes them (:class:`InducingQ`).  Whitened
    full factors (``whitened``, :func:`whitened_full`) go in as they are stored (``v``,
    ``C``), so no ``Lzz C`` product or solve against it is needed; otherwise the u-space
    values of ``parts``."""
    if whitened:
        return InducingQ(q.means, q.sqrt(), True, False)
    _, m, R, _ = parts
    return InducingQ(m, R, False, q.is_diag)


def dense_marginals(
    parts: Parts, *, is_diag: bool, prior_mean: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Free-form case (Z = X): ``b = m + prior_mean``, ``Sigma = diag S``, ``(K, N, Q)``
    (without the mean function, which the model adds)."""
    w, m, R, _ = parts
    var = R.square() if is_diag else R.square().sum(-1)
    return m.mT + prior_mean, var.mT


def eval_log_lik(likelihood: Any, y: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """``log p(y_n | f)`` for draws ``f`` ``(S, K, B, Q)``, returns ``(S, K, B)``
    (independent outputs summed)."""
    fin = f[..., 0] if (likelihood.latent_dim == 1 and f.shape[-1] == 1) else f
    out = likelihood.log_prob(y, fin)
    if out.ndim == fin.ndim and out.shape[-1] == f.shape[-1] and fin.ndim == 4:
        out = out.sum(-1)  # independent outputs
    return out


def expected_log_lik(
    likelihood: Any,
    estimator: Estimator,
    y: torch.Tensor,
    weights: torch.Tensor,
    mean: torch.Tensor,
    var: torch.Tensor,
    eps: torch.Tensor,
) -> torch.Tensor:
    """Monte Carlo estimate of ``sum_n sum_k pi_k E_{q_k(n)}[log p(y_n | f_n)]`` (scalar)
    from weights ``(K,)``, per-component marginals ``(K, B, Q)`` and standard normal draws
    ``eps`` ``(S, K, B, Q)``, by the integrator of :func:`resolved_method`
    (:mod:`latentgp.likelihoods.integrators`); a plain function not yet inspected is
    inspected on these draws first."""
    if resolved_method(estimator, likelihood) is None:  # a plain function, first evaluation
        f = (mean + var.sqrt() * eps).detach()
        fin = f[..., 0] if (likelihood.latent_dim == 1 and f.shape[-1] == 1) else f
        likelihood.inspect(y, fin)

    def log_p(f):
        return eval_log_lik(likelihood, y, f)

    if resolved_method(estimator, likelihood) == "reparam":
        ell = integrators.reparameterised(log_p, mean, var, eps)  # (K, B)
    else:
        ell = integrators.score_function(log_p, mean, var, eps, estimator.control_variates)
    return (weights * ell.sum(-1)).sum()


def _lik_args(likelihood: Any, m: torch.Tensor, v: torch.Tensor):
    if likelihood.latent_dim == 1 and m.shape[-1] == 1:
        return m[..., 0], v[..., 0]
    return m, v


def mixture_predictive_moments(
    likelihood: Any, w: torch.Tensor, m: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Predictive mean and variance of y (scaled units) of the mixture with weights ``w``
    ``(K,)`` and component latent marginals ``m``, ``v`` ``(K, B, Q)``."""
    my, vy = likelihood.predictive_moments(*_lik_args(likelihood, m, v))
    return mixture_moments(w.reshape((-1,) + (1,) * (my.ndim - 1)), my, vy, dim=0)


def mixture_log_density(
    likelihood: Any,
    y: torch.Tensor,
    logw: torch.Tensor,
    m: torch.Tensor,
    v: torch.Tensor,
    *,
    pred_samples: int,
) -> torch.Tensor:
    """``log sum_k pi_k p_k(y_n | x_n)`` ``(B,)`` (scaled units) from log weights ``logw``
    ``(K,)`` and component marginals ``(K, B, Q)``: the likelihood's integrator, or for a
    black-box likelihood Monte Carlo with ``pred_samples`` draws (from torch's global
    generator)."""
    if isinstance(likelihood, CallableLikelihood):
        eps = torch.randn((pred_samples,) + tuple(m.shape), dtype=m.dtype, device=m.device)
        f = m + v.sqrt() * eps  # (S, K, B, Q)
        lp = eval_log_lik(likelihood, y, f)
        lp = torch.logsumexp(lp, 0) - math.log(f.shape[0])  # (K, B)
    else:
        lp = likelihood.predictive_log_density(y, *_lik_args(likelihood, m, v))
        if lp.ndim > 2:
            lp = lp.sum(-1)
    return torch.logsumexp(logw[:, None] + lp, 0)
