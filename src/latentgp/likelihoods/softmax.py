"""Softmax (multinomial logit) likelihood over C latent functions; labels 0..C-1."""

from __future__ import annotations

import torch

from .base import Likelihood, register


@register("softmax", "multiclass", "categorical")
class Softmax(Likelihood):
    """``p(y = c | f) = exp(f_c) / sum_k exp(f_k)`` with ``f`` of shape ``(..., N, C)``.

    ``num_classes``: C; ``None`` (the default, and what ``likelihood="softmax"`` gives)
    takes ``C = max(label) + 1`` from the training labels when the model is built.
    ``predict_y`` returns class probabilities ``(N, C)`` as its mean.
    """

    task = "multiclass"

    def __init__(self, num_classes: int | None = None) -> None:
        super().__init__()
        if num_classes is not None and (
            isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2
        ):
            raise ValueError(f"Softmax needs an integer num_classes >= 2, got {num_classes!r}")
        self.num_classes = num_classes

    @property
    def latent_dim(self) -> int:  # type: ignore[override]
        """C latent functions, one per class."""
        if self.num_classes is None:
            raise ValueError(
                "Softmax() takes its number of classes from the training labels: fit the "
                "model first, or pass Softmax(num_classes=C)"
            )
        return self.num_classes

    def adapt_to_targets(self, y: torch.Tensor) -> None:
        """Take ``C = max(label) + 1`` (at least 2) from the labels when not given."""
        if self.num_classes is not None:
            return
        self._check_labels(y, None, "y")
        self.num_classes = max(2, int(y.max().item()) + 1)

    def validate_targets(self, y, name="y"):
        return self._check_labels(y, self.num_classes, name)

    def _check_labels(self, y, C: int | None, name: str):
        bad = (y < 0) | (y != torch.round(y))
        if C is not None:
            bad = bad | (y >= C)
        if bool(bad.any()):
            i = int(torch.nonzero(bad.reshape(-1))[0, 0])
            what = f"0..{C - 1} for a {C}-class softmax likelihood" if C else "0, 1, 2, ..."
            raise ValueError(
                f"{name} must hold integer class labels {what}; found "
                f"{y.reshape(-1)[i].item():g} at row {i}"
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
