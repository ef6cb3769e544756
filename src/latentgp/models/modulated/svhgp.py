"""SVHGP: the heteroscedastic baseline of seed 003 as a convenience class.

``SVHGP(...)`` is ``SVGP(likelihood=HeteroscedasticGaussian())`` (two latent GPs: the mean f
and the noise log-variance g) plus the mixture predictive functions shared by the modulated
GPs (``predict_density``, ``predict_samples``, ``predict_quantiles``, ``nlpd_kde``).
"""

from __future__ import annotations

from ...likelihoods.heteroscedastic import HeteroscedasticGaussian
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

    def __init__(
        self,
        num_inducing: int = 100,
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

    def get_config(self):
        cfg = super().get_config()
        cfg.pop("num_latent", None)
        return cfg

    def _predictive_mixture(self, X, cache):
        m, v = self._predict_f_chunk(X, cache)
        return self.likelihood._mixture(m, v)
