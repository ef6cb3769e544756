"""QSGP's grouped options: the basis, the covariance factor, the control variate, the mean
step and the hyperparameters' optimiser.

``lg.QSGP`` takes them as ``basis=``, ``covariance=``, ``control_variate=``,
``mean_step=`` and ``hyperparameters=`` (the classes are also ``lg.QSGP.Basis``,
``lg.QSGP.Covariance``, ``lg.QSGP.ControlVariate``, ``lg.QSGP.Newton`` and
``lg.QSGP.Hyperparameters``)::

    lg.QSGP(2000, basis=lg.QSGP.Basis(kind="rff", batch=200, seed=1),
            covariance=lg.QSGP.Covariance(kind="chevron", num_dense=20),
            control_variate=lg.QSGP.ControlVariate(rank=50),
            mean_step=lg.QSGP.Newton(damping=0.5))

Shorthands stay valid: ``basis="rvm"``, ``covariance="chevron"``, ``control_variate=50``
(the rank), ``mean_step="gradient"`` or ``"newton"``.  The flat keywords they replace
(:data:`FLAT_KEYWORDS`, e.g. ``basis_batch=200``) still work with a ``DeprecationWarning``
that shows the grouped spelling; model files written with flat options load silently
(:func:`grouped_config`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

from ...kernels.features import SPECTRAL_DOF
from ...likelihoods import Bernoulli, Gaussian, Laplace
from ...options import OptionGroup, flat_keyword_table, resolve_groups
from ...validation import check_choice, check_positive_float, check_positive_int
from .rvm import RVM_UPDATES

BASES = ("rff", "inducing", "rvm")
COVARIANCES = ("meanfield", "chevron", "full")
MEAN_STEPS = ("gradient", "newton")


def _flag(value: Any, name: str, allow_none: bool = False) -> bool | None:
    if allow_none and value is None:
        return None
    if value is not True and value is not False:
        none = " or None" if allow_none else ""
        raise ValueError(f"{name} must be True or False{none}, got {value!r}")
    return value


class _Group(OptionGroup):
    """A group of QSGP's options: users write it as ``lg.QSGP.<its class name>``."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.written_as = f"lg.QSGP.{cls.__name__}"


class _Shorthand(_Group):
    """A group whose shorthand (a value of type ``shorthand_type``, bools excluded) sets
    its one shorthand field; ``shorthand_described`` names the shorthands in messages."""

    shorthand_type: ClassVar[type] = str
    shorthand_described: ClassVar[str] = ""

    @classmethod
    def parse(cls, value: Any) -> Any:
        """The group, a dict of its fields, or its shorthand."""
        if isinstance(value, cls.shorthand_type) and not isinstance(value, bool):
            return cls.from_shorthand(value)
        if isinstance(value, (cls, dict)):
            return super().parse(value)
        raise TypeError(
            f"{cls.argument} must be a {cls.written_as}, a dict of its fields or "
            f"{cls.shorthand_described}, got {value!r}"
        )

    @classmethod
    def from_shorthand(cls, value: Any) -> Any:
        return cls(**{cls.shorthand_fields[0]: value})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Basis(_Shorthand):
    """The basis functions phi and prior precision S (notes B.1).

    kind: ``"rff"`` (random Fourier features, S = I), ``"inducing"`` (``K(X, Z)``,
        S = K(Z, Z)) or ``"rvm"`` (``K(X, Z)``, S = diag(s) learned: the QSRVM).
    batch: m~, basis functions drawn per index set (all when >= m); None: 1000 with
        gradient steps on the mean, 250 with the Newton step (whose minibatch Hessian
        block must be well estimated by n~ rows: |U| <= 2 m~ well below n~).
    seed: seed of the random features / the choice of the centres Z.
    rvm_update: how the RVM precisions s are learned (``kind="rvm"`` only):
        ``"gradient"`` (the seed's sparse optimiser steps on ``log s``), ``"em"`` or
        ``"mackay"`` (closed-form updates of the sampled rows, :mod:`.rvm`).

    ``basis="rvm"`` is short for ``basis=lg.QSGP.Basis(kind="rvm")``.
    """

    argument = "basis"
    flat_keywords = {"basis_batch": "batch", "feature_seed": "seed", "rvm_update": "rvm_update"}
    shorthand_fields = ("kind",)
    shorthand_described = "'rff', 'inducing' or 'rvm'"

    kind: str = "rff"
    batch: int | None = None
    seed: int = 0
    rvm_update: str = "gradient"

    def __post_init__(self) -> None:
        check_choice(self.kind, "Basis.kind (basis=)", BASES)
        if self.batch is not None:
            object.__setattr__(self, "batch", check_positive_int(self.batch, "Basis.batch"))
        object.__setattr__(self, "seed", check_positive_int(self.seed, "Basis.seed", minimum=0))
        check_choice(self.rvm_update, "Basis.rvm_update", RVM_UPDATES)
        if self.rvm_update != "gradient" and self.kind != "rvm":
            raise ValueError(
                f"Basis.rvm_update={self.rvm_update!r} learns the RVM precisions: it needs "
                f"kind='rvm', got kind={self.kind!r}"
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Covariance(_Shorthand):
    """The factor C of the posterior covariance ``Sigma = C C^T`` (:mod:`.factor`).

    kind: ``"meanfield"`` (diagonal), ``"chevron"`` (the first ``num_dense`` columns dense)
        or ``"full"``.
    num_dense: dense columns of the chevron (``kind="chevron"`` only; None: 10).
    num_columns: dense columns sampled per step (not for ``"meanfield"``; None: all dense
        columns, at most 10).
    closed_form_diagonal: set the diagonal-only columns by Prop. 1 before and after fitting
        (an O(N m) pass); None: when N m <= 2e8 and the likelihood is Gaussian.

    Shorthand: the kind (e.g. ``covariance="chevron"``).
    """

    argument = "covariance"
    flat_keywords = {"num_dense": "num_dense", "num_columns": "num_columns",
                     "closed_form_diagonal": "closed_form_diagonal"}
    shorthand_fields = ("kind",)
    shorthand_described = "'meanfield', 'chevron' or 'full'"

    kind: str = "meanfield"
    num_dense: int | None = None
    num_columns: int | None = None
    closed_form_diagonal: bool | None = None

    def __post_init__(self) -> None:
        check_choice(self.kind, "Covariance.kind (covariance=)", COVARIANCES)
        if self.num_dense is not None:
            if self.kind != "chevron":
                raise ValueError(
                    f"Covariance.num_dense sets the chevron's dense columns: it needs "
                    f"kind='chevron', got kind={self.kind!r}"
                )
            dense = check_positive_int(self.num_dense, "Covariance.num_dense", minimum=0)
            object.__setattr__(self, "num_dense", dense)
        if self.num_columns is not None:
            if self.kind == "meanfield":
                raise ValueError(
                    "Covariance.num_columns samples dense columns: a mean-field C has none "
                    "(use kind='chevron' or 'full')"
                )
            cols = check_positive_int(self.num_columns, "Covariance.num_columns")
            object.__setattr__(self, "num_columns", cols)
        _flag(self.closed_form_diagonal, "Covariance.closed_form_diagonal", allow_none=True)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ControlVariate(_Shorthand):
    """The control variates of Prop. 3 / Appendix F (:mod:`.control_variates`; Gaussian
    likelihood only).

    rank: n_bar, support points of the control variate (0: none).
    nystrom: with ``basis="inducing"``, also the Nyström control variate of Appendix F.2
        on the prior term ``mu^T K mu`` (the other bases have no such term).

    Shorthand: the rank, ``control_variate=50``.
    """

    argument = "control_variate"
    flat_keywords = {"cv_rank": "rank", "nystrom_cv": "nystrom"}
    shorthand_fields = ("rank",)
    shorthand_type = int
    shorthand_described = "the rank (an int)"

    rank: int = 0
    nystrom: bool = True

    def __post_init__(self) -> None:
        rank = check_positive_int(self.rank, "ControlVariate.rank", minimum=0)
        object.__setattr__(self, "rank", rank)
        _flag(self.nystrom, "ControlVariate.nystrom")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Newton(_Shorthand):
    """The randomised block-Newton mean step (``mean_step=``; :mod:`.newton`; Gaussian
    likelihood only, where ``mean_step="auto"``, the default, picks it on at least 1,000
    rows): ``mu_U += damping * H_UU^{-1} g_U`` on the sampled rows.

    damping: the step fraction rho, 0 < rho <= 1.
    ridge: Levenberg-Marquardt term: ``H_UU`` gets ``ridge * mean(diag H_UU)`` on its
        diagonal (0.01 keeps steps on small data batches with local kernel columns in check).
    anchor_every: steps between refreshes of the variance-reduction anchor (one O(N m)
        pass each, :func:`~latentgp.models.qsgp.newton.refresh_anchor`); None: once per
        pass over the data, ``ceil(N / n~)`` steps, when ``n~ >= 4 m~`` and no anchor
        otherwise (the anchored gradient has parts outside the span of a rank-deficient
        minibatch Hessian block, and steps along them diverge); 0: no anchor (the plain
        minibatch gradient, which stalls at a noise floor).

    Shorthand: ``mean_step="newton"`` (the defaults); ``mean_step="gradient"`` is the
    sparse optimiser's step (the seed's way) instead.
    """

    argument = "mean_step"
    flat_keywords = {"newton_damping": "damping", "newton_ridge": "ridge"}
    shorthand_fields = ()
    shorthand_described = "'newton'"

    damping: float = 0.3
    ridge: float = 0.0
    anchor_every: int | None = None

    def __post_init__(self) -> None:
        damping = check_positive_float(self.damping, "Newton.damping")
        if damping > 1:
            raise ValueError(f"Newton.damping must be in (0, 1], got {self.damping!r}")
        object.__setattr__(self, "damping", damping)
        ridge = self.ridge
        if isinstance(ridge, bool) or not isinstance(ridge, (int, float)):
            raise ValueError(f"Newton.ridge must be a finite number >= 0, got {ridge!r}")
        if not math.isfinite(ridge) or ridge < 0:
            raise ValueError(f"Newton.ridge must be a finite number >= 0, got {ridge!r}")
        object.__setattr__(self, "ridge", float(ridge))
        if self.anchor_every is not None:
            every = check_positive_int(self.anchor_every, "Newton.anchor_every", minimum=0)
            object.__setattr__(self, "anchor_every", every)

    def anchor_interval(self, n: int, batch_size: int, basis_batch: int) -> int:
        """Steps between anchor refreshes for ``n`` rows, ``batch_size`` rows (n~) and
        ``basis_batch`` basis functions (m~) a draw (0: no anchor)."""
        if self.anchor_every is not None:
            return self.anchor_every
        if min(batch_size, n) < 4 * basis_batch:
            return 0
        return max(1, -(-n // max(1, batch_size)))

    @classmethod
    def from_shorthand(cls, value: str) -> Newton:
        """``"newton"``: the defaults."""
        if value != "newton":
            raise ValueError(
                f"mean_step must be 'auto', 'gradient', 'newton' or a {cls.written_as}, "
                f"got {value!r}"
            )
        return cls()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Hyperparameters(_Group):
    """Adam on the few hyperparameters (kernel of ``basis="rff"``, noise; whether they are
    learned at all is ``learn_hyperparameters=``).

    lr: Adam's learning rate; None: 0.03 with the Newton mean step (whose mean keeps up
        with faster hyperparameters), 0.01 with gradient steps.
    delay: the number of initial steps during which they stay frozen.
    pretrain_rows: the first fit starts the kernel's and the noise's hyperparameters at
        those of an exact GP fitted (Cholesky, to convergence) on this many random
        training rows, the seed's protocol for its experiments (1,000 rows); 0: no
        pretraining.  None (default): :data:`PRETRAIN_ROWS` for ``basis="rff"`` with the
        Gaussian likelihood when neither the kernel nor the noise was given as a value
        (a kernel or likelihood object, ``noise_variance=``), 0 otherwise.  A pretrained
        model keeps these hyperparameters unless ``learn_hyperparameters=True``
        (docs/design.md, "QSGP's default fit").
    """

    argument = "hyperparameters"
    flat_keywords = {"hyper_lr": "lr", "hyper_delay": "delay"}

    lr: float | None = None
    delay: int = 0
    pretrain_rows: int | None = None

    def __post_init__(self) -> None:
        if self.lr is not None:
            object.__setattr__(self, "lr", check_positive_float(self.lr, "Hyperparameters.lr"))
        delay = check_positive_int(self.delay, "Hyperparameters.delay", minimum=0)
        object.__setattr__(self, "delay", delay)
        if self.pretrain_rows is not None:
            rows = check_positive_int(self.pretrain_rows, "Hyperparameters.pretrain_rows",
                                      minimum=0)
            object.__setattr__(self, "pretrain_rows", rows)


#: Hyperparameters.pretrain_rows when it applies and is not given (the seed fits its
#: hyperparameters by an exact GP on 1,000 random training points)
PRETRAIN_ROWS = 1000
#: ``mean_step="auto"``: the Newton step when the first fit's training rows (the default
#: minibatch is min(N, 2,000)) hold at least this many times the Newton step's basis
#: batch, so that its variance-reduction anchor applies; the gradient step otherwise
AUTO_NEWTON_FACTOR = 4


#: The options' groups, by the constructor argument that takes each.
GROUPS: dict[str, type[OptionGroup]] = {
    cls.argument: cls for cls in (Basis, Covariance, ControlVariate, Newton, Hyperparameters)
}

#: The deprecated flat keywords: ``{keyword: (group argument, field)}``.
FLAT_KEYWORDS = flat_keyword_table(GROUPS.values())


def resolve_options(given: dict[str, Any], flat: dict[str, Any], *, model: str) -> dict[str, Any]:
    """The groups ``{argument: group}`` from the group arguments ``given`` (each a group, a
    shorthand, a dict or None) and the deprecated flat keywords ``flat`` that were passed
    (each warns, see :func:`~latentgp.options.resolve_group`).  ``mean_step`` resolves to
    ``"gradient"``, ``"auto"`` (chosen at the first fit) or a :class:`Newton`; the flat
    ``newton_*`` keywords need the Newton step."""
    groups = dict(GROUPS)
    if given.get("mean_step") in ("gradient", "auto"):
        passed = [keyword for keyword in flat if FLAT_KEYWORDS[keyword][0] == "mean_step"]
        if passed:
            raise ValueError(
                f"{model}: {passed[0]}= sets the Newton mean step, but mean_step is "
                f"{given['mean_step']!r}; write mean_step=lg.QSGP.Newton(...)"
            )
        del groups["mean_step"]
    out = resolve_groups(groups, FLAT_KEYWORDS, given, flat, model=model)
    out.setdefault("mean_step", given.get("mean_step") or "gradient")
    return out


#: the Basis.batch (m~) of ``batch=None``, by the kind of mean step
DEFAULT_BASIS_BATCH = {"gradient": 1000, "newton": 250}
#: the Hyperparameters.lr of ``lr=None``, by the kind of mean step
DEFAULT_HYPER_LR = {"gradient": 0.01, "newton": 0.03}


def grouped_config(config: dict[str, Any]) -> dict[str, Any]:
    """A QSGP configuration with the options grouped: files written before the groups hold
    them flat (``basis="rff"``, ``basis_batch=...``, ``mean_step="gradient"``,
    ``newton_damping=...``, ...) and load through this without a warning.  Flat values
    that had no effect (the Newton settings of a gradient mean step, ``rvm_update`` of a
    basis other than the RVM, ``num_dense`` / ``num_columns`` of a factor without dense
    columns) are dropped.  A grouped configuration is returned unchanged."""
    cfg = dict(config)
    # files written before the Newton step existed trained with gradient steps (the
    # default has since become the Newton step)
    cfg.setdefault("mean_step", "gradient")
    for argument in ("basis", "covariance"):
        if isinstance(cfg.get(argument), str):
            cfg[argument] = {"kind": cfg[argument]}
    if cfg.get("mean_step") == "newton":
        cfg["mean_step"] = {}
    for keyword, (argument, field) in FLAT_KEYWORDS.items():
        if keyword not in cfg:
            continue
        value = cfg.pop(keyword)
        group = cfg.get(argument)
        if group == "gradient" or not _had_effect(cfg, argument, field):
            continue
        cfg[argument] = {**(group or {}), field: value}
    return cfg


def _had_effect(cfg: dict[str, Any], argument: str, field: str) -> bool:
    """Whether a flat value of an old configuration was used by the model that wrote it."""
    kind = (cfg.get(argument) or {}).get("kind")
    if field == "rvm_update":
        return kind == "rvm"
    if field == "num_dense":
        return kind == "chevron"
    if field == "num_columns":
        return kind not in (None, "meanfield")
    return True


def check_likelihood_and_kernel(likelihood: Any, kernel: Any, groups: dict[str, Any]) -> None:
    """Refuse the options (``groups`` as :func:`resolve_options` returns them) that do not
    go with the ``likelihood`` or the ``kernel``: QSGP needs a log-concave site (Gaussian,
    Bernoulli, Laplace), random features a kernel with a known spectral density, and the
    control variate and the Newton mean step the Gaussian likelihood."""
    lik = type(likelihood).__name__
    if not isinstance(likelihood, (Gaussian, Bernoulli, Laplace)):
        raise ValueError(
            "QSGP supports the 'gaussian', 'bernoulli' and 'laplace' likelihoods (the "
            f"lower bound needs a log-concave site), got {lik}"
        )
    if groups["basis"].kind == "rff" and type(kernel).__name__ not in SPECTRAL_DOF:
        raise ValueError(
            "basis='rff' needs an RBF or Matérn kernel (one with a known spectral "
            f"density), got {type(kernel).__name__}"
        )
    if isinstance(likelihood, Gaussian):
        return
    rank = groups["control_variate"].rank
    if rank:
        raise ValueError(
            f"control_variate (rank {rank} > 0) needs the Gaussian likelihood, got {lik}"
        )
    if isinstance(groups["mean_step"], Newton):
        raise ValueError(
            "mean_step=Newton needs the Gaussian likelihood (its Hessian block is "
            f"Phi^T Phi / sigma^2 + S); use mean_step='gradient' for {lik}"
        )
