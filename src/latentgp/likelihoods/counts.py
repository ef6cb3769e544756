"""Over-dispersed and zero-inflated counts: negative binomial and zero-inflated Poisson.

Both use the log link ``mu = exp(f)``.  Their expected log-likelihoods under a Gaussian
q(f) have no closed form and go through the base class's Gauss-Hermite quadrature;
predictive log densities through its adaptive quadrature.
"""

from __future__ import annotations

import math

import torch

from ..parameters import positive_parameter, softplus
from .base import Likelihood, register


def _check_counts(y: torch.Tensor, name: str, what: str) -> torch.Tensor:
    bad = (y < 0) | (y != torch.round(y))
    if bool(bad.any()):
        i = int(torch.nonzero(bad.reshape(-1))[0, 0])
        raise ValueError(
            f"{name} must hold non-negative integer counts for a {what} likelihood; "
            f"found {y.reshape(-1)[i].item():g} at row {i}"
        )
    return y


def _positive(value: float, what: str) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{what} must be a positive finite number, got {value!r}")
    return float(value)


@register("negativebinomial", "negbin", "nb")
class NegativeBinomial(Likelihood):
    """``y ~ NB(mean = exp(f), size = r)``: ``Var[y | f] = mu + mu^2 / r``.

    ``log p = lgamma(y + r) - lgamma(r) - lgamma(y + 1) + r log(r / (r + mu))
    + y log(mu / (r + mu))``.  The dispersion ``r`` (``size``) is learned unless
    ``learn_size=False``; ``r -> inf`` is the Poisson likelihood.
    """

    task = "count"

    def __init__(self, size: float = 1.0, learn_size: bool = True) -> None:
        super().__init__()
        size = _positive(size, "NegativeBinomial size")
        self._init = (size, bool(learn_size))
        raw = positive_parameter(size, (), torch.float64)
        if learn_size:
            self.raw_size = raw
        else:
            self.register_buffer("raw_size", raw.detach())

    @property
    def size(self) -> torch.Tensor:
        return softplus(self.raw_size)

    def validate_targets(self, y, name="y"):
        return _check_counts(y, name, "negative binomial")

    def log_prob(self, y, f):
        r = self.size
        # log(r / (r + mu)) = -softplus(f - log r); log(mu / (r + mu)) = -softplus(log r - f)
        log_r = torch.log(r)
        return (
            torch.lgamma(y + r) - torch.lgamma(r) - torch.lgamma(y + 1.0)
            - r * torch.nn.functional.softplus(f - log_r)
            - y * torch.nn.functional.softplus(log_r - f)
        )

    def conditional_mean(self, f):
        return torch.exp(f)

    def conditional_variance(self, f):
        mu = torch.exp(f)
        return mu + mu.square() / self.size

    def predictive_moments(self, mean, var):
        # E[mu] = exp(m + v/2), E[mu^2] = exp(2m + 2v): closed forms of the lognormal rate
        m1 = torch.exp(mean + 0.5 * var)
        m2 = torch.exp(2.0 * mean + 2.0 * var)
        return m1, m1 + m2 / self.size + m2 - m1.square()

    def sample_y(self, f):
        r = self.size.to(f)
        rate = torch.distributions.Gamma(r, r / torch.exp(f)).sample()
        return torch.poisson(rate)

    def _config_args(self):
        size, learn = self._init
        return {"size": size, "learn_size": learn}


@register("zeroinflatedpoisson", "zip")
class ZeroInflatedPoisson(Likelihood):
    """``y = 0`` with probability ``pi``, else ``y ~ Poisson(exp(f))``.

    ``p(0 | f) = pi + (1 - pi) exp(-mu)``, ``p(y > 0 | f) = (1 - pi) Poisson(y; mu)``;
    ``E[y | f] = (1 - pi) mu``, ``Var[y | f] = (1 - pi) mu (1 + pi mu)``.  The zero
    probability ``pi`` is learned unless ``learn_zero_probability=False``.
    """

    task = "count"

    def __init__(self, zero_probability: float = 0.1, learn_zero_probability: bool = True):
        super().__init__()
        pi = float(zero_probability)
        if not 0 < pi < 1:
            raise ValueError(
                f"ZeroInflatedPoisson zero_probability must be in (0, 1), got {zero_probability!r}"
            )
        self._init = (pi, bool(learn_zero_probability))
        raw = torch.tensor(math.log(pi / (1 - pi)), dtype=torch.float64)
        if learn_zero_probability:
            self.raw_zero_probability = torch.nn.Parameter(raw)
        else:
            self.register_buffer("raw_zero_probability", raw)

    @property
    def zero_probability(self) -> torch.Tensor:
        return torch.sigmoid(self.raw_zero_probability)

    def validate_targets(self, y, name="y"):
        return _check_counts(y, name, "zero-inflated Poisson")

    def log_prob(self, y, f):
        a = self.raw_zero_probability
        log_pi, log_1m_pi = -torch.nn.functional.softplus(-a), -torch.nn.functional.softplus(a)
        mu = torch.exp(f)
        poisson = y * f - mu - torch.lgamma(y + 1.0)
        zero = torch.logaddexp(log_pi, log_1m_pi - mu)
        return torch.where(y == 0, zero, log_1m_pi + poisson)

    def conditional_mean(self, f):
        return (1.0 - self.zero_probability) * torch.exp(f)

    def conditional_variance(self, f):
        pi, mu = self.zero_probability, torch.exp(f)
        return (1.0 - pi) * mu * (1.0 + pi * mu)

    def sample_y(self, f):
        keep = torch.rand(f.shape, dtype=f.dtype, device=f.device) >= self.zero_probability
        return torch.poisson(torch.exp(f)) * keep

    def _config_args(self):
        pi, learn = self._init
        return {"zero_probability": pi, "learn_zero_probability": learn}
