"""Poisson likelihood with a log link, an exposure (bin size) and an optional offset.

``y ~ Poisson(exposure * exp(f + offset))``; the expected log-likelihood under a
Gaussian q(f) is closed form:
``E[log p] = y (m + offset + log e) - e exp(m + offset + v / 2) - log y!``.
"""

from __future__ import annotations

import math

import torch

from .base import Likelihood, register


@register("poisson", "count")
class Poisson(Likelihood):
    """Counts ``y in {0, 1, 2, ...}``.

    Parameters
    ----------
    exposure: positive constant multiplying the rate (e.g. the bin size of an LGCP).
    offset: initial log-mean offset; ``learn_offset`` makes it a parameter.
    integer_counts: reject non-integer targets (False accepts any y >= 0, using the same
        log-density formula as a quasi-likelihood).
    """

    task = "count"

    def __init__(
        self,
        exposure: float = 1.0,
        offset: float = 0.0,
        learn_offset: bool = False,
        integer_counts: bool = True,
    ):
        super().__init__()
        self.integer_counts = bool(integer_counts)
        if not (exposure > 0 and math.isfinite(exposure)):
            raise ValueError(f"Poisson exposure must be positive, got {exposure}")
        self.exposure = float(exposure)
        self._init_offset = float(offset)
        self.learn_offset = bool(learn_offset)
        off = torch.tensor(float(offset), dtype=torch.float64)
        if learn_offset:
            self.offset = torch.nn.Parameter(off)
        else:
            self.register_buffer("offset", off)

    def validate_targets(self, y, name="y"):
        bad = y < 0
        if self.integer_counts:
            bad = bad | (y != torch.round(y))
        if bool(bad.any()):
            i = int(torch.nonzero(bad.reshape(-1))[0, 0])
            raise ValueError(
                f"{name} must hold non-negative integer counts for a Poisson likelihood; "
                f"found {y.reshape(-1)[i].item():g} at row {i}"
            )
        return y

    def _log_rate(self, f):
        return f + self.offset + math.log(self.exposure)

    def log_prob(self, y, f):
        lr = self._log_rate(f)
        return y * lr - torch.exp(lr) - torch.lgamma(y + 1.0)

    def expected_log_prob(self, y, mean, var):
        lr = self._log_rate(mean)
        return y * lr - torch.exp(lr + 0.5 * var) - torch.lgamma(y + 1.0)

    def conditional_mean(self, f):
        return torch.exp(self._log_rate(f))

    def conditional_variance(self, f):
        return torch.exp(self._log_rate(f))

    def predictive_moments(self, mean, var):
        lr = self._log_rate(mean)
        m = torch.exp(lr + 0.5 * var)
        # Var[y] = E[rate] + Var[rate], rate lognormal
        v = m + torch.exp(2 * lr + var) * torch.expm1(var)
        return m, v

    def sample_y(self, f):
        return torch.poisson(self.conditional_mean(f))

    def _config_args(self):
        return {
            "exposure": self.exposure,
            "offset": self._init_offset,
            "learn_offset": self.learn_offset,
            "integer_counts": self.integer_counts,
        }
