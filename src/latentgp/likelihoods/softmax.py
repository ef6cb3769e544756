"""Softmax (multinomial logit) likelihood over C latent functions; labels 0..C-1."""

from __future__ import annotations

import torch

from .base import Likelihood, register


@register("softmax", "multiclass", "categorical")
class Softmax(Likelihood):
    """``p(y = c | f) = exp(f_c) / sum_k exp(f_k)`` with ``f`` of shape ``(..., N, C)``.

    ``predict_y`` returns class probabilities ``(N, C)`` as its mean.
    """

    task = "multiclass"

    def __init__(self, num_classes: int = 2) -> None:
        super().__init__()
        if int(num_classes) < 2:
            raise ValueError(f"Softmax needs num_classes >= 2, got {num_classes}")
        self.num_classes = int(num_classes)
        self.latent_dim = self.num_classes

    def validate_targets(self, y, name="y"):
        bad = (y < 0) | (y >= self.num_classes) | (y != torch.round(y))
        if bool(bad.any()):
            i = int(torch.nonzero(bad.reshape(-1))[0, 0])
            raise ValueError(
                f"{name} must hold integer class labels 0..{self.num_classes - 1} for a "
                f"{self.num_classes}-class softmax likelihood; found {y.reshape(-1)[i].item():g} "
                f"at row {i}"
            )
        return y

    def log_prob(self, y, f):
        idx = y.long().expand(f.shape[:-1])[..., None]
        return torch.gather(f, -1, idx)[..., 0] - torch.logsumexp(f, -1)

    def conditional_mean(self, f):
        return torch.softmax(f, -1)

    def conditional_variance(self, f):
        p = torch.softmax(f, -1)
        return p * (1 - p)

    def predictive_moments(self, mean, var):
        f = self._mc_points(mean, var, 512, fixed=True)
        p = torch.softmax(f, -1).mean(0)
        return p, p * (1 - p)

    def sample_y(self, f):
        return torch.distributions.Categorical(logits=f).sample().to(f.dtype)

    def _config_args(self):
        return {"num_classes": self.num_classes}
