"""Softmax (multinomial logit) likelihood over C latent functions; labels 0..C-1."""

from __future__ import annotations

import torch

from .base import Likelihood, normal_points, register


@register("softmax", "multiclass", "categorical")
class Softmax(Likelihood):
    """``p(y = c | f) = exp(f_c) / sum_k exp(f_k)`` with ``f`` of shape ``(..., N, C)``.

    ``num_classes``: C; ``None`` (the default, and what ``likelihood="softmax"`` gives)
    takes ``C = max(label) + 1`` from the training labels when the model is built.
    ``predictive_samples``: Monte Carlo draws behind the class probabilities (see
    :meth:`predictive_moments` for their accuracy).
    ``expectation_points``: how the training objective's ``E_q[log p(y | f)]`` is
    integrated.  ``None`` (the default): Monte Carlo with ``config.num_mc_samples``
    fresh draws at every call, an unbiased but noisy objective for stochastic optimisers.
    An integer S: a fixed rule of 2S points (S scrambled Sobol points in C dimensions
    and their negatives, :func:`~latentgp.likelihoods.normal_points`) shared by every
    row, so the objective is a deterministic function of the parameters
    (:attr:`deterministic_expectation` is True) and full-batch L-BFGS with a line search
    can train on it; only ``E_q[logsumexp f]`` is integrated (``E_q[f_y]`` is the mean).
    ``predict_y`` returns class probabilities ``(N, C)`` as its mean.
    """

    task = "multiclass"
    def __init__(
        self,
        num_classes: int | None = None,
        predictive_samples: int = 1024,
        expectation_points: int | None = None,
    ) -> None:
        super().__init__()
        if expectation_points is not None and (
            isinstance(expectation_points, bool) or not isinstance(expectation_points, int)
            or expectation_points < 1
        ):
            raise ValueError(
                f"expectation_points must be None or a positive integer, got {expectation_points!r}"
            )
        self.expectation_points = expectation_points
        if isinstance(predictive_samples, bool) or not isinstance(predictive_samples, int) or (
            predictive_samples < 1
        ):
            raise ValueError(
                f"predictive_samples must be a positive integer, got {predictive_samples!r}"
            )
        self.predictive_samples = predictive_samples
        if num_classes is not None and (
            isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2
        ):
            raise ValueError(f"Softmax needs an integer num_classes >= 2, got {num_classes!r}")
        self.num_classes = num_classes

    @property
    def deterministic_expectation(self) -> bool:  # type: ignore[override]
        """True with ``expectation_points`` (a fixed rule), False for Monte Carlo."""
        return self.expectation_points is not None

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

    def expected_log_prob(self, y, mean, var):
        """``E_q[f_y] - E_q[logsumexp f]`` per point ``(...,)`` for marginals ``mean``,
        ``var`` ``(..., N, C)``: Monte Carlo without ``expectation_points``, else the
        fixed rule of the class docstring (the same points for every row and call)."""
        if self.expectation_points is None:
            return super().expected_log_prob(y, mean, var)
        C = mean.shape[-1]
        z = normal_points(self.expectation_points, C, mean.dtype, mean.device)
        z = z.reshape((z.shape[0],) + (1,) * (mean.ndim - 1) + (C,))
        f = mean + var.clamp_min(0).sqrt() * z
        idx = y.long().expand(mean.shape[:-1])[..., None]
        return torch.gather(mean, -1, idx)[..., 0] - torch.logsumexp(f, -1).mean(0)

    def conditional_mean(self, f):
        return torch.softmax(f, -1)

    def conditional_variance(self, f):
        p = torch.softmax(f, -1)
        return p * (1 - p)

    def predictive_moments(self, mean, var):
        """Class probabilities ``E_q[softmax(f)]`` ``(N, C)`` (and their Bernoulli
        variances) by Monte Carlo with ``predictive_samples`` draws from a fixed seed,
        each used under all C cyclic shifts of the classes: the estimate is exactly
        symmetric in the classes (equal marginals give exactly 1/C each) and its standard
        error is at most ``0.5 / sqrt(C * predictive_samples)`` per probability (about
        0.007 for three classes and the default 1,024 draws)."""
        S = self.predictive_samples
        g = torch.Generator().manual_seed(20231)
        eps = torch.randn((S,) + (1,) * (mean.ndim - 1) + tuple(mean.shape[-1:]), generator=g,
                          dtype=mean.dtype).to(mean.device)
        sd = var.clamp_min(0).sqrt()
        C = mean.shape[-1]
        p = torch.zeros_like(mean)
        for r in range(C):
            p = p + torch.softmax(mean + sd * torch.roll(eps, r, dims=-1), -1).mean(0)
        p = p / C
        return p, p * (1 - p)

    def sample_y(self, f):
        return torch.distributions.Categorical(logits=f).sample().to(f.dtype)

    def _config_args(self):
        args = {"num_classes": self.num_classes, "predictive_samples": self.predictive_samples}
        if self.expectation_points is not None:  # files of Monte Carlo softmaxes unchanged
            args["expectation_points"] = self.expectation_points
        return args
