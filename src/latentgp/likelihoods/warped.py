"""Warped Gaussian likelihood (Snelson, Rasmussen & Ghahramani 2003).

The observations are warped to a latent Gaussian scale by a monotonic map

    t(y) = y + sum_i a_i tanh(b_i (y + c_i)),       a_i, b_i > 0,

so ``t'(y) = 1 + sum_i a_i b_i (1 - tanh^2(b_i (y + c_i))) >= 1`` and

    p(y | f) = t'(y) N(t(y) ; f, sigma^2).

Everything under a Gaussian ``q(f) = N(m, v)`` is closed form except predictions of y,
which map draws (Gauss-Hermite nodes) of ``z ~ N(m, v + sigma^2)`` back through the
inverse warping ``t^-1``, computed by batched bisection (t is increasing and
``|t(y) - y| <= sum_i a_i`` brackets the root) refined by Newton steps.
"""

from __future__ import annotations

import torch

from ..constants import LOG_2PI
from ..parameters import assign_positive, positive_parameter, softplus
from .base import Likelihood, register


@register("warped", "warpedgaussian", "warpedgp")
class WarpedGaussian(Likelihood):
    """``p(y | f) = t'(y) N(t(y) | f, variance)`` with a learnable tanh warping.

    Parameters
    ----------
    num_terms: number I of tanh terms (the SAVIGP code uses 3).
    variance: initial noise variance on the warped scale.
    a, b: initial amplitudes and slopes (positive); c: initial offsets, spread over
        ``[-1, 1]`` by default (targets are standardised before fitting).
    """

    scale_family = True

    def __init__(
        self,
        num_terms: int = 3,
        variance: float = 0.1,
        a: float = 0.5,
        b: float = 1.0,
        c: list[float] | None = None,
        min_variance: float = 1e-6,
    ) -> None:
        super().__init__()
        if int(num_terms) < 1:
            raise ValueError(f"WarpedGaussian needs num_terms >= 1, got {num_terms}")
        if not (variance > 0 and a > 0 and b > 0):
            raise ValueError("WarpedGaussian variance, a and b must be positive")
        self.num_terms = int(num_terms)
        self._init = {"variance": float(variance), "a": float(a), "b": float(b)}
        self.min_variance = float(min_variance)
        I = self.num_terms  # noqa: E741
        if c is None:
            c = torch.linspace(-1.0, 1.0, I).tolist() if I > 1 else [0.0]
        if len(c) != I:
            raise ValueError(f"c has {len(c)} values for num_terms={I}")
        self._init_c = [float(v) for v in c]
        self.raw_variance = positive_parameter(
            max(variance - self.min_variance, 1e-12), (), torch.float64
        )
        self.raw_a = positive_parameter(float(a), (I,), torch.float64)
        self.raw_b = positive_parameter(float(b), (I,), torch.float64)
        self.c = torch.nn.Parameter(torch.tensor(self._init_c, dtype=torch.float64))

    # -- the warping ----------------------------------------------------------------
    @property
    def variance(self) -> torch.Tensor:
        """The noise variance of the warped targets; assign ``likelihood.variance =
        value`` to set it (above ``min_variance``)."""
        return softplus(self.raw_variance, self.min_variance)

    @variance.setter
    def variance(self, value) -> None:
        assign_positive(
            self.raw_variance, value, "WarpedGaussian variance", lower=self.min_variance
        )

    def warp(self, y: torch.Tensor) -> torch.Tensor:
        """``t(y)``, elementwise."""
        a, b = softplus(self.raw_a), softplus(self.raw_b)
        return y + (a * torch.tanh(b * (y[..., None] + self.c))).sum(-1)

    def log_jacobian(self, y: torch.Tensor) -> torch.Tensor:
        """``log t'(y)``, elementwise."""
        a, b = softplus(self.raw_a), softplus(self.raw_b)
        th = torch.tanh(b * (y[..., None] + self.c))
        return torch.log1p((a * b * (1.0 - th.square())).sum(-1))

    def inverse_warp(self, z: torch.Tensor, iters: int = 60) -> torch.Tensor:
        """``t^-1(z)`` elementwise: bisection on ``[z - sum a, z + sum a]``, then Newton."""
        with torch.no_grad():
            span = softplus(self.raw_a).sum()
            lo, hi = z - span - 1e-12, z + span + 1e-12
            for _ in range(iters):  # iterations of one batched solve, not a loop over data
                mid = 0.5 * (lo + hi)
                above = self.warp(mid) > z
                hi = torch.where(above, mid, hi)
                lo = torch.where(above, lo, mid)
            y = 0.5 * (lo + hi)
            for _ in range(3):
                y = y - (self.warp(y) - z) / self.log_jacobian(y).exp()
        return y

    # -- likelihood -----------------------------------------------------------------
    def log_prob(self, y, f):
        s2 = self.variance
        t = self.warp(y)
        return self.log_jacobian(y) - 0.5 * (LOG_2PI + torch.log(s2) + (t - f) ** 2 / s2)

    def expected_log_prob(self, y, mean, var):
        s2 = self.variance
        t = self.warp(y)
        return self.log_jacobian(y) - 0.5 * (LOG_2PI + torch.log(s2) + ((t - mean) ** 2 + var) / s2)

    def predictive_log_density(self, y, mean, var, num_samples: int = 0):
        v = var + self.variance
        t = self.warp(y)
        return self.log_jacobian(y) - 0.5 * (LOG_2PI + torch.log(v) + (t - mean) ** 2 / v)

    def predictive_moments(self, mean, var):
        """Mean and variance of ``y = t^-1(z)``, ``z ~ N(mean, var + sigma^2)``
        (Gauss-Hermite over z)."""
        f, w = self._gh_points(mean, var + self.variance, 40)
        y = self.inverse_warp(f)
        m = (w * y).sum(0)
        return m, ((w * y.square()).sum(0) - m.square()).clamp_min(0)

    def predictive_median(self, mean, var):
        """``t^-1(mean)``: the median of y under the predictive."""
        return self.inverse_warp(mean)

    def conditional_mean(self, f):
        x, w = self._gh_points(torch.zeros_like(f), self.variance.expand_as(f), 40)
        return (w * self.inverse_warp(f + x)).sum(0)

    def conditional_variance(self, f):
        x, w = self._gh_points(torch.zeros_like(f), self.variance.expand_as(f), 40)
        y = self.inverse_warp(f + x)
        m = (w * y).sum(0)
        return (w * y.square()).sum(0) - m.square()

    def sample_y(self, f):
        return self.inverse_warp(f + self.variance.sqrt() * torch.randn_like(f))

    def _config_args(self):
        return {
            "num_terms": self.num_terms,
            **self._init,
            "c": self._init_c,
            "min_variance": self.min_variance,
        }
