"""Z-scoring of inputs and targets with training statistics, and how to undo it.

A model trained on standardised targets ``z = (y - mean) / scale`` predicts in ``z`` units.
To report metrics in the original units:

* means: ``y_std.inverse_transform(mean_z)``;
* variances: ``y_std.inverse_transform_variance(var_z)`` (``var_z * scale**2``);
* log densities: ``log p(y) = log p(z) + y_std.log_density_offset()``
  (the Jacobian term ``-log(scale)``, summed over outputs for a joint density).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from latentgp.columns import CONSTANT_RTOL, column_varies
from latentgp.data.registry import Dataset

# column_varies and CONSTANT_RTOL live in latentgp.columns (the models use them too and
# never import latentgp.data); re-exported here for the import path they had.
__all__ = ["Standardizer", "standardize", "column_varies", "CONSTANT_RTOL"]


class Standardizer:
    """Per-column z-scoring: ``transform(X) = (X - mean_) / scale_``.

    ``scale_`` is the population standard deviation (``ddof=0``) of the fitted data;
    columns with zero spread get ``scale_ = 1`` so that they map to 0 instead of NaN.

    Attributes
    ----------
    mean_ : np.ndarray
        Column means, shape ``(D,)`` (a 0-d array when fitted on 1-D data).
    scale_ : np.ndarray
        Column scales, same shape as ``mean_``; all strictly positive.

    Examples
    --------
    >>> import numpy as np
    >>> s = Standardizer().fit(np.array([[1.0, 5.0], [3.0, 5.0]]))
    >>> s.mean_, s.scale_
    (array([2., 5.]), array([1., 1.]))
    >>> s.transform(np.array([[4.0, 6.0]]))
    array([[2., 1.]])
    """

    def __init__(self) -> None:
        self.mean_: np.ndarray | None = None
        self.scale_: np.ndarray | None = None
        self._ndim: int | None = None

    # ------------------------------------------------------------------ fitting
    def fit(self, X: np.ndarray) -> Standardizer:
        """Compute the column means and scales.

        Parameters
        ----------
        X : np.ndarray
            Data of shape ``(N,)`` or ``(N, D)``, finite, ``N >= 1``.

        Returns
        -------
        Standardizer
            ``self``.
        """
        X = self._as_array(X, "X")
        if X.ndim not in (1, 2):
            raise ValueError(f"X must be 1-D or 2-D, got shape {X.shape}")
        if X.shape[0] == 0:
            raise ValueError("cannot fit a Standardizer on zero rows")
        self._ndim = X.ndim
        self.mean_ = np.asarray(X.mean(axis=0))
        scale = np.asarray(X.std(axis=0))
        # constant columns (read from their range) are left unscaled
        varies = column_varies(X.min(axis=0), X.max(axis=0)) & (scale > 0)
        self.scale_ = np.where(varies, scale, 1.0)
        return self

    def fit_transform(self, X: np.ndarray) -> np.ndarray:
        """``fit(X)`` then ``transform(X)``; output has the shape of ``X``."""
        return self.fit(X).transform(X)

    # --------------------------------------------------------------- transforms
    def transform(self, X: np.ndarray) -> np.ndarray:
        """Standardise ``X``: ``(X - mean_) / scale_``.

        Parameters
        ----------
        X : np.ndarray
            Shape ``(M,)`` or ``(M, D)`` matching the fitted data (``M`` may be 0).

        Returns
        -------
        np.ndarray
            float64 array of the same shape.
        """
        X = self._check(X, "X")
        return (X - self.mean_) / self.scale_

    def inverse_transform(self, Z: np.ndarray) -> np.ndarray:
        """Map standardised values back: ``Z * scale_ + mean_``; same shape as ``Z``."""
        Z = self._check(Z, "Z")
        return Z * self.scale_ + self.mean_

    def inverse_transform_variance(self, var: np.ndarray) -> np.ndarray:
        """Map variances of standardised values back: ``var * scale_**2``.

        Parameters
        ----------
        var : np.ndarray
            Variances in standardised units, shape ``(M,)`` or ``(M, D)`` like the data.

        Returns
        -------
        np.ndarray
            Variances in original units, same shape.
        """
        var = self._check(var, "var")
        if np.any(var < 0):
            raise ValueError("var must be non-negative")
        return var * self.scale_**2

    def inverse_transform_std(self, std: np.ndarray) -> np.ndarray:
        """Map standard deviations back: ``std * scale_``; same shape as ``std``."""
        std = self._check(std, "std")
        return std * self.scale_

    def log_density_offset(self) -> float | np.ndarray:
        """Term to add to a log density of standardised values: ``-log(scale_)``.

        ``log p(y) = log p(z) - log(scale)`` for ``z = (y - mean) / scale``.

        Returns
        -------
        float or np.ndarray
            A float when fitted on 1-D data; otherwise the per-column offsets ``(D,)``
            (sum them for the joint density of a row).
        """
        self._require_fit()
        off = -np.log(self.scale_)
        return float(off) if np.ndim(off) == 0 else off

    # ----------------------------------------------------------------- internals
    @staticmethod
    def _as_array(X: np.ndarray, name: str) -> np.ndarray:
        if hasattr(X, "detach"):
            X = X.detach().cpu().numpy()
        X = np.asarray(X, dtype=np.float64)
        if not np.all(np.isfinite(X)):
            raise ValueError(f"{name} holds NaN or inf values")
        return X

    def _require_fit(self) -> None:
        if self.mean_ is None or self.scale_ is None:
            raise RuntimeError("this Standardizer is not fitted yet; call fit(X) first")

    def _check(self, X: np.ndarray, name: str) -> np.ndarray:
        self._require_fit()
        X = self._as_array(X, name)
        if self._ndim == 2:
            if X.ndim != 2 or X.shape[1] != self.mean_.shape[0]:
                raise ValueError(
                    f"{name} must have shape (M, {self.mean_.shape[0]}) like the fitted "
                    f"data, got {X.shape}"
                )
        elif X.ndim not in (0, 1):
            raise ValueError(f"{name} must be 1-D like the fitted data, got shape {X.shape}")
        return X

    def __repr__(self) -> str:
        if self.mean_ is None:
            return "Standardizer(unfitted)"
        return f"Standardizer(mean_={self.mean_!r}, scale_={self.scale_!r})"


def standardize(dataset: Dataset) -> tuple[Dataset, Standardizer, Standardizer | None]:
    """Z-score a dataset with its training statistics.

    Inputs are always standardised. Targets are standardised for the continuous tasks
    ``"regression"`` and ``"multioutput"`` (per output); class labels and counts are left
    untouched.

    Parameters
    ----------
    dataset : Dataset
        The dataset; it is not modified.

    Returns
    -------
    Dataset
        A copy with standardised ``X_train``/``X_test`` (and ``y_train``/``y_test`` for
        continuous targets); ``description`` notes the standardisation.
    x_std : Standardizer
        Fitted on ``X_train`` (shape ``(N, D)``).
    y_std : Standardizer or None
        Fitted on ``y_train`` for continuous tasks, else ``None``.
    """
    x_std = Standardizer().fit(dataset.X_train)
    changes: dict = {
        "X_train": x_std.transform(dataset.X_train),
        "X_test": x_std.transform(dataset.X_test),
    }
    y_std: Standardizer | None = None
    if dataset.task in ("regression", "multioutput"):
        y_std = Standardizer().fit(dataset.y_train)
        changes["y_train"] = y_std.transform(dataset.y_train)
        changes["y_test"] = y_std.transform(dataset.y_test)
        note = "inputs and targets z-scored with training statistics"
    else:
        note = "inputs z-scored with training statistics"
    changes["description"] = f"{dataset.description} [{note}]"
    return dataclasses.replace(dataset, **changes), x_std, y_std
