"""Dirichlet-based GP classification (Milios et al. 2018): classification as C
heteroscedastic GP regressions in log space.

Each label ``y in {0..C-1}`` is read as the pseudo-counts ``alpha_c = alpha_eps + [y = c]``
of a Dirichlet over class probabilities, which is the normalisation of independent
``Gamma(alpha_c, 1)`` draws; each Gamma is approximated by a log-normal with the same
mean and variance:

    sigma_c^2 = log(1 / alpha_c + 1),    y~_c = log(alpha_c) - sigma_c^2 / 2,

so that ``y~_c ~ N(f_c, sigma_c^2)`` with a latent GP ``f_c`` per class: a Gaussian
likelihood with known per-point, per-class noise, whose expected log-likelihood is in
closed form.  Class probabilities are ``E[exp(f_c) / sum_k exp(f_k)]`` under the latent
posterior, the softmax of Gaussian latents (:class:`~latentgp.likelihoods.Softmax`'s
class-symmetric Monte Carlo).  ``alpha_eps`` (default 0.01) sets how far from the
label's class the regression targets lie (``y~ = -6.9`` for the other classes,
``-0.33`` for the label's); a constant prior mean per class (``mean="constant"``) lets
the GPs start from that level.
"""

from __future__ import annotations

import math

import torch

from ..constants import LOG_2PI
from .base import register
from .softmax import Softmax


@register("dirichlet", "dirichletclassification")
class DirichletClassification(Softmax):
    """Dirichlet-based classification likelihood (see module docstring).

    num_classes: C (None: from the labels, as :class:`Softmax`).  alpha_eps: the
    Dirichlet's prior pseudo-count for every class (positive).  ``predict_y`` returns class
    probabilities ``(N, C)``; ``log_predictive_density`` is ``log P(y = label)`` under
    them (the classification density, not the Gaussian surrogate's).
    """

    deterministic_expectation = True  # closed-form expected log likelihood

    def __init__(
        self,
        num_classes: int | None = None,
        alpha_eps: float = 0.01,
        predictive_samples: int = 1024,
    ) -> None:
        super().__init__(num_classes, predictive_samples)
        if isinstance(alpha_eps, bool) or not isinstance(alpha_eps, (int, float)) or not (
            math.isfinite(alpha_eps) and alpha_eps > 0
        ):
            raise ValueError(f"alpha_eps must be a positive finite number, got {alpha_eps!r}")
        self.alpha_eps = float(alpha_eps)

    def regression_targets(self, y: torch.Tensor, C: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The transformed targets ``y~`` and noise variances ``sigma^2``, ``(..., N, C)``
        each, of labels ``y`` ``(..., N)``."""
        onehot = torch.nn.functional.one_hot(y.long(), C).to(y.dtype)
        alpha = self.alpha_eps + onehot
        var = torch.log1p(1.0 / alpha)
        return torch.log(alpha) - 0.5 * var, var

    def log_prob(self, y, f):
        """``sum_c log N(y~_c | f_c, sigma_c^2)`` for ``f`` ``(..., N, C)``."""
        target, var = self.regression_targets(y, f.shape[-1])
        return -0.5 * (LOG_2PI + var.log() + (target - f) ** 2 / var).sum(-1)

    def expected_log_prob(self, y, mean, var):
        """Closed form: ``sum_c -1/2 [log(2 pi s_c^2) + ((y~_c - m_c)^2 + v_c) / s_c^2]``."""
        target, noise = self.regression_targets(y, mean.shape[-1])
        return -0.5 * (LOG_2PI + noise.log() + ((target - mean) ** 2 + var) / noise).sum(-1)

    def predictive_log_density(self, y, mean, var, num_samples: int | None = None):
        """``log P(y = label)`` under :meth:`predictive_moments`' class probabilities."""
        p, _ = self.predictive_moments(mean, var)
        idx = y.long().reshape(p.shape[:-1] + (1,))
        return torch.gather(p, -1, idx)[..., 0].clamp_min(1e-300).log()

    def _config_args(self):
        return {**super()._config_args(), "alpha_eps": self.alpha_eps}
