"""The hand-written autograd paths of the conditional q(u) -> q(f_n), chosen in one place.

:func:`fast_marginals` picks a path; :mod:`latentgp.variational.strategy` is the only
caller (every model reaches the conditional through it).

For one latent, with ``A = Lzz^{-1} Kzx`` ``(M, B)`` and q over whitened values
``v = Lzz^{-1} u ~ N(m_w, S_w S_w^T)``:

    mean_n = A_n^T m_w
    var_n  = kxx_n - A_n^T (I - S_w S_w^T) A_n = kxx_n - |A_n|^2 + |S_w^T A_n|^2

(whitened q: ``m_w = m, S_w = S``; unwhitened q over u: ``m_w = Lzz^{-1} m``,
``S_w = Lzz^{-1} S``).  Everything is batched over Q.

Cost.  Three ways, chosen by the batch size B against M (``config.marginals``):

- B < 2 M, whitened full q: :class:`FactorMarginals` -- ``W = S^T A`` and
  ``var = kxx - |A_n|^2 + |W_n|^2``; ``10 B M^2`` flops and no ``O(M^3)`` work beyond
  Kzz's Cholesky.
- B >= 2 M, float64, Kzz well conditioned: :class:`QuadFormMarginals` with
  ``R = Lzz^{-T} T Lzz^{-1}`` -- ``4 B M^2`` flops in matrix products plus ~15 M^3.
- otherwise: :class:`ProjectedMarginals` -- one triangular solve and one product
  ``T A`` with ``T = I - S_w S_w^T`` forward, one solve and one ``A diag(g) A^T`` backward
  (``6 B M^2``), the gradient with respect to ``Lzz`` assembled from M x M quantities
  (~10 M^3).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..config import get_config
from ..linalg import solve_lower, solve_upper_t


class _ProjectionMarginals(torch.autograd.Function):
    """The skeleton of :class:`ProjectedMarginals` and :class:`FactorMarginals`:
    ``(Kzx, L, m_w, P) -> (A^T m_w, quad)`` with ``A = L^{-1} Kzx`` ``(Q, M, B)``.

    Forward forms ``A`` by one triangular solve and the means by a matrix product (not a
    reduction); the subclass's :meth:`variance_term` forms ``quad`` ``(Q, B)`` from ``A``
    and ``P`` ``(Q, M, M)`` together with one ``(Q, M, B)`` product ``C`` that its
    backward reuses.  ``L, A, C, m_w, P`` are saved; backward hands them to the
    subclass's :meth:`gradients` with ``ctx.needs_input_grad`` and the two output
    gradients, zeros ``(Q, B)`` where autograd passed None (an output that does not
    reach the loss).
    """

    @staticmethod
    def variance_term(A: Tensor, P: Tensor) -> tuple[Tensor, Tensor]:
        """``(C, quad)``: the product to keep for backward and the ``(Q, B)`` output."""
        raise NotImplementedError

    @staticmethod
    def gradients(saved: tuple[Tensor, ...], needs: tuple[bool, ...], g_mean: Tensor,
                  g_quad: Tensor) -> tuple[Tensor | None, ...]:
        """Gradients with respect to ``(Kzx, L, m_w, P)`` (None where not needed)."""
        raise NotImplementedError

    @classmethod
    def forward(cls, ctx, Kzx, L, m_w, P):
        A = solve_lower(L, Kzx)
        mean = (m_w[..., None, :] @ A)[..., 0, :]
        C, quad = cls.variance_term(A, P)
        ctx.save_for_backward(L, A, C, m_w, P)
        return mean, quad

    @classmethod
    def backward(cls, ctx, g_mean, g_quad):
        saved = ctx.saved_tensors
        A = saved[1]
        if g_mean is None:
            g_mean = torch.zeros(A.shape[:-2] + A.shape[-1:], dtype=A.dtype, device=A.device)
        if g_quad is None:
            g_quad = torch.zeros_like(g_mean)
        return cls.gradients(saved, ctx.needs_input_grad, g_mean, g_quad)


class ProjectedMarginals(_ProjectionMarginals):
    """``(Kzx, L, m_w, T) -> (A^T m_w, diag(A^T T A))`` with ``A = L^{-1} Kzx``.

    Shapes: Kzx ``(Q, M, B)``, L ``(Q, M, M)`` lower, m_w ``(Q, M)``, T ``(Q, M, M)``
    symmetric.  Returns two ``(Q, B)`` tensors.

    Backward, with ``g_mu`` and ``g_q`` the output gradients:
    ``g_A = m_w g_mu^T + 2 (T A) diag(g_q)``; ``g_Kzx = L^{-T} g_A``;
    ``g_m = A g_mu``; ``g_T = A diag(g_q) A^T``; and, because
    ``g_A A^T = m_w g_m^T + 2 T g_T``, ``g_L = -tril(L^{-T} (m_w g_m^T + 2 T g_T))`` needs
    no further B-sized product.
    """

    @staticmethod
    def variance_term(A, T):
        TA = T @ A
        return TA, (A * TA).sum(-2)

    @staticmethod
    def gradients(saved, needs, g_mean, g_quad):
        L, A, TA, m_w, T = saved
        need_kzx, need_L, need_m, need_T = needs
        g_m = (A @ g_mean[..., :, None])[..., 0]  # (Q, M)
        g_T = (A * g_quad[..., None, :]) @ A.mT if (need_T or need_L) else None  # (Q, M, M)
        g_Kzx = g_L = None
        if need_kzx:
            g_A = m_w[..., :, None] * g_mean[..., None, :] + 2.0 * TA * g_quad[..., None, :]
            g_Kzx = solve_upper_t(L, g_A)
        if need_L:
            inner = m_w[..., :, None] * g_m[..., None, :] + 2.0 * (T @ g_T)
            g_L = -torch.tril(solve_upper_t(L, inner))
        return g_Kzx, g_L, (g_m if need_m else None), (g_T if need_T else None)


class FactorMarginals(_ProjectionMarginals):
    """Whitened full q: ``(Kzx, L, m, S) -> (A^T m, |A_n|^2 - |S^T A_n|^2)``, ``A = L^{-1} Kzx``.

    Shapes: Kzx ``(Q, M, B)``, L and S ``(Q, M, M)`` lower, m ``(Q, M)``; returns two
    ``(Q, B)`` tensors.  Unlike :class:`ProjectedMarginals` it never forms
    ``T = I - S S^T``: the only ``O(M^3)`` work of a step is then Kzz's Cholesky, at the
    price of ``10 B M^2`` flops (two triangular solves against the batch, four
    ``M x M x B`` products), so it is the cheaper path while the batch is not much larger
    than M.  Backward, with ``W = S^T A``, ``D = diag(g_q)``:
    ``g_A = m g_mu^T + 2 (A - S W) D``, ``g_S = -2 A D W^T``, ``g_m = A g_mu``,
    ``g_Kzx = L^{-T} g_A``, ``g_L = -g_Kzx A^T`` (lower part).
    """

    @staticmethod
    def variance_term(A, S):
        W = S.mT @ A
        return W, A.square().sum(-2) - W.square().sum(-2)

    @staticmethod
    def gradients(saved, needs, g_mean, g_quad):
        L, A, W, m, S = saved
        need_kzx, need_L, need_m, need_S = needs
        gq = 2.0 * g_quad[..., None, :]
        WD = W * gq  # 2 W D  (Q, M, B)
        g_m = (A @ g_mean[..., :, None])[..., 0] if need_m else None
        g_S = -(A @ WD.mT) if need_S else None
        g_Kzx = g_L = None
        if need_kzx or need_L:
            g_A = A * gq - S @ WD
            g_A.addcmul_(m[..., :, None], g_mean[..., None, :])
            g_Kzx = solve_upper_t(L, g_A)
            if need_L:
                g_L = -torch.tril(g_Kzx @ A.mT)
        return (g_Kzx if need_kzx else None), g_L, g_m, g_S


class QuadFormMarginals(torch.autograd.Function):
    """``(Kzx, alpha, R) -> (Kzx^T alpha, diag(Kzx^T R Kzx))`` for symmetric ``R``.

    Shapes: Kzx ``(Q, M, B)``, alpha ``(Q, M)``, R ``(Q, M, M)``; returns two ``(Q, B)``
    tensors.  Forward: one product ``G = R Kzx`` (``2 B M^2`` flops).  Backward, with
    output gradients ``g_mu``, ``g_q``: ``g_Kzx = alpha g_mu^T + 2 G diag(g_q)``
    (element-wise, reusing ``G``), ``g_alpha = Kzx g_mu``, ``g_R = Kzx diag(g_q) Kzx^T``
    (``2 B M^2``).  A step costs ``4 B M^2`` flops, all in matrix products.
    """

    @staticmethod
    def forward(ctx, Kzx, alpha, R):
        G = R @ Kzx
        mean = (alpha[..., None, :] @ Kzx)[..., 0, :]
        quad = (Kzx * G).sum(-2)
        ctx.save_for_backward(Kzx, alpha, G)
        return mean, quad

    @staticmethod
    def backward(ctx, g_mean, g_quad):
        Kzx, alpha, G = ctx.saved_tensors
        need_kzx, need_alpha, need_R = ctx.needs_input_grad
        g_Kzx = g_alpha = g_R = None
        if need_kzx:
            if g_quad is not None:
                g_Kzx = G * (2.0 * g_quad[..., None, :])
                if g_mean is not None:
                    g_Kzx.addcmul_(alpha[..., :, None], g_mean[..., None, :])
            elif g_mean is not None:
                g_Kzx = alpha[..., :, None] * g_mean[..., None, :]
        if need_alpha and g_mean is not None:
            g_alpha = (Kzx @ g_mean[..., :, None])[..., 0]
        if need_R and g_quad is not None:
            g_R = (Kzx * g_quad[..., None, :]) @ Kzx.mT
        return g_Kzx, g_alpha, g_R


class WhitenedQuadFactors(torch.autograd.Function):
    """``(L, m, S) -> (alpha, R)`` with ``alpha = L^{-T} m``, ``R = L^{-T} (I - S S^T) L^{-1}``.

    The whitened, full-covariance case of :func:`quad_form_factors` with a hand-written
    backward.  With ``H = L^{-1} g_R L^{-T}`` and ``u = L^{-1} g_alpha``:
    ``g_S = -2 H S``, ``g_m = u``, ``g_L = tril(-2 L^{-T} T H - alpha u^T)``: three
    triangular solves and two products, where autograd through the solves and ``S S^T``
    takes four solves and five products.  Shapes: L, S ``(Q, M, M)`` lower, m ``(Q, M)``.
    """

    @staticmethod
    def forward(ctx, L, m, S):
        eye = torch.eye(L.shape[-1], dtype=L.dtype, device=L.device)
        T = eye - S @ S.mT
        R = solve_upper_t(L, solve_upper_t(L, T).mT)
        R = 0.5 * (R + R.mT)
        alpha = solve_upper_t(L, m[..., None])[..., 0]
        ctx.save_for_backward(L, S, T, alpha)
        return alpha, R

    @staticmethod
    def backward(ctx, g_alpha, g_R):
        L, S, T, alpha = ctx.saved_tensors
        g_L = g_m = g_S = None
        gL = torch.zeros_like(L)
        if g_R is not None:
            gRs = 0.5 * (g_R + g_R.mT)
            H = solve_lower(L, solve_lower(L, gRs).mT)  # L^{-1} g_R L^{-T}
            H = 0.5 * (H + H.mT)
            g_S = -2.0 * (H @ S)
            gL = gL - 2.0 * solve_upper_t(L, T @ H)
        if g_alpha is not None:
            u = solve_lower(L, g_alpha[..., None])  # (Q, M, 1)
            g_m = u[..., 0]
            gL = gL - alpha[..., :, None] * u.mT
        if ctx.needs_input_grad[0]:
            g_L = torch.tril(gL)
        return g_L, g_m, g_S


def quad_form_factors(
    Lzz: torch.Tensor, m_w: torch.Tensor, T: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``alpha = Lzz^{-T} m_w`` ``(Q, M)`` and ``R = Lzz^{-T} T Lzz^{-1}`` ``(Q, M, M)``.

    ``O(M^3)``, by triangular solves (no inverse is formed); ``R`` is symmetrised.
    """
    L = Lzz.expand_as(T)
    alpha = solve_upper_t(L, m_w[..., None])[..., 0]
    R = solve_upper_t(L, solve_upper_t(L, T).mT)
    return alpha, 0.5 * (R + R.mT)


def whitened_moments(
    Lzz: Tensor, q_mu: Tensor, q_sqrt: Tensor | None, whiten: bool, q_sqrt_is_diag: bool = False
) -> tuple[Tensor, Tensor]:
    """``m_w`` ``(Q, M)`` and ``T = I - S_w S_w^T`` ``(Q, M, M)`` in O(M^3)."""
    Q, M = q_mu.shape
    eye = torch.eye(M, dtype=q_mu.dtype, device=q_mu.device)
    L = Lzz.expand(Q, M, M)
    if whiten:
        m_w = q_mu
        if q_sqrt is None:
            return m_w, eye.expand(Q, M, M)
        if q_sqrt_is_diag:
            return m_w, eye - torch.diag_embed(q_sqrt.square())
        S_w = q_sqrt
    else:
        m_w = solve_lower(L, q_mu[..., None])[..., 0]
        if q_sqrt is None:
            return m_w, eye.expand(Q, M, M)
        S = torch.diag_embed(q_sqrt) if q_sqrt_is_diag else q_sqrt
        S_w = solve_lower(L, S)
    return m_w, eye - S_w @ S_w.mT


#: ``"auto"`` takes the quadratic-form path only while ``(max_i L_ii / min_i L_ii)^2``,
#: a lower bound on ``cond(Kzz)`` that runs 100-1000 times below it for kernel matrices,
#: stays under this value: the variances then lose at most ~1e-7 of ``k(x, x)``.
QUAD_FORM_MAX_PIVOT_RATIO = 1e6


#: Below a batch of this many times M, the whitened full-covariance marginals go through
#: :class:`FactorMarginals` (``10 B M^2`` flops + Kzz's Cholesky); from it on, through
#: the quadratic form (``4 B M^2 + ~15 M^3``, float64) or :class:`ProjectedMarginals`
#: (``6 B M^2 + ~10 M^3``, float32).  The flop counts cross at ``B = 2 M``; measured
#: step times (docs/design.md, "Marginals") agree to within the noise.
FACTOR_MAX_BATCH_RATIO = 2


def quad_form_affordable(Lzz: torch.Tensor, batch: int | None = None) -> bool:
    """Whether the quadratic form may replace the triangular solve: float64, Kzz well
    conditioned (its pivot ratio bounds the cancellation), and -- when ``batch`` is given
    -- a batch of at least ``FACTOR_MAX_BATCH_RATIO * M`` points; ``config.marginals``
    (``"solve"`` / ``"quad"``) forces the answer.

    The form trades the triangular solve against the batch for ``O(M^3)`` work on ``R``
    and loses up to ``eps * cond(Kzz)`` (rather than ``eps * sqrt(cond(Kzz))``) of each
    variance to cancellation, which float64 affords and float32 does not.
    """
    mode = get_config().marginals
    if mode in ("solve", "quad"):
        return mode == "quad"
    M = Lzz.shape[-1]
    if Lzz.dtype != torch.float64 or (batch is not None and batch < FACTOR_MAX_BATCH_RATIO * M):
        return False
    d = Lzz.detach().diagonal(dim1=-2, dim2=-1).abs()
    ratio = (d.amax(-1) / d.amin(-1)).amax()
    return bool(ratio * ratio < QUAD_FORM_MAX_PIVOT_RATIO)


def use_quad_form(Kzx: torch.Tensor, Lzz: torch.Tensor) -> bool:
    """The training path's choice: :func:`quad_form_affordable` for a batch of Kzx's size
    (Kzx's dtype decides, as the batch is what loses precision)."""
    if Kzx.dtype != torch.float64:
        return get_config().marginals == "quad"
    return quad_form_affordable(Lzz, Kzx.shape[-1])


def fast_marginals(
    Kzx: Tensor, Kxx_diag: Tensor, Lzz: Tensor, q_mu: Tensor, q_sqrt: Tensor | None,
    whiten: bool, q_sqrt_is_diag: bool = False,
) -> tuple[Tensor, Tensor]:
    """:func:`latentgp.variational.strategy.conditional_marginals` for shapes without
    leading component axes (``q_mu`` ``(Q, M)``): picks the autograd path above by the
    batch size, the dtype and Kzz's conditioning (``config.marginals`` can force one)."""
    Q, M = q_mu.shape
    Kzx = Kzx.expand(Q, *Kzx.shape[-2:])
    if use_quad_form(Kzx, Lzz):
        if whiten and q_sqrt is not None and not q_sqrt_is_diag:
            alpha, R = WhitenedQuadFactors.apply(Lzz.expand(Q, M, M), q_mu, q_sqrt)
        else:
            m_w, T = whitened_moments(Lzz, q_mu, q_sqrt, whiten, q_sqrt_is_diag)
            alpha, R = quad_form_factors(Lzz, m_w, T)
        mean, quad = QuadFormMarginals.apply(Kzx, alpha, R)
    elif (
        whiten
        and q_sqrt is not None
        and not q_sqrt_is_diag
        and Kzx.shape[-1] < FACTOR_MAX_BATCH_RATIO * M
    ):
        mean, quad = FactorMarginals.apply(Kzx, Lzz.expand(Q, M, M), q_mu, q_sqrt)
    else:
        m_w, T = whitened_moments(Lzz, q_mu, q_sqrt, whiten, q_sqrt_is_diag)
        mean, quad = ProjectedMarginals.apply(Kzx, Lzz.expand(Q, M, M), m_w, T)
    var = Kxx_diag - quad
    return mean, var.clamp_min(1e-12 * Kxx_diag.detach().abs().clamp_min(1e-300))
