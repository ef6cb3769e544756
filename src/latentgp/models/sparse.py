"""Classic sparse GP regression with inducing inputs Z (seed 004, notes §3.2-3.3).

Every method replaces the prior covariance of the training values by a low-rank-plus-
diagonal matrix built from the Nyström matrix ``Qxx = Kxz Kzz^{-1} Kzx``:

=======  ============================  =====================================================
method   training prior cov(f_X)       objective (to maximise)
=======  ============================  =====================================================
sor      Qxx                           log N(y | 0, Qxx + s^2 I)
dtc      Qxx                           log N(y | 0, Qxx + s^2 I)            (same as sor)
fitc     Qxx + diag(Kxx - Qxx)         log N(y | 0, Qxx + diag(Kxx - Qxx) + s^2 I)
vfe      exact prior, approx. post.    log N(y | 0, Qxx + s^2 I) - tr(Kxx - Qxx) / (2 s^2)
=======  ============================  =====================================================

(sor is the blog's "DIC", deterministic inducing conditional / subset of regressors;
vfe is Titsias' collapsed lower bound on log p(y).)

Whitened, numerically stable O(N M^2) form (notes §3.2).  With ``Kzz = L L^T``,

    A = L^{-1} Kzx                             (M, N),   Qxx = A^T A
    Lam = s^2 1   or   diag(Kxx) - colsum(A*A) + s^2 (fitc)          (N,)
    B = I + A Lam^{-1} A^T,   b = A Lam^{-1} y,   B = L_B L_B^T,   c = L_B^{-1} b
    log N(y | 0, A^T A + diag(Lam)) = -N/2 log 2pi - sum log diag L_B - 1/2 sum log Lam
                                      - 1/2 y^T Lam^{-1} y + 1/2 c^T c

``B``, ``b`` and four scalars are sums over data points, so they are accumulated over
row chunks of X: time O(N M^2), memory O(chunk * M + M^2).  During training each chunk
is gradient-checkpointed (for large N M), so the autograd graph also holds only one chunk
at a time.  The ``M x M x N`` work of one objective + gradient evaluation is three
products for sor/dtc/vfe (``linalg.whitened_sums``: the solve, the Gram product and one
product in its hand-written backward pass) and four for fitc (``linalg.weighted_gram``),
where plain autograd of the same formulas spends five.

Predictions (the posterior over the whitened inducing values is N(B^{-1} b, B^{-1})):
with ``a_* = L^{-1} k_Z(x_*)``,

    mean_* = a_*^T B^{-1} b
    var_*  = a_*^T B^{-1} a_*                              (sor: the prior is Q** too)
    var_*  = k_** - a_*^T a_* + a_*^T B^{-1} a_*             (dtc, fitc, vfe)

For vfe these are the predictive of q(u) at Titsias' optimum, identical to dtc's
(notes §3.3); the methods differ in how the hyperparameters and Z are learned.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from ..constants import LOG_2PI
from ..inducing import (
    check_inducing_sizes,
)
from ..kernels import Kernel
from ..likelihoods import Gaussian, Likelihood
from ..linalg import cho_solve, cholesky, solve_lower, weighted_gram, whitened_sums
from ..validation import check_positive_int, keyword_only_after_first
from .base import GPModel, register_model
from .inducing_inputs import InducingInputs

METHODS = ("sor", "dtc", "fitc", "vfe")
_METHOD_ALIASES = {"dic": "sor", "titsias": "vfe", "sgpr": "vfe"}


def _method_name(method: Any) -> str:
    if not isinstance(method, str):
        raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
    key = method.lower()
    key = _METHOD_ALIASES.get(key, key)
    if key not in METHODS:
        raise ValueError(f"unknown sparse GP method {method!r}; choose one of {list(METHODS)}")
    return key


def low_rank_evidence(
    S: torch.Tensor,
    b: torch.Tensor,
    sum_log_lam: torch.Tensor,
    y_lam_y: torch.Tensor,
    *,
    num_data: int,
) -> torch.Tensor:
    """``sum_p log N(y_p | 0, A^T A + diag(Lam))`` from the data sums of the module
    docstring: ``S = A Lam^-1 A^T`` ``(M, M)``, ``b = A Lam^-1 Y`` ``(M, P)``, the scalars
    ``sum log Lam`` and ``sum_np Y_np^2 / Lam_n``, for ``num_data`` rows.

    The one closed form behind every collapsed Gaussian bound: SparseGP's methods (VFE
    subtracts its trace term) and the Bayesian GPLVM, whose ``S`` and ``b`` are the
    whitened psi statistics.
    """
    M, P = b.shape
    B = torch.eye(M, dtype=S.dtype, device=S.device) + S
    LB, _ = cholesky(B, "I + A Lam^-1 A^T", jitter=0.0)
    c = solve_lower(LB, b)
    logdet_half = LB.diagonal().log().sum()
    out = -0.5 * (num_data * P * LOG_2PI + P * sum_log_lam + y_lam_y - c.square().sum())
    return out - P * logdet_half


@register_model
class SparseGP(InducingInputs, GPModel):
    """Sparse GP regression (Gaussian likelihood): SoR, DTC, FITC or VFE.

    Parameters
    ----------
    method: ``"sor"`` (alias ``"dic"``), ``"dtc"``, ``"fitc"`` or ``"vfe"`` (Titsias).
    num_inducing: M (ignored when ``Z`` is given).
    kernel: name or :class:`~latentgp.kernels.Kernel`.
    Z: initial inducing inputs ``(M, D)``; default: k-means++ on the training inputs.
    learn_inducing: optimise Z along with the hyperparameters.
    inducing_init: ``"kmeans"``, ``"random"`` or ``"greedy"`` (when Z is not given).
    chunk_size: rows of X per chunk of the O(N M^2) sums (default ``max(2048, 2^20 / M)``).
    normalize_y, device, dtype: see :class:`~latentgp.models.base.GPModel`.

    The objective is a full-data quantity: training is full batch (L-BFGS by default,
    stopped by the deterministic convergence rule under a ceiling of 1,000 steps;
    ``optimizer="adam"`` works too, with ``batch_size`` left at N).  Targets
    ``(N, P)`` are P independent outputs sharing the kernel, noise and Z.

    After ``fit`` the model keeps the M x M posterior statistics (not the data); they
    belong to the hyperparameters at the end of training.  :meth:`set_data` recomputes
    them for other data or hand-set hyperparameters.
    Common keywords (:class:`~latentgp.models.base.GPModel`): ``normalize_y``, ``device``,
    ``dtype``, ``noise_variance``.
    """

    default_optimizer = "lbfgs"
    default_lr = 1.0
    #: checkpoint the chunks (recompute them in the backward pass) when N * M exceeds this
    #: (2^26: about 0.7 GB of autograd graph in float64).  Below it the O(N M) graph fits
    #: easily and recomputing would only cost time: at N = 36,000 and M = 512 (18.4e6
    #: elements) checkpointing saved 0.2 GB of peak memory and cost 40% more time per
    #: objective + gradient evaluation (VFE 3.8 s against 2.7 s, FITC 5.5 s against 4.0 s).
    checkpoint_min_elements = 2**26

    @keyword_only_after_first()
    def __init__(
        self,
        method: str = "vfe",
        *,
        num_inducing: int = 128,
        kernel: str | Kernel | None = "rbf",
        likelihood: str | Likelihood = "gaussian",
        Z: Any = None,
        learn_inducing: bool = True,
        inducing_init: str = "kmeans",
        chunk_size: int | None = None,
        **common: Any,
    ) -> None:
        super().__init__(kernel, likelihood, **common)
        self.method = _method_name(method)
        if not isinstance(self.likelihood, Gaussian):
            raise ValueError(
                f"SparseGP ({self.method}) needs a Gaussian likelihood, got "
                f"{type(self.likelihood).__name__}: use SVGP for other likelihoods"
            )
        self._store_inducing_args(num_inducing, Z, learn_inducing, inducing_init, batched=False)
        self.chunk_size = (
            None if chunk_size is None else check_positive_int(chunk_size, "chunk_size")
        )

    # ------------------------------------------------------------------ building --
    def get_config(self) -> dict[str, Any]:
        cfg = super().get_config()
        cfg.update(self.inducing_config(), method=self.method, chunk_size=self.chunk_size)
        return cfg

    def _build(self, input_dim: int, output_dim: int) -> None:
        super()._build(input_dim, output_dim)
        M = self.num_inducing
        self.kernel.build(input_dim, (), self.dtype_, self.device_)
        self._build_inducing((M, input_dim), learn=self.learn_inducing)
        # posterior statistics (see module docstring) and the parameters they belong to
        self.register_buffer("stat_B", torch.eye(M, dtype=self.dtype_))
        self.register_buffer("stat_b", torch.zeros(M, output_dim, dtype=self.dtype_))
        self.register_buffer("stat_scalars", torch.zeros(4, dtype=self.dtype_))
        self.to(dtype=self.dtype_, device=self.device_)
        n_params = sum(p.numel() for p in self.parameters())
        self.register_buffer(
            "stat_params", torch.full((n_params,), math.nan, dtype=self.dtype_, device=self.device_)
        )

    def _default_fit_args(self, N: int) -> dict[str, Any]:
        return {"optimizer": "lbfgs", "lr": 1.0}

    def _validate_sizes(self, N: int) -> None:
        check_inducing_sizes(self._init_Z, self.num_inducing, N, self.input_dim)

    def _init_from_data(self, X: torch.Tensor, y: torch.Tensor) -> None:
        super()._init_from_data(X, y)
        self._place_inducing(X)

    def fit(self, X, y, *, batch_size: int | None = None, **kwargs) -> SparseGP:
        """Train on all of ``X`` ``(N, D)``, ``y`` ``(N,)``/``(N, P)`` (see ``GPModel.fit``).

        ``batch_size`` may only be N: the sparse objectives do not split into an unbiased
        sum over minibatches (use SVGP for minibatch training).
        """
        n = len(X) if hasattr(X, "__len__") else None
        if batch_size is not None and n is not None and batch_size != n:
            raise ValueError(
                f"SparseGP ({self.method}) trains on the full data: batch_size={batch_size} "
                f"differs from N={n}; the objective is not a sum over minibatches "
                "(use SVGP for minibatch training)"
            )
        return super().fit(X, y, **kwargs)

    def complete_fit(self, X: torch.Tensor, y: torch.Tensor) -> None:
        """The end of a fit: :meth:`set_data` on the training data."""
        self.set_data(X, y)

    # ------------------------------------------------------------------ objective --

    def _rows(self) -> int:
        # about 2^20 elements per (M, rows) array (8 MB in float64), so that the element-wise
        # passes over a chunk run from cache: at N = 36,000, M = 256 one objective +
        # gradient evaluation took 20% less time with 4,096 rows than with 16,384
        return self.chunk_size or max(2048, 1_048_576 // self.num_inducing)

    def _chunk_stats(
        self, X: torch.Tensor, Y: torch.Tensor, Lzz: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """Sums over one chunk: ``A Lam^-1 A^T`` (M, M), ``A Lam^-1 Y`` (M, P), and the
        scalars ``sum log Lam``, ``sum Y^2 / Lam``, ``tr(Kxx - Qxx)``."""
        s2 = self.likelihood.variance
        Kzx = self.kernel(self.Z, X)  # (M, B)
        kxx = self.kernel.diag(X)  # (B,)
        if self.method != "fitc":  # Lam = s^2 1: no per-point weights, cheaper backward
            P, q = whitened_sums(Lzz, Kzx, Y)  # A A^T, A Y
            B = X.shape[0]
            return P / s2, q / s2, B * s2.log(), Y.square().sum() / s2, kxx.sum() - P.trace()
        A = solve_lower(Lzz, Kzx)  # (M, B)
        resid = (kxx - A.square().sum(0)).clamp_min(0.0)  # diag(Kxx - Qxx)
        lam = resid + s2
        return (
            weighted_gram(A, 1.0 / lam),
            A @ (Y / lam[:, None]),  # not (A / lam) @ Y: no (M, B) quotient to differentiate
            lam.log().sum(),
            (Y.square() / lam[:, None]).sum(),
            resid.sum(),
        )

    def statistics(
        self, X: torch.Tensor, Y: torch.Tensor, Lzz: torch.Tensor, chunk_size: int | None = None
    ) -> tuple[torch.Tensor, ...]:
        """Data sums of the objective, accumulated over row chunks of ``X`` ``(N, D)``.

        ``Y`` is ``(N, P)``.  Returns ``(S, b, sum_log_lam, y_lam_y, trace)`` with
        ``S = A Lam^-1 A^T`` ``(M, M)`` and ``b = A Lam^-1 Y`` ``(M, P)``.  Under autograd
        each chunk is checkpointed (recomputed in the backward pass) once ``N * M``
        exceeds :attr:`checkpoint_min_elements`, so memory stays O(chunk * M + M^2)
        whatever N.
        """
        rows = chunk_size or self._rows()
        N = X.shape[0]
        big = N * self.num_inducing > self.checkpoint_min_elements
        use_ckpt = torch.is_grad_enabled() and N > rows and big
        total = None
        for start in range(0, N, rows):
            xc, yc = X[start : start + rows], Y[start : start + rows]
            if use_ckpt:
                part = checkpoint(self._chunk_stats, xc, yc, Lzz, use_reentrant=False)
            else:
                part = self._chunk_stats(xc, yc, Lzz)
            if total is None:
                total = part
            else:
                total = tuple(a + b for a, b in zip(total, part, strict=True))
        return total

    def _evidence(self, S, b, sum_log_lam, y_lam_y, trace, N: int) -> torch.Tensor:
        """The method's objective from the data sums (scaled-target units)."""
        out = low_rank_evidence(S, b, sum_log_lam, y_lam_y, num_data=N)
        if self.method == "vfe":
            P = b.shape[1]
            out = out - P * trace / (2.0 * self.likelihood.variance)
        return out

    def objective(self, X: torch.Tensor, y: torch.Tensor, num_data: int) -> torch.Tensor:
        """The full-data objective of the method (scaled targets), computed in chunks.

        sor/dtc/fitc: the approximate log marginal likelihood; vfe: Titsias' lower bound.
        Refuses a minibatch (``X.shape[0] != num_data``).
        """
        if X.shape[0] != num_data:
            raise ValueError(
                f"the SparseGP ({self.method}) objective needs the full data set: got a batch "
                f"of {X.shape[0]} rows out of {num_data} (the objective is not a sum over "
                "data points; use SVGP for minibatch training)"
            )
        Y = self._residual(X, y.reshape(X.shape[0], -1))
        Lzz = self.prior_factor()
        return self._evidence(*self.statistics(X, Y, Lzz), N=X.shape[0])

    # ------------------------------------------------------ stored statistics --
    def _param_vector(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self.parameters()])

    def set_data(self, X: Any, y: Any) -> SparseGP:
        """Compute and keep the posterior statistics of data ``(X, y)`` at the current
        hyperparameters (what prediction and :meth:`log_marginal_likelihood` use).

        ``fit`` calls this at the end; call it after changing hyperparameters by hand.
        The model must be built (fitted once) so that the target scaling is fixed.
        """
        self._require_built()
        Xt = self._check_X(X)
        Y = self._scale_y(self._check_y(y, Xt.shape[0])).reshape(Xt.shape[0], -1)
        with torch.no_grad():
            Y = self._residual(Xt, Y)
            S, b, sll, yly, tr = self.statistics(Xt, Y, self.prior_factor())
            self.stat_B = torch.eye(S.shape[0], dtype=S.dtype, device=S.device) + S
            self.stat_b = b
            self.stat_scalars = torch.stack(
                [torch.tensor(float(Xt.shape[0]), dtype=S.dtype, device=S.device), sll, yly, tr]
            )
            self.stat_params = self._param_vector()
        self._cache = None
        return self

    def condition_on(self, X_new: Any, y_new: Any) -> SparseGP:
        """A new SparseGP whose posterior statistics also hold ``(X_new, y_new)``, at the
        same hyperparameters, inducing inputs and target scaling; this model is unchanged.

        The statistics (``B = I + A Lam^-1 A^T``, ``b = A Lam^-1 y`` and the scalars) are
        sums over data points for every method, so the new points' sums are added:
        ``O(k M^2)``, no pass over the old data; the result equals :meth:`set_data` on all
        the data.
        """
        self._check_statistics()
        Xn = self._check_X(X_new, "X_new")
        Y = self._scale_y(self._check_y(y_new, Xn.shape[0], "y_new")).reshape(Xn.shape[0], -1)
        new = self.clone()
        with torch.no_grad():
            Y = self._residual(Xn, Y)
            S, b, sll, yly, tr = self.statistics(Xn, Y, self.prior_factor())
            k = torch.tensor(float(Xn.shape[0]), dtype=S.dtype, device=S.device)
            new.stat_B = self.stat_B + S
            new.stat_b = self.stat_b + b
            new.stat_scalars = self.stat_scalars + torch.stack([k, sll, yly, tr])
        return new

    def _check_statistics(self) -> None:
        self._require_built()
        p = self._param_vector()
        if p.shape != self.stat_params.shape or not torch.equal(p, self.stat_params):
            raise RuntimeError(
                "the SparseGP parameters changed since its posterior statistics were computed; "
                "call set_data(X, y) (or fit) to recompute them"
            )

    def log_marginal_likelihood(self) -> float:
        """The method's objective on the training data, in the targets' original units.

        sor/dtc/fitc: their approximate ``log p(y)``; vfe: Titsias' lower bound on the
        exact ``log p(y)``.
        """
        self._check_statistics()
        N = int(self.stat_scalars[0])
        eye = torch.eye(self.stat_B.shape[0], dtype=self.dtype_, device=self.device_)
        with torch.no_grad():
            v = self._evidence(self.stat_B - eye, self.stat_b, *self.stat_scalars[1:], N=N)
        return float(v) - N * self._log_scale_sum()

    # ----------------------------------------------------------------- prediction --
    def _compute_cache(self):
        self._check_statistics()
        Lzz = self.prior_factor()
        LB, _ = cholesky(self.stat_B, "I + A Lam^-1 A^T", jitter=0.0)
        w = cho_solve(LB, self.stat_b)  # B^{-1} b  (M, P)
        return Lzz, LB, w

    def _predict_f_chunk(self, Xs, cache):
        Lzz, LB, w = cache
        A = solve_lower(Lzz, self.kernel(self.Z, Xs))  # (M, B)
        mean = self._with_mean(Xs, A.mT @ w)  # (B, P)
        var = solve_lower(LB, A).square().sum(0)  # a^T B^-1 a
        if self.method != "sor":
            var = var + (self.kernel.diag(Xs) - A.square().sum(0)).clamp_min(0.0)
        return mean, var.clamp_min(1e-12)[:, None].expand_as(mean)

    def _predict_f_full(self, Xs, cache):
        Lzz, LB, w = cache
        A = solve_lower(Lzz, self.kernel(self.Z, Xs))
        mean = self._with_mean(Xs, A.mT @ w)
        V = solve_lower(LB, A)
        cov = V.mT @ V
        if self.method in ("dtc", "vfe"):
            cov = cov + self.kernel(Xs) - A.mT @ A
        elif self.method == "fitc":  # test points conditionally independent given u
            cov = cov + torch.diag_embed((self.kernel.diag(Xs) - A.square().sum(-2)).clamp_min(0.0))
        return mean, cov[..., None, :, :].expand(*cov.shape[:-2], mean.shape[-1], *cov.shape[-2:])
