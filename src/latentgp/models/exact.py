"""Exact GP regression: ``y = f + eps``, ``f ~ GP(m, k)``, Gaussian noise.

log p(y) = -1/2 r^T (K + s^2 I)^{-1} r - 1/2 log|K + s^2 I| - N/2 log 2 pi,
with ``r = y - m(X)`` (``m``: the prior mean, zero by default), computed from one
Cholesky factor (O(N^3) time, O(N^2) memory), or, on the iterative path
(``solver="cg"``, and ``"auto"`` above :attr:`ExactGP.cholesky_max` points), by
preconditioned conjugate gradients and stochastic Lanczos quadrature with matrix-free,
chunked kernel products (:mod:`latentgp.linalg_iterative`; O(N^2) time per iteration,
O(N) memory).  Prediction reuses the factor or the solver (cached until the parameters
change).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from ..config import get_config
from ..constants import LOG_2PI
from ..kernels import Kernel
from ..likelihoods import Likelihood
from ..linalg import BlockCholesky, add_diagonal, cho_solve, cholesky
from ..linalg_iterative import (
    IterativeOptions,
    IterativeSolver,
    KernelOperator,
    LoveCache,
    block_rows,
    iterative_log_marginal,
    iterative_solver,
)
from ..validation import keyword_only_after_first
from .base import GPModel, register_model, require_gaussian_likelihood
from .pathwise import PathwiseSampling, exact_paths


class _GaussianLogMarginal(torch.autograd.Function):
    """``log N(Y | 0, K)`` summed over the P columns of Y, given ``L = chol(K)``, for each
    matrix of a batch: ``K, L`` ``(..., N, N)``, ``Y`` ``(..., N, P)`` -> ``(...)``.

    Autograd through the Cholesky would cost several N^3 operations in the backward pass;
    the closed form ``d/dK = (alpha alpha^T - P K^{-1}) / 2`` (``alpha = K^{-1} Y``) needs
    one ``cholesky_inverse`` (LAPACK potri, N^3 / 3 + N^3 / 3 flops) instead.  This is the
    one place latentgp forms an inverse: the trace term of the gradient needs every entry
    of ``K^{-1}``.
    """

    @staticmethod
    def forward(ctx, K, L, Y):
        N, P = Y.shape[-2:]
        alpha = cho_solve(L, Y)
        logdet = 2.0 * L.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        ctx.save_for_backward(L, alpha)
        ctx.P = P
        return -0.5 * ((Y * alpha).sum((-2, -1)) + P * logdet + N * P * LOG_2PI)

    @staticmethod
    def backward(ctx, g):
        L, alpha = ctx.saved_tensors
        gK = gY = None
        g = g[..., None, None]
        if ctx.needs_input_grad[0]:  # in place: the inverse is the one N x N matrix made
            gK = torch.cholesky_inverse(L).mul_(-ctx.P)
            if gK.dim() == 2:  # alpha alpha^T added inside the product, no N x N temporary
                gK.addmm_(alpha, alpha.mT)
            else:
                gK.add_(alpha @ alpha.mT)
            gK.mul_(0.5 * g)
        if ctx.needs_input_grad[2]:
            gY = -g * alpha
        return gK, None, gY


def gaussian_log_marginal(K: torch.Tensor, L: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """``log N(Y[..., p] | 0, K)`` summed over the columns p: ``K`` ``(..., N, N)`` with its
    Cholesky factor ``L`` (taken as a constant: the gradient flows to ``K`` and ``Y`` by the
    closed form), ``Y`` ``(..., N, P)``; returns ``(...)`` (a scalar for one matrix)."""
    return _GaussianLogMarginal.apply(K, L, Y)


class _CholeskyLogMarginal(torch.autograd.Function):
    """``log N(R | 0, K + s^2 I)`` summed over the columns of ``R`` ``(N, P)`` from one
    Cholesky factor, for one ``(N, N)`` matrix ``K = K(X, X)``, with its gradient with
    respect to ``s^2``, ``R`` and the kernel's parameters and no autograd graph of ``K``.

    Forward: ``K`` (computed by the caller without a graph) takes the noise on its
    diagonal in place and is factorised; the factor ``L`` and ``alpha = (K + s^2 I)^{-1} R``
    are kept.  Backward: ``W = (alpha alpha^T - P (K + s^2 I)^{-1}) / 2 = d log p / dK``
    (one ``cholesky_inverse``, as :class:`_GaussianLogMarginal`), ``d log p / ds^2 =
    tr W``, and the kernel's parameters get the gradient of ``sum(W * K)`` a row block at
    a time (:meth:`~latentgp.linalg_iterative.KernelOperator.frobenius_grad`).  Two
    ``N x N`` matrices of its own are alive at once (``K`` and ``L``, then ``L`` and
    ``W``), and torch's ``cholesky_ex`` and ``cholesky_inverse`` each take a third as
    workspace: three at the peak, where autograd through the kernel held six
    (``docs/design.md``, "The Cholesky path's memory").
    """

    @staticmethod
    def forward(ctx, spec, noise, R, *params):
        op, held, diag, info = spec
        K = held.pop()  # the caller keeps no reference: K is freed once factorised
        K.diagonal().add_(noise)
        L, info["jitter"] = cholesky(K, "K + noise", jitter=0.0)
        del K
        N, P = R.shape
        alpha = cho_solve(L, R)
        logdet = 2.0 * L.diagonal().log().sum()
        ctx.op, ctx.diag, ctx.P = op, diag, P
        ctx.save_for_backward(L, alpha, *params)
        return -0.5 * ((R * alpha).sum() + P * logdet + N * P * LOG_2PI)

    @staticmethod
    def backward(ctx, g):
        L, alpha, *params = ctx.saved_tensors
        W = torch.cholesky_inverse(L).mul_(-ctx.P)
        W.addmm_(alpha, alpha.mT).mul_(0.5 * g)  # g d log p / dK, no other N x N matrix
        g_noise = W.diagonal().sum() if ctx.needs_input_grad[1] else None
        g_R = -g * alpha if ctx.needs_input_grad[2] else None
        needs = ctx.needs_input_grad[3:]
        wanted = [p for p, need in zip(params, needs, strict=True) if need]
        grads = iter(ctx.op.frobenius_grad(W, wanted, diag=ctx.diag) if wanted else [])
        return (None, g_noise, g_R, *(next(grads) if need else None for need in needs))


def cholesky_log_marginal(
    kernel: Kernel,
    X: torch.Tensor,
    noise: torch.Tensor,
    R: torch.Tensor,
    *,
    info: dict[str, Any] | None = None,
) -> torch.Tensor | None:
    """``log N(R[:, p] | 0, K(X, X) + noise I)`` summed over the columns of ``R`` ``(N, P)``
    by one Cholesky factor, differentiable with respect to ``noise`` (a one-element
    tensor), ``R`` and the kernel's parameters, without the kernel's autograd graph of
    ``N x N`` intermediates (:class:`_CholeskyLogMarginal`); ``info["jitter"]`` receives
    the jitter the factorisation needed.

    Returns None where this form does not apply, and the caller then differentiates
    through the kernel as usual: ``X`` needs its own gradient; ``noise`` is not one
    number; the kernel's parameters are not its own ``nn.Parameter`` s (inside
    ``torch.func.functional_call``); the kernel's blocks ``K(X[c], X)``, which the
    gradient is taken through, are not the rows of its ``K(X)`` off the diagonal; or
    its ``diag(X)`` is not the diagonal of ``K(X)`` (both compared to ``sqrt(eps)`` of
    the largest entry, on the first :data:`ROWS_COMPARED` rows and on the whole
    diagonal).  The diagonal's gradient comes from ``diag(X)``: exact where the blocks'
    distances of a point to itself are only rounding-sized (tiny trial lengthscales of
    a line search), and it carries a term that a kernel adds to ``K(X)``'s diagonal
    alone (white noise)."""
    if X.requires_grad or noise.numel() != 1 or X.ndim != 2:
        return None
    params = [p for p in kernel.parameters() if p.requires_grad]
    if not all(isinstance(p, torch.nn.Parameter) for p in params):
        # torch.func.functional_call puts plain tensors in the module for the call only;
        # the backward pass, which evaluates the kernel again, would see its own again
        return None
    op = KernelOperator(kernel, X.detach(), noise.detach())
    N = X.shape[0]
    with torch.no_grad():
        K = kernel(X)
        if K.shape != (N, N):
            return None
        # the largest |entry| without an N x N temporary
        scale = max(float(K.amax()), -float(K.amin())) if N else 0.0
        tol = torch.finfo(K.dtype).eps ** 0.5 * scale
        b = min(ROWS_COMPARED, N)
        gap = op.rows(torch.arange(b, device=X.device)) - K[:b]
        gap[torch.arange(b), torch.arange(b)] = 0.0
        d = kernel.diag(X).expand(N)
        if not (float(gap.abs().max()) <= tol
                and float((d - K.diagonal()).abs().max()) <= tol):
            return None
    spec = (op, [K.contiguous()], kernel.diag, {} if info is None else info)
    del K, gap, d
    return _CholeskyLogMarginal.apply(spec, noise.reshape(()), R, *params)


#: rows of ``K(X)`` that :func:`cholesky_log_marginal` compares with the kernel's blocks
ROWS_COMPARED = 8


def pretrain_subset(num_data: int, rows: int, seed: int | None) -> torch.Tensor:
    """Indices ``(rows,)`` of the rows that :meth:`ExactGP.fit` pretrains on: the first
    ``rows`` of a permutation of ``range(num_data)`` drawn by a private generator seeded
    with ``seed`` (None: 0), in increasing order."""
    gen = torch.Generator().manual_seed(0 if seed is None else int(seed))
    return torch.randperm(num_data, generator=gen)[:rows].sort().values


#: Relative change of the objective per point below which a full-batch L-BFGS fit of an
#: exact GP counts a step as calm (the convergence rule's ``rtol``; the library-wide
#: deterministic default is 1e-7).  Lengthscales of irrelevant inputs grow without bound
#: along an ever flatter marginal likelihood: at 1e-7 the diabetes set stopped 0.06 nats
#: below scikit-learn's optimum (lengthscales ~70 where scikit-learn reaches its bound
#: 1e5); at 1e-9 (about L-BFGS-B's default ``factr`` of scikit-learn) it reaches it.
EXACT_RTOL = 1e-9


class ExactGaussianGP(GPModel):
    """What the exact Gaussian-noise regressions (:class:`ExactGP`, and
    :class:`~latentgp.models.BatchedExactGP` for many at once) share: a Gaussian
    likelihood only, the training data stored for prediction (buffers ``X_train``,
    ``y_train`` of rank :attr:`data_ranks`), full-batch L-BFGS to :data:`EXACT_RTOL`.
    """

    default_optimizer = "lbfgs"
    default_lr = 1.0
    supports_minibatch = False
    #: ranks of the stored ``X_train`` and ``y_train`` (one GP: ``(N, D)``, ``(N,)``)
    data_ranks: tuple[int, int] = (2, 1)
    #: the kernels taken, and how to say so when another is given
    kernel_type: type = Kernel
    kernel_requirement = "any kernel"
    #: what the refusal of a non-Gaussian likelihood advises instead
    non_gaussian_advice = "use SVGP for other likelihoods"

    @keyword_only_after_first()
    def __init__(
        self,
        kernel: str | Kernel | None = "rbf",
        *,
        likelihood: str | Likelihood = "gaussian",
        **common: Any,
    ) -> None:
        super().__init__(kernel, likelihood, **common)
        require_gaussian_likelihood(self, self.non_gaussian_advice)
        if not isinstance(self.kernel, self.kernel_type):
            raise ValueError(
                f"{type(self).__name__} takes {self.kernel_requirement}, got "
                f"{type(self.kernel).__name__}"
            )
        rank_x, rank_y = self.data_ranks
        self.register_buffer("X_train", torch.zeros((0,) * rank_x, dtype=self.dtype_))
        self.register_buffer("y_train", torch.zeros((0,) * rank_y, dtype=self.dtype_))

    def _default_fit_args(self, N: int) -> dict[str, Any]:
        return {"optimizer": "lbfgs", "lr": 1.0, "convergence": {"rtol": EXACT_RTOL}}


@register_model
class ExactGP(PathwiseSampling, ExactGaussianGP):
    """Exact Gaussian-process regression (Gaussian likelihood only).

    Multi-output targets ``(N, P)`` share the kernel and noise.  Trains with L-BFGS on the
    full data by default.
    Common keywords (:class:`~latentgp.models.base.GPModel`): ``normalize_y``, ``device``,
    ``dtype``, ``noise_variance``.

    solver: ``"cholesky"`` (one dense factor: exact, O(N^3) time and O(N^2) memory),
        ``"cg"`` (the iterative path: conjugate gradients with a pivoted-Cholesky
        preconditioner, stochastic Lanczos quadrature for ``log|K|``, matrix-free chunked
        kernel products, never an ``N x N`` matrix) or ``"auto"`` (default: Cholesky up
        to :attr:`cholesky_max` = 10,000 training points, CG above; ``"cholesky"`` is
        accepted up to :attr:`max_num_data` = 50,000).
    iterative: the options of the iterative path, an :class:`ExactGP.Iterative`
        (:class:`~latentgp.linalg_iterative.IterativeOptions`) or a dict of its fields:
        CG ``tol``, ``max_iter``, ``num_probes``, preconditioner ``rank``, probe ``seed``,
        ``chunk_rows``, and ``variance`` (``"love"``: a Lanczos cache of ``love_rank``
        steps; ``"cg"``: a CG solve per prediction chunk).  Predictive means are CG
        solves (exact to ``tol``) either way.  :attr:`last_cg` holds the last
        evaluation's CG iterations, residual, log-determinant estimate, seconds and
        record of residuals per iteration; a solve longer than 30 s logs its progress
        to the ``latentgp.iterative`` logger (INFO).
    """

    paths_builder = staticmethod(exact_paths)
    #: largest training set accepted by the Cholesky path (an N x N factor of 50,000
    #: points is 20 GB in float64)
    max_num_data = 50_000
    #: ``solver="auto"`` factorises up to this many training points and iterates above.
    #: Measured crossover (kin40k, one thread, CPU seconds per evaluation with gradient,
    #: exact_at_scale.md): at N = 3,000 the Cholesky evaluation took 0.47x the CG one, at
    #: N = 10^4 1.2x (54 s against 46 s) and 6.6 GB peak against 0.73 GB, so the factor
    #: is kept where it is the faster (and exact) path.  Those Cholesky figures are of
    #: autograd through the kernel; with the block-wise gradient (cholesky_log_marginal)
    #: an evaluation at N = 10^4 took 31 against 37-41 CPU s and 2.3 against 4.6 GB above
    #: its start (exact_cholesky_memory.md)
    cholesky_max = 10_000
    #: the options of the iterative path (``lg.ExactGP.Iterative(tol=..., rank=...)``)
    Iterative = IterativeOptions
    SOLVERS = ("auto", "cholesky", "cg")

    @keyword_only_after_first()
    def __init__(
        self,
        kernel: str | Kernel | None = "rbf",
        *,
        solver: str = "auto",
        iterative: IterativeOptions | dict[str, Any] | None = None,
        **common: Any,
    ) -> None:
        if solver not in self.SOLVERS:
            raise ValueError(f"ExactGP: solver must be one of {self.SOLVERS}, got {solver!r}")
        options = IterativeOptions() if iterative is None else IterativeOptions.parse(iterative)
        super().__init__(kernel, **common)
        self.solver = solver
        self.iterative = options
        self.last_cg: dict[str, Any] = {}
        #: the last CG evaluation's ``(K + s^2 I)^{-1} r`` ``(N, P)``: the starting guess
        #: of the prediction's solve (any guess gives the same solution to ``predict_tol``)
        self._warm_start: torch.Tensor | None = None

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "solver": self.solver,
                "iterative": self.iterative.to_config()}

    def solver_for(self, num_data: int) -> str:
        """``"cholesky"`` or ``"cg"``: the path taken for ``num_data`` training points."""
        if self.solver == "auto":
            return "cholesky" if num_data <= self.cholesky_max else "cg"
        return self.solver

    def _build(self, input_dim: int, output_dim: int, num_data: int = 0) -> None:
        super()._build(input_dim, output_dim)
        self.kernel.build(input_dim, (), self.dtype_, self.device_)
        self.X_train = torch.zeros(num_data, input_dim, dtype=self.dtype_)
        shape = (num_data,) if output_dim == 1 else (num_data, output_dim)
        self.y_train = torch.zeros(shape, dtype=self.dtype_)
        self.to(dtype=self.dtype_, device=self.device_)

    def _build_args(self):
        return {**super()._build_args(), "num_data": int(self.X_train.shape[0])}

    def _validate_sizes(self, N: int) -> None:
        if self.solver_for(N) == "cholesky" and N > self.max_num_data:
            raise ValueError(
                f"ExactGP on {N} points with solver='cholesky' needs an {N}x{N} matrix; use "
                f"solver='cg' (or 'auto'), or SVGP or SparseGP, for N > {self.max_num_data}"
            )

    def _init_from_data(self, X, y):
        super()._init_from_data(X, y)
        self._store(X, y)

    def fit(self, X, y=None, **kwargs):
        """:meth:`GPModel.fit <latentgp.models.base.GPModel.fit>`; on the iterative path
        (``solver="cg"``, or ``"auto"`` above :attr:`cholesky_max`) the first fit on more
        than ``iterative.pretrain_rows`` points runs in two stages (Wang et al. 2019):

        1. *pretrain*: an exact fit (``solver="cholesky"``, L-BFGS to convergence) on
           ``pretrain_rows`` rows drawn at random (:func:`pretrain_subset` of the fit's
           ``seed``), from the initial values of all the data, with the targets scaled
           as for all the data;
        2. *fine-tune*: the usual fit on all the data by CG and SLQ from the subset's
           hyperparameters, for ``iterative.finetune_steps`` L-BFGS steps unless the
           call names a budget (``max_steps``, ``epochs``, ``tol``): the fit's options
           apply to this stage.

        ``history_`` describes the fine-tune, and ``history_.stages`` both stages (rows,
        solver, steps, reason, wall and CPU seconds of this process, final objective).
        A fit of a built model (calling ``fit`` again), a resumed one and a fit on an
        out-of-core source do not pretrain."""
        stages = self._pretrain(X, y, kwargs)
        if stages and not any(kwargs.get(k) is not None for k in ("max_steps", "epochs", "tol")):
            kwargs = {**kwargs, "max_steps": self.iterative.finetune_steps}
        t0, c0 = time.perf_counter(), time.process_time()
        super().fit(X, y, **kwargs)
        if stages:
            h = self.history_
            stages.append({
                "stage": "finetune", "rows": int(self.X_train.shape[0]), "solver": "cg",
                "steps": h.steps, "reason": h.reason, "seconds": time.perf_counter() - t0,
                "cpu_seconds": time.process_time() - c0,
                "objective": h.objective[-1] if h.objective else None,
                "cg_iterations": self.last_cg.get("iterations"),
            })
            h.stages = stages
            h.events.append(
                f"pretrained on {stages[0]['rows']} of {stages[1]['rows']} rows by Cholesky "
                f"({stages[0]['steps']} steps, {stages[0]['reason']}), then "
                f"{h.steps} full-data step(s) by CG"
            )
        return self

    def _pretrain(self, X, y, kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        """The subset stage of :meth:`fit` when it applies (see there); returns its record
        in a list (empty when it does not apply)."""
        rows = self.iterative.pretrain_rows
        if self.built or rows == 0 or kwargs.get("resume") or y is None:
            return []
        Xt, yt = self.check_training_data(X, y)
        N = Xt.shape[0]
        if self.solver_for(N) != "cg" or N <= rows:
            return []
        seed = kwargs.get("seed")
        self.initialize_training(Xt, yt, seed=seed)
        sub = self.clone()
        sub.solver = "cholesky"
        idx = pretrain_subset(N, rows, seed)
        t0, c0 = time.perf_counter(), time.process_time()
        sub.fit(Xt[idx], yt[idx], seed=seed, progress=kwargs.get("progress"))
        data = ("X_train", "y_train")
        self.load_state_dict(
            {k: v for k, v in sub.state_dict().items() if k not in data}, strict=False
        )
        h = sub.history_
        return [{
            "stage": "pretrain", "rows": rows, "solver": "cholesky", "steps": h.steps,
            "reason": h.reason, "seconds": time.perf_counter() - t0,
            "cpu_seconds": time.process_time() - c0,
            "objective": h.objective[-1] if h.objective else None,
        }]

    def objective(self, X, y, num_data):
        """Exact log marginal likelihood of the (scaled) targets; needs the full batch."""
        if X.shape[0] != num_data:
            raise ValueError("the exact GP objective needs the full data set, not a minibatch")
        self._store(X, y)
        return self._log_marginal(X, y)

    def _store(self, X, y):
        if self.X_train.shape != X.shape or not torch.equal(self.X_train, X):
            self.X_train = X.detach().clone()
        if self.y_train.shape != y.shape or not torch.equal(self.y_train, y):
            self.y_train = y.detach().clone()

    def _log_marginal(self, X, y):
        N = X.shape[0]
        if self.solver_for(N) == "cg":
            params = [p for p in self.kernel.parameters() if p.requires_grad]
            if torch.is_grad_enabled() and not all(
                    isinstance(p, torch.nn.Parameter) for p in params):
                raise NotImplementedError(
                    "the iterative path's gradient evaluates the kernel again in the backward "
                    "pass, after torch.func.functional_call has put the module's own "
                    "parameters back: its gradient with respect to the tensors passed to "
                    "functional_call is not available (use solver='cholesky' up to "
                    f"{self.max_num_data:,} points, or the module's parameters)")
            info: dict[str, Any] = {}
            value = iterative_log_marginal(
                self.kernel, X, self.likelihood.variance, self._residual(X, y.reshape(N, -1)),
                params,
                diag=self.kernel.diag(X), options=self.iterative, info=info,
            )
            # the solve (N, P), kept as the prediction solve's starting guess
            self._warm_start = info.pop("solution")
            self.last_cg = info
            return value
        R = self._residual(X, y.reshape(N, -1))
        if torch.is_grad_enabled():
            info: dict[str, Any] = {}
            value = cholesky_log_marginal(self.kernel, X, self.likelihood.variance, R,
                                          info=info)
            if value is not None:
                self.last_jitter = info["jitter"]
                return value
        K = add_diagonal(self.kernel(X), self.likelihood.variance)
        with torch.no_grad():
            L, self.last_jitter = cholesky(K.detach(), "K + noise", jitter=0.0)
        return gaussian_log_marginal(K, L, R)

    def log_marginal_likelihood(self) -> float:
        """log p(y) of the training targets in their original units."""
        self._require_built()
        with torch.no_grad():
            v = self._log_marginal(self.X_train, self.y_train)
        return float(v) - self.X_train.shape[0] * self._log_scale_sum()

    def _compute_cache(self):
        X, Y = self.X_train, self.y_train.reshape(self.X_train.shape[0], -1)
        N = X.shape[0]
        if self.solver_for(N) == "cg":
            solver = iterative_solver(
                self.kernel, X, self.likelihood.variance.detach(), diag=self.kernel.diag(X),
                options=self.iterative,
            )
            R = self._residual(X, Y)
            warm = getattr(self, "_warm_start", None)  # the last evaluation's solve
            warm = warm if warm is not None and warm.shape == R.shape else None
            alpha = solver.solve_constant(R, x0=warm)
            last = solver.last
            self.last_cg = {"iterations": last.iterations,
                            "residual": float(last.residual.max()),
                            "converged": last.converged, "seconds": last.seconds,
                            "residuals": last.largest_residuals()}
            if self.iterative.variance == "love":
                solver.love = LoveCache(solver.operator, solver.preconditioner, R[:, 0],
                                        self.iterative.love_rank)
            return solver, alpha
        K = add_diagonal(self.kernel(X), self.likelihood.variance)
        L, _ = cholesky(K, "K + noise", jitter=0.0)
        alpha = cho_solve(L, self._residual(X, Y))  # (N, P)
        return BlockCholesky(L), alpha

    def _chunk_width(self) -> int:
        return int(self.X_train.shape[0])

    def prediction_chunk_rows(self, chunk_size: int | None = None) -> int:
        """Test rows per prediction chunk.  On the iterative path with LOVE variances, no
        ``chunk_size`` given and none configured: the rows of one kernel block of the
        training products (:func:`~latentgp.linalg_iterative.block_rows`, ``chunk_rows``
        of the options), so that prediction holds no ``(N, rows)`` intermediate larger
        than the training products' blocks.  The general rule's 256-row minimum held
        about three ``(N, 256)`` intermediates (N = 3 x 10^4: 204 MB above the cached
        solver, 23 MB with 34-row chunks, the same CPU time; about 0.7 GB at N = 10^5).
        With ``variance="cg"`` each chunk is a CG solve, so the general rule stays."""
        X_train = getattr(self, "X_train", None)
        N = None if X_train is None else int(X_train.shape[0])
        if (N is None or chunk_size or get_config().chunk_size or self.solver_for(N) != "cg"
                or self.iterative.variance != "love"):
            return super().prediction_chunk_rows(chunk_size)
        return block_rows(N, self.X_train.device, self.iterative.chunk_rows)

    def _predict_f_chunk(self, Xs, cache):
        L, alpha = cache
        iterative = isinstance(L, IterativeSolver)
        # (N, B); without autograd on the iterative path, in the solver's reused buffer,
        # which the quadratic form then overwrites (the mean is taken first)
        reuse = iterative and not torch.is_grad_enabled()
        Kxs = L.cross_columns(Xs) if reuse else self.kernel(self.X_train, Xs)
        mean = self._with_mean(Xs, Kxs.mT @ alpha)  # (B, P)
        if iterative:
            quad = L.quad_form(Kxs, overwrite=reuse)
        else:
            quad = L.solve_lower(Kxs).square().sum(0)
        var = (self.kernel.diag(Xs) - quad).clamp_min(1e-12)
        return mean, var[:, None].expand_as(mean)

    def _predict_f_full(self, Xs, cache):
        L, alpha = cache
        Kxs = self.kernel(self.X_train, Xs)
        mean = self._with_mean(Xs, Kxs.mT @ alpha)
        if isinstance(L, IterativeSolver):
            cov = self.kernel(Xs) - Kxs.mT @ L.solve(Kxs)
        else:
            V = L.solve_lower(Kxs)
            cov = self.kernel(Xs) - V.mT @ V  # (..., B, B)
        return mean, cov[..., None, :, :].expand(*cov.shape[:-2], mean.shape[-1], *cov.shape[-2:])


    # ---------------------------------------------------------------- new data --
    def set_data(self, X: Any, y: Any) -> ExactGP:
        """Replace the training data by ``(X, y)`` keeping the hyperparameters and the
        target scaling (no training); the posterior is refactorised on the next prediction.
        Returns ``self``.  The model must be fitted (or built) once."""
        self._require_built()
        Xt = self._check_X(X)
        self._store(Xt, self._scale_y(self._check_y(y, Xt.shape[0])))
        self._cache = None
        return self

    def condition_on(self, X_new: Any, y_new: Any) -> ExactGP:
        """A new ExactGP whose data are the training data plus ``(X_new, y_new)``, at the
        same hyperparameters and target scaling; this model is left unchanged.

        The cached factor ``L = chol(K + s^2 I)`` is extended by a rank-k block update
        (:meth:`~latentgp.linalg.BlockCholesky.append`), ``O(N^2 k)`` instead of a new
        ``O((N + k)^3)`` factorisation; the result equals ``set_data`` on all the data.
        The factor is kept as a :class:`~latentgp.linalg.BlockCholesky`: the fitted
        model's factor and the rows appended since, so no update copies the big block.
        On the iterative path there is no factor: the new model holds all the data and
        solves afresh on its first prediction.
        """
        self._require_built()
        Xn = self._check_X(X_new, "X_new")
        yn = self._scale_y(self._check_y(y_new, Xn.shape[0], "y_new"))
        L, alpha = self.prediction_cache()
        new = self.clone()
        if isinstance(L, IterativeSolver):  # no factor to extend: the new data as they are
            new._store(torch.cat([self.X_train, Xn]), torch.cat([self.y_train, yn]))
            new._cache = None
            return new
        with torch.no_grad():
            k = Xn.shape[0]
            K22 = self.kernel(Xn) + self.likelihood.variance * torch.eye(
                k, dtype=Xn.dtype, device=Xn.device
            )
            K12 = self.kernel(self.X_train, Xn)
            L_new = L.append(K12, K22, "K + noise")
            new.X_train = torch.cat([self.X_train, Xn])
            new.y_train = torch.cat([self.y_train, yn])
            # alpha = K_new^{-1} y by the block inverse (Schur complement S = L22 L22^T):
            # alpha_2 = S^{-1} (y_2 - K12^T alpha_1), alpha_1 = alpha_1 - L^{-T} B alpha_2
            rows = L_new.T[-k:]
            B, L22 = rows[:, : L.size].mT, rows[:, L.size :]
            a2 = cho_solve(L22, self._residual(Xn, yn.reshape(k, -1)) - K12.mT @ alpha)
            a1 = alpha - L.solve_upper_t(B @ a2)
            new._set_prediction_cache((L_new, torch.cat([a1, a2])))
        return new
