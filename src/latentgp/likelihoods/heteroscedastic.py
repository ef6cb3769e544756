"""Heteroscedastic Gaussian likelihood: the noise log-variance is a second latent GP.

    p(y | f, g) = N(y | f, exp(g + b)),      latent_dim = 2: f = (f, g),

with a learned offset ``b`` (the prior mean of the log-variance).  Used through
``lg.SVGP(likelihood=HeteroscedasticGaussian())`` this is SVHGP (Liu, Ong & Cai 2018), the
heteroscedastic baseline of seed 003.

Under q(f) = N(mf, vf), q(g) = N(mg, vg) the expected log likelihood is analytic,

    E = -1/2 log(2 pi) - (mg + b)/2 - ((y - mf)^2 + vf) exp(-(mg + b) + vg/2) / 2,

(the quadrature the baseline paper uses is exact for it; the tests check both agree); the
predictive density ``int N(y | mf, vf + exp(g + b)) N(g | mg, vg) dg`` is Gauss-Hermite in g.
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import get_config
from ..constants import LOG_2PI
from ..mixtures import mixture_log_density
from .base import Likelihood, gauss_hermite, register


@register("heteroscedastic", "heteroscedasticgaussian", "hetgaussian")
class HeteroscedasticGaussian(Likelihood):
    """``N(y | f, exp(g + log_variance_offset))`` with latents ``f[..., 0] = f``, ``[..., 1] = g``.

    Parameters
    ----------
    log_variance_offset: initial ``b`` (learned); ``exp(b)`` is the noise variance at g = 0.
    """

    latent_dim = 2
    scale_family = True
    deterministic_expectation = True  # closed-form expected log likelihood

    def __init__(self, log_variance_offset: float = -2.0) -> None:
        super().__init__()
        self._init_offset = float(log_variance_offset)
        self.log_variance_offset = nn.Parameter(torch.tensor(self._init_offset))

    def _split(self, t: torch.Tensor):
        return t[..., 0], t[..., 1] + self.log_variance_offset

    def log_prob(self, y, f):
        mu, logv = self._split(f)
        return -0.5 * (LOG_2PI + logv + (y - mu) ** 2 * torch.exp(-logv))

    def expected_log_prob(self, y, mean, var):
        mf, mg = self._split(mean)
        vf, vg = var[..., 0], var[..., 1]
        return -0.5 * (LOG_2PI + mg + ((y - mf) ** 2 + vf) * torch.exp(-mg + 0.5 * vg))

    def predictive_mixture(self, mean, var, n: int | None = None):
        """Gauss-Hermite mixture in g: log weights, means, variances ``(B, K)``."""
        x, w = gauss_hermite(n or max(get_config().num_gauss_hermite, 32), mean.dtype, mean.device)
        mf, mg = self._split(mean)
        vf, vg = var[..., 0], var[..., 1]
        noise = torch.exp(mg[..., None] + vg.sqrt()[..., None] * x)
        comp_var = vf[..., None] + noise
        return w.log().expand_as(comp_var), mf[..., None].expand_as(comp_var), comp_var

    def predictive_log_density(self, y, mean, var, num_samples: int = 0):
        return mixture_log_density(y, *self.predictive_mixture(mean, var))

    def conditional_mean(self, f):
        return f[..., 0]

    def conditional_variance(self, f):
        return torch.exp(self._split(f)[1])

    def predictive_moments(self, mean, var):
        mf, mg = self._split(mean)
        return mf, var[..., 0] + torch.exp(mg + 0.5 * var[..., 1])

    def sample_y(self, f):
        mu, logv = self._split(f)
        return mu + torch.exp(0.5 * logv) * torch.randn_like(mu)

    def _config_args(self):
        return {"log_variance_offset": self._init_offset}
