"""scikit-learn estimators: GP regression, classification and count regression.

They follow scikit-learn's conventions (``fit`` / ``predict`` / ``predict_proba`` /
``score``, parameters in ``__init__`` only, fitted attributes ending in ``_``) and work in
``Pipeline``, ``GridSearchCV`` and ``cross_val_score``.  Inputs are standardised inside
the estimator.  Each picks a method by default: for Gaussian regression the exact GP
for small problems and Titsias' VFE up to 100,000 rows (the user guide's table), SVGP
otherwise; SVGP trains by full-batch L-BFGS up to 5,000 rows and by minibatch Adam
above (``optimizer``, ``max_full_batch``).  Without
``epochs``/``max_steps`` every fit trains until converged (the rule of
:mod:`latentgp.training.convergence`).

    from latentgp.sklearn import GPRegressor
    mean, std = GPRegressor().fit(X, y).predict(X_test, return_std=True)
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.preprocessing import LabelEncoder
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from . import likelihoods as L
from .data.standardize import Standardizer
from .means import ConstantMean
from .models import SVGP, ExactGP, SparseGP, read_model_file
from .rng import seeded_scope
from .training import fit_with_restarts
from .validation import (
    check_choice,
    check_learning_rate,
    check_positive_float,
    check_positive_int,
)

__all__ = ["FULL_BATCH_LR", "FULL_BATCH_TOL", "SOFTMAX_POINTS", "GPRegressor", "GPClassifier",
           "GPCountRegressor", "load"]

#: The L-BFGS settings of the full-batch SVGP fits (``optimizer="lbfgs"``, or ``"auto"``
#: on up to ``max_full_batch`` rows): unit initial step (the line search scales it) and,
#: without a budget, a stop when the objective changes by less than this relative
#: tolerance three steps in a row.
FULL_BATCH_LR = 1.0
FULL_BATCH_TOL = 1e-4
#: The fixed rule of multi-class GPClassifier's softmax expectation: 2 x 128 points
#: (:class:`latentgp.likelihoods.Softmax` ``expectation_points``), so that its objective
#: is deterministic and trains by L-BFGS like the binary one; the rule's expected log
#: likelihood is within 0.004 nats per row on average of a Gauss-Hermite product rule
#: for 3 classes (``tests/unit/test_softmax_rule.py``) and within 0.008 of 200,000 Monte
#: Carlo draws for 10 (``docs/results/sklearn_small.md``).
SOFTMAX_POINTS = 128


def _sample_targets(model: Any, X: np.ndarray, n_samples: int, random_state: Any) -> np.ndarray:
    """``(n_samples, n)`` joint draws of y at ``X``: f from the model's joint posterior
    (:meth:`~latentgp.GPModel.sample_f`, in target units), then ``y ~ p(y | f)`` by the
    likelihood, which works in the model's training units (targets scaled by ``y_mean``,
    ``y_scale``).  Seeded from ``random_state`` inside a private torch random state."""
    seed = int(check_random_state(random_state).randint(2**31 - 1))
    f = torch.as_tensor(model.sample_f(X, n_samples, seed=seed)).to(model.y_mean)
    with seeded_scope(seed, [f.device]):
        torch.manual_seed(seed)
        with torch.no_grad():
            y = model.likelihood.sample_y((f - model.y_mean) / model.y_scale)
    return (y * model.y_scale + model.y_mean).cpu().numpy()


class _GPBase(BaseEstimator):
    """Shared fitting machinery (not public)."""

    def _standardise_fit(self, X: np.ndarray) -> np.ndarray:
        scaler = Standardizer().fit(X)
        self.x_mean_, self.x_scale_ = scaler.mean_, scaler.scale_
        return (X - self.x_mean_) / self.x_scale_

    def _standardise(self, X: np.ndarray) -> np.ndarray:
        return (X - self.x_mean_) / self.x_scale_

    def _dtype(self) -> torch.dtype:
        if self.dtype not in ("float64", "float32"):
            raise ValueError(f"dtype must be 'float64' or 'float32', got {self.dtype!r}")
        return getattr(torch, self.dtype)

    def _svgp_optimizer(self, n: int, likelihood) -> str:
        """The SVGP optimiser for ``n`` training rows: ``optimizer``, or for ``"auto"``
        full-batch L-BFGS up to ``max_full_batch`` rows (without a ``batch_size``) where
        the objective is deterministic (``likelihood.deterministic_expectation``, the
        predicate of SVGP's own fit default: closed form, Gauss-Hermite, or the fixed
        rule of GPClassifier's softmax), minibatch Adam otherwise."""
        opt = check_choice(self.optimizer, "optimizer", ("auto", "lbfgs", "adam"))
        if opt != "auto":
            return opt
        small = n <= check_positive_int(self.max_full_batch, "max_full_batch")
        exact = likelihood.deterministic_expectation  # the predicate of SVGP's fit default
        return "lbfgs" if small and exact and self.batch_size is None else "adam"

    def _fit_svgp_model(
        self, likelihood, X: np.ndarray, y: np.ndarray, mean: Any = "zero"
    ) -> SVGP:
        """An SVGP with ``likelihood`` (and prior ``mean``) trained on standardised ``X``
        ``(n, D)``, ``y``.

        With L-BFGS the inducing inputs stay at their k-means placement (all the rows
        when ``num_inducing >= n``) and the fit stops when the objective changes by less
        than :data:`FULL_BATCH_TOL` (relative) three steps in a row: on a few hundred rows
        this converges in about a hundred steps, where learning Z as well and the strict
        default rule take many hundreds for no better test log loss (measured in
        ``docs/results/sklearn_small.md``).  Adam trains Z with the rest, until the
        convergence rule of :mod:`latentgp.training.convergence` stops it."""
        check_learning_rate(self.lr)  # checked even where L-BFGS takes its own step size
        optimizer = self._svgp_optimizer(X.shape[0], likelihood)
        self.optimizer_ = optimizer
        full_batch = optimizer == "lbfgs"
        # above n rows the model caps num_inducing at n, with the warning of every front
        # end (latentgp.validation.cap_at_rows)
        model = SVGP(
            num_inducing=check_positive_int(self.num_inducing, "num_inducing"),
            likelihood=likelihood,
            kernel=self.kernel,
            learn_inducing=not full_batch,
            device=self.device,
            dtype=self._dtype(),
            mean=mean,
        )
        budget = self.epochs is not None or self.max_steps is not None
        self._train(  # no epochs/max_steps: until converged
            model,
            X,
            y,
            batch_size=self.batch_size,
            epochs=self.epochs,
            max_steps=self.max_steps,
            optimizer=optimizer,
            lr=FULL_BATCH_LR if full_batch else self.lr,
            tol=FULL_BATCH_TOL if full_batch and not budget else None,
            progress=self.progress,
        )
        return model

    def _train(self, model: Any, X: np.ndarray, y: np.ndarray, **options: Any) -> None:
        """``model.fit(X, y, seed=random_state, **options)``; with ``n_restarts_optimizer``
        = k > 0, :func:`latentgp.training.fit_with_restarts` from k + 1 starts (the
        model's own initialisation and k drawn ones, as scikit-learn's
        ``n_restarts_optimizer``), keeping the one with the highest final objective."""
        k = self.n_restarts_optimizer
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
            raise ValueError(f"n_restarts_optimizer must be an integer >= 0, got {k!r}")
        if k == 0:
            model.fit(X, y, seed=self.random_state, **options)
            return
        seed = 0 if self.random_state is None else int(self.random_state)
        fit_with_restarts(model, X, y, restarts=int(k) + 1, seed=seed, **options)

    def save(self, path: str | os.PathLike) -> None:
        """Write the fitted estimator to ``path``: the model file of ``model_`` (see
        :meth:`latentgp.GPModel.save`) with the estimator's parameters, input scaling,
        feature names and class labels in a record of the file.  :func:`load` (or
        ``type(est).load``) reads it back into an estimator that predicts exactly as this
        one; :func:`latentgp.load` would give only ``model_``, which expects standardised
        inputs."""
        check_is_fitted(self)
        params = self.get_params(deep=False)
        kernel_object = not isinstance(params["kernel"], str)
        if kernel_object:
            params["kernel"] = None  # a Kernel object: restored from the model file
        fitted = {n: _array_record(getattr(self, n)) for n in _FITTED if hasattr(self, n)}
        record = {
            "format": _RECORD_FORMAT,
            "version": _RECORD_VERSION,
            "estimator": type(self).__name__,
            "params": params,
            "kernel_from_model": kernel_object,
            "fitted": fitted,
        }
        self.model_.save(path, records={_RECORD_KEY: json.dumps(record)})

    @classmethod
    def load(cls, path: str | os.PathLike) -> Any:
        """The estimator that :meth:`save` wrote to ``path`` (``TypeError`` if the file
        holds another kind of estimator)."""
        est = load(path)
        if not isinstance(est, cls):
            raise TypeError(f"{os.fspath(path)} holds a {type(est).__name__}, not a {cls.__name__}")
        return est

    def _check_X(self, X, reset: bool) -> np.ndarray:
        return validate_data(self, X, reset=reset, dtype=np.float64)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags


class GPRegressor(RegressorMixin, _GPBase):
    """Gaussian-process regression.

    Parameters
    ----------
    method: ``"auto"``, ``"exact"``, ``"vfe"`` or ``"svgp"``.  ``"auto"`` follows the user
        guide's table: with a Gaussian likelihood the exact GP for ``n <= max_exact``,
        then Titsias' VFE sparse GP (full batch, L-BFGS) for ``n <= max_vfe``; SVGP
        above that and for the other likelihoods.
    kernel: kernel name or :class:`latentgp.kernels.Kernel`.
    likelihood: ``"gaussian"``, ``"studentt"`` or ``"laplace"`` (the last two need SVGP).
    num_inducing: M for VFE and SVGP.  max_exact, max_vfe: the sizes where ``"auto"``
        changes method.
    optimizer, max_full_batch: SVGP's optimiser (see :class:`GPClassifier`).
    epochs, max_steps, batch_size, lr: a training budget (default None: until converged;
        for SVGP, or the L-BFGS steps of the exact GP and VFE) and SVGP's Adam settings
        (``batch_size=None``: the model's default, min(N, 1024)).  A
        ``num_inducing`` or ``batch_size`` above the N training rows means N, with a
        :class:`~latentgp.SizeCappedWarning` (the rule of every front end).
    random_state: seed.  dtype: ``"float64"`` or ``"float32"``.  device: torch device.
    n_restarts_optimizer: further starting points of the hyperparameter fit (0: one fit
        from the data-scaled initialisation), as scikit-learn's: the fit runs from the
        initialisation and from ``n_restarts_optimizer`` starts drawn log-uniformly within
        a factor of 10 of it (or from priors / within bounds set on the model), and keeps
        the one with the highest final objective (:func:`latentgp.training.fit_with_restarts`;
        a start that fails is skipped and reported in ``model_.history_.events``).
    """

    def __init__(
        self,
        method: str = "auto",
        kernel: Any = "rbf",
        likelihood: str = "gaussian",
        num_inducing: int = 256,
        max_exact: int = 2000,
        max_vfe: int = 100_000,
        optimizer: str = "auto",
        max_full_batch: int = 5000,
        epochs: int | None = None,
        max_steps: int | None = None,
        batch_size: int | None = None,
        lr: float = 0.01,
        random_state: int | None = 0,
        n_restarts_optimizer: int = 0,
        dtype: str = "float64",
        device: str | None = None,
        progress: bool = False,
    ) -> None:
        self.method = method
        self.kernel = kernel
        self.likelihood = likelihood
        self.num_inducing = num_inducing
        self.max_exact = max_exact
        self.max_vfe = max_vfe
        self.optimizer = optimizer
        self.max_full_batch = max_full_batch
        self.epochs = epochs
        self.max_steps = max_steps
        self.batch_size = batch_size
        self.lr = lr
        self.random_state = random_state
        self.n_restarts_optimizer = n_restarts_optimizer
        self.dtype = dtype
        self.device = device
        self.progress = progress

    def fit(self, X, y) -> GPRegressor:
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True, multi_output=False)
        Xs = self._standardise_fit(X)
        n = X.shape[0]
        method = check_choice(self.method, "method", ("auto", "exact", "vfe", "svgp"))
        lik = L.likelihood_from_name(self.likelihood)
        if method == "auto":
            method = self._auto_method(isinstance(lik, L.Gaussian), n)
        if n < 2:
            raise ValueError(f"GPRegressor needs at least 2 samples, got n_samples = {n}")
        common = {"kernel": self.kernel, "device": self.device, "dtype": self._dtype()}
        self.optimizer_ = "lbfgs"  # the exact GP's and VFE's (SVGP's: set below)
        if method == "exact":
            model = ExactGP(likelihood=lik, **common)
            self._train(model, Xs, y, epochs=self.epochs, max_steps=self.max_steps,
                        progress=self.progress)
        elif method == "vfe":
            M = check_positive_int(self.num_inducing, "num_inducing")
            model = SparseGP("vfe", num_inducing=M, likelihood=lik, **common)
            budget = {"epochs": self.epochs, "max_steps": self.max_steps}  # full batch: steps
            self._train(model, Xs, y, progress=self.progress, **budget)
        else:
            model = self._fit_svgp_model(lik, Xs, y)
        self.model_ = model
        self.method_ = method
        return self

    def _auto_method(self, gaussian: bool, n: int) -> str:
        if gaussian and n <= check_positive_int(self.max_exact, "max_exact"):
            return "exact"
        if gaussian and n <= check_positive_int(self.max_vfe, "max_vfe"):
            return "vfe"
        return "svgp"

    def predict(self, X, return_std: bool = False, return_cov: bool = False):
        """Predictive mean of y; with ``return_std`` also its standard deviation, with
        ``return_cov`` its joint covariance ``(n, n)``.

        Both include the learned noise, as scikit-learn's GaussianProcessRegressor does
        when the noise is a ``WhiteKernel`` (the noise here is the likelihood's learned
        parameter), so that ``std ** 2 == diag(cov)``: ``cov`` is the latent function's
        joint covariance plus the noise variance on the diagonal.
        """
        check_is_fitted(self)
        if return_std and return_cov:
            raise RuntimeError("At most one of return_std or return_cov can be requested.")
        X = self._standardise(self._check_X(X, reset=False))
        mean, var = self.model_.predict_y(X)
        if return_cov:
            return mean, self._y_covariance(X, var)
        if return_std:
            return mean, np.sqrt(var)
        return mean

    def _y_covariance(self, X: np.ndarray, var_y: np.ndarray) -> np.ndarray:
        """Joint covariance of y at standardised ``X``: that of f, plus the noise variance
        ``var_y - var_f`` (the likelihood's share of the predictive variance) on the
        diagonal, so that its diagonal is ``var_y`` exactly."""
        _, cov = self.model_.predict_f_full_cov(X)
        cov = cov[0]
        idx = np.diag_indices_from(cov)
        cov[idx] = var_y
        return cov

    def sample_y(self, X, n_samples: int = 1, random_state: int | None = 0) -> np.ndarray:
        """Joint samples of y (the latent function's joint posterior, then the likelihood's
        noise), ``(n, n_samples)``, as scikit-learn's ``sample_y``.  ``random_state`` seeds
        them without touching the global random state."""
        check_is_fitted(self)
        X = self._standardise(self._check_X(X, reset=False))
        check_positive_int(n_samples, "n_samples")
        return _sample_targets(self.model_, X, n_samples, random_state).T

class GPClassifier(ClassifierMixin, _GPBase):
    """Gaussian-process classification (binary or multi-class, any label type).

    Binary problems use a Bernoulli likelihood (``link="logit"`` or ``"probit"``), multi-
    class ones a softmax over one latent function per class whose expectation is taken
    with a fixed rule of points (:data:`SOFTMAX_POINTS`), so that both objectives are
    deterministic; both are trained as SVGP.

    Parameters
    ----------
    kernel: kernel name or :class:`latentgp.kernels.Kernel`.  num_inducing: M (at most
        the number of rows, see below).
    optimizer: ``"auto"``, ``"lbfgs"`` or ``"adam"``.  ``"auto"``: full-batch L-BFGS for
        up to ``max_full_batch`` training rows (and no ``batch_size``), minibatch Adam
        otherwise.  With L-BFGS the inducing
        inputs stay where k-means placed them (every row when ``num_inducing`` is at
        least the number of rows) and the fit stops on the relative tolerance
        :data:`FULL_BATCH_TOL`; with Adam they are learned and the fit runs until the
        convergence rule of :mod:`latentgp.training.convergence` stops it.
    epochs, max_steps: a training budget (default None: until converged).  batch_size,
        lr: Adam's minibatch size (None: min(N, 1024)) and learning rate.  A
        ``num_inducing`` or ``batch_size`` above the N training rows means N, with a
        :class:`~latentgp.SizeCappedWarning`.
    random_state: seed.  dtype: ``"float64"`` or ``"float32"``.  device: torch device.
    n_restarts_optimizer: further starts of the fit, the best kept (see
        :class:`GPRegressor`).
    """

    def __init__(
        self,
        kernel: Any = "rbf",
        link: str = "logit",
        num_inducing: int = 128,
        optimizer: str = "auto",
        max_full_batch: int = 5000,
        epochs: int | None = None,
        max_steps: int | None = None,
        batch_size: int | None = None,
        lr: float = 0.03,
        random_state: int | None = 0,
        n_restarts_optimizer: int = 0,
        dtype: str = "float64",
        device: str | None = None,
        progress: bool = False,
    ) -> None:
        self.kernel = kernel
        self.link = link
        self.num_inducing = num_inducing
        self.optimizer = optimizer
        self.max_full_batch = max_full_batch
        self.epochs = epochs
        self.max_steps = max_steps
        self.batch_size = batch_size
        self.lr = lr
        self.random_state = random_state
        self.n_restarts_optimizer = n_restarts_optimizer
        self.dtype = dtype
        self.device = device
        self.progress = progress

    def fit(self, X, y) -> GPClassifier:
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        encoder = LabelEncoder().fit(y)
        self.classes_ = encoder.classes_
        codes = encoder.transform(y).astype(np.float64)
        C = len(self.classes_)
        if C < 2:
            raise ValueError(
                "GPClassifier needs samples of at least 2 classes; got only one class, "
                f"{self.classes_[0]!r}"
            )
        Xs = self._standardise_fit(X)
        lik = (L.Bernoulli(self.link) if C == 2
               else L.Softmax(C, expectation_points=SOFTMAX_POINTS))
        self.model_ = self._fit_svgp_model(lik, Xs, codes)
        return self

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities ``(n, C)`` in the order of ``classes_``."""
        check_is_fitted(self)
        X = self._standardise(self._check_X(X, reset=False))
        p, _ = self.model_.predict_y(X)
        if p.ndim == 1:
            p = np.stack([1.0 - p, p], 1)
        return p

    def predict_log_proba(self, X) -> np.ndarray:
        return np.log(np.clip(self.predict_proba(X), 1e-300, None))

    def predict(self, X) -> np.ndarray:
        """Most probable class label for each row."""
        check_is_fitted(self)
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, 1)]


class GPCountRegressor(RegressorMixin, _GPBase):
    """GP regression for counts with a log link, trained as SVGP.

    likelihood: ``"poisson"`` (default; an LGCP when the rows are bins) or
    ``"negative_binomial"`` for over-dispersed counts (``Var[y] = mu + mu^2 / r``, the
    dispersion r learned; a learnable constant prior mean starts at the log of the mean
    count).  ``exposure`` is the bin size / time at risk of the Poisson likelihood (the
    negative binomial takes only the default 1: its mean is the count per row).
    ``integer_counts=False`` (Poisson only) accepts non-integer targets.
    ``n_restarts_optimizer``: further starts of the fit, the best kept (see
    :class:`GPRegressor`).  The other parameters are those of :class:`GPClassifier`.
    """

    def __init__(
        self,
        kernel: Any = "rbf",
        likelihood: str = "poisson",
        exposure: float = 1.0,
        integer_counts: bool = True,
        num_inducing: int = 128,
        optimizer: str = "auto",
        max_full_batch: int = 5000,
        epochs: int | None = None,
        max_steps: int | None = None,
        batch_size: int | None = None,
        lr: float = 0.03,
        random_state: int | None = 0,
        n_restarts_optimizer: int = 0,
        dtype: str = "float64",
        device: str | None = None,
        progress: bool = False,
    ) -> None:
        self.kernel = kernel
        self.likelihood = likelihood
        self.exposure = exposure
        self.integer_counts = integer_counts
        self.num_inducing = num_inducing
        self.optimizer = optimizer
        self.max_full_batch = max_full_batch
        self.epochs = epochs
        self.max_steps = max_steps
        self.batch_size = batch_size
        self.lr = lr
        self.random_state = random_state
        self.n_restarts_optimizer = n_restarts_optimizer
        self.dtype = dtype
        self.device = device
        self.progress = progress

    def fit(self, X, y) -> GPCountRegressor:
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True)
        check_positive_float(self.exposure, "exposure")
        kind = check_choice(self.likelihood, "likelihood", ("poisson", "negative_binomial"))
        Xs = self._standardise_fit(X)
        mean_count = float(np.mean(y)) if len(y) else 0.0
        if kind == "poisson":
            lik = L.Poisson(
                exposure=float(self.exposure),
                offset=float(np.log(max(mean_count, 1e-3) / float(self.exposure))),
                integer_counts=self.integer_counts,
            )
            self.model_ = self._fit_svgp_model(lik, Xs, y)
        else:
            if float(self.exposure) != 1.0 or not self.integer_counts:
                raise ValueError(
                    "likelihood='negative_binomial' models integer counts per row: it takes "
                    f"neither exposure={self.exposure!r} nor integer_counts=False (Poisson only)"
                )
            mean = ConstantMean(float(np.log(max(mean_count, 1e-3))))
            self.model_ = self._fit_svgp_model(L.NegativeBinomial(), Xs, y, mean=mean)
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.positive_only = True
        return tags

    def predict(self, X, return_std: bool = False):
        """Predictive mean count (and standard deviation with ``return_std``)."""
        check_is_fitted(self)
        X = self._standardise(self._check_X(X, reset=False))
        mean, var = self.model_.predict_y(X)
        return (mean, np.sqrt(var)) if return_std else mean

    def log_predictive_density(self, X, y) -> np.ndarray:
        """``log p(y_n | x_n, data)`` of each row's count ``(N,)`` (the negative mean is
        the NLPD)."""
        check_is_fitted(self)
        X = self._standardise(self._check_X(X, reset=False))
        return self.model_.log_predictive_density(X, np.asarray(y, dtype=np.float64))


# ------------------------------------------------------------------ estimator files --
_RECORD_KEY = "sklearn_estimator"
_RECORD_FORMAT = "latentgp-sklearn-estimator"
_RECORD_VERSION = 1
#: Fitted attributes kept in an estimator file besides ``model_``.
_FITTED = ("x_mean_", "x_scale_", "n_features_in_", "feature_names_in_", "method_", "classes_",
           "optimizer_")
_ESTIMATORS = {c.__name__: c for c in (GPRegressor, GPClassifier, GPCountRegressor)}


def _array_record(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return {"array": value.tolist(), "dtype": "O" if value.dtype == object else value.dtype.str}
    return value.item() if isinstance(value, np.generic) else value


def _array_value(value: Any) -> Any:
    if isinstance(value, dict) and "array" in value:
        return np.asarray(value["array"], dtype=np.dtype(value["dtype"]))
    return value


def load(path: str | os.PathLike) -> GPRegressor | GPClassifier | GPCountRegressor:
    """The fitted estimator written by ``est.save(path)``, with its parameters, input
    scaling, feature names and class labels; it predicts exactly as the saved one."""
    path = os.fspath(path)
    model, records = read_model_file(path)  # the record verified with the rest, read once
    raw = records.get(_RECORD_KEY)
    if raw is None:
        raise ValueError(
            f"{path} holds a bare latentgp model ({type(model).__name__}), not a scikit-learn "
            "estimator: load it with latentgp.load"
        )
    record = json.loads(raw)
    if record.get("format") != _RECORD_FORMAT or record.get("version") != _RECORD_VERSION:
        raise ValueError(
            f"{path}: estimator record format {record.get('format')!r} version "
            f"{record.get('version')!r} is not readable by this latentgp"
        )
    cls = _ESTIMATORS[record["estimator"]]
    params = dict(record["params"])
    if record["kernel_from_model"]:
        params["kernel"] = copy.deepcopy(model.kernel)  # the fitted kernel, not model_'s own
    est = cls(**params)
    for name, value in record["fitted"].items():
        setattr(est, name, _array_value(value))
    est.model_ = model
    return est
