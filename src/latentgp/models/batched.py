"""Many independent exact GPs fitted and predicted at once: :class:`BatchedExactGP`.

``B`` members, each with its own data (``N`` points each, the same ``N`` for all), its own
kernel hyperparameters and its own noise; every tensor carries the member dimension first:

=====================  ==========================================
inputs, targets        ``X`` ``(B, N, D)``, ``y`` ``(B, N)``
kernel parameters      ``(B, ...)`` (a kernel with ``batch_shape (B,)``)
noise variance         ``(B,)``
log marginal           ``log N(y_b | 0, K_b + s_b^2 I)``, ``(B,)``
=====================  ==========================================

computed from one batched Cholesky of the ``(B, N, N)`` matrices.  The training
objective is the sum of the members' log marginal likelihoods: its gradient with respect
to member b's parameters is member b's own gradient, so the members do not interact.  An
optimiser that couples them through one scalar (torch's L-BFGS on the sum: one history,
one line search) would not give each member the optimum of its own fit; the batched
L-BFGS of :mod:`latentgp.training.batched` keeps a history, a line search and a
convergence test per member instead.

With an RBF kernel (the common case) the optimiser evaluates each member's objective and
its gradient in closed form, without an autograd graph
(:meth:`BatchedExactGP.member_log_marginal_and_grad`); other stationary kernels go through
autograd (:meth:`BatchedExactGP.member_log_marginal`), the same numbers to round-off.

Each member starts where :class:`~latentgp.models.ExactGP` would start on its data alone:
targets standardised per member (``normalize_y``), lengthscales ``sqrt(D)`` times each
input column's spread (unless given) and measured in units of that spread
(``kernel.input_unit`` ``(B, D)``), the same initial noise.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..constants import LOG_2PI
from ..kernels import RBF, Stationary
from ..likelihoods import Gaussian
from ..linalg import cho_solve, cholesky, solve_lower
from ..parameters import softplus_slope, spread_unit
from ..rng import seeded_scope
from ..validation import check_inputs, check_targets
from .base import register_model
from .exact import ExactGaussianGP, gaussian_log_marginal

__all__ = ["BatchedExactGP"]


@register_model
class BatchedExactGP(ExactGaussianGP):
    """``B`` independent exact GP regressions fitted in one call (see the module notes).

    ``fit(X, y)`` with ``X`` ``(B, N, D)`` and ``y`` ``(B, N)``; the kernel must be
    stationary (RBF, Matérn: its lengthscales ``(B, D)`` and variance ``(B,)`` are per
    member), the likelihood Gaussian (noise ``(B,)``).  Predictions take ``(B, M, D)``
    and return ``(B, M)``; :meth:`log_marginal_likelihood` returns ``(B,)``.
    Common keywords (:class:`~latentgp.models.base.GPModel`): ``normalize_y``,
    ``device``, ``dtype``, ``noise_variance``.  Hyperparameter bounds apply to every
    member; priors are not supported.
    """

    supports_hyperpriors = False
    #: the batched evidence is written for a zero prior mean (``mean=`` is refused)
    supports_mean = False
    data_ranks = (3, 2)  # X_train (B, N, D), y_train (B, N)
    kernel_type = Stationary
    kernel_requirement = "a stationary kernel (rbf, matern12/32/52)"
    non_gaussian_advice = "fit other likelihoods one SVGP at a time"
    #: the number of members ``B`` (None until built)
    num_gps: int | None = None

    # ----------------------------------------------------------------- building --
    def _build(
        self, input_dim: int, output_dim: int = 1, num_gps: int = 0, num_data: int = 0
    ) -> None:
        if num_gps < 1 or output_dim != 1:
            raise ValueError(
                "BatchedExactGP is built from data: fit(X, y) with X (B, N, D), y (B, N)"
            )
        self.input_dim, self.output_dim, self.num_gps = int(input_dim), 1, int(num_gps)
        B, D = self.num_gps, self.input_dim
        self.register_buffer("y_mean", torch.zeros(B, dtype=self.dtype_))
        self.register_buffer("y_scale", torch.ones(B, dtype=self.dtype_))
        self.kernel.build(D, (B,), self.dtype_, self.device_)
        # one unit per member and column (per member without ARD), as ExactGP has per column
        self.kernel.input_unit = torch.ones(B, D if self.kernel.ard else 1, dtype=self.dtype_)
        self.likelihood.set_batch_shape((B,))
        self.X_train = torch.zeros(B, num_data, D, dtype=self.dtype_)
        self.y_train = torch.zeros(B, num_data, dtype=self.dtype_)
        self.to(dtype=self.dtype_, device=self.device_)

    def _build_args(self) -> dict[str, Any]:
        return {**super()._build_args(), "num_gps": self.num_gps,
                "num_data": int(self.X_train.shape[1])}

    # -------------------------------------------------------------- data checks --
    def check_batch(self, X: Any, y: Any = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Validated ``X`` ``(B, N, D)`` and (when given) ``y`` ``(B, N)`` as tensors in
        the model's dtype and device; ``ValueError`` naming the problem."""
        Xt = X if isinstance(X, torch.Tensor) else torch.as_tensor(np.asarray(X, dtype=float))
        if Xt.ndim != 3:
            raise ValueError(f"X must have shape (B, N, D), got {tuple(Xt.shape)}")
        B, N, D = Xt.shape
        if self.num_gps is not None and B != self.num_gps:
            raise ValueError(f"X holds {B} members but the model has {self.num_gps}")
        Xt = check_inputs(Xt.reshape(B * N, D), name="X", input_dim=self.input_dim,
                          dtype=self.dtype_, device=self.device_).reshape(B, N, D)
        if y is None:
            return Xt, None
        yt = y if isinstance(y, torch.Tensor) else torch.as_tensor(np.asarray(y, dtype=float))
        if tuple(yt.shape) != (B, N):
            raise ValueError(f"y must have shape (B, N) = {(B, N)}, got {tuple(yt.shape)}")
        yt = check_targets(yt.reshape(B * N), B * N, name="y", dtype=self.dtype_,
                           device=self.device_).reshape(B, N)
        return Xt, yt

    def check_training_data(self, X: Any, y: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`check_batch` with targets required."""
        if y is None:
            raise ValueError("y is missing: fit(X, y) with X (B, N, D), y (B, N)")
        Xt, yt = self.check_batch(X, y)
        assert yt is not None
        return Xt, yt

    def initialize(self, X: Any, y: Any, seed: int | None = None) -> BatchedExactGP:
        """Build from ``X`` ``(B, N, D)``, ``y`` ``(B, N)`` and set every member's initial
        values (as the first fit does) without training; a built model is unchanged."""
        Xt, yt = self.check_training_data(X, y)
        with seeded_scope(seed, [self.device_]):
            self._initialize(Xt, yt, seed)
        return self

    def _initialize(self, Xt: torch.Tensor, yt: torch.Tensor, seed: int | None) -> torch.Tensor:
        first = not self.built
        B, N, D = Xt.shape
        if first:
            self._build(D, 1, B, N)
            if self._uses_scaling():
                sd = yt.std(-1) if N > 1 else torch.ones_like(yt[:, 0])
                self.y_mean.copy_(yt.mean(-1))
                self.y_scale.copy_(spread_unit(sd, yt.amin(-1), yt.amax(-1)))
        ys = self._scale_y(yt)
        if first:
            self._init_from_data(Xt, ys)
        self._store(Xt, ys)
        return ys

    def _init_from_data(self, X: torch.Tensor, y: torch.Tensor) -> None:
        k = self.kernel
        if X.shape[1] > 1:
            unit = spread_unit(X.std(-2), X.amin(-2), X.amax(-2))  # (B, D)
        else:
            unit = torch.ones(X.shape[0], X.shape[2], dtype=X.dtype, device=X.device)
        if not k.ard:
            unit = unit.mean(-1, keepdim=True)
        given = k.to_config()["lengthscale"]
        with torch.no_grad():
            k.input_unit.copy_(unit)
        if given is None:
            k.lengthscale = unit * math.sqrt(X.shape[-1])
        else:
            k.lengthscale = given  # in data units: re-expressed in the new units

    def _scale_y(self, y: torch.Tensor) -> torch.Tensor:
        if not self._uses_scaling():
            return y
        return (y - self.y_mean[:, None]) / self.y_scale[:, None]

    def _store(self, X: torch.Tensor, y: torch.Tensor) -> None:
        if self.X_train.shape != X.shape or not torch.equal(self.X_train, X):
            self.X_train = X.detach().clone()
        if self.y_train.shape != y.shape or not torch.equal(self.y_train, y):
            self.y_train = y.detach().clone()

    # ---------------------------------------------------------------- objective --
    def _noisy_gram(self, X: torch.Tensor) -> torch.Tensor:
        """``K_b + s_b^2 I`` ``(B, N, N)`` at ``X`` ``(B, N, D)``.  The kernel's
        two-argument form: for the RBF it is one product and one exponential (the
        one-argument distance form takes several more passes over the ``N x N`` blocks,
        which dominate the cost of small batched problems); its diagonal equals the
        signal variance to round-off."""
        K = self.kernel(X, X)
        noise = self.likelihood.variance[:, None].expand(K.shape[:-1])
        return K + torch.diag_embed(noise)

    def member_log_marginal(self, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``log p(y_b)`` of each member ``(B,)`` in scaled-target units, differentiable
        with respect to the parameters: ``X`` ``(B, N, D)``, scaled ``y`` ``(B, N)``.
        The hook of the batched optimiser (each member's own objective)."""
        K = self._noisy_gram(X)
        # a member whose matrix is not finite (a line-search trial at extreme parameters)
        # gets NaN, which the optimiser treats as a failed trial of that member only
        bad = ~torch.isfinite(K.detach()).all(-1).all(-1)
        if bool(bad.any()):
            eye = torch.eye(K.shape[-1], dtype=K.dtype, device=K.device)
            K = torch.where(bad[:, None, None], eye, K)
        with torch.no_grad():
            L, self.last_jitter = cholesky(K.detach(), "K + noise", jitter=0.0)
        value = gaussian_log_marginal(K, L, y[..., None])
        return torch.where(bad, torch.nan, value) if bool(bad.any()) else value

    #: the raw parameters of :meth:`member_log_marginal_and_grad` (with the kernel's
    #: ``input_unit`` buffer, the whole per-member state of an RBF, Gaussian model)
    CLOSED_FORM_PARAMETERS = ("kernel.raw_lengthscale", "kernel.raw_variance",
                              "likelihood.raw_variance")

    @property
    def closed_form_gradient(self) -> bool:
        """Whether :meth:`member_log_marginal_and_grad` applies: an RBF kernel (not a
        subclass) and a Gaussian likelihood, whose per-member state is exactly
        :attr:`CLOSED_FORM_PARAMETERS` and the kernel's ``input_unit``."""
        if type(self.kernel) is not RBF or type(self.likelihood) is not Gaussian:
            return False
        return set(self.member_state()) == {*self.CLOSED_FORM_PARAMETERS, "kernel.input_unit"}

    def member_log_marginal_and_grad(
        self, state: dict[str, torch.Tensor], X: torch.Tensor, y: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """:meth:`member_log_marginal` and its gradient with respect to the raw parameters,
        in one pass without autograd (the batched optimiser's evaluation of an RBF model).

        ``state``: the members' slices of :meth:`member_state` (``b`` members), ``X``
        ``(b, N, D)``, scaled ``y`` ``(b, N)``.  Returns ``log p(y_b)`` ``(b,)`` and the
        gradients of it by name (:attr:`CLOSED_FORM_PARAMETERS`, each the shape of its
        parameter).  With ``K = s^2 R + n I``, ``R = exp(-r^2 / 2)``, ``alpha = K^{-1} y``
        and ``W = (alpha alpha^T - K^{-1}) / 2`` (``dlog p / dK``):
        ``d/dn = tr W``, ``d/ds^2 = sum(W o R)`` and
        ``d/dl_d = s^2 sum_ij (W o R)_ij (x_id - x_jd)^2 / l_d^3``, the last from the row
        sums ``m`` of ``M = W o R`` and ``M X`` (``sum_ij M_ij (x_i - x_j)^2 =
        2 sum_i m_i x_i^2 - 2 x^T M x``, M symmetric), then the softplus chain rule.
        ``K^{-1}`` is LAPACK's ``cholesky_inverse``: the trace term needs all its entries.
        Members whose matrix fails the plain factorisation are refactorised one by one
        with the library's jitter (``last_jitter``: the largest); a member whose matrix
        is not finite gets NaN (a failed trial of that member only)."""
        if not self.closed_form_gradient:
            raise ValueError("member_log_marginal_and_grad needs an RBF kernel and a "
                             "Gaussian likelihood (closed_form_gradient is False)")
        raw_ls, raw_var, raw_noise = (state[n] for n in self.CLOSED_FORM_PARAMETERS)
        unit = state["kernel.input_unit"]
        N = X.shape[-2]
        ls = F.softplus(raw_ls) * unit  # (b, D) or (b, 1)
        var = F.softplus(raw_var)  # (b,)
        noise = F.softplus(raw_noise) + self.likelihood.min_variance  # (b,)
        Xs = X / ls[:, None, :]
        Xs = Xs - Xs.mean(-2, keepdim=True)  # distances do not depend on the origin
        h = -0.5 * (Xs * Xs).sum(-1, keepdim=True)
        one = torch.ones_like(h)
        # R = exp(x_i.x_j - |x_i|^2/2 - |x_j|^2/2): one product and one exponential
        R = torch.exp(torch.cat([Xs, h, one], -1) @ torch.cat([Xs, one, h], -1).mT)
        K = R * var[:, None, None]
        K.diagonal(dim1=-2, dim2=-1).add_(noise[:, None])
        L, info = torch.linalg.cholesky_ex(K)
        bad = torch.zeros_like(info, dtype=torch.bool)
        self.last_jitter = 0.0
        if bool((info > 0).any()):
            L, bad = self._refactor(K, L, info)
        # two triangular solves on L's own (column-major) layout: no copies of L
        z = torch.linalg.solve_triangular(L, y[..., None], upper=False)
        alpha = torch.linalg.solve_triangular(L.mT, z, upper=True)  # (b, N, 1)
        logdet = 2.0 * L.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        value = -0.5 * (z.square().sum((-2, -1)) + logdet + N * LOG_2PI)
        W = torch.cholesky_inverse(L).mul_(-0.5).addcmul_(alpha, alpha.mT, value=0.5)
        g_noise = W.diagonal(dim1=-2, dim2=-1).sum(-1)
        MX = W.mul_(R) @ torch.cat([Xs, one], -1)  # M [X, 1]: (b, N, D + 1)
        m = MX[..., -1]  # row sums of M, (b, N)
        g_var = m.sum(-1)
        S = 2.0 * ((Xs * Xs * m[..., None]).sum(-2) - (Xs * MX[..., :-1]).sum(-2))  # (b, D)
        if ls.shape[-1] != S.shape[-1]:  # one lengthscale for all columns
            S = S.sum(-1, keepdim=True)
        g_ls = var[:, None] * S / ls
        grads = {
            "kernel.raw_lengthscale": g_ls * softplus_slope(raw_ls) * unit,
            "kernel.raw_variance": g_var * softplus_slope(raw_var),
            "likelihood.raw_variance": g_noise * softplus_slope(raw_noise),
        }
        if bool(bad.any()):
            value = torch.where(bad, torch.nan, value)
        return value, grads

    def _refactor(self, K: torch.Tensor, L: torch.Tensor, info: torch.Tensor):
        """The factors of the members whose plain Cholesky failed (``info > 0``), each
        refactorised on its own with the library's jitter (as its single fit would be);
        non-finite members get the identity and are returned as ``bad``."""
        L = L.clone()
        bad = torch.zeros_like(info, dtype=torch.bool)
        eye = torch.eye(K.shape[-1], dtype=K.dtype, device=K.device)
        for i in (info > 0).nonzero().squeeze(1).tolist():
            if not bool(torch.isfinite(K[i]).all()):
                bad[i], L[i] = True, eye
                continue
            L[i], jitter = cholesky(K[i], "K + noise", jitter=0.0)
            self.last_jitter = max(self.last_jitter, jitter)
        return L, bad

    def forward(self, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """:meth:`member_log_marginal` (so that ``torch.func.functional_call`` can evaluate
        a subset of the members with their slices of :meth:`member_state`)."""
        return self.member_log_marginal(X, y)

    def member_state(self) -> dict[str, torch.Tensor]:
        """The parameters and buffers that carry the member dimension first (those of the
        kernel and the likelihood), by name: slicing each along its first dimension gives
        the state of a subset of the members."""
        self._require_built()
        out = {n: t for n, t in [*self.named_parameters(), *self.named_buffers()]
               if n.startswith(("kernel.", "likelihood."))}
        for n, t in out.items():
            if t.ndim == 0 or t.shape[0] != self.num_gps:
                raise ValueError(f"{n} of shape {tuple(t.shape)} is not per member")
        return out

    def objective(self, X: torch.Tensor, y: torch.Tensor, num_data: int) -> torch.Tensor:
        """Sum over the members of their log marginal likelihoods (scaled targets)."""
        self._store(X, y)
        return self.member_log_marginal(X, y).sum()

    def log_marginal_likelihood(self) -> np.ndarray:
        """``log p(y_b)`` of each member's training targets in their original units,
        ``(B,)``."""
        self._require_built()
        with torch.no_grad():
            v = self.member_log_marginal(self.X_train, self.y_train)
        if self._uses_scaling():
            v = v - self.X_train.shape[1] * self.y_scale.log()
        return v.cpu().numpy()

    # --------------------------------------------------------------- prediction --
    def _compute_cache(self):
        X, y = self.X_train, self.y_train
        K = self._noisy_gram(X)
        L, _ = cholesky(K, "K + noise", jitter=0.0)
        return L, cho_solve(L, y[..., None])  # (B, N, N), (B, N, 1)

    def _latent(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Latent means and variances ``(B, M)`` at ``X`` ``(B, M, D)``, scaled units."""
        L, alpha = self.prediction_cache()
        Kxs = self.kernel(self.X_train, X)  # (B, N, M)
        mean = (Kxs.mT @ alpha)[..., 0]
        var = (self.kernel.diag(X) - solve_lower(L, Kxs).square().sum(-2)).clamp_min(1e-12)
        return mean, var

    def predict_f_joint(
        self, X: torch.Tensor, *, scaled: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Joint posterior of each member's latent function at its points ``X``
        ``(..., B, q, D)``, differentiable with respect to ``X`` (acquisition functions):
        mean ``(..., B, q, 1)`` and covariance ``(..., B, 1, q, q)`` in the targets' units
        (``scaled``: in the model's scaled-target units)."""
        self._require_built()
        if not isinstance(X, torch.Tensor):
            raise TypeError(f"X must be a torch.Tensor, got {type(X).__name__}")
        if X.ndim < 3 or X.shape[-3] != self.num_gps or X.shape[-1] != self.input_dim:
            raise ValueError(f"X must have shape (..., {self.num_gps}, q, {self.input_dim}), "
                             f"got {tuple(X.shape)}")
        X = X.to(self.dtype_)
        L, alpha = self.prediction_cache()
        Kxs = self.kernel(self.X_train, X)  # (..., B, N, q)
        mean = Kxs.mT @ alpha  # (..., B, q, 1)
        V = solve_lower(L, Kxs)
        cov = self.kernel(X) - V.mT @ V  # (..., B, q, q)
        if self._uses_scaling() and not scaled:
            s = self.y_scale[:, None, None]
            mean, cov = mean * s + self.y_mean[:, None, None], cov * s.square()
        return mean, cov[..., None, :, :]

    def _unscale(self, m: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not self._uses_scaling():
            return m, v
        s = self.y_scale[:, None]
        return m * s + self.y_mean[:, None], v * s.square()

    def _out(self, *ts: torch.Tensor, as_numpy: bool) -> Any:
        return tuple(t.detach().cpu().numpy() if as_numpy else t for t in ts)

    def predict_f(self, X: Any, chunk_size: int | None = None, as_numpy: bool = True):
        """Latent mean and variance ``(B, M)`` of each member at its ``X`` ``(B, M, D)``,
        in the targets' units.  ``chunk_size`` is refused (the members are the batch)."""
        self._require_built()
        self._no_chunks(chunk_size)
        Xt, _ = self.check_batch(X)
        with torch.no_grad():
            return self._out(*self._unscale(*self._latent(Xt)), as_numpy=as_numpy)

    def predict_y(self, X: Any, chunk_size: int | None = None, as_numpy: bool = True):
        """Predictive mean and variance of y ``(B, M)`` (latent plus each member's noise)."""
        self._require_built()
        self._no_chunks(chunk_size)
        Xt, _ = self.check_batch(X)
        with torch.no_grad():
            m, v = self._latent(Xt)
            v = v + self.likelihood.variance[:, None]
            return self._out(*self._unscale(m, v), as_numpy=as_numpy)

    def log_predictive_density(
        self, X: Any, y: Any, chunk_size: int | None = None, as_numpy: bool = True
    ) -> Any:
        """``log p(y_bm | x_bm, data_b)`` ``(B, M)`` for test inputs ``(B, M, D)`` and
        targets ``(B, M)``."""
        self._require_built()
        self._no_chunks(chunk_size)
        Xt, yt = self.check_batch(X, y)
        with torch.no_grad():
            m, v = self.predict_y(Xt, as_numpy=False)
            lpd = -0.5 * (math.log(2 * math.pi) + v.log() + (yt - m).square() / v)
        return self._out(lpd, as_numpy=as_numpy)[0]

    def predict_f_full_cov(self, X: Any) -> tuple[Any, Any]:
        """Joint posterior of each member's latent function at its ``X`` ``(B, M, D)``:
        means ``(B, M)`` and covariances ``(B, M, M)`` (numpy, the targets' units)."""
        self._require_built()
        Xt, _ = self.check_batch(X)
        with torch.no_grad():
            m, K = self.predict_f_joint(Xt)
        return m[..., 0].cpu().numpy(), K[..., 0, :, :].cpu().numpy()

    def sample_f(self, X: Any, num_samples: int = 10, seed: int | None = None) -> np.ndarray:
        """Not available for a batch of models: draw from :meth:`predict_f_full_cov`."""
        raise NotImplementedError("BatchedExactGP.sample_f: draw from predict_f_full_cov's "
                                  "means and covariances per member")

    @staticmethod
    def _no_chunks(chunk_size: int | None) -> None:
        if chunk_size is not None:
            raise ValueError("BatchedExactGP predicts all members at once: chunk_size= "
                             "is not supported")
