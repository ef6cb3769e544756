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
    eye = None  # made only when a jitter is added (an M x M matrix: 800 MB at M = 10^4)
    j = jitter
    for attempt in range(max_tries + 1):
        if j != 0 and eye is None:
            eye = torch.eye(M, dtype=work.dtype, device=work.device)
        # the jitter's gradient reaches A's diagonal through ``scale``; written as a sum
        # with the identity, as before, so that fits keep their rounding bit for bit
        shifted = work if j == 0 else work + (j * scale)[..., None, None] * eye
        L, info = torch.linalg.cholesky_ex(shifted)
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


def add_diagonal(A: torch.Tensor, d: torch.Tensor | float) -> torch.Tensor:
    """``A + diag(d)`` for ``A`` ``(..., M, M)`` and ``d`` broadcastable to ``(..., M)``, as
    one new matrix (autograd flows to both): the same values as ``A + d * I`` without the
    two ``M x M`` temporaries of the identity and its multiple.  The result is contiguous
    whatever ``A``'s strides, as the sum was: a factorisation reads one triangle, and a
    transposed copy of a matrix that is symmetric only to rounding would give another
    factor."""
    out = A.clone(memory_format=torch.contiguous_format)
    out.diagonal(dim1=-2, dim2=-1).add_(d)
    return out


# torch's triangular solve hands LAPACK column-major matrices.  A row-major right-hand
# side ``B`` (M, K) is such a matrix only as ``B^T`` (K, M), so ``L^{-1} B`` is solved as
# ``X L^T = B^T`` (a right-sided solve on the transposed view), which needs no copy of
# ``B`` or of the result: for M = 256 and K = 16,000 one solve takes 39 ms against 55 ms
# for the left-sided form (one thread), the same values to round-off.


def solve_lower(L: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``L^{-1} B`` for lower-triangular ``L`` (``(..., M, M)``) and ``B`` (``(..., M, K)``)."""
    return torch.linalg.solve_triangular(L.mT, B.mT, upper=True, left=False).mT


def solve_upper_t(L: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``L^{-T} B`` for lower-triangular ``L``."""
    return torch.linalg.solve_triangular(L, B.mT, upper=False, left=False).mT


def cho_solve(L: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``(L L^T)^{-1} B`` by two triangular solves."""
    return solve_upper_t(L, solve_lower(L, B))


def logdet_chol(L: torch.Tensor) -> torch.Tensor:
    """``log det(L L^T)`` from a Cholesky factor; shape ``(...)``."""
    return 2.0 * L.diagonal(dim1=-2, dim2=-1).abs().log().sum(-1)


class _WeightedGram(torch.autograd.Function):
    """``A diag(w) A^T`` with a backward pass that uses the product's symmetry.

    Autograd of ``(A * w) @ A.mT`` takes two ``M x M x N`` products for the gradient of
    ``A`` (one per factor); the symmetric form needs one:
    ``dA = (G + G^T) A diag(w)``, ``dw_i = a_i^T G a_i`` (column ``i`` of ``A``).
    """

    @staticmethod
    def forward(ctx, A: torch.Tensor, w: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(A, w)
        return (A if w is None else A * w) @ A.mT

    @staticmethod
    def backward(ctx, G: torch.Tensor):
        A, w = ctx.saved_tensors
        GA = (G + G.mT) @ A  # (M, N): the one big product
        dA = dw = None
        if ctx.needs_input_grad[0]:
            dA = GA if w is None else GA * w
        if w is not None and ctx.needs_input_grad[1]:
            dw = 0.5 * (A * GA).sum(-2)  # a_i^T (G + G^T) a_i / 2 = a_i^T G a_i
        return dA, dw


def weighted_gram(A: torch.Tensor, w: torch.Tensor | None = None) -> torch.Tensor:
    """``A diag(w) A^T`` ``(M, M)`` for ``A`` ``(M, N)`` and weights ``w`` ``(N,)`` (default 1).

    Same value as ``(A * w) @ A.mT``; under autograd its backward pass costs one
    ``M x M x N`` product instead of two.
    """
    return _WeightedGram.apply(A, w)


class _WhitenedSums(torch.autograd.Function):
    """``(A A^T, A Y)`` with ``A = L^{-1} K``: the data sums of a homoscedastic sparse GP.

    Forward: one triangular solve against the ``N`` columns of ``K`` and one Gram product.
    Backward: ``dA = (G_P + G_P^T) A + G_q Y^T`` (one ``M x M x N`` product),
    ``dK = L^{-T} dA`` (one solve), and ``dL = -tril(L^{-T} dA A^T)`` where
    ``dA A^T = (G_P + G_P^T) P + G_q q^T`` is formed from ``M x M`` quantities, which
    saves the ``M x M x N`` product autograd would spend on it.  Three such products per
    evaluation instead of five, with the forward values of the per-column solve.
    """

    @staticmethod
    def forward(ctx, L: torch.Tensor, K: torch.Tensor, Y: torch.Tensor):
        A = solve_lower(L, K)  # (M, N)
        P = A @ A.mT
        q = A @ Y
        ctx.save_for_backward(L, A, Y, P, q)
        return P, q

    @staticmethod
    def backward(ctx, G_P: torch.Tensor, G_q: torch.Tensor):
        L, A, Y, P, q = ctx.saved_tensors
        Gs = G_P + G_P.mT
        dA = Gs @ A + G_q @ Y.mT  # (M, N)
        dL = dK = dY = None
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[0]:
            dK = solve_upper_t(L, dA)  # L^{-T} dA
        if ctx.needs_input_grad[0]:
            dAAt = Gs @ P + G_q @ q.mT  # dA A^T
            dL = -solve_upper_t(L, dAAt).tril()
        if ctx.needs_input_grad[2]:
            dY = A.mT @ G_q
        return dL, (dK if ctx.needs_input_grad[1] else None), dY


def whitened_sums(
    L: torch.Tensor, K: torch.Tensor, Y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(A A^T, A Y)`` for ``A = L^{-1} K``: ``L`` ``(M, M)`` lower-triangular, ``K``
    ``(M, N)``, ``Y`` ``(N, P)``; returns ``(M, M)`` and ``(M, P)``.

    Same values as forming ``A`` with :func:`solve_lower`; under autograd the backward
    pass costs two ``M x M x N`` products and one solve where plain autograd spends four
    products and one solve.
    """
    return _WhitenedSums.apply(L, K, Y)




class BlockCholesky:
    """A lower Cholesky factor grown by rank-k updates, kept in two blocks:

        L = [[L0, 0], [T1, T2]],    T = [T1, T2]  (k, n0 + k),

    ``L0`` the (contiguous) factor of the first ``n0`` rows, ``T`` the ``k`` rows appended
    since (``T2`` lower triangular).  Appending never copies ``L0``: it costs
    ``O(n^2 k)`` (one solve with the factor) plus rewriting the ``k x n`` tail, and solves
    with ``L`` run block by block on contiguous matrices.
    """

    def __init__(self, L0: torch.Tensor, T: torch.Tensor | None = None) -> None:
        self.L0, self.T = L0, T

    @property
    def size(self) -> int:
        return self.L0.shape[-1] + (0 if self.T is None else self.T.shape[0])

    def solve_lower(self, B: torch.Tensor) -> torch.Tensor:
        """``L^{-1} B`` for ``B`` ``(..., n, K)``."""
        n0 = self.L0.shape[-1]
        V0 = solve_lower(self.L0, B[..., :n0, :])
        if self.T is None:
            return V0
        T1, T2 = self.T[:, :n0], self.T[:, n0:].contiguous()
        return torch.cat([V0, solve_lower(T2, B[..., n0:, :] - T1 @ V0)], -2)

    def solve_upper_t(self, B: torch.Tensor) -> torch.Tensor:
        """``L^{-T} B`` for ``B`` ``(..., n, K)``."""
        n0 = self.L0.shape[-1]
        if self.T is None:
            return solve_upper_t(self.L0, B)
        T1, T2 = self.T[:, :n0], self.T[:, n0:].contiguous()
        X1 = solve_upper_t(T2, B[..., n0:, :])
        return torch.cat([solve_upper_t(self.L0, B[..., :n0, :] - T1.mT @ X1), X1], -2)

    def solve_constant(self, B: torch.Tensor) -> torch.Tensor:
        """``(L L^T)^{-1} B`` for ``B`` ``(..., n, K)`` (the name the iterative solver's
        solve has, so a prediction cache of either kind answers it)."""
        return self.solve_upper_t(self.solve_lower(B))

    def append(self, K12: torch.Tensor, K22: torch.Tensor, name: str = "matrix") -> BlockCholesky:
        """The factor of ``[[A, K12], [K12^T, K22]]`` (``A = L L^T``, ``K12`` ``(n, k)``):

            L_new = [[L, 0], [B^T, chol(K22 - B^T B)]],    B = L^{-1} K12,

        no refactorisation of ``A``.  ``K22 - B^T B`` is factorised by :func:`cholesky`
        (same jitter policy; ``name`` appears in its messages).  ``self`` is unchanged."""
        k = K22.shape[-1]
        B = self.solve_lower(K12)
        S = K22 - B.mT @ B
        L22, _ = cholesky(0.5 * (S + S.mT), f"Schur complement of {name}", jitter=0.0)
        rows = torch.cat([B.mT, L22], 1)  # (k, n + k)
        if self.T is None:
            return BlockCholesky(self.L0, rows)
        old = torch.cat([self.T, self.T.new_zeros(self.T.shape[0], k)], 1)
        return BlockCholesky(self.L0, torch.cat([old, rows]))

    def dense(self) -> torch.Tensor:
        """``L`` as one ``(n, n)`` matrix."""
        if self.T is None:
            return self.L0
        n0 = self.L0.shape[-1]
        top = torch.cat([self.L0, self.L0.new_zeros(n0, self.T.shape[0])], 1)
        return torch.cat([top, self.T])


def cholesky_append(
    L: torch.Tensor, K12: torch.Tensor, K22: torch.Tensor, name: str = "matrix"
) -> torch.Tensor:
    """Cholesky factor of ``[[A, K12], [K12^T, K22]]`` from ``L = chol(A)`` without
    refactorising ``A``, as one dense matrix (:meth:`BlockCholesky.append`)."""
    return BlockCholesky(L).append(K12, K22, name).dense()
