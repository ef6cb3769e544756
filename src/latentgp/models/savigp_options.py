"""SAVIGP's grouped options: the posterior family, the Monte Carlo estimator and the prior.

``lg.SAVIGP`` takes them as ``posterior=``, ``estimator=`` and ``prior=`` (the classes are
also ``lg.SAVIGP.Posterior``, ``lg.SAVIGP.Estimator`` and ``lg.SAVIGP.Prior``)::

    lg.SAVIGP(64, posterior=lg.SAVIGP.Posterior(components=2, covariance="diag"),
              estimator=lg.SAVIGP.Estimator(method="score", num_samples=20))

Shorthands stay valid: ``posterior="mog2"`` and ``estimator="score"``.  The flat keywords
they replace (:data:`FLAT_KEYWORDS`, e.g. ``num_samples=20``) still work with a
``DeprecationWarning`` that shows the grouped spelling; model files written with flat
options load silently (:func:`grouped_config`).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np
import torch

from ..likelihoods import CallableLikelihood
from ..options import UNSET, OptionGroup, flat_keyword_table, resolve_groups
from ..parameters import inv_softplus
from ..validation import check_choice, check_positive_int

POSTERIORS = {"fg": (1, "full"), "mog1": (1, "diag"), "mog2": (2, "diag")}
ESTIMATORS = ("reparam", "score")


def parse_posterior(name: str) -> tuple[int, str]:
    """``"fg"`` -> (1, "full"), ``"mog1"`` -> (1, "diag"), ``"mogK"`` -> (K, "diag"),
    ``"fgK"`` -> (K, "full")."""
    key = str(name).lower()
    if key in POSTERIORS:
        return POSTERIORS[key]
    m = re.fullmatch(r"(mog|fg)(\d+)", key)
    if m and int(m.group(2)) >= 1:
        return int(m.group(2)), "diag" if m.group(1) == "mog" else "full"
    raise ValueError(f"posterior must be 'fg', 'mog1', 'mog2', 'mogK' or 'fgK', got {name!r}")


def _check_flag(value: Any, name: str) -> bool:
    if value not in (True, False):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _check_values(value: Any, name: str, positive: bool = False) -> tuple[float, ...] | None:
    """None, or a 1-D sequence of finite numbers (positive ones) as a tuple of floats."""
    if value is None:
        return None
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        arr = np.zeros((0, 0))
    if arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be None or a 1-D sequence of finite numbers, got {value!r}")
    if positive and np.any(arr <= 0):
        raise ValueError(f"{name} values must be positive, got {value!r}")
    return tuple(float(v) for v in arr)


def _parse_shorthand(cls, value: Any, shorthand: str, read, parse) -> OptionGroup:
    """``cls.parse``: a string that ``read`` turns into the group, or an instance or a dict
    of fields, which the base's ``parse`` reads."""
    if isinstance(value, str):
        return read(value)
    if isinstance(value, (cls, dict)):
        return parse(value)
    raise TypeError(
        f"{cls.argument} must be a {cls.written_as}, a dict of its fields or {shorthand}, "
        f"got {value!r}"
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Posterior(OptionGroup):
    """The variational posterior q(u): a mixture of ``components`` Gaussians per latent.

    components: K, the number of mixture components.
    covariance: ``"full"`` or ``"diag"`` covariance of each component.
    parameterization: ``"cholesky"`` or ``"lambda"`` (Theorem 2: ``S_j = Kzz (Kzz + Kzx
        Lambda_j Kxz)^-1 Kzz`` with N parameters per latent; full Gaussian only).
    whiten: store the means (and full factors) as ``m = Lzz v`` (``R = Lzz R_v``): the
        same ELBO and family, better conditioned for the optimiser.  ``whiten=False`` is
        the paper's parameterisation; only then does the dense-case ELL not depend on the
        hyperparameters.
    init_cov_scale: initial ``S = init_cov_scale * Kzz`` (diag: its diagonal).

    Shorthands: ``"fg"`` (1, full), ``"mog1"`` (1, diag), ``"mog2"``, ``"mogK"`` (K, diag),
    ``"fgK"`` (K, full).
    """

    argument = "posterior"
    flat_keywords = {"num_components": "components", "covariance": "covariance",
                     "parameterization": "parameterization", "whiten": "whiten",
                     "init_cov_scale": "init_cov_scale"}
    written_as = "lg.SAVIGP.Posterior"
    shorthand_fields = ("components", "covariance")

    components: int = 1
    covariance: str = "full"
    parameterization: str = "cholesky"
    whiten: bool = True
    init_cov_scale: float = 1.0

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "components", check_positive_int(self.components, "Posterior.components"))
        check_choice(self.covariance, "Posterior.covariance", ("full", "diag"))
        check_choice(self.parameterization, "Posterior.parameterization", ("cholesky", "lambda"))
        set_(self, "whiten", _check_flag(self.whiten, "Posterior.whiten"))
        scale = self.init_cov_scale
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
            raise ValueError(f"Posterior.init_cov_scale must be positive, got {scale!r}")
        set_(self, "init_cov_scale", float(scale))
        if self.parameterization == "lambda" and (self.components, self.covariance) != (1, "full"):
            raise ValueError(
                "Posterior.parameterization='lambda' (Theorem 2) is for the full Gaussian "
                "posterior: use components=1, covariance='full' (posterior='fg')"
            )

    @classmethod
    def parse(cls, value: Any) -> Posterior:
        """A Posterior, a dict of its fields, or a shorthand such as ``"mog2"``."""

        def read(name: str) -> Posterior:
            components, covariance = parse_posterior(name)
            return cls(components=components, covariance=covariance)

        return _parse_shorthand(cls, value, "'fg', 'mogK', 'fgK'", read, super().parse)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Estimator(OptionGroup):
    """How the expected log-likelihood and its gradient are estimated.

    method: ``"reparam"`` or ``"score"``; None picks reparam for differentiable torch
        likelihoods and score otherwise.
    num_samples: S, Monte Carlo draws per point, latent and component in the ELL.
    control_variates: the score estimator's control variates.
    pred_samples: Monte Carlo draws for predictive densities of black-box likelihoods.

    Shorthand: the method, ``estimator="score"``.
    """

    argument = "estimator"
    flat_keywords = {"num_samples": "num_samples", "control_variates": "control_variates",
                     "pred_samples": "pred_samples"}
    written_as = "lg.SAVIGP.Estimator"
    shorthand_fields = ("method",)

    method: str | None = None
    num_samples: int = 100
    control_variates: bool = True
    pred_samples: int = 2000

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if self.method is not None and self.method not in ESTIMATORS:
            raise ValueError(
                f"Estimator.method (estimator=) must be one of {ESTIMATORS} or None, "
                f"got {self.method!r}"
            )
        set_(self, "num_samples", check_positive_int(self.num_samples, "Estimator.num_samples"))
        cv = _check_flag(self.control_variates, "Estimator.control_variates")
        set_(self, "control_variates", cv)
        set_(self, "pred_samples", check_positive_int(self.pred_samples, "Estimator.pred_samples"))

    @classmethod
    def parse(cls, value: Any) -> Estimator:
        """An Estimator, a dict of its fields, or the method's name."""
        def read(method: str) -> Estimator:
            return cls(method=method)

        return _parse_shorthand(cls, value, "'reparam' or 'score'", read, super().parse)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Prior(OptionGroup):
    """The GP prior's constant mean and initial kernel variance.

    mean: constant prior mean per latent ``(Q,)`` (e.g. the seismic layer means); None: 0.
    variance: initial kernel variance per latent ``(Q,)`` (stationary kernels); None: the
        kernel's own.
    """

    argument = "prior"
    flat_keywords = {"prior_mean": "mean", "prior_variance": "variance"}
    written_as = "lg.SAVIGP.Prior"

    mean: tuple[float, ...] | None = None
    variance: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean", _check_values(self.mean, "Prior.mean"))
        object.__setattr__(
            self, "variance", _check_values(self.variance, "Prior.variance", positive=True)
        )

    def to_config(self) -> dict[str, Any]:
        return {k: None if v is None else list(v) for k, v in super().to_config().items()}


#: The options' groups, by the constructor argument that takes each.
GROUPS: dict[str, type[OptionGroup]] = {cls.argument: cls for cls in (Posterior, Estimator, Prior)}

#: The deprecated flat keywords: ``{keyword: (group argument, field)}``.
FLAT_KEYWORDS = flat_keyword_table(GROUPS.values())


def resolve_options(given: dict[str, Any], flat: dict[str, Any], *, model: str) -> dict[str, Any]:
    """The groups ``{argument: group}`` from the group arguments ``given`` (each a group, a
    shorthand, a dict or None) and the deprecated flat keywords ``flat`` that were passed
    (each warns, see :func:`~latentgp.options.resolve_group`)."""
    return resolve_groups(GROUPS, FLAT_KEYWORDS, given, flat, model=model)


def grouped_config(config: dict[str, Any]) -> dict[str, Any]:
    """A SAVIGP configuration with the options grouped: files written before the groups
    hold them flat (``num_components``, ..., and ``estimator`` as the method's name) and
    load through this without a warning.  A grouped configuration is returned unchanged."""
    cfg = dict(config)
    method = cfg.get("estimator", UNSET)
    if method is None or isinstance(method, str):
        cfg["estimator"] = {"method": method}
    for keyword, (argument, field) in FLAT_KEYWORDS.items():
        if keyword in cfg:
            cfg[argument] = {**(cfg.get(argument) or {}), field: cfg.pop(keyword)}
    return cfg


def reparameterised_before_fit(estimator: Estimator, likelihood: Any) -> bool:
    """Whether the reparameterisation estimator is known to apply before any data are
    seen (:meth:`latentgp.models.savigp.SAVIGP.reparameterised_before_fit`)."""
    method = estimator.method
    if method is not None:
        return method == "reparam"
    if isinstance(likelihood, CallableLikelihood):
        return likelihood.deterministic_expectation
    return likelihood.differentiable is True


def resolved_method(estimator: Estimator, likelihood: Any) -> str | None:
    """The gradient estimator in use (:meth:`latentgp.models.savigp.SAVIGP.resolved_estimator`):
    ``estimator.method`` if given, else from the likelihood's differentiability (None while
    a plain function has not been inspected)."""
    if estimator.method is not None:
        return estimator.method
    differentiable = likelihood.differentiable
    if differentiable is None:
        return None
    return "reparam" if differentiable else "score"


def apply_prior_variance(kernel: Any, variance: tuple[float, ...], num_latent: int) -> None:
    """Set the (built) kernel's variances ``(Q,)`` to :class:`Prior`'s ``variance``, one
    per latent; a kernel without a per-latent ``raw_variance`` (not stationary) refuses."""
    raw = getattr(kernel, "raw_variance", None)
    if raw is None or raw.shape != (num_latent,):
        raise ValueError("prior.variance needs a stationary kernel (rbf, matern..)")
    pv = torch.tensor(variance, dtype=torch.float64)
    if pv.numel() != num_latent:
        raise ValueError(f"prior.variance has {pv.numel()} values for Q={num_latent}")
    with torch.no_grad():
        raw.copy_(inv_softplus(pv).to(raw))
