"""SHGP: scalable heteroscedastic and non-stationary GP (seed 003, eqs. 6-11).

    y(x) = exp(w(x)) f(x) + eps(x),   eps(x) ~ N(0, c exp(2 w(x))),
    f ~ GP(0, k_f),   w = mu0 + g,   g ~ GP(0, k_w),

is SVGP with two latent GPs (index 0: f, index 1: g; separate inducing inputs, a kernel
with batch shape (2,)) and the
:class:`~latentgp.likelihoods.ScaleModulatedGaussian` likelihood, whose analytic expected
log likelihood (eq. 10) and Gauss-Hermite predictive (eq. 11) live with the likelihood.
This class adds the mixture-predictive functions of the modulated GPs and reads model
files written when SHGP was a model of its own (``w_mean`` then belonged to the model).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from ...likelihoods import Gaussian, ScaleModulatedGaussian
from ...likelihoods.scale_modulated import shgp_expected_log_lik
from ...validation import keyword_only_after_first
from ..base import register_model
from ..predict import chunked
from ..svgp import SVGP
from .composed import ModulatedSVGP


@register_model
class SHGP(ModulatedSVGP):
    """Scalable heteroscedastic GP: y = exp(w) f + noise with variance c exp(2w).

    Parameters
    ----------
    num_inducing: M, for each of the two GPs (f and w).
    kernel: kernel name or object (default ``"rbf"``; an SVGP keyword, as those below);
        built with batch shape (2,) (separate hyperparameters for f and w).
    noise_variance: initial c (scaled-target units).
    num_quadrature: Gauss-Hermite points in w for the predictive density.
    likelihood: a :class:`~latentgp.likelihoods.ScaleModulatedGaussian` instead of the
        two arguments above.
    Other keywords are those of :class:`~latentgp.SVGP` (``Z``, ``learn_inducing``,
    ``shared_inducing`` (default False), ``normalize_y``, ``device``, ...), except
    ``num_latent`` (2) and ``covariance`` (full).
    """

    @keyword_only_after_first(
        legacy=("kernel", "noise_variance", "num_quadrature", "normalize_y", "likelihood",
                "device", "dtype")
    )
    def __init__(
        self,
        num_inducing: int = 100,
        *,
        noise_variance: float = 1.0,
        num_quadrature: int = 32,
        likelihood: Any = None,
        **svgp_kwargs,
    ) -> None:
        if not isinstance(noise_variance, (int, float)) or not noise_variance > 0:
            raise ValueError(f"noise_variance must be a positive number, got {noise_variance!r}")
        plain_gaussian = isinstance(likelihood, Gaussian) and not isinstance(
            likelihood, ScaleModulatedGaussian
        )
        if likelihood is None:
            likelihood = ScaleModulatedGaussian(
                float(noise_variance), num_quadrature=num_quadrature
            )
        elif plain_gaussian:
            warnings.warn(
                "SHGP(likelihood=Gaussian(variance=c)) is deprecated: write "
                "SHGP(noise_variance=c) or likelihood=ScaleModulatedGaussian(c)",
                DeprecationWarning,
                stacklevel=2,
            )
            likelihood = ScaleModulatedGaussian(
                float(likelihood.variance.detach()), num_quadrature=num_quadrature
            )
        if not isinstance(likelihood, ScaleModulatedGaussian):
            raise ValueError("SHGP needs a ScaleModulatedGaussian likelihood")
        self._compose(num_inducing, likelihood, 2, svgp_kwargs)

    #: closed-form predictive moments (eq. 11), not the moments of the quadrature mixture
    predict_y = SVGP.predict_y

    @classmethod
    def from_config(cls, cfg, device=None):
        """Also reads the configuration of files written before SHGP was a composition
        (a Gaussian likelihood plus ``noise_variance`` and ``num_quadrature``)."""
        cfg = dict(cfg)
        old_noise = cfg.pop("noise_variance", None)
        old_nq = cfg.pop("num_quadrature", None)
        if cfg.get("likelihood", {}).get("type") == "Gaussian":
            cfg["likelihood"] = {
                "type": "ScaleModulatedGaussian",
                "variance": cfg["likelihood"].get("variance", old_noise or 1.0),
                "min_variance": cfg["likelihood"].get("min_variance", 1e-6),
                "num_quadrature": old_nq or 32,
            }
        return super().from_config(cfg, device)

    @classmethod
    def upgrade_state(cls, state: dict, expected: dict | None = None) -> dict:
        """Tensors of files written before SHGP was a composition: the offset of w was the
        model's ``w_mean``; it is now the likelihood's."""
        state = dict(state)
        if "w_mean" in state:
            state["likelihood.w_mean"] = state.pop("w_mean")
        return state

    @property
    def c(self) -> torch.Tensor:
        """The noise scale c (scaled units)."""
        return self.likelihood.variance

    @property
    def w_mean(self) -> torch.Tensor:
        """The prior mean mu0 of w."""
        return self.likelihood.w_mean



    def noise_std(self, X, chunk_size=None) -> np.ndarray:
        """Posterior-mean noise standard deviation sqrt(c) E[e^w] at ``X``, original units."""
        self._require_built()
        cache = self.prediction_cache()
        rows = self.prediction_chunk_rows(chunk_size)

        def sd(xc):
            return self.likelihood.noise_std(*self._predict_f_chunk(xc, cache))

        (out,) = chunked(sd, self._check_X(X), rows=rows)
        if self._uses_scaling():
            out = out * self.y_scale[0]
        return out.cpu().numpy()


__all__ = ["SHGP", "shgp_expected_log_lik"]
