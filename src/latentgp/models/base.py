"""What every latentgp model shares: construction and configuration, building, target
scaling, the fit/predict contract and saving.

The pieces ``GPModel`` composes live beside it: the shared prediction methods in
:mod:`.prediction_api` (a mixin), the target and source checks in :mod:`.model_data`, the
file format in :mod:`.file_format` and the fit-engine registry in :mod:`.engine` (their
public names are importable from here too).

A concrete model implements

- ``_build(input_dim, output_dim)``: allocate parameters (no data needed; used on load);
- ``_init_from_data(X, y)``: data-dependent initial values;
- ``objective(X, y, num_data)``: the training objective estimate for a batch;
- ``_predict_f_chunk(X)``: latent marginal means/variances ``(B, Q)`` for a chunk.

Training is not here: ``GPModel.fit`` hands the model to the fit engine, the one
:func:`latentgp.training.fit`, which ``latentgp.training`` registers on import with
:func:`set_fit_engine` (models never import ``training``: layers import downwards).  The
engine reaches the model only through the public hooks of the "training contract" below
(:meth:`GPModel.fit_defaults`, :meth:`GPModel.check_training_data`,
:meth:`GPModel.initialize_training`, ...).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from ..config import default_dtype, get_config
from ..kernels import Kernel, kernel_from_config, kernel_from_name
from ..likelihoods import Gaussian, Likelihood, likelihood_from_config, likelihood_from_name
from ..means import MeanFunction, mean_from_config, mean_from_spec
from ..parameters import spread_unit
from ..rng import seeded_scope
from ..validation import check_inputs, check_targets
from .engine import DEFAULT_FIT_ENGINE_MODULE, fit_engine, set_fit_engine
from .file_format import (
    FILE_DTYPES,
    FORMAT,
    FORMAT_VERSION,
    READABLE_FORMAT_VERSIONS,
    dtype_name,
    file_records,
    make_payload,
    write_payload,
)
from .hyperpriors import HyperpriorMixin
from .model_data import (
    INIT_SAMPLE_ROWS,
    check_source,
    check_target_columns,
    column_stats,
    init_sample,
)
from .prediction_api import PredictionAPI

#: names that live in the modules split off this one, importable from here as before
__all__ = [
    "DEFAULT_FIT_ENGINE_MODULE", "FILE_DTYPES", "FORMAT", "FORMAT_VERSION", "GPModel",
    "INIT_SAMPLE_ROWS", "MODEL_REGISTRY", "READABLE_FORMAT_VERSIONS", "file_records",
    "fit_engine", "init_sample", "register_model", "require_gaussian_likelihood",
    "set_fit_engine", "with_noise_variance",
]

MODEL_REGISTRY: dict[str, type[GPModel]] = {}


def register_model(cls):
    MODEL_REGISTRY[cls.__name__] = cls
    return cls


def with_noise_variance(likelihood: Likelihood, noise_variance: float | None) -> Likelihood:
    """The likelihood with its initial Gaussian noise variance set to ``noise_variance``
    (every model's ``noise_variance=`` argument; None leaves it as it is).  Refused for a
    likelihood without Gaussian noise."""
    if noise_variance is None:
        return likelihood
    if not isinstance(likelihood, Gaussian):
        raise ValueError(
            f"noise_variance= sets a Gaussian noise variance; the {type(likelihood).__name__} "
            "likelihood has none (give its parameters to the likelihood instead)"
        )
    cfg = likelihood.to_config()
    cfg["variance"] = float(noise_variance)
    return likelihood_from_config(cfg)


def require_gaussian_likelihood(model: Any, advice: str) -> None:
    """Refuse a model whose likelihood is not Gaussian noise (the models whose posterior
    is tractable only then); ``advice`` ends the message (what to use instead)."""
    if not isinstance(model.likelihood, Gaussian):
        raise ValueError(
            f"{type(model).__name__} needs a Gaussian likelihood (the posterior is only "
            f"tractable then); got {type(model.likelihood).__name__}: {advice}"
        )


class GPModel(HyperpriorMixin, PredictionAPI, nn.Module):
    """Base class of latentgp models (see module docstring).

    Parameters
    ----------
    kernel: name (``"rbf"``, ``"matern32"``, ...) or a :class:`~latentgp.kernels.Kernel`.
    likelihood: name (``"gaussian"``, ``"bernoulli"``, ``"poisson"``, ...), a
        :class:`~latentgp.likelihoods.Likelihood`, or a callable ``log_prob(y, f)``.
    normalize_y: standardise targets of location-scale likelihoods (Gaussian, Student-t,
        Laplace) before training; predictions, densities and objectives are reported in
        the original units.
    device, dtype: where and in which precision the model computes (float64 default).
    noise_variance: the initial Gaussian noise variance, the same spelling in every model
        (``SVGP(noise_variance=0.1)`` is ``SVGP(likelihood=Gaussian(variance=0.1))``;
        SHGP, SMGP and SLGP take it too); refused for likelihoods without Gaussian noise.
    mean: the prior mean function, ``f ~ GP(m, k)``: ``"zero"`` (default), ``"constant"``
        (one learnable constant per latent), ``"linear"``, a
        :class:`~latentgp.means.MeanFunction` or any ``torch.nn.Module`` mapping ``X``
        ``(N, D)`` to ``(N,)`` or ``(N, Q)`` (the model trains a copy; see
        :mod:`latentgp.means`).  It lives in the model's scaled-target units.
    """

    default_optimizer = "adam"
    default_lr = 0.01
    #: whether ``objective`` is an unbiased estimate from a minibatch (else full data only)
    supports_minibatch = True
    #: whether the model's prior takes a mean function (``mean=``)
    supports_mean = True
    #: whether ``objective(X_rows, y_rows, N)`` is a deterministic function of the
    #: parameters (no Monte Carlo draws): a minibatch fit's convergence rule then watches
    #: it on fixed rows (``training.convergence.probe_rows``)
    deterministic_objective = False
    #: whether the fit's ``X`` are points the model predicts at (the end-of-fit checks
    #: predict there); False for the GPLVM, whose fit inputs are row numbers
    predicts_at_training_inputs = True

    def __init__(
        self,
        kernel: str | Kernel | None = "rbf",
        likelihood: str | Likelihood | Any = "gaussian",
        normalize_y: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        noise_variance: float | None = None,
        mean: str | MeanFunction | nn.Module | None = "zero",
    ) -> None:
        super().__init__()
        self.kernel = kernel_from_name(kernel)
        self.mean_function = mean_from_spec(mean)
        if not self.supports_mean and not self.mean_function.is_zero:
            raise ValueError(
                f"{type(self).__name__} has no prior mean function (mean={mean!r}); see "
                "the user guide's 'Mean functions' for the models that take one"
            )
        if noise_variance is not None and isinstance(likelihood, Likelihood):
            raise ValueError(
                "give the initial noise variance either as noise_variance= or in the "
                "likelihood object, not both"
            )
        self.likelihood = with_noise_variance(likelihood_from_name(likelihood), noise_variance)
        self.normalize_y = bool(normalize_y)
        self.device_ = torch.device(device) if device is not None else torch.device("cpu")
        self.dtype_ = default_dtype(dtype)
        if not self.dtype_.is_floating_point:
            raise ValueError(f"dtype must be a floating type, got {self.dtype_}")
        self.input_dim: int | None = None
        self.output_dim: int | None = None
        self.history_ = None
        self.last_jitter: float = get_config().jitter
        self._cache: tuple[Any, Any] | None = None

    # ------------------------------------------------------------------ building --
    @property
    def built(self) -> bool:
        return self.input_dim is not None

    @property
    def num_latent(self) -> int:
        """Number of latent functions Q: the ``num_latent`` argument of models that take
        one, else the likelihood's latent dimension, else the number of target columns."""
        given = getattr(self, "_num_latent_arg", None)
        if given is not None:
            return given
        if self.likelihood.latent_dim > 1:
            return self.likelihood.latent_dim
        return self.output_dim or 1

    def _build(self, input_dim: int, output_dim: int) -> None:
        self.input_dim, self.output_dim = int(input_dim), int(output_dim)
        self.register_buffer("y_mean", torch.zeros(output_dim, dtype=self.dtype_))
        self.register_buffer("y_scale", torch.ones(output_dim, dtype=self.dtype_))
        self.mean_function.build(input_dim, self.num_latent, self.dtype_, self.device_)

    def build(self, input_dim: int, output_dim: int = 1) -> GPModel:
        """Allocate the parameters for ``input_dim`` input columns and ``output_dim`` target
        columns, at the constructor's values, without looking at data (no inducing-input,
        lengthscale or target-scaling initialisation: ``y_mean`` 0, ``y_scale`` 1).

        For setting parameters by hand, e.g. to evaluate :meth:`objective` or the
        predictions at given values; :meth:`initialize` builds from data.  Returns
        ``self``; a built model raises ``RuntimeError``.
        """
        if self.built:
            raise RuntimeError(f"{type(self).__name__} is already built")
        self._build(input_dim, output_dim)
        return self

    def _build_args(self) -> dict[str, Any]:
        return {"input_dim": self.input_dim, "output_dim": self.output_dim}

    def _build_for_data(self, X: torch.Tensor, y: torch.Tensor) -> None:
        """Allocate parameters for training data ``X`` ``(N, D)``, ``y`` (first fit)."""
        self._cap_sizes(X.shape[0])
        self._build(X.shape[1], 1 if y.ndim == 1 else y.shape[1])

    def _build_for_source(self, input_dim: int, num_rows: int) -> None:
        """Allocate parameters for an out-of-core source of ``num_rows`` rows (first fit)."""
        self._cap_sizes(num_rows)
        self._build(input_dim, 1)

    def _cap_sizes(self, N: int) -> None:
        """Before the first build: reduce sizes that cannot exceed the ``N`` training rows
        (inducing points picked from the data), by :func:`latentgp.validation.cap_at_rows`."""

    def _init_from_data(self, X: torch.Tensor, y: torch.Tensor) -> None:
        self.kernel.init_from_data(X)
        self.mean_function.init_from_data(X)

    def prior_mean_at(self, X: torch.Tensor) -> torch.Tensor | None:
        """The prior mean ``m(X)`` ``(..., B, Q)`` at inputs ``(..., B, D)``, in the
        model's scaled-target units; None for the zero mean (models then add nothing, so
        a model without a mean computes exactly what it did before means existed)."""
        if self.mean_function.is_zero:
            return None
        return self.mean_function(X)

    def _residual(self, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        """``Y - m(X)`` for targets ``Y`` ``(N, P)`` (``Y`` itself for the zero mean): the
        models with a Gaussian likelihood in closed form (exact, sparse) work with the GP
        of the deviation from the prior mean."""
        m = self.prior_mean_at(X)
        return Y if m is None else Y - m

    def _with_mean(self, X: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
        """``mean + m(X)`` for a latent mean ``(..., B, Q)`` of the deviation."""
        m = self.prior_mean_at(X)
        return mean if m is None else mean + m

    def _uses_scaling(self) -> bool:
        return self.normalize_y and self.likelihood.scale_family

    #: a subclass's constructor arguments stored in its configuration as they are, each
    #: under its own name (the attribute of the same name holds the value)
    CONFIG_ATTRIBUTES: tuple[str, ...] = ()

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments as JSON-serialisable values."""
        return {
            "kernel": self.kernel.to_config(),
            "likelihood": self.likelihood.to_config(),
            "normalize_y": self.normalize_y,
            "dtype": dtype_name(self.dtype_),
            **({} if self.mean_function.is_zero else {"mean": self.mean_function.to_config()}),
            **self.hyperprior_config(),
            **{name: getattr(self, name) for name in self.CONFIG_ATTRIBUTES},
        }

    @classmethod
    def upgrade_state(
        cls, state: dict[str, Any], expected: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Rename or convert the tensors of files written by older versions of this model
        class (e.g. when a parameter moved into the likelihood, or a buffer was added);
        ``expected`` is the state of the freshly built model.  Default: unchanged."""
        return state

    @classmethod
    def from_config(cls, cfg: dict[str, Any], device=None) -> GPModel:
        cfg = dict(cfg)
        cfg["kernel"] = kernel_from_config(cfg["kernel"])
        if "mean" in cfg:  # files before format 3 have none: the zero mean
            cfg["mean"] = mean_from_config(cfg["mean"])
        if "likelihood" in cfg:
            cfg["likelihood"] = likelihood_from_config(cfg["likelihood"])
        name = cfg.get("dtype", "float64")
        if name not in FILE_DTYPES:
            raise ValueError(f"dtype {name!r} is not one of {sorted(FILE_DTYPES)}")
        cfg["dtype"] = FILE_DTYPES[name]
        hyper = {k: cfg.pop(k) for k in ("priors", "bounds") if k in cfg}
        model = cls(**cfg, device=device)
        model.restore_hyperpriors(hyper)
        return model

    @classmethod
    def from_header(
        cls, config: dict[str, Any], build: dict[str, Any], *, device=None
    ) -> GPModel:
        """The model a file's header describes, built (parameters at their initial
        values) from its ``config`` and ``build`` sizes: what loading fills with the
        stored tensors (``device="meta"`` plans it without memory)."""
        model = cls.from_config(config, device=device)
        model._build(**build)
        return model

    # ---------------------------------------------------------------- data checks --
    def _check_X(self, X: Any, name: str = "X") -> torch.Tensor:
        return check_inputs(
            X, name=name, input_dim=self.input_dim, dtype=self.dtype_, device=self.device_
        )

    def _check_y(self, y: Any, num_data: int, name: str = "y") -> torch.Tensor:
        missing_ok = getattr(self.likelihood, "allows_missing_targets", False)
        y = check_targets(y, num_data, name=name, dtype=self.dtype_, device=self.device_,
                          allow_missing=missing_ok)
        self._adapt_likelihood(y)
        return check_target_columns(
            y, likelihood=self.likelihood, output_dim=self.output_dim, name=name
        )

    def _adapt_likelihood(self, y: torch.Tensor) -> None:
        """Before the model is built, let the likelihood take the sizes it leaves to the
        data from the training targets (:meth:`Likelihood.adapt_to_targets`)."""
        if not self.built:
            self.likelihood.adapt_to_targets(y)

    def _scale_y(self, y: torch.Tensor) -> torch.Tensor:
        if not self._uses_scaling():
            return y
        mean, scale = self.y_mean, self.y_scale
        if y.ndim == 1:
            mean, scale = mean[0], scale[0]
        return (y - mean) / scale

    def _log_scale_sum(self) -> float:
        return float(self.y_scale.log().sum()) if self._uses_scaling() else 0.0

    def scale_targets(self, y: Any) -> torch.Tensor:
        """``y`` in training units: the targets checked as :meth:`fit` checks them and,
        when the model standardises targets, centred and divided by ``y_mean`` /
        ``y_scale`` (set by :meth:`initialize` or the first fit).

        This is the ``y`` that :meth:`objective` takes, for evaluating or timing the
        training objective outside :meth:`fit`.
        """
        self._require_built()
        return self._scale_y(self._check_y(y, len(y)))

    # ------------------------------------------------------------------- training --
    def objective(self, X: torch.Tensor, y: torch.Tensor, num_data: int) -> torch.Tensor:
        """Unbiased estimate of the training objective from a batch (scaled targets)."""
        raise NotImplementedError

    def _default_fit_args(self, N: int) -> dict[str, Any]:
        return {"optimizer": self.default_optimizer, "lr": self.default_lr}

    def fit(
        self,
        X: Any,
        y: Any = None,
        *,
        batch_size: int | None = None,
        epochs: int | None = None,
        max_steps: int | None = None,
        lr: float | None = None,
        optimizer: str | None = None,
        optimizer_kwargs: dict[str, Any] | None = None,
        progress: bool | None = None,
        seed: int | None = None,
        tol: float | None = None,
        callbacks=(),
        checkpoint: str | os.PathLike | None = None,
        checkpoint_every: int | None = None,
        checkpoint_seconds: float | None = None,
        resume: bool = False,
        process_group: Any = None,
    ) -> GPModel:
        """Fit to inputs ``X`` ``(N, D)`` and targets ``y`` ``(N,)`` (or ``(N, P)``), or to an
        out-of-core source ``fit(lg.datasets.ShardedArrays(path), batch_size=...)``.

        Without ``epochs``/``max_steps`` training runs until converged (the rule of
        :mod:`latentgp.training.convergence`, under a step ceiling proportional to the
        data; ``history_.reason`` says why it stopped, and reaching the ceiling
        unconverged warns).  A model may default to another optimiser for such a fit (SVGP,
        SHGP, SVHGP on up to ``latentgp.models.svgp.FULL_BATCH_ROWS`` rows with a
        deterministic ELBO: full-batch L-BFGS; a Gaussian or Poisson SVGP on more
        rows: minibatch natural gradients on q(u), ``latentgp.models.svgp.NATURAL_LIKELIHOODS``,
        stopped by the slope of the ELBO of fixed rows, ``PROBED_RULE``); naming
        ``optimizer``, ``lr``, ``batch_size``,
        ``epochs`` or ``max_steps`` gives its usual defaults (``history_.optimizer`` says
        which ran).
        ``epochs=E`` takes exactly ``E * ceil(N / batch_size)`` optimiser steps.  Without
        ``batch_size`` the model's default applies (SVGP: min(N, 1024)), except that
        ``optimizer="lbfgs"``, a full-batch method, always uses all N points.  Calling
        ``fit`` again continues from the current parameters.  The run's record is in
        ``self.history_``.  ``optimizer_kwargs`` (a dict) go to the ``torch.optim``
        constructor, e.g. ``{"rho": 0.95, "eps": 1e-6}`` for adadelta (see
        :func:`latentgp.training.make_optimizer`); ``optimizer="natural"`` takes
        natural-gradient steps on a Gaussian q(u) and Adam on the rest (Adam's step from
        the gradient at the new q), with ``optimizer_kwargs={"natural_lr": ...,
        "natural_warmup": ..., "natural_alternate": ...}`` (see
        :mod:`latentgp.training.natural`).  With ``checkpoint=path`` the run writes
        resumable checkpoints (every ``checkpoint_every`` steps / ``checkpoint_seconds``
        seconds, at the end and on Ctrl-C); ``resume=True`` continues from one.  Inside a
        ``torch.distributed`` process group the step is data-parallel (see
        :mod:`latentgp.training.distributed`).
        Ctrl-C stops training cleanly, keeping the last completed step.
        ``process_group``: SEP's sharded mode (each process passes its own shard); other
        models refuse it.  What a step is, and the defaults, depend on the model: see the
        class's "Training" notes (SEP: EP sweeps; QSGP: sparse rows).  Returns ``self``.
        """
        options = {k: v for k, v in locals().items() if k not in ("self", "X", "y")}
        return fit_engine()(self, X, y, **options)

    # ------------------------------------------------------ the training contract --
    # Public hooks through which the fit engine (latentgp.training.fit) and the step tasks
    # reach a model; a model changes how it trains by overriding the private methods
    # behind them (``_default_fit_args``, ``_initialize``, ...).
    def fit_defaults(self, N: int) -> dict[str, Any]:
        """The model's defaults for a fit on ``N`` points: ``optimizer``, ``lr`` and
        optionally ``batch_size``, overrides of the convergence rule of a fit without a
        budget (``"convergence"``, ``"ceiling"``: see
        :mod:`latentgp.training.convergence`) and ``"automatic"``: the defaults (same
        keys) of a fit that names no optimiser, learning rate, batch size or budget (see
        :func:`latentgp.training.fit.automatic_defaults`)."""
        return dict(self._default_fit_args(N))

    def check_training_data(self, X: Any, y: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Validated training inputs ``(N, D)`` and targets ``(N,)``/``(N, P)`` as tensors
        in the model's dtype and device (``ValueError`` naming the problem)."""
        Xt = self._check_X(X)
        return Xt, self._check_y(y, Xt.shape[0])

    def check_source(self, source: Any) -> int:
        """Check an out-of-core source (``latentgp.datasets.ShardedArrays``) against the
        model; returns its number of rows N."""
        return check_source(source, self.input_dim)

    def initialize_training(
        self, X: torch.Tensor, y: torch.Tensor, *, seed: int | None
    ) -> torch.Tensor:
        """Build and initialise on first use from validated ``X`` ``(N, D)``, ``y``: the
        target scaling (one way for every model) and the data-dependent initial values,
        drawn after ``torch.manual_seed(seed)`` in a private random state
        (:func:`latentgp.rng.seeded_scope`: the caller's is left as it was).  Returns the
        scaled targets for training."""
        with seeded_scope(seed, [self.device_]):
            return self._initialize(X, y, seed)

    def initialize_from_source(self, source: Any, *, seed: int | None, batch_size: int):
        """:meth:`initialize_training` for an out-of-core source; returns lazy ``(X,
        scaled y)`` views, materialised when ``batch_size`` covers all rows."""
        with seeded_scope(seed, [self.device_]):
            return self._initialize_source(source, seed, batch_size)

    def target_log_scale(self) -> float:
        """``sum(log y_scale)``: what target scaling adds per point to a log density (0
        without scaling); the engine adds ``-N`` times it to reported objectives."""
        return self._log_scale_sum()

    def clone(self) -> GPModel:
        """A new model of the same class, configuration, sizes and state (parameters and
        buffers, copied), without the prediction cache; this model is unchanged."""
        self._require_built()
        new = type(self).from_config(self.get_config(), device=self.device_)
        new._build(**self._build_args())
        new.load_state_dict(self.state_dict())
        return new.train(self.training)

    def target_scaling(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(y_mean, y_scale)`` ``(P,)``: targets are ``scaled * y_scale + y_mean`` (zeros
        and ones when the model does not standardise its targets)."""
        if self._uses_scaling():
            return self.y_mean, self.y_scale
        return torch.zeros_like(self.y_mean), torch.ones_like(self.y_scale)

    def clear_prediction_cache(self) -> None:
        """Forget cached prediction factors (parameters changed)."""
        self._cache = None

    def complete_fit(self, X: torch.Tensor, y: torch.Tensor) -> None:
        """The last pass over the training data after the steps of a fit (validated
        ``X`` ``(N, D)`` and ``y`` in the data's units), so that the model predicts from
        its final parameters before the fit's end checks (SparseGP: its posterior
        statistics; GFITC: EP run to convergence).  Called by the fit engine for data
        given as arrays.  Default: nothing."""

    def initialize(self, X: Any, y: Any, seed: int | None = None) -> GPModel:
        """Build the parameters for data ``(X, y)`` and set their data-dependent initial
        values (inducing inputs, lengthscales, target scaling) without training.

        ``fit`` does this on its first call; calling it directly lets a user inspect or
        change initial values first.  A built model is left unchanged.
        """
        Xt = self._check_X(X)
        self.initialize_training(Xt, self._check_y(y, Xt.shape[0]), seed=seed)
        return self

    def _initialize(self, Xt: torch.Tensor, yt: torch.Tensor, seed: int | None) -> torch.Tensor:
        """Build and initialise on first use; return the (scaled) targets for training."""
        N = Xt.shape[0]
        first = not self.built
        if first:
            if seed is not None:  # parameters drawn at build (SLGP's networks) are seeded
                torch.manual_seed(seed)
            self._build_for_data(Xt, yt)
            if self._uses_scaling():
                mean, sd, lo, hi = column_stats(yt.reshape(N, -1))
                self.y_mean.copy_(mean)
                self.y_scale.copy_(spread_unit(sd if N > 1 else torch.ones_like(sd), lo, hi))
        self._validate_sizes(N)
        ys = self._scale_y(yt)
        if first:
            if seed is not None:
                torch.manual_seed(seed)
            self._init_from_data(Xt, ys)
            self.to(device=self.device_)
        return ys

    def _initialize_source(self, source: Any, seed: int | None, batch_size: int):
        """:meth:`_init_from_source`, then lazy ``(X, scaled y)`` views of the source
        (materialised when the batch is the whole data)."""
        N = int(source.num_rows)
        self._init_from_source(source, seed)
        Xl, yl = source.lazy_arrays(self.dtype_, self.device_)
        check = self.likelihood.validate_targets

        def prepare(t: torch.Tensor) -> torch.Tensor:
            return self._scale_y(check(t))

        yl = yl.with_transform(prepare)
        if batch_size >= N:
            everything = torch.arange(N)
            return Xl[everything], yl[everything]
        return Xl, yl

    def _init_from_source(self, source: Any, seed: int | None) -> None:
        """Build and initialise from an out-of-core source: target statistics from one
        streaming pass, inducing inputs and lengthscales from the seeded sample of
        :func:`init_sample` (a source of at most 20,000 rows initialises exactly as the
        same rows given as arrays).  A built model is only checked against the source."""
        N = int(source.num_rows)
        stats = source.stats()  # one pass; also rejects NaN / inf
        sub = init_sample(N, seed)
        Xs_np, ys_np = source.rows(sub)
        Xs = torch.as_tensor(Xs_np, dtype=self.dtype_, device=self.device_)
        ys = self._check_y(ys_np, len(sub))
        first = not self.built
        if first and len(sub) == N:
            # the "subsample" is every row: initialise exactly as from arrays
            self._initialize(self._check_X(Xs), ys, seed)
            first = False
        if first:
            self._build_for_source(source.input_dim, N)
            if self._uses_scaling():
                self.y_mean.fill_(float(stats["y_mean"][0]))
                sd = float(stats["y_std"][0])
                self.y_scale.fill_(sd if sd > 0 else 1.0)
        self._validate_sizes(N)
        if first:
            if seed is not None:
                torch.manual_seed(seed)
            self._init_from_data(Xs, self._scale_y(ys))
            self.to(device=self.device_)

    def _validate_sizes(self, N: int) -> None:
        """Model-specific size checks (e.g. more inducing points than data)."""

    def _require_built(self) -> None:
        if not self.built:
            raise RuntimeError(f"{type(self).__name__} is not fitted yet: call fit(X, y) first")

    # ------------------------------------------------------------------ save/load --
    def file_payload(self) -> dict[str, Any]:
        """What :meth:`save` writes: ``{"header": JSON text, "state": tensors}``.  Tools that
        store more in a model file (the CLI's preprocessing record) add their own keys and
        write it with ``torch.save`` through :func:`latentgp.io.atomic_write`."""
        self._require_built()
        return make_payload(
            type(self).__name__, self.get_config(), self._build_args(), self.state_dict()
        )

    def save(self, path: str | os.PathLike, *, records: dict[str, str] | None = None) -> None:
        """Write the model to ``path`` (atomically: a failed write leaves no partial file).

        Format: ``torch.save`` of ``{"header": JSON string, "state": tensors}``; the header
        holds the format version, library version, model class, configuration and sizes.
        Loading uses ``torch.load(weights_only=True)``, which never executes code.
        ``records``: further text entries a tool stores in the file under their keys (the
        CLI's preprocessing, a scikit-learn estimator's scaling), covered by the checksums;
        :func:`load` ignores them.
        """
        write_payload(path, self.file_payload(), records)
