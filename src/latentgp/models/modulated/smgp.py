"""SMGP: scalable mixture of T GP experts with GP gating (seed 003, eqs. 12-17).

Experts ``f^t`` (GP indices 0..T-1) with noise variances ``nu^t``; gating logits ``a^t``
(indices T..2T-1); assignment ``w_i ~ Mult(softmax(a_i))``.  With the expert terms

    l_i^t = E_{q(f_i^t)}[log N(y_i | f_i^t, nu^t)]     (closed form),

the marginalised bound (eq. 17) has an exact inner expectation over the assignment
(notes §2.3):

    L = sum_i E_{q(a_i)}[ logsumexp_t( log softmax(a_i)_t + l_i^t ) ] - KL_f - KL_a,

and only the Gaussian expectation over a_i is estimated, by ``num_samples``
reparameterised draws (``estimator="analytic"``, default).  ``estimator="concrete"`` is
the paper's/code's estimator for comparison: per point
``logsumexp_s( sum_t w_{i,t}^s l_i^t ) - log S`` with ``a_i^s ~ q(a_i)`` and
``w_i^s ~ Concrete(softmax(a_i^s), temperature)``.

Predictive: ``p(y*) = sum_t pi_t N(y* | m_t, v_t + nu^t)`` with
``pi_t = E_{q(a*)}[softmax(a*)_t]`` (Monte Carlo, a fixed generator).
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import nn

from ...constants import LOG_2PI
from ...parameters import inv_softplus, softplus
from ...validation import check_positive_int, keyword_only_after_first
from ..base import register_model
from .base import ModulatedGP


def gaussian_expected_log_lik(y, mean, var, noise):
    """``E_{N(f|mean,var)}[log N(y | f, noise)]``, broadcasting (``y`` ``(B, 1)``)."""
    return -0.5 * (LOG_2PI + noise.log() + ((y - mean) ** 2 + var) / noise)


def mixture_inner(log_pi: torch.Tensor, ell: torch.Tensor) -> torch.Tensor:
    """``log E_{w ~ Mult(pi)}[exp(sum_t w_t l_t)] = logsumexp_t(log pi_t + l_t)``, last axis."""
    return torch.logsumexp(log_pi + ell, dim=-1)


@register_model
class SMGP(ModulatedGP):
    """Scalable mixture of GP experts.

    Parameters
    ----------
    num_experts: T.
    num_inducing: M per GP (2T GPs).
    num_samples: S draws of the gating logits per point in the objective.
    estimator: ``"analytic"`` (log-sum-exp, default) or ``"concrete"`` (paper).
    temperature: Concrete relaxation temperature (paper: 0.01).
    noise_variance: initial expert noise variances (scaled units).
    num_gate_samples: draws used for the predictive mixture weights.
    """

    @keyword_only_after_first()
    def __init__(
        self,
        num_experts: int = 4,
        *,
        num_inducing: int = 100,
        kernel="rbf",
        num_samples: int = 10,
        estimator: str = "analytic",
        temperature: float = 0.01,
        noise_variance: float = 0.1,
        num_gate_samples: int = 1000,
        normalize_y: bool = True,
        likelihood=None,
        device=None,
        dtype=None,
    ) -> None:
        if likelihood is not None:
            warnings.warn(
                "SMGP(likelihood=...) is ignored: the experts' Gaussian noise variances are "
                "the model's own parameters (set their initial value with noise_variance=); "
                "the argument will be removed",
                DeprecationWarning,
                stacklevel=2,
            )
        super().__init__(num_inducing, kernel, "gaussian", normalize_y, device, dtype)
        self.num_experts = check_positive_int(num_experts, "num_experts")
        self.num_samples = check_positive_int(num_samples, "num_samples")
        self.num_gate_samples = check_positive_int(num_gate_samples, "num_gate_samples")
        if estimator not in ("analytic", "concrete"):
            raise ValueError(f"estimator must be 'analytic' or 'concrete', got {estimator!r}")
        if not (isinstance(temperature, (int, float)) and temperature > 0):
            raise ValueError(f"temperature must be a positive number, got {temperature!r}")
        if not (isinstance(noise_variance, (int, float)) and noise_variance > 0):
            raise ValueError(f"noise_variance must be a positive number, got {noise_variance!r}")
        self.estimator, self.temperature = estimator, float(temperature)
        self.noise_variance = float(noise_variance)

    def _num_gps(self):
        return 2 * self.num_experts

    def _build(self, input_dim, output_dim):
        super()._build(input_dim, output_dim)
        raw = inv_softplus(self.noise_variance).to(self.dtype_)
        self.raw_expert_noise = nn.Parameter(raw.expand(self.num_experts).clone())
        self.to(dtype=self.dtype_, device=self.device_)

    def _init_from_data(self, X, y):
        super()._init_from_data(X, y)
        T = self.num_experts
        with torch.no_grad():  # break the symmetry between experts
            self.q.q_mu[:T].normal_(0.0, 0.5)

    @classmethod
    def from_config(cls, cfg, device=None):
        cfg = dict(cfg)
        cfg.pop("likelihood", None)  # files record the unused Gaussian; see __init__
        return super().from_config(cfg, device)

    def get_config(self):
        cfg = super().get_config()
        cfg.update(
            num_experts=self.num_experts,
            num_samples=self.num_samples,
            estimator=self.estimator,
            temperature=self.temperature,
            noise_variance=self.noise_variance,
            num_gate_samples=self.num_gate_samples,
        )
        return cfg

    @property
    def expert_noise(self) -> torch.Tensor:
        """``(T,)`` noise variances nu^t (scaled units)."""
        return softplus(self.raw_expert_noise, 1e-6)

    def _experts_and_gates(self, X, Lzz):
        m, v = self.latent_marginals(X, Lzz)
        T = self.num_experts
        return m[:, :T], v[:, :T], m[:, T:], v[:, T:]

    def expert_terms(self, X, y, Lzz) -> torch.Tensor:
        """``l_i^t`` ``(B, T)``."""
        mf, vf, _, _ = self._experts_and_gates(X, Lzz)
        return gaussian_expected_log_lik(y[:, None], mf, vf, self.expert_noise)

    def data_term(self, X, y, Lzz, num_samples: int | None = None) -> torch.Tensor:
        """Per-point estimate of the data term of the bound, ``(B,)``."""
        mf, vf, ma, va = self._experts_and_gates(X, Lzz)
        ell = gaussian_expected_log_lik(y[:, None], mf, vf, self.expert_noise)  # (B, T)
        S = num_samples or self.num_samples
        eps = torch.randn((S,) + tuple(ma.shape), dtype=ma.dtype, device=ma.device)
        a = ma + va.sqrt() * eps  # (S, B, T)
        if self.estimator == "analytic" or self.num_experts == 1:
            return mixture_inner(torch.log_softmax(a, -1), ell).mean(0)
        w = torch.distributions.RelaxedOneHotCategorical(
            torch.tensor(self.temperature, dtype=a.dtype, device=a.device), logits=a
        ).rsample()
        return torch.logsumexp((w * ell).sum(-1), dim=0) - math.log(S)

    def objective(self, X, y, num_data):
        Lzz = self.prior_factor()
        data = self.data_term(X, y, Lzz)
        return data.sum() * (num_data / X.shape[0]) - self.q.kl(Lzz)

    def gate_probabilities(self, X, Lzz) -> torch.Tensor:
        """``pi_t = E_{q(a)}[softmax(a)_t]`` ``(B, T)`` by Monte Carlo with a fixed generator."""
        _, _, ma, va = self._experts_and_gates(X, Lzz)
        gen = torch.Generator(device="cpu")
        gen.manual_seed(1234)
        eps = torch.randn((self.num_gate_samples,) + tuple(ma.shape), generator=gen)
        a = ma + va.sqrt() * eps.to(ma)
        return torch.softmax(a, -1).mean(0)

    def _predictive_mixture(self, X, Lzz):
        mf, vf, _, _ = self._experts_and_gates(X, Lzz)
        pi = self.gate_probabilities(X, Lzz)
        return pi.clamp_min(1e-300).log(), mf, vf + self.expert_noise
