"""Linear (dot-product) kernel ``k(x, z) = sum_d v_d x_d z_d`` with ARD variances."""

from __future__ import annotations

import torch

from ..parameters import positive_parameter, softplus
from .base import Kernel, register


@register("linear", "dotproduct")
class Linear(Kernel):
    """``k(x, z) = sum_d variance_d x_d z_d``.

    Parameters
    ----------
    variance: initial variance(s); ard: one variance per input dimension.
    """

    def __init__(self, variance: float = 1.0, ard: bool = False) -> None:
        super().__init__()
        self._init_variance = float(variance)
        self.ard = bool(ard)

    def _build(self, dtype, device):
        D = self.input_dim if self.ard else 1
        self.raw_variance = positive_parameter(
            self._init_variance, self.batch_shape + (D,), dtype, device
        )

    @property
    def variance(self) -> torch.Tensor:
        """``(*batch, D)`` or ``(*batch, 1)``."""
        return softplus(self.raw_variance)

    def forward(self, X, Z=None):
        self._check_built()
        v = self.variance[..., None, :]
        Z = X if Z is None else Z
        return (X * v) @ Z.mT

    def diag(self, X):
        self._check_built()
        return (X * X * self.variance[..., None, :]).sum(-1)

    def _config_args(self):
        return {"variance": self._init_variance, "ard": self.ard}


@register("polynomial", "poly")
class Polynomial(Kernel):
    """``k(x, z) = variance * (offset + x.z)^degree`` with a fixed integer ``degree`` and
    learned ``variance`` and ``offset`` (> 0).  Degree 1 is a linear kernel with a bias.
    """

    def __init__(self, degree: int = 2, variance: float = 1.0, offset: float = 1.0) -> None:
        super().__init__()
        if not (isinstance(degree, int) and degree >= 1):
            raise ValueError(f"Polynomial degree must be an integer >= 1, got {degree!r}")
        for value, what in ((variance, "variance"), (offset, "offset")):
            if not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"Polynomial {what} must be positive, got {value!r}")
        self.degree = degree
        self._init = (float(variance), float(offset))

    def _build(self, dtype, device):
        v, c = self._init
        self.raw_variance = positive_parameter(v, self.batch_shape, dtype, device)
        self.raw_offset = positive_parameter(c, self.batch_shape, dtype, device)

    @property
    def variance(self) -> torch.Tensor:
        return softplus(self.raw_variance)

    @property
    def offset(self) -> torch.Tensor:
        return softplus(self.raw_offset)

    def forward(self, X, Z=None):
        self._check_built()
        Z = X if Z is None else Z
        base = self.offset[..., None, None] + X @ Z.mT
        return self.variance[..., None, None] * base**self.degree

    def diag(self, X):
        self._check_built()
        base = self.offset[..., None] + (X * X).sum(-1)
        return self.variance[..., None] * base**self.degree

    def _config_args(self):
        v, c = self._init
        return {"degree": self.degree, "variance": v, "offset": c}
