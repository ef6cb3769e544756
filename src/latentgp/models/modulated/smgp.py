"""SMGP: scalable mixture of T GP experts with GP gating (seed 003, eqs. 12-17).

SVGP with 2T latent GPs (experts ``f^t``: indices 0..T-1; gating logits ``a^t``:
T..2T-1; separate inducing inputs, a kernel with batch shape (2T,)) and the
:class:`~latentgp.likelihoods.GaussianExperts` likelihood, which holds the bound with
the assignment marginalised exactly, its estimators and the predictive mixture.  This
class adds the mixture-predictive functions of the modulated GPs, breaks the symmetry
between experts at initialisation, and reads model files written when SMGP was a model
of its own (the expert noises then belonged to the model).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from ...likelihoods import GaussianExperts
from ...likelihoods.experts import gaussian_expected_log_lik, mixture_inner
from ...validation import check_positive_int, keyword_only_after_first
from ..base import register_model
from ..predict import chunked
from .composed import ModulatedSVGP


@register_model
class SMGP(ModulatedSVGP):
    """Scalable mixture of GP experts.

    Parameters
    ----------
    num_experts: T.
    num_inducing: M per GP (2T GPs).
    likelihood: a :class:`~latentgp.likelihoods.GaussianExperts` with T experts instead
        of the five options below, which configure the default one (their defaults are
        its own):
    num_samples: S draws of the gating logits per point in the objective (10).
    estimator: ``"analytic"`` (log-sum-exp, default) or ``"concrete"`` (paper).
    temperature: Concrete relaxation temperature (paper: 0.01).
    noise_variance: initial expert noise variances (scaled units; 0.1).
    num_gate_samples: draws used for the predictive mixture weights (1000).
    Other keywords are those of :class:`~latentgp.SVGP` (``kernel``, built with batch
    shape (2T,), ``Z``, ``learn_inducing``,
    ``shared_inducing`` (default False), ``normalize_y``, ``device``, ...), except
    ``num_latent`` (2T) and ``covariance`` (full).
    """

    #: SMGP's keywords that configure its :class:`~latentgp.likelihoods.GaussianExperts`
    #: likelihood (their defaults are the likelihood's)
    LIKELIHOOD_OPTIONS = (
        "num_samples", "estimator", "temperature", "noise_variance", "num_gate_samples",
    )

    @keyword_only_after_first(
        legacy=("num_inducing", "kernel", "num_samples", "estimator", "temperature",
                "noise_variance", "num_gate_samples", "normalize_y", "likelihood", "device",
                "dtype")
    )
    def __init__(
        self,
        num_experts: int = 4,
        *,
        num_inducing: int = 100,
        likelihood: Any = None,
        **options: Any,
    ) -> None:
        """``options``: the keywords of :attr:`LIKELIHOOD_OPTIONS` (to the likelihood) and
        those of :class:`~latentgp.SVGP` (to the composition)."""
        T = check_positive_int(num_experts, "num_experts")
        expert_options = {k: options.pop(k) for k in self.LIKELIHOOD_OPTIONS if k in options}
        if likelihood is not None and not isinstance(likelihood, GaussianExperts):
            warnings.warn(
                "SMGP(likelihood=...) is ignored: the experts' Gaussian noise variances are "
                "the model's own parameters (set their initial value with noise_variance=); "
                "the argument will be removed",
                DeprecationWarning,
                stacklevel=2,
            )
            likelihood = None
        if likelihood is None:
            likelihood = GaussianExperts(T, **expert_options)
        elif expert_options:
            raise ValueError(
                f"SMGP got a GaussianExperts likelihood and {', '.join(expert_options)}: "
                "give those options to the likelihood"
            )
        if likelihood.num_experts != T:
            raise ValueError(f"the likelihood has {likelihood.num_experts} experts, not {T}")
        self._compose(num_inducing, likelihood, 2 * T, options)

    @property
    def num_experts(self) -> int:
        return self.likelihood.num_experts

    def _init_from_data(self, X, y):
        super()._init_from_data(X, y)
        with torch.no_grad():  # break the symmetry between experts
            self.q.q_mu[: self.num_experts].normal_(0.0, 0.5)

    def get_config(self):
        cfg = super().get_config()
        cfg["num_experts"] = self.num_experts
        return cfg

    @classmethod
    def from_config(cls, cfg, device=None):
        """Also reads the configuration of files written before SMGP was a composition."""
        cfg = dict(cfg)
        old = {k: cfg.pop(k) for k in ("num_samples", "estimator", "temperature",
                                       "noise_variance", "num_gate_samples") if k in cfg}
        if cfg.get("likelihood", {}).get("type") != "GaussianExperts":
            cfg["likelihood"] = {"type": "GaussianExperts", "num_experts": cfg["num_experts"],
                                 **old}
        return super().from_config(cfg, device)

    @classmethod
    def upgrade_state(cls, state: dict, expected: dict | None = None) -> dict:
        """Tensors of files written before SMGP was a composition: the expert noises were
        the model's ``raw_expert_noise``, and an unused Gaussian likelihood was stored."""
        state = dict(state)
        if "raw_expert_noise" in state:
            for key in [k for k in state if k.startswith("likelihood.")]:
                del state[key]
            state["likelihood.raw_expert_noise"] = state.pop("raw_expert_noise")
        return state

    @property
    def raw_expert_noise(self) -> torch.nn.Parameter:
        """The likelihood's raw (softplus) expert noise variances ``(T,)``."""
        return self.likelihood.raw_expert_noise

    @property
    def expert_noise(self) -> torch.Tensor:
        """``(T,)`` noise variances nu^t (scaled units)."""
        return self.likelihood.expert_noise

    def expert_terms(self, X, y, Lzz) -> torch.Tensor:
        """``l_i^t`` ``(B, T)``: the experts' expected log likelihoods."""
        m, v = self._marginals(X, Lzz)
        T = self.num_experts
        return gaussian_expected_log_lik(y[:, None], m[:, :T], v[:, :T], self.expert_noise)

    def data_term(self, X, y, Lzz, num_samples: int | None = None) -> torch.Tensor:
        """Per-point estimate of the data term of the bound, ``(B,)``."""
        m, v = self._marginals(X, Lzz)
        return self.likelihood.expected_log_prob(y, m, v, num_samples)

    def gate_probabilities(self, X: Any) -> np.ndarray:
        """``pi_t = E_{q(a)}[softmax(a)_t]`` ``(N, T)`` at ``X`` (Monte Carlo, fixed draws)."""
        self._require_built()
        cache = self.prediction_cache()

        def gates(xc):
            return self.likelihood.gate_probabilities(*self._predict_f_chunk(xc, cache))

        (pi,) = chunked(gates, self._check_X(X), rows=self.prediction_chunk_rows(None))
        return pi.cpu().numpy()




__all__ = ["SMGP", "gaussian_expected_log_lik", "mixture_inner"]
