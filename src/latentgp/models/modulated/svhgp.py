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
from .composed import ModulatedSVGP


@register_model
class SVHGP(ModulatedSVGP):
    """Sparse variational heteroscedastic GP: ``y ~ N(f(x), exp(g(x) + b))``.

    Parameters are those of :class:`~latentgp.SVGP` except ``likelihood`` (a
    :class:`~latentgp.likelihoods.HeteroscedasticGaussian`, the default) and
    ``num_latent`` (2).  Inducing inputs are separate for f and g by default.
    """

    fixed_arguments = ("num_latent",)
    single_output = False

    @keyword_only_after_first(
        legacy=("kernel", "likelihood", "shared_inducing", "normalize_y", "device", "dtype")
    )
    def __init__(
        self,
        num_inducing: int = 100,
        *,
        likelihood=None,
        **svgp_kwargs,
    ) -> None:
        if likelihood is None:
            likelihood = HeteroscedasticGaussian()
        if not isinstance(likelihood, HeteroscedasticGaussian):
            raise ValueError("SVHGP needs a HeteroscedasticGaussian likelihood")
        self._compose(num_inducing, likelihood, 2, svgp_kwargs)

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
