"""The Bayesian GP latent variable model (Titsias & Lawrence 2010).

Data ``Y`` ``(N, P)`` are P functions of unobserved inputs ``x_n`` ``(Q,)``, sharing one
RBF kernel (ARD) and M inducing inputs ``Z`` ``(M, Q)``::

    x_n ~ N(0, I_Q),   f_p ~ GP(0, k),   y_np = f_p(x_n) + eps,   eps ~ N(0, s^2)

with a factorised Gaussian ``q(X) = prod_n N(x_n | mu_n, diag(S_n))``.  The kernel's
expectations under q(X) are in closed form (the psi statistics,
:mod:`latentgp.kernels.expectations`); whitened with ``Kzz = L L^T``,

    Psi2w = L^{-1} Psi2 L^{-T}  (M, M),     b = L^{-1} Psi1^T Y  (M, P),

Two bounds on ``log p(Y)`` (``bound=``):

``"collapsed"`` (default; Titsias & Lawrence's, q(u) optimised out, full data):

    F = log N(Y | 0, A^T A + s^2 I)|_{A A^T -> Psi2w, A Y -> b}
        - P (sum_n psi0_n - tr Psi2w) / (2 s^2) - KL[q(X) || p(X)]

i.e. the sparse-GP evidence of :func:`latentgp.models.sparse.low_rank_evidence` with
``S = Psi2w / s^2`` and ``b / s^2``, minus VFE's trace term: with a point-mass q(X)
(``S_n = 0``) the data part *is* SparseGP's VFE bound at inputs ``mu``.

``"uncollapsed"`` (Lalchand et al. 2022's minibatch form, with an explicit whitened
``q(v_p) = N(m_p, S_p S_p^T)``, ``u_p = L v_p``, and local q(x_n); the expectations over
q(x_n) in closed form instead of sampled):

    F = N/B sum_{n in batch} E_{q(x_n) q(u)}[log N(y_n | f(x_n), s^2)]
        - sum_p KL[q(v_p) || N(0, I)] - N/B sum_{n in batch} KL[q(x_n) || p(x_n)]

where, summed over a batch and the P outputs,

    sum E (y - f)^2 = sum Y^2 - 2 sum_p m_p^T b_p + sum_p tr((m_p m_p^T + S_p S_p^T) Psi2w)
                      + P (sum psi0 - tr Psi2w).

At its optimum ``q(v_p) = N((I + Psi2w/s^2)^{-1} b_p / s^2, (I + Psi2w/s^2)^{-1})`` the
uncollapsed bound equals the collapsed one.  Predictions of the mapping at latent points
(``predict_f``/``predict_y``) go through the one conditional
(:mod:`latentgp.variational.strategy`) with that optimal q(u) (collapsed; kept as
buffers, recomputed by ``fit``) or the learned one (uncollapsed).

New rows: :meth:`BayesianGPLVM.transform` maximises each new row's term of the uncollapsed
bound (:meth:`BayesianGPLVM.local_bound`) over its q(x*) with everything else, q(u)
included, held fixed.

Training goes through the one fit: the fit engine's ``X`` is the column of row numbers
(the model's local parameters are indexed by it), its ``y`` is ``Y``.  The latent means
start at the principal components of Y (``latent_init="pca"``, scaled to unit variance),
Z at k-means++ centres of them.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
from torch import nn

from ..kernels import Kernel
from ..kernels.expectations import check_psi_kernel, rbf_psi_statistics
from ..likelihoods import Likelihood
from ..linalg import cho_solve, cholesky, solve_lower
from ..parameters import positive_parameter, softplus
from ..validation import check_choice, check_inputs, check_positive_float, check_positive_int
from ..variational import GaussianVariational, InducingQ, predictive_cache
from .base import GPModel, fit_engine, register_model, require_gaussian_likelihood
from .inducing_inputs import InducingInputs
from .sparse import low_rank_evidence

BOUNDS = ("collapsed", "uncollapsed")


def latent_kl(mean: torch.Tensor, variance: torch.Tensor) -> torch.Tensor:
    """``sum_n KL[N(mean_n, diag(variance_n)) || N(0, I)]`` for ``(N, Q)`` tensors."""
    return 0.5 * (variance + mean.square() - 1.0 - variance.log()).sum()


def pca_latents(Y: torch.Tensor, latent_dim: int) -> torch.Tensor:
    """The first ``latent_dim`` principal-component scores of ``Y`` ``(N, P)``, each
    scaled to unit variance, ``(N, latent_dim)`` (columns beyond ``min(N, P)`` are zero)."""
    Yc = Y - Y.mean(0)
    U, _, _ = torch.linalg.svd(Yc, full_matrices=False)
    k = min(latent_dim, U.shape[1])
    X = torch.zeros(Y.shape[0], latent_dim, dtype=Y.dtype, device=Y.device)
    X[:, :k] = U[:, :k] * (Y.shape[0] ** 0.5)
    return X


@register_model
class BayesianGPLVM(InducingInputs, GPModel):
    """Bayesian GPLVM: a Q-dimensional latent embedding of ``Y`` ``(N, P)`` with a
    variational posterior ``q(X)`` (module docstring).

    Parameters
    ----------
    latent_dim: Q.
    num_inducing: M.
    bound: ``"collapsed"`` (default; full-batch, L-BFGS) or ``"uncollapsed"`` (explicit
        q(u), minibatch Adam).
    kernel: an RBF kernel (name or object; ARD by default): the psi statistics are in
        closed form for it only.
    Z: initial inducing inputs ``(M, Q)``; default k-means++ on the initial latent means.
    learn_inducing, inducing_init: as :class:`~latentgp.SparseGP`.
    latent_init: ``"pca"`` (default) or ``"random"`` (standard normal) initial means.
    latent_variance: initial variance of every ``q(x_n)`` coordinate.
    normalize_y: centre the columns of Y and divide them all by one scale (the root mean
        column variance), so that no column is magnified; reported densities are in Y's
        units.
    device, dtype, noise_variance: see :class:`~latentgp.models.base.GPModel` (the
        noise variance starts at 0.1 of the scaled data's).

    Use ``fit(Y)`` (or ``fit_transform(Y)``); :meth:`latent_posterior` returns q(X).
    ``predict_f``/``predict_y`` map latent points ``(N*, Q)`` to the data space.
    """

    supports_mean = False
    default_optimizer = "lbfgs"
    default_lr = 1.0
    #: the fit engine's inputs are row numbers, not points the model predicts at
    predicts_at_training_inputs = False

    CONFIG_ATTRIBUTES = ("latent_dim", "bound", "latent_init", "latent_variance")

    def __init__(
        self,
        latent_dim: int = 2,
        *,
        num_inducing: int = 50,
        bound: str = "collapsed",
        kernel: str | Kernel | None = "rbf",
        likelihood: str | Likelihood = "gaussian",
        Z: Any = None,
        learn_inducing: bool = True,
        inducing_init: str = "kmeans",
        latent_init: str = "pca",
        latent_variance: float = 0.1,
        **common: Any,
    ) -> None:
        super().__init__(kernel, likelihood, **common)
        require_gaussian_likelihood(self, "the Bayesian GPLVM bounds are for Gaussian noise")
        check_psi_kernel(self.kernel)
        self.latent_dim = check_positive_int(latent_dim, "latent_dim")
        self.bound = check_choice(bound, "bound", BOUNDS)
        self.latent_init = check_choice(latent_init, "latent_init", ("pca", "random"))
        self.latent_variance = check_positive_float(latent_variance, "latent_variance")
        self._store_inducing_args(num_inducing, Z, learn_inducing, inducing_init, batched=False)
        if self._init_Z is not None and self._init_Z.shape[-1] != self.latent_dim:
            raise ValueError(
                f"Z has {self._init_Z.shape[-1]} columns but latent_dim is {self.latent_dim}"
            )
        self.num_data: int | None = None

    @property
    def supports_minibatch(self) -> bool:  # type: ignore[override]
        """The uncollapsed bound is a sum over data points; the collapsed one is not."""
        return self.bound == "uncollapsed"

    # ------------------------------------------------------------------ building --
    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), **self.inducing_config()}

    def _build_args(self) -> dict[str, Any]:
        return {**super()._build_args(), "num_data": self.num_data}

    def _build(self, input_dim: int, output_dim: int, num_data: int = 1) -> None:
        if input_dim != self.latent_dim:
            raise ValueError(f"the input dimension is latent_dim={self.latent_dim}")
        super()._build(input_dim, output_dim)
        N, Q, M = int(num_data), self.latent_dim, self.num_inducing
        self.num_data = N
        self.kernel.build(Q, (), self.dtype_, self.device_)
        self._build_inducing((M, Q), learn=self.learn_inducing)
        self.latent_mean = nn.Parameter(torch.zeros(N, Q, dtype=self.dtype_))
        self.raw_latent_variance = positive_parameter(
            self.latent_variance, (N, Q), self.dtype_, None
        )
        if self.bound == "uncollapsed":
            self.q = GaussianVariational(output_dim, M, "full", True, 1.0, dtype=self.dtype_)
        else:  # the optimal q(u) of the fitted parameters (whitened), kept for prediction
            self.register_buffer("opt_q_mu", torch.zeros(output_dim, M, dtype=self.dtype_))
            self.register_buffer("opt_q_sqrt", torch.eye(M, dtype=self.dtype_))
        self.to(dtype=self.dtype_, device=self.device_)
        n_params = sum(p.numel() for p in self.parameters())
        self.register_buffer(
            "stat_params",
            torch.full((n_params,), float("nan"), dtype=self.dtype_, device=self.device_),
        )

    def _build_for_data(self, X: torch.Tensor, y: torch.Tensor) -> None:
        self._cap_sizes(y.shape[0])
        self._build(self.latent_dim, y.shape[1], y.shape[0])

    def _default_fit_args(self, N: int) -> dict[str, Any]:
        if self.bound == "uncollapsed":
            return {"optimizer": "adam", "lr": 0.01, "batch_size": min(N, 256)}
        return {"optimizer": "lbfgs", "lr": 1.0}

    @property
    def latent_var(self) -> torch.Tensor:
        """Variances of q(X) ``(N, Q)``."""
        return softplus(self.raw_latent_variance)

    # --------------------------------------------------------------- data, init --
    def _row_numbers(self, N: int) -> torch.Tensor:
        return torch.arange(N, dtype=self.dtype_, device=self.device_)[:, None]

    def _check_Y(self, Y: Any) -> torch.Tensor:
        return check_inputs(
            Y, name="Y", input_dim=self.output_dim, dtype=self.dtype_, device=self.device_
        )

    def check_training_data(self, X: Any, y: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``(row numbers (N, 1), Y (N, P))``: the fit engine's view of ``fit(Y)``."""
        Yt = self._check_Y(y)
        rows = self._row_numbers(Yt.shape[0])
        if not (isinstance(X, torch.Tensor) and X.shape == rows.shape and torch.equal(X, rows)):
            raise ValueError("BayesianGPLVM trains with fit(Y): there are no inputs X")
        return rows, Yt

    def check_source(self, source: Any) -> int:
        raise ValueError("BayesianGPLVM trains on arrays (fit(Y)), not out-of-core sources")

    def _validate_sizes(self, N: int) -> None:
        if self.num_data is not None and N != self.num_data:
            raise ValueError(
                f"this BayesianGPLVM holds q(x_n) for {self.num_data} rows; Y has {N} "
                "(a new data set needs a new model)"
            )

    def _initialize(self, Xt: torch.Tensor, yt: torch.Tensor, seed: int | None) -> torch.Tensor:
        first = not self.built
        if first:
            self._build_for_data(Xt, yt)
            if self._uses_scaling():  # one scale for every column
                mean = yt.mean(0)
                scale = (yt - mean).square().mean().sqrt()
                self.y_mean.copy_(mean)
                self.y_scale.fill_(float(scale) if float(scale) > 0 else 1.0)
        self._validate_sizes(yt.shape[0])
        ys = self._scale_y(yt)
        if first:
            self._init_from_data(Xt, ys)
            self.to(device=self.device_)
        return ys

    def _init_from_data(self, X: torch.Tensor, y: torch.Tensor) -> None:
        N, Q = y.shape[0], self.latent_dim
        with torch.no_grad():
            if self.latent_init == "pca":
                X0 = pca_latents(y, Q)
            else:
                X0 = torch.randn(N, Q, dtype=self.dtype_, device=self.device_)
            self.latent_mean.copy_(X0)
        self.kernel.init_from_data(X0)
        self._place_inducing(X0)
        if self.bound == "uncollapsed":  # start q(u) at its optimum for the initial q(X)
            self.set_optimal_inducing(y)

    def initialize(self, Y: Any, seed: int | None = None) -> BayesianGPLVM:  # type: ignore[override]
        """Build and set the initial values (PCA latents, Z, scaling) from ``Y`` without
        training; a built model is left unchanged."""
        Yt = self._check_Y(Y)
        self.initialize_training(self._row_numbers(Yt.shape[0]), Yt, seed=seed)
        return self

    # ------------------------------------------------------------------ the bound --
    def whitened_statistics(
        self, mean: torch.Tensor, variance: torch.Tensor, Y: torch.Tensor, Lzz: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(sum_n psi0_n, b = L^{-1} Psi1^T Y (M, P), Psi2w = L^{-1} Psi2 L^{-T} (M, M))``
        for q(X) with ``mean``, ``variance`` ``(B, Q)`` and (scaled) ``Y`` ``(B, P)``."""
        psi0, psi1, psi2 = rbf_psi_statistics(self.kernel, self.Z, mean, variance)
        b = solve_lower(Lzz, psi1.mT @ Y)
        W = solve_lower(Lzz, solve_lower(Lzz, psi2).mT)
        return psi0.sum(), b, 0.5 * (W + W.mT)

    def collapsed_bound(
        self, Y: torch.Tensor, mean: torch.Tensor, variance: torch.Tensor
    ) -> torch.Tensor:
        """The data part of the collapsed bound (without ``KL[q(X) || p(X)]``) for q(X)
        with ``mean``, ``variance`` ``(N, Q)`` and scaled ``Y`` ``(N, P)``: SparseGP's VFE
        bound at inputs ``mean`` when ``variance`` is zero."""
        s2 = self.likelihood.variance
        N, P = Y.shape
        psi0, b, W = self.whitened_statistics(mean, variance, Y, self.prior_factor())
        out = low_rank_evidence(
            W / s2, b / s2, N * s2.log(), Y.square().sum() / s2, num_data=N
        )
        return out - P * (psi0 - W.trace()) / (2.0 * s2)

    def expected_log_lik(
        self,
        Y: torch.Tensor,
        mean: torch.Tensor,
        variance: torch.Tensor,
        Lzz: torch.Tensor,
        q: InducingQ | None = None,
    ) -> torch.Tensor:
        """``sum_n E_{q(x_n) q(u)} log N(y_n | f(x_n), s^2 I)`` over a batch (scaled ``Y``
        ``(B, P)``, q(X) rows ``(B, Q)``) under the whitened ``q`` (``q_mu`` ``(P, M)``,
        ``q_sqrt`` ``(P, M, M)``; default the uncollapsed model's learned q(u))."""
        s2 = self.likelihood.variance
        B, P = Y.shape
        psi0, b, W = self.whitened_statistics(mean, variance, Y, Lzz)
        m, S = (self.q.q_mu, self.q.q_sqrt) if q is None else (q.q_mu, q.q_sqrt)
        sq = (
            Y.square().sum()
            - 2.0 * (m * b.mT).sum()
            + ((m @ W) * m).sum()
            + ((W @ S) * S).sum()
            + P * (psi0 - W.trace())
        )
        return -0.5 * B * P * (np.log(2.0 * np.pi) + s2.log()) - sq / (2.0 * s2)

    def objective(self, X: torch.Tensor, y: torch.Tensor, num_data: int) -> torch.Tensor:
        """The bound (scaled Y) for the rows ``X`` ``(B, 1)`` (row numbers) with data ``y``
        ``(B, P)``; the collapsed bound refuses a minibatch."""
        idx = X[:, 0].long()
        mean, var = self.latent_mean[idx], self.latent_var[idx]
        if self.bound == "collapsed":
            if X.shape[0] != num_data:
                raise ValueError(
                    "the collapsed BayesianGPLVM bound needs the full data set: got a batch "
                    f"of {X.shape[0]} rows out of {num_data} (use bound='uncollapsed')"
                )
            return self.collapsed_bound(y, mean, var) - latent_kl(mean, var)
        Lzz = self.prior_factor()
        scale = num_data / X.shape[0]
        local = self.expected_log_lik(y, mean, var, Lzz) - latent_kl(mean, var)
        return scale * local - self.q.kl(Lzz)

    # --------------------------------------------------------- optimal q(u), cache --
    def optimal_inducing(
        self, Y: torch.Tensor, mean: torch.Tensor, variance: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The optimal whitened q(u) for scaled ``Y`` ``(N, P)`` and q(X) ``(N, Q)``:
        mean ``(P, M)`` and the lower Cholesky factor ``(M, M)`` of its covariance
        ``(I + Psi2w / s^2)^{-1}`` (shared by the P outputs)."""
        s2 = self.likelihood.variance
        _, b, W = self.whitened_statistics(mean, variance, Y, self.prior_factor())
        eye = torch.eye(W.shape[0], dtype=W.dtype, device=W.device)
        LB, _ = cholesky(eye + W / s2, "I + Psi2w / s^2", jitter=0.0)
        m = cho_solve(LB, b / s2).mT
        R, _ = cholesky(cho_solve(LB, eye), "q(u) covariance", jitter=0.0)
        return m, R

    def set_optimal_inducing(self, Y: torch.Tensor) -> None:
        """Set q(u) (uncollapsed) or the kept optimal q(u) (collapsed) to the optimum for
        scaled ``Y`` ``(N, P)`` at the current parameters."""
        with torch.no_grad():
            m, R = self.optimal_inducing(Y, self.latent_mean, self.latent_var)
            if self.bound == "uncollapsed":
                self.q.q_mu.copy_(m)
                self.q.q_sqrt_raw.copy_(R.expand_as(self.q.q_sqrt_raw))
            else:
                self.opt_q_mu.copy_(m)
                self.opt_q_sqrt.copy_(R)
            self.stat_params.copy_(self._param_vector())
        self._cache = None

    def _param_vector(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self.parameters()])

    def complete_fit(self, X: torch.Tensor, y: torch.Tensor) -> None:
        """After the steps: the collapsed model keeps its optimal q(u) for prediction."""
        if self.bound == "collapsed":
            self.set_optimal_inducing(self._scale_y(y))

    def inducing_posterior(self) -> InducingQ:
        """The whitened q(u) the model predicts with, ``q_mu`` ``(P, M)`` and ``q_sqrt``
        ``(P, M, M)``: the learned one (uncollapsed) or the kept optimum of the fitted
        parameters (collapsed; ``RuntimeError`` before ``fit`` or when the parameters
        changed since)."""
        if not self.built:
            raise RuntimeError("this BayesianGPLVM is not fitted yet: call fit(Y) first")
        if self.bound == "uncollapsed":
            return InducingQ(self.q.q_mu, self.q.q_sqrt, True)
        p = self._param_vector()
        if bool(torch.isnan(self.stat_params).all()):
            raise RuntimeError("this BayesianGPLVM is not fitted yet: call fit(Y) first")
        if p.shape != self.stat_params.shape or not torch.equal(p, self.stat_params):
            raise RuntimeError(
                "the BayesianGPLVM parameters changed since its optimal q(u) was computed; "
                "call fit (or set_optimal_inducing with the scaled data) first"
            )
        P, M = self.opt_q_mu.shape
        return InducingQ(self.opt_q_mu, self.opt_q_sqrt.expand(P, M, M), True)

    def _compute_cache(self):
        return predictive_cache(self.prior_factor(), self.inducing_posterior())

    # ---------------------------------------------------------------- user API --
    def fit(self, Y: Any, y: Any = None, **options: Any) -> BayesianGPLVM:  # type: ignore[override]
        """Fit q(X), the kernel, Z and the noise to data ``Y`` ``(N, P)`` through the one
        fit (options as :meth:`GPModel.fit`; the collapsed bound trains full-batch with
        L-BFGS until converged, the uncollapsed one with Adam on minibatches of 256)."""
        if y is not None:
            raise TypeError("BayesianGPLVM.fit takes the data Y only: fit(Y)")
        Yt = self._check_Y(Y)
        return fit_engine()(self, self._row_numbers(Yt.shape[0]), Yt, **options)

    def fit_transform(self, Y: Any, **options: Any) -> np.ndarray:
        """:meth:`fit`, then the latent means ``(N, Q)``."""
        return self.fit(Y, **options).latent_posterior()[0]

    def latent_posterior(self, as_numpy: bool = True) -> tuple[Any, Any]:
        """Means and variances of q(X), ``(N, Q)`` each."""
        self._require_built()
        m, v = self.latent_mean.detach(), self.latent_var.detach()
        return (m.cpu().numpy(), v.cpu().numpy()) if as_numpy else (m, v)

    # ------------------------------------------------------------ new rows: q(X*) --
    def local_bound(
        self, Y: torch.Tensor, mean: torch.Tensor, variance: torch.Tensor
    ) -> torch.Tensor:
        """``sum_n E_{q(x_n) q(u)} log N(y_n | f(x_n), s^2 I) - KL[q(x_n) || p(x_n)]``
        for scaled rows ``Y`` ``(B, P)`` and q(X) ``mean``, ``variance`` ``(B, Q)``, with
        the model's q(u) (:meth:`inducing_posterior`) held fixed: the rows' terms of the
        uncollapsed bound, i.e. how much that bound grows when the rows join the data."""
        Lzz = self.prior_factor()
        q = self.inducing_posterior()
        return self.expected_log_lik(Y, mean, variance, Lzz, q) - latent_kl(mean, variance)

    def transform(
        self,
        Y_new: Any,
        *,
        init: Any = "nearest",
        max_steps: int = 1000,
        tol: float = 1e-5,
        return_variance: bool = False,
    ) -> Any:
        """The variational posterior q(x*) of new rows ``Y_new`` ``(N*, P)`` under the
        fitted model, held fixed (kernel, noise, Z and q(u): the learned one, or the
        collapsed bound's optimum kept by ``fit``).

        Each row's q(x*) maximises its term of the bound, :meth:`local_bound` (the terms
        of different rows are independent): full-batch L-BFGS (strong Wolfe) over all
        rows together, on the log variances and on the means in units of the starting
        standard deviations (``mean = mean0 + sqrt(var0) z``), until the largest
        gradient entry in those coordinates is below ``tol`` (or the objective stops
        changing at floating-point precision); a warning when ``max_steps`` iterations
        did not get there.  Deterministic; the model is not changed.

        ``init``: ``"nearest"`` (default) starts each row at the q(x_n) of the training
        row whose reconstruction (the predicted mean at its latent mean) is nearest to
        it in the data space; an array ``(N*, Q)`` gives the starting means (variances
        start at ``latent_variance``).

        Returns the means ``(N*, Q)``, or ``(means, variances)`` with
        ``return_variance=True`` (numpy arrays).
        """
        self.inducing_posterior()  # refuses an unfitted or stale model
        Yt = self._check_Y(Y_new)
        steps = check_positive_int(max_steps, "max_steps")
        tol = check_positive_float(tol, "tol")
        ys = self._scale_y(Yt)
        mean0, var0 = self._transform_start(ys, init)
        sd0 = var0.sqrt()
        z = torch.zeros_like(mean0, requires_grad=True)
        log_var = var0.log().requires_grad_(True)

        def closure() -> torch.Tensor:
            value = -self.local_bound(ys, mean0 + sd0 * z, log_var.exp())
            # torch.autograd.grad, not backward: the model's .grad stay untouched
            z.grad, log_var.grad = torch.autograd.grad(value, [z, log_var])
            return value.detach()

        opt = torch.optim.LBFGS(
            [z, log_var], lr=1.0, max_iter=steps, max_eval=2 * steps,
            tolerance_grad=tol, tolerance_change=1e-14, history_size=50,
            line_search_fn="strong_wolfe",
        )
        opt.step(closure)
        n_iter = opt.state[z]["n_iter"]
        if n_iter >= steps:
            closure()
            gmax = max(float(z.grad.abs().max()), float(log_var.grad.abs().max()))
            if gmax > tol:
                warnings.warn(
                    f"BayesianGPLVM.transform stopped after max_steps={steps} L-BFGS "
                    f"iterations with largest gradient {gmax:.3g} > tol={tol:g}",
                    RuntimeWarning,
                    stacklevel=2,
                )
        m = (mean0 + sd0 * z).detach().cpu().numpy()
        if not return_variance:
            return m
        return m, log_var.detach().exp().cpu().numpy()

    def _transform_start(self, ys: torch.Tensor, init: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Starting means and variances ``(N*, Q)`` of :meth:`transform` for scaled rows
        ``ys`` ``(N*, P)``."""
        N, Q = ys.shape[0], self.latent_dim
        if isinstance(init, str):
            check_choice(init, "init", ("nearest",))
            with torch.no_grad():
                train_mean, train_var = self.latent_mean.detach(), self.latent_var.detach()
                rec = self._latent_raw(train_mean)[0]  # (N_train, P), scaled units
                d = (
                    ys.square().sum(1, keepdim=True)
                    - 2.0 * ys @ rec.mT
                    + rec.square().sum(1)[None, :]
                )
                pick = d.argmin(1)
                return train_mean[pick].clone(), train_var[pick].clone()
        start = check_inputs(init, name="init", input_dim=Q, dtype=self.dtype_, device=self.device_)
        if start.shape[0] != N:
            raise ValueError(f"init has {start.shape[0]} rows but Y_new has {N}")
        return start.clone(), torch.full_like(start, self.latent_variance)


__all__ = ["BayesianGPLVM", "latent_kl", "pca_latents"]
