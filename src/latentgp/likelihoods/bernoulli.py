"""Bernoulli likelihood for binary labels ``y in {0, 1}`` with a logit or probit link."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.special import log_ndtr, ndtr

from .base import Likelihood, register


@register("bernoulli", "logit", "logistic", "probit", "binary")
class Bernoulli(Likelihood):
    """``p(y = 1 | f) = sigma(f)`` (logit) or ``Phi(f)`` (probit).

    ``predict_y`` reports ``P(y = 1)`` as the predictive mean.
    """

    task = "binary"

    def __init__(self, link: str = "logit") -> None:
        super().__init__()
        link = link.lower()
        if link not in ("logit", "probit"):
            raise ValueError(f"Bernoulli link must be 'logit' or 'probit', got {link!r}")
        self.link = link

    def validate_targets(self, y, name="y"):
        bad = (y != 0) & (y != 1)
        if bool(bad.any()):
            i = int(torch.nonzero(bad)[0, 0])
            raise ValueError(
                f"{name} must hold binary labels 0 or 1 for a Bernoulli likelihood; "
                f"found {y.reshape(-1)[i].item():g} at row {i} (the sklearn GPClassifier maps "
                "arbitrary labels for you)"
            )
        return y

    def _log_p1(self, f):
        return log_ndtr(f) if self.link == "probit" else -F.softplus(-f)

    def log_prob(self, y, f):
        sign = 2.0 * y - 1.0
        return self._log_p1(sign * f)

    def conditional_mean(self, f):
        return ndtr(f) if self.link == "probit" else torch.sigmoid(f)

    def conditional_variance(self, f):
        p = self.conditional_mean(f)
        return p * (1 - p)

    def predictive_moments(self, mean, var):
        if self.link == "probit":
            p = ndtr(mean / torch.sqrt(1.0 + var))
        else:
            f, w = self._gh_points(mean, var)
            p = (w * torch.sigmoid(f)).sum(0)
        return p, p * (1 - p)

    def predictive_log_density(self, y, mean, var, num_samples: int = 0):
        if self.link == "probit":
            return log_ndtr((2.0 * y - 1.0) * mean / torch.sqrt(1.0 + var))
        return super().predictive_log_density(y, mean, var)

    def sample_y(self, f):
        return torch.bernoulli(self.conditional_mean(f))

    def _config_args(self):
        return {"link": self.link}
