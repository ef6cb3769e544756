"""Periodic kernel (MacKay), one period and lengthscale per input dimension.

``k(x, z) = variance * exp(-2 sum_d sin^2(pi (x_d - z_d) / p_d) / l_d^2)``

Using ``sin^2(a - b) = (1 - cos 2a cos 2b - sin 2a sin 2b) / 2``, the sum over d becomes
two matrix products, so no (N, M, D) differences are formed.
"""

from __future__ import annotations

import math

import torch

from ..parameters import column_unit, inv_softplus, positive_parameter, softplus
from .base import Kernel, floored_exp, register


@register("periodic", "expsinesquared")
class Periodic(Kernel):
    """MacKay's periodic kernel with per-dimension period and lengthscale."""

    def __init__(
        self, period: float = 1.0, lengthscale: float = 1.0, variance: float = 1.0
    ) -> None:
        super().__init__()
        self._init = (float(period), float(lengthscale), float(variance))

    def _build(self, dtype, device):
        p, ls, v = self._init
        shape = self.batch_shape + (self.input_dim,)
        # period = softplus(raw_period) * input_unit (the spread of each input column, set
        # by init_from_data); the lengthscale of this kernel has no units
        self.register_buffer("input_unit", torch.ones(self.input_dim, dtype=dtype, device=device))
        self.raw_period = positive_parameter(p, shape, dtype, device)
        self.raw_lengthscale = torch.nn.Parameter(
            inv_softplus(ls).to(dtype=dtype, device=device).expand(shape).clone()
        )
        self.raw_variance = positive_parameter(v, self.batch_shape, dtype, device)

    def init_from_data(self, X: torch.Tensor) -> None:
        """Store the period in units of each column's spread (its value is kept)."""
        self.adopt_input_unit(column_unit(X))

    def adopt_input_unit(self, unit: torch.Tensor) -> None:
        """Store the period in the column ``unit`` ``(D,)``, keeping its value."""
        self._check_built()
        with torch.no_grad():
            keep = self.period.detach().clone()
            self.input_unit.copy_(unit.to(self.input_unit))
            self.raw_period.copy_(inv_softplus(keep / self.input_unit).to(self.raw_period))

    @property
    def period(self):
        """``(*batch, D)``, in the units of the inputs."""
        return softplus(self.raw_period) * self.input_unit

    @property
    def lengthscale(self):
        return softplus(self.raw_lengthscale)

    @property
    def variance(self):
        return softplus(self.raw_variance)

    def forward(self, X, Z=None):
        self._check_built()
        w = (2.0 * math.pi / self.period)[..., None, :]
        inv_l2 = (1.0 / self.lengthscale**2)[..., None, :]
        Z = X if Z is None else Z
        # sum_d (1 - cos(w (x - z))) / l^2 = sum_d 2 sin^2(w (x - z) / 2) / l^2, from the
        # pairwise differences: the expansion cos(a - b) = cos a cos b + sin a sin b loses
        # ~eps / l^2 to cancellation (7% of k(x, x) in float32 at l = 1e-3)
        diff = X[..., :, None, :] - Z[..., None, :, :]  # (..., N, M, D)
        half = torch.sin(0.5 * w[..., None, :] * diff)
        s = (2.0 * half**2 * inv_l2[..., None, :]).sum(-1)
        return self.variance[..., None, None] * floored_exp(-s)

    def diag(self, X):
        self._check_built()
        shape = torch.broadcast_shapes(self.batch_shape + (1,), X.shape[:-1])
        return self.variance[..., None].expand(shape)

    def _config_args(self):
        p, ls, v = self._init
        return {"period": p, "lengthscale": ls, "variance": v}
