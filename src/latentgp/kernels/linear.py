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
