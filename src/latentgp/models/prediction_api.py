"""The prediction methods every model shares: the prediction cache, chunked latent and
predictive moments, log predictive densities, joint posteriors and samples (a mixin of
:class:`~latentgp.models.base.GPModel`).

The arithmetic is :mod:`latentgp.models.predict`'s (chunking, unscaling, joint samples);
this class holds the methods that run a model's per-chunk function through it.  A model
supplies ``_predict_f_chunk`` (and, where it has them, ``_compute_cache``,
``_predict_f_full`` and ``_chunk_width``).  The host (``GPModel``) provides the model's
state and boundary: ``built``, ``input_dim``, ``dtype_``, ``likelihood``,
``num_latent``, ``y_mean`` / ``y_scale``, ``_cache``, ``_require_built``, ``_check_X``,
``_check_y``, ``_scale_y``, ``_uses_scaling`` and ``_log_scale_sum``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .predict import chunked, joint_samples, rows_per_chunk, unscale_moments

__all__ = ["PredictionAPI"]


class PredictionAPI:
    """Prediction from a built model (see the module docstring); a flat mixin of
    :class:`~latentgp.models.base.GPModel`, whose API page lists these methods."""

    def prediction_cache(self) -> Any:
        """Factors reused across prediction chunks, recomputed when parameters change.

        For the inducing-point models this is (or contains) the conditional's
        :class:`~latentgp.variational.PredictiveCache`; ExactGP keeps its Cholesky factor (a
        :class:`~latentgp.linalg.BlockCholesky`) and ``alpha = (K + s^2 I)^{-1} y``.
        Public so that tools built on a fitted model (e.g. acquisition functions) can
        reuse it; treat it as read-only.

        The cache is keyed on the parameters' *values* (a detached copy taken when it is
        computed), not on their version counters: fused optimisers (``Adam(fused=True)``,
        the loop's default) and writes through ``.data`` change a parameter without
        bumping its version, and a version key then served predictions from parameters
        several hundred steps old to callbacks evaluating during training.  Buffers
        that predictions depend on are the models' own business (they reset
        ``self._cache`` when they change them).  Models without a cache skip the copy.
        """
        if type(self)._compute_cache is PredictionAPI._compute_cache:
            return None
        params = [p.detach() for p in self.parameters()]
        ids = tuple((id(p), p.shape) for p in self.parameters())
        c = self._cache
        if (
            c is not None
            and c[0] == ids
            and all(torch.equal(p, q) for p, q in zip(params, c[1], strict=True))
        ):
            return c[2]
        with torch.no_grad():
            value = self._compute_cache()
        self._set_prediction_cache(value)
        return value

    def _set_prediction_cache(self, value: Any) -> None:
        """Keep ``value`` as the prediction cache of the current parameter values (for a
        model that has its factors already, e.g. from a rank-k update)."""
        params = list(self.parameters())
        ids = tuple((id(p), p.shape) for p in params)
        self._cache = (ids, [p.detach().clone() for p in params], value)

    def _compute_cache(self) -> Any:
        return None

    def _predict_f_chunk(self, X: torch.Tensor, cache: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Latent marginals ``(B, Q)`` each, in scaled-target units."""
        raise NotImplementedError

    def prediction_chunk_rows(self, chunk_size: int | None = None) -> int:
        """Rows per prediction chunk for a ``chunk_size`` argument of the predict methods
        (:func:`~latentgp.models.predict.rows_per_chunk` with this model's
        :meth:`_chunk_width`): ``chunk_size`` itself when given, else the configured
        ``chunk_size``, else about a million entries per intermediate."""
        return rows_per_chunk(chunk_size, self._chunk_width())

    def _chunk_width(self) -> int:
        """Columns of the largest per-row intermediate at prediction (M Q for sparse models)."""
        return int(getattr(self, "num_inducing", 0) or 0) * max(1, self.num_latent)

    def _latent_raw(self, X: torch.Tensor, chunk_size: int | None = None):
        """Latent marginals ``(N, Q)`` in scaled-target units, chunk by chunk."""
        cache = self.prediction_cache()
        rows = self.prediction_chunk_rows(chunk_size)
        return chunked(lambda xc: self._predict_f_chunk(xc, cache), X, rows=rows)

    def _unscale_moments(self, m: torch.Tensor, v: torch.Tensor):
        """Moments in the targets' original units (unchanged without target scaling)."""
        if not self._uses_scaling():
            return m, v
        return unscale_moments(m, v, self.y_scale, self.y_mean)

    def _squeeze(self, t: torch.Tensor) -> torch.Tensor:
        return t[..., 0] if (t.shape[-1] == 1) else t

    def _to_output(self, t: torch.Tensor, as_numpy: bool) -> Any:
        return t.detach().cpu().numpy() if as_numpy else t

    def predict_f(
        self, X: Any, chunk_size: int | None = None, as_numpy: bool = True
    ) -> tuple[Any, Any]:
        """Marginal mean and variance of the latent function(s) at ``X`` ``(N, D)``.

        Returns ``(N,)`` arrays for one latent function, ``(N, Q)`` for several; in the
        units of the targets when they were standardised for training.
        """
        self._require_built()
        Xt = self._check_X(X)
        m, v = self._unscale_moments(*self._latent_raw(Xt, chunk_size))
        return self._to_output(self._squeeze(m), as_numpy), self._to_output(
            self._squeeze(v), as_numpy
        )

    def _lik_args(self, m: torch.Tensor, v: torch.Tensor):
        """Shape latent marginals ``(B, Q)`` for the likelihood."""
        if self.likelihood.latent_dim == 1 and m.shape[-1] == 1:
            return m[..., 0], v[..., 0]
        return m, v

    def predict_y(
        self, X: Any, chunk_size: int | None = None, as_numpy: bool = True
    ) -> tuple[Any, Any]:
        """Predictive mean and variance of y at ``X``.

        For classification the mean is the class probability: ``P(y = 1)`` ``(N,)`` for
        binary likelihoods, ``(N, C)`` for softmax.
        """
        self._require_built()
        Xt = self._check_X(X)
        cache = self.prediction_cache()

        def moments(xc):
            m, v = self._predict_f_chunk(xc, cache)
            return self.likelihood.predictive_moments(*self._lik_args(m, v))

        rows = self.prediction_chunk_rows(chunk_size)
        m, v = self._unscale_moments(*chunked(moments, Xt, rows=rows))
        return self._to_output(m, as_numpy), self._to_output(v, as_numpy)

    def log_predictive_density(
        self, X: Any, y: Any, chunk_size: int | None = None, as_numpy: bool = True
    ) -> Any:
        """``log p(y_n | x_n, data)`` for each test point, shape ``(N,)``."""
        self._require_built()
        Xt = self._check_X(X)
        yt = self._check_y(y, Xt.shape[0])
        ys = self._scale_y(yt)
        cache = self.prediction_cache()

        def log_density(xc, yc):
            m, v = self._predict_f_chunk(xc, cache)
            lp = self.likelihood.predictive_log_density(yc, *self._lik_args(m, v))
            return lp.sum(-1) if lp.ndim > 1 else lp

        (lpd,) = chunked(log_density, Xt, ys, rows=self.prediction_chunk_rows(chunk_size))
        offset: Any = self._log_scale_sum()
        if offset and yt.ndim == 2 and bool(torch.isnan(yt).any()):
            # missing outputs: each row's density is over its observed outputs only
            offset = (~torch.isnan(yt)).to(yt.dtype) @ self.y_scale.log()
        return self._to_output(lpd - offset, as_numpy)

    def predict_f_full_cov(self, X: Any) -> tuple[Any, Any]:
        """Joint posterior of the latents at ``X``: mean ``(N, Q)``, covariance ``(Q, N, N)``.

        Memory grows as N^2: meant for a few thousand points.
        """
        self._require_built()
        with torch.no_grad():
            m, K = self.predict_f_joint(self._check_X(X))
        return m.cpu().numpy(), K.cpu().numpy()

    def predict_f_joint(
        self, X: torch.Tensor, *, scaled: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Joint posterior of the latents at each batch of ``X`` ``(..., N, D)`` as tensors
        that carry gradients with respect to ``X`` (for acquisition functions): mean
        ``(..., N, Q)``, covariance ``(..., Q, N, N)``, in the targets' units (``scaled``:
        in the model's internal, scaled-target units, where the latent GPs of models such
        as SHGP live).  The factors of the fitted posterior are the (constant) prediction
        cache."""
        self._require_built()
        if not isinstance(X, torch.Tensor):
            raise TypeError(f"X must be a torch.Tensor, got {type(X).__name__}")
        if X.ndim < 2 or X.shape[-1] != self.input_dim:
            raise ValueError(
                f"X must have shape (..., N, {self.input_dim}), got {tuple(X.shape)}"
            )
        m, K = self._predict_f_full(X.to(self.dtype_), self.prediction_cache())
        if self._uses_scaling() and not scaled:
            m, _ = unscale_moments(m, m, self.y_scale, self.y_mean)
            K = K * (self.y_scale**2)[:, None, None]
        return m, K

    def _predict_f_full(self, X, cache):
        raise NotImplementedError(f"{type(self).__name__} has no joint predictive covariance")

    def sample_f(self, X: Any, num_samples: int = 10, seed: int | None = None) -> np.ndarray:
        """Joint posterior samples of the latent function(s): ``(S, N)`` or ``(S, N, Q)``."""
        m, K = self.predict_f_full_cov(X)
        return joint_samples(m, K, num_samples, seed)
