"""Laplace likelihood ``p(y | f) = exp(-|y - f| / b) / (2 b)``, closed-form expectation.

For ``f ~ N(m, v)`` and ``u = y - m``, ``s = sqrt(v)``:
``E|y - f| = s sqrt(2/pi) exp(-u^2 / 2v) + u (1 - 2 Phi(-u / s))``.
"""

from __future__ import annotations

import math

import torch
from torch.special import ndtr

from ..parameters import assign_positive, positive_parameter, softplus
from .base import Likelihood, register


@register("laplace")
class Laplace(Likelihood):
    """Robust regression with Laplace noise of scale ``b`` (learned)."""

    scale_family = True

    def __init__(self, scale: float = 0.3) -> None:
        super().__init__()
        if not (math.isfinite(float(scale)) and float(scale) > 0):
            raise ValueError(f"Laplace scale must be a positive finite number, got {scale!r}")
        self._init_scale = float(scale)
        self.raw_scale = positive_parameter(scale, (), torch.float64)

    @property
    def scale(self):
        """The scale b; assign ``likelihood.scale = value`` to set it."""
        return softplus(self.raw_scale)

    @scale.setter
    def scale(self, value) -> None:
        assign_positive(self.raw_scale, value, "Laplace scale")

    def log_prob(self, y, f):
        b = self.scale
        return -torch.log(2 * b) - (y - f).abs() / b

    def expected_log_prob(self, y, mean, var):
        b = self.scale
        u = y - mean
        s = var.clamp_min(1e-300).sqrt()
        e_abs = s * math.sqrt(2 / math.pi) * torch.exp(-0.5 * u * u / s**2) + u * (
            1 - 2 * ndtr(-u / s)
        )
        return -torch.log(2 * b) - e_abs / b

    def conditional_mean(self, f):
        return f

    def conditional_variance(self, f):
        return (2 * self.scale**2).expand_as(f)

    def predictive_moments(self, mean, var):
        return mean, var + 2 * self.scale**2

    def sample_y(self, f):
        return f + torch.distributions.Laplace(0.0, 1.0).sample(f.shape).to(f) * self.scale

    def _config_args(self):
        return {"scale": self._init_scale}
