"""Bernoulli likelihood with a robit link (Liu 2004): ``p(y = 1 | f) = T_nu(f)``, the
Student-t CDF with ``nu`` degrees of freedom.

Heavier tails than the probit (``nu -> inf``) and the logit (close to ``nu = 7`` after
rescaling): a point far on the wrong side of the boundary costs ``O(log |f|)`` rather
than ``O(f^2)`` (probit) or ``O(|f|)`` (logit), so label noise and outliers pull the
latent function less.

The CDF is computed in torch, differentiably in ``f``, to machine precision: with
``beta = atan2(sqrt(nu), -z)`` (the angle of the substitution ``s = sqrt(nu) tan``) and
``c = Gamma((nu + 1) / 2) / (sqrt(pi) Gamma(nu / 2))``, for ``z <= 0``

    T_nu(z) = c int_0^beta sin(phi)^(nu - 1) dphi
            = c beta^nu int_0^1 u^(nu - 1) (sin(beta u) / (beta u))^(nu - 1) du,

a Gauss-Jacobi rule for the weight ``u^(nu - 1)`` (nodes fixed per ``nu``) with the
smooth factor in log space, so far tails keep their relative accuracy; ``z > 0`` uses
``log T(z) = log1p(-T(-z))``.  Expected log-likelihoods use the base class's
Gauss-Hermite quadrature, predictive probabilities and densities its quadrature centred
on the integrand.
``nu`` is a fixed constructor argument (not learned: the quadrature's nodes depend on it).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .base import register
from .bernoulli import Bernoulli

#: Gauss-Jacobi nodes of the CDF integral (machine precision for nu from 0.5 to 100;
#: 12 nodes lose 1e-10 at nu = 100)
_NODES = 16


def gauss_jacobi(n: int, alpha: float, beta: float) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights ``(n,)`` of the Gauss-Jacobi rule for the weight
    ``(1 - x)^alpha (1 + x)^beta`` on (-1, 1) (``alpha, beta > -1``), by Golub-Welsch: the
    eigenvalues of the Jacobi matrix of the orthogonal polynomials' recurrence."""
    k = np.arange(n, dtype=np.float64)
    ab = alpha + beta
    s = 2 * k + ab
    with np.errstate(divide="ignore", invalid="ignore"):
        diag = (beta**2 - alpha**2) / (s * (s + 2))
    diag[0] = (beta - alpha) / (ab + 2)
    j = np.arange(1, n, dtype=np.float64)
    t = 2 * j + ab
    off2 = 4 * j * (j + alpha) * (j + beta) * (j + ab) / (t**2 * (t + 1) * (t - 1))
    if n > 1:  # j = 1 with the (1 + alpha + beta) factor cancelled (0/0 at ab = -1)
        off2[0] = 4 * (1 + alpha) * (1 + beta) / ((2 + ab) ** 2 * (3 + ab))
    J = np.diag(diag) + np.diag(np.sqrt(off2), 1) + np.diag(np.sqrt(off2), -1)
    x, V = np.linalg.eigh(J)
    log_mu0 = (ab + 1) * math.log(2) + math.lgamma(alpha + 1) + math.lgamma(beta + 1) - math.lgamma(
        ab + 2
    )
    return x, np.exp(log_mu0) * V[0] ** 2


@register("robit")
class Robit(Bernoulli):
    """``p(y = 1 | f) = T_nu(f)``: Bernoulli with a Student-t CDF (robit) link.

    dof: degrees of freedom ``nu`` (positive; default 4).  ``predict_y`` reports
    ``P(y = 1)`` as the predictive mean, like :class:`Bernoulli`.
    """

    def __init__(self, dof: float = 4.0) -> None:
        super().__init__("logit")
        if isinstance(dof, bool) or not isinstance(dof, (int, float)) or not (
            math.isfinite(dof) and dof > 0
        ):
            raise ValueError(f"Robit dof must be a positive finite number, got {dof!r}")
        self.dof = float(dof)
        self.link = "robit"
        x, w = gauss_jacobi(_NODES, 0.0, self.dof - 1.0)
        self._u = (1.0 + x) / 2.0  # nodes on (0, 1) for the weight u^(nu - 1)
        self._logw = np.log(w) - self.dof * math.log(2.0)
        self._logc = (
            math.lgamma((self.dof + 1) / 2) - 0.5 * math.log(math.pi) - math.lgamma(self.dof / 2)
        )

    def _log_lower(self, z: torch.Tensor) -> torch.Tensor:
        """``log T_nu(z)`` for ``z <= 0`` (elementwise, any shape)."""
        nu = self.dof
        u = torch.as_tensor(self._u, dtype=z.dtype, device=z.device).reshape(
            (-1,) + (1,) * z.ndim
        )
        logw = torch.as_tensor(self._logw, dtype=z.dtype, device=z.device).reshape(u.shape)
        beta = torch.atan2(torch.full_like(z, math.sqrt(nu)), -z)  # (0, pi/2]
        arg = beta * u
        log_sinc = torch.log(torch.sin(arg) / arg)
        return self._logc + nu * torch.log(beta) + torch.logsumexp(logw + (nu - 1) * log_sinc, 0)

    def log_cdf(self, z: torch.Tensor) -> torch.Tensor:
        """``log T_nu(z)``, elementwise."""
        below = z <= 0
        # one evaluation at -|z|, written so that z = 0 takes the lower side's gradient
        # (the density) rather than abs's zero
        low = self._log_lower(torch.where(below, z, -z))
        return torch.where(below, low, torch.log1p(-torch.exp(low)))

    def _log_p1(self, f):
        return self.log_cdf(f)

    def conditional_mean(self, f):
        return torch.exp(self.log_cdf(f))

    def predictive_moments(self, mean, var):
        """``P(y = 1) = E_q[T_nu(f)]`` by the base class's quadrature centred on the
        integrand (:meth:`~latentgp.likelihoods.Likelihood.adaptive_log_density`, which
        ``predictive_log_density`` uses too), about 1e-7 accurate for wide q(f)."""
        p = torch.exp(self.adaptive_log_density(torch.ones_like(mean), mean, var))
        return p, p * (1 - p)

    def _config_args(self):
        return {"dof": self.dof}
