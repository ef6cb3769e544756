"""Kernel expectations under Gaussian inputs (the "psi statistics"), in closed form for the
squared exponential (RBF) kernel with ARD.

For inputs ``x_n ~ N(mu_n, diag(s_n))`` (``mu``, ``s`` ``(N, Q)``) and inducing inputs
``Z`` ``(M, Q)``, with lengthscales ``l`` and signal variance ``sigma^2``:

    psi0_n     = E[k(x_n, x_n)] = sigma^2
    psi1_nm    = E[k(x_n, z_m)]
               = sigma^2 prod_q (1 + s_nq / l_q^2)^(-1/2)
                 exp(-1/2 sum_q (mu_nq - z_mq)^2 / (l_q^2 + s_nq))
    Psi2_mm'   = sum_n E[k(z_m, x_n) k(x_n, z_m')]
               = sum_n sigma^4 prod_q (1 + 2 s_nq / l_q^2)^(-1/2)
                 exp(-sum_q (z_mq - z_m'q)^2 / (4 l_q^2)
                     - sum_q (mu_nq - zbar_q)^2 / (l_q^2 + 2 s_nq)),   zbar = (z_m + z_m')/2

(Titsias & Lawrence 2010, the Bayesian GPLVM).  With ``s = 0`` they are ``k(x, x)``,
``Kxz`` and ``Kzx Kxz``: a point-mass q(X) gives the ordinary sparse-GP sums.

The ``(N, M, M)`` exponent of Psi2 is one matrix product: expanding the square,
``sum_q (mu_q - zbar_q)^2 / c_q = [sum mu^2/c, mu/c, 1/c] . [1, -2 zbar, zbar^2]`` with
``c = l^2 + 2 s``, on coordinates centred at the mean of Z (held constant for autograd)
to limit cancellation.  Rows are taken in chunks of about 2^22 exponent entries, each
gradient-checkpointed under autograd when there are several, so memory stays
``O(chunk M^2)`` whatever N.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from .base import Kernel
from .stationary import RBF

__all__ = ["check_psi_kernel", "rbf_psi_statistics"]

#: exponent entries (rows x M x M) per chunk of the Psi2 sum
PSI2_CHUNK_ELEMENTS = 2**22


def check_psi_kernel(kernel: Kernel) -> None:
    """``ValueError`` unless ``kernel`` has closed-form psi statistics here: an
    :class:`~latentgp.kernels.RBF` (ARD or not) with batch shape ``()``."""
    if type(kernel) is not RBF:
        raise ValueError(
            "the psi statistics (kernel expectations under Gaussian inputs) are in closed "
            f"form for the RBF kernel only; got {type(kernel).__name__}"
        )
    if kernel.built and tuple(kernel.batch_shape) != ():
        raise ValueError("the psi statistics need an RBF kernel without batch shape")


def _psi2_chunk(mu, var, Zc, l2, log_sig2, dz):
    c = l2 + 2.0 * var  # (n, Q)
    feats = torch.cat([(mu.square() / c).sum(-1, keepdim=True), mu / c, 1.0 / c], -1)
    zbar = 0.5 * (Zc[:, None, :] + Zc[None, :, :])  # (M, M, Q)
    M = Zc.shape[0]
    zf = torch.cat(
        [torch.ones_like(zbar[..., :1]), -2.0 * zbar, zbar.square()], -1
    ).reshape(M * M, -1)
    log_det = -0.5 * torch.log1p(2.0 * var / l2).sum(-1, keepdim=True)  # (n, 1)
    expo = log_det - feats @ zf.mT + (dz.reshape(1, M * M) + 2.0 * log_sig2)
    return torch.exp(expo).sum(0).reshape(M, M)


def rbf_psi_statistics(
    kernel: RBF,
    Z: torch.Tensor,
    mean: torch.Tensor,
    var: torch.Tensor,
    *,
    chunk_rows: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The psi statistics of a built RBF ``kernel`` (module docstring).

    Parameters
    ----------
    kernel: an :class:`~latentgp.kernels.RBF` with batch shape ``()``.
    Z: inducing inputs ``(M, Q)``.
    mean, var: means and variances of the independent Gaussian inputs ``(N, Q)``
        (``var >= 0``; zero is a point mass).
    chunk_rows: rows per chunk of the Psi2 sum (default: about 2^22 / M^2).

    Returns
    -------
    psi0 ``(N,)``, psi1 ``(N, M)``, Psi2 ``(M, M)`` (summed over the N points).
    """
    check_psi_kernel(kernel)
    if mean.shape != var.shape or mean.ndim != 2 or Z.ndim != 2 or Z.shape[1] != mean.shape[1]:
        raise ValueError(
            f"mean and var must be (N, Q) and Z (M, Q); got {tuple(mean.shape)}, "
            f"{tuple(var.shape)}, {tuple(Z.shape)}"
        )
    N, M = mean.shape[0], Z.shape[0]
    l2 = kernel.lengthscale.square()  # (Q,) or (1,)
    sig2 = kernel.variance
    log_sig2 = sig2.log()
    centre = Z.detach().mean(0)
    mu, Zc = mean - centre, Z - centre
    psi0 = sig2.expand(N)
    # psi1: (N, M, Q) broadcast (small); exact at var = 0 up to rounding
    c1 = l2 + var  # (N, Q)
    d = mu[:, None, :] - Zc[None, :, :]
    log_det1 = -0.5 * torch.log1p(var / l2).sum(-1)  # (N,)
    psi1 = torch.exp(log_sig2 + log_det1[:, None] - 0.5 * (d.square() / c1[:, None, :]).sum(-1))
    # Psi2
    dz = -(Zc[:, None, :] - Zc[None, :, :]).square().div(4.0 * l2).sum(-1)  # (M, M)
    rows = chunk_rows or max(1, PSI2_CHUNK_ELEMENTS // (M * M))
    use_ckpt = torch.is_grad_enabled() and N > rows
    psi2 = None
    for start in range(0, N, rows):
        args = (mu[start : start + rows], var[start : start + rows], Zc, l2, log_sig2, dz)
        part = (
            checkpoint(_psi2_chunk, *args, use_reentrant=False)
            if use_ckpt
            else _psi2_chunk(*args)
        )
        psi2 = part if psi2 is None else psi2 + part
    psi2 = 0.5 * (psi2 + psi2.mT)
    return psi0, psi1, psi2
