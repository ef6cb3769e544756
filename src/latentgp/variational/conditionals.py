"""The conditional q(u) -> marginals of q(f_n) for a batch of inputs.

For one latent, with ``A = Lzz^{-1} Kzx`` ``(M, B)``:

whitened   ``mean = A^T m``,          ``var = kxx - |A|^2 + |S^T A|^2``
unwhitened ``mean = (Lzz^{-T} A)^T m``, ``var = kxx - |A|^2 + |S^T Lzz^{-T} A|^2``

(column-wise squared norms).  Everything is batched over Q; cost ``O(Q (B M^2 + M^3))``.
"""

from __future__ import annotations

import torch

from ..linalg import solve_lower, solve_upper_t


def conditional_marginals(
    Kzx: torch.Tensor,
    Kxx_diag: torch.Tensor,
    Lzz: torch.Tensor,
    q_mu: torch.Tensor,
    q_sqrt: torch.Tensor | None,
    whiten: bool,
    q_sqrt_is_diag: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Marginal means and variances of q(f) at a batch of inputs.

    Parameters
    ----------
    Kzx: ``(Q, M, B)`` cross-covariances.
    Kxx_diag: ``(Q, B)`` prior variances.
    Lzz: ``(Q, M, M)`` Cholesky factors of Kzz.
    q_mu: ``(Q, M)``; q_sqrt: ``(Q, M, M)`` lower factor, or ``(Q, M)`` if
        ``q_sqrt_is_diag``; None for a point mass (mean only, prior-conditional variance).
    whiten: whether q is over ``v = Lzz^{-1} u``.

    Returns
    -------
    mean, var: ``(Q, B)`` each; var is clamped at a tiny positive value.
    """
    A = solve_lower(Lzz, Kzx)  # (Q, M, B)
    W = A if whiten else solve_upper_t(Lzz, A)  # projection applied to u-space
    mean = (W * q_mu[..., None]).sum(-2)
    var = Kxx_diag - A.square().sum(-2)
    if q_sqrt is not None:
        if q_sqrt_is_diag:
            var = var + (q_sqrt[..., None] * W).square().sum(-2)
        else:
            var = var + (q_sqrt.mT @ W).square().sum(-2)
    return mean, var.clamp_min(1e-12 * Kxx_diag.detach().abs().clamp_min(1e-300))
