"""SHGP: scalable heteroscedastic and non-stationary GP (seed 003, eqs. 6-11).

    y(x) = exp(w(x)) f(x) + eps(x),   eps(x) ~ N(0, c exp(2 w(x))),
    f ~ GP(0, k_f),   w = mu0 + g,   g ~ GP(0, k_w),

two sparse GPs (index 0: f, index 1: g) with q(u_f) q(u_g).  The expected log likelihood is
analytic (eq. 10, no Monte Carlo), with q(f_i) = N(mf, vf), q(w_i) = N(mw, vw):

    E_i = -1/2 log(2 pi c) - mw
          - (1/2c) [ y^2 exp(2 vw - 2 mw) - 2 y exp(vw/2 - mw) mf + mf^2 + vf ].

Predictive (eq. 11) p(y*) = int N(y* | mf e^w, e^{2w} (vf + c)) N(w | mw, vw) dw, evaluated
by Gauss-Hermite in w (a Gaussian mixture), with closed-form moments

    E[y*] = mf exp(mw + vw/2),
    Var[y*] = exp(2 mw + 2 vw) (vf + c + mf^2) - mf^2 exp(2 mw + vw).

The noise scale c is the Gaussian likelihood's variance, so with w = 0 the model is SVGP.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ...constants import LOG_2PI
from ...validation import keyword_only_after_first
from ..base import register_model
from ..predict import chunked
from .base import ModulatedGP, gauss_hermite_nodes


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


@register_model
class SHGP(ModulatedGP):
    """Scalable heteroscedastic GP: y = exp(w) f + noise with variance c exp(2w).

    Parameters
    ----------
    num_inducing: M, for each of the two GPs (f and w).
    kernel: kernel name or object; built with batch shape (2,) (separate hyperparameters
        for f and w).
    noise_variance: initial c (scaled-target units).
    num_quadrature: Gauss-Hermite points in w for the predictive density.
    """

    @keyword_only_after_first()
    def __init__(
        self,
        num_inducing: int = 100,
        *,
        kernel="rbf",
        noise_variance: float = 1.0,
        num_quadrature: int = 32,
        normalize_y: bool = True,
        likelihood=None,
        device=None,
        dtype=None,
    ) -> None:
        from ...likelihoods import Gaussian

        if not isinstance(noise_variance, (int, float)) or not noise_variance > 0:
            raise ValueError(f"noise_variance must be a positive number, got {noise_variance!r}")
        lik = likelihood if likelihood is not None else Gaussian(variance=float(noise_variance))
        super().__init__(num_inducing, kernel, lik, normalize_y, device, dtype)
        self.noise_variance = float(noise_variance)
        self.num_quadrature = int(num_quadrature)

    def _num_gps(self) -> int:
        return 2

    def _build(self, input_dim, output_dim):
        super()._build(input_dim, output_dim)
        self.w_mean = nn.Parameter(torch.zeros((), dtype=self.dtype_))  # mu0 of w
        self.to(dtype=self.dtype_, device=self.device_)

    def get_config(self):
        cfg = super().get_config()
        cfg.update(noise_variance=self.noise_variance, num_quadrature=self.num_quadrature)
        return cfg

    @property
    def c(self) -> torch.Tensor:
        """The noise scale c (scaled units)."""
        return self.likelihood.variance

    def _fw(self, X, Lzz):
        m, v = self.latent_marginals(X, Lzz)
        return m[:, 0], v[:, 0], m[:, 1] + self.w_mean, v[:, 1]

    def expected_log_lik(self, X, y, Lzz) -> torch.Tensor:
        """Eq. (10) per point, ``(B,)``."""
        return shgp_expected_log_lik(y, *self._fw(X, Lzz), self.c)

    def objective(self, X, y, num_data):
        """Analytic ELBO (eq. 9), minibatch estimate: N/B sum_i E_i - KL_f - KL_w."""
        Lzz = self.prior_factor()
        ell = self.expected_log_lik(X, y, Lzz)
        return ell.sum() * (num_data / X.shape[0]) - self.q.kl(Lzz)

    def _predictive_mixture(self, X, Lzz):
        mf, vf, mw, vw = self._fw(X, Lzz)
        x, w = gauss_hermite_nodes(self.num_quadrature, mf)
        wk = mw[:, None] + vw.sqrt()[:, None] * x  # (B, K)
        mean = mf[:, None] * wk.exp()
        var = (2.0 * wk).exp() * (vf + self.c)[:, None]
        return w.log().expand_as(wk), mean, var

    def _moments(self, X, Lzz):
        """Closed-form predictive moments (scaled units) and noise sd at ``X``, ``(B,)``."""
        mf, vf, mw, vw = self._fw(X, Lzz)
        m = mf * torch.exp(mw + 0.5 * vw)
        v = torch.exp(2 * mw + 2 * vw) * (vf + self.c + mf**2) - mf**2 * torch.exp(2 * mw + vw)
        return m, v, self.c.sqrt() * torch.exp(mw + 0.5 * vw)

    def predict_y(self, X, chunk_size=None, as_numpy=True):
        """Closed-form predictive mean and variance ``(N,)`` (original units)."""
        self._require_built()
        Lzz = self.prediction_cache()
        rows = self._rows_per_chunk(chunk_size)
        m, v, _ = chunked(lambda xc: self._moments(xc, Lzz), self._check_X(X), rows=rows)
        m, v = self._unscale_moments(m, v)
        return self._to_output(m, as_numpy), self._to_output(v, as_numpy)

    def noise_std(self, X, chunk_size=None) -> np.ndarray:
        """Posterior-mean noise standard deviation sqrt(c) E[e^w] at ``X``, original units."""
        self._require_built()
        Lzz = self.prediction_cache()
        rows = self._rows_per_chunk(chunk_size)
        (sd,) = chunked(lambda xc: self._moments(xc, Lzz)[2], self._check_X(X), rows=rows)
        if self._uses_scaling():
            sd = sd * self.y_scale[0]
        return sd.cpu().numpy()


__all__ = ["SHGP", "shgp_expected_log_lik"]
