"""Iterative linear algebra for exact GPs on many points (BBMM, Gardner et al. 2018).

Nothing here forms an ``N x N`` matrix: the kernel matrix is an operator whose products
``(K + s^2 I) V`` are computed a block of rows at a time (:class:`KernelOperator`);
``K^{-1} V`` is preconditioned, batched conjugate gradients (:func:`conjugate_gradients`)
with a rank-k pivoted-Cholesky preconditioner (:class:`PivotedCholeskyPreconditioner`),
and ``log|K|`` is stochastic Lanczos quadrature (SLQ) on the Lanczos tridiagonal matrices
that the same CG run yields (:func:`lanczos_tridiagonals`, :func:`slq_logdet`).
:func:`iterative_log_marginal` is ``log N(Y | 0, K + s^2 I)`` with the stochastic
gradient of BBMM in its backward pass.

The kernel enters as a callable ``cross(A, B) -> K(A, B)`` (so this module, at the
numerics layer, never imports a kernel); one that also offers ``cross.against(Z) ->
block(A, out=None)`` (as :meth:`latentgp.kernels.Kernel.against` does) has the ``Z`` side
of every block prepared once per product, and its blocks written into one buffer.
Random probes come from a caller's seeded ``torch.Generator``, never from the global
generator.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .constants import LOG_2PI
from .linalg_cg import (
    CGProgress,
    CGResult,
    conjugate_gradients,
    lanczos_tridiagonals,
    quadrature_log,
)
from .linalg_love import LoveCache, lanczos
from .linalg_precondition import PivotedCholeskyPreconditioner, pivoted_cholesky
from .options import OptionGroup

__all__ = [  # CG and its record live in linalg_cg, LoveCache and lanczos in linalg_love,
    # the preconditioner in linalg_precondition
    "CGProgress", "CGResult", "IterativeOptions", "IterativeSolver", "KernelOperator", "LoveCache",
    "PivotedCholeskyPreconditioner", "block_rows", "conjugate_gradients", "default_rank",
    "iterative_log_marginal", "iterative_solver", "lanczos", "lanczos_tridiagonals",
    "pivoted_cholesky", "preconditioner_for", "quadrature_log", "rademacher",
    "slq_from_cg", "slq_logdet",
]

#: entries of one ``(rows, N)`` kernel block when ``chunk_rows`` is not given (2^20:
#: 8 MiB in float64, the autograd graph of one block a few times that).  Blocks of 32 MiB
#: and more are above glibc's largest mmap threshold, so every block was a fresh mapping
#: whose page faults cost more system time than the block's arithmetic (N = 10^4, 17
#: columns, one thread: 0.64 s system + 0.55 s user per product at 2^22 entries, 0.58 s
#: user and no faults at 2^20)
CHUNK_ENTRIES = 1 << 20

#: fewest rows of a CPU block whatever N (above N = 16,384 the entries rule gives fewer):
#: a product's GEMMs on blocks of few rows run below speed (N = 41,157, 17 columns, one
#: reused buffer: 25 rows 11.3 CPU s per product on one thread and 4.9-6.3 s wall on two,
#: 64 rows 3.9-4.2 s wall on two, 100 rows 8.8 CPU s on one); 64 rows of 10^5 points are
#: 51 MiB
CHUNK_MIN_ROWS = 64

#: the same off the CPU (2^25: 256 MiB in float64).  On a GPU a block of 2^20 entries is
#: a few microseconds of arithmetic behind a dozen kernel launches, so small blocks leave
#: the device waiting on the host; larger ones amortise the launches, and the device's
#: memory (tens of GB) holds them
CHUNK_ENTRIES_ACCELERATOR = 1 << 25

#: largest preconditioner rank when ``rank`` is not given; the entries of ``L`` ``(N, rank)``
#: it may take (2^23: 64 MiB in float64), and the rank kept whatever N (256: 2 KiB per
#: point, so the factor stays within the memory target of 0.5 GB per 10^5 points
#: together with CG's vectors and the LOVE cache, about 300 more numbers per point)
RANK_MAX, RANK_ENTRIES, RANK_MIN = 1000, 1 << 23, 256


#: the gradient pass (:meth:`KernelOperator.bilinear_grad`) takes blocks of
#: ``chunk_rows // GRAD_BLOCK_DIVISOR`` rows: its autograd graph holds several
#: block-sized tensors at once where a product holds one
GRAD_BLOCK_DIVISOR = 4

#: :attr:`IterativeOptions.product_dtype` values
PRODUCT_DTYPES = ("auto", "float32", "float64")

#: ``product_dtype="auto"`` computes training products in float32 when ``tol`` is at least
#: this: their rounding (about 1e-6 relative) then stays far below the residual asked for,
#: which a tighter tolerance (prediction's 1e-4, the tests' 1e-10) would not promise
SINGLE_PRODUCTS_TOL = 1e-3


def block_rows(num_data: int, device: torch.device | str, chunk_rows: int | None = None) -> int:
    """Rows of one ``(rows, N)`` kernel block for ``N = num_data``: ``chunk_rows`` when
    given, else :data:`CHUNK_ENTRIES` entries per block and at least :data:`CHUNK_MIN_ROWS`
    rows (the CPU) or :data:`CHUNK_ENTRIES_ACCELERATOR` entries (another device), at least
    one row."""
    if chunk_rows:
        return int(chunk_rows)
    N = max(1, int(num_data))
    if torch.device(device).type == "cpu":
        return max(CHUNK_ENTRIES // N, min(CHUNK_MIN_ROWS, N))  # N >= 1: at least one row
    return max(1, CHUNK_ENTRIES_ACCELERATOR // N)


def default_rank(num_data: int) -> int:
    """The preconditioner rank used when :attr:`IterativeOptions.rank` is None:
    ``min(1000, N, max(256, 2^23 // N))`` (1000 up to N = 8,388, 838 at 10^4, 256 from
    32,768 on).  On kin40k (D = 8, scaled noise 0.012, N = 3,000) rank 100 needed 169 CG
    iterations and rank 1,000 needed 23, the pivoted Cholesky (``O(N k^2)``) costing less
    than the products it saved; the SLQ spread falls with the rank too
    (``docs/results/exact_at_scale.md``).  Above 32,768 points the rank is held at 256
    so that the factor (``8 * 256`` bytes per point) fits the memory target."""
    n = max(1, num_data)
    return max(1, min(RANK_MAX, n, max(RANK_MIN, RANK_ENTRIES // n)))

Cross = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

@dataclasses.dataclass(frozen=True, kw_only=True)
class IterativeOptions(OptionGroup):
    """Options of the iterative (CG / Lanczos) path of an exact GP.

    tol: relative residual ``|r| / |b|`` at which CG stops in an evaluation of the
        objective (training, :meth:`~latentgp.models.ExactGP.log_marginal_likelihood`);
        the same for the targets' and the probes' columns.  Looser is not faster to a
        model: on all 41,157 protein rows the default fit at 0.05 took fewer iterations
        per evaluation (61-85 against 86-117) but one more evaluation, and gave test RMSE
        0.535 against 0.520 (design.md).
    predict_tol: the same for the solves of prediction (the predictive mean's
        ``(K + s^2 I)^{-1} y`` and CG variances).
    max_iter: most CG iterations per solve (a solve that stops there is reported, not
        an error: :attr:`CGResult.converged`).
    num_probes: Rademacher probe vectors of the log-determinant estimate and its gradient.
    rank: rank of the pivoted-Cholesky preconditioner (0: none; None: :func:`default_rank`
        of the training size, ``min(1000, 2^25 / N)``).
    seed: seed of the probes; the same probes at every evaluation, so the objective is a
        deterministic function of the parameters (L-BFGS's line search needs that).
    chunk_rows: rows of ``K`` computed at once (None: about 2^20 entries per block and at
        least 64 rows on the CPU, 2^25 entries on an accelerator, :func:`block_rows`).
    variance: how predictive variances are computed: ``"love"`` (default: a Lanczos
        cache built once, :class:`LoveCache`, then ``O(N k)`` per test point) or ``"cg"``
        (a CG solve per prediction chunk: exact to ``tol``, one solve per chunk).
    love_rank: Lanczos steps of the LOVE cache (``k``).
    pretrain_rows: the first fit of an exact GP on the iterative path on more than this
        many points starts with an exact (Cholesky) fit on this many rows drawn at random
        (:func:`latentgp.models.exact.pretrain_subset`), then fine-tunes on all the data
        (0: no pretraining; the fit runs on all the data from the initial values).
    finetune_steps: L-BFGS steps of that fine-tune on all the data when the fit names no
        budget (``max_steps``, ``epochs``, ``tol``); None: until the automatic rule says
        converged.  Pretraining on a subset, then a few full-data steps, is the protocol
        of Wang et al. (2019), "Exact Gaussian processes on a million data points".
    product_dtype: dtype of the kernel blocks and of their products with CG's vectors in
        training evaluations (the vectors, CG's recurrences, the preconditioner, the
        Lanczos matrices, the gradient pass and prediction keep the model's dtype):
        ``"float32"``, ``"float64"``, or ``"auto"`` (default): float32 for a float64
        model whose ``tol`` is at least 1e-3 (:data:`SINGLE_PRODUCTS_TOL`), where the
        products' rounding (about 1e-6 relative; 1e-4 in an RBF exponent at protein's
        trained lengthscales) is orders below what CG is asked for, else the model's
        dtype.  On the CPU a float32 product costs less than half a float64 one (all
        41,157 protein rows at trained lengthscales, two threads: 1.8-2.5 against 5.8 s).
    """

    argument = "iterative"
    written_as = "lg.ExactGP.Iterative"

    tol: float = 1e-2
    max_iter: int = 1000
    num_probes: int = 16
    rank: int | None = None
    seed: int = 0
    chunk_rows: int | None = None
    variance: str = "love"
    love_rank: int = 30
    predict_tol: float = 1e-4
    # 2,100: an N x N float64 block (33.6 MiB) above glibc's largest mmap threshold
    # (32 MiB) is returned to the system when freed (design.md, "exact GP without a Cholesky")
    pretrain_rows: int = 2100
    finetune_steps: int | None = 3
    product_dtype: str = "auto"

    def __post_init__(self) -> None:
        def whole(name, low):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"Iterative: {name} must be an integer >= {low}, got {v!r}")

        for name in ("tol", "predict_tol"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1:
                raise ValueError(f"Iterative: {name} must be in (0, 1), got {v!r}")
        whole("max_iter", 1)
        whole("num_probes", 1)
        if self.rank is not None:
            whole("rank", 0)
        whole("seed", 0)
        if self.chunk_rows is not None:
            whole("chunk_rows", 1)
        if self.variance not in ("love", "cg"):
            raise ValueError(f"Iterative: variance must be 'love' or 'cg', got {self.variance!r}")
        whole("love_rank", 1)
        whole("pretrain_rows", 0)
        if self.pretrain_rows == 1:
            raise ValueError("Iterative: pretrain_rows must be 0 (none) or at least 2, got 1")
        if self.finetune_steps is not None:
            whole("finetune_steps", 1)
        if self.product_dtype not in PRODUCT_DTYPES:
            raise ValueError(
                f"Iterative: product_dtype must be one of {', '.join(map(repr, PRODUCT_DTYPES))},"
                f" got {self.product_dtype!r}"
            )

    def products(self, dtype: torch.dtype) -> torch.dtype:
        """The dtype of the training evaluations' kernel products for a model in ``dtype``
        (see ``product_dtype``)."""
        if self.product_dtype == "auto":
            loose = self.tol >= SINGLE_PRODUCTS_TOL and dtype == torch.float64
            return torch.float32 if loose else dtype
        return getattr(torch, self.product_dtype)


def _times(block: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """``block @ V`` for a row-major ``(rows, N)`` block and a thin ``V`` ``(N, C)``,
    computed as ``(V^T block^T)^T``: the same product, which BLAS runs 2-2.5x faster for
    thin ``V`` (measured at N = 2,000, C = 17, one thread: 30 ms against 71 ms)."""
    return (V.mT @ block.mT).mT


class KernelOperator:
    """``K(X, X) + s^2 I`` as a matrix-free operator, ``X`` ``(N, D)``.

    ``cross(A, B)`` returns the kernel block ``K(A, B)``; products take ``chunk_rows``
    rows of ``K`` at a time, so the largest block in memory is ``(chunk_rows, N)``.
    Where ``cross`` has ``against(Z)`` (a kernel), a product prepares the full side once
    and each block is then only its own rows' work, written into one buffer: on all
    41,157 protein training rows (D = 9, 17 columns, one thread) a product took 8.9-10.7
    CPU s of user time and no system time, against 13.0-13.3 s of user time and 0-6 s of
    system time (page faults) with ``cross`` called per block (blocks of 6 rows: 39 s; of
    100 or 400 rows: 9.2-9.8 s).
    """

    def __init__(
        self,
        cross: Cross,
        X: torch.Tensor,
        noise: torch.Tensor | float,
        *,
        chunk_rows: int | None = None,
        product_dtype: torch.dtype | None = None,
    ) -> None:
        self.cross, self.X = cross, X
        self.noise = noise
        self.chunk_rows = block_rows(X.shape[0], X.device, chunk_rows)
        #: dtype of the kernel blocks and of their products with ``V`` in :meth:`matmul`
        #: (None: ``X``'s); ``V``, the result and the noise term keep ``V``'s dtype
        self.product_dtype = product_dtype
        self._cast_buffer: torch.Tensor | None = None  # matmul's V in product_dtype

    @property
    def size(self) -> int:
        return int(self.X.shape[0])

    def _chunks(self, rows: int | None = None):
        N, rows = self.size, rows or self.chunk_rows
        for start in range(0, N, rows):
            yield slice(start, min(N, start + rows))

    def matmul(self, V: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """``(K + s^2 I) V`` for ``V`` ``(N, C)`` (no autograd graph is kept); ``out``
        (``V``'s shape, not ``V`` itself): written there.  With ``out`` the product
        allocates no ``(N, C)`` matrix (the cast of ``V`` to :attr:`product_dtype` goes
        into a buffer that the operator keeps), so a CG solve that passes its own
        buffers allocates none per iteration."""
        with torch.no_grad():
            out = torch.empty_like(V) if out is None else out
            dtype = self.product_dtype or self.X.dtype
            Vp = V if V.dtype == dtype else self._cast(V, dtype)
            noise = torch.as_tensor(self.noise, dtype=V.dtype, device=V.device)
            against = getattr(self.cross, "against", None)
            if against is None:
                for c in self._chunks():
                    out[c] = _times(self.cross(self.X[c], self.X).to(dtype), Vp)
                return out.addcmul_(V, noise)
            # prepared once per product (so it holds the current parameters), and one
            # buffer for every block: a fresh 8 MiB block per step made glibc map and
            # fault in its pages again and again (N = 41,157, one thread: 0 to 12.6 s of
            # system time per product beside 10-14 s of user time, varying run to run)
            block = against(self.X) if dtype == self.X.dtype else against(self.X, dtype=dtype)
            buf = Vp.new_empty(min(self.chunk_rows, self.size), self.size)
            for c in self._chunks():
                out[c] = _times(block(self.X[c], out=buf[: c.stop - c.start]), Vp)
            return out.addcmul_(V, noise)

    def _cast(self, V: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``V`` in ``dtype``, written into a buffer kept for the next product of the
        same shape (``(N, C)`` in the product dtype; a CG solve's products all have one
        shape)."""
        buf = self._cast_buffer
        if buf is None or buf.shape != V.shape or buf.dtype != dtype or buf.device != V.device:
            self._cast_buffer = None  # release the old one first
            buf = self._cast_buffer = torch.empty(V.shape, dtype=dtype, device=V.device)
        return buf.copy_(V)

    def rows(self, index: torch.Tensor) -> torch.Tensor:
        """Rows ``K(X[index], X)`` ``(len(index), N)`` without the noise."""
        with torch.no_grad():
            return self.cross(self.X[index], self.X)

    def bilinear_grad(
        self, A: torch.Tensor, B: torch.Tensor, inputs: Sequence[torch.Tensor]
    ) -> list[torch.Tensor | None]:
        """Gradients of ``sum(A * (K B))`` (``A``, ``B`` ``(N, C)`` constants) with respect
        to ``inputs`` (tensors that ``cross`` depends on), accumulated one row block at
        a time (:meth:`blockwise_grad`).  The blocks are in ``X``'s dtype whatever
        :attr:`product_dtype` says: float32 blocks were no faster here (protein's 41,157
        rows, 17 columns, two threads: 38.7 against 37.3 s), whose time goes to the
        backward pass through each block's ``O(N D)`` side."""
        return self.blockwise_grad(
            lambda c, block: (A[c] * _times(block, B)).sum(), inputs
        )

    def frobenius_grad(
        self,
        W: torch.Tensor,
        inputs: Sequence[torch.Tensor],
        *,
        diag: Callable[[torch.Tensor], torch.Tensor],
    ) -> list[torch.Tensor | None]:
        """Gradients of ``sum(W * K)`` (``W`` ``(N, N)`` a constant, ``K = K(X, X)``
        without the noise) with respect to ``inputs``, one row block at a time
        (:meth:`blockwise_grad`): the Cholesky path's gradient with ``W = d log p / dK``
        (:mod:`latentgp.models.exact`).  ``diag``: the kernel's ``diag(X) -> (N,)``, which
        supplies ``K``'s diagonal in place of the blocks' diagonal entries (exact
        where a block's distances of a point to itself are only rounding-sized, and
        whatever ``K(X)`` adds to its diagonal alone, e.g. a white-noise term)."""
        Wd = W.diagonal()

        def term(c: slice, block: torch.Tensor) -> torch.Tensor:
            i = torch.arange(c.stop - c.start, device=block.device)
            own = block[i, i + c.start]  # the block's entries K(x_i, x_i)
            return (W[c] * block).sum() + (Wd[c] * (diag(self.X[c]) - own)).sum()

        return self.blockwise_grad(term, inputs)

    def blockwise_grad(
        self,
        term: Callable[[slice, torch.Tensor], torch.Tensor],
        inputs: Sequence[torch.Tensor],
    ) -> list[torch.Tensor | None]:
        """Gradients of ``sum_c term(c, K(X[c], X))`` over row blocks ``c`` (slices of
        ``chunk_rows // GRAD_BLOCK_DIVISOR`` rows) with respect to ``inputs``: each
        block's graph is built, differentiated and freed before the next, so the graph
        never spans more than one block."""
        grads: list[torch.Tensor | None] = [None] * len(inputs)
        for c in self._chunks(max(1, self.chunk_rows // GRAD_BLOCK_DIVISOR)):
            with torch.enable_grad():
                f = term(c, self.cross(self.X[c], self.X))
                gs = torch.autograd.grad(f, inputs, allow_unused=True)
            grads = [
                g if a is None else (a if g is None else a + g)
                for a, g in zip(grads, gs, strict=True)
            ]
        return grads


def rademacher(rows: int, cols: int, generator: torch.Generator, *, like: torch.Tensor):
    """``(rows, cols)`` of independent +-1 from ``generator``, dtype and device of ``like``."""
    bits = torch.randint(0, 2, (rows, cols), generator=generator, device=generator.device)
    return (2.0 * bits - 1.0).to(dtype=like.dtype, device=like.device)


def slq_from_cg(
    result: CGResult,
    columns: Sequence[int],
    Z: torch.Tensor,
    preconditioner: PivotedCholeskyPreconditioner,
) -> torch.Tensor:
    """``log|A|`` from a CG run whose ``columns`` solved against probes ``Z`` ``(N, t)``
    drawn with covariance ``P``: ``log|P| + mean_i |P^{-1/2} z_i|^2 e_1^T log(T_i) e_1``."""
    norms = (Z * preconditioner.solve(Z)).sum(0)
    Ts = lanczos_tridiagonals(result, columns)
    quad = torch.stack([quadrature_log(T) for T in Ts])
    return preconditioner.logdet() + (norms * quad).mean()


def slq_logdet(
    operator: KernelOperator,
    *,
    num_probes: int,
    generator: torch.Generator,
    rank: int = 0,
    diag: torch.Tensor | None = None,
    tol: float = 1e-6,
    max_iter: int = 1000,
) -> tuple[torch.Tensor, CGResult]:
    """SLQ estimate of ``log|K + s^2 I|`` for ``operator`` with ``num_probes`` Rademacher
    probes and a rank-``rank`` pivoted-Cholesky preconditioner (``diag``: ``K``'s
    diagonal, needed when ``rank > 0``).  Returns the estimate and the CG run."""
    pre = preconditioner_for(operator, diag, rank)
    like = operator.X
    W = rademacher(operator.size, num_probes, generator, like=like)
    Z = pre.probes(W)
    res = conjugate_gradients(
        operator.matmul, Z, precondition=pre.solve, tol=tol, max_iter=max_iter,
        buffers=True,
    )
    return slq_from_cg(res, range(num_probes), Z, pre), res


def preconditioner_for(
    operator: KernelOperator, diag: torch.Tensor | None, rank: int | None
) -> PivotedCholeskyPreconditioner:
    """The rank-``rank`` pivoted-Cholesky preconditioner of ``operator`` (None:
    :func:`default_rank` of its size)."""
    X = operator.X
    rank = default_rank(operator.size) if rank is None else rank
    if rank > 0:
        if diag is None:
            raise ValueError("a preconditioner of rank > 0 needs the kernel's diagonal")
        L = pivoted_cholesky(diag.detach(), operator.rows, rank)
    else:
        L = X.new_zeros(X.shape[0], 0)
    noise = torch.as_tensor(operator.noise, dtype=X.dtype, device=X.device).detach()
    return PivotedCholeskyPreconditioner(L, noise)


class _IterativeLogMarginal(torch.autograd.Function):
    """``log N(R | 0, K + s^2 I)`` summed over the columns of ``R`` ``(N, P)``.

    Forward: one batched CG solve of ``[R, Z]`` (``Z``: probes of covariance ``P``, the
    preconditioner), giving ``alpha = K^{-1} R``, ``U = K^{-1} Z`` and the Lanczos
    matrices of the SLQ log-determinant.  Backward (BBMM's estimator):
    ``d log p = 1/2 alpha^T dK alpha - P/2 tr(K^{-1} dK)``, the trace estimated
    without bias by ``mean_i u_i^T dK (P^{-1} z_i)`` (``E[z z^T] = P``), i.e. the gradient
    of ``sum(A * (dK B))`` for ``A = [alpha, U]`` and ``B = [alpha/2, -P/(2t) P^{-1} Z]``,
    taken through the chunked kernel product (:meth:`KernelOperator.bilinear_grad`).
    """

    @staticmethod
    def forward(ctx, spec, noise, R, *params):
        op, opts, diag, gen, info = spec
        N, P = R.shape
        pre = preconditioner_for(op, diag, opts.rank)
        Z = pre.probes(rademacher(N, opts.num_probes, gen, like=R))
        res = conjugate_gradients(
            op.matmul, torch.cat([R.detach(), Z], 1), precondition=pre.solve,
            tol=opts.tol, max_iter=opts.max_iter, buffers=True,
        )
        alpha = res.solution[:, :P]
        logdet = slq_from_cg(res, range(P, P + opts.num_probes), Z, pre)
        info.update(
            iterations=res.iterations, residual=float(res.residual.max()),
            converged=res.converged, logdet=float(logdet), rank=pre.rank,
            seconds=res.seconds,
            product_dtype=str(op.product_dtype).removeprefix("torch."),
            # the largest relative residual after each iteration: the solve's record
            residuals=res.largest_residuals(),
        )
        # (N, P): a starting guess for the next solve (a copy: a view would hold all of A)
        info["solution"] = alpha.clone()
        t = opts.num_probes
        A = res.solution  # [alpha, U]
        # B = [alpha / 2, -P / (2t) P^{-1} Z] filled in place (no concatenated copies)
        B = torch.empty_like(A)
        torch.mul(alpha, 0.5, out=B[:, :P])
        B[:, P:] = pre.solve(Z).mul_(-P / (2.0 * t))
        ctx.op = op
        ctx.save_for_backward(A, B, alpha, *params)
        quad = (R.detach() * alpha).sum()
        return -0.5 * (quad + P * logdet + N * P * LOG_2PI)

    @staticmethod
    def backward(ctx, g):
        A, B, alpha, *params = ctx.saved_tensors
        g_noise = g * (A * B).sum() if ctx.needs_input_grad[1] else None
        g_R = -g * alpha if ctx.needs_input_grad[2] else None
        wanted = [p for p, need in zip(params, ctx.needs_input_grad[3:], strict=True) if need]
        grads = iter(ctx.op.bilinear_grad(A, B, wanted) if wanted else [])
        g_params = []
        for need in ctx.needs_input_grad[3:]:
            gp = next(grads) if need else None
            g_params.append(None if gp is None else g * gp)
        return (None, g_noise, g_R, *g_params)


def iterative_log_marginal(
    cross: Cross,
    X: torch.Tensor,
    noise: torch.Tensor,
    R: torch.Tensor,
    params: Sequence[torch.Tensor],
    *,
    diag: torch.Tensor,
    options: IterativeOptions,
    info: dict[str, Any] | None = None,
) -> torch.Tensor:
    """``log N(R[:, p] | 0, K(X, X) + noise I)`` summed over the columns of ``R`` ``(N, P)``
    by CG and SLQ (never an ``N x N`` matrix), with BBMM's stochastic gradient with respect
    to ``noise`` (a scalar tensor), ``R`` and ``params`` (the tensors ``cross`` depends on,
    e.g. a kernel's parameters).  ``diag``: ``(N,)`` diagonal of ``K`` (for the
    preconditioner).  ``info`` (a dict) receives the CG iterations, the largest final
    residual, whether CG converged, the log-determinant estimate, the solve's seconds,
    ``"residuals"`` (the largest relative residual after each iteration) and
    ``"solution"``, ``(K + s^2 I)^{-1} R`` ``(N, P)`` to CG's tolerance."""
    op = KernelOperator(
        cross, X.detach(), noise.detach(), chunk_rows=options.chunk_rows,
        product_dtype=options.products(X.dtype),
    )
    gen = torch.Generator(device=X.device).manual_seed(options.seed)
    spec = (op, options, diag.detach(), gen, {} if info is None else info)
    return _IterativeLogMarginal.apply(spec, noise, R, *params)


class _Solve(torch.autograd.Function):
    """``A^{-1} B`` by CG with the gradient ``A^{-1} G`` for ``B`` (``A`` symmetric, a
    constant)."""

    @staticmethod
    def forward(ctx, solver, B):
        ctx.solver = solver
        return solver.solve_constant(B)

    @staticmethod
    def backward(ctx, G):
        return None, ctx.solver.solve_constant(G)


class IterativeSolver:
    """Solves with ``K + s^2 I`` at fixed parameters by preconditioned CG to
    ``options.predict_tol``: what an exact GP on the iterative path keeps for prediction
    (in place of a Cholesky factor)."""

    def __init__(
        self, operator: KernelOperator, preconditioner: PivotedCholeskyPreconditioner,
        options: IterativeOptions,
    ) -> None:
        self.operator, self.preconditioner, self.options = operator, preconditioner, options
        self.tol = options.predict_tol
        self.last: CGResult | None = None
        self.love: LoveCache | None = None
        self._columns: torch.Tensor | None = None  # cross_columns' buffer

    def solve_constant(self, B: torch.Tensor, *, x0: torch.Tensor | None = None) -> torch.Tensor:
        """``(K + s^2 I)^{-1} B`` for ``B`` ``(..., N, C)`` (no gradient); ``x0`` (``B``'s
        shape): a starting guess, e.g. the last evaluation's solution."""
        lead, (N, C) = B.shape[:-2], B.shape[-2:]
        flat = B.detach().movedim(-2, 0).reshape(N, -1)
        if x0 is not None:
            x0 = x0.detach().movedim(-2, 0).reshape(N, -1)
        res = conjugate_gradients(
            self.operator.matmul, flat, precondition=self.preconditioner.solve,
            tol=self.tol, max_iter=self.options.max_iter, x0=x0, buffers=True,
        )
        self.last = res
        return res.solution.reshape(N, *lead, C).movedim(0, -2)

    def solve(self, B: torch.Tensor) -> torch.Tensor:
        """``(K + s^2 I)^{-1} B`` for ``B`` ``(..., N, C)``, differentiable in ``B``."""
        return _Solve.apply(self, B)

    def quad_form(self, Kxs: torch.Tensor, *, overwrite: bool = False) -> torch.Tensor:
        """``diag(Kxs^T (K + s^2 I)^{-1} Kxs)`` ``(B,)`` for ``Kxs`` ``(N, B)``: from the LOVE
        cache when there is one, else by a CG solve.  ``overwrite``: ``Kxs`` may be used
        as workspace (LOVE then makes no other ``(N, B)`` matrix)."""
        if self.love is not None:
            return self.love.quad_form(Kxs, overwrite=overwrite)
        return (Kxs * self.solve_constant(Kxs)).sum(0)

    def cross_columns(self, Xs: torch.Tensor) -> torch.Tensor:
        """``K(X, Xs)`` ``(N, B)`` for test rows ``Xs`` ``(B, D)``, no autograd graph.  Where
        the kernel offers ``against``, the columns are written into one buffer that the
        solver keeps and reuses for every later call with at most as many rows (valid
        until the next call): prediction's chunks then allocate no ``(N, B)`` matrix
        each, which the C allocator otherwise keeps resident as its heap grows."""
        op = self.operator
        against = getattr(op.cross, "against", None)
        with torch.no_grad():
            if against is None:
                return op.cross(op.X, Xs)
            N, B = op.size, int(Xs.shape[0])
            if self._columns is None or self._columns.numel() < N * B:
                self._columns = None  # release the old buffer before the larger one
                self._columns = op.X.new_empty(N * B)
            return against(Xs)(op.X, out=self._columns[: N * B].view(N, B))


def iterative_solver(
    cross: Cross,
    X: torch.Tensor,
    noise: torch.Tensor | float,
    *,
    diag: torch.Tensor,
    options: IterativeOptions,
) -> IterativeSolver:
    """An :class:`IterativeSolver` for ``K(X, X) + noise I`` with the preconditioner of
    ``options.rank`` built once."""
    op = KernelOperator(cross, X, noise, chunk_rows=options.chunk_rows)
    return IterativeSolver(op, preconditioner_for(op, diag, options.rank), options)
