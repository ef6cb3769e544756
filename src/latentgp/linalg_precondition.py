"""The pivoted-Cholesky preconditioner of the iterative exact GP: a rank-``k`` factor
``L L^T ~ K`` from ``k`` rows of ``K`` (:func:`pivoted_cholesky`) and the preconditioner
``P = L L^T + s^2 I`` with its solves, log-determinant and square roots by the Woodbury
identity and a thin eigendecomposition (:class:`PivotedCholeskyPreconditioner`).  Plain
matrices in: the rows come from a callable (:mod:`latentgp.linalg_iterative` passes its
kernel operator's).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .linalg import cho_solve, cholesky, logdet_chol

__all__ = ["PivotedCholeskyPreconditioner", "pivoted_cholesky"]


def pivoted_cholesky(
    diag: torch.Tensor,
    rows: Callable[[torch.Tensor], torch.Tensor],
    rank: int,
    *,
    rel_tol: float = 0.0,
) -> torch.Tensor:
    """Rank-``k`` pivoted Cholesky factor ``L`` ``(N, k)`` with ``L L^T ~ K`` (Harbrecht et
    al. 2012), from the diagonal ``diag`` ``(N,)`` of ``K`` and ``rows(index)`` ->
    ``K(index, :)`` ``(len(index), N)``: ``k`` rows of ``K`` are evaluated.  Stops early when
    the trace of the remainder falls to ``rel_tol`` times the trace of ``K``."""
    N = diag.shape[0]
    k = min(int(rank), N)
    L = diag.new_zeros(k, N)
    d = diag.detach().clone()
    total = float(d.sum())
    for m in range(k):
        i = int(torch.argmax(d))
        if float(d[i]) <= 0.0 or float(d.sum()) <= rel_tol * total:
            return L[:m].mT
        row = rows(torch.tensor([i], device=diag.device))[0]
        lm = (row - L[:m].mT @ L[:m, i]) / d[i].sqrt()
        L[m] = lm
        d = (d - lm.square()).clamp_min(0.0)
        d[i] = 0.0
    return L.mT  # a view: no second copy of the factor


class PivotedCholeskyPreconditioner:
    """``P = L L^T + s^2 I`` (``L`` ``(N, k)``, ``k = 0`` allowed): solves by the Woodbury
    identity ``P^{-1} V = (V - L C^{-1} L^T V) / s^2`` with ``C = s^2 I_k + L^T L``,
    ``log|P| = (N - k) log s^2 + log|C|``, and the symmetric square roots ``P^{+-1/2}``
    from the thin eigendecomposition ``L L^T = U diag(e) U^T`` (``U`` ``(N, r)``,
    ``r <= k``): ``P^{p} = s^{2p} I + U diag((e + s^2)^p - s^{2p}) U^T``."""

    def __init__(self, L: torch.Tensor, noise: torch.Tensor | float) -> None:
        self.L = L
        self.noise = torch.as_tensor(noise, dtype=L.dtype, device=L.device).detach()
        k = L.shape[1]
        C = L.mT @ L + self.noise * torch.eye(k, dtype=L.dtype, device=L.device)
        self.chol_C = cholesky(C, "preconditioner core", jitter=0.0)[0]
        self._eig: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def rank(self) -> int:
        return int(self.L.shape[1])

    def solve(self, V: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """``P^{-1} V`` for ``V`` ``(N, C)``; ``out`` (``V``'s shape, not ``V`` itself):
        written there, with no ``(N, C)`` matrix allocated."""
        if self.rank == 0:
            return torch.div(V, self.noise, out=out) if out is not None else V / self.noise
        # (L C^{-1} L^T V - V) negated and divided in place: one (N, C) matrix, no temporaries
        small = cho_solve(self.chol_C, self.L.mT @ V)  # (k, C)
        W = torch.matmul(self.L, small, out=out) if out is not None else self.L @ small
        return W.sub_(V).neg_().div_(self.noise)

    def logdet(self) -> torch.Tensor:
        """``log|P|``."""
        N, k = self.L.shape
        return (N - k) * self.noise.log() + logdet_chol(self.chol_C)

    def eigen(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(V, e)``: ``L^T L = V diag(e) V^T`` (``V`` ``(k, r)``, ``e`` ``(r,)`` positive,
        directions with ``e <= 1e-12 max(e)`` dropped), so that ``L L^T = U diag(e) U^T``
        with ``U = L V diag(e)^{-1/2}`` ``(N, r)`` orthonormal; ``U`` itself is never
        stored (it would be a second ``(N, k)`` matrix): products with it go through
        ``L``."""
        if self._eig is None:
            with torch.no_grad():
                if self.rank == 0:
                    self._eig = (self.L.new_zeros(0, 0), self.L.new_zeros(0))
                else:
                    evals, V = torch.linalg.eigh(self.L.mT @ self.L)
                    keep = evals > 1e-12 * evals.max().clamp_min(1e-300)
                    self._eig = (V[:, keep], evals[keep])
        return self._eig

    def power(self, V: torch.Tensor, p: float, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """``P^p V`` for ``V`` ``(N, C)`` and ``p`` = 1/2 or -1/2:
        ``s^{2p} V + L W diag(((e + s^2)^p - s^{2p}) / e) W^T L^T V`` (``(W, e)`` from
        :meth:`eigen`), ``O(N k C)``.  ``out`` (``V``'s shape, ``V`` itself allowed):
        written there, with no other ``(N, C)`` matrix made."""
        W, e = self.eigen()
        small = None
        if e.shape[0]:
            scale = ((e + self.noise) ** p - self.noise**p) / e
            small = W @ (scale[:, None] * (W.mT @ (self.L.mT @ V)))  # (k, C), before out
        out = torch.mul(V, self.noise**p, out=out) if out is not None else V * self.noise**p
        return out if small is None else out.addmm_(self.L, small)

    def probes(self, W: torch.Tensor) -> torch.Tensor:
        """``Z = P^{1/2} W`` ``(N, t)`` from Rademacher ``W`` ``(N, t)``: ``E[Z Z^T] = P``, and
        the preconditioned start vectors ``P^{-1/2} Z = W`` are Rademacher, so the SLQ
        estimate of ``log|P^{-1/2} A P^{-1/2}|`` is Hutchinson's with Rademacher probes
        (variance ``2 sum_{i != j} F_ij^2 / t``, ``F = log(P^{-1/2} A P^{-1/2})``: the
        diagonal of ``F``, most of it at small noise, adds none)."""
        return self.power(W, 0.5)
