"""Mixture-of-Gaussians q(u) over the inducing values of Q latent functions (SAVIGP).

    q(u) = sum_k pi_k prod_j N(u_j ; m_kj, S_kj),      k = 1..K,  j = 1..Q

with ``S_kj = R_kj R_kj^T``: ``R`` lower triangular ("full", the paper's FG for K = 1) or
diagonal ("diag", the paper's MoG1/MoG2 for K = 1, 2).  q is over ``u`` itself
(unwhitened), whose prior is ``p(u_j) = N(0, Kzz_j)``, as in the paper.

The KL term is split as ``-KL = L_ent + L_cross`` (notes A.4.1):

    L_ent  >= - sum_k pi_k log sum_l pi_l N(m_k ; m_l, S_k + S_l)        (Jensen bound)
    L_cross = -1/2 sum_k pi_k sum_j [M log 2pi + log|Kzz_j| + m_kj^T Kzz_j^-1 m_kj
                                     + tr(Kzz_j^-1 S_kj)]              (exact)

and the marginals of q(f_n) per component (Theorem 1) are univariate per latent:

    b_kj(n)      = a_jn^T m_kj,   a_jn = Kzz_j^-1 k_j(Z, x_n)
    Sigma_kj(n)  = k_j(x_n, x_n) - a_jn^T k_j(Z, x_n) + a_jn^T S_kj a_jn

which is the one conditional of :mod:`latentgp.variational.strategy` with the components
as a leading axis (``conditional_marginals(Kzx, kxx, Lzz, means, sqrt, whiten=False)``).

Shapes: weights ``(K,)``, means ``(K, Q, M)``, square roots ``(K, Q, M, M)`` (any square
root, not necessarily triangular) or standard deviations ``(K, Q, M)`` for "diag".
Every function is batched over K and Q: no Python loops.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..constants import LOG_2PI
from ..linalg import cholesky, solve_lower
from ..parameters import inv_softplus, softplus
from ..validation import check_choice


class MixtureVariational(nn.Module):
    """Parameters of a K-component mixture of Gaussians over ``u`` ``(Q, M)``.

    Parameters
    ----------
    num_components: K.  num_latent: Q.  num_inducing: M.
    covariance: ``"full"`` (Cholesky factor per component and latent) or ``"diag"``.

    Attributes
    ----------
    logits: ``(K,)``, ``pi = softmax(logits)``.
    means: ``(K, Q, M)``.
    sqrt_raw: ``(K, Q, M, M)`` (lower triangle used) or ``(K, Q, M)`` (softplus -> std).
    """

    def __init__(
        self,
        num_components: int,
        num_latent: int,
        num_inducing: int,
        covariance: str = "full",
        dtype: torch.dtype = torch.float64,
        device=None,
    ) -> None:
        super().__init__()
        check_choice(covariance, "covariance", ("full", "diag"))
        K, Q, M = int(num_components), int(num_latent), int(num_inducing)
        self.num_components, self.num_latent, self.num_inducing = K, Q, M
        self.covariance = covariance
        kw = {"dtype": dtype, "device": device}
        self.logits = nn.Parameter(torch.zeros(K, **kw))
        self.means = nn.Parameter(torch.zeros(K, Q, M, **kw))
        if covariance == "full":
            eye = torch.eye(M, **kw)
            self.sqrt_raw = nn.Parameter(eye.expand(K, Q, M, M).clone())
        else:
            self.sqrt_raw = nn.Parameter(torch.full((K, Q, M), 0.5413, **kw))  # softplus -> 1

    @property
    def is_diag(self) -> bool:
        return self.covariance == "diag"

    @property
    def weights(self) -> torch.Tensor:
        """Mixture weights ``pi`` ``(K,)``."""
        return torch.softmax(self.logits, 0)

    def sqrt(self) -> torch.Tensor:
        """``(K, Q, M, M)`` lower-triangular factors, or ``(K, Q, M)`` standard deviations."""
        if self.is_diag:
            return softplus(self.sqrt_raw)
        return torch.tril(self.sqrt_raw)

    def logdet(self) -> torch.Tensor:
        """``log|S_kj|`` ``(K, Q)``."""
        d = self.sqrt() if self.is_diag else self.sqrt_raw.diagonal(dim1=-2, dim2=-1)
        return 2.0 * d.abs().clamp_min(1e-300).log().sum(-1)

    @torch.no_grad()
    def init_from_prior(
        self,
        Lzz: torch.Tensor,
        cov_scale: float = 1.0,
        mean_spread: float = 0.0,
        whiten: bool = False,
    ) -> None:
        """Start every component at ``N(m_k, cov_scale * Kzz)`` (diag: ``cov_scale`` times
        the conditional prior variances ``1 / [Kzz^-1]_mm``).

        ``whiten``: the means and full factors are stored in whitened coordinates
        (``m = Lzz v``, ``R = Lzz R_v``), so the factor starts at ``sqrt(cov_scale) I``.
        ``mean_spread > 0`` draws ``m_k ~ N(0, mean_spread^2 Kzz)`` so that the components
        of a mixture are not identical (identical components get identical gradients).
        """
        K, Q, M = self.means.shape
        c = math.sqrt(cov_scale)
        if self.is_diag:
            # s_m^2 = 1 / [Kzz^-1]_mm: the conditional prior variances, which maximise
            # L_ent + L_cross over diagonal S (sqrt(diag Kzz) would make tr(Kzz^-1 S) huge)
            eye = torch.eye(M, dtype=Lzz.dtype, device=Lzz.device)
            inv_diag = solve_lower(Lzz, eye.expand_as(Lzz)).square().sum(-2)
            sd = c * inv_diag.rsqrt()
            self.sqrt_raw.copy_(inv_softplus(sd).to(self.sqrt_raw).expand(K, Q, M))
        elif whiten:
            eye = torch.eye(M, dtype=Lzz.dtype, device=Lzz.device)
            self.sqrt_raw.copy_((c * eye).expand(K, Q, M, M))
        else:
            self.sqrt_raw.copy_((c * Lzz).expand(K, Q, M, M))
        if mean_spread > 0:
            eps = torch.randn(K, Q, M, 1, dtype=Lzz.dtype, device=Lzz.device)
            self.means.copy_(mean_spread * (eps if whiten else Lzz @ eps)[..., 0])


def _pairwise_log_normal(
    means: torch.Tensor, sqrt: torch.Tensor, is_diag: bool
) -> tuple[torch.Tensor, float]:
    """``log N(m_k ; m_l, S_k + S_l)`` ``(K, K)`` summed over the Q blocks, and the jitter."""
    d = means[:, None] - means[None]  # (K, K, Q, M)
    M = means.shape[-1]
    if is_diag:
        C = sqrt.square()[:, None] + sqrt.square()[None]  # (K, K, Q, M)
        out = -0.5 * (LOG_2PI + C.log() + d.square() / C).sum((-2, -1))
        return out, 0.0
    S = sqrt @ sqrt.mT  # (K, Q, M, M)
    L, jit = cholesky(S[:, None] + S[None], "S_k + S_l", jitter=0.0)  # as-is first
    maha = solve_lower(L, d[..., None])[..., 0].square().sum(-1)  # (K, K, Q)
    logdet = 2.0 * L.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    return -0.5 * (M * LOG_2PI + logdet + maha).sum(-1), jit


def entropy_bound(
    weights: torch.Tensor,
    means: torch.Tensor,
    sqrt: torch.Tensor,
    is_diag: bool,
    logdet: torch.Tensor | None = None,
) -> torch.Tensor:
    """Jensen lower bound on the entropy of the mixture (scalar).

    ``L_ent = -sum_k pi_k log sum_l pi_l N(m_k; m_l, S_k + S_l)``.  For K = 1 it is
    ``1/2 sum_j log|2 pi 2 S_j|``, computed from ``logdet`` ``(K, Q)`` (``log|S_kj|``)
    when given, else from the factors.
    """
    K, Q, M = means.shape
    if K == 1:
        if logdet is None:
            if is_diag:
                logdet = 2.0 * sqrt.log().sum(-1)
            else:
                logdet = torch.linalg.slogdet(sqrt)[1] * 2.0
        return 0.5 * (Q * M * (LOG_2PI + math.log(2.0)) + logdet.sum())
    logN, _ = _pairwise_log_normal(means, sqrt, is_diag)
    log_z = torch.logsumexp(weights.log()[None, :] + logN, dim=1)  # (K,)
    return -(weights * log_z).sum()


def cross_entropy(
    weights: torch.Tensor,
    means: torch.Tensor,
    sqrt: torch.Tensor,
    is_diag: bool,
    Lzz: torch.Tensor,
) -> torch.Tensor:
    """``E_q[log p(u)]`` with ``p(u_j) = N(0, Lzz_j Lzz_j^T)`` (scalar, exact).

    Lzz: ``(Q, M, M)`` Cholesky factors of Kzz.
    """
    K, Q, M = means.shape
    logdet_K = 2.0 * Lzz.diagonal(dim1=-2, dim2=-1).log().sum(-1)  # (Q,)
    maha = solve_lower(Lzz, means.permute(1, 2, 0)).square().sum(-2).mT  # (K, Q)
    if is_diag:
        eye = torch.eye(M, dtype=Lzz.dtype, device=Lzz.device)
        inv_diag = solve_lower(Lzz, eye.expand_as(Lzz)).square().sum(-2)  # diag Kzz^-1 (Q, M)
        trace = (sqrt.square() * inv_diag).sum(-1)  # (K, Q)
    else:
        trace = solve_lower(Lzz, sqrt).square().sum((-2, -1))  # (K, Q)
    per = M * LOG_2PI + logdet_K + maha + trace  # (K, Q)
    return -0.5 * (weights * per.sum(-1)).sum()


def whitened_cross_entropy(
    weights: torch.Tensor, v: torch.Tensor, C: torch.Tensor, logdet_K: torch.Tensor
) -> torch.Tensor:
    """:func:`cross_entropy` of ``u = Lzz v`` from the whitened mean ``v`` ``(K, Q, M)``
    and full factor ``C`` ``(K, Q, M, M)`` (``R = Lzz C``), with ``log|Kzz_j|``
    ``(Q,)``: ``-1/2 sum_k pi_k sum_j (M log 2 pi + log|Kzz_j| + |v_kj|^2 + |C_kj|_F^2)``,
    no product with or solve against ``Lzz``."""
    M = v.shape[-1]
    per = M * LOG_2PI + logdet_K + v.square().sum(-1) + C.square().sum((-2, -1))  # (K, Q)
    return -0.5 * (weights * per.sum(-1)).sum()


def sample(
    weights: torch.Tensor, means: torch.Tensor, sqrt: torch.Tensor, is_diag: bool, n: int
) -> torch.Tensor:
    """``n`` draws of u from the mixture, ``(n, Q, M)`` (for Monte Carlo checks)."""
    K, Q, M = means.shape
    k = torch.multinomial(weights, n, replacement=True)
    eps = torch.randn(n, Q, M, dtype=means.dtype, device=means.device)
    if is_diag:
        return means[k] + sqrt[k] * eps
    return means[k] + (sqrt[k] @ eps[..., None])[..., 0]


def log_density(
    u: torch.Tensor, weights: torch.Tensor, means: torch.Tensor, sqrt: torch.Tensor, is_diag: bool
) -> torch.Tensor:
    """``log q(u)`` for draws ``u`` ``(n, Q, M)``, returns ``(n,)``."""
    K, Q, M = means.shape
    d = u[:, None] - means[None]  # (n, K, Q, M)
    if is_diag:
        lp = -0.5 * (LOG_2PI + 2 * sqrt.log() + (d / sqrt).square()).sum((-2, -1))
    else:
        z = torch.linalg.solve_triangular(sqrt, d[..., None], upper=False)[..., 0]
        logdet = 2.0 * sqrt.diagonal(dim1=-2, dim2=-1).abs().log().sum(-1)  # (K, Q)
        lp = -0.5 * (M * LOG_2PI + logdet + z.square().sum(-1)).sum(-1)
    return torch.logsumexp(weights.log() + lp, dim=1)
