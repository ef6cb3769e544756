"""Gaussian q(u) for Q independent latent functions: full or diagonal covariance.

``q(u_q) = N(q_mu[q], q_sqrt[q] q_sqrt[q]^T)`` with ``q_mu`` ``(Q, M)`` and ``q_sqrt``
``(Q, M, M)`` lower triangular (full) or ``(Q, M)`` positive (diagonal).

Whitened (default): ``u = Lzz v`` and q is over ``v`` with prior ``N(0, I)``;
unwhitened: q is over ``u`` with prior ``N(0, Kzz)``.  With a prior mean ``m`` the prior
of u is ``N(m(Z), Kzz)``: whitened q is over the deviation (``u = m(Z) + Lzz v``), q over
u is over u itself; the methods that need it take ``mean_z`` ``(Q, M)`` (None: zero).
"""

from __future__ import annotations

import torch
from torch import nn

from ..linalg import cholesky, logdet_chol, solve_lower
from ..parameters import inv_softplus, softplus
from ..validation import check_choice


class GaussianVariational(nn.Module):
    """Full- or diagonal-covariance Gaussian over inducing values of Q latents.

    Parameters
    ----------
    num_latent: Q; num_inducing: M.
    covariance: ``"full"`` (Cholesky factor) or ``"diag"``.
    whiten: parameterise ``v = Lzz^{-1} u`` (recommended).
    init_scale: initial standard deviation (whitened: of v, unwhitened: relative to prior).
    """

    def __init__(
        self,
        num_latent: int,
        num_inducing: int,
        covariance: str = "full",
        whiten: bool = True,
        init_scale: float = 1.0,
        dtype: torch.dtype = torch.float64,
        device=None,
    ) -> None:
        super().__init__()
        check_choice(covariance, "covariance", ("full", "diag"))
        self.num_latent, self.num_inducing = int(num_latent), int(num_inducing)
        self.covariance, self.whiten = covariance, bool(whiten)
        Q, M = self.num_latent, self.num_inducing
        self.q_mu = nn.Parameter(torch.zeros(Q, M, dtype=dtype, device=device))
        if covariance == "full":
            eye = torch.eye(M, dtype=dtype, device=device)
            self.q_sqrt_raw = nn.Parameter(init_scale * eye.expand(Q, M, M).clone())
        else:
            self.q_sqrt_raw = nn.Parameter(
                inv_softplus(init_scale).to(dtype=dtype, device=device).expand(Q, M).clone()
            )

    @property
    def q_sqrt(self) -> torch.Tensor:
        """``(Q, M, M)`` lower-triangular factor (a diagonal one for ``"diag"``)."""
        if self.covariance == "full":
            return torch.tril(self.q_sqrt_raw)
        return torch.diag_embed(softplus(self.q_sqrt_raw))

    @property
    def is_diag(self) -> bool:
        return self.covariance == "diag"

    def factor(self) -> torch.Tensor:
        """The square root in the form the conditional takes: the ``(Q, M, M)`` factor,
        or for ``"diag"`` the ``(Q, M)`` standard deviations."""
        return self.q_sqrt_diag() if self.is_diag else self.q_sqrt

    def q_sqrt_diag(self) -> torch.Tensor:
        """``(Q, M)`` diagonal of the factor."""
        if self.covariance == "full":
            return self.q_sqrt_raw.diagonal(dim1=-2, dim2=-1)
        return softplus(self.q_sqrt_raw)

    def set_unwhitened_init(self, Lzz: torch.Tensor, scale: float) -> None:
        """For unwhitened q, start at ``N(0, scale^2 Kzz)`` (a sensible prior-like start)."""
        if self.whiten:
            return
        with torch.no_grad():
            if self.covariance == "full":
                self.q_sqrt_raw.copy_(scale * Lzz)
            else:
                d = Lzz.diagonal(dim1=-2, dim2=-1) * scale
                self.q_sqrt_raw.copy_(inv_softplus(d).to(self.q_sqrt_raw))

    def kl(self, Lzz: torch.Tensor, mean_z: torch.Tensor | None = None) -> torch.Tensor:
        """``sum_q KL[q(u_q) || p(u_q)]`` (scalar) given ``Lzz`` ``(Q, M, M)`` or ``(M, M)``
        and the prior mean at Z ``mean_z`` ``(Q, M)`` (None: zero)."""
        q_mu = self.q_mu if mean_z is None or self.whiten else self.q_mu - mean_z
        return gaussian_kl(q_mu, self, Lzz)

    def mean_and_sqrt(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.q_mu, self.q_sqrt

    def distribution(
        self, Lzz: torch.Tensor, mean_z: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean ``(Q, M)`` and covariance ``(Q, M, M)`` of q over the inducing values
        ``u`` themselves (whitened: ``u = m(Z) + Lzz v``), given ``Lzz`` ``(Q, M, M)`` or
        ``(M, M)`` and the prior mean at Z ``mean_z`` ``(Q, M)`` (None: zero)."""
        m, R = self.q_mu, self.q_sqrt
        if self.whiten:
            L = Lzz.expand(R.shape) if Lzz.ndim == 2 else Lzz
            m, R = (L @ m[..., None])[..., 0], L @ R
            if mean_z is not None:
                m = m + mean_z
        return m, R @ R.mT

    def set_distribution(
        self,
        mean: torch.Tensor,
        covariance: torch.Tensor,
        Lzz: torch.Tensor,
        mean_z: torch.Tensor | None = None,
    ) -> None:
        """Set q to ``N(mean, covariance)`` over the inducing values ``u`` (mean
        ``(Q, M)``, covariance ``(Q, M, M)`` symmetric positive semi-definite), whatever
        the parameterisation: whitened, ``v = Lzz^{-1} u`` gets mean ``Lzz^{-1} mean``
        and covariance ``Lzz^{-1} covariance Lzz^{-T}``.  The factor is the Cholesky
        factor of that covariance (jitter added only where it is singular).  With a prior
        mean ``mean_z`` ``(Q, M)`` the whitened mean is ``Lzz^{-1} (mean - mean_z)``.  A diagonal
        q refuses a covariance that is not diagonal in its parameterisation."""
        Q, M = self.num_latent, self.num_inducing
        with torch.no_grad():
            m = mean.to(self.q_mu).reshape(Q, M)
            C = covariance.to(self.q_mu).reshape(Q, M, M)
            if self.whiten:
                L = (Lzz.expand(Q, M, M) if Lzz.ndim == 2 else Lzz).to(C)
                if mean_z is not None:
                    m = m - mean_z.to(m)
                m = solve_lower(L, m[..., None])[..., 0]
                C = solve_lower(L, solve_lower(L, C).mT)
            C = 0.5 * (C + C.mT)
            if self.is_diag:
                d = C.diagonal(dim1=-2, dim2=-1)
                off = (C - torch.diag_embed(d)).abs().amax()
                if float(off) > 1e-8 * float(d.abs().amax().clamp_min(1e-300)):
                    space = "whitened (v = Lzz^-1 u) " if self.whiten else ""
                    raise ValueError(
                        "this q(u) has covariance='diag', but the covariance given is not "
                        f"diagonal in its {space}parameterisation; use covariance='full'"
                    )
                self.q_sqrt_raw.copy_(inv_softplus(d.clamp_min(1e-300).sqrt()).to(C))
            else:
                R, _ = cholesky(C, "q(u) covariance", jitter=0.0)
                self.q_sqrt_raw.copy_(R)
            self.q_mu.copy_(m)


def gaussian_kl(q_mu: torch.Tensor, q: GaussianVariational, Lzz: torch.Tensor) -> torch.Tensor:
    """KL of Q Gaussians against their priors, summed.

    Whitened: ``KL[N(m, S S^T) || N(0, I)] = (tr(S S^T) + m^T m - M - log|S S^T|) / 2``.
    Unwhitened: ``KL[N(m, S S^T) || N(0, L L^T)]`` with ``A = L^{-1} S``:
    ``(|A|_F^2 + |L^{-1} m|^2 - M + log|L L^T| - log|S S^T|) / 2``.
    """
    M = q_mu.shape[-1]
    d = q.q_sqrt_diag()
    logdet_S = 2.0 * d.abs().clamp_min(1e-300).log().sum(-1)  # (Q,)
    if q.whiten:
        if q.covariance == "full":
            trace = q.q_sqrt.square().sum((-2, -1))
        else:
            trace = d.square().sum(-1)
        maha = q_mu.square().sum(-1)
        logdet_K = torch.zeros_like(logdet_S)
    else:
        L = Lzz.expand(q_mu.shape[0], M, M) if Lzz.ndim == 2 else Lzz
        A = solve_lower(L, q.q_sqrt)
        trace = A.square().sum((-2, -1))
        maha = solve_lower(L, q_mu[..., None])[..., 0].square().sum(-1)
        logdet_K = logdet_chol(L)
    return 0.5 * (trace + maha - M + logdet_K - logdet_S).sum()
