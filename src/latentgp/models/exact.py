"""Exact GP regression: ``y = f + eps``, ``f ~ GP(c, k)``, Gaussian noise.

``c`` is 0 (``mean="zero"``, the default: the prior mean is the targets' mean, as they are
standardised) or a learned constant (``mean="constant"``, in the scaled units, as
BoTorch's ``SingleTaskGP`` and GPyTorch's ``ConstantMean``).  With ``r = y - c``,
log p(y) = -1/2 r^T (K + s^2 I)^{-1} r - 1/2 log|K + s^2 I| - N/2 log 2 pi,
computed from one Cholesky factor; O(N^3) time, O(N^2) memory.  Prediction reuses
the factor (cached until the parameters change).
"""

from __future__ import annotations

from typing import Any

import torch

from ..constants import LOG_2PI
from ..kernels import Kernel
from ..likelihoods import Gaussian, Likelihood
from ..linalg import BlockCholesky, cho_solve, cholesky
from ..validation import keyword_only_after_first
from .base import GPModel, register_model
from .pathwise import PathwiseSampling, exact_paths


class _GaussianLogMarginal(torch.autograd.Function):
    """``log N(Y | 0, K)`` summed over the P columns of Y, given ``L = chol(K)``.

    Autograd through the Cholesky would cost several N^3 operations in the backward pass;
    the closed form ``d/dK = (alpha alpha^T - P K^{-1}) / 2`` (``alpha = K^{-1} Y``) needs
    one ``cholesky_inverse`` (LAPACK potri, N^3 / 3 + N^3 / 3 flops) instead.  This is the
    one place latentgp forms an inverse: the trace term of the gradient needs every entry
    of ``K^{-1}``.
    """

    @staticmethod
    def forward(ctx, K, L, Y):
        N, P = Y.shape
        alpha = cho_solve(L, Y)
        logdet = 2.0 * L.diagonal().log().sum()
        ctx.save_for_backward(L, alpha)
        ctx.P = P
        return -0.5 * ((Y * alpha).sum() + P * logdet + N * P * LOG_2PI)

    @staticmethod
    def backward(ctx, g):
        L, alpha = ctx.saved_tensors
        gK = gY = None
        if ctx.needs_input_grad[0]:
            gK = (0.5 * g) * (alpha @ alpha.T - ctx.P * torch.cholesky_inverse(L))
        if ctx.needs_input_grad[2]:
            gY = -g * alpha
        return gK, None, gY


@register_model
class ExactGP(PathwiseSampling, GPModel):
    """Exact Gaussian-process regression (Gaussian likelihood only).

    Multi-output targets ``(N, P)`` share the kernel and noise.  Trains with L-BFGS on the
    full data by default.
    Common keywords (:class:`~latentgp.models.base.GPModel`): ``normalize_y``, ``device``,
    ``dtype``, ``noise_variance``.

    ``mean``: ``"zero"`` (default; the prior mean is the targets' mean when they are
    standardised) or ``"constant"`` (a learned constant per output column, the parameter
    ``mean_constant`` ``(P,)`` in the scaled units).  Far from the data the posterior
    mean returns to it: with a few high values among many low ones (an optimiser's
    samples) the learned constant sits below the targets' mean, where the zero mean
    would call the unexplored space promising (issue 28's Hartmann-6 benchmark).
    """

    default_optimizer = "lbfgs"
    default_lr = 1.0
    supports_minibatch = False
    paths_builder = staticmethod(exact_paths)
    #: largest training set accepted (an N x N factor of 50,000 points is 20 GB in float64)
    max_num_data = 50_000

    @keyword_only_after_first()
    def __init__(
        self,
        kernel: str | Kernel | None = "rbf",
        *,
        likelihood: str | Likelihood = "gaussian",
        mean: str = "zero",
        **common: Any,
    ) -> None:
        if mean not in ("zero", "constant"):
            raise ValueError(f"mean must be 'zero' or 'constant', got {mean!r}")
        super().__init__(kernel, likelihood, **common)
        self.mean = mean
        if not isinstance(self.likelihood, Gaussian):
            raise ValueError(
                "ExactGP needs a Gaussian likelihood (the posterior is only tractable then); "
                f"got {type(self.likelihood).__name__}: use SVGP for other likelihoods"
            )
        self.register_buffer("X_train", torch.zeros(0, 0, dtype=self.dtype_))
        self.register_buffer("y_train", torch.zeros(0, dtype=self.dtype_))

    def _build(self, input_dim: int, output_dim: int, num_data: int = 0) -> None:
        super()._build(input_dim, output_dim)
        self.kernel.build(input_dim, (), self.dtype_, self.device_)
        self.X_train = torch.zeros(num_data, input_dim, dtype=self.dtype_)
        shape = (num_data,) if output_dim == 1 else (num_data, output_dim)
        self.y_train = torch.zeros(shape, dtype=self.dtype_)
        if self.mean == "constant":
            self.mean_constant = torch.nn.Parameter(torch.zeros(output_dim, dtype=self.dtype_))
        self.to(dtype=self.dtype_, device=self.device_)

    def get_config(self) -> dict[str, Any]:  # noqa: D102 - see GPModel.get_config
        cfg = super().get_config()
        if self.mean != "zero":
            cfg["mean"] = self.mean
        return cfg

    def prior_mean(self) -> torch.Tensor:
        """The prior mean ``c`` ``(P,)`` in the scaled units the model trains in (zeros
        with ``mean="zero"``)."""
        self._require_built()
        if self.mean == "constant":
            return self.mean_constant
        return torch.zeros(self.output_dim, dtype=self.dtype_, device=self.device_)

    def _build_args(self):
        return {**super()._build_args(), "num_data": int(self.X_train.shape[0])}

    def _default_fit_args(self, N):
        return {"optimizer": "lbfgs", "lr": 1.0}

    def _validate_sizes(self, N: int) -> None:
        if N > self.max_num_data:
            raise ValueError(
                f"ExactGP on {N} points needs an {N}x{N} matrix; use SVGP or SparseGP for "
                f"N > {self.max_num_data}"
            )

    def _init_from_data(self, X, y):
        super()._init_from_data(X, y)
        self._store(X, y)

    def fit(self, X, y, **kwargs):  # noqa: D102 - see GPModel.fit
        super().fit(X, y, **kwargs)
        return self

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
        K = self.kernel(X)
        K = K + self.likelihood.variance * torch.eye(N, dtype=K.dtype, device=K.device)
        with torch.no_grad():
            L, self.last_jitter = cholesky(K.detach(), "K + noise", jitter=0.0)
        return _GaussianLogMarginal.apply(K, L, y.reshape(N, -1) - self.prior_mean())

    def log_marginal_likelihood(self) -> float:
        """log p(y) of the training targets in their original units."""
        self._require_built()
        with torch.no_grad():
            v = self._log_marginal(self.X_train, self.y_train)
        return float(v) - self.X_train.shape[0] * self._log_scale_sum()

    def _compute_cache(self):
        X, Y = self.X_train, self.y_train.reshape(self.X_train.shape[0], -1) - self.prior_mean()
        N = X.shape[0]
        K = self.kernel(X) + self.likelihood.variance * torch.eye(N, dtype=X.dtype, device=X.device)
        L, _ = cholesky(K, "K + noise", jitter=0.0)
        alpha = cho_solve(L, Y)  # (N, P)
        return BlockCholesky(L), alpha

    def _chunk_width(self) -> int:
        return int(self.X_train.shape[0])

    def _predict_f_chunk(self, Xs, cache):
        L, alpha = cache
        Kxs = self.kernel(self.X_train, Xs)  # (N, B)
        mean = Kxs.mT @ alpha + self.prior_mean()  # (B, P)
        V = L.solve_lower(Kxs)
        var = (self.kernel.diag(Xs) - V.square().sum(0)).clamp_min(1e-12)
        return mean, var[:, None].expand_as(mean)

    def _predict_f_full(self, Xs, cache):
        L, alpha = cache
        Kxs = self.kernel(self.X_train, Xs)
        mean = Kxs.mT @ alpha + self.prior_mean()
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
        """
        self._require_built()
        Xn = self._check_X(X_new, "X_new")
        yn = self._scale_y(self._check_y(y_new, Xn.shape[0], "y_new"))
        L, alpha = self.prediction_cache()
        new = self.clone()
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
            r2 = yn.reshape(k, -1) - self.prior_mean()
            a2 = cho_solve(L22, r2 - K12.mT @ alpha)
            a1 = alpha - L.solve_upper_t(B @ a2)
            new._set_prediction_cache((L_new, torch.cat([a1, a2])))
        return new
