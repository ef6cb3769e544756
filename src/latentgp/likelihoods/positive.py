"""Positive data and proportions: gamma, exponential and beta likelihoods.

Gamma and exponential use the log link ``E[y | f] = exp(f)``; their expected
log-likelihoods under ``q(f) = N(m, v)`` are closed form, because ``log p`` is linear in
``f`` and in ``exp(-f)`` and ``E[exp(-f)] = exp(-m + v / 2)``.  The beta likelihood uses
the logit link for its mean, ``E[y | f] = sigmoid(f)``, and the base class's quadrature.
"""

from __future__ import annotations

import math

import torch

from ..parameters import positive_parameter, softplus
from .base import Likelihood, register


def _check_open_interval(y, name, what, upper: float | None):
    bad = (y <= 0) if upper is None else (y <= 0) | (y >= upper)
    if bool(bad.any()):
        i = int(torch.nonzero(bad.reshape(-1))[0, 0])
        support = "positive values" if upper is None else "values strictly between 0 and 1"
        raise ValueError(
            f"{name} must hold {support} for a {what} likelihood; found "
            f"{y.reshape(-1)[i].item():g} at row {i}"
        )
    return y


def _learnable_positive(module, name: str, value: float, learn: bool, what: str) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{what} must be a positive finite number, got {value!r}")
    raw = positive_parameter(float(value), (), torch.float64)
    if learn:
        setattr(module, name, raw)
    else:
        module.register_buffer(name, raw.detach())


@register("gamma")
class Gamma(Likelihood):
    """``y ~ Gamma(shape = a, rate = a / exp(f))``: mean ``exp(f)``, variance
    ``exp(2 f) / a``.

    ``log p = a log a - a f - lgamma(a) + (a - 1) log y - a y exp(-f)``; the shape ``a``
    is learned unless ``learn_shape=False``.
    """

    def __init__(self, shape: float = 1.0, learn_shape: bool = True) -> None:
        super().__init__()
        self._init = (float(shape), bool(learn_shape))
        _learnable_positive(self, "raw_shape", shape, learn_shape, "Gamma shape")

    @property
    def shape(self) -> torch.Tensor:
        return softplus(self.raw_shape)

    def validate_targets(self, y, name="y"):
        return _check_open_interval(y, name, type(self).__name__.lower(), None)

    def _terms(self, y, f, exp_neg_f):
        a = self.shape
        return (
            a * torch.log(a) - a * f - torch.lgamma(a) + (a - 1) * torch.log(y)
            - a * y * exp_neg_f
        )

    def log_prob(self, y, f):
        return self._terms(y, f, torch.exp(-f))

    def expected_log_prob(self, y, mean, var):
        return self._terms(y, mean, torch.exp(-mean + 0.5 * var))

    def conditional_mean(self, f):
        return torch.exp(f)

    def conditional_variance(self, f):
        return torch.exp(2.0 * f) / self.shape

    def predictive_moments(self, mean, var):
        m1 = torch.exp(mean + 0.5 * var)
        m2 = torch.exp(2.0 * mean + 2.0 * var)  # E[exp(2 f)]
        return m1, m2 / self.shape + m2 - m1.square()

    def sample_y(self, f):
        a = self.shape.to(f)
        return torch.distributions.Gamma(a, a / torch.exp(f)).sample()

    def _config_args(self):
        shape, learn = self._init
        return {"shape": shape, "learn_shape": learn}


@register("exponential")
class Exponential(Gamma):
    """``y ~ Exponential(rate = exp(-f))``: the gamma likelihood with shape 1 (fixed)."""

    def __init__(self) -> None:
        super().__init__(shape=1.0, learn_shape=False)

    @property
    def shape(self) -> torch.Tensor:
        return torch.ones((), dtype=self.raw_shape.dtype, device=self.raw_shape.device)

    def _config_args(self):
        return {}


@register("beta")
class Beta(Likelihood):
    """Proportions ``y in (0, 1)``: ``y ~ Beta(mu phi, (1 - mu) phi)`` with
    ``mu = sigmoid(f)`` and precision ``phi`` (learned unless ``learn_precision=False``).

    ``E[y | f] = mu``, ``Var[y | f] = mu (1 - mu) / (1 + phi)``.
    """

    def __init__(self, precision: float = 10.0, learn_precision: bool = True) -> None:
        super().__init__()
        self._init = (float(precision), bool(learn_precision))
        _learnable_positive(self, "raw_precision", precision, learn_precision, "Beta precision")

    @property
    def precision(self) -> torch.Tensor:
        return softplus(self.raw_precision)

    def validate_targets(self, y, name="y"):
        return _check_open_interval(y, name, "beta", 1.0)

    def log_prob(self, y, f):
        phi = self.precision
        mu = torch.sigmoid(f)
        a, b = mu * phi, (1.0 - mu) * phi
        return (
            torch.lgamma(phi) - torch.lgamma(a) - torch.lgamma(b)
            + (a - 1.0) * torch.log(y) + (b - 1.0) * torch.log1p(-y)
        )

    def conditional_mean(self, f):
        return torch.sigmoid(f)

    def conditional_variance(self, f):
        mu = torch.sigmoid(f)
        return mu * (1.0 - mu) / (1.0 + self.precision)

    def sample_y(self, f):
        phi = self.precision.to(f)
        mu = torch.sigmoid(f)
        return torch.distributions.Beta(mu * phi, (1.0 - mu) * phi).sample()

    def _config_args(self):
        precision, learn = self._init
        return {"precision": precision, "learn_precision": learn}
