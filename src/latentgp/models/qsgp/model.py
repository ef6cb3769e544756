"""The QSGP model: options, basis functions, build, training hooks and predictions.

Weight-space model with ``m`` basis functions (notes B.1; the package docstring has the
overview)::

    f(x) = phi(x)^T w,   w ~ N(0, S^{-1}),   q(w) = N(mu, C C^T)

Predictions (notes B.6): ``phi(x)^T mu`` and ``phi(x)^T Sigma phi(x)``, plus for
``basis="inducing"`` with a Gaussian likelihood the augmentation of Appendix G (Prop. 4):
one extra basis function at ``x*`` with its closed-form (Prop. 1) diagonal, adding
``s2 k**^2 / (k*^T k* + s2 k**)`` to the latent variance.

The initial values (Prop. 1's diagonal) live in :mod:`.initial`, the sampled objective
in :mod:`.estimator`, the control variates in
:mod:`.control_variates`, the RVM updates in :mod:`.rvm`, the Newton mean step in
:mod:`.newton` and the sparse step in :mod:`.step`; the class's public methods are the
hooks onto them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from ...kernels import Kernel
from ...kernels.features import SPECTRAL_DOF, RandomFourierFeatures
from ...likelihoods import Gaussian, Likelihood
from ...options import OptionGroup
from ...validation import check_positive_int, keyword_only_after_first
from ..base import GPModel, register_model
from . import control_variates, estimator, newton, rvm
from .factor import dense_factor
from .initial import (
    closed_form_log_diagonal,
    column_norms,
    initial_values,
    optimal_noise_variance,
    pretrain_hyperparameters,
)
from .options import (
    AUTO_NEWTON_FACTOR,
    DEFAULT_BASIS_BATCH,
    DEFAULT_HYPER_LR,
    FLAT_KEYWORDS,
    GROUPS,
    PRETRAIN_ROWS,
    Basis,
    ControlVariate,
    Covariance,
    Hyperparameters,
    Newton,
    check_likelihood_and_kernel,
    grouped_config,
    resolve_options,
)
from .predict import predictive_moments
from .step import sparse_step

VARIATIONAL_OPTIMIZERS = ("adagrad", "sgd")
#: m of ``basis="rff"`` without ``num_basis``
DEFAULT_NUM_FEATURES = 2000
#: n~, the data rows per step of the Newton mean step without ``batch_size``: min(N, this)
NEWTON_BATCH_ROWS = 2000
#: the step ceiling of a fit without a budget with the Newton mean step (keys of
#: :data:`latentgp.training.convergence.CEILINGS`)
NEWTON_CEILING = {"epochs": 30, "floor": 1000, "cap": 1000}
#: and its rule: windows of at least 150 steps (the stochastic default's 50-step windows
#: and the estimate's noise stopped kin40k after 150-300 steps with the hyperparameters
#: still moving, RMSE 0.32-0.33), a stricter relative tolerance than its 2e-4
NEWTON_RULE = {"min_window": 150, "rtol": 5e-5}
#: the positional order of the arguments after ``num_basis`` before they became
#: keyword-only (and before the grouped options): old positional calls keep their meaning
LEGACY_POSITIONAL = (
    "basis", "likelihood", "kernel", "covariance", "num_dense", "basis_batch", "num_columns",
    "cv_rank", "learn_hyperparameters", "augment", "closed_form_diagonal", "hyper_lr",
    "hyper_delay", "feature_seed", "rvm_update", "nystrom_cv", "mean_step", "newton_damping",
    "newton_ridge",
)  # fmt: skip


@register_model
class QSGP(GPModel):
    """Quadruply stochastic GP (see module docstring).

    Parameters
    ----------
    num_basis: m; None: 2000 random features, at most one per training row (with more
        features than rows the factorised q(w) keeps prior variance in directions the
        data cannot fix and inflates the learned noise; diabetes, 309 rows, test NLPD
        5.80 at m = 2,000, 5.60 at m = 309; 800 rows of kin40k, 1.32 and 0.98), or every
        training point for the inducing / RVM bases.
    basis: a :class:`Basis` (``lg.QSGP.Basis(kind, batch, seed, rvm_update)``) or its
        kind, ``"rff"`` (default), ``"inducing"`` or ``"rvm"``.
    likelihood: ``"gaussian"`` (unbiased estimator), ``"bernoulli"`` or ``"laplace"``
        (Theorem 3 lower bound).
    kernel: RBF / Matérn for ``"rff"``; any stationary kernel for the others.
    covariance: a :class:`Covariance` (``lg.QSGP.Covariance(kind, num_dense, num_columns,
        closed_form_diagonal)``) or its kind, ``"meanfield"`` (default), ``"chevron"`` or
        ``"full"``.
    control_variate: a :class:`ControlVariate` (``lg.QSGP.ControlVariate(rank,
        nystrom)``) or its rank (default 0: none; Gaussian likelihood only).
    mean_step: how the sampled rows of the mean move: a :class:`Newton`
        (``lg.QSGP.Newton(damping, ridge, anchor_every)``, or ``"newton"`` for its
        defaults; Gaussian likelihood only; a variance-reduced randomised block-Newton
        step), ``"gradient"`` (the sparse optimiser's step, as in the seed) or ``"auto"``:
        at the first fit, the Newton step when min(N, 2,000) training rows hold 4 times
        its basis batch (250), so that its variance-reduction anchor is on, else the
        gradient step.  None (default): ``"auto"`` for the Gaussian likelihood,
        ``"gradient"`` otherwise (docs/design.md says why).
    hyperparameters: a :class:`Hyperparameters` (``lg.QSGP.Hyperparameters(lr, delay)``):
        Adam on the kernel (rff) / noise hyperparameters.
    learn_hyperparameters: empirical Bayes for kernel (rff) / noise / s (rvm): True, False
        or ``"noise"`` (the likelihood's parameters only).  None: ``"noise"`` when the
        hyperparameters are pretrained (``Hyperparameters.pretrain_rows``, the default of
        the Gaussian random-feature model: learned in the random-feature bound the
        kernel's drift from the exact GP's and the test error grows; the noise alone
        finds the level of the features' residual), else all bases but ``"inducing"``.
    augment: predictive-variance augmentation (default: on for ``"inducing"``).

    The fields of each group are documented on its class (:mod:`latentgp.models.qsgp.options`).
    Deprecated flat keywords (a ``DeprecationWarning`` shows the grouped spelling):
    ``basis_batch``, ``feature_seed``, ``rvm_update`` (``basis=``: ``batch``, ``seed``,
    ``rvm_update``), ``num_dense``, ``num_columns``, ``closed_form_diagonal``
    (``covariance=``), ``cv_rank``, ``nystrom_cv`` (``control_variate=``: ``rank``,
    ``nystrom``), ``newton_damping``, ``newton_ridge`` (``mean_step=lg.QSGP.Newton``:
    ``damping``, ``ridge``), ``hyper_lr``, ``hyper_delay`` (``hyperparameters=``: ``lr``,
    ``delay``).

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

    Basis = Basis
    Covariance = Covariance
    ControlVariate = ControlVariate
    Newton = Newton
    Hyperparameters = Hyperparameters

    default_optimizer = "adagrad"
    #: QSGP's estimators are for a zero-mean weight-space prior (its closed forms and
    #: control variates assume f = Phi w with w ~ N(0, Sigma)): no ``mean=``
    supports_mean = False
    #: QSGP's sparse steps are the method's own (no MAP term, no projections)
    supports_hyperpriors = False
    default_lr = 0.1

    @keyword_only_after_first(legacy=LEGACY_POSITIONAL)
    def __init__(
        self,
        num_basis: int | None = None,
        *,
        basis: Basis | str | dict[str, Any] | None = None,
        likelihood: str | Likelihood = "gaussian",
        kernel: str | Kernel | None = "rbf",
        covariance: Covariance | str | dict[str, Any] | None = None,
        control_variate: ControlVariate | int | dict[str, Any] | None = None,
        mean_step: Newton | str | dict[str, Any] | None = None,
        hyperparameters: Hyperparameters | dict[str, Any] | None = None,
        learn_hyperparameters: bool | str | None = None,
        augment: bool | None = None,
        **common: Any,
    ) -> None:
        flat = {k: common.pop(k) for k in list(common) if k in FLAT_KEYWORDS}
        # hyperparameters given as values (a kernel or likelihood object, the noise) are
        # the user's: no default pretraining overwrites them
        given_values = (not isinstance(kernel, str) or not isinstance(likelihood, str)
                        or common.get("noise_variance") is not None)
        super().__init__(kernel, likelihood, **common)
        newton_flat = any(FLAT_KEYWORDS[k][0] == "mean_step" for k in flat)
        if mean_step is None and not (newton_flat and isinstance(self.likelihood, Gaussian)):
            # the Gaussian likelihood's step is chosen at the first fit: the anchored
            # Newton step converges on kin40k but not where the minibatch is smaller
            # than 4x the basis functions drawn per step (docs/design.md); others: the
            # seed's gradient step
            mean_step = "auto" if isinstance(self.likelihood, Gaussian) else "gradient"
        given = {
            "basis": basis,
            "covariance": covariance,
            "control_variate": control_variate,
            "mean_step": mean_step,
            "hyperparameters": hyperparameters,
        }
        groups = resolve_options(given, flat, model=type(self).__name__)
        self.basis: Basis = groups["basis"]
        self.covariance: Covariance = groups["covariance"]
        self.control_variate: ControlVariate = groups["control_variate"]
        self.mean_step: Newton | str = groups["mean_step"]
        self.hyperparameters: Hyperparameters = groups["hyperparameters"]
        check_likelihood_and_kernel(self.likelihood, self.kernel, groups)
        self.num_basis = None if num_basis is None else check_positive_int(num_basis, "num_basis")
        if self.hyperparameters.pretrain_rows is None:
            applies = (self.basis.kind == "rff" and isinstance(self.likelihood, Gaussian)
                       and not given_values)
            self.hyperparameters = dataclasses.replace(
                self.hyperparameters, pretrain_rows=PRETRAIN_ROWS if applies else 0)
        if learn_hyperparameters is None:
            # a pretrained kernel is kept: learned in the random-feature bound it drifts
            # from the exact GP's (kin40k: test RMSE 0.29 after 300 steps, 0.40 after 800,
            # against 0.18 with the kernel kept and the noise learned; docs/design.md)
            learn_hyperparameters = ("noise" if self.hyperparameters.pretrain_rows
                                     else self.basis.kind != "inducing")
        if learn_hyperparameters != "noise":
            if isinstance(learn_hyperparameters, str):
                raise ValueError("learn_hyperparameters must be True, False, 'noise' or None, "
                                 f"got {learn_hyperparameters!r}")
            learn_hyperparameters = bool(learn_hyperparameters)
        self.learn_hyperparameters: bool | str = learn_hyperparameters
        self.augment = (self.basis.kind == "inducing") if augment is None else bool(augment)
        self.m: int | None = None
        self.k: int = 0
        self._train_state: dict[str, Any] | None = None

    @property
    def num_inducing(self) -> int | None:
        """Number of basis functions m (what the CLI's ``--inducing`` sets)."""
        return self.m if self.m is not None else self.num_basis

    #: constructor arguments stored under their own names (the option groups follow)
    CONFIG_ATTRIBUTES = ("num_basis", "learn_hyperparameters", "augment")

    # ------------------------------------------------------------------ config --
    def get_config(self) -> dict[str, Any]:
        cfg = super().get_config()
        for argument in GROUPS:
            group = getattr(self, argument)
            cfg[argument] = group.to_config() if isinstance(group, OptionGroup) else group
        return cfg

    @classmethod
    def from_config(cls, cfg: dict[str, Any], device=None) -> QSGP:
        """The model from :meth:`get_config`'s values; configurations written before the
        grouped options (flat ``basis_batch``, ``cv_rank``, ...) read the same, without a
        warning (:func:`~latentgp.models.qsgp.options.grouped_config`)."""
        return super().from_config(grouped_config(cfg), device)

    def _build_args(self) -> dict[str, Any]:
        return {**super()._build_args(), "num_basis": self.m}

    def _resolve_m(self, N: int) -> int:
        if self.num_basis is not None:
            if self.basis.kind != "rff" and self.num_basis > N:
                raise ValueError(
                    f"num_basis={self.num_basis} is larger than the {N} training points "
                    f"(basis={self.basis.kind!r} centres one basis function on each)"
                )
            return self.num_basis
        return min(DEFAULT_NUM_FEATURES, N) if self.basis.kind == "rff" else N

    def _build_for_data(self, X: torch.Tensor, y: torch.Tensor) -> None:
        if y.ndim != 1:
            raise ValueError(f"QSGP models one output column; y has shape {tuple(y.shape)}")
        self._resolve_mean_step(X.shape[0])
        self._build(X.shape[1], 1, self._resolve_m(X.shape[0]))

    def _build_for_source(self, input_dim: int, num_rows: int) -> None:
        self._resolve_mean_step(num_rows)
        self._build(input_dim, 1, self._resolve_m(num_rows))

    def _resolve_mean_step(self, N: int) -> None:
        """``mean_step="auto"`` at the first fit on ``N`` rows: the Newton step when its
        default minibatch, min(N, 2,000) rows, holds :data:`AUTO_NEWTON_FACTOR` times its
        basis batch (so the variance-reduction anchor is on), else the gradient step."""
        if self.mean_step != "auto":
            return
        batch = self.basis.batch if self.basis.batch is not None else DEFAULT_BASIS_BATCH["newton"]
        self.mean_step = (Newton() if min(N, NEWTON_BATCH_ROWS) >= AUTO_NEWTON_FACTOR * batch
                          else "gradient")

    @property
    def streams(self) -> bool:
        """Whether a fit can read an out-of-core source row by row: not when the basis is
        every training input (``basis != "rff"`` without ``num_basis``)."""
        return self.basis.kind == "rff" or self.num_basis is not None

    def _num_dense_for(self, m: int) -> int:
        if self.covariance.kind == "meanfield":
            return 0
        if self.covariance.kind == "full":
            if m > 20000:
                raise ValueError(f"covariance='full' stores an m x m factor; m={m} is too large")
            return m
        return min(m, 10 if self.covariance.num_dense is None else self.covariance.num_dense)

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
        if self.basis.kind == "rvm":
            self.log_s = nn.Parameter(torch.zeros(self.m, dtype=dt), requires_grad=False)
        if self.basis.kind == "rff":
            dof = SPECTRAL_DOF[type(self.kernel).__name__]
            self.rff = RandomFourierFeatures(self.m, input_dim, dof, self.basis.seed)
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
        if self.basis.kind == "rff":
            ls, var = self._hypers(frozen)
            return self.rff(X - self.input_offset, idx, ls, var)
        return self.kernel(X, self.Z[idx])

    def prior_diag(
        self, idx: torch.Tensor | None = None, log_s: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Diagonal of the prior precision S at ``idx`` ``(K,)`` (None: all m;
        ``log_s``: gathered rows of the RVM's ``log s`` at ``idx``)."""
        if idx is None:
            if self.basis.kind == "rff":
                return torch.ones_like(self.mu)
            return torch.exp(self.log_s) if self.basis.kind == "rvm" else self.kernel.diag(self.Z)
        if self.basis.kind == "rff":
            return torch.ones(idx.shape[0], dtype=self.dtype_, device=idx.device)
        if self.basis.kind == "rvm":
            return torch.exp(self.log_s[idx] if log_s is None else log_s)
        return self.kernel.diag(self.Z[idx])

    def _is_gaussian(self) -> bool:
        return isinstance(self.likelihood, Gaussian)

    # -------------------------------------------------------------- the factor C --
    def dense_factor(self) -> torch.Tensor:
        """The full ``C`` ``(m, m)`` (small m only; for tests and diagnostics)."""
        return dense_factor(self.c_raw.detach(), self.c_dense.detach())

    # --------------------------------------------------------------- initialising --
    def _init_from_data(self, X: torch.Tensor, y: torch.Tensor) -> None:
        super()._init_from_data(X, y)
        self.pretrain_stage_ = None
        if self.hyperparameters.pretrain_rows:
            self.pretrain_stage_ = pretrain_hyperparameters(
                self, X, y, self.hyperparameters.pretrain_rows)
        initial_values(self, X)  # Z or the input offset, log|S|, mu, C's diagonal (Prop. 1)

    def column_norms(self, X: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
        """``|phi_r|^2`` over the rows of X for all m columns ``(m,)`` (O(N m), chunked).

        The data part of the closed-form diagonal (Prop. 1) and of the RVM updates: the
        ``colnorm`` that :meth:`rvm_em_update` takes.  ``X`` is a validated tensor."""
        return column_norms(self, X, chunk)

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
            c = closed_form_log_diagonal(self, X)
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
        rank = self.control_variate.rank if rank is None else check_positive_int(rank, "rank")
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
            if self.basis.kind == "rvm":
                st["G_log_s"] = z(self.log_s)
            self._train_state = st

    def _hyper_params(self) -> list[nn.Parameter]:
        if not self.learn_hyperparameters:
            return []
        ps = list(self.likelihood.parameters())
        if self.basis.kind == "rff" and self.learn_hyperparameters is True:
            ps += list(self.kernel.parameters())
        return [p for p in ps if p.requires_grad]

    @property
    def basis_batch(self) -> int:
        """m~, the basis functions drawn per index set: ``Basis.batch``, or when None the
        default of the mean step (:data:`~latentgp.models.qsgp.options.DEFAULT_BASIS_BATCH`)."""
        if self.basis.batch is not None:
            return self.basis.batch
        return DEFAULT_BASIS_BATCH["newton" if isinstance(self.mean_step, Newton) else "gradient"]

    @property
    def hyper_lr(self) -> float:
        """Adam's learning rate on the hyperparameters: ``Hyperparameters.lr``, or when None
        the default of the mean step (:data:`~latentgp.models.qsgp.options.DEFAULT_HYPER_LR`)."""
        if self.hyperparameters.lr is not None:
            return self.hyperparameters.lr
        return DEFAULT_HYPER_LR["newton" if isinstance(self.mean_step, Newton) else "gradient"]

    def _default_fit_args(self, N: int) -> dict[str, Any]:
        self._resolve_mean_step(N)  # the fit's defaults depend on the step
        args = {"optimizer": self.default_optimizer, "lr": self.default_lr}
        if not isinstance(self.mean_step, Newton):
            return {**args, "batch_size": min(N, 500)}
        # the Newton step estimates an |U| x |U| Hessian block from n~ rows (n~ >> |U|)
        # and converges in a few hundred steps (docs/design.md): a fit without a budget
        # stops by the convergence rule within NEWTON_CEILING
        return {**args, "batch_size": min(N, NEWTON_BATCH_ROWS),
                "ceiling": dict(NEWTON_CEILING),
                "convergence": dict(NEWTON_RULE)}  # fmt: skip

    def fit_warnings(self, N: int, batch_size: int) -> list[str]:
        """What a fit on ``N`` rows with minibatches of ``batch_size`` should warn of: the
        Newton mean step without its variance-reduction anchor (minibatch below 4 times
        the basis batch) stalls at a noise floor (kin40k: RMSE 0.68 with 500 rows a step,
        0.19 with 2,000; docs/design.md)."""
        if not isinstance(self.mean_step, Newton) or batch_size >= N:
            return []
        if self.mean_step.anchor_interval(N, batch_size, self.basis_batch) != 0:
            return []
        return [
            f"the Newton mean step runs without its anchor: batch_size={batch_size} is below "
            f"4 x the basis batch ({self.basis_batch}), and its minibatch steps stall at a "
            "noise floor; use batch_size >= 4 x Basis.batch, a smaller Basis.batch, "
            "mean_step='gradient', or leave batch_size to the default"
        ]

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
        cfd = self.covariance.closed_form_diagonal
        if cfd is None:
            cfd = self._is_gaussian() and N * self.m <= 2e8
        if cfd and first:
            self._closed_form_diagonal(X)
        if sync is not None:
            sync(self)
        self._ensure_state()
        st = self._train_state
        st["anchor"] = None  # the Newton step's anchor: refreshed at the fit's first step
        st["newton_scale"], st["newton_backoffs"] = 1.0, []  # its back-offs:
        st["newton_ridge"] = self.mean_step.ridge if isinstance(self.mean_step, Newton) else 0.0
        if rvm.needs_column_norms(self) and (first or "colnorm" not in st):
            # |phi_i|^2 over all n points, O(N m) once; from 4096 rows when that is large
            rows = X if N * self.m <= 2e8 else X[torch.randperm(N)[:4096].to(X.device)]
            st["colnorm"] = self.column_norms(rows) * (N / rows.shape[0])
        if self.control_variate.rank and (st["cv"] is None or first):
            st["cv"] = control_variates.make_control_variate(
                self, X, self.control_variate.rank, 0 if seed is None else seed
            )
        return bool(cfd)

    def finish_training(self, X: torch.Tensor, *, closed_form: bool, seed: int | None,
                        y: torch.Tensor | None = None) -> None:
        """After the last step: with ``learn_hyperparameters="noise"`` (the pretrained
        default) and the scaled targets ``y``, the noise at the ELBO's optimum for the final
        q(w) (:func:`~latentgp.models.qsgp.initial.optimal_noise_variance`; Adam moves the
        log noise by at most its learning rate a step, and the noise has to rise from the
        exact GP's to the features' residual level), alternated twice with the closed-form
        diagonal when ``closed_form``; the closed-form diagonal (and the control variate
        built on it) at the final parameters, when ``closed_form``; a fit that pretrained
        the hyperparameters records both stages in ``history_.stages`` and says so in its
        events."""
        if self.learn_hyperparameters == "noise" and y is not None and self._is_gaussian():
            before = float(self.likelihood.variance.detach())
            rounds = 2 if closed_form else 1
            for i in range(rounds):
                self.likelihood.variance = optimal_noise_variance(self, X, y)
                if closed_form and i < rounds - 1:  # the last one is set below
                    self._closed_form_diagonal(X)
            if self.history_ is not None:
                self.history_.events.append(
                    f"noise variance set to the ELBO's optimum at the final q: {before:.4g} "
                    f"-> {float(self.likelihood.variance.detach()):.4g} (scaled units)")
        said = newton.backoff_event(self, self._train_state or {})
        if said and self.history_ is not None:
            self.history_.events.append(said)
        stage = getattr(self, "pretrain_stage_", None)
        if stage is not None and self.history_ is not None:
            h = self.history_
            h.stages = [stage, {"stage": "train", "rows": int(X.shape[0]), "steps": h.steps,
                                "reason": h.reason}]
            kept = {False: "kept", True: "then learned",
                    "noise": "the kernel's kept, the noise then learned"}[
                self.learn_hyperparameters]
            h.events.insert(  # first: it came before every step (and a resume's event)
                0, f"hyperparameters pretrained by an exact GP on {stage['rows']} of "
                f"{X.shape[0]} rows ({stage['steps']} L-BFGS steps, {stage['reason']}) "
                f"and {kept}")
            self.pretrain_stage_ = None
        if closed_form:
            self._closed_form_diagonal(X)
            if self.control_variate.rank:
                st = self._train_state
                st["cv"] = control_variates.make_control_variate(
                    self, X, self.control_variate.rank, 0 if seed is None else seed
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
        :meth:`hyper_parameters` (None: fixed), which starts at step ``hyperparameters.delay``.
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
        self,
        Xl: torch.Tensor,
        yl: torch.Tensor,
        U: torch.Tensor,
        n: int,
        reduce: Any = None,
        anchor: dict[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Randomised block-Newton step on ``mu_U`` (``mean_step=lg.QSGP.Newton(...)``; the formula
        is in :mod:`latentgp.models.qsgp.newton`): with all rows and all basis functions
        and rho = 1 one exact Newton step to the optimal mean.  Called by the training
        step; public so that the step can be checked against the closed form (``yl`` in
        scaled-target units, :meth:`scale_targets`).  ``anchor``: from
        :func:`latentgp.models.qsgp.newton.refresh_anchor` (None: the plain minibatch
        gradient).  Writes ``mu[U]``, returns the new rows.
        """
        if not isinstance(self.mean_step, Newton):
            raise ValueError("newton_mean needs mean_step=lg.QSGP.Newton(...) (or 'newton')")
        return newton.newton_mean(self, Xl, yl, U, n, reduce, anchor)

    def rvm_em_update(
        self, U: torch.Tensor, colnorm: torch.Tensor | None, mackay: bool = False
    ) -> None:
        """Closed-form update of the RVM precisions of the rows ``U`` (em, or MacKay's
        re-estimate with ``mackay``; :func:`latentgp.models.qsgp.rvm.rvm_em_update`).

        Called by the training step (``Basis(kind="rvm", rvm_update="em" or "mackay")``);
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
        if self.basis.kind != "rvm":
            raise ValueError("relevance vectors exist only for basis='rvm'")
        return torch.nonzero(torch.exp(self.log_s.detach()) < threshold).flatten().cpu().numpy()
