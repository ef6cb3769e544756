"""Gaussian kernel density estimates over predictive samples (plain numpy).

The seed-003 test NLL scores a predictive distribution known only through samples by a
per-point Gaussian KDE.  This module holds that estimator, below both the models (whose
``nlpd_kde`` uses it) and :mod:`latentgp.metrics` (whose ``nlpd_samples`` validates user
arrays and calls it); it imports nothing from latentgp.
"""

from __future__ import annotations

import numpy as np

from .constants import LOG_2PI

#: The rules :func:`kde_bandwidth` knows.
BANDWIDTH_RULES = ("scott", "silverman", "silverman_robust")


def kde_bandwidth(samples: np.ndarray, rule: str = "scott") -> np.ndarray:
    """Per-point Gaussian-KDE bandwidths ``(N,)`` of finite samples ``(S, N)``, ``S >= 2``.

    ``"scott"``: ``h = sd * S^(-1/5)``; ``"silverman"``: ``h = sd * (3 S / 4)^(-1/5)``
    (the 1-D factors of ``scipy.stats.gaussian_kde``, with ``sd`` the sample standard
    deviation, ``ddof=1``); ``"silverman_robust"``: ``h = 0.9 min(sd, IQR / 1.34) S^(-1/5)``.
    """
    s = np.asarray(samples, dtype=np.float64)
    if s.ndim != 2 or s.shape[0] < 2:
        raise ValueError(f"samples must have shape (S, N) with S >= 2, got {s.shape}")
    n_s = s.shape[0]
    sd = np.std(s, axis=0, ddof=1)
    if rule == "scott":
        return sd * n_s ** (-0.2)
    if rule == "silverman":
        return sd * (0.75 * n_s) ** (-0.2)
    if rule == "silverman_robust":
        q75, q25 = np.percentile(s, [75, 25], axis=0)
        spread = np.minimum(sd, (q75 - q25) / 1.34)
        spread = np.where(spread > 0, spread, sd)
        return 0.9 * spread * n_s ** (-0.2)
    raise ValueError(f"rule must be one of {BANDWIDTH_RULES}, got {rule!r}")


def rule_bandwidth(samples: np.ndarray, rule: str | None) -> np.ndarray:
    """:func:`kde_bandwidth` (``None`` means Scott's rule), refusing a zero bandwidth
    (all samples of a point identical) with a ``ValueError`` naming the point."""
    h = kde_bandwidth(samples, "scott" if rule is None else rule)
    if np.any(h <= 0):
        i = int(np.argmin(h))
        raise ValueError(
            f"the samples of point {i} are all identical, so the rule-based bandwidth "
            f"is 0; pass an explicit positive bandwidth"
        )
    return h


def kde_log_density(y: np.ndarray, samples: np.ndarray, h: np.ndarray) -> np.ndarray:
    """``log p(y_n) = log (1/S) sum_s N(y_n | samples_sn, h_n^2)``, ``(N,)``.

    y ``(N,)``, samples ``(S, N)``, h ``(N,)`` positive.
    """
    z = (y[None, :] - samples) / h[None, :]
    log_k = -0.5 * z**2 - 0.5 * LOG_2PI - np.log(h)[None, :]
    m = np.max(log_k, axis=0)
    return m + np.log(np.mean(np.exp(log_k - m[None, :]), axis=0))
