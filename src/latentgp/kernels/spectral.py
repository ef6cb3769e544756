"""Kernels defined by their spectral density: the spectral mixture (Wilson & Adams 2013)
and the cosine kernel (a spectral point mass).

Spectral mixture, Q components, for ``tau = x - z``:

    k(tau) = sum_q w_q exp(-2 pi^2 sum_d tau_d^2 v_qd^2) cos(2 pi sum_d tau_d mu_qd)

with weights ``w_q``, frequencies ``mu_qd`` and frequency scales ``v_qd`` (the standard
deviation of each Gaussian of the spectral density).  The Gaussian factor is an RBF with
lengthscale ``1 / (2 pi v_qd)`` (one matrix product); the cosine factor is the cosine of
the difference of two projections, so no ``(N, M, D)`` tensor is formed.  Frequencies are in
cycles per unit of the inputs.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..parameters import column_unit, inv_softplus, positive_parameter, softplus
from .base import Kernel, floored_exp, register
from .stationary import scaled_sqdist


def _projection_difference(X, Z, W):
    """``(x W^T) - (z W^T)`` as ``(..., Q, N, M)`` for ``W`` ``(..., Q, D)``, centred so the
    projections of distant inputs keep their precision."""
    Z = X if Z is None else Z
    c = X.detach().mean(-2, keepdim=True)
    px = (X - c) @ W.mT  # (..., N, Q)
    pz = (Z - c) @ W.mT  # (..., M, Q)
    return px.mT[..., :, :, None] - pz.mT[..., :, None, :]


@register("spectralmixture", "sm")
class SpectralMixture(Kernel):
    """Spectral mixture kernel with ``num_mixtures`` components (see the module docstring).

    Initial values: without data, frequencies spread evenly up to the inputs' Nyquist
    frequency (``init_from_data``, deterministic); :meth:`initialize_from_spectrum`
    sets them from the empirical spectrum of the targets instead (the standard
    initialisation of Wilson & Adams), which a fit then keeps.
    """

    def __init__(self, num_mixtures: int = 4) -> None:
        super().__init__()
        if not (isinstance(num_mixtures, int) and num_mixtures >= 1):
            raise ValueError(f"SpectralMixture num_mixtures must be >= 1, got {num_mixtures!r}")
        self.num_mixtures = num_mixtures
        self.from_spectrum = False

    def _build(self, dtype, device):
        Q, D = self.num_mixtures, self.input_dim
        self.raw_weights = positive_parameter(1.0 / Q, self.batch_shape + (Q,), dtype, device)
        self.raw_means = positive_parameter(1.0, self.batch_shape + (Q, D), dtype, device)
        self.raw_scales = positive_parameter(1.0, self.batch_shape + (Q, D), dtype, device)

    @property
    def weights(self) -> torch.Tensor:
        """``(*batch, Q)``: the variance each component contributes."""
        return softplus(self.raw_weights)

    @property
    def means(self) -> torch.Tensor:
        """``(*batch, Q, D)`` frequencies (cycles per input unit)."""
        return softplus(self.raw_means)

    @property
    def scales(self) -> torch.Tensor:
        """``(*batch, Q, D)`` standard deviations of the spectral Gaussians."""
        return softplus(self.raw_scales)

    def forward(self, X, Z=None):
        self._check_built()
        ls = 1.0 / (2.0 * math.pi * self.scales)  # (*batch, Q, D)
        Xq = X[..., None, :, :]
        r2 = scaled_sqdist(Xq, None if Z is None else Z[..., None, :, :], ls)
        phase = _projection_difference(X, Z, self.means)
        comps = floored_exp(-0.5 * r2) * torch.cos(2.0 * math.pi * phase)
        return (self.weights[..., :, None, None] * comps).sum(-3)

    def diag(self, X):
        self._check_built()
        shape = torch.broadcast_shapes(self.batch_shape + (1,), X.shape[:-1])
        return self.weights.sum(-1)[..., None].expand(shape)

    def _set(self, weights, means, scales) -> None:
        with torch.no_grad():
            for raw, value in ((self.raw_weights, weights), (self.raw_means, means),
                               (self.raw_scales, scales)):
                v = torch.tensor(np.array(value, dtype=np.float64)).clamp_min(1e-12)
                raw.copy_(inv_softplus(torch.broadcast_to(v, raw.shape)).to(raw))

    def init_from_data(self, X: torch.Tensor) -> None:
        """Frequencies evenly spread on ``(0, Nyquist]`` per dimension (Nyquist: half the
        inverse of the smallest gap between sorted distinct inputs), scales the inverse
        of the inputs' range, equal weights; skipped after :meth:`initialize_from_spectrum`."""
        self._check_built()
        if self.from_spectrum:
            return
        Q = self.num_mixtures
        x = X.detach().to(torch.float64).cpu().numpy()
        nyquist, span = [], []
        for d in range(x.shape[1]):
            u = np.unique(x[:, d])
            gap = np.diff(u).min() if len(u) > 1 else 1.0
            nyquist.append(0.5 / gap)
            span.append(max(u[-1] - u[0], gap) if len(u) > 1 else 1.0)
        grid = (np.arange(1, Q + 1) / (Q + 1))[:, None] * np.array(nyquist)[None, :]
        scales = np.broadcast_to(1.0 / np.array(span), grid.shape)
        self._set(np.full(Q, 1.0 / Q), grid, scales)

    def initialize_from_spectrum(self, X, y, *, seed: int = 0) -> SpectralMixture:
        """Set the components from the empirical spectrum of ``y`` (Wilson & Adams 2013):
        per input dimension, ``y`` is interpolated onto a regular grid over the range of
        that column, its periodogram computed, and a ``num_mixtures``-component Gaussian
        mixture (scikit-learn's ``GaussianMixture``) fitted to frequencies drawn in
        proportion to the power; weights are ``var(y)`` times the mixture weights (the
        first dimension's).  Builds the kernel if needed; later fits keep these values.
        """
        try:
            from sklearn.mixture import GaussianMixture  # noqa: PLC0415 - optional extra
        except ImportError as err:  # pragma: no cover - sklearn is in the data extra
            raise ImportError(
                "initialize_from_spectrum needs scikit-learn: pip install latentgp[data]"
            ) from err
        x = np.asarray(X, dtype=np.float64).reshape(len(y), -1)
        yv = np.asarray(y, dtype=np.float64).reshape(-1)
        if not self.built:
            self.build(x.shape[1])
        rng = np.random.default_rng(seed)
        Q = self.num_mixtures
        means, scales, weights = np.zeros((Q, x.shape[1])), np.zeros((Q, x.shape[1])), None
        for d in range(x.shape[1]):
            order = np.argsort(x[:, d])
            xs, ys = x[order, d], yv[order]
            n = max(64, len(xs))
            grid = np.linspace(xs[0], xs[-1], n)
            yg = np.interp(grid, xs, ys) - ys.mean()
            freqs = np.fft.rfftfreq(n, d=grid[1] - grid[0])[1:]
            power = np.abs(np.fft.rfft(yg))[1:] ** 2
            draws = rng.choice(freqs, size=5000, p=power / power.sum())
            gm = GaussianMixture(Q, random_state=seed).fit(draws[:, None])
            means[:, d] = np.abs(gm.means_[:, 0])
            scales[:, d] = np.sqrt(gm.covariances_.reshape(Q))
            if weights is None:
                weights = gm.weights_ * yv.var()
        self._set(weights, means, scales)
        self.from_spectrum = True
        return self

    def _config_args(self):
        return {"num_mixtures": self.num_mixtures}


@register("cosine")
class Cosine(Kernel):
    """``k(x, z) = variance * cos(2 pi sum_d (x_d - z_d) / period_d)``: a single spectral
    frequency (a valid covariance: the cosine of one linear projection of ``x - z``).
    The period is stored in units of each input column's spread, as the periodic
    kernel's."""

    def __init__(self, period: float = 1.0, variance: float = 1.0) -> None:
        super().__init__()
        for value, what in ((period, "period"), (variance, "variance")):
            if not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"Cosine {what} must be positive, got {value!r}")
        self._init = (float(period), float(variance))

    def _build(self, dtype, device):
        p, v = self._init
        self.register_buffer("input_unit", torch.ones(self.input_dim, dtype=dtype, device=device))
        self.raw_period = positive_parameter(p, self.batch_shape + (self.input_dim,), dtype,
                                             device)
        self.raw_variance = positive_parameter(v, self.batch_shape, dtype, device)

    def init_from_data(self, X: torch.Tensor) -> None:
        """Store the period in units of each column's spread (its value is kept)."""
        self._check_built()
        with torch.no_grad():
            keep = self.period.detach().clone()
            self.input_unit.copy_(column_unit(X).to(self.input_unit))
            self.raw_period.copy_(inv_softplus(keep / self.input_unit).to(self.raw_period))

    @property
    def period(self) -> torch.Tensor:
        return softplus(self.raw_period) * self.input_unit

    @property
    def variance(self) -> torch.Tensor:
        return softplus(self.raw_variance)

    def forward(self, X, Z=None):
        self._check_built()
        w = (1.0 / self.period)[..., None, :]  # (*batch, 1, D)
        phase = _projection_difference(X, Z, w)[..., 0, :, :]
        return self.variance[..., None, None] * torch.cos(2.0 * math.pi * phase)

    def diag(self, X):
        self._check_built()
        shape = torch.broadcast_shapes(self.batch_shape + (1,), X.shape[:-1])
        return self.variance[..., None].expand(shape)

    def _config_args(self):
        p, v = self._init
        return {"period": p, "variance": v}
