"""Random Fourier features (Rahimi & Recht 2007) that are regenerated, never stored.

For a stationary kernel ``k(x, z) = variance * g(|x - z| / l)`` Bochner's theorem gives

    k(x, z) = variance * E_{omega, b}[2 cos(omega.x/l + b) cos(omega.z/l + b)],
    omega ~ p(omega), b ~ U(0, 2 pi)

with ``p(omega)`` the standard normal for the squared exponential and a multivariate
Student-t with ``2 nu`` degrees of freedom for Matérn-``nu`` (``omega = z sqrt(2 nu / u)``,
``z ~ N(0, I)``, ``u ~ chi^2_{2 nu}``).  With ``m`` draws the feature map

    phi_j(x) = sqrt(2 variance / m) cos(omega_j . (x / l) + b_j),   j = 0..m-1

gives ``k(x, z) ~= phi(x)^T phi(z)`` (prior ``w ~ N(0, I)``, i.e. ``S = I``).

The draw ``(omega_j, b_j)`` of feature ``j`` is a pure function of ``(seed, j)``: a
counter-based hash turns the index into uniforms, so a step that touches ``m~`` sampled
features costs ``O(m~ D)`` time and memory whatever ``m`` is -- the features of
``m = 10^7`` never exist in memory at once.
"""

from __future__ import annotations

import math

import torch

_M32 = 0xFFFFFFFF
_M16 = 0xFFFF

#: kernel name -> degrees of freedom of the spectral Student-t (None: Gaussian)
SPECTRAL_DOF: dict[str, int | None] = {
    "RBF": None,
    "Matern12": 1,
    "Matern32": 3,
    "Matern52": 5,
}


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """``(x * c) mod 2^32`` for ``0 <= x < 2^32`` without int64 overflow."""
    hi = ((x >> 16) * c) & _M16
    return ((hi << 16) + (x & _M16) * c) & _M32


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer finaliser (xorshift-multiply), applied element-wise to int64."""
    x = x & _M32
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def hashed_uniforms(idx: torch.Tensor, num_streams: int, seed: int) -> torch.Tensor:
    """Uniforms in (0, 1) that depend only on ``(seed, idx, stream)``.

    Parameters
    ----------
    idx: ``(K,)`` int64 indices (``0 <= idx < 2^32``).  num_streams: S.  seed: int.

    Returns
    -------
    ``(K, S)`` float64.
    """
    salt = int(_mix32(torch.tensor([(seed * 0x9E3779B1 + 0x632BE5AB) & _M32]))[0])
    streams = torch.arange(num_streams, dtype=torch.int64, device=idx.device)
    streams = _mix32(streams * 0x85EBCA77 + salt)
    h = _mix32(_mix32(idx.to(torch.int64) ^ salt)[:, None] ^ streams[None, :])
    h = _mix32(h + 0x27D4EB2F)
    return (h.to(torch.float64) + 0.5) / 4294967296.0


class RandomFourierFeatures:
    """Hash-seeded random Fourier features of an SE or Matérn kernel (ARD).

    Parameters
    ----------
    num_features: m.  input_dim: D.
    dof: ``None`` for the squared exponential, ``2 nu`` (1, 3, 5) for Matérn-``nu``.
    seed: fixes every draw.
    """

    def __init__(self, num_features: int, input_dim: int, dof: int | None = None, seed: int = 0):
        if dof not in (None, 1, 3, 5):
            raise ValueError(f"dof must be None (SE) or 1, 3, 5 (Matérn), got {dof!r}")
        self.m, self.D, self.dof, self.seed = int(num_features), int(input_dim), dof, int(seed)

    def draws(self, idx: torch.Tensor, dtype=torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
        """Unit-lengthscale frequencies ``(K, D)`` and phases ``(K,)`` of features ``idx``."""
        D = self.D
        extra = self.dof or 0
        u = hashed_uniforms(idx, D + 1 + extra, self.seed)
        z = torch.special.ndtri(u[:, : D + extra])
        omega = z[:, :D]
        if self.dof is not None:
            chi2 = (z[:, D:] ** 2).sum(-1)
            omega = omega * torch.sqrt(self.dof / chi2)[:, None]
        phase = 2.0 * math.pi * u[:, D + extra]
        dev = idx.device
        return omega.to(dtype=dtype, device=dev), phase.to(dtype=dtype, device=dev)

    def __call__(
        self,
        X: torch.Tensor,
        idx: torch.Tensor,
        lengthscale: torch.Tensor,
        variance: torch.Tensor,
    ) -> torch.Tensor:
        """Features ``phi_idx(X)``: ``(B, K)`` for inputs ``(B, D)`` and indices ``(K,)``.

        ``lengthscale`` is ``(D,)`` or ``(1,)``, ``variance`` a scalar tensor; both may
        carry gradients (empirical Bayes).
        """
        omega, phase = self.draws(idx, X.dtype)
        proj = (X / lengthscale) @ omega.T + phase
        return torch.sqrt(2.0 * variance / self.m) * torch.cos(proj)

    def kernel(self, X, Z, lengthscale, variance, chunk: int = 65536) -> torch.Tensor:
        """``phi(X) phi(Z)^T`` ``(N, M)`` summed over all m features in chunks."""
        out = X.new_zeros(X.shape[0], Z.shape[0])
        for start in range(0, self.m, chunk):
            idx = torch.arange(start, min(start + chunk, self.m), device=X.device)
            out = out + self(X, idx, lengthscale, variance) @ self(Z, idx, lengthscale, variance).T
        return out


def kernel_features(kernel, num_features: int, seed: int = 0) -> RandomFourierFeatures:
    """The :class:`RandomFourierFeatures` of a (built) stationary ``kernel``: its spectral
    density by class (:data:`SPECTRAL_DOF`); ``ValueError`` for other kernels."""
    name = type(kernel).__name__
    if name not in SPECTRAL_DOF:
        raise ValueError(
            f"random Fourier features need an SE or Matérn kernel ({', '.join(SPECTRAL_DOF)}), "
            f"got {name}"
        )
    if not isinstance(num_features, int) or num_features < 1:
        raise ValueError(f"num_features must be a positive integer, got {num_features!r}")
    return RandomFourierFeatures(num_features, kernel.input_dim, SPECTRAL_DOF[name], seed)
