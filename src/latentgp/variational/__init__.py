"""Variational families over inducing values, their KL terms and the one conditional.

- :mod:`.gaussian`, :mod:`.mixture`: posterior families over inducing values.
- :mod:`.strategy`: the conditional q(u) -> q(f) and its prediction cache (every
  inducing-point model goes through it).
- :mod:`.fastpaths`: the hand-written autograd paths the strategy chooses between.
"""

from .gaussian import GaussianVariational, gaussian_kl
from .strategy import (
    InducingQ,
    PredictiveCache,
    cached_conditional,
    cached_marginals,
    conditional_covariance,
    conditional_marginals,
    gaussian_marginals,
    gaussian_predictive_cache,
    inducing_deviation,
    predictive_cache,
)

__all__ = [
    "GaussianVariational",
    "InducingQ",
    "PredictiveCache",
    "cached_conditional",
    "cached_marginals",
    "conditional_covariance",
    "conditional_marginals",
    "gaussian_kl",
    "gaussian_marginals",
    "gaussian_predictive_cache",
    "inducing_deviation",
    "predictive_cache",
]
