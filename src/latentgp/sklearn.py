"""scikit-learn estimators: GP regression, classification and count regression.

They follow scikit-learn's conventions (``fit`` / ``predict`` / ``predict_proba`` /
``score``, parameters in ``__init__`` only, fitted attributes ending in ``_``) and work in
``Pipeline``, ``GridSearchCV`` and ``cross_val_score``.  Inputs are standardised inside
the estimator.  Each picks a method by default: the exact GP for small Gaussian
regression problems, the collapsed sparse GP (VFE) for larger ones, SVGP otherwise.  Without
``epochs``/``max_steps`` every fit trains until converged (the rule of
:mod:`latentgp.training.convergence`).

    from latentgp.sklearn import GPRegressor
    mean, std = GPRegressor().fit(X, y).predict(X_test, return_std=True)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.preprocessing import LabelEncoder
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from . import likelihoods as L
from .data.standardize import Standardizer
from .models import SVGP, ExactGP, SparseGP
from .validation import check_positive_float, check_positive_int

__all__ = ["GPRegressor", "GPClassifier", "GPCountRegressor"]


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

    def _make_svgp(self, likelihood, n: int) -> SVGP:
        check_positive_int(self.num_inducing, "num_inducing")
        return SVGP(
            num_inducing=max(1, min(int(self.num_inducing), n)),
            likelihood=likelihood,
            kernel=self.kernel,
            device=self.device,
            dtype=self._dtype(),
        )

    def _fit_svgp(self, model: SVGP, X: np.ndarray, y: np.ndarray) -> None:
        n = X.shape[0]
        batch = min(int(self.batch_size), n)
        model.fit(  # no epochs/max_steps: until converged
            X,
            y,
            batch_size=batch,
            epochs=self.epochs,
            max_steps=self.max_steps,
            lr=self.lr,
            seed=self.random_state,
            progress=self.progress,
        )

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
    method: ``"auto"`` (with a Gaussian likelihood the exact GP for ``n <= max_exact`` and
        the collapsed sparse GP ``"vfe"`` above, which fits better than SVGP there:
        docs/results/defaults.md; SVGP for other likelihoods), ``"exact"``, ``"vfe"`` or
        ``"svgp"``.
    kernel: kernel name or :class:`latentgp.kernels.Kernel`.
    likelihood: ``"gaussian"``, ``"studentt"`` or ``"laplace"`` (the last two need SVGP).
    num_inducing: M for VFE and SVGP.  max_exact: largest n fitted exactly by ``"auto"``.
    epochs, max_steps: a training budget (default None: until converged; for SVGP, or the
        L-BFGS steps of the exact GP and VFE).  batch_size, lr: SVGP's Adam settings.
    random_state: seed.  dtype: ``"float64"`` or ``"float32"``.  device: torch device.
    """

    def __init__(
        self,
        method: str = "auto",
        kernel: Any = "rbf",
        likelihood: str = "gaussian",
        num_inducing: int = 256,
        max_exact: int = 2000,
        epochs: int | None = None,
        max_steps: int | None = None,
        batch_size: int = 1024,
        lr: float = 0.01,
        random_state: int | None = 0,
        dtype: str = "float64",
        device: str | None = None,
        progress: bool = False,
    ) -> None:
        self.method = method
        self.kernel = kernel
        self.likelihood = likelihood
        self.num_inducing = num_inducing
        self.max_exact = max_exact
        self.epochs = epochs
        self.max_steps = max_steps
        self.batch_size = batch_size
        self.lr = lr
        self.random_state = random_state
        self.dtype = dtype
        self.device = device
        self.progress = progress

    def fit(self, X, y) -> GPRegressor:
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True, multi_output=False)
        Xs = self._standardise_fit(X)
        n = X.shape[0]
        method = self.method
        if method not in ("auto", "exact", "vfe", "svgp"):
            raise ValueError(
                f"method must be 'auto', 'exact', 'vfe' or 'svgp', got {method!r}"
            )
        lik = L.likelihood_from_name(self.likelihood)
        if method == "auto":
            gaussian = isinstance(lik, L.Gaussian)
            method = ("exact" if n <= self.max_exact else "vfe") if gaussian else "svgp"
        if n < 2:
            raise ValueError(f"GPRegressor needs at least 2 samples, got n_samples = {n}")
        if method in ("exact", "vfe"):
            common = {"kernel": self.kernel, "likelihood": lik, "device": self.device,
                      "dtype": self._dtype()}
            if method == "exact":
                model = ExactGP(**common)
            else:
                check_positive_int(self.num_inducing, "num_inducing")
                model = SparseGP(method="vfe", num_inducing=min(int(self.num_inducing), n),
                                 **common)
            model.fit(Xs, y, epochs=self.epochs, max_steps=self.max_steps,
                      seed=self.random_state, progress=self.progress)
        else:
            model = self._make_svgp(lik, n)
            self._fit_svgp(model, Xs, y)
        self.model_ = model
        self.method_ = method
        return self

    def predict(self, X, return_std: bool = False, return_cov: bool = False):
        """Predictive mean of y; with ``return_std`` also its standard deviation (noise
        included, like scikit-learn's GaussianProcessRegressor); with ``return_cov`` the
        joint covariance of the latent function."""
        check_is_fitted(self)
        X = self._standardise(self._check_X(X, reset=False))
        mean, var = self.model_.predict_y(X)
        if return_cov:
            _, cov = self.model_.predict_f_full_cov(X)
            return mean, cov[0]
        if return_std:
            return mean, np.sqrt(var)
        return mean

    def sample_y(self, X, n_samples: int = 1, random_state: int | None = 0) -> np.ndarray:
        """Joint posterior samples of the latent function, ``(n, n_samples)``."""
        check_is_fitted(self)
        X = self._standardise(self._check_X(X, reset=False))
        return self.model_.sample_f(X, n_samples, seed=random_state).T


class GPClassifier(ClassifierMixin, _GPBase):
    """Gaussian-process classification (binary or multi-class, any label type).

    Binary problems use a Bernoulli likelihood (``link="logit"`` or ``"probit"``), multi-
    class ones a softmax over one latent function per class; both are trained as SVGP.
    """

    def __init__(
        self,
        kernel: Any = "rbf",
        link: str = "logit",
        num_inducing: int = 128,
        epochs: int | None = None,
        max_steps: int | None = None,
        batch_size: int = 1024,
        lr: float = 0.03,
        random_state: int | None = 0,
        dtype: str = "float64",
        device: str | None = None,
        progress: bool = False,
    ) -> None:
        self.kernel = kernel
        self.link = link
        self.num_inducing = num_inducing
        self.epochs = epochs
        self.max_steps = max_steps
        self.batch_size = batch_size
        self.lr = lr
        self.random_state = random_state
        self.dtype = dtype
        self.device = device
        self.progress = progress

    def fit(self, X, y) -> GPClassifier:
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        self._encoder = LabelEncoder().fit(y)
        self.classes_ = self._encoder.classes_
        codes = self._encoder.transform(y).astype(np.float64)
        C = len(self.classes_)
        if C < 2:
            raise ValueError(
                "GPClassifier needs samples of at least 2 classes; got only one class, "
                f"{self.classes_[0]!r}"
            )
        Xs = self._standardise_fit(X)
        lik = L.Bernoulli(self.link) if C == 2 else L.Softmax(C)
        model = self._make_svgp(lik, X.shape[0])
        self._fit_svgp(model, Xs, codes)
        self.model_ = model
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
    """GP regression for counts: Poisson likelihood with a log link (an LGCP when the rows
    are bins), trained as SVGP.  ``exposure`` is the bin size / time at risk."""

    def __init__(
        self,
        kernel: Any = "rbf",
        exposure: float = 1.0,
        integer_counts: bool = True,
        num_inducing: int = 128,
        epochs: int | None = None,
        max_steps: int | None = None,
        batch_size: int = 1024,
        lr: float = 0.03,
        random_state: int | None = 0,
        dtype: str = "float64",
        device: str | None = None,
        progress: bool = False,
    ) -> None:
        self.kernel = kernel
        self.exposure = exposure
        self.integer_counts = integer_counts
        self.num_inducing = num_inducing
        self.epochs = epochs
        self.max_steps = max_steps
        self.batch_size = batch_size
        self.lr = lr
        self.random_state = random_state
        self.dtype = dtype
        self.device = device
        self.progress = progress

    def fit(self, X, y) -> GPCountRegressor:
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True)
        check_positive_float(self.exposure, "exposure")
        Xs = self._standardise_fit(X)
        mean_count = float(np.mean(y)) if len(y) else 0.0
        lik = L.Poisson(
            exposure=float(self.exposure),
            offset=float(np.log(max(mean_count, 1e-3) / float(self.exposure))),
            integer_counts=self.integer_counts,
        )
        model = self._make_svgp(lik, X.shape[0])
        self._fit_svgp(model, Xs, y)
        self.model_ = model
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
