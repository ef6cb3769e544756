"""LOVE-style predictive variances (Pleiss et al. 2018) for exact GPs on the iterative
path: :func:`lanczos` with full reorthogonalisation and :class:`LoveCache`, split from
:mod:`latentgp.linalg_iterative` (which re-exports both)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .linalg import cholesky


class LoveCache:
    """LOVE-style cache (Pleiss et al. 2018) for quadratic forms ``k^T (K + s^2 I)^{-1} k``.

    ``k`` Lanczos steps (full reorthogonalisation) on the preconditioned operator
    ``A = P^{-1/2} (K + s^2 I) P^{-1/2}`` give ``A ~ Q T Q^T`` on the Krylov space; off it
    ``A ~ I`` (the preconditioner's job), so with ``v = P^{-1/2} k``

        k^T (K + s^2 I)^{-1} k ~ |L_T^{-1} Q^T v|^2 + |v|^2 - |Q^T v|^2,

    exact when the Krylov space is everything (``k = N``) and, with a good
    preconditioner, close at small ``k`` (``A >= I`` because ``L L^T <= K``, so the off-space
    term errs towards smaller variances, by at most what the preconditioner misses).
    Without a preconditioner (rank 0, ``A = (K + s^2 I) / s^2`` far from ``I``) the
    off-space term is left out: that is plain LOVE, whose variances err upwards.
    Stores ``Q`` ``(N, k)`` and the preconditioner's ``P^{-1/2}`` in thin form
    (``(N, rank)``): ``O(N (k + rank))`` memory, and a test point costs
    ``O(N (k + rank))`` after its kernel column.
    """

    def __init__(self, operator: Any, pre: Any,  # KernelOperator, PivotedCholesky...
                 start: torch.Tensor, steps: int) -> None:
        with torch.no_grad():
            self.pre = pre

            def apply(Vv):
                return self.half_inverse(operator.matmul(self.half_inverse(Vv)))

            if not bool(start.abs().sum() > 0):  # any nonzero start vector will do
                start = torch.ones_like(start)
            Q, T = lanczos(apply, self.half_inverse(start[:, None])[:, 0], steps)
            self.Q = Q
            self.chol_T = cholesky(T, "LOVE tridiagonal", jitter=0.0)[0]

    def half_inverse(self, V: torch.Tensor) -> torch.Tensor:
        """``P^{-1/2} V`` for ``V`` ``(N, C)``."""
        return self.pre.power(V, -0.5)

    def quad_form(self, Kxs: torch.Tensor, *, overwrite: bool = False) -> torch.Tensor:
        """``diag(Kxs^T (K + s^2 I)^{-1} Kxs)`` ``(B,)`` (approximately; see the class).
        ``overwrite``: ``Kxs`` becomes ``P^{-1/2} Kxs`` in place, so no other ``(N, B)``
        matrix is made."""
        v = self.pre.power(Kxs, -0.5, out=Kxs if overwrite else None)
        a = self.Q.mT @ v
        w = torch.linalg.solve_triangular(self.chol_T, a, upper=False)
        quad = w.square().sum(0)
        if self.pre.rank:  # preconditioned: A ~ I off the Krylov space
            quad = quad + torch.linalg.vector_norm(v, dim=0).square() - a.square().sum(0)
        return quad


def lanczos(
    matmul: Callable[[torch.Tensor], torch.Tensor], start: torch.Tensor, steps: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``steps`` Lanczos steps with full reorthogonalisation for the symmetric operator
    ``matmul`` from ``start`` ``(N,)``: ``Q`` ``(N, m)`` orthonormal and the tridiagonal
    ``T = Q^T A Q`` ``(m, m)``, ``m <= steps`` (fewer when the Krylov space is exhausted)."""
    N = start.shape[0]
    m_max = min(int(steps), N)
    Q = start.new_zeros(N, m_max)
    a_s, b_s = [], []
    q = start / start.norm()
    for j in range(m_max):
        Q[:, j] = q
        w = matmul(q[:, None])[:, 0]
        a = torch.dot(q, w)
        w = w - a * q - (b_s[-1] * Q[:, j - 1] if j else 0.0)
        for _ in range(2):  # twice is enough (Parlett's "twice is enough")
            w = w - Q[:, : j + 1] @ (Q[:, : j + 1].mT @ w)
        a_s.append(a)
        b = w.norm()
        if j + 1 == m_max or float(b) <= 1e-10 * float(a.abs()):
            break
        b_s.append(b)
        q = w / b
    m = len(a_s)
    diag = torch.stack(a_s)
    off = torch.stack(b_s[: m - 1]) if m > 1 else diag.new_zeros(0)
    T = torch.diag(diag) + torch.diag(off, 1) + torch.diag(off, -1)
    return Q[:, :m].contiguous(), T

