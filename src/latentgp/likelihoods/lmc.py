"""The linear model of coregionalisation as a likelihood: P outputs mixed from Q latent
GPs by a learned matrix, ``y_n = W g_n + eps_n``, ``eps_n ~ N(0, diag(sigma^2))``.

With SVGP's independent Gaussian marginals ``q(g_nq) = N(m_nq, v_nq)`` the expected
log-likelihood is closed form, per observed output:

    E[log N(y_np | W_p g_n, sigma_p^2)]
        = log N(y_np | W_p m_n, sigma_p^2) - sum_q W_pq^2 v_nq / (2 sigma_p^2)

Outputs missing from a row (NaN in ``y``, as in real sensor data) simply contribute no
term.  The predictive of a row is Gaussian with mean ``W m_n`` and covariance
``W diag(v_n) W^T + diag(sigma^2)``: outputs are correlated through the shared latents,
so the log predictive density of a row is the joint density of its observed outputs.
SVGP with this likelihood is the LMC of GPflow (``LinearCoregionalization``) and GPyTorch
(``LMCVariationalStrategy``); ``shared_inducing=False`` gives each latent its own Z.
"""

from __future__ import annotations

import math

import torch

from ..constants import LOG_2PI
from ..parameters import positive_parameter, softplus
from .base import Likelihood, register


@register("lmc", "linearcoregionalization")
class LinearCoregionalization(Likelihood):
    """``p(y_n | g_n) = prod_p N(y_np ; W_p g_n, sigma_p^2)`` over the observed outputs.

    Parameters
    ----------
    num_outputs: P; num_latent: Q (the latent GPs).  variance: initial noise variance per
    output.  Targets are ``(N, P)`` with NaN where an output was not observed.  ``W``
    starts at the top-Q principal directions of the standardised targets (missing entries
    at 0), so the latents start on the outputs' main modes of variation.
    """

    scale_family = True
    task = "regression"
    deterministic_expectation = True  # closed-form expected log likelihood
    allows_missing_targets = True

    def __init__(self, num_outputs: int, num_latent: int = 1, variance: float = 0.1) -> None:
        super().__init__()
        P, Q = int(num_outputs), int(num_latent)
        if P < 1 or Q < 1:
            raise ValueError("LinearCoregionalization needs num_outputs >= 1 and num_latent >= 1")
        if not (isinstance(variance, (int, float)) and math.isfinite(variance) and variance > 0):
            raise ValueError(f"LinearCoregionalization variance must be positive, got {variance!r}")
        self.num_outputs, self.latent_dim = P, Q
        self._init_variance = float(variance)
        self.raw_variance = positive_parameter(variance, (P,), torch.float64)
        eye = torch.eye(P, Q, dtype=torch.float64)
        self.W = torch.nn.Parameter(eye + 0.1 * (1.0 - eye))

    @property
    def variance(self) -> torch.Tensor:
        """``(P,)`` noise variances."""
        return softplus(self.raw_variance)

    def adapt_to_targets(self, y: torch.Tensor) -> None:
        """Start ``W`` at the top-Q principal directions of the standardised targets."""
        y = y.to(torch.float64).reshape(y.shape[0], -1)
        if y.shape[1] != self.num_outputs or y.shape[0] < 2:
            return
        mask = ~torch.isnan(y)
        counts = mask.sum(0).clamp_min(1)
        mean = torch.where(mask, y, 0.0).sum(0) / counts
        centred = torch.where(mask, y - mean, 0.0)
        sd = (centred.square().sum(0) / counts).sqrt().clamp_min(1e-12)
        _, s, Vh = torch.linalg.svd(centred / sd, full_matrices=False)
        Q = min(self.latent_dim, Vh.shape[0])
        with torch.no_grad():
            self.W[:, :Q].copy_(Vh[:Q].mT * (s[:Q] / math.sqrt(y.shape[0])))

    def validate_targets(self, y, name="y"):
        if y.ndim != 2 or y.shape[1] != self.num_outputs:
            raise ValueError(
                f"{name} must have shape (N, {self.num_outputs}) for "
                f"LinearCoregionalization with {self.num_outputs} outputs, got {tuple(y.shape)}"
            )
        return y

    def _mix(self, mean, var):
        """``(..., N, P)`` mean ``W m`` and per-output variance ``(W^2) v`` of ``W g``."""
        W = self.W.to(mean)
        return mean @ W.mT, var @ W.square().mT

    def conditional_mean(self, f):
        return f @ self.W.to(f).mT

    def conditional_variance(self, f):
        return self.variance.to(f).expand(f.shape[:-1] + (self.num_outputs,))

    def log_prob(self, y, f):
        return self.expected_log_prob(y, f, torch.zeros_like(f))

    def expected_log_prob(self, y, mean, var):
        mu, v = self._mix(mean, var)
        s2 = self.variance.to(mean)
        observed = ~torch.isnan(y)
        r = torch.where(observed, y, mu) - mu
        terms = -0.5 * (LOG_2PI + torch.log(s2) + (r.square() + v) / s2)
        return torch.where(observed, terms, 0.0).sum(-1)

    def predictive_moments(self, mean, var):
        mu, v = self._mix(mean, var)
        return mu, v + self.variance.to(mean)

    def predictive_log_density(self, y, mean, var, num_samples: int = 0):
        """``log N(y_obs | W_obs m, W_obs diag(v) W_obs^T + diag(sigma^2)_obs)`` per row:
        the joint density of the row's observed outputs (missing ones marginalised)."""
        W = self.W.to(mean)
        s2 = self.variance.to(mean)
        observed = ~torch.isnan(y)  # (N, P)
        # missing outputs get an infinite-noise-free stand-in: their rows/columns are
        # replaced by the identity, their residual by 0, so they add nothing
        cov = (W * var[..., None, :]) @ W.mT + torch.diag_embed(s2.expand_as(y))
        both = observed[..., :, None] & observed[..., None, :]
        eye = torch.eye(self.num_outputs, dtype=mean.dtype, device=mean.device)
        cov = torch.where(both, cov, eye)
        r = torch.where(observed, y - mean @ W.mT, 0.0)
        L = torch.linalg.cholesky(cov)
        z = torch.linalg.solve_triangular(L, r[..., None], upper=False)[..., 0]
        logdet = 2.0 * torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum(-1)
        k = observed.sum(-1).to(mean.dtype)  # an integer count times a float is float32
        return -0.5 * (k * LOG_2PI + logdet + z.square().sum(-1))

    def sample_y(self, f):
        mu = self.conditional_mean(f)
        return mu + self.variance.to(f).sqrt() * torch.randn_like(mu)

    def _config_args(self):
        return {
            "num_outputs": self.num_outputs,
            "num_latent": self.latent_dim,
            "variance": self._init_variance,
        }
