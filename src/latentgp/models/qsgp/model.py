"""The QSGP model: options, basis functions, build, initialisation and predictions.

Weight-space model with ``m`` basis functions (notes B.1; the package docstring has the
overview)::

    f(x) = phi(x)^T w,   w ~ N(0, S^{-1}),   q(w) = N(mu, C C^T)

Predictions (notes B.6): ``phi(x)^T mu`` and ``phi(x)^T Sigma phi(x)``, plus for
``basis="inducing"`` with a Gaussian likelihood the augmentation of Appendix G (Prop. 4):
one extra basis function at ``x*`` with its closed-form (Prop. 1) diagonal, adding
``s2 k**^2 / (k*^T k* + s2 k**)`` to the latent variance.

The sampled objective lives in :mod:`.estimator`, the control variates in
:mod:`.control_variates`, the RVM updates in :mod:`.rvm`, the Newton mean step in
:mod:`.newton` and the sparse step in :mod:`.step`; the class's public methods are the
hooks onto them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from ...kernels import Kernel
from ...kernels.features import SPECTRAL_DOF, RandomFourierFeatures
from ...likelihoods import Bernoulli, Gaussian, Laplace, Likelihood
from ...linalg import cholesky
from ...validation import check_positive_float, check_positive_int, keyword_only_after_first
from ..base import GPModel, register_model
from . import control_variates, estimator, newton, rvm
from .factor import dense_factor, optimal_log_diagonal
from .predict import predictive_moments
from .rvm import RVM_UPDATES
from .step import sparse_step

BASES = ("rff", "inducing", "rvm")
COVARIANCES = ("meanfield", "chevron", "full")
MEAN_STEPS = ("gradient", "newton")
VARIATIONAL_OPTIMIZERS = ("adagrad", "sgd")


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
        (default, as in the seed), ``"em"`` or ``"mackay"`` (closed-form updates of
        the sampled rows; :mod:`latentgp.models.qsgp.rvm`).
    nystrom_cv: with ``basis="inducing"`` and ``cv_rank > 0``, also apply the Nyström
        control variate of Appendix F.2 to the prior term ``mu^T K mu``
        (:mod:`latentgp.models.qsgp.control_variates`).
    mean_step: how the sampled rows of the mean move: ``"gradient"`` (default, as in
        the seed; the sparse optimiser's step) or ``"newton"`` (Gaussian likelihood
        only; a randomised block-Newton step, :mod:`latentgp.models.qsgp.newton`).
    newton_damping: the step fraction of ``mean_step="newton"`` (0 < rho <= 1).
    newton_ridge: Levenberg-Marquardt term of ``mean_step="newton"``: ``H_UU`` gets
        ``newton_ridge * mean(diag H_UU)`` added to its diagonal (default 0; 0.01 keeps
        steps on small data batches with local kernel columns in check).
    feature_seed: seed of the random features / inducing-point choice.

    Training: ``fit`` takes the options of :meth:`GPModel.fit` and runs sparse stochastic
    steps (:mod:`latentgp.models.qsgp.step`).  ``batch_size`` is n~ (data rows per step,
    default ``min(N, 500)``); ``optimizer`` is ``"adagrad"`` (default) or ``"sgd"`` (no
    momentum: the control variate needs sparse updates); ``lr`` its step size (default
    0.1); ``optimizer_kwargs``: ``{"eps": ...}`` for adagrad (default 1e-10).  A
    checkpoint holds the AdaGrad accumulators, the control variate's running expectations
    and the hyperparameter optimiser, so a resumed run matches an uninterrupted one.
    Inside an initialised ``torch.distributed`` default group (``latentgp fit --nproc``,
    torchrun) every process passes the same full ``X, y``, evaluates the estimator on its
    part of the sampled rows, and the gradients are averaged before the (identical) sparse
    update: the run equals the one-process run up to round-off.
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

    def prior_diag(
        self, idx: torch.Tensor | None = None, log_s: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Diagonal of the prior precision S at ``idx`` ``(K,)`` (None: all m;
        ``log_s``: gathered rows of the RVM's ``log s`` at ``idx``)."""
        if idx is None:
            if self.basis == "rff":
                return torch.ones_like(self.mu)
            return torch.exp(self.log_s) if self.basis == "rvm" else self.kernel.diag(self.Z)
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
    def dense_factor(self) -> torch.Tensor:
        """The full ``C`` ``(m, m)`` (small m only; for tests and diagnostics)."""
        return dense_factor(self.c_raw.detach(), self.c_dense.detach())

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
            sdiag = self.prior_diag()
            self.c_raw.copy_(optimal_log_diagonal(colnorm, s2, sdiag))

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
            c = optimal_log_diagonal(self.column_norms(X), s2, self.prior_diag())
            self.c_raw[self.k :] = c[self.k :]

    # ---------------------------------------------------------- exact quantities --
    def exact_elbo(self, X: Any, y: Any) -> float:
        """The exact ELBO (Gaussian) or exact ``E_q log p(y|w) - KL`` (quadrature) in the
        scaled-target units of the objective; O(N m^2 + m^3): small problems only."""
        self._require_built()
        Xt = self._check_X(X)
        yt = self._scale_y(self._check_y(y, Xt.shape[0]))
        with torch.no_grad():
            return float(estimator.exact_elbo(self, Xt, yt))

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
        s = estimator.sample_indices(self, n, n if batch_size is None else batch_size, gen)
        lv = estimator.gather_rows(self, s)
        cv = None
        if use_control_variate:
            if self._train_state is None or self._train_state.get("cv") is None:
                raise ValueError("no control-variate state: call setup_control_variate first")
            cv = self._train_state["cv"]
        with torch.no_grad():
            return float(estimator.elbo_estimate(self, Xt[s["ell"]], yt[s["ell"]], n, s, lv, cv))

    def setup_control_variate(self, X: Any, rank: int | None = None, seed: int = 0) -> None:
        """Pick ``rank`` support points and set the running expectation ``a = Phi_p mu``
        (and ``A_r = Phi_p c_r`` for the dense columns) at the current parameters."""
        self._require_built()
        Xt = self._check_X(X)
        rank = self.cv_rank if rank is None else check_positive_int(rank, "rank")
        self._ensure_state()
        self._train_state["cv"] = control_variates.make_control_variate(self, Xt, rank, seed)

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
            "max_steps": 1000,
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
        if rvm.needs_column_norms(self) and (first or "colnorm" not in st):
            # |phi_i|^2 over all n points, O(N m) once; from 4096 rows when that is large
            rows = X if N * self.m <= 2e8 else X[torch.randperm(N)[:4096].to(X.device)]
            st["colnorm"] = self.column_norms(rows) * (N / rows.shape[0])
        if self.cv_rank and (st["cv"] is None or first):
            st["cv"] = control_variates.make_control_variate(
                self, X, self.cv_rank, 0 if seed is None else seed
            )
        return bool(cfd)

    def finish_training(self, X: torch.Tensor, *, closed_form: bool, seed: int | None) -> None:
        """After the last step: the closed-form diagonal (and the control variate built
        on it) at the final parameters, when ``closed_form``."""
        if closed_form:
            self._closed_form_diagonal(X)
            if self.cv_rank:
                st = self._train_state
                st["cv"] = control_variates.make_control_variate(
                    self, X, self.cv_rank, 0 if seed is None else seed
                )

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
        state, data = self._train_state, (X, y, n)
        return sparse_step(self, state, data, batch_size, gen, rows, hyper_optimizer, step, reduce)

    def prior_block(self, U: torch.Tensor) -> torch.Tensor:
        """``S_UU`` ``(|U|, |U|)``: the prior precision on the basis functions ``U``.

        Public for checking the Newton step (:meth:`newton_mean`) against its formula."""
        return newton.prior_block(self, U)

    def newton_mean(
        self, Xl: torch.Tensor, yl: torch.Tensor, U: torch.Tensor, n: int, reduce: Any = None
    ) -> torch.Tensor:
        """Randomised block-Newton step on ``mu_U`` (``mean_step="newton"``; the formula
        is in :mod:`latentgp.models.qsgp.newton`): with all rows and all basis functions
        and rho = 1 one exact Newton step to the optimal mean.  Called by the training
        step; public so that the step can be checked against the closed form (``yl`` in
        scaled-target units, :meth:`scale_targets`).  Writes ``mu[U]``, returns the new
        rows.
        """
        return newton.newton_mean(self, Xl, yl, U, n, reduce)

    def rvm_em_update(
        self, U: torch.Tensor, colnorm: torch.Tensor | None, mackay: bool = False
    ) -> None:
        """Closed-form update of the RVM precisions of the rows ``U`` (em, or MacKay's
        re-estimate with ``mackay``; :func:`latentgp.models.qsgp.rvm.rvm_em_update`).

        Called by the training step (``basis="rvm"``, ``rvm_update`` "em"/"mackay");
        public for applying or checking one update outside :meth:`fit` (``U`` a tensor
        of row indices, ``colnorm`` from :meth:`column_norms` or None to leave ``c``).
        """
        rvm.rvm_em_update(self, U, colnorm, mackay)

    # ----------------------------------------------------------------- prediction --
    def _compute_cache(self):
        return None

    def _predict_f_chunk(self, X, cache):
        return predictive_moments(self, X)

    def relevance_vectors(self, threshold: float = 1e4) -> np.ndarray:
        """Indices of basis functions with finite precision ``s_i < threshold`` (RVM)."""
        self._require_built()
        if self.basis != "rvm":
            raise ValueError("relevance vectors exist only for basis='rvm'")
        return torch.nonzero(torch.exp(self.log_s.detach()) < threshold).flatten().cpu().numpy()
