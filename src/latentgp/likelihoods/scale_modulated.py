"""Scale-modulated Gaussian likelihood (SHGP, seed 003, eqs. 6-11).

    y = exp(w) f + eps,   eps ~ N(0, c exp(2 w)),   w = w0 + g,

with two latent values per point, ``f[..., 0] = f`` and ``f[..., 1] = g``, the noise scale
``c`` (the Gaussian variance this class inherits) and a learned offset ``w0``.  Under
q(f) = N(mf, vf), q(w) = N(mw, vw) the expected log likelihood is analytic (eq. 10):

    E = -1/2 log(2 pi c) - mw
        - (1/2c) [ y^2 exp(2 vw - 2 mw) - 2 y exp(vw/2 - mw) mf + mf^2 + vf ].

The predictive (eq. 11) ``int N(y | mf e^w, e^{2w} (vf + c)) N(w | mw, vw) dw`` is a
Gauss-Hermite mixture in w, with closed-form moments

    E[y] = mf exp(mw + vw/2),   Var[y] = exp(2 mw + 2 vw) (vf + c + mf^2) - mf^2 exp(2 mw + vw).

With w = 0 the model is SVGP with a Gaussian likelihood of variance c.
"""

from __future__ import annotations

import torch
from torch import nn

from ..constants import LOG_2PI
from ..mixtures import mixture_log_density
from .base import gauss_hermite, register
from .gaussian import Gaussian


def shgp_expected_log_lik(
    y: torch.Tensor,
    mf: torch.Tensor,
    vf: torch.Tensor,
    mw: torch.Tensor,
    vw: torch.Tensor,
    c: torch.Tensor,
) -> torch.Tensor:
    """Eq. (10): ``E_{q(f_i) q(w_i)}[log N(y_i | e^w f, c e^{2w})]``, all args ``(B,)``."""
    quad = (
        y**2 * torch.exp(2.0 * vw - 2.0 * mw)
        - 2.0 * y * torch.exp(0.5 * vw - mw) * mf
        + mf**2
        + vf
    )
    return -0.5 * (LOG_2PI + torch.log(c)) - mw - quad / (2.0 * c)


@register("scalemodulated", "scalemodulatedgaussian")
class ScaleModulatedGaussian(Gaussian):
    """``N(y | e^w f, c e^{2w})`` with ``w = w0 + g``; latents ``(f, g)``.

    Parameters
    ----------
    variance: initial noise scale c (learned).  min_variance: lower bound on c.
    num_quadrature: Gauss-Hermite points in w for the predictive density.
    """

    latent_dim = 2
    deterministic_expectation = True  # closed-form expected log likelihood

    def __init__(
        self, variance: float = 1.0, min_variance: float = 1e-6, num_quadrature: int = 32
    ) -> None:
        super().__init__(variance, min_variance)
        self.num_quadrature = int(num_quadrature)
        self.w_mean = nn.Parameter(torch.zeros((), dtype=torch.float64))

    def _split(self, mean: torch.Tensor, var: torch.Tensor):
        """``(mf, vf, mw, vw)`` from latent marginals ``(..., 2)``."""
        return mean[..., 0], var[..., 0], mean[..., 1] + self.w_mean, var[..., 1]

    def log_prob(self, y, f):
        w = f[..., 1] + self.w_mean
        c = self.variance
        return -0.5 * (LOG_2PI + c.log()) - w - (y - w.exp() * f[..., 0]) ** 2 / (
            2.0 * c * (2.0 * w).exp()
        )

    def expected_log_prob(self, y, mean, var):
        return shgp_expected_log_lik(y, *self._split(mean, var), self.variance)

    def predictive_mixture(self, mean, var):
        """Gauss-Hermite mixture in w: log weights, means, variances ``(B, K)``."""
        mf, vf, mw, vw = self._split(mean, var)
        x, w = gauss_hermite(self.num_quadrature, mean.dtype, mean.device)
        wk = mw[..., None] + vw.sqrt()[..., None] * x  # (B, K)
        comp_mean = mf[..., None] * wk.exp()
        comp_var = (2.0 * wk).exp() * (vf + self.variance)[..., None]
        return w.log().expand_as(wk), comp_mean, comp_var

    def predictive_log_density(self, y, mean, var, num_samples: int = 0):
        return mixture_log_density(y, *self.predictive_mixture(mean, var))

    def predictive_moments(self, mean, var):
        mf, vf, mw, vw = self._split(mean, var)
        c = self.variance
        m = mf * torch.exp(mw + 0.5 * vw)
        v = torch.exp(2 * mw + 2 * vw) * (vf + c + mf**2) - mf**2 * torch.exp(2 * mw + vw)
        return m, v

    def joint_moments(
        self,
        mean_f: torch.Tensor,
        cov_f: torch.Tensor,
        mean_g: torch.Tensor,
        cov_g: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Joint moments of ``h = exp(w) f`` at N points for independent Gaussian
        ``f ~ N(mean_f, cov_f)`` and ``g ~ N(mean_g, cov_g)`` (``w = w0 + g``; means
        ``(..., N)``, covariances ``(..., N, N)``), and the mean noise variance:

            E[h_i] = mf_i e^{mw_i + Cw_ii / 2},
            Cov[h_i, h_j] = e^{mw_i + mw_j + (Cw_ii + Cw_jj) / 2} ((Cf_ij + mf_i mf_j) e^{Cw_ij}
                            - mf_i mf_j),
            E[c e^{2 w_i}] = c e^{2 mw_i + 2 Cw_ii}

        (log-normal moments).  The noise is uncorrelated across points and with h, so
        ``Cov[y] = Cov[h] + diag(noise)``; its diagonal is :meth:`predictive_moments`'s
        variance.  Returns ``(mean (..., N), cov (..., N, N), noise (..., N))``.
        """
        mw = mean_g + self.w_mean
        vw = cov_g.diagonal(dim1=-2, dim2=-1)
        scale = torch.exp(mw + 0.5 * vw)  # E[e^{w_i}]
        mean = mean_f * scale
        outer_f = mean_f[..., :, None] * mean_f[..., None, :]
        cov = (scale[..., :, None] * scale[..., None, :]) * (
            (cov_f + outer_f) * cov_g.exp() - outer_f
        )
        return mean, cov, self.variance * torch.exp(2.0 * mw + 2.0 * vw)

    def noise_std(self, mean, var) -> torch.Tensor:
        """Posterior-mean noise standard deviation ``sqrt(c) E[e^w]``, ``(B,)``."""
        _, _, mw, vw = self._split(mean, var)
        return self.variance.sqrt() * torch.exp(mw + 0.5 * vw)

    def conditional_mean(self, f):
        return (f[..., 1] + self.w_mean).exp() * f[..., 0]

    def conditional_variance(self, f):
        return self.variance * (2.0 * (f[..., 1] + self.w_mean)).exp()

    def sample_y(self, f):
        return self.conditional_mean(f) + self.conditional_variance(f).sqrt() * torch.randn_like(
            f[..., 0]
        )

    def _config_args(self):
        return {
            "variance": self._init_variance,
            "min_variance": self.min_variance,
            "num_quadrature": self.num_quadrature,
        }
