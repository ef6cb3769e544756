"""Covariance functions.  ``kernel(X, Z)`` is ``(*batch, N, M)``; ``kernel.diag(X)`` is
``(*batch, N)``."""

from . import expectations, nystrom
from .base import (
    Active,
    Kernel,
    Product,
    Scale,
    Sum,
    exp_floor,
    floored_exp,
    kernel_from_config,
    kernel_from_name,
)
from .linear import Linear, Polynomial
from .periodic import Periodic
from .spectral import Cosine, SpectralMixture
from .stationary import (
    RBF,
    Matern12,
    Matern32,
    Matern52,
    RationalQuadratic,
    Stationary,
    scaled_sqdist,
)
from .structure import ChangePoint, Coregion

__all__ = [
    "Kernel",
    "Sum",
    "Product",
    "Scale",
    "RBF",
    "Matern12",
    "Matern32",
    "Matern52",
    "Stationary",
    "Linear",
    "Periodic",
    "kernel_from_name",
    "kernel_from_config",
    "scaled_sqdist",
    "exp_floor",
    "floored_exp",
    "nystrom",
    "expectations",
    "Active",
    "Polynomial",
    "RationalQuadratic",
    "SpectralMixture",
    "Cosine",
    "ChangePoint",
    "Coregion",
]
