"""Mixture of Gaussian experts with GP gating (SMGP, seed 003, eqs. 12-17).

Latents per point: T experts ``f^t`` (``f[..., :T]``) and T gating logits ``a^t``
(``f[..., T:]``); the assignment ``w ~ Mult(softmax(a))`` picks an expert with noise
variance ``nu^t``:  ``p(y | f, a) = sum_t softmax(a)_t N(y | f^t, nu^t)``.

The bound of the seed marginalises the assignment exactly (notes §2.3): with the expert
terms ``l^t = E_{q(f^t)}[log N(y | f^t, nu^t)]`` (closed form),

    E_q[log p(y | f, a)]  >=  E_{q(a)}[ logsumexp_t( log softmax(a)_t + l^t ) ],

and only the Gaussian expectation over ``a`` is estimated, by ``num_samples``
reparameterised draws (``estimator="analytic"``).  ``estimator="concrete"`` is the
paper's estimator for comparison: ``logsumexp_s( sum_t w_t^s l^t ) - log S`` with
``a^s ~ q(a)`` and ``w^s ~ Concrete(softmax(a^s), temperature)``.

Predictive: ``p(y*) = sum_t pi_t N(y* | m_t, v_t + nu^t)`` with
``pi_t = E_{q(a*)}[softmax(a*)_t]`` (``num_gate_samples`` draws from a fixed generator,
so predictions are deterministic).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..constants import LOG_2PI
from ..mixtures import mixture_log_density, mixture_moments
from ..parameters import assign_positive, inv_softplus, softplus
from ..validation import check_positive_int
from .base import Likelihood, register

#: The lower bound of every expert's noise variance.
EXPERT_NOISE_FLOOR = 1e-6

ESTIMATORS = ("analytic", "concrete")


def gaussian_expected_log_lik(y, mean, var, noise):
    """``E_{N(f|mean,var)}[log N(y | f, noise)]``, broadcasting (``y`` ``(B, 1)``)."""
    return -0.5 * (LOG_2PI + noise.log() + ((y - mean) ** 2 + var) / noise)


def mixture_inner(log_pi: torch.Tensor, ell: torch.Tensor) -> torch.Tensor:
    """``log E_{w ~ Mult(pi)}[exp(sum_t w_t l_t)] = logsumexp_t(log pi_t + l_t)``, last axis."""
    return torch.logsumexp(log_pi + ell, dim=-1)


@register("experts", "mixtureofexperts", "gaussianexperts")
class GaussianExperts(Likelihood):
    """T Gaussian experts with softmax gating over 2T latents.

    Parameters
    ----------
    num_experts: T.  noise_variance: initial expert noise variances (learned, one each).
    num_samples: draws of the gating logits per point in the bound.
    estimator: ``"analytic"`` (default) or ``"concrete"``.  temperature: Concrete
    relaxation temperature.  num_gate_samples: draws for the predictive mixture weights.
    """

    scale_family = True

    def __init__(
        self,
        num_experts: int = 4,
        noise_variance: float = 0.1,
        num_samples: int = 10,
        estimator: str = "analytic",
        temperature: float = 0.01,
        num_gate_samples: int = 1000,
    ) -> None:
        super().__init__()
        if estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be 'analytic' or 'concrete', got {estimator!r}")
        if not (isinstance(temperature, (int, float)) and temperature > 0):
            raise ValueError(f"temperature must be a positive number, got {temperature!r}")
        if not (isinstance(noise_variance, (int, float)) and noise_variance > 0):
            raise ValueError(f"noise_variance must be a positive number, got {noise_variance!r}")
        self.num_experts = check_positive_int(num_experts, "num_experts")
        self.noise_variance = float(noise_variance)
        self.num_samples = check_positive_int(num_samples, "num_samples")
        self.estimator, self.temperature = estimator, float(temperature)
        self.num_gate_samples = check_positive_int(num_gate_samples, "num_gate_samples")
        raw = inv_softplus(self.noise_variance).to(torch.float64)
        self.raw_expert_noise = nn.Parameter(raw.expand(self.num_experts).clone())

    @property
    def latent_dim(self) -> int:  # type: ignore[override]
        return 2 * self.num_experts

    @property
    def expert_noise(self) -> torch.Tensor:
        """``(T,)`` noise variances nu^t; assign ``likelihood.expert_noise = value`` (a
        number or ``T`` of them) to set them."""
        return softplus(self.raw_expert_noise, EXPERT_NOISE_FLOOR)

    @expert_noise.setter
    def expert_noise(self, value) -> None:
        assign_positive(
            self.raw_expert_noise, value, "GaussianExperts expert_noise", lower=EXPERT_NOISE_FLOOR
        )

    def _split(self, t: torch.Tensor):
        T = self.num_experts
        return t[..., :T], t[..., T:]

    def log_prob(self, y, f):
        fe, a = self._split(f)
        comp = gaussian_expected_log_lik(y[..., None], fe, torch.zeros_like(fe), self.expert_noise)
        return torch.logsumexp(torch.log_softmax(a, -1) + comp, -1)

    def expected_log_prob(self, y, mean, var, num_samples: int | None = None):
        """The bound above per point ``(B,)`` (a Monte Carlo estimate over the gates)."""
        mf, ma = self._split(mean)
        vf, va = self._split(var)
        ell = gaussian_expected_log_lik(y[..., None], mf, vf, self.expert_noise)  # (B, T)
        S = num_samples or self.num_samples
        eps = torch.randn((S,) + tuple(ma.shape), dtype=ma.dtype, device=ma.device)
        a = ma + va.sqrt() * eps  # (S, B, T)
        if self.estimator == "analytic" or self.num_experts == 1:
            return mixture_inner(torch.log_softmax(a, -1), ell).mean(0)
        w = torch.distributions.RelaxedOneHotCategorical(
            torch.tensor(self.temperature, dtype=a.dtype, device=a.device), logits=a
        ).rsample()
        return torch.logsumexp((w * ell).sum(-1), dim=0) - math.log(S)

    def gate_probabilities(self, mean, var) -> torch.Tensor:
        """``pi_t = E_{q(a)}[softmax(a)_t]`` ``(B, T)`` by Monte Carlo (fixed generator)."""
        _, ma = self._split(mean)
        _, va = self._split(var)
        gen = torch.Generator(device="cpu")
        gen.manual_seed(1234)
        eps = torch.randn((self.num_gate_samples,) + tuple(ma.shape), generator=gen)
        a = ma + va.sqrt() * eps.to(ma)
        return torch.softmax(a, -1).mean(0)

    def predictive_mixture(self, mean, var):
        """The T-component predictive: log weights, means, variances ``(B, T)``."""
        mf, _ = self._split(mean)
        vf, _ = self._split(var)
        pi = self.gate_probabilities(mean, var)
        return pi.clamp_min(1e-300).log(), mf, vf + self.expert_noise

    def predictive_log_density(self, y, mean, var, num_samples: int = 0):
        return mixture_log_density(y, *self.predictive_mixture(mean, var))

    def predictive_moments(self, mean, var):
        log_w, m, v = self.predictive_mixture(mean, var)
        return mixture_moments(log_w.exp(), m, v)

    def _config_args(self):
        return {
            "num_experts": self.num_experts,
            "noise_variance": self.noise_variance,
            "num_samples": self.num_samples,
            "estimator": self.estimator,
            "temperature": self.temperature,
            "num_gate_samples": self.num_gate_samples,
        }
