"""The ``--model`` values of ``latentgp fit``: how each kind of model is built and trained.

Each :class:`ModelBuilder` names a latentgp model class; the builders construct it only
when called (importing this module does not import torch).  Register more with
:func:`register_model_builder`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from latentgp.cli.common import CLIError

#: Likelihood chosen for a dataset's task when ``--likelihood`` is not given.
DEFAULT_LIKELIHOOD = {
    "regression": "gaussian",
    "multioutput": "gaussian",
    "binary": "bernoulli",
    "multiclass": "softmax",
    "count": "poisson",
}


@dataclass(frozen=True)
class ModelBuilder:
    """How the CLI builds and trains one kind of model.

    Attributes
    ----------
    name: the ``--model`` value.
    summary: one line for ``--help``.
    build: ``build(args, likelihood) -> GPModel`` (unfitted).
    optimizer, lr: defaults when ``--optimizer`` / ``--lr`` are not given (``None``: the
        model class's ``default_optimizer`` / ``default_lr``, see :meth:`fit_defaults`).
    epochs: default number of epochs (``None``, the default: train until the model's
        convergence rule stops it, see :mod:`latentgp.training.convergence`).
    minibatch: whether ``--batch-size`` applies (otherwise training is full-batch).
    max_train: largest training set accepted (``None``: the model class's own limit, see
        :meth:`training_limit`).
    too_large_hint: appended to the error when the training set is too large.
    sparse: whether ``--inducing`` applies.
    scales_out: whether ``--nproc`` and streamed data (``--data`` a Parquet file or a
        folder of ``.npy`` shards) apply (``None``: when ``minibatch``).  Every model trains
        through the one ``latentgp.training.fit``; this only says where it is worth it.
    model_class: name of the latentgp class that ``build`` constructs (``""``: unknown).
    """

    name: str
    summary: str
    build: Callable[[argparse.Namespace, Any], Any]
    optimizer: str | None = None
    lr: float | None = None
    epochs: int | None = None
    minibatch: bool = True
    max_train: int | None = None
    too_large_hint: str = ""
    sparse: bool = False
    model_class: str = ""
    scales_out: bool | None = None

    @property
    def distributed(self) -> bool:
        """Whether ``--nproc`` and streamed data apply to this model."""
        return self.minibatch if self.scales_out is None else self.scales_out

    def _model_attribute(self, name: str, fallback: Any) -> Any:
        if not self.model_class:
            return fallback
        import latentgp as lg

        return getattr(getattr(lg, self.model_class, None), name, fallback)

    def fit_defaults(self) -> tuple[str, float]:
        """``(optimizer, lr)`` when the options are not given: the builder's own values,
        else the model class's ``default_optimizer`` and ``default_lr`` (else Adam, 0.01)."""
        optimizer = self.optimizer or self._model_attribute("default_optimizer", "adam")
        lr = self.lr if self.lr is not None else self._model_attribute("default_lr", 0.01)
        return str(optimizer), float(lr)

    def training_limit(self) -> int | None:
        """Largest training set accepted: ``max_train`` when set, else the model class's
        own limit (its ``max_num_data`` attribute, e.g. :attr:`latentgp.ExactGP.max_num_data`),
        else ``None`` (no limit)."""
        if self.max_train is not None:
            return self.max_train
        return self._model_attribute("max_num_data", None)


DEFAULT_INDUCING = 128
DEFAULT_BATCH_SIZE = 1024


def model_family(
    cls_name: str,
    *,
    size: int | None = DEFAULT_INDUCING,
    size_kw: str = "num_inducing",
    likelihoods: tuple[str, ...] | None = None,
    requirement: str = "",
    pass_likelihood: bool = True,
    **fixed: Any,
) -> Callable[[argparse.Namespace, Any], Any]:
    """A builder of ``latentgp.<cls_name>(kernel=..., **fixed)``.

    ``size``: default of ``--inducing`` passed as ``size_kw`` (``None``: no inducing
    points).  ``likelihoods``: accepted likelihood classes, else ``CLIError`` saying
    ``--model <name> <requirement>``.  ``pass_likelihood``: give the likelihood to the
    constructor (the modulated and EP models fix their own).
    """

    def build(args: argparse.Namespace, likelihood: Any) -> Any:
        import latentgp as lg

        if likelihoods is not None and type(likelihood).__name__ not in likelihoods:
            name = getattr(args, "model", cls_name.lower())
            raise CLIError(f"--model {name} {requirement}")
        kw = dict(fixed, kernel=args.kernel)
        mean = getattr(args, "mean", None)
        if mean not in (None, "zero"):
            if not getattr(lg, cls_name).supports_mean:
                name = getattr(args, "model", cls_name.lower())
                raise CLIError(f"--model {name} has no prior mean function (--mean {mean})")
            kw["mean"] = mean
        if pass_likelihood:
            kw["likelihood"] = likelihood
        if size is not None:
            kw[size_kw] = size if args.inducing is None else args.inducing
        return getattr(lg, cls_name)(**kw)

    build.model_class = cls_name  # type: ignore[attr-defined]
    return build


#: ``--model`` values.  Register more with :func:`register_model_builder`.
MODEL_BUILDERS: dict[str, ModelBuilder] = {}


def register_model_builder(builder: ModelBuilder) -> ModelBuilder:
    """Make ``builder`` available as ``latentgp fit --model <builder.name>``."""
    MODEL_BUILDERS[builder.name] = builder
    return builder


#: Training of the full-batch models (their optimiser, L-BFGS, from the class's
#: ``default_optimizer``).
_FULL_BATCH: dict[str, Any] = {"minibatch": False}
_REGRESSION = {"likelihoods": ("Gaussian",), "requirement": "is for regression (Gaussian noise)"}
_PROBIT = {"likelihoods": ("Bernoulli",), "requirement": "is a binary (probit) classifier"}

# name, summary, build, ModelBuilder settings -- in the order of ``--help``
for _name, _summary, _build, _settings in (
    (
        "svgp",
        "stochastic variational GP, minibatches, any likelihood; Hensman et al., 2013, 2015",
        model_family("SVGP"),
        {"sparse": True},
    ),
    (
        "exact",
        "exact GP regression, Gaussian likelihood, O(N^3); Rasmussen & Williams, 2006",
        model_family("ExactGP", size=None),
        {
            **_FULL_BATCH,
            "too_large_hint": "use --model svgp, which scales to millions of points",
        },
    ),
    (
        "savigp",
        "SAVIGP: mixture-of-Gaussians posterior, black-box likelihoods; Bonilla, Krauth & "
        "Dezfouli, JMLR 2019",
        model_family("SAVIGP", posterior="fg", estimator={"num_samples": 20}),
        {"sparse": True},
    ),
    *(
        (name, summary, model_family("SparseGP", method=name), {**_FULL_BATCH, "sparse": True})
        for name, summary in (
            ("sor", "subset of regressors sparse GP, Gaussian, full batch; Smola & Bartlett, 2001"),
            ("dtc", "deterministic training conditional, Gaussian, full batch; Seeger et al., "
             "2003"),
            ("fitc", "fully independent training conditional, Gaussian, full batch; Snelson & "
             "Ghahramani, 2006"),
            ("vfe", "collapsed variational sparse GP, Gaussian, full batch; Titsias, 2009"),
        )
    ),
    *(
        (
            name,
            summary,
            model_family(name.upper(), size=100, pass_likelihood=False, **_REGRESSION),
            # SVHGP, an SVGP, trains at the modulated models' rate (their paper's protocol)
            {"sparse": True, **({"lr": 0.005} if name == "svhgp" else {})},
        )
        for name, summary in (
            ("shgp", "heteroscedastic GP y = exp(w) f + noise, analytic ELBO; Liu et al., 2021"),
            ("smgp", "mixture of 4 GP experts with GP gating; Liu et al., 2021"),
            ("slgp", "latent-input GP with MLP encoders, hybrid IW bound; Liu et al., 2021"),
            ("svhgp", "SVGP whose noise log-variance is a second GP; Saul et al., 2016"),
        )
    ),
    (
        "deepgp",
        "deep GP of 2 SVGP layers (width min(D, 30), --inducing M = 100 per layer), "
        "doubly stochastic VI, any likelihood; Salimbeni & Deisenroth, 2017",
        model_family("DeepGP", size=100, num_layers=2),
        {"sparse": True},
    ),
    (
        "sep",
        "scalable EP probit classifier, batch sweeps + sign-adaptive steps; Hernandez-Lobato "
        "& Hernandez-Lobato, AISTATS 2016",
        model_family("SEP", size=50, pass_likelihood=False, **_PROBIT),
        # the sign-adaptive batch sweeps of SEP's own fit defaults (not class attributes)
        {**_FULL_BATCH, "optimizer": "sign", "lr": 0.2, "sparse": True, "scales_out": True},
    ),
    (
        "gfitc",
        "generalised FITC probit classifier with EP to convergence; Naish-Guzman & Holden, "
        "2007",
        model_family("GFITC", size=50, pass_likelihood=False, **_PROBIT),
        {**_FULL_BATCH, "sparse": True},
    ),
    (
        "qsgp",
        "quadruply stochastic GP, random Fourier features (--inducing M = number of "
        "features, default 1000), O(1) sparse AdaGrad steps; Evans & Nair, 2020",
        model_family(
            "QSGP",
            size=1000,
            size_kw="num_basis",
            basis="rff",
            likelihoods=("Gaussian", "Bernoulli", "Laplace"),
            requirement="supports the gaussian, bernoulli and laplace likelihoods",
        ),
        {"sparse": True},
    ),
):
    register_model_builder(
        ModelBuilder(
            name=_name,
            summary=_summary,
            build=_build,
            model_class=getattr(_build, "model_class", ""),
            **_settings,
        )
    )

