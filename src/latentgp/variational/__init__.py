"""Variational families over inducing values, their KL terms and conditionals."""

from .conditionals import conditional_marginals
from .gaussian import GaussianVariational, gaussian_kl

__all__ = ["GaussianVariational", "gaussian_kl", "conditional_marginals"]
