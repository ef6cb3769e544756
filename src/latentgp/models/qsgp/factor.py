"""The factor ``C`` of QSGP's posterior covariance ``Sigma = C C^T`` (notes B.1, B.3).

``C`` is lower triangular with positive diagonal ``c_rr = exp(c_raw_r)``: mean-field
(diagonal), ``"chevron"`` (the first ``k = Covariance.num_dense`` columns dense below the diagonal,
the rest diagonal) or ``"full"`` (``k = m``).  The model stores the diagonal's logarithm
``c_raw`` ``(m,)`` and the dense columns' entries ``c_dense`` ``(m, k)``; only the
entries below the diagonal of ``c_dense`` are used.
"""

from __future__ import annotations

import torch


def column_values(
    rows: torch.Tensor, cols: torch.Tensor, dense_rc: torch.Tensor, craw_rows: torch.Tensor
) -> torch.Tensor:
    """``C[rows, cols]`` for dense columns: ``(|rows|, |cols|)`` from gathered values
    ``dense_rc = c_dense[rows, cols]`` and ``craw_rows = c_raw[rows]`` (zero above the
    diagonal, ``exp(c_raw)`` on it, the dense entry below it)."""
    below = rows[:, None] > cols[None, :]
    on = rows[:, None] == cols[None, :]
    diag = torch.exp(craw_rows)[:, None].expand_as(dense_rc)
    zero = torch.zeros_like(dense_rc)
    return torch.where(below, dense_rc, torch.where(on, diag, zero))


def dense_factor(c_raw: torch.Tensor, c_dense: torch.Tensor) -> torch.Tensor:
    """The full ``C`` ``(m, m)`` from ``c_raw`` ``(m,)`` and ``c_dense`` ``(m, k)``."""
    m, k = c_raw.shape[0], c_dense.shape[1]
    rows = torch.arange(m, device=c_raw.device)
    C = torch.diag(torch.exp(c_raw))
    if k:
        cols = torch.arange(k, device=c_raw.device)
        C[:, :k] = column_values(rows, cols, c_dense, c_raw)
    return C


def optimal_log_diagonal(
    colnorm: torch.Tensor, s2: torch.Tensor | float, sdiag: torch.Tensor
) -> torch.Tensor:
    """Proposition 1: ``log c_rr = log sqrt(s2 / (|phi_r|^2 + s2 s_rr))``, the exact
    optimum of the Gaussian ELBO for a diagonal-only column ``r`` (``colnorm`` the column
    norms ``|phi_r|^2`` over all rows, ``s2`` the noise variance, ``sdiag`` the diagonal
    of the prior precision S)."""
    return 0.5 * torch.log(s2 / (colnorm + s2 * sdiag))
