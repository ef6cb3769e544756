"""Priors on hyperparameters (MAP fitting, multi-start draws, MCMC over hyperparameters).

A prior is a density over a hyperparameter's value in its own (constrained) units, e.g.
a lengthscale: ``model.set_prior("kernel.lengthscale", lg.priors.LogNormal(0.0, 1.0))``.
Each wraps a ``torch.distributions`` density (no home-made densities), checks its
arguments, draws with a caller's ``torch.Generator`` and round-trips through a JSON
config for model files.
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["Prior", "LogNormal", "Gamma", "HalfNormal", "Normal", "prior_from_config"]


def _positive(value: Any, what: str) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{what} must be a positive finite number, got {value!r}")
    return float(value)


def _finite(value: Any, what: str) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value)):
        raise ValueError(f"{what} must be a finite number, got {value!r}")
    return float(value)


class Prior:
    """Base: ``log_prob(value)`` elementwise, ``sample(shape, generator)``, a support."""

    #: the support: ``"positive"`` or ``"real"``
    support = "real"

    def distribution(self, dtype=torch.float64, device=None) -> torch.distributions.Distribution:
        raise NotImplementedError

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """Elementwise log density at ``value`` (same shape)."""
        return self.distribution(value.dtype, value.device).log_prob(value)

    def sample(self, shape: tuple[int, ...], generator: torch.Generator,
               dtype=torch.float64) -> torch.Tensor:
        """Draws of ``shape`` from ``generator`` (never the global random state), by the
        inverse CDF of uniform draws."""
        u = torch.rand(shape, generator=generator, dtype=dtype).clamp(1e-12, 1 - 1e-12)
        return self.distribution(dtype).icdf(u)

    def to_config(self) -> dict[str, Any]:
        return {"type": type(self).__name__, **vars(self)}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class Normal(Prior):
    """``N(loc, scale^2)`` (for unbounded values such as a constant mean)."""

    def __init__(self, loc: float = 0.0, scale: float = 1.0) -> None:
        self.loc, self.scale = _finite(loc, "Normal loc"), _positive(scale, "Normal scale")

    def distribution(self, dtype=torch.float64, device=None):
        t = torch.tensor([self.loc, self.scale], dtype=dtype, device=device)
        return torch.distributions.Normal(t[0], t[1])


class LogNormal(Prior):
    """``log value ~ N(loc, scale^2)``: the usual prior of a lengthscale or a variance."""

    support = "positive"

    def __init__(self, loc: float = 0.0, scale: float = 1.0) -> None:
        self.loc, self.scale = _finite(loc, "LogNormal loc"), _positive(scale, "LogNormal scale")

    def distribution(self, dtype=torch.float64, device=None):
        t = torch.tensor([self.loc, self.scale], dtype=dtype, device=device)
        return torch.distributions.LogNormal(t[0], t[1])

    def sample(self, shape, generator, dtype=torch.float64):
        z = torch.randn(shape, generator=generator, dtype=dtype)
        return torch.exp(self.loc + self.scale * z)


class Gamma(Prior):
    """``Gamma(concentration, rate)`` (mean ``concentration / rate``)."""

    support = "positive"

    def __init__(self, concentration: float = 2.0, rate: float = 1.0) -> None:
        self.concentration = _positive(concentration, "Gamma concentration")
        self.rate = _positive(rate, "Gamma rate")

    def distribution(self, dtype=torch.float64, device=None):
        t = torch.tensor([self.concentration, self.rate], dtype=dtype, device=device)
        return torch.distributions.Gamma(t[0], t[1])

    def sample(self, shape, generator, dtype=torch.float64):
        # Marsaglia-Tsang through torch's sampler needs the global state; draw by the
        # Wilson-Hilferty transform of a standard normal instead (accurate for the
        # concentrations priors use, >= 1; exact enough as a restart's starting point)
        k = self.concentration
        z = torch.randn(shape, generator=generator, dtype=dtype)
        x = k * (1 - 1 / (9 * k) + z / (3 * math.sqrt(k))).clamp_min(1e-3) ** 3
        return x / self.rate


class HalfNormal(Prior):
    """``|N(0, scale^2)|``: weakly informative for a variance or a noise level."""

    support = "positive"

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = _positive(scale, "HalfNormal scale")

    def distribution(self, dtype=torch.float64, device=None):
        return torch.distributions.HalfNormal(torch.tensor(self.scale, dtype=dtype, device=device))


_PRIORS = {cls.__name__: cls for cls in (Normal, LogNormal, Gamma, HalfNormal)}


def prior_from_config(config: dict[str, Any]) -> Prior:
    """Rebuild a prior from :meth:`Prior.to_config`."""
    cfg = dict(config)
    kind = cfg.pop("type", None)
    if kind not in _PRIORS:
        raise ValueError(f"unknown prior type {kind!r}; known: {sorted(_PRIORS)}")
    return _PRIORS[kind](**cfg)
