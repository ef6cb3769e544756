"""SVHGP: the heteroscedastic baseline of seed 003 as a convenience class.

``SVHGP(...)`` is ``SVGP(likelihood=HeteroscedasticGaussian())`` (two latent GPs: the mean f
and the noise log-variance g) plus the mixture predictive functions shared by the modulated
GPs (``predict_density``, ``predict_samples``, ``predict_quantiles``, ``nlpd_kde``).
"""

from __future__ import annotations

import torch

from ...likelihoods.heteroscedastic import HeteroscedasticGaussian
from ...validation import keyword_only_after_first
from ..base import register_model
from ..svgp import SVGP
from .base import MixturePredictive


@register_model
class SVHGP(MixturePredictive, SVGP):
    """Sparse variational heteroscedastic GP: ``y ~ N(f(x), exp(g(x) + b))``.

    Parameters are those of :class:`~latentgp.SVGP` except ``likelihood`` (fixed to
    :class:`~latentgp.likelihoods.HeteroscedasticGaussian`) and ``num_latent`` (2).
    Inducing inputs are separate for f and g by default.
    """

    @keyword_only_after_first()
    def __init__(
        self,
        num_inducing: int = 100,
        *,
        kernel="rbf",
        likelihood=None,
        shared_inducing: bool = False,
        normalize_y: bool = True,
        device=None,
        dtype=None,
        **svgp_kwargs,
    ) -> None:
        if likelihood is None:
            likelihood = HeteroscedasticGaussian()
        if not isinstance(likelihood, HeteroscedasticGaussian):
            raise ValueError("SVHGP needs a HeteroscedasticGaussian likelihood")
        svgp_kwargs.pop("num_latent", None)
        super().__init__(
            num_inducing=num_inducing,
            likelihood=likelihood,
            kernel=kernel,
            shared_inducing=shared_inducing,
            normalize_y=normalize_y,
            device=device,
            dtype=dtype,
            **svgp_kwargs,
        )

    def _default_fit_args(self, N):
        return {"optimizer": "adam", "lr": 0.005, "batch_size": min(N, 512), "max_steps": 2000}

    def predict_f(self, X, chunk_size=None, as_numpy=True):
        """Marginals of the two latents at ``X``: ``(N, 2)`` means and variances, column 0
        the mean function f in target units, column 1 the log-variance g in log target
        units squared (standardisation adds ``2 log s`` to g and leaves its variance)."""
        self._require_built()
        m, v = self._latent_raw(self._check_X(X), chunk_size)
        if self._uses_scaling():
            s, mu = self.y_scale[0], self.y_mean[0]
            m = torch.stack([m[:, 0] * s + mu, m[:, 1] + 2.0 * torch.log(s)], 1)
            v = torch.stack([v[:, 0] * s**2, v[:, 1]], 1)
        return self._to_output(m, as_numpy), self._to_output(v, as_numpy)

    def get_config(self):
        cfg = super().get_config()
        cfg.pop("num_latent", None)
        return cfg
