"""Robust dense linear algebra: Cholesky with reported jitter, triangular solves.

No explicit inverses anywhere in latentgp: every ``K^{-1} b`` is two triangular solves
against a Cholesky factor computed here.
"""

from __future__ import annotations

import warnings

import torch

from .config import get_config


class CholeskyError(RuntimeError):
    """A matrix stayed non positive definite after the largest jitter allowed."""


class JitterWarning(UserWarning):
    """A Cholesky needed more jitter than the configured default."""


def cholesky(
    A: torch.Tensor,
    name: str = "matrix",
    jitter: float | None = None,
    max_tries: int | None = None,
    upcast: bool = True,
) -> tuple[torch.Tensor, float]:
    """Lower Cholesky factor of a (batch of) symmetric positive definite matrices.

    A jitter ``j * mean(diag(A))`` is added to the diagonal, starting at the configured
    ``jitter`` and growing tenfold while the factorisation fails.  The jitter actually
    used is returned so that callers can record it; a warning is issued when it had to
    grow beyond the first value.

    Parameters
    ----------
    A:
        ``(..., M, M)`` symmetric matrix.
    name:
        Name used in warnings and errors (e.g. ``"Kzz"``).
    jitter:
        First relative jitter (default: ``get_config().jitter``).  ``0`` tries the
        matrix as it is first (for matrices that already include noise), then the
        configured jitter.
    max_tries:
        Number of tenfold increases (default: ``get_config().max_jitter_tries``).
    upcast:
        Factorise float32 input in float64 and cast the factor back.

    Returns
    -------
    L:
        ``(..., M, M)`` lower-triangular factor, same dtype as ``A``.
    jitter_used:
        The relative jitter that made the factorisation succeed.
    """
    cfg = get_config()
    jitter = cfg.jitter if jitter is None else jitter
    max_tries = cfg.max_jitter_tries if max_tries is None else max_tries
    out_dtype = A.dtype
    work = A.to(torch.float64) if (upcast and A.dtype == torch.float32) else A
    if not torch.isfinite(work).all():
        raise CholeskyError(
            f"{name} of size {tuple(A.shape[-2:])} contains NaN or inf entries; "
            "check the inputs and hyperparameters that produced it"
        )
    M = work.shape[-1]
    scale = work.diagonal(dim1=-2, dim2=-1).mean(-1).abs().clamp_min(1e-300)
    eye = torch.eye(M, dtype=work.dtype, device=work.device)
    j = jitter
    for attempt in range(max_tries + 1):
        L, info = torch.linalg.cholesky_ex(work + (j * scale)[..., None, None] * eye)
        if not bool((info > 0).any()):
            if attempt > 0:
                warnings.warn(
                    f"Cholesky of {name} ({M}x{M}) needed relative jitter {j:.1e} "
                    f"(default {jitter:.1e})",
                    JitterWarning,
                    stacklevel=2,
                )
            return L.to(out_dtype), j
        j = get_config().jitter if j == 0 else 10.0 * j
    raise CholeskyError(
        f"Cholesky of {name} ({M}x{M}) failed even with relative jitter {j / 10:.1e}: the "
        "matrix is far from positive definite (duplicated inputs with tiny noise, "
        "extreme lengthscales or NaN parameters are the usual causes)"
    )


def solve_lower(L: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``L^{-1} B`` for lower-triangular ``L`` (``(..., M, M)``) and ``B`` (``(..., M, K)``)."""
    return torch.linalg.solve_triangular(L, B, upper=False)


def solve_upper_t(L: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``L^{-T} B`` for lower-triangular ``L``."""
    return torch.linalg.solve_triangular(L.mT, B, upper=True)


def cho_solve(L: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``(L L^T)^{-1} B`` by two triangular solves."""
    return solve_upper_t(L, solve_lower(L, B))


def logdet_chol(L: torch.Tensor) -> torch.Tensor:
    """``log det(L L^T)`` from a Cholesky factor; shape ``(...)``."""
    return 2.0 * L.diagonal(dim1=-2, dim2=-1).abs().log().sum(-1)
