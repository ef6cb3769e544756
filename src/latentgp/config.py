"""Library-wide numerical defaults: one small frozen config and a context manager.

The only global state in latentgp.  ``get_config()`` returns the active settings;
``config(...)`` overrides some of them inside a ``with`` block::

    with latentgp.config(jitter=1e-5):
        model.fit(X, y)
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import torch


@dataclasses.dataclass(frozen=True)
class Config:
    """Numerical defaults.

    Attributes
    ----------
    dtype:
        Default floating dtype of parameters and data (float64).
    jitter:
        First jitter tried by :func:`latentgp.linalg.cholesky`, relative to the mean
        of the matrix diagonal.
    max_jitter_tries:
        How many times the jitter is multiplied by 10 before a Cholesky gives up.
    chunk_size:
        Rows processed at once at prediction time; None (default) sizes chunks so the
        cross-covariance block of a chunk has about 2^20 entries.
    num_gauss_hermite:
        Default number of Gauss-Hermite points for one-dimensional expectations.
    num_mc_samples:
        Default number of Monte Carlo samples where no closed form or quadrature applies.
    marginals:
        How the marginals of q(f) at a batch are computed: ``"solve"`` (triangular solve
        of Kzz's factor against the batch, 6-10 B M^2 flops per step, most accurate),
        ``"quad"`` (precomputed ``R = Lzz^{-T} (I - S S^T) Lzz^{-1}``, 4 B M^2 flops in
        matrix products plus ~15 M^3, loses up to ``eps * cond(Kzz)`` of a variance to
        cancellation) or ``"auto"`` (``"quad"`` in float64 when the batch has at least
        2 M points and Kzz is well conditioned, else ``"solve"``).
    """

    dtype: torch.dtype = torch.float64
    jitter: float = 1e-6
    max_jitter_tries: int = 6
    chunk_size: int | None = None
    num_gauss_hermite: int = 20
    num_mc_samples: int = 32
    marginals: str = "auto"

    def __post_init__(self) -> None:
        if self.marginals not in ("auto", "solve", "quad"):
            raise ValueError(
                f"config marginals must be 'auto', 'solve' or 'quad', got {self.marginals!r}"
            )


_active: list[Config] = [Config()]


def get_config() -> Config:
    """Return the active :class:`Config`."""
    return _active[-1]


@contextlib.contextmanager
def config(**overrides: object) -> Iterator[Config]:
    """Override configuration values inside a ``with`` block."""
    new = dataclasses.replace(_active[-1], **overrides)  # type: ignore[arg-type]
    _active.append(new)
    try:
        yield new
    finally:
        _active.pop()


def default_dtype(dtype: torch.dtype | None = None) -> torch.dtype:
    """``dtype`` if given, else the configured default."""
    return get_config().dtype if dtype is None else dtype
