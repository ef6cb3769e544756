"""The one prediction path: chunking, unscaling, mixture moments and joint samples.

Every model's ``predict_f`` / ``predict_y`` / ``log_predictive_density`` /
``predictive_mixture`` / ``sample`` runs its per-chunk function through :func:`chunked`
(so memory stays bounded for every family, with one rule for the chunk size), maps its
moments back to the targets' units with :func:`unscale_moments`, and averages mixture
components (SAVIGP's q(u) components, the Monte Carlo components of SLGP) with
:func:`latentgp.mixtures.mixture_moments`.  Caches are the models'
(``GPModel.prediction_cache``); for the inducing-point models they are the conditional's
:class:`~latentgp.variational.PredictiveCache`.  ``sample_f`` draws from the joint
posterior with :func:`joint_samples`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from ..config import get_config
from ..mixtures import mixture_cdf, mixture_log_density, mixture_moments

__all__ = [
    "chunked",
    "joint_samples",
    "mixture_cdf",
    "mixture_log_density",
    "mixture_moments",
    "rows_per_chunk",
    "unscale_moments",
]

#: Largest number of rows in one automatic chunk.
MAX_ROWS = 65536
#: Smallest number of rows in one automatic chunk.
MIN_ROWS = 256
#: Automatic chunks hold about this many entries in their widest per-row block
#: (8 MiB in float64), so that the block and its product stay in cache.
CHUNK_ENTRIES = 1 << 20


def rows_per_chunk(chunk_size: int | None, width: int) -> int:
    """Rows per prediction chunk: ``chunk_size`` if given, else ``config.chunk_size``, else
    automatic (``CHUNK_ENTRIES / width`` rows, clipped to ``[MIN_ROWS, MAX_ROWS]``), where
    ``width`` is the number of columns of the widest per-row intermediate (``M Q`` for the
    sparse models: the ``(rows, M Q)`` cross-covariance block)."""
    cs = chunk_size or get_config().chunk_size
    if cs:
        return int(cs)
    return max(MIN_ROWS, min(MAX_ROWS, CHUNK_ENTRIES // max(1, int(width))))


def chunked(
    fn: Callable[..., Sequence[torch.Tensor] | torch.Tensor],
    *arrays: torch.Tensor,
    rows: int,
    dim: int = 0,
) -> tuple[torch.Tensor, ...]:
    """Apply ``fn`` to aligned row chunks of ``arrays`` (all of length N along axis 0),
    without gradients, and concatenate each of its outputs along ``dim``.

    ``fn(*chunks)`` returns a tensor or a tuple of tensors whose axis ``dim`` runs over the
    chunk's rows.  Returns a tuple (of one tensor when ``fn`` returns one).
    """
    N = arrays[0].shape[0]
    parts: list[tuple[torch.Tensor, ...]] = []
    with torch.no_grad():
        for start in range(0, N, max(1, int(rows))):
            out = fn(*(a[start : start + rows] for a in arrays))
            parts.append((out,) if isinstance(out, torch.Tensor) else tuple(out))
    return tuple(torch.cat([p[i] for p in parts], dim) for i in range(len(parts[0])))


def unscale_moments(
    mean: torch.Tensor, var: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Moments in the targets' original units: ``mean * s + mu``, ``var * s^2``.

    ``scale``, ``offset`` ``(P,)`` broadcast against the last axis of ``(..., P)``
    moments; moments without an output axis (``(N,)``, one output) take ``s[0]``,
    ``mu[0]``.
    """
    if mean.ndim == 1 or mean.shape[-1] != scale.shape[-1]:
        scale, offset = scale[0], offset[0]
    return mean * scale + offset, var * scale**2


def joint_samples(
    mean: np.ndarray, cov: np.ndarray, num_samples: int, seed: int | None
) -> np.ndarray:
    """Joint Gaussian samples ``(S, N)`` for one latent, ``(S, N, Q)`` for several, from
    means ``(N, Q)`` and covariances ``(Q, N, N)``: each latent's ``mean + root eps`` with
    ``root`` from the eigendecomposition of its covariance plus a ``1e-10`` relative
    jitter (negative eigenvalues clipped to 0), ``eps`` standard normal from
    ``numpy.random.default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    Q, N = cov.shape[0], cov.shape[1]
    out = np.empty((num_samples, N, Q))
    for q in range(Q):
        Kq = cov[q] + 1e-10 * np.mean(np.diag(cov[q])) * np.eye(N)
        w, V = np.linalg.eigh(Kq)
        root = V * np.sqrt(np.clip(w, 0, None))
        out[:, :, q] = mean[None, :, q] + rng.standard_normal((num_samples, N)) @ root.T
    return out[..., 0] if Q == 1 else out
