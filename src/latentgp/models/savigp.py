"""SAVIGP: generic (black-box likelihood) variational inference in latent GP models
(Bonilla, Krauth & Dezfouli; notes ``savigp-qsgp.md`` "Paper A").

Q latent functions ``f_j ~ GP(mu_j, k_j)``, each with inducing inputs ``Z_j`` (shared or
separate) and ``q(u) = sum_k pi_k prod_j N(m_kj, S_kj)`` (full or diagonal ``S``).  The ELBO

    L = L_ent + L_cross + sum_n sum_k pi_k E_{q_k(n)}[log p(y_n | f_n)]

uses the entropy lower bound, the exact cross-entropy, and Monte Carlo with univariate
Gaussian draws ``f_nj^(k,i) ~ N(b_kj(n), Sigma_kj(n))`` for the expected log-likelihood.
The minibatch estimate is ``L_ent + L_cross + N/|B| sum_{n in B} ELL_n``.

Gradients of the ELL come from one of two estimators:

* ``"reparam"``: ``f = b + sqrt(Sigma) eps``; needs a differentiable torch likelihood.
* ``"score"``: the paper's score-function estimator, ``E[grad log q_k(n)(f) log p(y_n|f)]``
  with the score of each local parameter (``b_kj(n)``, ``Sigma_kj(n)``) as control variate
  (coefficient ``Cov(g, h) / Var(h)`` estimated per point, latent and component from the
  same draws).  It is implemented as a surrogate whose autograd gradient equals the
  estimator; the likelihood is only *evaluated*, under ``torch.no_grad`` (on numpy arrays
  for plain functions that are not torch code), so any black box works.  The chain rule
  from the local parameters to ``m``, ``S``, hyperparameters and ``Z`` reproduces the
  paper's formulas (A.5.2, A.5.4, A.5.6).

``dense=True`` puts the inducing inputs on the training inputs (Z = X): the posterior over
f is free form and the ELL no longer depends on the hyperparameters, whose gradient comes
from the exact cross-entropy alone.  ``parameterization="lambda"`` (FG only) uses
Theorem 2: ``S_j = Kzz (Kzz + Kzx Lambda_j Kxz)^-1 Kzz`` with N parameters per latent.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from ..inducing import (
    check_inducing_sizes,
    initial_inducing,
)
from ..kernels import Kernel
from ..likelihoods import CallableLikelihood, Likelihood
from ..parameters import inv_softplus, softplus
from ..validation import check_positive_int, check_targets, keyword_only_after_first
from ..variational import (
    InducingQ,
    PredictiveCache,
    cached_conditional,
    conditional_marginals,
    predictive_cache,
)
from ..variational.mixture import MixtureVariational
from .base import GPModel, register_model
from .inducing_inputs import InducingInputs
from .model_data import check_output_columns
from .predict import chunked, mixture_moments
from .savigp_fit import fit_savigp
from .savigp_mixture import (
    conditional_args,
    dense_marginals,
    expected_log_lik,
    kl_terms,
    mixture_components,
    mixture_log_density,
    mixture_predictive_moments,
    whitened_full,
    whitened_kl_terms,
)
from .savigp_options import (
    FLAT_KEYWORDS,
    GROUPS,
    Estimator,
    Posterior,
    Prior,
    apply_prior_variance,
    grouped_config,
    reparameterised_before_fit,
    resolve_options,
    resolved_method,
)
from .svgp import FULL_BATCH_ROWS, LBFGS_CEILING, LBFGS_RULE


@register_model
class SAVIGP(InducingInputs, GPModel):
    """Scalable automated variational inference for latent GP models.

    Parameters
    ----------
    num_inducing: M per latent; or ``sparsity`` = M / N (the paper's SF); ``dense=True``
        (or ``sparsity=1``) puts Z on the training inputs.
    likelihood: name, :class:`~latentgp.likelihoods.Likelihood`, an object with
        ``log_prob(y, f)`` or a plain callable ``fn(y, f)`` (torch or numpy code).
        ``f`` is ``(..., N)`` for one latent and ``(..., N, Q)`` otherwise.
    num_latent: Q when the likelihood is a plain function with several latents.
    posterior: the q(u) family, a :class:`Posterior` (``components``, ``covariance``,
        ``parameterization``, ``whiten``, ``init_cov_scale``) or a shorthand ``"fg"``
        (full Gaussian), ``"mog1"``, ``"mog2"``, ``"mogK"``, ``"fgK"``.
    estimator: the ELL's Monte Carlo estimator, an :class:`Estimator` (``method``,
        ``num_samples``, ``control_variates``, ``pred_samples``) or the method,
        ``"reparam"`` or ``"score"`` (None: reparam for differentiable torch likelihoods,
        score otherwise).
    prior: a :class:`Prior`: constant prior ``mean`` and initial kernel ``variance`` per
        latent.
    learn_hyperparameters, learn_inducing: optimise kernel parameters / Z.
    Z: initial inducing inputs ``(M, D)`` (shared, or with ``shared_inducing=False`` the
        start of every latent's own set) or ``(Q, M, D)``.
    inducing_init: ``"kmeans"`` or ``"random"`` (a subset of the data, as the paper).
    shared_inducing: one set of inducing inputs for all latents.
    Common keywords (:class:`~latentgp.models.base.GPModel`): ``normalize_y``, ``device``,
    ``dtype``, ``noise_variance``.

    Training: a fit that names no optimiser, learning rate, batch size or budget on up to
    :data:`~latentgp.models.svgp.FULL_BATCH_ROWS` rows, with the reparameterisation
    estimator (:meth:`reparameterised_before_fit`), holds the Monte Carlo draws fixed for
    the whole fit (the sample-average approximation of the ELBO, a deterministic
    function) and runs full-batch L-BFGS to the deterministic convergence rule, as SVGP
    on small data (``history_.events`` says so); ``optimizer="lbfgs"`` does the same.
    Otherwise (score-function estimator, more rows, any other named choice) the draws
    change every step and Adam (lr 0.01, minibatches of up to 1,024 rows) runs to the
    stochastic rule.

    Deprecated flat keywords (a ``DeprecationWarning`` shows the grouped spelling):
    ``num_components``, ``covariance``, ``parameterization``, ``whiten``,
    ``init_cov_scale`` (in ``posterior=``), ``num_samples``, ``control_variates``,
    ``pred_samples`` (in ``estimator=``), ``prior_mean``, ``prior_variance`` (in
    ``prior=``, as ``mean`` and ``variance``).
    """

    Posterior = Posterior
    Estimator = Estimator
    Prior = Prior

    default_optimizer = "adam"
    default_lr = 0.01
    #: the constructor arguments that :meth:`get_config` stores as they are kept
    config_attributes = (
        "num_inducing", "sparsity", "dense", "shared_inducing", "inducing_init",
        "learn_inducing", "learn_hyperparameters",
    )

    @keyword_only_after_first(max_legacy=2)
    def __init__(
        self,
        num_inducing: int | None = None,
        *,
        likelihood: str | Likelihood | Any = "gaussian",
        kernel: str | Kernel | None = "rbf",
        sparsity: float | None = None,
        dense: bool = False,
        posterior: Posterior | str | dict[str, Any] | None = None,
        estimator: Estimator | str | dict[str, Any] | None = None,
        prior: Prior | dict[str, Any] | None = None,
        num_latent: int | None = None,
        shared_inducing: bool = True,
        Z=None,
        inducing_init: str = "kmeans",
        learn_inducing: bool = True,
        learn_hyperparameters: bool = True,
        **common: Any,
    ) -> None:
        flat = {k: common.pop(k) for k in list(common) if k in FLAT_KEYWORDS}
        super().__init__(kernel, likelihood, **common)
        groups = resolve_options(
            {"posterior": posterior, "estimator": estimator, "prior": prior},
            flat,
            model=type(self).__name__,
        )
        self.posterior: Posterior = groups["posterior"]
        self.estimator: Estimator = groups["estimator"]
        self.prior: Prior = groups["prior"]
        self._set_inducing(num_inducing, sparsity, dense, Z, learn_inducing, inducing_init,
                           shared_inducing)
        self.learn_hyperparameters = bool(learn_hyperparameters)
        self._num_latent_arg = (
            None if num_latent is None else check_positive_int(num_latent, "num_latent")
        )
        if isinstance(self.likelihood, CallableLikelihood) and self._num_latent_arg:
            self.likelihood.latent_dim = self._num_latent_arg
        self.num_data: int | None = None
        self._sample_seed = 0

    @property
    def num_components(self) -> int:
        """K, the number of mixture components of q(u) (``posterior.components``)."""
        return self.posterior.components

    def _set_inducing(
        self, num_inducing, sparsity, dense, Z, learn_inducing, inducing_init, shared_inducing
    ) -> None:
        """M given, as a fraction of N (``sparsity``), or all training inputs (``dense``)."""
        if sparsity is not None:
            if not (isinstance(sparsity, (int, float)) and 0 < sparsity <= 1):
                raise ValueError(f"sparsity must be in (0, 1], got {sparsity!r}")
            dense = dense or sparsity == 1
        self.sparsity = None if sparsity is None else float(sparsity)
        self.dense = bool(dense)
        if Z is not None and self.dense:
            raise ValueError("Z cannot be given with dense=True (Z is the training inputs)")
        if num_inducing is None and sparsity is None and not self.dense and Z is None:
            num_inducing = 128
        learn = bool(learn_inducing) and not self.dense
        shared = self._store_inducing_args(
            num_inducing, Z, learn, inducing_init, inits=("kmeans", "random"), required=False
        )
        # as SVGP: a 2-D Z with shared_inducing=False starts every latent's own set
        self.shared_inducing = (bool(shared_inducing) and shared is not False) or self.dense

    # ----------------------------------------------------------------- config --
    def get_config(self):
        cfg = super().get_config()
        cfg.update({name: getattr(self, name) for name in self.config_attributes})
        cfg.update({argument: getattr(self, argument).to_config() for argument in GROUPS})
        cfg["num_latent"] = self._num_latent_arg
        return cfg

    @classmethod
    def from_config(cls, cfg: dict[str, Any], device=None) -> SAVIGP:
        """The model from :meth:`get_config`'s values; configurations written before the
        grouped options (flat ``num_components``, ``num_samples``, ...) read the same,
        without a warning."""
        return super().from_config(grouped_config(cfg), device=device)

    def _build_args(self):
        return {**super()._build_args(), "num_data": self.num_data}

    def _default_fit_args(self, N):
        full = self.dense or self.posterior.parameterization == "lambda"
        args = {"optimizer": "adam", "lr": 0.01, "batch_size": N if full else min(N, 1024)}
        if N <= FULL_BATCH_ROWS and self.reparameterised_before_fit():
            args["automatic"] = {"optimizer": "lbfgs", "lr": 1.0,
                                 "convergence": dict(LBFGS_RULE),
                                 "ceiling": dict(LBFGS_CEILING), "fixed_draws": True}
        return args

    def reparameterised_before_fit(self) -> bool:
        """Whether the reparameterisation estimator is known to apply before any data
        are seen: ``estimator.method="reparam"``, or no method given and a differentiable
        torch likelihood (a plain function with one latent when declared
        ``differentiable=True`` or found so by the inspection that runs on the training
        targets before the first fit chooses its defaults, so that every fit of one model
        takes the same default).  Such a
        model on up to :data:`~latentgp.models.svgp.FULL_BATCH_ROWS` rows fits by default
        with its Monte Carlo draws held fixed (see :meth:`fit`)."""
        return reparameterised_before_fit(self.estimator, self.likelihood)

    def resolved_estimator(self) -> str | None:
        """The gradient estimator in use: ``estimator.method`` if given, else ``"reparam"``
        for a differentiable likelihood and ``"score"`` otherwise.  For a plain function
        that is decided at its first evaluation on real data (the first training batch);
        until then None."""
        return resolved_method(self.estimator, self.likelihood)

    # --------------------------------------------------------------- building --
    def _build(self, input_dim: int, output_dim: int, num_data: int | None = None) -> None:
        super()._build(input_dim, output_dim)
        Q = self.num_latent
        lik = self.likelihood
        if lik.latent_dim == 1 and output_dim > 1 and Q != output_dim:
            raise ValueError(f"{output_dim} target columns need num_latent={output_dim}, got {Q}")
        if num_data is not None:
            self.num_data = int(num_data)
        if self.dense:
            if self.num_data is None:
                raise ValueError("dense=True needs the number of training points")
            M = self.num_data
        elif self.num_inducing is not None:
            M = self.num_inducing
        else:
            M = max(1, math.ceil(self.sparsity * self.num_data))
        self.M = M
        self.kernel.build(input_dim, (Q,), self.dtype_, self.device_)
        zshape = (M, input_dim) if self.shared_inducing else (Q, M, input_dim)
        # dense mode: Z = X, fixed, with unit 1 so that it stays bit-equal to X
        self._build_inducing(zshape, learn=self.learn_inducing, fixed=self.dense)
        self.q = MixtureVariational(
            self.num_components, Q, M, self.posterior.covariance, dtype=self.dtype_,
            device=self.device_,
        )
        pm = torch.zeros(Q, dtype=self.dtype_)
        if self.prior.mean is not None:
            if len(self.prior.mean) != Q:
                raise ValueError(f"prior.mean has {len(self.prior.mean)} values for Q={Q}")
            pm = torch.tensor(self.prior.mean, dtype=self.dtype_)
        self.register_buffer("prior_mean", pm)
        if self.posterior.parameterization == "lambda":
            N = self.num_data or 0
            self.register_buffer("X_train", torch.zeros(N, input_dim, dtype=self.dtype_))
            self.lambda_raw = nn.Parameter(torch.zeros(Q, N, dtype=self.dtype_))
            self.q.sqrt_raw.requires_grad_(False)
        if not self.learn_hyperparameters:
            for p in self.kernel.parameters():
                p.requires_grad_(False)
        self.to(dtype=self.dtype_, device=self.device_)

    def _validate_sizes(self, N: int) -> None:
        if self.dense and N != self.num_data:
            raise ValueError(f"this dense model was built for {self.num_data} points, got {N}")
        if not self.dense:
            check_inducing_sizes(self._init_Z, self.M, N, self.input_dim, " or dense=True")

    def _init_from_data(self, X, y):
        super()._init_from_data(X, y)
        with torch.no_grad():
            if self.prior.variance is not None:
                apply_prior_variance(self.kernel, self.prior.variance, self.num_latent)
            if hasattr(self.likelihood, "init_offset"):
                self.likelihood.init_offset(y)
            if self.dense:
                self.Z = X
            elif self._init_Z is not None:
                self._set_input_unit(X)
                self.Z = self._init_Z.to(self.Z_raw)
            else:
                self._set_input_unit(X)
                self.Z = initial_inducing(X, self.M, self.inducing_init)
            if self.posterior.parameterization == "lambda":
                self.X_train.copy_(X)
                self.lambda_raw.fill_(float(inv_softplus(1.0)))
            Lzz = self.prior_factor()
            spread = 0.5 if self.num_components > 1 else 0.0
            post = self.posterior
            self.q.init_from_prior(Lzz, post.init_cov_scale, spread, post.whiten)

    # -------------------------------------------------------------- posterior --
    def posterior_components(self, Lzz: torch.Tensor):
        """``(weights, means, sqrt, logdet)`` of q(u) in u-space (differentiable), from the
        prior factor ``Lzz = prior_factor()``; sqrt ``(K, Q, M, M)`` or ``(K, Q, M)``
        (:func:`~latentgp.models.savigp_mixture.mixture_components`).

        What the entropy bound and cross-entropy of :meth:`kl_terms` are computed from;
        public for checking them against general formulas."""
        lambda_terms = None
        if self.posterior.parameterization == "lambda":
            lambda_terms = (self.kernel(self.Z, self.X_train), softplus(self.lambda_raw))
        return mixture_components(
            self.q, Lzz, whiten=self.posterior.whiten, lambda_terms=lambda_terms
        )

    def _whitened_full(self) -> bool:
        """Whether q(u) is stored as whitened full Cholesky factors (``v``, ``C``)."""
        post = self.posterior
        return whitened_full(self.q, whiten=post.whiten, parameterization=post.parameterization)

    def kl_terms(self, Lzz: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(L_ent bound, L_cross)``: their sum is the (lower bound on) ``-KL``."""
        Lzz = self.prior_factor() if Lzz is None else Lzz
        if self._whitened_full():
            return whitened_kl_terms(self.q, Lzz)
        return kl_terms(self.q, Lzz, self.posterior_components(Lzz))

    def _conditional_args(self, parts) -> InducingQ:
        """q(u)'s components as the conditional takes them (:class:`InducingQ`)."""
        return conditional_args(self.q, parts, whitened=self._whitened_full())

    def _marginals(self, X: torch.Tensor, Lzz: torch.Tensor, parts) -> tuple:
        """Component marginals of q(f_n): mean, var ``(K, B, Q)`` (prior mean included).

        q(u) is over the deviation of f from its prior mean (the constant ``prior.mean``
        and the mean function ``m(X)`` of ``mean=``), whitened or not, so the mixture's
        entropy and cross-entropy terms are those of a zero-mean prior."""
        mean, var = conditional_marginals(
            self.kernel(self.Z, X), self.kernel.diag(X), Lzz, *self._conditional_args(parts),
            mean_x=self.latent_prior_mean(X),
        )
        return mean.mT + self.prior_mean, var.mT

    def _cached_marginals(self, X: torch.Tensor, cache: PredictiveCache) -> tuple:
        """:meth:`_marginals` from the prediction cache, ``(K, B, Q)``."""
        mean, var = cached_conditional(
            cache, self.kernel(self.Z, X), self.kernel.diag(X), mean_x=self.latent_prior_mean(X)
        )
        return mean.mT + self.prior_mean, var.mT

    def _dense_marginals(self, parts) -> tuple:
        """Free-form case (Z = X): ``b = m``, ``Sigma = diag S``, ``(K, N, Q)``."""
        mean, var = dense_marginals(parts, is_diag=self.q.is_diag, prior_mean=self.prior_mean)
        return self._with_mean(self.Z, mean), var

    # ---------------------------------------------------------------- the ELL --
    def _draws(self, shape: tuple[int, ...]) -> torch.Tensor:
        """Standard normal draws; fixed within one optimiser step (common random numbers,
        so L-BFGS line searches see one objective), fresh across steps."""
        gen = torch.Generator(device="cpu")
        gen.manual_seed(self._sample_seed)
        return torch.randn(shape, generator=gen, dtype=self.dtype_).to(self.device_)

    @property
    def sample_seed(self) -> int:
        """Seed of the current Monte Carlo draws (common random numbers: fixed within an
        optimiser step, advanced by :meth:`advance_draws`; a fit's ``seed`` sets the
        stream).  Set it to repeat a step's draws, e.g. to compare estimators."""
        return self._sample_seed

    @sample_seed.setter
    def sample_seed(self, value: int) -> None:
        self._sample_seed = int(value)

    def advance_draws(self, info: Any = None) -> None:
        """Move the Monte Carlo draws to the next stream, as :meth:`fit` does after every
        optimiser step (draws stay fixed within a step).  Takes the callback argument, so
        it can be given as a callback when another loop drives the training steps.
        """
        self._sample_seed += 1

    def expected_log_lik(
        self, y: torch.Tensor, weights: torch.Tensor, mean: torch.Tensor, var: torch.Tensor
    ) -> torch.Tensor:
        """Monte Carlo estimate of ``sum_n sum_k pi_k E_{q_k(n)}[log p(y_n | f_n)]`` (scalar)
        from per-component marginals ``(K, B, Q)``, by the integrator of
        :meth:`resolved_estimator` (:mod:`latentgp.likelihoods.integrators`) with this
        step's common random numbers."""
        eps = self._draws((self.estimator.num_samples,) + tuple(mean.shape))  # (S, K, B, Q)
        return expected_log_lik(self.likelihood, self.estimator, y, weights, mean, var, eps)

    # -------------------------------------------------------------- objective --
    def batch_marginals(self, X: torch.Tensor, Lzz: torch.Tensor):
        """``(weights, mean, var)`` of the batch's component marginals ``(K, B, Q)``
        (differentiable) at validated inputs ``X``, with ``Lzz = prior_factor()``: what
        :meth:`expected_log_lik` integrates.  Public for checking gradient estimators
        against a closed-form expectation."""
        parts = self.posterior_components(Lzz)
        if self.dense:
            if X.shape[0] != self.M or not torch.equal(X, self.Z):
                raise ValueError(
                    "dense=True trains on the full training set in its original order "
                    "(no minibatches): use batch_size=None"
                )
            mean, var = self._dense_marginals(parts)
        else:
            mean, var = self._marginals(X, Lzz, parts)
        return parts[0], mean, var

    def expected_log_lik_batch(self, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Monte Carlo ELL of a batch (scaled targets), differentiable by the estimator."""
        Lzz = self.prior_factor()
        return self.expected_log_lik(y, *self.batch_marginals(X, Lzz))

    def objective(self, X, y, num_data):
        """Minibatch ELBO estimate ``L_ent + L_cross + N/|B| sum_B ELL_n``."""
        Lzz = self.prior_factor()
        ent, cross = self.kl_terms(Lzz)
        ell = self.expected_log_lik(y, *self.batch_marginals(X, Lzz))
        return ent + cross + ell * (num_data / X.shape[0])

    def elbo(self, X, y, num_samples: int | None = None) -> float:
        """ELBO estimate on the full data, in the targets' original units."""
        self._require_built()
        Xt = self._check_X(X)
        yt = self._scale_y(self._check_y(y, Xt.shape[0]))
        old = self.estimator
        self.estimator = old.replace(num_samples=num_samples or old.num_samples)
        try:
            with torch.no_grad():
                val = float(self.objective(Xt, yt, Xt.shape[0]))
        finally:
            self.estimator = old
        return val - Xt.shape[0] * self._log_scale_sum()

    # -------------------------------------------------------------------- fit --
    def _check_y(self, y, num_data, name="y"):
        """Targets; multi-column targets are accepted for several latents when the likelihood
        declares ``num_outputs`` (GPRN, user forward models) or is a plain function."""
        P = getattr(self.likelihood, "num_outputs", None)
        black_box = isinstance(self.likelihood, CallableLikelihood)
        if P is None and not black_box:
            return super()._check_y(y, num_data, name)
        yt = check_targets(y, num_data, name=name, dtype=self.dtype_, device=self.device_)
        if self.likelihood.latent_dim == 1:
            return super()._check_y(yt, num_data, name)
        check_output_columns(yt, self.output_dim, name)
        cols = 1 if yt.ndim == 1 else yt.shape[1]
        if P is not None and cols != P:
            raise ValueError(f"{name} must have {P} columns for this likelihood, got {cols}")
        return self.likelihood.validate_targets(yt, name)

    def fit(
        self,
        X: Any,
        y: Any = None,
        *,
        alternate: bool = False,
        global_iters: int = 20,
        inner_steps: int = 25,
        global_tol: float = 1e-6,
        paper_adadelta: bool = True,
        **kwargs: Any,
    ) -> SAVIGP:
        """Fit; keyword arguments as :meth:`GPModel.fit`.

        ``alternate=True`` runs the paper's global loop (notes A.10): each parameter group
        (variational, hyperparameters, likelihood, inducing inputs) is optimised for
        ``inner_steps`` with the others fixed, for up to ``global_iters`` rounds, stopping
        when the objective changes by less than ``global_tol`` (relative).
        ``optimizer="adadelta"`` uses the paper's decay 0.95 and epsilon 1e-6
        (``paper_adadelta``; entries of ``optimizer_kwargs`` take precedence) and lr 1.0
        unless ``lr`` is given.
        """
        out_of_core = hasattr(X, "lazy_arrays")  # e.g. datasets.ShardedArrays (y inside)
        N = int(X.num_rows) if out_of_core else int(self._check_X(X).shape[0])

        def fit_once(**options: Any) -> None:
            super(SAVIGP, self).fit(X, y, **options)

        return fit_savigp(
            self, fit_once, N, kwargs, alternate=alternate, global_iters=global_iters,
            inner_steps=inner_steps, global_tol=global_tol, paper_adadelta=paper_adadelta,
        )

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """The paper's groups: variational, hyperparameters (the kernel's and the prior
        mean function's), likelihood, inducing inputs."""
        groups = {
            "variational": list(self.q.parameters())
            + ([self.lambda_raw] if self.posterior.parameterization == "lambda" else []),
            "hyperparameters": list(self.kernel.parameters())
            + list(self.mean_function.parameters()),
            "likelihood": list(self.likelihood.parameters()),
            "inducing": [self.Z_raw] if isinstance(self.Z_raw, nn.Parameter) else [],
        }
        return {k: [p for p in v if p.requires_grad] for k, v in groups.items()}

    # ------------------------------------------------------------- prediction --
    def _compute_cache(self):
        Lzz = self.prior_factor()
        parts = self.posterior_components(Lzz)
        return Lzz, parts, predictive_cache(Lzz, self._conditional_args(parts))

    def component_marginals(self, X: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-component latent marginals at ``X``: weights ``(K,)``, mean and var
        ``(K, N, Q)`` (scaled-target units)."""
        self._require_built()
        Xt = self._check_X(X)
        _, parts, pcache = self.prediction_cache()
        with torch.no_grad():
            m, v = self._cached_marginals(Xt, pcache)
        return parts[0].detach().cpu().numpy(), m.cpu().numpy(), v.cpu().numpy()

    def _chunk_width(self) -> int:
        """Per-row entries at prediction: the ``(K, Q, M)`` cross-covariance products, or
        the ``(S, K, Q)`` Monte Carlo draws of a black-box likelihood if more."""
        width = self.num_components * self.num_latent * self.M
        if isinstance(self.likelihood, CallableLikelihood):
            width = max(width, self.estimator.pred_samples * self.num_components * self.num_latent)
        return width

    def _predict_f_chunk(self, X, cache):
        _, parts, pcache = cache
        m, v = self._cached_marginals(X, pcache)  # (K, B, Q)
        return mixture_moments(parts[0][:, None, None], m, v, dim=0)

    def predict_y(self, X, chunk_size=None, as_numpy=True):
        """Predictive mean and variance of y: a mixture over components (class
        probabilities for classification).  Black-box likelihoods: Monte Carlo."""
        self._require_built()
        Xt = self._check_X(X)
        _, parts, pcache = self.prediction_cache()
        w = parts[0].detach()

        def moments(xc):
            m, v = self._cached_marginals(xc, pcache)  # (K, B, Q)
            return mixture_predictive_moments(self.likelihood, w, m, v)

        rows = self.prediction_chunk_rows(chunk_size)
        m, v = self._unscale_moments(*chunked(moments, Xt, rows=rows))
        return self._to_output(m, as_numpy), self._to_output(v, as_numpy)

    def log_predictive_density(self, X, y, chunk_size=None, as_numpy=True):
        """``log sum_k pi_k p_k(y_n | x_n)`` per test point ``(N,)``; the component
        densities use the likelihood's integrator (closed form, quadrature or Monte Carlo),
        or Monte Carlo with ``pred_samples`` draws for black-box likelihoods."""
        self._require_built()
        Xt = self._check_X(X)
        ys = self._scale_y(self._check_y(y, Xt.shape[0]))
        _, parts, pcache = self.prediction_cache()
        logw = parts[0].detach().log()

        def log_density(xc, yc):
            m, v = self._cached_marginals(xc, pcache)
            return mixture_log_density(
                self.likelihood, yc, logw, m, v, pred_samples=self.estimator.pred_samples
            )

        (lpd,) = chunked(log_density, Xt, ys, rows=self.prediction_chunk_rows(chunk_size))
        return self._to_output(lpd - self._log_scale_sum(), as_numpy)
