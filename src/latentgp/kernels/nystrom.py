"""The Nyström view of inducing inputs (seed 004, notes §3.1).

With inducing inputs Z ``(M, D)`` and ``Kzz = L L^T``, the rank-M Nyström approximation of
the Gram matrix of X ``(N, D)`` is

    Kxx ~= Qxx = Kxz Kzz^{-1} Kzx = F F^T,     F = Kxz L^{-T} = (L^{-1} Kzx)^T   (N, M)

computed in O(N M^2 + M^3) time without forming Kxx.  ``Kxx - Qxx`` is positive
semi-definite (a Schur complement), so its trace norm is its trace and its spectral norm
is its largest eigenvalue.  :func:`nystrom_error` compares Q with the exact Kxx on small
data (it forms N x N matrices), next to the best rank-M approximation (truncated
eigendecomposition, Eckart-Young) for reference.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..linalg import cholesky, solve_lower
from ..validation import check_inputs
from .base import Kernel

__all__ = ["NystromApproximation", "nystrom", "nystrom_error", "best_rank_error"]


@dataclasses.dataclass
class NystromApproximation:
    """``Kxx ~= factor @ factor.T``.

    Attributes
    ----------
    factor: ``F = Kxz L^{-T}``, shape ``(*batch, N, M)``.
    chol_zz: ``L``, lower Cholesky factor of Kzz, ``(*batch, M, M)``.
    jitter: relative jitter added to Kzz's diagonal by the Cholesky.
    """

    factor: torch.Tensor
    chol_zz: torch.Tensor
    jitter: float

    @property
    def rank(self) -> int:
        return self.factor.shape[-1]

    def diag(self) -> torch.Tensor:
        """``diag(Qxx)``, ``(*batch, N)``, in O(N M)."""
        return self.factor.square().sum(-1)

    def dense(self) -> torch.Tensor:
        """``Qxx`` as a dense ``(*batch, N, N)`` matrix."""
        return self.factor @ self.factor.mT


def _as_tensor(a: Any, name: str, like: torch.Tensor | None = None, dtype=None) -> torch.Tensor:
    dtype = dtype if dtype is not None else (like.dtype if like is not None else torch.float64)
    return check_inputs(a, name=name, dtype=dtype, device=None if like is None else like.device)


def _kernel_for(kernel: Kernel, X: torch.Tensor) -> Kernel:
    if not isinstance(kernel, Kernel):
        raise ValueError(f"kernel must be a latentgp Kernel, got {type(kernel).__name__}")
    if not kernel.built:
        kernel.build(X.shape[1], (), X.dtype, X.device)
    elif kernel.input_dim != X.shape[1]:
        raise ValueError(
            f"the kernel was built for {kernel.input_dim} input dimensions but X has {X.shape[1]}"
        )
    return kernel


def nystrom(kernel: Kernel, X: Any, Z: Any, dense: bool = False):
    """Rank-M Nyström approximation of ``kernel(X, X)``.

    Parameters
    ----------
    kernel: a latentgp kernel (built with its defaults if it has no parameters yet).
    X: ``(N, D)`` inputs; Z: ``(M, D)`` inducing inputs (any points, not only rows of X).
    dense: also return the ``(N, N)`` matrix Qxx.

    Returns
    -------
    :class:`NystromApproximation` (factors), or ``(approximation, Qxx)`` when ``dense``.
    """
    Xt = _as_tensor(X, "X")
    Zt = _as_tensor(Z, "Z", like=Xt)
    if Zt.shape[1] != Xt.shape[1]:
        raise ValueError(f"Z has {Zt.shape[1]} columns but X has {Xt.shape[1]}")
    kernel = _kernel_for(kernel, Xt)
    with torch.no_grad():
        L, jitter = cholesky(kernel(Zt), "Kzz")
        F = solve_lower(L, kernel(Zt, Xt)).mT  # (N, M)
    approx = NystromApproximation(F, L, jitter)
    return (approx, approx.dense()) if dense else approx


def _norms(E: torch.Tensor, eig: torch.Tensor) -> dict[str, torch.Tensor]:
    return {
        "frobenius": torch.linalg.matrix_norm(E, "fro"),
        "spectral": eig.abs().amax(-1),
        "trace": eig.abs().sum(-1),
    }


def nystrom_error(kernel: Kernel, X: Any, Z: Any) -> dict[str, Any]:
    """Errors of the Nyström approximation ``Kxx - Qxx`` for small data (forms N x N).

    Returns a dict with the ``frobenius``, ``spectral`` and ``trace`` (nuclear) norms of
    ``Kxx - Qxx``, the same norms relative to those of Kxx (``relative_*``), and the
    norms of the best rank-M approximation error (``best_*``, from the eigenvalues of Kxx
    beyond the M-th) for comparison.  Values are floats for an un-batched kernel.
    """
    Xt = _as_tensor(X, "X")
    if Xt.shape[0] > 20_000:
        raise ValueError(f"nystrom_error forms N x N matrices: N={Xt.shape[0]} is too large")
    approx, Q = nystrom(kernel, Xt, Z, dense=True)
    with torch.no_grad():
        K = kernel(Xt)
        E = K - Q
        E = 0.5 * (E + E.mT)
        err = _norms(E, torch.linalg.eigvalsh(E))
        eig_k = torch.linalg.eigvalsh(0.5 * (K + K.mT))
        ref = _norms(K, eig_k)
        best = best_rank_error(eig_k, approx.rank)
    out: dict[str, Any] = dict(err)
    out.update({f"relative_{k}": err[k] / ref[k] for k in err})
    out.update({f"best_{k}": v for k, v in best.items()})
    out["rank"] = approx.rank
    out["jitter"] = approx.jitter
    return {k: (float(v) if torch.is_tensor(v) and v.ndim == 0 else v) for k, v in out.items()}


def best_rank_error(eigenvalues: torch.Tensor, rank: int) -> dict[str, torch.Tensor]:
    """Norms of ``K - K_M`` for the best rank-``rank`` approximation K_M of a PSD matrix
    with (ascending, as from ``eigvalsh``) ``eigenvalues`` ``(*batch, N)``."""
    tail = eigenvalues.clamp_min(0.0).sort(-1, descending=True).values[..., rank:]
    zero = torch.zeros(tail.shape[:-1], dtype=tail.dtype, device=tail.device)
    if tail.shape[-1] == 0:
        return {"frobenius": zero, "spectral": zero, "trace": zero}
    return {
        "frobenius": tail.square().sum(-1).sqrt(),
        "spectral": tail[..., 0],
        "trace": tail.sum(-1),
    }
