"""The one inducing-point conditional: q(u) -> marginals (or joint) of q(f) at a batch.

Every inducing-point model (SVGP and its compositions SVHGP/SHGP/SMGP, SAVIGP's mixture
components, SLGP's output GPs, the predictions of SEP and GFITC) reaches q(f) through the
functions of this module, so the hand-written autograd paths of
:mod:`latentgp.variational.fastpaths` serve all of them.

For q over whitened values ``v = Lzz^{-1} u ~ N(m_w, S_w S_w^T)`` and
``A = Lzz^{-1} Kzx`` ``(M, B)``:

    mean_n = A_n^T m_w,        var_n = kxx_n - |A_n|^2 + |S_w^T A_n|^2

(whitened q: ``m_w = m, S_w = S``; q over u itself: ``m_w = Lzz^{-1} m``,
``S_w = Lzz^{-1} S``, where ``S`` may be any square root of the covariance).

Shapes.  ``Kzx`` ``(Q, M, B)`` (or ``(M, B)`` shared by the latents), ``Kxx_diag``
``(Q, B)``, ``Lzz`` ``(Q, M, M)`` (or ``(M, M)``); q's mean ``(..., Q, M)`` and square root
``(..., Q, M, M)`` (diagonal: standard deviations ``(..., Q, M)``), where the optional
leading axes ``...`` index the components of a mixture (SAVIGP) and share ``Kzx``, ``Lzz``.
Results are ``(..., Q, B)`` (joint covariances ``(..., Q, B, B)``).

A prior mean ``f ~ GP(m, k)`` enters here, once for every model: ``mean_x`` ``(Q, B)``
is ``m(X)`` and ``mean_z`` ``(Q, M)`` is ``m(Z)``.  Whitened q is over the deviation,
``u = m(Z) + Lzz v``, so ``mean_n = m(x_n) + A_n^T m_w`` (``mean_z`` is not needed); q
over u itself gives ``mean_n = m(x_n) + Kxz Kzz^{-1} (mu_u - m(Z))``
(:func:`inducing_deviation`).  Variances do not depend on the mean.  ``None`` (the
zero mean) adds nothing: results are bit-identical to a model without a mean.

Prediction reuses one :class:`PredictiveCache` per parameter state: with
``alpha = Lzz^{-T} m_w`` and ``R = Lzz^{-T} (I - S_w S_w^T) Lzz^{-1}`` a chunk costs one
product ``R Kzx``; the cache keeps the triangular-solve form where that quadratic form
would lose accuracy (float32, or Kzz badly conditioned).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..linalg import solve_lower, solve_upper_t
from .fastpaths import (
    fast_marginals,
    quad_form_affordable,
    quad_form_factors,
    whitened_moments,
)


class InducingQ(NamedTuple):
    """q over the inducing values as the conditional takes it.

    ``q_mu`` ``(..., Q, M)``; ``q_sqrt`` ``(..., Q, M, M)`` a square root of the
    covariance, or ``(..., Q, M)`` standard deviations if ``is_diag``, or None for a point
    mass; ``whiten``: q is over ``v = Lzz^{-1} u`` (else over u).  Unpacks into the
    positional arguments of :func:`conditional_marginals`."""

    q_mu: torch.Tensor
    q_sqrt: torch.Tensor | None
    whiten: bool
    is_diag: bool = False

    @classmethod
    def of(cls, q) -> InducingQ:
        """From a :class:`~latentgp.variational.GaussianVariational`."""
        return cls(q.q_mu, q.factor(), q.whiten, q.is_diag)


def _merge_components(Lzz: torch.Tensor, q_mu: torch.Tensor, q_sqrt: torch.Tensor | None):
    """q's leading component axes merged into the latent axis, for the ``(Q, ...)`` paths:
    ``Lzz`` ``(n, M, M)`` (shared, broadcast), ``q_mu`` ``(n, M)``, ``q_sqrt`` ``(n, M, M)``
    or ``(n, M)``, with ``n = prod(leading) * Q``."""
    lead = tuple(q_mu.shape[:-2])
    Q, M = q_mu.shape[-2:]
    L = Lzz.expand(lead + (Q, M, M)).reshape(-1, M, M)
    sq = None if q_sqrt is None else q_sqrt.reshape((-1,) + tuple(q_sqrt.shape[len(lead) + 1 :]))
    return L, q_mu.reshape(-1, M), sq


def inducing_deviation(
    q_mu: torch.Tensor, mean_z: torch.Tensor | None, whiten: bool
) -> torch.Tensor:
    """q's mean as a deviation from the prior mean: ``q_mu - m(Z)`` for q over u
    (``q_mu`` ``(..., Q, M)``, ``mean_z`` ``(Q, M)``); whitened q (already over the
    deviation) and the zero mean (``mean_z`` None) return ``q_mu`` unchanged."""
    if mean_z is None or whiten:
        return q_mu
    return q_mu - mean_z


def _add_mean(mean: torch.Tensor, mean_x: torch.Tensor | None) -> torch.Tensor:
    return mean if mean_x is None else mean + mean_x


def _clamp_var(var: torch.Tensor, kxx: torch.Tensor) -> torch.Tensor:
    """Variances clamped at ``1e-12 |k(x, x)|``: cancellation never gives a negative one."""
    return var.clamp_min(1e-12 * kxx.detach().abs().clamp_min(1e-300))


def conditional_marginals(
    Kzx: torch.Tensor,
    Kxx_diag: torch.Tensor,
    Lzz: torch.Tensor,
    q_mu: torch.Tensor,
    q_sqrt: torch.Tensor | None,
    whiten: bool,
    q_sqrt_is_diag: bool = False,
    *,
    mean_x: torch.Tensor | None = None,
    mean_z: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Marginal means and variances of q(f) at a batch of inputs.

    Parameters
    ----------
    Kzx: ``(Q, M, B)`` cross-covariances (``(M, B)`` when shared).
    Kxx_diag: ``(Q, B)`` prior variances.
    Lzz: ``(Q, M, M)`` Cholesky factors of Kzz (``(M, M)`` when shared).
    q_mu: ``(..., Q, M)``; q_sqrt: ``(..., Q, M, M)`` square root, or ``(..., Q, M)``
        standard deviations if ``q_sqrt_is_diag``; None for a point mass (prior
        conditional variance).
    whiten: whether q is over ``v = Lzz^{-1} u``.
    mean_x, mean_z: the prior mean at the batch ``(Q, B)`` and at Z ``(Q, M)`` (module
        docstring); None for the zero mean.

    Returns
    -------
    mean, var: ``(..., Q, B)`` each; var is clamped at ``1e-12 |k(x, x)|``.
    """
    q_mu = inducing_deviation(q_mu, mean_z, whiten)
    lead = tuple(q_mu.shape[:-2])
    if not lead:
        mean, var = fast_marginals(Kzx, Kxx_diag, Lzz, q_mu, q_sqrt, whiten, q_sqrt_is_diag)
        return _add_mean(mean, mean_x), var
    if q_sqrt_is_diag and q_sqrt is not None:
        mean, var = _diagonal_components(Kzx, Kxx_diag, Lzz, q_mu, q_sqrt, whiten)
        return _add_mean(mean, mean_x), var
    Q, M = q_mu.shape[-2:]
    B = Kzx.shape[-1]
    full = lead + (Q,)
    L, mu, sq = _merge_components(Lzz, q_mu, q_sqrt)
    mean, var = fast_marginals(
        Kzx.expand(full + (M, B)).reshape(-1, M, B),
        Kxx_diag.expand(full + (B,)).reshape(-1, B),
        L, mu, sq, whiten, q_sqrt_is_diag,
    )
    return _add_mean(mean.reshape(full + (B,)), mean_x), var.reshape(full + (B,))


def _diagonal_components(Kzx, Kxx_diag, Lzz, q_mu, q_sd, whiten):
    """Marginals of several diagonal-covariance components (a mixture's leading axis)
    that share Kzx and Lzz: the projection ``A = Lzz^{-1} Kzx`` (and ``Kzz^{-1} Kzx`` for q
    over u) is solved once, each component then costs ``O(B M)``:
    ``var = kxx - |A_n|^2 + sum_m s_m^2 W_mn^2`` with ``W = A`` (whitened) or
    ``Kzz^{-1} Kzx``; ``mean = W_n^T m``.  Shapes as :func:`conditional_marginals`."""
    L = Lzz if Lzz.ndim == 3 else Lzz[None]
    A = solve_lower(L, Kzx.expand(L.shape[:-2] + Kzx.shape[-2:]))  # (Q, M, B)
    W = A if whiten else solve_upper_t(L, A)
    mean = (W * q_mu[..., None]).sum(-2)  # (..., Q, B)
    var = Kxx_diag - A.square().sum(-2) + (q_sd[..., None] * W).square().sum(-2)
    return mean, _clamp_var(var, Kxx_diag)


def gaussian_marginals(
    q,
    Kzx: torch.Tensor,
    Kxx_diag: torch.Tensor,
    Lzz: torch.Tensor,
    *,
    mean_x: torch.Tensor | None = None,
    mean_z: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`conditional_marginals` of a
    :class:`~latentgp.variational.GaussianVariational` ``q``: ``(Q, B)`` each."""
    return conditional_marginals(
        Kzx, Kxx_diag, Lzz, *InducingQ.of(q), mean_x=mean_x, mean_z=mean_z
    )


@dataclass(frozen=True)
class PredictiveCache:
    """The factors that prediction reuses for one parameter state.

    ``Lzz`` ``(Q, M, M)``; q's ``q_mu`` ``(..., Q, M)`` (a deviation from the prior
    mean, :func:`inducing_deviation`) and ``q_sqrt`` as in :func:`conditional_marginals`;
    ``alpha`` ``(..., Q, M)`` and ``R`` ``(..., Q, M, M)`` when the quadratic-form path
    is used (else None: chunks take the solve path).
    """

    Lzz: torch.Tensor
    q_mu: torch.Tensor
    q_sqrt: torch.Tensor | None
    whiten: bool
    q_sqrt_is_diag: bool
    alpha: torch.Tensor | None = None
    R: torch.Tensor | None = None

    @property
    def uses_quad_form(self) -> bool:
        return self.R is not None

    @property
    def q(self) -> InducingQ:
        """The q (a deviation from the prior mean) this cache was built from."""
        return InducingQ(self.q_mu, self.q_sqrt, self.whiten, self.q_sqrt_is_diag)


def predictive_cache(
    Lzz: torch.Tensor, q: InducingQ, *, mean_z: torch.Tensor | None = None
) -> PredictiveCache:
    """Build the :class:`PredictiveCache` of ``q`` (:class:`InducingQ`) in ``O(M^3)`` per
    latent and component (diagonal components on a leading axis keep the solve path: it
    shares one projection across them).  ``mean_z`` ``(Q, M)``: the prior mean at Z
    (None: zero); the prediction then adds ``m(X)`` (``mean_x`` of
    :func:`cached_conditional`)."""
    q = q._replace(q_mu=inducing_deviation(q.q_mu, mean_z, q.whiten))
    lead = tuple(q.q_mu.shape[:-2])
    if not quad_form_affordable(Lzz) or (lead and q.is_diag):
        return PredictiveCache(Lzz, *q)
    Q, M = q.q_mu.shape[-2:]
    L, mu, sq = _merge_components(Lzz, q.q_mu, q.q_sqrt)
    m_w, T = whitened_moments(L, mu, sq, q.whiten, q.is_diag)
    alpha, R = quad_form_factors(L, m_w, T)
    return PredictiveCache(Lzz, *q, alpha.reshape(lead + (Q, M)), R.reshape(lead + (Q, M, M)))


def gaussian_predictive_cache(
    q, Lzz: torch.Tensor, *, mean_z: torch.Tensor | None = None
) -> PredictiveCache:
    """:func:`predictive_cache` of a :class:`~latentgp.variational.GaussianVariational`."""
    return predictive_cache(Lzz, InducingQ.of(q), mean_z=mean_z)


def cached_conditional(
    cache: PredictiveCache,
    Kzx: torch.Tensor,
    Kxx: torch.Tensor,
    *,
    full_cov: bool = False,
    mean_x: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q(f) at a batch from a :class:`PredictiveCache` (prediction: no gradients needed).

    ``full_cov=False``: ``Kxx`` ``(Q, B)`` the prior variances; returns the marginal mean
    and variance ``(..., Q, B)`` each.  Quadratic form: ``mean = m(X) + Kzx^T alpha``,
    ``var = kxx - diag(Kzx^T R Kzx)``; otherwise :func:`conditional_marginals`.

    ``full_cov=True``: ``Kxx`` ``(Q, B, B)`` (or ``(B, B)``) the prior covariance; returns
    the mean ``(..., Q, B)`` and joint covariance ``(..., Q, B, B)``,
    ``cov = Kxx - A^T A + (S^T W)^T (S^T W)`` with ``A = Lzz^{-1} Kzx`` and ``W = A``
    (whitened) or ``Lzz^{-T} A``.

    ``mean_x`` ``(Q, B)``: the prior mean at the batch (None: zero).
    """
    if full_cov:
        mean, cov = _joint_conditional(cache, Kzx, Kxx)
        return _add_mean(mean, mean_x), cov
    if cache.R is None:
        return conditional_marginals(Kzx, Kxx, cache.Lzz, *cache.q, mean_x=mean_x)
    mean = (cache.alpha[..., None, :] @ Kzx)[..., 0, :]  # a matrix product, not a reduction
    var = Kxx - (Kzx * (cache.R @ Kzx)).sum(-2)
    return _add_mean(mean, mean_x), _clamp_var(var, Kxx)


def _joint_conditional(cache: PredictiveCache, Kzx: torch.Tensor, Kxx: torch.Tensor):
    """Zero-mean joint moments of :func:`cached_conditional` (``full_cov=True``)."""
    Lzz = cache.Lzz
    batch = torch.broadcast_shapes(Lzz.shape[:-2], Kzx.shape[:-2])
    A = solve_lower(Lzz, Kzx.expand(batch + Kzx.shape[-2:]))
    W = A if cache.whiten else solve_upper_t(Lzz, A)
    mean = (W * cache.q_mu[..., None]).sum(-2)
    cov = Kxx - A.mT @ A
    if cache.q_sqrt is not None:
        S = torch.diag_embed(cache.q_sqrt) if cache.q_sqrt_is_diag else cache.q_sqrt
        SW = S.mT @ W
        cov = cov + SW.mT @ SW
    return mean, cov


def cached_marginals(cache: PredictiveCache, Kzx: torch.Tensor, Kxx_diag: torch.Tensor, **kw):
    """Deprecated spelling of ``cached_conditional(cache, Kzx, Kxx_diag)``."""
    _renamed("cached_marginals(...)", "cached_conditional(...)")
    return cached_conditional(cache, Kzx, Kxx_diag, **kw)


def conditional_covariance(cache: PredictiveCache, Kzx: torch.Tensor, Kxx: torch.Tensor, **kw):
    """Deprecated spelling of ``cached_conditional(cache, Kzx, Kxx, full_cov=True)``."""
    _renamed("conditional_covariance(...)", "cached_conditional(..., full_cov=True)")
    return cached_conditional(cache, Kzx, Kxx, full_cov=True, **kw)


def _renamed(old: str, new: str) -> None:
    warnings.warn(
        f"latentgp.variational.{old} is now {new}", DeprecationWarning, stacklevel=3
    )
