"""Quadruply stochastic GPs (QSGP; Evans & Nair, seed 001, notes "Paper B").

Weight-space model with ``m`` basis functions::

    f(x) = phi(x)^T w,   w ~ N(0, S^{-1}),   q(w) = N(mu, C C^T)

Basis families (``basis=``):

- ``"rff"``: random Fourier features of an SE / Matérn (ARD) kernel, regenerated from a
  hash of their index (:mod:`latentgp.kernels.features`); whitened, ``S = I``; the
  lengthscales, signal variance and noise are learned by empirical Bayes (Prop. 2).
- ``"inducing"``: ``Phi = K(X, Z)``, ``S = K(Z, Z)`` on ``m`` inducing points taken from
  the training inputs (all of them when ``num_basis`` is None, then ``Phi = S = K``);
  hyperparameters are fixed (``log|S|`` is a constant, computed only when m <= 4096).
- ``"rvm"``: ``Phi = K(X, Z)``, ``S = diag(s)`` with one learned precision per basis
  function (relevance vector machine, QSRVM).

``C`` is lower triangular with positive diagonal ``c_rr = exp(c_raw_r)``: mean-field
(diagonal), ``"chevron"`` (the first ``num_dense`` columns dense below the diagonal,
the rest diagonal) or ``"full"``.

Gaussian likelihood: the ELBO ``-(L_mu + L_Sigma + L_const) / 2`` (notes B.2) is estimated
without bias by sub-sampling data rows ``l~`` once and basis functions three times
(rows ``i~`` and ``j~``, dense columns ``r~``; Theorems 1-2, Prop. 2).  Two details
differ from the printed estimator and stay unbiased: the terms with a diagonal ``S`` use
``(m / m~) sum_i s_i mu_i^2`` (averaged over ``i~`` and ``j~``) instead of
``mu_j~^T S_j~i~ mu_i~``, and the diagonal columns of the chevron use their exact row
(``c_rr^2 (|phi_r|^2 / s2 + s_rr) - 2 log c_rr`` with ``|phi_r|^2`` from ``l~``), which is
what the chevron sparsity buys; dense columns are sampled without replacement.  The
control variate of Prop. 3 (rank ``cv_rank`` support points, running expectation
``a = Phi_p mu`` updated in ``O(n_bar m~)``, sparse-gradient scaling of Appendix F.1) is
applied to the ``Phi^T Phi`` term of the mean and of every sampled dense column, with
the support features frozen at the hyperparameters of the moment it was set up
(Appendix F.3).  With ``basis="inducing"`` (``S = K``) the Nyström control variate of
Appendix F.2 is applied to the prior term on the same support points.

Non-Gaussian log-concave likelihoods (Bernoulli logit/probit, Laplace): the lower
bound of Theorem 3.  **Correction.** The paper writes the site argument as
``a + z v`` with ``v`` an unbiased estimate of the *variance* ``phi Sigma phi^T``; the
correct reparameterisation is ``a + z sqrt(v)`` and a square root of an unbiased
estimate is no longer an expectation, so Jensen does not apply to it.  We derive the
bound instead from ``f = phi (mu + C eps)``, ``eps ~ N(0, I_m)``: the argument is the
expectation over index draws of

    A^ = (m/m~) phi_i~ mu_i~ + sum_r eps_r x_r,
    x_r = (k/|r~|) (m/m~) phi_i~ C_i~r  (sampled dense columns),
    x_i = (m/m~) count_i phi_i c_ii      (diagonal columns hit by i~),

so concavity of ``log g`` gives ``E_q log g(phi w) >= E_idx E_z log g(a + z sqrt(v))``
with ``v = sum_r x_r^2``: a genuine lower bound that uses the *standard deviation* of
``A^`` given the indices, and equals the exact expected log-likelihood when all basis
functions are used.  ``tests/integration/test_qsgp.py`` checks both claims by quadrature, and that
the printed form (``z`` times the variance) is not the expected log-likelihood.

Predictions: ``phi(x)^T mu`` and ``phi(x)^T Sigma phi(x)``, plus for ``basis="inducing"``
with a Gaussian likelihood the augmentation of Appendix G (Prop. 4): one extra basis
function at ``x*`` with its closed-form (Prop. 1) diagonal, adding
``s2 k**^2 / (k*^T k* + s2 k**)`` to the latent variance.

Training runs through the one fit (:func:`latentgp.training.fit`) with QSGP's plan
(:func:`latentgp.training.tasks.qsgp_plan`): every step (:meth:`QSGP.sparse_step`)
gathers only the sampled rows of the length-``m`` parameter vectors, differentiates the
estimate with respect to those rows, and writes them back with the row-sparse AdaGrad (or
plain SGD) of :class:`latentgp.training.optim.SparseRowOptimizer` -- no optimiser ever
touches the whole vector, so a step costs ``O(n~ m~ + m~^2)`` whatever ``m`` and ``N``;
the few kernel / noise hyperparameters use Adam.  Data-parallel runs average the
gradients of the gathered rows through the reducer the plan passes in (:meth:`QSGP.fit`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from ..kernels import Kernel
from ..kernels.features import SPECTRAL_DOF, RandomFourierFeatures
from ..likelihoods import Bernoulli, Gaussian, Laplace, Likelihood
from ..linalg import cholesky, solve_lower
from ..parameters import LOG_2PI
from ..validation import check_positive_float, check_positive_int, keyword_only_after_first
from .base import GPModel, register_model

BASES = ("rff", "inducing", "rvm")
COVARIANCES = ("meanfield", "chevron", "full")
RVM_UPDATES = ("gradient", "em", "mackay")
MEAN_STEPS = ("gradient", "newton")
#: cap of the RVM precisions under rvm_update="mackay" (a weight with s_i this large has
#: prior sd 1e-6 of the targets' scale: pruned)
RVM_MAX_PRECISION = 1e12
VARIATIONAL_OPTIMIZERS = ("adagrad", "sgd")


def _finite_step(opt: torch.optim.Optimizer) -> None:
    """``opt.step()`` unless a gradient of its first group is not finite."""
    params = opt.param_groups[0]["params"]
    if all(p.grad is None or bool(torch.isfinite(p.grad).all()) for p in params):
        opt.step()


@register_model
class QSGP(GPModel):
    """Quadruply stochastic GP (see module docstring).

    Parameters
    ----------
    num_basis: m; None: 1000 random features, or every training point for the
        inducing / RVM bases.
    basis: ``"rff"``, ``"inducing"`` or ``"rvm"``.
    likelihood: ``"gaussian"`` (unbiased estimator), ``"bernoulli"`` or ``"laplace"``
        (Theorem 3 lower bound).
    kernel: RBF / Matérn for ``"rff"``; any stationary kernel for the others.
    covariance: ``"meanfield"``, ``"chevron"`` or ``"full"`` C.
    num_dense: dense columns of the chevron (default 10).
    basis_batch: m~, basis functions drawn per index set (all when >= m).
    num_columns: dense columns sampled per step (default: all dense columns, at most 10).
    cv_rank: n_bar, support points of the control variate (0: none; Gaussian only).
    learn_hyperparameters: empirical Bayes for kernel (rff) / noise / s (rvm).
    augment: predictive-variance augmentation (default: on for ``"inducing"``).
    closed_form_diagonal: set diagonal columns by Prop. 1 before and after fitting
        (an O(N m) pass); None: when N m <= 2e8 and the likelihood is Gaussian.
    hyper_lr, hyper_delay: Adam learning rate of the hyperparameters and the number
        of initial steps during which they stay frozen.
    rvm_update: how the RVM precisions s are learned (``basis="rvm"``): ``"gradient"``
        (default, as in the seed) takes sparse optimiser steps on ``log s``; ``"em"``
        sets, for every basis function a step samples, ``s_i`` to its ELBO optimum
        ``1 / (mu_i^2 + Sigma_ii)`` -- and, with the Gaussian likelihood, first the
        diagonal entry ``c_ii`` of a diagonal-only column to its optimum (Prop. 1; the
        column norms are computed once per fit) -- i.e. coordinate ascent on the same
        ELBO; ``"mackay"`` takes MacKay's re-estimate ``s_i = (1 - s_i Sigma_ii) / mu_i^2``
        instead, which has the same fixed points and moves ``s_i`` further per update
        (with the exact posterior it prunes in far fewer iterations than em; within
        QSGP the slowly converging mean still limits both, see
        ``benchmarks/qsgp_rvm_diagnostic.py``).
    nystrom_cv: with ``basis="inducing"`` and ``cv_rank > 0``, also apply the Nyström
        control variate of Appendix F.2 to the prior term ``mu^T K mu`` (and to each
        sampled dense column): ``-(m/m~)^2 mu_i~^T Q_i~j~ mu_j~ + mu^T Q mu`` with
        ``Q = K(Z, P) K(P, P)^{-1} K(P, Z)`` on the control variate's support points P and
        ``|L_P^{-1} K(P, Z) mu|^2`` kept as a running expectation (the paper's Table 3;
        it assumes fixed kernel hyperparameters, the inducing basis's default).
    mean_step: how the sampled rows of the mean move. ``"gradient"`` (default, as in
        the seed): the sparse optimiser's step. ``"newton"`` (Gaussian likelihood only):
        ``mu_U += newton_damping * H_UU^{-1} g_U`` on the sampled basis functions U,
        with the minibatch Hessian block ``H_UU = (n / n~) Phi_BU^T Phi_BU / sigma^2 +
        S_UU`` and the block gradient from the batch residual ``y_B - Phi_B mu`` -- a
        randomised block-Newton step (see :meth:`newton_mean`).  The residual uses
        all m basis functions, so a step costs O(n~ m + n~ |U|^2 + |U|^3): independent
        of n, not of m.  It converges where first-order steps on the kernel bases'
        ill-conditioned mean crawl (with ``rvm_update="em"`` it makes the QSRVM prune;
        see docs/results/qsgp_reproduction.md).
    newton_damping: the step fraction of ``mean_step="newton"`` (0 < rho <= 1).
    newton_ridge: Levenberg-Marquardt term of ``mean_step="newton"``: ``H_UU`` gets
        ``newton_ridge * mean(diag H_UU)`` added to its diagonal (default 0).  With small
        data batches (n~ / n of a few percent) and local kernel columns the minibatch block
        is nearly singular and undamped steps can wander off; 0.01 keeps them in check.
    feature_seed: seed of the random features / inducing-point choice.

    Training: ``fit`` takes the options of :meth:`GPModel.fit`.
    Fit by sparse stochastic steps (see module docstring).

    ``batch_size`` is n~ (data rows per step, default ``min(N, 500)``); ``epochs=E``
    takes ``E * ceil(N / n~)`` steps; ``optimizer`` is ``"adagrad"`` (default) or
    ``"sgd"`` (no momentum: the control variate needs sparse updates); ``lr`` its
    step size (default 0.1); ``optimizer_kwargs``: ``{"eps": ...}`` for adagrad (the
    constant added to the root of the accumulated squared gradients, default 1e-10).
    The record is in ``self.history_`` (a FitHistory).  The loop is
    :func:`latentgp.training.loop.run_loop`: ``progress``, ``callbacks``, ``tol``,
    Ctrl-C and ``checkpoint``/``checkpoint_every``/``checkpoint_seconds``/``resume``
    behave as in :meth:`GPModel.fit` (a checkpoint holds the AdaGrad accumulators, the
    control variate's running expectations and the hyperparameter optimiser, so a
    resumed run matches an uninterrupted one).

    Inside an initialised ``torch.distributed`` default group (``latentgp fit
    --nproc``, torchrun) every process passes the same full ``X, y`` and draws the same
    indices; each evaluates the estimator on its part of the sampled rows (weighted so
    that the average over processes is the one-process estimate) and the gradients of
    the gathered rows and of the hyperparameters are averaged before the (identical)
    sparse update: the run equals the one-process run up to round-off.
    Common keywords (:class:`~latentgp.models.base.GPModel`): ``normalize_y``, ``device``,
    ``dtype``, ``noise_variance``.
    """

    default_optimizer = "adagrad"
    default_lr = 0.1

    @keyword_only_after_first()
    def __init__(
        self,
        num_basis: int | None = None,
        *,
        basis: str = "rff",
        likelihood: str | Likelihood = "gaussian",
        kernel: str | Kernel | None = "rbf",
        covariance: str = "meanfield",
        num_dense: int | None = None,
        basis_batch: int = 1000,
        num_columns: int | None = None,
        cv_rank: int = 0,
        learn_hyperparameters: bool | None = None,
        augment: bool | None = None,
        closed_form_diagonal: bool | None = None,
        hyper_lr: float = 0.01,
        hyper_delay: int = 0,
        feature_seed: int = 0,
        rvm_update: str = "gradient",
        nystrom_cv: bool = True,
        mean_step: str = "gradient",
        newton_damping: float = 0.5,
        newton_ridge: float = 0.0,
        **common: Any,
    ) -> None:
        super().__init__(kernel, likelihood, **common)
        if rvm_update not in RVM_UPDATES:
            raise ValueError(f"rvm_update must be one of {list(RVM_UPDATES)}, got {rvm_update!r}")
        self.rvm_update = rvm_update
        if mean_step not in MEAN_STEPS:
            raise ValueError(f"mean_step must be one of {list(MEAN_STEPS)}, got {mean_step!r}")
        self.mean_step = mean_step
        newton_damping = check_positive_float(newton_damping, "newton_damping")
        if newton_damping > 1:
            raise ValueError(f"newton_damping must be in (0, 1], got {newton_damping!r}")
        self.newton_damping = newton_damping
        if not (isinstance(newton_ridge, (int, float)) and math.isfinite(newton_ridge)) or (
            newton_ridge < 0
        ):
            raise ValueError(f"newton_ridge must be a finite number >= 0, got {newton_ridge!r}")
        self.newton_ridge = float(newton_ridge)
        self.nystrom_cv = bool(nystrom_cv)
        if basis not in BASES:
            raise ValueError(f"basis must be one of {list(BASES)}, got {basis!r}")
        if covariance not in COVARIANCES:
            raise ValueError(f"covariance must be one of {list(COVARIANCES)}, got {covariance!r}")
        if not isinstance(self.likelihood, (Gaussian, Bernoulli, Laplace)):
            raise ValueError(
                "QSGP supports the 'gaussian', 'bernoulli' and 'laplace' likelihoods (the "
                f"lower bound needs a log-concave site), got {type(self.likelihood).__name__}"
            )
        if basis == "rff" and type(self.kernel).__name__ not in SPECTRAL_DOF:
            raise ValueError(
                "basis='rff' needs an RBF or Matérn kernel (one with a known spectral "
                f"density), got {type(self.kernel).__name__}"
            )
        self.num_basis = None if num_basis is None else check_positive_int(num_basis, "num_basis")
        self.basis, self.covariance = basis, covariance
        if num_dense is not None:
            num_dense = check_positive_int(num_dense, "num_dense", minimum=0)
        self.num_dense = num_dense
        self.basis_batch = check_positive_int(basis_batch, "basis_batch")
        self.num_columns = (
            None if num_columns is None else check_positive_int(num_columns, "num_columns")
        )
        self.cv_rank = check_positive_int(cv_rank, "cv_rank", minimum=0)
        if self.cv_rank and not isinstance(self.likelihood, Gaussian):
            raise ValueError("cv_rank > 0 (control variate) needs the Gaussian likelihood")
        if mean_step == "newton" and not isinstance(self.likelihood, Gaussian):
            raise ValueError(
                "mean_step='newton' needs the Gaussian likelihood (its Hessian block is "
                "Phi^T Phi / sigma^2 + S); use mean_step='gradient' for "
                f"{type(self.likelihood).__name__}"
            )
        if learn_hyperparameters is None:
            learn_hyperparameters = basis != "inducing"
        self.learn_hyperparameters = bool(learn_hyperparameters)
        self.augment = (basis == "inducing") if augment is None else bool(augment)
        self.closed_form_diagonal = closed_form_diagonal
        self.hyper_lr = check_positive_float(hyper_lr, "hyper_lr")
        self.hyper_delay = check_positive_int(hyper_delay, "hyper_delay", minimum=0)
        self.feature_seed = check_positive_int(feature_seed, "feature_seed", minimum=0)
        self.m: int | None = None
        self.k: int = 0
        self._train_state: dict[str, Any] | None = None

    @property
    def num_inducing(self) -> int | None:
        """Number of basis functions m (what the CLI's ``--inducing`` sets)."""
        return self.m if self.m is not None else self.num_basis

    # ------------------------------------------------------------------ config --
    def get_config(self) -> dict[str, Any]:
        cfg = super().get_config()
        cfg.update(
            num_basis=self.num_basis,
            basis=self.basis,
            covariance=self.covariance,
            num_dense=self.num_dense,
            basis_batch=self.basis_batch,
            num_columns=self.num_columns,
            cv_rank=self.cv_rank,
            learn_hyperparameters=self.learn_hyperparameters,
            augment=self.augment,
            closed_form_diagonal=self.closed_form_diagonal,
            hyper_lr=self.hyper_lr,
            hyper_delay=self.hyper_delay,
            feature_seed=self.feature_seed,
            rvm_update=self.rvm_update,
            nystrom_cv=self.nystrom_cv,
            mean_step=self.mean_step,
            newton_damping=self.newton_damping,
            newton_ridge=self.newton_ridge,
        )
        return cfg

    def _build_args(self) -> dict[str, Any]:
        return {**super()._build_args(), "num_basis": self.m}

    def _resolve_m(self, N: int) -> int:
        if self.num_basis is not None:
            if self.basis != "rff" and self.num_basis > N:
                raise ValueError(
                    f"num_basis={self.num_basis} is larger than the {N} training points "
                    f"(basis={self.basis!r} centres one basis function on each)"
                )
            return self.num_basis
        return 1000 if self.basis == "rff" else N

    def _build_for_data(self, X: torch.Tensor, y: torch.Tensor) -> None:
        if y.ndim != 1:
            raise ValueError(f"QSGP models one output column; y has shape {tuple(y.shape)}")
        self._build(X.shape[1], 1, self._resolve_m(X.shape[0]))

    def _build_for_source(self, input_dim: int, num_rows: int) -> None:
        self._build(input_dim, 1, self._resolve_m(num_rows))

    @property
    def streams(self) -> bool:
        """Whether a fit can read an out-of-core source row by row: not when the basis is
        every training input (``basis != "rff"`` without ``num_basis``)."""
        return self.basis == "rff" or self.num_basis is not None

    def _num_dense_for(self, m: int) -> int:
        if self.covariance == "meanfield":
            return 0
        if self.covariance == "full":
            if m > 20000:
                raise ValueError(f"covariance='full' stores an m x m factor; m={m} is too large")
            return m
        return min(m, 10 if self.num_dense is None else self.num_dense)

    @classmethod
    def upgrade_state(cls, state: dict, expected: dict | None = None) -> dict:
        """Files written before the random-feature inputs were centred have no
        ``input_offset``: zero reproduces their features exactly."""
        if expected is not None and "input_offset" in expected and "input_offset" not in state:
            state = {**state, "input_offset": torch.zeros_like(expected["input_offset"])}
        return state

    def _build(self, input_dim: int, output_dim: int, num_basis: int | None = None) -> None:
        if output_dim != 1:
            raise ValueError(f"QSGP models one output column, got {output_dim}")
        super()._build(input_dim, output_dim)
        m = num_basis if num_basis is not None else self.num_basis
        if m is None:
            raise ValueError("the number of basis functions is unknown before fit")
        self.m = int(m)
        self.k = self._num_dense_for(self.m)
        self.kernel.build(input_dim, (), self.dtype_, self.device_)
        dt = self.dtype_
        self.mu = nn.Parameter(torch.zeros(self.m, dtype=dt), requires_grad=False)
        self.c_raw = nn.Parameter(torch.zeros(self.m, dtype=dt), requires_grad=False)
        self.c_dense = nn.Parameter(torch.zeros(self.m, self.k, dtype=dt), requires_grad=False)
        if self.basis == "rvm":
            self.log_s = nn.Parameter(torch.zeros(self.m, dtype=dt), requires_grad=False)
        if self.basis == "rff":
            dof = SPECTRAL_DOF[type(self.kernel).__name__]
            self.rff = RandomFourierFeatures(self.m, input_dim, dof, self.feature_seed)
            # the features see centred inputs: cos(w^T (x - c) + b) -- shifting X by a
            # constant then changes nothing (uncentred, the phases w^T x move with every
            # lengthscale step, and learning the lengthscales broke for X far from 0)
            self.register_buffer("input_offset", torch.zeros(input_dim, dtype=dt))
        else:
            self.register_buffer("Z", torch.zeros(self.m, input_dim, dtype=dt))
        self.register_buffer("logdet_S", torch.zeros((), dtype=dt))
        self.to(dtype=self.dtype_, device=self.device_)

    # --------------------------------------------------------------- the basis --
    def _hypers(self, frozen: dict | None = None):
        if frozen is not None:
            return frozen["lengthscale"], frozen["variance"]
        return self.kernel.lengthscale, self.kernel.variance

    def features(self, X: torch.Tensor, idx: torch.Tensor, frozen: dict | None = None):
        """``Phi[X, idx]``: ``(B, K)`` for inputs ``(B, D)`` and basis indices ``(K,)``."""
        if self.basis == "rff":
            ls, var = self._hypers(frozen)
            return self.rff(X - self.input_offset, idx, ls, var)
        return self.kernel(X, self.Z[idx])

    def _prior_diag(self, idx: torch.Tensor, log_s: torch.Tensor | None = None):
        """Diagonal of S at ``idx`` ``(K,)`` (``log_s``: gathered rows for the RVM)."""
        if self.basis == "rff":
            return torch.ones(idx.shape[0], dtype=self.dtype_, device=idx.device)
        if self.basis == "rvm":
            return torch.exp(self.log_s[idx] if log_s is None else log_s)
        return self.kernel.diag(self.Z[idx])

    def _noise(self) -> torch.Tensor:
        return self.likelihood.variance

    def _is_gaussian(self) -> bool:
        return isinstance(self.likelihood, Gaussian)

    # -------------------------------------------------------------- the factor C --
    @staticmethod
    def _column_values(rows, cols, dense_rc, craw_rows):
        """``C[rows, cols]`` for dense columns: ``(|rows|, |cols|)`` from gathered values."""
        below = rows[:, None] > cols[None, :]
        on = rows[:, None] == cols[None, :]
        diag = torch.exp(craw_rows)[:, None].expand_as(dense_rc)
        zero = torch.zeros_like(dense_rc)
        return torch.where(below, dense_rc, torch.where(on, diag, zero))

    def dense_factor(self) -> torch.Tensor:
        """The full ``C`` ``(m, m)`` (small m only; for tests and diagnostics)."""
        m, k = self.m, self.k
        rows = torch.arange(m, device=self.mu.device)
        C = torch.diag(torch.exp(self.c_raw.detach()))
        if k:
            cols = torch.arange(k, device=self.mu.device)
            C[:, :k] = self._column_values(rows, cols, self.c_dense.detach(), self.c_raw.detach())
        return C

    # --------------------------------------------------------------- initialising --
    def _init_from_data(self, X: torch.Tensor, y: torch.Tensor) -> None:
        super()._init_from_data(X, y)
        N = X.shape[0]
        with torch.no_grad():
            if self.basis == "rff":
                self.input_offset.copy_(X.mean(0))
            if self.basis != "rff":
                g = torch.Generator(device="cpu").manual_seed(self.feature_seed)
                if self.m == N:
                    idx = torch.arange(N)
                else:
                    idx = torch.randperm(N, generator=g)[: self.m]
                self.Z.copy_(X[idx.to(X.device)])
            if self.basis == "inducing" and self.m <= 4096:
                L, self.last_jitter = cholesky(self.kernel(self.Z), "K(Z, Z)")
                self.logdet_S.copy_(2.0 * torch.log(torch.diagonal(L)).sum())
            self.mu.zero_()
            self.c_dense.zero_()
            if self.basis == "rvm":
                self.log_s.zero_()
            # c_rr from Prop. 1 with |phi_r|^2 estimated cheaply (O(1) per column for rff)
            s2 = float(self._noise()) if self._is_gaussian() else 1.0
            if self.basis == "rff":
                colnorm = torch.full_like(self.mu, N * float(self.kernel.variance) / self.m)
            else:
                colnorm = self.column_norms(X[: min(N, 256)]) * (N / min(N, 256))
            sdiag = self._all_prior_diag()
            self.c_raw.copy_(0.5 * torch.log(s2 / (colnorm + s2 * sdiag)))

    def _all_prior_diag(self) -> torch.Tensor:
        if self.basis == "rff":
            return torch.ones_like(self.mu)
        if self.basis == "rvm":
            return torch.exp(self.log_s)
        return self.kernel.diag(self.Z)

    def column_norms(self, X: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
        """``|phi_r|^2`` over the rows of X for all m columns ``(m,)`` (O(N m), chunked).

        The data part of the closed-form diagonal (Prop. 1) and of the RVM updates: the
        ``colnorm`` that :meth:`rvm_em_update` takes.  ``X`` is a validated tensor."""
        out = torch.zeros_like(self.mu)
        rows = max(1, 2**22 // chunk)
        for c0 in range(0, self.m, chunk):
            idx = torch.arange(c0, min(c0 + chunk, self.m), device=self.mu.device)
            for r0 in range(0, X.shape[0], rows):
                out[idx] += (self.features(X[r0 : r0 + rows], idx) ** 2).sum(0)
        return out

    def set_closed_form_diagonal(self, X: Any) -> None:
        """Proposition 1: ``c_rr = sqrt(s2 / (|phi_r|^2 + s2 s_rr))`` for every diagonal-only
        column (all columns when mean-field), the exact optimum of the Gaussian ELBO for
        those columns at the current hyperparameters.  Costs O(N m)."""
        self._require_built()
        if not self._is_gaussian():
            raise ValueError("the closed-form diagonal (Prop. 1) needs the Gaussian likelihood")
        self._closed_form_diagonal(self._check_X(X))

    def _closed_form_diagonal(self, X: Any) -> None:
        """:meth:`set_closed_form_diagonal` on validated rows (a tensor, or the lazy rows
        of an out-of-core source, read in chunks)."""
        with torch.no_grad():
            s2 = self._noise()
            c = 0.5 * torch.log(s2 / (self.column_norms(X) + s2 * self._all_prior_diag()))
            self.c_raw[self.k :] = c[self.k :]

    # ------------------------------------------------------------------ sampling --
    def _sample(self, n: int, batch_size: int, gen: torch.Generator) -> dict[str, Any]:
        dev = self.mu.device
        m, k = self.m, self.k
        s = {}
        if batch_size >= n:
            s["ell"] = torch.arange(n, device=dev)
        else:
            s["ell"] = torch.randint(n, (batch_size,), generator=gen).to(dev)
        if self.basis_batch >= m:
            s["I"] = s["J"] = torch.arange(m, device=dev)
            s["sI"] = s["sJ"] = 1.0
        else:
            s["I"] = torch.randint(m, (self.basis_batch,), generator=gen).to(dev)
            s["J"] = torch.randint(m, (self.basis_batch,), generator=gen).to(dev)
            s["sI"] = s["sJ"] = m / self.basis_batch
        ncols = min(k, 10) if self.num_columns is None else min(k, self.num_columns)
        if ncols >= k:
            s["R"] = torch.arange(k, device=dev)
            s["sR"] = 1.0
        else:
            s["R"] = torch.randperm(k, generator=gen)[:ncols].to(dev)
            s["sR"] = k / ncols
        allidx = torch.cat([s["I"], s["J"], s["R"]])
        U, inv = torch.unique(allidx, return_inverse=True)
        nI, nJ = s["I"].shape[0], s["J"].shape[0]
        s["U"], s["invI"], s["invJ"], s["invR"] = U, inv[:nI], inv[nI : nI + nJ], inv[nI + nJ :]
        return s

    def _gather(self, s: dict[str, Any]) -> dict[str, torch.Tensor]:
        U, R = s["U"], s["R"]
        leaves = {
            "mu": self.mu.detach()[U].clone(),
            "craw": self.c_raw.detach()[U].clone(),
            "dense": self.c_dense.detach()[U[:, None], R[None, :]].clone(),
        }
        if self.basis == "rvm":
            leaves["log_s"] = self.log_s.detach()[U].clone()
        for v in leaves.values():
            v.requires_grad_(True)
        return leaves

    # ----------------------------------------------------------------- estimators --
    def _estimate(
        self,
        Xl: torch.Tensor,
        yl: torch.Tensor,
        n: int,
        s: dict[str, Any],
        lv: dict[str, torch.Tensor],
        cv: dict[str, Any] | None = None,
    ) -> torch.Tensor:
        """One stochastic estimate of the ELBO (Gaussian) or of its Theorem 3 lower
        bound (other likelihoods), from gathered rows ``lv`` (scaled-target units)."""
        m, k = self.m, self.k
        I, J, R, U = s["I"], s["J"], s["R"], s["U"]
        iI, iJ, iR = s["invI"], s["invJ"], s["invR"]
        sI, sJ, sR = s["sI"], s["sJ"], s["sR"]
        nt = Xl.shape[0]
        PhiU = self.features(Xl, U)  # (n~, |U|)
        PhiI, PhiJ = PhiU[:, iI], PhiU[:, iJ]
        muI, muJ = lv["mu"][iI], lv["mu"][iJ]
        CU = self._column_values(U, R, lv["dense"], lv["craw"])  # (|U|, |R|)
        CI, CJ = CU[iI], CU[iJ]
        craw_R = lv["craw"][iR]
        log_s = lv.get("log_s")
        dense_S = self.basis == "inducing"
        if dense_S:
            KJI = self.kernel(self.Z[J], self.Z[I])
            prior_mu = sI * sJ * (muJ @ (KJI @ muI))
            prior_C = sI * sJ * ((KJI @ CI) * CJ).sum(0)  # (|R|,)
            sdI, sdJ = self.kernel.diag(self.Z[I]), self.kernel.diag(self.Z[J])
        else:
            sU = self._prior_diag(U, log_s)
            sdI, sdJ = sU[iI], sU[iJ]
            prior_mu = 0.5 * (sI * (sdI * muI**2).sum() + sJ * (sdJ * muJ**2).sum())
            prior_C = 0.5 * (
                sI * (sdI[:, None] * CI**2).sum(0) + sJ * (sdJ[:, None] * CJ**2).sum(0)
            )
        # diagonal-only columns r >= k, hit by the row draws
        crI, crJ = lv["craw"][iI], lv["craw"][iJ]
        offI, offJ = (I >= k).to(Xl.dtype), (J >= k).to(Xl.dtype)
        if self.basis == "rff":
            logdet_S = Xl.new_zeros(())
        elif self.basis == "rvm":
            lsI, lsJ = log_s[iI], log_s[iJ]
            logdet_S = 0.5 * (sI * lsI.sum() + sJ * lsJ.sum())
        else:
            logdet_S = self.logdet_S
        data_scale = n / nt
        if self._is_gaussian():
            s2 = self._noise()
            aI, aJ = sI * (PhiI @ muI), sJ * (PhiJ @ muJ)
            L_mu = -2.0 * data_scale / s2 * (yl @ aI) + data_scale / s2 * (aJ @ aI) + prior_mu
            VI, VJ = sI * (PhiI @ CI), sJ * (PhiJ @ CJ)  # (n~, |R|)
            quad = data_scale / s2 * (VJ * VI).sum(0)
            L_sig = sR * (quad + prior_C - 2.0 * craw_R).sum()
            colI = data_scale * (PhiI**2).sum(0)
            colJ = data_scale * (PhiJ**2).sum(0)
            TI = torch.exp(2 * crI) * (colI / s2 + sdI) - 2 * crI
            TJ = torch.exp(2 * crJ) * (colJ / s2 + sdJ) - 2 * crJ
            L_sig = L_sig + 0.5 * (sI * (offI * TI).sum() + sJ * (offJ * TJ).sum())
            if cv is not None:
                L_mu = L_mu + self._control_variate(s, lv, CU, cv, n, s2.detach())
                # (the dense-column control variates are included in the same call)
            L_const = -logdet_S - m + n * (LOG_2PI + torch.log(s2)) + data_scale * (yl @ yl) / s2
            return -0.5 * (L_mu + L_sig + L_const)
        # ---- Theorem 3 lower bound (corrected: standard deviation, see docstring)
        a = sI * (PhiI @ muI)
        X_dense = sR * sI * (PhiI @ CI)  # (n~, |R|) coefficient of eps_r
        agg = Xl.new_zeros(nt, U.shape[0])
        agg = agg.index_add(1, iR, X_dense)
        X_diag = sI * PhiI * (offI * torch.exp(crI))[None, :]
        agg = agg.index_add(1, iI, X_diag)
        v = (agg**2).sum(1)
        ell = data_scale * self.likelihood.expected_log_prob(yl, a, v).sum()
        TI = torch.exp(2 * crI) * sdI - 2 * crI
        TJ = torch.exp(2 * crJ) * sdJ - 2 * crJ
        kl = 0.5 * (
            prior_mu
            + sR * (prior_C - 2.0 * craw_R).sum()
            + 0.5 * (sI * (offI * TI).sum() + sJ * (offJ * TJ).sum())
            - logdet_S
            - m
        )
        return ell - kl

    def _control_variate(self, s, lv, CU, cv, n, s2) -> torch.Tensor:
        """Prop. 3 + Appendix F.1: ``-(n m^2/(s2 n_bar m~^2)) mu_j~^T Phi_pj~^T Phi_pi~ mu_i~
        + (n/(s2 n_bar)) |a|^2`` with the sparse-gradient scaling, for the mean and for the
        sampled dense columns (times ``sR``).  Zero mean: adds no bias."""
        U, iI, iJ = s["U"], s["invI"], s["invJ"]
        sI, sJ, sR = s["sI"], s["sJ"], s["sR"]
        nbar = cv["Xp"].shape[0]
        PhiP = self.features(cv["Xp"], U, frozen=cv["hypers"])  # (n_bar, |U|)
        cv["PhiP"] = PhiP.detach()
        coef = n / (s2 * nbar)
        ratio = self.m / U.shape[0]
        mu = lv["mu"]
        pI, pJ = sI * (PhiP[:, iI] @ mu[iI]), sJ * (PhiP[:, iJ] @ mu[iJ])
        a = cv["a"] + PhiP @ (mu - mu.detach())
        aa = (a * a).sum()
        out = -coef * (pJ @ pI) + coef * (ratio * aa + ((1.0 - ratio) * aa).detach())
        if CU.shape[1]:
            R = s["R"]
            PI, PJ = sI * (PhiP[:, iI] @ CU[iI]), sJ * (PhiP[:, iJ] @ CU[iJ])  # (n_bar, |R|)
            A = cv["A"][R].T + PhiP @ (CU - CU.detach())  # (n_bar, |R|)
            AA = (A * A).sum()
            out = out + sR * (
                -coef * (PJ * PI).sum() + coef * (ratio * AA + ((1.0 - ratio) * AA).detach())
            )
        if "Lp" in cv:
            out = out + self._nystrom_cv(s, lv, CU, cv, PhiP)
        return out

    def _nystrom_cv(self, s, lv, CU, cv, PhiP) -> torch.Tensor:
        """Appendix F.2 for ``S = K``: ``-(m/m~)^2 mu_j~^T Q_j~i~ mu_i~ + |b|^2`` with
        ``Q = W^T W``, ``W = L_P^{-1} K(P, Z)`` (here ``K(P, Z_U)`` is ``Phi_p``), the
        running expectation ``b = W mu`` and the sparse-gradient scaling of Appendix F.1;
        the same for every sampled dense column (times ``sR``).  Zero mean."""
        iI, iJ = s["invI"], s["invJ"]
        sI, sJ, sR = s["sI"], s["sJ"], s["sR"]
        W = solve_lower(cv["Lp"], PhiP)  # (n_bar, |U|)
        cv["WP"] = W
        ratio = self.m / s["U"].shape[0]
        mu = lv["mu"]
        qI, qJ = sI * (W[:, iI] @ mu[iI]), sJ * (W[:, iJ] @ mu[iJ])
        b = cv["b"] + W @ (mu - mu.detach())
        bb = (b * b).sum()
        out = -(qJ @ qI) + ratio * bb + ((1.0 - ratio) * bb).detach()
        if CU.shape[1]:
            R = s["R"]
            QI, QJ = sI * (W[:, iI] @ CU[iI]), sJ * (W[:, iJ] @ CU[iJ])
            Bm = cv["B"][R].T + W @ (CU - CU.detach())  # (n_bar, |R|)
            BB = (Bm * Bm).sum()
            out = out + sR * (-(QJ * QI).sum() + ratio * BB + ((1.0 - ratio) * BB).detach())
        return out

    # ---------------------------------------------------------- exact quantities --
    def exact_elbo(self, X: Any, y: Any) -> float:
        """The exact ELBO (Gaussian) or exact ``E_q log p(y|w) - KL`` (quadrature) in the
        scaled-target units of the objective; O(N m^2 + m^3): small problems only."""
        self._require_built()
        Xt = self._check_X(X)
        yt = self._scale_y(self._check_y(y, Xt.shape[0]))
        with torch.no_grad():
            return float(self._exact_elbo(Xt, yt))

    def _exact_elbo(self, X, y):
        m = self.m
        idx = torch.arange(m, device=X.device)
        Phi = self.features(X, idx)
        C = self.dense_factor()
        mu = self.mu.detach()
        if self.basis == "inducing":
            S = self.kernel(self.Z)
            logdet_S = self.logdet_S
        else:
            sd = self._all_prior_diag()
            S = torch.diag(sd)
            logdet_S = torch.log(sd).sum()
        Sigma = C @ C.T
        logdet_Sigma = 2 * torch.log(torch.diagonal(C)).sum()
        if self._is_gaussian():
            s2 = self._noise()
            f = Phi @ mu
            L_mu = (-2 * (y @ f) + f @ f) / s2 + mu @ S @ mu
            L_sig = ((Phi @ C) ** 2).sum() / s2 + torch.trace(S @ Sigma) - logdet_Sigma
            n = X.shape[0]
            L_const = -logdet_S - m + n * (LOG_2PI + torch.log(s2)) + (y @ y) / s2
            return -0.5 * (L_mu + L_sig + L_const)
        var = ((Phi @ C) ** 2).sum(1)
        ell = self.likelihood.expected_log_prob(y, Phi @ mu, var).sum()
        kl = 0.5 * (torch.trace(S @ Sigma) + mu @ S @ mu - m - logdet_S - logdet_Sigma)
        return ell - kl

    def objective_estimate(
        self,
        X: Any,
        y: Any,
        batch_size: int | None = None,
        seed: int | None = None,
        use_control_variate: bool = False,
    ) -> float:
        """One draw of the training estimator at the current parameters (for tests and
        diagnostics); ``use_control_variate`` needs a fitted control-variate state."""
        self._require_built()
        Xt = self._check_X(X)
        yt = self._scale_y(self._check_y(y, Xt.shape[0]))
        gen = torch.Generator(device="cpu").manual_seed(0 if seed is None else seed)
        n = Xt.shape[0]
        s = self._sample(n, n if batch_size is None else batch_size, gen)
        lv = self._gather(s)
        cv = None
        if use_control_variate:
            if self._train_state is None or self._train_state.get("cv") is None:
                raise ValueError("no control-variate state: call setup_control_variate first")
            cv = self._train_state["cv"]
        with torch.no_grad():
            return float(self._estimate(Xt[s["ell"]], yt[s["ell"]], n, s, lv, cv))

    def setup_control_variate(self, X: Any, rank: int | None = None, seed: int = 0) -> None:
        """Pick ``rank`` support points and set the running expectation ``a = Phi_p mu``
        (and ``A_r = Phi_p c_r`` for the dense columns) at the current parameters."""
        self._require_built()
        Xt = self._check_X(X)
        rank = self.cv_rank if rank is None else check_positive_int(rank, "rank")
        self._ensure_state()
        self._train_state["cv"] = self._make_cv(Xt, rank, seed)

    def _make_cv(self, X: torch.Tensor, rank: int, seed: int) -> dict[str, Any]:
        g = torch.Generator(device="cpu").manual_seed(seed + 7919)
        p = torch.randperm(X.shape[0], generator=g)[: min(rank, X.shape[0])].to(X.device)
        Xp = X[p]
        hypers = None
        if self.basis == "rff":
            hypers = {
                "lengthscale": self.kernel.lengthscale.detach().clone(),
                "variance": self.kernel.variance.detach().clone(),
            }
        a = Xp.new_zeros(Xp.shape[0])
        A = Xp.new_zeros(self.k, Xp.shape[0])
        with torch.no_grad():
            nz = torch.nonzero(self.mu).flatten()
            for c0 in range(0, nz.shape[0], 65536):
                idx = nz[c0 : c0 + 65536]
                a += self.features(Xp, idx, frozen=hypers) @ self.mu[idx]
            if self.k:
                # dense columns c_r have rows r..m-1; chunk over rows
                cols = torch.arange(self.k, device=X.device)
                for c0 in range(0, self.m, 65536):
                    idx = torch.arange(c0, min(c0 + 65536, self.m), device=X.device)
                    Cb = self._column_values(idx, cols, self.c_dense[idx], self.c_raw[idx])
                    A += (self.features(Xp, idx, frozen=hypers) @ Cb).T
        cv = {"Xp": Xp, "hypers": hypers, "a": a, "A": A}
        if self._nystrom():
            # Appendix F.2: support inputs P = Xp; b = L_P^{-1} K(P, Z) mu (the running
            # expectation of the prior term's control variate), B = L_P^{-1} K(P, Z) C_dense
            with torch.no_grad():
                Lp, _ = cholesky(self.kernel(Xp), "K(P, P) of the Nystrom control variate")
            cv["Lp"] = Lp
            cv["b"] = solve_lower(Lp, a[:, None])[:, 0]
            cv["B"] = solve_lower(Lp, A.T).T.contiguous()  # (k, n_bar)
        return cv

    # ------------------------------------------------------------------- training --
    def _ensure_state(self) -> None:
        if self._train_state is None or self._train_state.get("m") != self.m:
            z = torch.zeros_like
            st = {
                "m": self.m,
                "G_mu": z(self.mu),
                "G_craw": z(self.c_raw),
                "G_dense": z(self.c_dense),
                "cv": None,
            }
            if self.basis == "rvm":
                st["G_log_s"] = z(self.log_s)
            self._train_state = st

    def _hyper_params(self) -> list[nn.Parameter]:
        if not self.learn_hyperparameters:
            return []
        ps = list(self.likelihood.parameters())
        if self.basis == "rff":
            ps += list(self.kernel.parameters())
        return [p for p in ps if p.requires_grad]

    def _default_fit_args(self, N: int) -> dict[str, Any]:
        return {
            "optimizer": self.default_optimizer,
            "lr": self.default_lr,
            "batch_size": min(N, 500),
        }

    # ---------------------------------------------- the training contract (QSGP) --
    def hyper_parameters(self) -> list[nn.Parameter]:
        """The few hyperparameters trained by Adam (kernel of ``basis="rff"``, noise)."""
        return self._hyper_params()

    def start_training(
        self,
        X: torch.Tensor,
        y: torch.Tensor,
        *,
        first: bool,
        seed: int | None,
        sync: Callable[[nn.Module], None] | None = None,
    ) -> bool:
        """Prepare a fit on ``X`` ``(N, D)`` and scaled targets ``y`` ``(N,)`` (tensors, or
        the lazy row views of an out-of-core source; after :meth:`initialize_training`):
        the closed-form diagonal of ``C`` (Prop. 1) when it applies, ``sync(self)`` (make
        every process start from the same parameters), the AdaGrad accumulators, the RVM
        column norms and the control variate.  Returns whether the closed-form diagonal
        is used (pass it to :meth:`finish_training`)."""
        N = X.shape[0]
        cfd = self.closed_form_diagonal
        if cfd is None:
            cfd = self._is_gaussian() and N * self.m <= 2e8
        if cfd and first:
            self._closed_form_diagonal(X)
        if sync is not None:
            sync(self)
        self._ensure_state()
        st = self._train_state
        if self._rvm_em() and self._is_gaussian() and (first or "colnorm" not in st):
            # |phi_i|^2 over all n points, O(N m) once; from 4096 rows when that is large
            rows = X if N * self.m <= 2e8 else X[torch.randperm(N)[:4096].to(X.device)]
            st["colnorm"] = self.column_norms(rows) * (N / rows.shape[0])
        if self.cv_rank and (st["cv"] is None or first):
            st["cv"] = self._make_cv(X, self.cv_rank, 0 if seed is None else seed)
        return bool(cfd)

    def finish_training(self, X: torch.Tensor, *, closed_form: bool, seed: int | None) -> None:
        """After the last step: the closed-form diagonal (and the control variate built
        on it) at the final parameters, when ``closed_form``."""
        if closed_form:
            self._closed_form_diagonal(X)
            if self.cv_rank:
                st = self._train_state
                st["cv"] = self._make_cv(X, self.cv_rank, 0 if seed is None else seed)

    def training_state(self) -> dict[str, Any]:
        """What a checkpoint holds of the model: parameters and the sparse optimiser's
        accumulators, RVM column norms and the control variate's running expectations."""
        return {"model": self.state_dict(), "train_state": self._train_state}

    def load_training_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`training_state` returned."""
        self.load_state_dict(state["model"])
        self._train_state = state["train_state"]

    def optimizer_state_nbytes(self) -> int:
        """Bytes of per-row optimiser state (the sparse AdaGrad sums ``G_*``) kept between
        steps; 0 before training."""
        st = self._train_state or {}
        return sum(v.numel() * v.element_size() for k, v in st.items() if k.startswith("G_"))

    def sparse_step(
        self,
        X: Any,
        y: Any,
        n: int,
        batch_size: int,
        gen: torch.Generator,
        *,
        rows: Any,
        hyper_optimizer: torch.optim.Optimizer | None,
        step: int,
        reduce: Any = None,
    ) -> float:
        """One sparse step; returns the objective estimate (before the step).

        ``X`` ``(n, D)``, ``y`` ``(n,)`` (scaled; anything indexable by a tensor of row
        numbers); ``gen`` draws the rows, basis functions and columns; ``rows``: the
        row-sparse optimiser (:class:`latentgp.training.optim.SparseRowOptimizer`:
        ``rows.update(param, accumulator, index, leaf)``); ``hyper_optimizer``: Adam on
        :meth:`hyper_parameters` (None: fixed), which starts at step ``hyper_delay``.
        ``reduce`` (:class:`latentgp.training.distributed.Reducer`; None: one process):
        with W > 1 processes this one evaluates its part of the sampled rows at weight
        ``n W |part| / n~`` and the objective and gradients are averaged over processes
        before the (identical) update.
        """
        cv = self._train_state["cv"] if self.cv_rank else None
        return self._step(X, y, n, batch_size, gen, rows, hyper_optimizer, cv, step, reduce)

    def _step(self, X, y, n, batch_size, gen, rows, hopt, cv, step, reduce=None) -> float:
        """:meth:`sparse_step` with the control variate ``cv`` given."""
        s = self._sample(n, batch_size, gen)
        lv = self._gather(s)
        ell = s["ell"]
        W = 1 if reduce is None else reduce.world
        n_eff = n
        if W > 1:
            ell, weight = reduce.local_part(ell)
            n_eff = n * weight
        if hopt is not None:
            hopt.zero_grad(set_to_none=True)
        Xl, yl = X[ell], y[ell]
        obj = self._estimate(Xl, yl, n_eff, s, lv, cv)
        value = obj.detach()
        if W > 1:
            value = value.clone().reshape(())
            reduce.mean_([value])
        if not torch.isfinite(value):
            return float("nan")
        (-obj / n).backward()
        if W > 1:
            grads = [v.grad for v in lv.values() if v.grad is not None]
            if hopt is not None:
                grads += [p.grad for p in hopt.param_groups[0]["params"] if p.grad is not None]
            reduce.mean_(grads)
        st = self._train_state
        U, R = s["U"], s["R"]
        with torch.no_grad():
            if cv is not None:
                old_mu = lv["mu"].detach().clone()
                old_C = self._column_values(U, R, lv["dense"], lv["craw"]).detach()
            rows_cols = (U[:, None], R[None, :])
            if self.mean_step == "newton":
                new_mu = self.newton_mean(Xl, yl, U, n, reduce)
            else:
                new_mu = rows.update(self.mu, st["G_mu"], U, lv["mu"])
            new_craw = rows.update(self.c_raw, st["G_craw"], U, lv["craw"])
            new_dense = rows.update(self.c_dense, st["G_dense"], rows_cols, lv["dense"])
            if self._rvm_em():
                self.rvm_em_update(U, st.get("colnorm"), mackay=self.rvm_update == "mackay")
            elif self.basis == "rvm":
                rows.update(self.log_s, st["G_log_s"], U, lv["log_s"])
            if cv is not None:
                new_C = self._column_values(U, R, new_dense, new_craw) if R.shape[0] else None
                self._track_control_variate(cv, R, new_mu - old_mu, new_C, old_C)
            if hopt is not None and step >= self.hyper_delay:
                _finite_step(hopt)
        return float(value)

    @staticmethod
    def _track_control_variate(cv, R, d_mu, new_C, old_C) -> None:
        """Keep the control variate's running expectations ``a = Phi_p mu`` (and the
        Nyström ``b``), ``A`` (and ``B``) on the sampled dense columns ``R`` in step with
        a sparse update that moved ``mu`` by ``d_mu`` and the rows of ``C`` from ``old_C``
        to ``new_C`` (None: no dense column sampled)."""
        PhiP = cv["PhiP"]
        cv["a"] += PhiP @ d_mu
        if "WP" in cv:
            cv["b"] += cv["WP"] @ d_mu
        if new_C is not None:
            cv["A"][R] += (PhiP @ (new_C - old_C)).T
            if "WP" in cv:
                cv["B"][R] += (cv["WP"] @ (new_C - old_C)).T

    def prior_block(self, U: torch.Tensor) -> torch.Tensor:
        """``S_UU`` ``(|U|, |U|)``: the prior precision on the basis functions ``U``.

        Public for checking the Newton step (:meth:`newton_mean`) against its formula."""
        if self.basis == "inducing":
            Z = self.Z[U]
            return self.kernel(Z, Z)
        return torch.diag(self._prior_diag(U))

    def _phi_mu(self, X: torch.Tensor) -> torch.Tensor:
        """``Phi(X) mu`` over all m basis functions ``(B,)``, chunked over the basis as
        the predictions are (O(B m) time, O(B chunk) memory)."""
        B, m = X.shape[0], self.m
        mu = self.mu.detach()
        f = X.new_zeros(B)
        chunk = max(1, min(m, 2**22 // max(B, 1)))
        for c0 in range(0, m, chunk):
            idx = torch.arange(c0, min(c0 + chunk, m), device=X.device)
            f += self.features(X, idx) @ mu[idx]
        return f

    def newton_mean(
        self, Xl: torch.Tensor, yl: torch.Tensor, U: torch.Tensor, n: int, reduce: Any = None
    ) -> torch.Tensor:
        """Randomised block-Newton step on ``mu_U`` (``mean_step="newton"``).

        On the ``|B|`` sampled rows ``(Xl, yl)``: the residual ``r_B = y_B - Phi_B mu``
        with *all* m basis functions (chunked; this is what makes the step O(n~ m)
        instead of O(1) in m -- the sub-sampled estimator's gradient is far too noisy
        to be multiplied by ``H^{-1}``), the block gradient
        ``g_U = (n / |B|) Phi_BU^T r_B / sigma^2 - S_UU mu_U`` and Hessian block
        ``H_UU = (n / |B|) Phi_BU^T Phi_BU / sigma^2 + S_UU`` (both unbiased over the
        rows), then ``mu_U += rho H_UU^{-1} g_U``.  With all rows and all basis
        functions and rho = 1 this is one exact Newton step to the optimal mean.  In a
        process group the data parts are averaged over processes, as the gradients are.
        Returns the new rows.

        Called by the training step; public so that the step can be checked against the
        closed form (``yl`` in scaled-target units, :meth:`scale_targets`).  Writes
        ``mu[U]``.
        """
        mu = self.mu.detach()
        Phi = self.features(Xl, U)
        w = n / (Xl.shape[0] * self._noise())
        g_data, H_data = w * (Phi.T @ (yl - self._phi_mu(Xl))), w * (Phi.T @ Phi)
        if reduce is not None:
            reduce.mean_([g_data, H_data])
        S = self.prior_block(U)
        g = g_data - S @ mu[U]
        H = H_data + S
        if self.newton_ridge:
            H.diagonal().add_(self.newton_ridge * H.diagonal().mean())
        # as it is when it factorises (then one step with everything sampled is exact);
        # else with the configured escalating jitter (the minibatch block has rank <= n~,
        # and S = K adds little curvature in K's near-null directions)
        L, info = torch.linalg.cholesky_ex(H)
        if int(info) != 0:
            L, _ = cholesky(H, name="QSGP Newton block H_UU")
        new = mu[U] + self.newton_damping * torch.cholesky_solve(g[:, None], L)[:, 0]
        self.mu.data[U] = new
        return new

    def _nystrom(self) -> bool:
        """Whether a control variate set up now includes the Nyström one (Appendix F.2)."""
        return self.nystrom_cv and self.basis == "inducing"

    def _rvm_em(self) -> bool:
        """Whether the RVM precisions take closed-form updates ("em" or "mackay")."""
        return self.basis == "rvm" and self.rvm_update in ("em", "mackay")

    def rvm_em_update(
        self, U: torch.Tensor, colnorm: torch.Tensor | None, mackay: bool = False
    ) -> None:
        """Closed-form update of the sampled rows ``U``: the optimal ``c_ii`` of each
        diagonal-only column (Prop. 1, Gaussian likelihood, needs ``colnorm`` =
        ``|phi_i|^2`` over all n points), then

        - em: ``s_i = 1 / (mu_i^2 + Sigma_ii)``, the maximiser of the ELBO's only s_i
          terms ``(log s_i - s_i (mu_i^2 + Sigma_ii)) / 2`` (coordinate ascent);
        - mackay: ``s_i = gamma_i / mu_i^2`` with ``gamma_i = 1 - s_i Sigma_ii`` (MacKay's
          re-estimate, as in Tipping's RVM), capped at ``RVM_MAX_PRECISION``.  Its fixed
          points are em's (``s (mu^2 + Sigma) = 1`` either way), but it moves ``s_i``
          by the factor ``gamma_i / (s_i mu_i^2)`` per update instead of at most
          ``+|phi_i|^2 / sigma^2``, so pruned weights leave in far fewer steps.  Rows
          with ``gamma_i <= 0`` (a not yet converged q with ``Sigma_ii >= 1 / s_i``) take
          em's update instead of collapsing ``s_i`` to ~0.

        Called by the training step (``basis="rvm"``, ``rvm_update`` "em"/"mackay");
        public for applying or checking one update outside :meth:`fit` (``U`` a tensor
        of row indices, ``colnorm`` from :meth:`column_norms` or None to leave ``c``).
        """
        k = self.k
        s_U = torch.exp(self.log_s.data[U])
        if colnorm is not None:
            s2 = self._noise().detach()
            diag_only = U >= k
            c = 0.5 * torch.log(s2 / (colnorm[U] + s2 * s_U))
            self.c_raw.data[U] = torch.where(diag_only, c, self.c_raw.data[U])
        # Sigma_ii = |row i of C|^2: the dense columns (diagonal included for i < k), plus
        # the diagonal-only entry for i >= k
        craw = self.c_raw.data[U]
        cols = torch.arange(k, device=U.device)
        dense = self._column_values(U, cols, self.c_dense.data[U], craw)
        sigma = dense.square().sum(1) + torch.where(U >= k, torch.exp(2.0 * craw), 0.0)
        mu2 = self.mu.data[U] ** 2
        log_s_em = -torch.log(mu2 + sigma)
        if not mackay:
            self.log_s.data[U] = log_s_em
            return
        # gamma_i <= 0 means Sigma_ii >= 1 / s_i: a posterior variance above the prior's,
        # which q can hold only before it has converged.  MacKay's formula would then send
        # s_i to ~0 (and the weight's prior variance to ~inf); em's update has the same
        # fixed point and is always finite, so those rows take it instead.
        gamma = 1.0 - s_U * sigma
        tiny = torch.finfo(sigma.dtype).tiny
        log_s = torch.log(gamma.clamp_min(tiny)) - torch.log(mu2.clamp_min(tiny))
        log_s = torch.where(gamma > 0, log_s, log_s_em)
        self.log_s.data[U] = log_s.clamp_max(math.log(RVM_MAX_PRECISION))

    # ----------------------------------------------------------------- prediction --
    def _compute_cache(self):
        return None

    def _predict_f_chunk(self, X, cache):
        B = X.shape[0]
        m, k = self.m, self.k
        mean = X.new_zeros(B)
        var = X.new_zeros(B)
        P = X.new_zeros(B, k)
        knorm = X.new_zeros(B)
        cols = torch.arange(k, device=X.device)
        chunk = max(1, min(m, 2**22 // max(B, 1)))
        for c0 in range(0, m, chunk):
            idx = torch.arange(c0, min(c0 + chunk, m), device=X.device)
            phi = self.features(X, idx)
            mean += phi @ self.mu[idx]
            off = idx >= k
            var += ((phi[:, off] * torch.exp(self.c_raw[idx][off])) ** 2).sum(1)
            if k:
                Cb = self._column_values(idx, cols, self.c_dense[idx], self.c_raw[idx])
                P += phi @ Cb
            if self.augment:
                knorm += (phi**2).sum(1)
        var = var + (P**2).sum(1)
        if self.augment and self.basis != "rff" and self._is_gaussian():
            s2 = self._noise()
            kss = self.kernel.diag(X)
            var = var + s2 * kss**2 / (knorm + s2 * kss)
        return mean[:, None], var[:, None]

    def relevance_vectors(self, threshold: float = 1e4) -> np.ndarray:
        """Indices of basis functions with finite precision ``s_i < threshold`` (RVM)."""
        self._require_built()
        if self.basis != "rvm":
            raise ValueError("relevance vectors exist only for basis='rvm'")
        return torch.nonzero(torch.exp(self.log_s.detach()) < threshold).flatten().cpu().numpy()
