"""Pathwise posterior samples (Wilson et al. 2020, "Efficiently sampling functions from
Gaussian process posteriors"): Matheron's rule

    f*(.) = f(.) + k(., A) C^{-1} (v - f(A) - e)

turns a prior sample ``f`` into a posterior sample.  The prior sample is a random
Fourier feature function ``f(x) = phi(x)^T w``, ``w ~ N(0, I)``
(:func:`latentgp.kernels.features.kernel_features`); the update term is

* ExactGP: ``A = X`` (training inputs), ``C = K + s^2 I``, ``v = y``,
  ``e ~ N(0, s^2 I)``;
* SVGP (and its compositions): ``A = Z``, ``C = Kzz``, ``v = u ~ q(u)``, ``e = 0``.

After one solve per path, a path is a function: evaluating ``S`` paths at ``B`` points
costs ``O(B (m + n) S)`` (m features, n anchor points), linear in ``B``, chunked over the
rows, and differentiable with respect to the inputs.  The frequencies of the features
are shared by the paths (each path has its own weights ``w``), so the paths' mean is the
exact posterior mean and their covariance differs from the exact one only by the
features' approximation of the prior, ``O(1 / sqrt(m))``, mostly away from the data.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from ..kernels.features import kernel_features
from ..linalg import cho_solve
from ..validation import check_positive_int
from .predict import rows_per_chunk

__all__ = ["PathwiseSampling", "PathwiseSamples", "exact_paths", "prior_values", "svgp_paths"]


def prior_values(
    features: Any,
    X: torch.Tensor,
    centre: torch.Tensor,
    lengthscale: torch.Tensor,
    variance: torch.Tensor,
    weights: torch.Tensor,
) -> torch.Tensor:
    """Random-feature prior functions ``f_q(x) = phi_q(x - c)^T w_q`` at ``X`` ``(B, D)``
    (or ``(Q, B, D)``, one set per latent): ``(Q, B, S)`` for weights ``(Q, m, S)``.
    Latent q uses features ``q m .. (q + 1) m - 1`` (independent frequencies per latent);
    ``lengthscale`` ``(Q, D)``, ``variance`` ``(Q,)``."""
    Q, m, _ = weights.shape
    Xq = X if X.ndim == 3 else X.expand(Q, *X.shape)
    out = []
    for q in range(Q):
        idx = torch.arange(q * m, (q + 1) * m, device=X.device)
        out.append(features(Xq[q] - centre, idx, lengthscale[q], variance[q]) @ weights[q])
    return torch.stack(out)


class PathwiseSamples:
    """``S`` posterior sample paths of ``Q`` latent functions, a callable:
    ``paths(X)`` is ``(S, B)`` for one latent, ``(S, B, Q)`` for several.

    Built by ``model.sample_paths`` (:class:`~latentgp.ExactGP`, :class:`~latentgp.SVGP`);
    holds detached copies of everything it needs, so later changes to the model do not
    change the paths.  ``num_paths`` and ``num_features`` say what it holds.
    """

    def __init__(
        self,
        *,
        kernel: Any,
        features: Any,
        lengthscale: torch.Tensor,
        variance: torch.Tensor,
        centre: torch.Tensor,
        weights: torch.Tensor,
        anchors: torch.Tensor,
        coef: torch.Tensor,
        offset: torch.Tensor,
        scale: torch.Tensor,
        mean: Any = None,
    ) -> None:
        self.kernel = copy.deepcopy(kernel).requires_grad_(False)  # fixed: never retrained
        # the prior mean function (None: zero), a fixed copy like the kernel
        self.mean = None if mean is None else copy.deepcopy(mean).requires_grad_(False)
        self.features = features
        self.lengthscale, self.variance, self.centre = lengthscale, variance, centre
        self.weights, self.anchors, self.coef = weights, anchors, coef  # (Q,m,S) (..,n,D) (Q,n,S)
        self.offset, self.scale = offset, scale  # (Q,)
        self.num_latent, self.num_features, self.num_paths = weights.shape
        self.input_dim = int(anchors.shape[-1])

    def _evaluate(self, X: torch.Tensor) -> torch.Tensor:
        K = self.kernel(X, self.anchors)  # (B, n) shared, or (Q, B, n)
        prior = prior_values(
            self.features, X, self.centre, self.lengthscale, self.variance, self.weights
        )
        f = prior + K @ self.coef  # (Q, B, S)
        if self.mean is not None:
            f = f + self.mean(X).mT[..., None]
        return f * self.scale[:, None, None] + self.offset[:, None, None]

    def __call__(self, X: Any, *, chunk_size: int | None = None) -> torch.Tensor:
        """The paths at ``X`` ``(B, D)``: ``(S, B)`` (``(S, B, Q)`` for several latents),
        in the units of ``predict_f``.  Rows are evaluated ``chunk_size`` at a time (default:
        about a million entries per intermediate), so memory beyond the result stays
        bounded; gradients flow to ``X`` when it requires them."""
        ref = self.coef
        X = torch.as_tensor(X, dtype=ref.dtype, device=ref.device)
        if X.ndim != 2 or X.shape[1] != self.input_dim:
            raise ValueError(f"X must have shape (B, {self.input_dim}), got {tuple(X.shape)}")
        width = self.num_latent * (self.num_features + self.anchors.shape[-2] + self.num_paths)
        rows = rows_per_chunk(chunk_size, width)
        starts = range(0, X.shape[0], rows)
        if torch.is_grad_enabled() and X.requires_grad:
            out = torch.cat([self._evaluate(X[s : s + rows]) for s in starts], 1).permute(2, 1, 0)
        else:  # written chunk by chunk into the result: no second copy of it
            out = X.new_empty(self.num_paths, X.shape[0], self.num_latent)
            with torch.no_grad():
                for s in starts:
                    out[:, s : s + rows] = self._evaluate(X[s : s + rows]).permute(2, 1, 0)
        return out[..., 0] if self.num_latent == 1 else out  # (S, B, Q)


def _draws(
    num_paths: int, num_features: int, seed: int | None
) -> tuple[int, int, torch.Generator]:
    """Checked sizes, and the generator of every random draw (seeded from ``seed``, else
    from one draw of the global generator, which is never reseeded)."""
    S = check_positive_int(num_paths, "num_paths")
    m = check_positive_int(num_features, "num_features")
    if seed is None:
        seed = int(torch.randint(0, 2**31 - 1, ()))
    gen = torch.Generator().manual_seed(int(seed))
    return S, m, gen


def _randn(gen: torch.Generator, *shape: int, like: torch.Tensor) -> torch.Tensor:
    return torch.randn(shape, generator=gen, dtype=like.dtype).to(like.device)


def _features_of(kernel, m: int, gen: torch.Generator, Q: int, A: torch.Tensor):
    """The kernel's features (frequencies from a seed drawn from ``gen``), per-latent
    lengthscales ``(Q, D)`` and variances ``(Q,)``, and the anchors' centre."""
    feats = kernel_features(kernel, m, seed=int(torch.randint(0, 2**31 - 1, (), generator=gen)))
    ls = kernel.lengthscale.detach()
    ls = ls.reshape(-1, ls.shape[-1]).expand(Q, -1)
    var = kernel.variance.detach().reshape(-1).expand(Q)
    centre = A.detach().reshape(-1, A.shape[-1]).mean(0)
    return feats, ls, var, centre


def _latent_scaling(model, Q: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``predict_f``'s units: the targets' when each latent is one target column, else the
    model's internal units (e.g. SHGP's f and g)."""
    offset, scale = model.target_scaling()
    if offset.numel() != Q:
        return torch.zeros_like(offset[:1]).expand(Q), torch.ones_like(scale[:1]).expand(Q)
    return offset.detach(), scale.detach()


def exact_paths(model, num_paths: int, seed: int | None, num_features: int) -> PathwiseSamples:
    """Paths of an :class:`~latentgp.ExactGP` (update on the training data)."""
    S, m, gen = _draws(num_paths, num_features, seed)
    L, _ = model.prediction_cache()
    X, N = model.X_train, model.X_train.shape[0]
    Y = model.y_train.reshape(N, -1)
    Q = Y.shape[1]
    mean = _mean_of(model)
    with torch.no_grad():
        if mean is not None:  # paths of the deviation y - m(X), plus m
            Y = Y - mean(X)
        feats, ls, var, centre = _features_of(model.kernel, m, gen, Q, X)
        w = _randn(gen, Q, m, S, like=Y)
        prior_X = prior_values(feats, X, centre, ls, var, w)  # (Q, N, S)
        noise = model.likelihood.variance.detach().sqrt() * _randn(gen, Q, N, S, like=Y)
        coef = L.solve_constant(Y.mT[..., None] - prior_X - noise)  # (Q, N, S)
    offset, scale = _latent_scaling(model, Q)
    return PathwiseSamples(
        kernel=model.kernel, features=feats, lengthscale=ls, variance=var, centre=centre,
        weights=w, anchors=X.detach().clone(), coef=coef, offset=offset, scale=scale,
        mean=mean,
    )


def svgp_paths(model, num_paths: int, seed: int | None, num_features: int) -> PathwiseSamples:
    """Paths of an :class:`~latentgp.SVGP` (update on the inducing values u ~ q(u))."""
    S, m, gen = _draws(num_paths, num_features, seed)
    with torch.no_grad():
        Lzz = model.prior_factor().detach()
        Lzz = Lzz if Lzz.ndim == 3 else Lzz[None]
        q = model.q
        mu, root = q.q_mu.detach(), q.factor().detach()  # (Q, M), (Q, M, M) or (Q, M)
        Q, M = mu.shape
        eps = _randn(gen, Q, M, S, like=mu)
        u = mu[..., None] + (root[..., None] * eps if q.is_diag else root @ eps)
        if q.whiten:
            u = Lzz @ u
        elif model.inducing_prior_mean() is not None:  # q over u: its deviation from m(Z)
            u = u - model.inducing_prior_mean()[..., None]
        Z = model.Z.detach()
        feats, ls, var, centre = _features_of(model.kernel, m, gen, Q, Z)
        w = _randn(gen, Q, m, S, like=mu)
        prior_Z = prior_values(feats, Z, centre, ls, var, w)  # (Q, M, S)
        coef = cho_solve(Lzz, u - prior_Z)  # Kzz^{-1} (u - f(Z)), (Q, M, S)
    offset, scale = _latent_scaling(model, Q)
    return PathwiseSamples(
        kernel=model.kernel, features=feats, lengthscale=ls, variance=var, centre=centre,
        weights=w, anchors=Z.clone(), coef=coef, offset=offset, scale=scale,
        mean=_mean_of(model),
    )


def _mean_of(model) -> Any:
    """The model's prior mean function, or None for the zero mean."""
    return None if model.mean_function.is_zero else model.mean_function


class PathwiseSampling:
    """Mixin: ``sample_paths`` for a model class whose ``paths_builder`` is
    :func:`exact_paths` or :func:`svgp_paths`."""

    paths_builder: Any = None

    def sample_paths(
        self, num_paths: int, *, seed: int | None = None, num_features: int = 1024
    ) -> PathwiseSamples:
        """``num_paths`` posterior sample functions (Wilson et al. 2020): a
        :class:`~latentgp.models.pathwise.PathwiseSamples` callable, ``paths(X)`` ``(S, B)``
        (``(S, B, Q)`` for several latents), evaluable and differentiable anywhere at a cost
        linear in the number of points.  Random Fourier features (``num_features``, SE or
        Matérn kernels) for the prior and the exact pathwise update: on the training data
        with sampled noise (ExactGP), on inducing values drawn from q(u) (SVGP).  ``seed``
        fixes every draw (the global generator is never reseeded)."""
        self._require_built()  # type: ignore[attr-defined]
        return type(self).paths_builder(self, num_paths, seed, num_features)
