"""Evaluation metrics for predictive distributions (numpy in, Python floats out).

Every function accepts numpy arrays, lists or torch tensors (converted with
``detach().cpu().numpy()``), computes in float64, validates shapes (a ``ValueError``
names the arguments and their shapes) and rejects NaN/inf inputs and negative variances.
Pairs like ``y`` of shape ``(N,)`` and ``mean`` of shape ``(N, 1)`` are accepted (the
trailing singleton axis is dropped) rather than silently broadcast to ``(N, N)``.

Regression: :func:`rmse`, :func:`mae`, :func:`smse`, :func:`nlpd_gaussian`, :func:`nlpd`,
:func:`nlpd_mixture`, :func:`nlpd_samples`, :func:`crps_gaussian`, :func:`coverage`.
Classification: :func:`error_rate`, :func:`nlp_classes`.

All "NLPD" values are means over points of negative log predictive densities, in the
units of ``y`` (pass original-scale predictions to compare with published tables).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

from .constants import LOG_2PI
from .kde import kde_bandwidth, kde_log_density, rule_bandwidth

__all__ = [
    "rmse",
    "mae",
    "smse",
    "nlpd_gaussian",
    "nlpd",
    "nlpd_mixture",
    "nlpd_samples",
    "error_rate",
    "nlp_classes",
    "crps_gaussian",
    "coverage",
    "kde_bandwidth",
]



# ============================================================================ helpers
def _arr(a: Any, name: str) -> np.ndarray:
    """Convert to a finite float64 array or raise ``ValueError`` naming ``name``."""
    if hasattr(a, "detach") and hasattr(a, "cpu"):  # torch.Tensor without importing torch
        a = a.detach().cpu().numpy()
    try:
        arr = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be numeric: {err}") from None
    if arr.size and not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0] if arr.ndim else ()
        raise ValueError(
            f"{name} contains NaN or inf (first at index {tuple(int(i) for i in bad)})"
        )
    return arr


def _drop_trailing_one(a: np.ndarray) -> np.ndarray:
    return a[..., 0] if a.ndim >= 2 and a.shape[-1] == 1 else a


def _match(ref: np.ndarray, ref_name: str, a: np.ndarray, name: str) -> np.ndarray:
    """Return ``a`` with the shape of ``ref`` (allowing a trailing singleton axis)."""
    if a.shape == ref.shape:
        return a
    a2 = _drop_trailing_one(a)
    if a2.shape == _drop_trailing_one(ref).shape and a2.size == ref.size:
        return a2.reshape(ref.shape)
    raise ValueError(
        f"{name} has shape {a.shape} but {ref_name} has shape {ref.shape}; they must match"
    )


def _targets(y: Any, name: str = "y") -> np.ndarray:
    y = _arr(y, name)
    if y.ndim == 0:
        y = y.reshape(1)
    if y.size == 0:
        raise ValueError(f"{name} is empty")
    return y


def _var(
    v: Any, y: np.ndarray, name: str = "var", strict: bool = False, ref_name: str = "y"
) -> np.ndarray:
    """Variances broadcast to ``y``'s shape: a scalar, or an array shaped like ``y``."""
    v = _arr(v, name)
    if v.ndim == 0:
        v = np.full(y.shape, float(v))
    else:
        v = _match(y, ref_name, v, name)
    if strict and np.any(v <= 0):
        i = tuple(int(k) for k in np.argwhere(v <= 0)[0])
        raise ValueError(f"{name} must be strictly positive; found {v[i]} at index {i}")
    if np.any(v < 0):
        i = tuple(int(k) for k in np.argwhere(v < 0)[0])
        raise ValueError(f"{name} must be non-negative; found {v[i]} at index {i}")
    return v


def _logsumexp(a: np.ndarray, axis: int) -> np.ndarray:
    m = np.max(a, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    return np.squeeze(m, axis=axis) + np.log(np.sum(np.exp(a - m), axis=axis))


def _norm_cdf(z: np.ndarray) -> np.ndarray:
    """Standard normal CDF (scipy if installed, else torch, both float64)."""
    try:
        from scipy.special import ndtr
    except ImportError:
        import torch

        return torch.special.ndtr(torch.as_tensor(z, dtype=torch.float64)).numpy()
    return ndtr(z)


# ========================================================================= regression
def rmse(y: Any, mean: Any) -> float:
    """Root mean squared error ``sqrt(mean((y - mean)^2))``.

    Parameters
    ----------
    y : array_like
        Targets, shape ``(N,)`` (or ``(N, P)``; the mean is then over all entries).
    mean : array_like
        Predictions, same shape as ``y``.

    Returns
    -------
    float
    """
    y = _targets(y)
    m = _match(y, "y", _arr(mean, "mean"), "mean")
    return float(np.sqrt(np.mean((y - m) ** 2)))


def mae(y: Any, mean: Any) -> float:
    """Mean absolute error ``mean(|y - mean|)``; shapes as in :func:`rmse`."""
    y = _targets(y)
    m = _match(y, "y", _arr(mean, "mean"), "mean")
    return float(np.mean(np.abs(y - m)))


def smse(y: Any, mean: Any, y_train: Any = None) -> float:
    """Standardised mean squared error: MSE divided by the variance of the targets.

    The reference variance is the population variance (``ddof=0``) of the **training**
    targets when ``y_train`` is an array, so that predicting the training mean scores
    about 1 (Rasmussen & Williams 2006, sec. 2.5). ``y_train`` may instead be that
    variance as a scalar; ``None`` uses the variance of the test targets ``y``.

    Parameters
    ----------
    y : array_like
        Test targets ``(N,)`` or ``(N, P)``.
    mean : array_like
        Predictions, same shape as ``y``.
    y_train : array_like or float, optional
        Training targets ``(N_train,)`` / ``(N_train, P)``, or the reference variance
        (scalar, or ``(P,)`` per output).

    Returns
    -------
    float
        For ``P`` outputs the per-output SMSEs are averaged.
    """
    y = _targets(y)
    m = _match(y, "y", _arr(mean, "mean"), "mean")
    n_out = 1 if y.ndim == 1 else y.shape[-1]
    if y_train is None:
        ref = np.var(y, axis=0)
    else:
        t = _arr(y_train, "y_train")
        if t.ndim == 0 or (y.ndim == 2 and t.ndim == 1 and t.shape[0] == n_out and n_out > 1):
            ref = t  # given variance(s)
            if np.any(ref <= 0):
                raise ValueError(f"the reference variance y_train must be > 0, got {ref}")
        else:
            if y.ndim == 2 and (t.ndim != 2 or t.shape[1] != n_out):
                raise ValueError(
                    f"y_train has shape {t.shape} but y has {n_out} outputs (shape {y.shape})"
                )
            if y.ndim == 1 and t.ndim != 1:
                t = _drop_trailing_one(t)
                if t.ndim != 1:
                    raise ValueError(f"y_train must be 1-D like y, got shape {t.shape}")
            if t.shape[0] < 2:
                raise ValueError("y_train needs at least 2 values to compute a variance")
            ref = np.var(t, axis=0)
    ref = np.asarray(ref, dtype=np.float64)
    if np.any(ref <= 0):
        raise ValueError("the reference variance is zero (constant targets); SMSE is undefined")
    mse = np.mean((y - m) ** 2, axis=0)
    return float(np.mean(mse / ref))


def nlpd_gaussian(y: Any, mean: Any, var: Any) -> float:
    """Mean negative log density of ``y`` under independent Gaussians ``N(mean, var)``.

    ``mean_n [ 0.5 log(2 pi var_n) + 0.5 (y_n - mean_n)^2 / var_n ]``. ``var`` is the
    variance of the predictive distribution of ``y`` (include the noise variance).

    Parameters
    ----------
    y : array_like
        Targets ``(N,)`` or ``(N, P)``.
    mean : array_like
        Predictive means, shape of ``y``.
    var : array_like or float
        Predictive variances, shape of ``y`` or a scalar; strictly positive.

    Returns
    -------
    float
    """
    y = _targets(y)
    m = _match(y, "y", _arr(mean, "mean"), "mean")
    v = _var(var, y, strict=True)
    return float(np.mean(0.5 * (LOG_2PI + np.log(v)) + 0.5 * (y - m) ** 2 / v))


def nlpd(log_density: Any) -> float:
    """Negative mean of given per-point log predictive densities.

    Parameters
    ----------
    log_density : array_like
        ``log p(y_n | data)``, shape ``(N,)``; must be finite.

    Returns
    -------
    float
        ``-mean(log_density)``.
    """
    ld = _targets(log_density, "log_density")
    return float(-np.mean(ld))


def nlpd_mixture(y: Any, means: Any, vars: Any, weights: Any) -> float:
    """Mean negative log density under per-point Gaussian mixtures.

    ``p(y_n) = sum_k w_nk N(y_n | means_nk, vars_nk)``.

    Parameters
    ----------
    y : array_like
        Targets, shape ``(N,)``.
    means : array_like
        Component means ``(N, K)``.
    vars : array_like
        Component variances ``(N, K)`` (or a scalar), strictly positive.
    weights : array_like
        Mixture weights ``(N, K)`` or ``(K,)`` shared by all points; non-negative and
        summing to 1 (tolerance 1e-6) for every point.

    Returns
    -------
    float
    """
    y = _targets(y)
    if y.ndim != 1:
        y = _drop_trailing_one(y)
        if y.ndim != 1:
            raise ValueError(f"y must be 1-D (N,), got shape {y.shape}")
    mu = _arr(means, "means")
    if mu.ndim != 2 or mu.shape[0] != y.shape[0]:
        raise ValueError(f"means must have shape (N, K) = ({y.shape[0]}, K), got {mu.shape}")
    v = _var(vars, mu, "vars", strict=True, ref_name="means")
    w = _arr(weights, "weights")
    if w.ndim == 1:
        if w.shape[0] != mu.shape[1]:
            raise ValueError(f"weights has shape {w.shape} but means has K={mu.shape[1]}")
        w = np.broadcast_to(w, mu.shape)
    elif w.shape != mu.shape:
        raise ValueError(f"weights has shape {w.shape} but means has shape {mu.shape}")
    if np.any(w < 0):
        raise ValueError("weights must be non-negative")
    sums = w.sum(axis=1)
    if not np.allclose(sums, 1.0, rtol=0.0, atol=1e-6):
        i = int(np.argmax(np.abs(sums - 1.0)))
        raise ValueError(f"weights must sum to 1 over components; row {i} sums to {sums[i]}")
    with np.errstate(divide="ignore"):
        log_w = np.log(w)
    comp = log_w - 0.5 * (LOG_2PI + np.log(v)) - 0.5 * (y[:, None] - mu) ** 2 / v
    return float(-np.mean(_logsumexp(comp, axis=1)))


def nlpd_samples(y: Any, samples: Any, bandwidth: float | np.ndarray | str | None = None) -> float:
    """Mean negative log density of ``y`` under a Gaussian KDE of predictive samples.

    For each point ``p(y_n) = (1/S) sum_s N(y_n | samples_sn, h_n^2)``. The seed-003
    protocol uses 200 samples per test point.

    Parameters
    ----------
    y : array_like
        Targets, shape ``(N,)``.
    samples : array_like
        Predictive samples of ``y`` (including noise), shape ``(S, N)``.
    bandwidth : float, array_like, str or None
        ``None`` or ``"scott"``: Scott's rule per point, as :func:`kde_bandwidth`
        (equal to ``scipy.stats.gaussian_kde``'s default); ``"silverman"`` or
        ``"silverman_robust"``: see :func:`kde_bandwidth`; a positive float or a ``(N,)``
        array: fixed bandwidths.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        Bad shapes, non-finite values, or a zero rule-based bandwidth (all samples of a
        point identical; pass an explicit ``bandwidth``).
    """
    y = _targets(y)
    if y.ndim != 1:
        y = _drop_trailing_one(y)
        if y.ndim != 1:
            raise ValueError(f"y must be 1-D (N,), got shape {y.shape}")
    s = _arr(samples, "samples")
    if s.ndim != 2 or s.shape[1] != y.shape[0]:
        raise ValueError(
            f"samples must have shape (S, N) = (S, {y.shape[0]}) like y {y.shape}, got {s.shape}"
        )
    if bandwidth is None or isinstance(bandwidth, str):
        h = rule_bandwidth(s, bandwidth)
    else:
        h = _arr(bandwidth, "bandwidth")
        h = np.full(y.shape, float(h)) if h.ndim == 0 else _match(y, "y", h, "bandwidth")
        if np.any(h <= 0):
            raise ValueError("bandwidth must be strictly positive")
    return float(-np.mean(kde_log_density(y, s, h)))


def crps_gaussian(y: Any, mean: Any, var: Any) -> float:
    """Mean continuous ranked probability score of Gaussian predictions (lower is better).

    Closed form (Gneiting & Raftery 2007) with ``s = sqrt(var)``, ``z = (y - mean) / s``:
    ``CRPS = s [ z (2 Phi(z) - 1) + 2 phi(z) - 1 / sqrt(pi) ]``; for ``var = 0`` it is
    ``|y - mean|``.

    Parameters
    ----------
    y : array_like
        Targets ``(N,)`` or ``(N, P)``.
    mean : array_like
        Predictive means, shape of ``y``.
    var : array_like or float
        Predictive variances (non-negative), shape of ``y`` or a scalar.

    Returns
    -------
    float
    """
    y = _targets(y)
    m = _match(y, "y", _arr(mean, "mean"), "mean")
    v = _var(var, y)
    sd = np.sqrt(v)
    pos = sd > 0
    out = np.abs(y - m)
    if np.any(pos):
        z = (y[pos] - m[pos]) / sd[pos]
        pdf = np.exp(-0.5 * z**2) / math.sqrt(2.0 * math.pi)
        cdf = _norm_cdf(z)
        out[pos] = sd[pos] * (z * (2.0 * cdf - 1.0) + 2.0 * pdf - 1.0 / math.sqrt(math.pi))
    return float(np.mean(out))


def coverage(
    y: Any, mean: Any, var: Any, level: float | Sequence[float] = 0.95
) -> float | dict[float, float]:
    """Fraction of targets inside the central Gaussian predictive interval.

    A point is covered when ``|y - mean| <= z * sqrt(var)`` with
    ``z = Phi^-1((1 + level) / 2)``; a calibrated model scores about ``level``.

    Parameters
    ----------
    y : array_like
        Targets ``(N,)`` or ``(N, P)``.
    mean : array_like
        Predictive means, shape of ``y``.
    var : array_like or float
        Predictive variances of ``y`` (non-negative), shape of ``y`` or a scalar.
    level : float or sequence of float
        Interval probability (or several) in ``(0, 1)``.

    Returns
    -------
    float or dict
        The covered fraction; a ``{level: fraction}`` dict when ``level`` is a sequence.
    """
    y = _targets(y)
    m = _match(y, "y", _arr(mean, "mean"), "mean")
    sd = np.sqrt(_var(var, y))
    levels = [level] if np.ndim(level) == 0 else list(level)  # type: ignore[arg-type]
    out: dict[float, float] = {}
    for lv in levels:
        lv = float(lv)
        if not 0.0 < lv < 1.0:
            raise ValueError(f"level must be in (0, 1), got {lv}")
        z = NormalDist().inv_cdf(0.5 * (1.0 + lv))
        out[lv] = float(np.mean(np.abs(y - m) <= z * sd))
    return out[float(level)] if np.ndim(level) == 0 else out  # type: ignore[arg-type]


# ====================================================================== classification
def _labels(y: Any) -> np.ndarray:
    y = _targets(y)
    y = _drop_trailing_one(y)
    if y.ndim != 1:
        raise ValueError(f"y must be 1-D class labels (N,), got shape {y.shape}")
    if np.any(y != np.round(y)) or np.any(y < 0):
        raise ValueError(
            "y must hold integer class labels 0..C-1 (map {-1, +1} labels to {0, 1} first)"
        )
    return y.astype(np.int64)


def error_rate(y: Any, probs_or_labels: Any) -> float:
    """Fraction of misclassified points.

    Parameters
    ----------
    y : array_like
        True labels ``0..C-1``, shape ``(N,)``.
    probs_or_labels : array_like
        One of: binary probabilities ``P(y = 1)`` of shape ``(N,)`` with values in
        ``[0, 1]`` (predict 1 when ``p > 0.5``; 0/1 labels give the same result);
        class probabilities or scores ``(N, C)`` (predict the argmax); or integer labels
        ``(N,)`` with values beyond 1 for multi-class problems.

    Returns
    -------
    float
    """
    y = _labels(y)
    p = _arr(probs_or_labels, "probs_or_labels")
    if p.ndim == 2 and p.shape[1] == 1:
        p = p[:, 0]
    if p.ndim == 2:
        if p.shape[0] != y.shape[0]:
            raise ValueError(
                f"probs_or_labels has shape {p.shape} but y has shape {y.shape}; the "
                f"first dimensions must match"
            )
        if np.any(y >= p.shape[1]):
            raise ValueError(f"y has labels >= C = {p.shape[1]} (columns of probs_or_labels)")
        pred = np.argmax(p, axis=1)
    elif p.ndim == 1:
        p = _match(y, "y", p, "probs_or_labels")
        if np.all((p >= 0) & (p <= 1)):
            pred = (p > 0.5).astype(np.int64)
        elif np.all(p == np.round(p)) and np.all(p >= 0):
            pred = p.astype(np.int64)
        else:
            raise ValueError(
                "1-D probs_or_labels must be probabilities in [0, 1] or integer labels >= 0"
            )
    else:
        raise ValueError(f"probs_or_labels must be (N,) or (N, C), got shape {p.shape}")
    return float(np.mean(pred != y))


def nlp_classes(y: Any, probs: Any, eps: float = 1e-12) -> float:
    """Negative mean log probability of the true class.

    Parameters
    ----------
    y : array_like
        True labels ``0..C-1``, shape ``(N,)``.
    probs : array_like
        ``P(y = 1)`` of shape ``(N,)`` for binary problems, or class probabilities
        ``(N, C)`` whose rows sum to 1 (tolerance 1e-5).
    eps : float
        Probabilities are clipped to ``[eps, 1]`` before the log, so a confident mistake
        costs at most ``-log(eps)`` (about 27.6) instead of infinity.

    Returns
    -------
    float
    """
    y = _labels(y)
    p = _arr(probs, "probs")
    if np.any(p < 0) or np.any(p > 1):
        raise ValueError("probs must lie in [0, 1]")
    if p.ndim == 2 and p.shape[1] == 1:
        p = p[:, 0]
    if p.ndim == 1:
        p = _match(y, "y", p, "probs")
        if np.any(y > 1):
            raise ValueError("1-D probs are P(y=1) for binary labels, but y has labels > 1")
        p_true = np.where(y == 1, p, 1.0 - p)
    elif p.ndim == 2:
        if p.shape[0] != y.shape[0]:
            raise ValueError(f"probs has shape {p.shape} but y has shape {y.shape}")
        if np.any(y >= p.shape[1]):
            raise ValueError(f"y has labels >= C = {p.shape[1]} (columns of probs)")
        sums = p.sum(axis=1)
        if not np.allclose(sums, 1.0, rtol=0.0, atol=1e-5):
            i = int(np.argmax(np.abs(sums - 1.0)))
            raise ValueError(f"rows of probs must sum to 1; row {i} sums to {sums[i]}")
        p_true = p[np.arange(y.shape[0]), y]
    else:
        raise ValueError(f"probs must be (N,) or (N, C), got shape {p.shape}")
    return float(-np.mean(np.log(np.clip(p_true, eps, 1.0))))
