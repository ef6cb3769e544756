"""Gaussian process regression network likelihood (Wilson, Knowles & Ghahramani 2012).

P outputs are mixed from Q node functions ``g_q`` by P x Q weight functions ``W_pq``:

    y_p(x) = sum_q W_pq(x) g_q(x) + eps_p,      eps_p ~ N(0, sigma_p^2).

The latent vector per point is ``f = [g_1..g_Q, W_11..W_1Q, .., W_P1..W_PQ]``
(``latent_dim = Q + P Q``; weights row-major).  Under independent Gaussian marginals
``q(f_n)`` the expected log-likelihood is closed form, since for independent ``W`` and
``g``: ``E[W g] = mW mg`` and ``Var[W g] = vW vg + vW mg^2 + mW^2 vg``.
"""

from __future__ import annotations

import torch

from ..constants import LOG_2PI
from ..parameters import assign_positive, positive_parameter, softplus
from .base import Likelihood, register


@register("gprn", "regressionnetwork")
class GPRN(Likelihood):
    """Multi-output ``p(y_n | f_n) = prod_p N(y_np ; sum_q W_pq g_q, sigma_p^2)``.

    Parameters
    ----------
    num_outputs: P.  num_nodes: Q.  variance: initial noise variance per output.
    Targets are ``(N, P)``.
    """

    scale_family = True
    task = "regression"
    deterministic_expectation = True  # closed-form expected log likelihood

    def __init__(self, num_outputs: int = 2, num_nodes: int = 1, variance: float = 0.1) -> None:
        super().__init__()
        if int(num_outputs) < 1 or int(num_nodes) < 1:
            raise ValueError("GPRN needs num_outputs >= 1 and num_nodes >= 1")
        if not variance > 0:
            raise ValueError(f"GPRN variance must be positive, got {variance}")
        self.num_outputs, self.num_nodes = int(num_outputs), int(num_nodes)
        self.latent_dim = self.num_nodes + self.num_outputs * self.num_nodes
        self._init_variance = float(variance)
        self.raw_variance = positive_parameter(variance, (self.num_outputs,), torch.float64)

    @property
    def variance(self) -> torch.Tensor:
        """``(P,)`` noise variances; assign ``likelihood.variance = value`` (a number or
        ``P`` of them) to set them."""
        return softplus(self.raw_variance)

    @variance.setter
    def variance(self, value) -> None:
        assign_positive(self.raw_variance, value, "GPRN variance")

    def split(self, f: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``f`` ``(..., Q + PQ)`` -> nodes ``(..., Q)``, weights ``(..., P, Q)``."""
        Q, P = self.num_nodes, self.num_outputs
        return f[..., :Q], f[..., Q:].reshape(f.shape[:-1] + (P, Q))

    def initial_latent_means(self) -> torch.Tensor:
        """``(Q + PQ,)``: nodes at 0, weights at 1.

        All-zero means are a saddle of any objective over ``W g`` (the gradient with
        respect to each factor is proportional to the other's mean), so a model starting
        there never moves; unit weights break the symmetry.
        """
        out = torch.zeros(self.latent_dim, dtype=torch.float64)
        out[self.num_nodes :] = 1.0
        return out

    def validate_targets(self, y, name="y"):
        if y.ndim != 2 or y.shape[1] != self.num_outputs:
            raise ValueError(
                f"{name} must have shape (N, {self.num_outputs}) for a GPRN with "
                f"{self.num_outputs} outputs, got {tuple(y.shape)}"
            )
        return y

    def conditional_mean(self, f):
        g, W = self.split(f)
        return (W * g[..., None, :]).sum(-1)  # (..., N, P)

    def conditional_variance(self, f):
        return self.variance.expand(f.shape[:-1] + (self.num_outputs,))

    def log_prob(self, y, f):
        s2 = self.variance
        r = y - self.conditional_mean(f)
        return (-0.5 * (LOG_2PI + torch.log(s2) + r.square() / s2)).sum(-1)

    def expected_log_prob(self, y, mean, var):
        g_m, W_m = self.split(mean)
        g_v, W_v = self.split(var)
        mu = (W_m * g_m[..., None, :]).sum(-1)
        v = (
            W_v * g_v[..., None, :]
            + W_v * g_m[..., None, :].square()
            + W_m.square() * g_v[..., None, :]
        ).sum(-1)
        s2 = self.variance
        return (-0.5 * (LOG_2PI + torch.log(s2) + ((y - mu).square() + v) / s2)).sum(-1)

    def predictive_moments(self, mean, var):
        g_m, W_m = self.split(mean)
        g_v, W_v = self.split(var)
        mu = (W_m * g_m[..., None, :]).sum(-1)
        v = (
            W_v * g_v[..., None, :]
            + W_v * g_m[..., None, :].square()
            + W_m.square() * g_v[..., None, :]
        ).sum(-1)
        return mu, v + self.variance

    def predictive_log_density_per_output(self, y, mean, var, num_samples: int = 1000):
        """``log E_q[p(y_np | f_n)]`` per output, ``(N, P)`` (Monte Carlo)."""
        f = self._mc_points(mean, var, num_samples)
        s2 = self.variance
        r = y - self.conditional_mean(f)
        lp = -0.5 * (LOG_2PI + torch.log(s2) + r.square() / s2)
        return torch.logsumexp(lp, 0) - torch.log(torch.tensor(float(f.shape[0])))

    def sample_y(self, f):
        mu = self.conditional_mean(f)
        return mu + self.variance.sqrt() * torch.randn_like(mu)

    def _config_args(self):
        return {
            "num_outputs": self.num_outputs,
            "num_nodes": self.num_nodes,
            "variance": self._init_variance,
        }
