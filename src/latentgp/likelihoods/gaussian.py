"""Gaussian likelihood ``y = f + eps``, ``eps ~ N(0, variance)``: everything in closed form."""

from __future__ import annotations

import math

import torch

from ..constants import LOG_2PI
from ..parameters import assign_positive, positive_parameter, softplus
from .base import Likelihood, register


@register("gaussian", "normal")
class Gaussian(Likelihood):
    """``p(y | f) = N(y | f, variance)``.

    Parameters
    ----------
    variance: initial noise variance (learned).
    min_variance: lower bound keeping the noise away from zero.
    """

    scale_family = True

    def __init__(self, variance: float = 0.1, min_variance: float = 1e-6) -> None:
        super().__init__()
        if not (math.isfinite(float(variance)) and float(variance) > 0):
            raise ValueError(
                f"Gaussian noise variance must be a positive finite number, got {variance!r} "
                f"(for near-noiseless data use a small value such as 1e-6)"
            )
        if not (math.isfinite(float(min_variance)) and float(min_variance) >= 0):
            raise ValueError(
                f"Gaussian min_variance must be a non-negative finite number, got {min_variance!r}"
            )
        self.min_variance = float(min_variance)
        self._init_variance = float(variance)
        self.raw_variance = positive_parameter(
            max(self._init_variance - self.min_variance, 1e-12), (), torch.float64
        )

    @property
    def variance(self) -> torch.Tensor:
        """The noise variance (a scalar tensor, in the units the model trains in: of the
        standardised targets when the model standardises them); assign
        ``likelihood.variance = value`` to set it (above ``min_variance``)."""
        return softplus(self.raw_variance, self.min_variance)

    @variance.setter
    def variance(self, value) -> None:
        assign_positive(
            self.raw_variance, value, "Gaussian noise variance", lower=self.min_variance
        )

    def set_batch_shape(self, batch_shape: tuple[int, ...]) -> None:
        """Give the noise variance the shape ``batch_shape`` (one independent noise per
        member of a batch of models, e.g. :class:`~latentgp.models.BatchedExactGP`), each
        at the current value; ``()`` is the usual scalar.  Densities then broadcast the
        variance ``(*batch_shape,)`` against the last dimensions of their arguments'
        batch, so callers give it the trailing singleton dimensions they need."""
        with torch.no_grad():
            raw = self.raw_variance.detach().reshape(-1)[0]
            self.raw_variance = torch.nn.Parameter(raw.expand(tuple(batch_shape)).clone())

    def log_prob(self, y, f):
        s2 = self.variance
        return -0.5 * (LOG_2PI + torch.log(s2) + (y - f) ** 2 / s2)

    def expected_log_prob(self, y, mean, var):
        s2 = self.variance
        return -0.5 * (LOG_2PI + torch.log(s2) + ((y - mean) ** 2 + var) / s2)

    def predictive_log_density(self, y, mean, var, num_samples: int = 0):
        v = var + self.variance
        return -0.5 * (LOG_2PI + torch.log(v) + (y - mean) ** 2 / v)

    def conditional_mean(self, f):
        return f

    def conditional_variance(self, f):
        return self.variance.expand_as(f)

    def predictive_moments(self, mean, var):
        return mean, var + self.variance

    def sample_y(self, f):
        return f + self.variance.sqrt() * torch.randn_like(f)

    def _config_args(self):
        return {"variance": self._init_variance, "min_variance": self.min_variance}
