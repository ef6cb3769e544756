"""Closed-form pieces of expectation propagation with a probit likelihood and inducing points.

Notation follows the SEP notes (``shared/notes/sep-modulated-sparse.md`` §1.2-1.3, with the
seed's errata in eqs. 20, 23 and 29 corrected):

- ``L = chol(K)``, ``K = K_{zz}`` (M, M); ``V = L^{-1} K_{zx}`` (M, B), so that
  ``upsilon_i = K^{-1} k_i = L^{-T} V_i`` and the FITC variance is ``s_i = K_ii - |V_i|^2``.
- The posterior ``q(fbar) = N(mu, Sigma)`` is kept *whitened* against the current ``L``:
  ``Sigma = L B^{-1} L'`` and ``mu = L m_w`` with ``B = I + L' A L`` and ``m_w = B^{-1} L' c``,
  where ``A = sum_i nu_i upsilon_i upsilon_i'`` and ``c = sum_i mu_i upsilon_i`` are the sites'
  natural-parameter sums (eqs. 12-13).  ``R = chol(B)``.
- A site ``i`` is ``exp(-nu_i/2 (upsilon_i' fbar)^2 + mu_i upsilon_i' fbar)`` (rank one).

Everything is batched over data points (no Python loops); shapes are in the docstrings.
"""

from __future__ import annotations

import torch
from torch.special import log_ndtr

from ..constants import LOG_2PI
from ..linalg import cholesky, solve_lower, solve_upper_t


def probit_tilted(y: torch.Tensor, a: torch.Tensor, b: torch.Tensor):
    """Normaliser and derivatives of ``Z_i = Phi(y_i a_i / sqrt(b_i))`` (eqs. 17-20).

    ``y`` in {-1, +1}, cavity mean ``a`` of the latent and total variance ``b``, all ``(B,)``.
    Returns ``log Z``, ``alpha = d log Z / d a`` (eq. 20 corrected: ``y / sqrt(b)``) and
    ``beta = -d^2 log Z / d a^2 = alpha^2 + alpha a / b``.
    """
    sb = torch.sqrt(b)
    z = y * a / sb
    log_z = log_ndtr(z)
    ratio = torch.exp(-0.5 * z * z - 0.5 * LOG_2PI - log_z)  # phi(z) / Phi(z), stable
    alpha = ratio * y / sb
    beta = alpha * alpha + alpha * a / b
    return log_z, alpha, beta


def probit_site_update(y: torch.Tensor, a: torch.Tensor, v: torch.Tensor, s: torch.Tensor):
    """New site parameters for a cavity ``N(a, v)`` of the projection ``t = upsilon' fbar``.

    The likelihood of ``t`` is ``Phi(y t / sqrt(1 + s))`` (``s``: FITC variance, 0 for full
    EP), so ``b = 1 + s + v``.  Eqs. 21-23 with the corrected minus sign::

        nu_new = beta / (1 - beta v),     mu_new = nu_new a + alpha / (1 - beta v)

    (the second is ``nu_new (a + alpha / beta)`` written without dividing by ``beta``).
    Returns ``(nu_new, mu_new, log_Z, ok)``; ``ok`` is False where the cavity is invalid
    (``v <= 0``) or the update would have non-positive / non-finite precision.
    """
    b = 1.0 + s + v
    ok = (v > 0) & torch.isfinite(v) & (b > 0) & torch.isfinite(a)
    b_safe = torch.where(ok, b, torch.ones_like(b))
    a_safe = torch.where(ok, a, torch.zeros_like(a))
    v_safe = torch.where(ok, v, torch.zeros_like(v))
    log_z, alpha, beta = probit_tilted(y, a_safe, b_safe)
    denom = 1.0 - beta * v_safe
    nu_new = beta / denom
    mu_new = nu_new * a_safe + alpha / denom
    ok = ok & (denom > 0) & (nu_new > 0) & torch.isfinite(nu_new) & torch.isfinite(mu_new)
    return nu_new, mu_new, log_z, ok


# --------------------------------------------------------------------- the posterior q --
class WhitenedPosterior:
    """``q(fbar)`` for the current ``L``: ``B = I + L'AL = R R'``, ``m_w = B^{-1} h``.

    Attributes: ``L`` (M, M), ``R`` (M, M) lower, ``m_w`` (M,), ``jitter`` of ``chol(B)``.
    """

    def __init__(self, L: torch.Tensor, LtAL: torch.Tensor, h: torch.Tensor) -> None:
        M = L.shape[-1]
        eye = torch.eye(M, dtype=L.dtype, device=L.device)
        Bmat = eye + 0.5 * (LtAL + LtAL.mT)
        self.L = L
        self.R, self.jitter = cholesky(Bmat, "I + L'AL (EP posterior precision)", jitter=0.0)
        self.m_w = torch.cholesky_solve(h[:, None], self.R)[:, 0]

    def solve_R(self, V: torch.Tensor) -> torch.Tensor:
        """``R^{-1} V`` (so that ``V_i' B^{-1} V_j`` are inner products of columns)."""
        return solve_lower(self.R, V)

    @property
    def mean(self) -> torch.Tensor:
        """``mu = L m_w`` (M,)."""
        return self.L @ self.m_w

    @property
    def sqrt_cov(self) -> torch.Tensor:
        """A square root ``T`` with ``Sigma = T T'``: ``T = L R^{-T}`` (M, M)."""
        return solve_lower(self.R, self.L.mT).mT

    def log_det_B(self) -> torch.Tensor:
        return 2.0 * self.R.diagonal().log().sum()

    def quad_B(self) -> torch.Tensor:
        """``mu' Sigma^{-1} mu = m_w' B m_w``."""
        return (self.R.mT @ self.m_w).square().sum()


class OneProcess:
    """Sums and maxima over "all processes" when there is only this one: the identity.
    Training passes :class:`latentgp.training.distributed.Reducer` instead (duck-typed:
    ``world``, ``rank``, ``reduce(t)`` = sum, ``reduce.maximum(t)``)."""

    world = 1
    rank = 0

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def maximum(self, t: torch.Tensor) -> torch.Tensor:
        return t


#: the reducer of a run in one process
ONE_PROCESS = OneProcess()


def add_sums(total: tuple | None, part: tuple) -> tuple:
    """Elementwise sum of two tuples of tensors (``total`` None: ``part``), e.g. the
    :func:`site_sums` of consecutive chunks of rows."""
    return part if total is None else tuple(a + b for a, b in zip(total, part, strict=True))


def posterior_from_sums(L: torch.Tensor, sums: tuple, reduce=ONE_PROCESS) -> WhitenedPosterior:
    """``q`` from this process's whitened site sums ``(L'AL, L'c)`` (:func:`site_sums`),
    summed over processes by ``reduce``."""
    both = reduce(torch.cat([sums[0].reshape(-1), sums[1]]))
    M = L.shape[0]
    return WhitenedPosterior(L, both[: M * M].reshape(M, M), both[M * M :])


def site_sums(V: torch.Tensor, nu: torch.Tensor, mu: torch.Tensor):
    """Whitened natural-parameter sums of sites whose ``upsilon = L^{-T} V``.

    ``L' A L = V diag(nu) V'`` (M, M) and ``L' c = V mu`` (M,) for ``V`` (M, B).
    """
    return (V * nu) @ V.mT, V @ mu


# -------------------------------------------------------------------------- cavities --
def cavity_projection(
    post: WhitenedPosterior,
    Vn: torch.Tensor,
    Po: torch.Tensor,
    nu: torch.Tensor,
    mu: torch.Tensor,
    same: bool = False,
):
    """Cavity moments of ``q^{\\i}`` projected on the *current* ``upsilon_i`` (eqs. 14-15).

    Site ``i`` is stored with direction ``u_o`` (whitened: ``Po = L' u_o``, (M, B)); the
    current direction is ``u_n = L^{-T} Vn`` (Vn: (M, B)); they coincide in batch mode
    (``same=True``).  With ``d_oo = u_o'Sigma u_o``, ``d_no = u_n'Sigma u_o``,
    ``d_nn = u_n'Sigma u_n``, ``c_o = u_o'mu`` and ``C = nu / (1 - nu d_oo)``::

        a = u_n' mu_cav  = u_n'mu + d_no (nu c_o - mu) / (1 - nu d_oo)
        v = u_n' Sigma_cav u_n = d_nn + C d_no^2

    Returns a dict with ``a, v`` and the frozen pieces ``c_o, d_oo, kappa, C, valid`` (B,)
    (``kappa = (nu c_o - mu) / (1 - nu d_oo)``; ``valid``: ``1 - nu d_oo > 0``).
    """
    Wn = post.solve_R(Vn)
    Wo = Wn if same else post.solve_R(Po)
    d_nn = Wn.square().sum(0)
    d_oo = d_nn if same else Wo.square().sum(0)
    d_no = d_nn if same else (Wn * Wo).sum(0)
    c_n = Vn.mT @ post.m_w
    c_o = c_n if same else Po.mT @ post.m_w
    one_minus = 1.0 - nu * d_oo
    valid = one_minus > 0
    safe = torch.where(valid, one_minus, torch.ones_like(one_minus))
    kappa = (nu * c_o - mu) / safe
    C = nu / safe
    a = c_n + d_no * kappa
    v = d_nn + C * d_no.square()
    v = torch.where(valid, v, torch.full_like(v, -1.0))
    return {"a": a, "v": v, "c_o": c_o, "d_oo": d_oo, "kappa": kappa, "C": C, "valid": valid}


def log_site_normalisers(
    log_z: torch.Tensor, nu: torch.Tensor, mu: torch.Tensor, c: torch.Tensor, d: torch.Tensor
) -> torch.Tensor:
    """``log Ztilde_i`` of eq. 29, corrected (notes §1.3)::

        log Zt_i = log Z_i - mu c + mu^2 d / 2 + C (c - mu d)^2 / 2 - log(1 - nu d) / 2

    with ``c = upsilon'mu_q``, ``d = upsilon'Sigma upsilon`` and ``C = nu / (1 - nu d)``.
    """
    one_minus = 1.0 - nu * d
    C = nu / one_minus
    return (
        log_z
        - mu * c
        + 0.5 * mu.square() * d
        + 0.5 * C * (c - mu * d).square()
        - 0.5 * torch.log(one_minus)
    )


def damp(new: torch.Tensor, old: torch.Tensor, rho: float, ok: torch.Tensor) -> torch.Tensor:
    """``rho new + (1 - rho) old`` where ``ok``, the old value elsewhere (eq. 25)."""
    return torch.where(ok, rho * new + (1.0 - rho) * old, old)


# ------------------------------------------------------------- evidence and gradient --
def site_terms(post: WhitenedPosterior, V, Po, s, y, nu, mu, same: bool):
    """Cavities (for the surrogate) and ``log Ztilde_i`` ``(B,)`` of sites ``nu, mu``
    stored with directions ``Po`` (see :func:`cavity_projection`; ``V`` the current
    ones, ``s`` the FITC variances, labels ``y`` in {-1, +1}).  A site whose cavity is
    invalid (only after a skipped update) contributes nothing."""
    cav = cavity_projection(post, V, Po, nu, mu, same=same)
    b = 1.0 + s + cav["v"].clamp_min(0.0)
    log_z, _, _ = probit_tilted(y, cav["a"], b)
    valid = cav["valid"]
    lzt = log_site_normalisers(log_z, torch.where(valid, nu, 0.0), mu, cav["c_o"], cav["d_oo"])
    return cav, torch.where(valid, lzt, 0.0)


def global_term(post: WhitenedPosterior) -> torch.Tensor:
    """``g(theta) - g(theta_prior) = 1/2 log|Sigma| - 1/2 log|K| + 1/2 mu'Sigma^{-1}mu``
    (with ``sum_i log Ztilde_i``, the EP estimate ``log Z_q``, eq. 28)."""
    return -0.5 * post.log_det_B() + 0.5 * post.quad_B()


def expected_log_prior(L: torch.Tensor, P: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """``E_q[log N(fbar | 0, K)]`` for ``q = N(mu, T T')``, ``L = chol(K)``, from
    ``P = L^{-1} T`` and ``p = L^{-1} mu``."""
    M = L.shape[0]
    return (
        -0.5 * M * LOG_2PI
        - L.diagonal().log().sum()
        - 0.5 * P.square().sum()
        - 0.5 * p.square().sum()
    )


def surrogate(post, L, Kzx, kxx, y, Po, cav, weight: float, prior_weight: float = 1.0):
    """``F(xi)`` of notes §1.4 with ``q`` and the cavities frozen (autograd through the
    kernel blocks ``L = chol(K_zz)``, ``Kzx`` ``(M, B)``, ``kxx`` ``(B,)``): the prior
    term times ``prior_weight`` plus ``weight`` times the batch's ``sum log Phi``.
    ``Po``: the sites' stored directions, ``cav``: their :func:`cavity_projection`."""
    mu_f = post.mean.detach()
    T = post.sqrt_cov.detach()  # Sigma = T T'
    G = (T @ post.solve_R(Po)).detach()  # Sigma u_o (M, B)
    kappa, C = cav["kappa"].detach(), cav["C"].detach()
    prior = expected_log_prior(L, solve_lower(L, T), solve_lower(L, mu_f[:, None]))
    if Kzx.shape[-1] == 0:  # an empty part of a minibatch (data-parallel run)
        return prior_weight * prior
    V = solve_lower(L, Kzx)
    U = solve_upper_t(L, V)  # upsilon_i = K^{-1} k_i, (M, B)
    UG = (U * G).sum(0)
    a = U.mT @ mu_f + UG * kappa
    v = (T.mT @ U).square().sum(0) + C * UG.square()
    b = 1.0 + kxx - V.square().sum(0) + v
    data = log_ndtr(y * a / torch.sqrt(b.clamp_min(1e-12))).sum()
    return prior_weight * prior + weight * data


def batch_surrogate(post, L, Kzx, kxx, y, nu, mu, prior_weight: float = 1.0):
    """Batch-scheme ``F(xi)`` (same value and gradient as :func:`surrogate` with the
    stored directions equal to the current ones) and, from the same forward pass,
    ``sum_i log Ztilde_i`` of the sites ``nu, mu`` ``(B,)`` of the batch's rows.

    With ``P = L^{-1} T`` and ``p = L^{-1} mu`` (M x M work): ``upsilon_i'mu = V_i'p``
    and ``T'upsilon_i = P'V_i``; the frozen site direction enters through the detached
    copy of ``P'V``.  Cost: two O(B M^2) products plus their backward pass.
    """
    mu_f = post.mean.detach()
    T = post.sqrt_cov.detach()
    P = solve_lower(L, T)
    p = solve_lower(L, mu_f[:, None])[:, 0]
    prior = expected_log_prior(L, P, p)
    if Kzx.shape[-1] == 0:  # an empty part (more processes than rows)
        return prior_weight * prior, prior.new_zeros(())
    V = solve_lower(L, Kzx)
    PV = P.mT @ V  # (M, B): T' upsilon_i(xi)
    c = V.mT @ p  # upsilon_i(xi)' mu
    c0, PV0 = c.detach(), PV.detach()
    d0 = PV0.square().sum(0)
    one_minus = 1.0 - nu * d0
    valid = one_minus > 0
    safe = torch.where(valid, one_minus, torch.ones_like(one_minus))
    kappa, C = (nu * c0 - mu) / safe, nu / safe
    UG = (PV * PV0).sum(0)  # upsilon_i(xi)' Sigma upsilon_i(xi_0)
    a = c + UG * kappa
    v = PV.square().sum(0) + C * UG.square()
    b = 1.0 + kxx - V.square().sum(0) + v
    log_z = log_ndtr(y * a / torch.sqrt(b.clamp_min(1e-12)))
    F = prior_weight * prior + torch.where(valid, log_z, 0.0).sum()
    lzt = log_site_normalisers(log_z.detach(), torch.where(valid, nu, 0.0), mu, c0, d0)
    return F, torch.where(valid, lzt, 0.0).sum()
