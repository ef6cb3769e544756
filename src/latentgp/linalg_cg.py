"""Batched, preconditioned conjugate gradients and what a CG run yields: the record of the
solve (:class:`CGResult`, :class:`CGProgress`) and the Lanczos tridiagonal matrices of its
step coefficients (:func:`lanczos_tridiagonals`), with Gauss quadrature of ``log`` on
them (:func:`quadrature_log`).  Plain matrices in, no kernel: the operator and the
preconditioner are callables (:mod:`latentgp.linalg_iterative` builds them for exact GPs).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence

import torch

__all__ = [
    "LOG_EVERY_SECONDS", "CGProgress", "CGResult", "conjugate_gradients",
    "lanczos_tridiagonals", "logger", "quadrature_log",
]

#: where long CG solves report their progress (INFO, at most every
#: :data:`LOG_EVERY_SECONDS`): ``logging.getLogger("latentgp.iterative")``; silent unless
#: the application configures logging (``logging.basicConfig(level=logging.INFO)``)
logger = logging.getLogger("latentgp.iterative")

#: seconds between two progress lines of one solve (a solve that ends sooner logs nothing)
LOG_EVERY_SECONDS = 30.0


@dataclasses.dataclass
class CGResult:
    """What :func:`conjugate_gradients` returns.

    solution: ``(N, C)``.  iterations: iterations run.  residual: ``(C,)`` final
    relative residuals ``|b - A x| / |b|`` (of the recurrence).  converged: every column
    reached ``tol``.  alphas, betas: ``(iterations, C)`` CG step coefficients (zero
    after a column converged).  steps: ``(C,)`` iterations each column took.
    residuals: ``(iterations, C)`` the relative residual of every column after each
    iteration (a converged column keeps its last value): the record of the solve.
    seconds: wall-clock seconds of the solve.
    """

    solution: torch.Tensor
    iterations: int
    residual: torch.Tensor
    converged: bool
    alphas: torch.Tensor
    betas: torch.Tensor
    steps: torch.Tensor
    residuals: torch.Tensor
    seconds: float = 0.0

    def largest_residuals(self) -> list[float]:
        """The largest relative residual over the columns after each iteration."""
        return self.residuals.max(1).values.tolist() if self.iterations else []


@dataclasses.dataclass(frozen=True)
class CGProgress:
    """What a ``monitor`` of :func:`conjugate_gradients` is given after each iteration.

    iteration: iterations done.  residual: ``(C,)`` relative residuals now.  active:
    columns not yet below ``tol``.  tol: the target.  seconds: since the solve began.
    """

    iteration: int
    residual: torch.Tensor
    active: int
    tol: float
    seconds: float

    def describe(self) -> str:
        """One line: iteration, the largest residual against ``tol``, columns left, time."""
        return (f"CG iteration {self.iteration}: largest relative residual "
                f"{float(self.residual.max()):.3g} (tol {self.tol:g}), {self.active} of "
                f"{self.residual.numel()} columns active, {self.seconds:.1f} s")


def conjugate_gradients(
    matmul: Callable[[torch.Tensor], torch.Tensor],
    B: torch.Tensor,
    *,
    precondition: Callable[[torch.Tensor], torch.Tensor] | None = None,
    tol: float | torch.Tensor = 1e-6,
    max_iter: int = 1000,
    x0: torch.Tensor | None = None,
    monitor: Callable[[CGProgress], None] | None = None,
    buffers: bool = False,
) -> CGResult:
    """Preconditioned CG for ``A X = B`` with ``C`` right-hand sides at once (``B``
    ``(N, C)``, ``A`` symmetric positive definite given by ``matmul``); a column stops when
    its relative residual is below ``tol`` (a number, or ``(C,)``: one per column); one
    product with ``A`` per iteration.
    ``x0`` ``(N, C)``: a starting guess (default zero; one more product with ``A``); the
    Lanczos coefficients then belong to the start ``b - A x0``, so a run whose
    coefficients feed SLQ starts from zero.

    The residuals after every iteration are kept (:attr:`CGResult.residuals`);
    ``monitor`` is called with a :class:`CGProgress` after each iteration (e.g. to watch a
    solve whose products take seconds), and a solve that runs longer than
    :data:`LOG_EVERY_SECONDS` logs a progress line to :data:`logger` at that interval.

    ``buffers``: ``matmul`` and ``precondition`` take ``out=`` (an ``(N, C)`` matrix,
    never their input) and write their result there.  The solve then keeps three
    ``(N, C)`` work matrices besides ``X``, ``R`` and ``P`` and allocates no ``(N, C)``
    matrix per iteration; its per-iteration records grow by doubling.  Large
    allocations freed every iteration, between small ones that live on, let a C
    allocator's heap grow through a solve (glibc on Linux: about 0.9 MB per iteration
    at 20,000 rows and 17 columns, design.md)."""
    if B.ndim != 2:
        raise ValueError(f"B must be (N, C), got shape {tuple(B.shape)}")
    if x0 is not None and x0.shape != B.shape:
        raise ValueError(f"x0 must have B's shape {tuple(B.shape)}, got {tuple(x0.shape)}")
    if precondition is None:
        def M(V, out=None):
            return V.clone() if out is None else out.copy_(V)
    else:
        M = precondition
    with torch.no_grad():
        N, C = B.shape
        tols = torch.as_tensor(tol, dtype=B.dtype, device=B.device)
        if tols.ndim > 1 or tols.numel() not in (1, C):
            raise ValueError(f"tol must be a number or one per column ({C}), got shape "
                             f"{tuple(tols.shape)}")
        tols = tols.reshape(-1).expand(C)
        if not bool((tols > 0).all()):
            raise ValueError(f"tol must be positive, got {tol!r}")
        bnorm = B.norm(dim=0)
        active = bnorm > 0
        safe = torch.where(active, bnorm, torch.ones_like(bnorm))
        if x0 is None:
            X = torch.zeros_like(B)
            R = B.clone()
        else:
            X = x0.detach().clone()
            R = B - matmul(X)
        # the work matrices: AP, the preconditioned residual and a product's scratch
        # (with buffers); without, each (N, C) matrix is released as soon as it is used
        work = [torch.empty_like(B) for _ in range(3)] if buffers else None
        Zr = M(R, out=work[1]) if buffers else M(R)
        P = Zr.clone()
        rz = _column_dots(R, Zr, work)
        if not buffers:
            del Zr
        record = _Records(C, 3, max_iter, like=B)  # a, b and the residuals per iteration
        steps = torch.zeros(C, dtype=torch.long, device=B.device)
        res = R.norm(dim=0) / safe
        it = 0
        start = last_log = time.perf_counter()
        while bool(active.any()) and it < max_iter:
            AP = matmul(P, out=work[0]) if buffers else matmul(P)
            pap = _column_dots(P, AP, work)
            a = torch.where(active, rz / torch.where(active, pap, 1.0), 0.0)
            # in place, without (N, C) temporaries
            X.addcmul_(P, a)
            R.addcmul_(AP, a, value=-1.0)
            del AP
            Zr = M(R, out=work[1]) if buffers else M(R)
            rz_new = _column_dots(R, Zr, work)
            b = torch.where(active, rz_new / torch.where(active, rz, 1.0), 0.0)
            P.mul_(b).add_(Zr)
            del Zr
            rz = torch.where(active, rz_new, rz)
            steps += active.long()
            res = torch.where(active, R.norm(dim=0) / safe, res)
            active = active & (res > tols)
            record.append(it, a, b, res)
            it += 1
            now = time.perf_counter()
            if monitor is not None or now - last_log >= LOG_EVERY_SECONDS:
                progress = CGProgress(iteration=it, residual=res, active=int(active.sum()),
                                      tol=float(tols.max()), seconds=now - start)
                if monitor is not None:
                    monitor(progress)
                if now - last_log >= LOG_EVERY_SECONDS:
                    logger.info("%s", progress.describe())
                    last_log = now
        alphas, betas, residuals = record.rows(it)
        return CGResult(
            solution=X,
            iterations=it,
            residual=res,
            converged=not bool((res > tols).any()),
            alphas=alphas,
            betas=betas,
            steps=steps,
            residuals=residuals,
            seconds=time.perf_counter() - start,
        )


def _column_dots(A: torch.Tensor, B: torch.Tensor, work: list | None) -> torch.Tensor:
    """``sum(A * B, 0)`` ``(C,)``, the product written into ``work[2]`` when given."""
    if work is None:
        return (A * B).sum(0)
    return torch.mul(A, B, out=work[2]).sum(0)


class _Records:
    """``count`` rows of ``(C,)`` per CG iteration, stored in preallocated ``(rows, C)``
    matrices that double when full (a few allocations per solve, not three per
    iteration)."""

    def __init__(self, C: int, count: int, max_iter: int, *, like: torch.Tensor) -> None:
        self.max_iter = max_iter
        self.store = like.new_zeros(count, min(max_iter, 64), C)

    def append(self, it: int, *values: torch.Tensor) -> None:
        if it == self.store.shape[1]:
            grown = self.store.new_zeros(self.store.shape[0], min(self.max_iter, 2 * it),
                                         self.store.shape[2])
            grown[:, :it] = self.store
            self.store = grown
        for row, v in zip(self.store, values, strict=True):
            row[it] = v

    def rows(self, it: int) -> tuple[torch.Tensor, ...]:
        """Each record's first ``it`` rows ``(it, C)`` (copies: the store is released)."""
        return tuple(row[:it].clone() for row in self.store)


def lanczos_tridiagonals(result: CGResult, columns: Sequence[int]) -> list[torch.Tensor]:
    """The Lanczos tridiagonal matrix ``T`` ``(m, m)`` of each of ``columns`` from the CG
    coefficients (Saad 2003, 6.7.3): ``T_jj = 1/a_j + b_{j-1}/a_{j-1}``,
    ``T_{j,j+1} = sqrt(b_j)/a_j``.  With a preconditioner ``P`` it is the tridiagonal of
    ``P^{-1/2} A P^{-1/2}`` started at ``P^{-1/2} b / |P^{-1/2} b|``."""
    out = []
    for c in columns:
        m = int(result.steps[c])
        a, b = result.alphas[:m, c], result.betas[:m, c]
        diag = 1.0 / a
        diag[1:] = diag[1:] + b[:-1] / a[:-1]
        off = b[:-1].sqrt() / a[:-1]
        out.append(torch.diag(diag) + torch.diag(off, 1) + torch.diag(off, -1))
    return out


def quadrature_log(T: torch.Tensor) -> torch.Tensor:
    """``e_1^T log(T) e_1`` (Gauss quadrature of ``log`` from a Lanczos matrix ``T``)."""
    if T.shape[0] == 0:
        return T.new_zeros(())
    evals, evecs = torch.linalg.eigh(T)
    return (evecs[0].square() * evals.clamp_min(1e-300).log()).sum()
