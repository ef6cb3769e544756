"""Library-wide numerical defaults: one small frozen config and a context manager.

The only global state in latentgp, and it is per context: ``get_config()`` returns the
settings active in the calling thread (or asyncio task); ``config(...)`` overrides some of
them inside a ``with`` block::

    with latentgp.config(jitter=1e-5):
        model.fit(X, y)

The overrides live in a :class:`contextvars.ContextVar`, so a block in one thread never
changes what a concurrent thread computes (each new thread starts from the defaults), and
async tasks see the settings of the context they were created in.
"""

from __future__ import annotations

import contextlib
import contextvars
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
        Default number of Monte Carlo samples where no closed form or quadrature applies
        (training: expected log-likelihoods of several latents).
    num_predictive_samples:
        Monte Carlo draws behind predictions of likelihoods with several latents and no
        closed form (log predictive densities, predictive moments of y); None (default):
        1000 for densities, 256 for moments.  Errors shrink as ``1 / sqrt(draws)``.
    num_quadrature_nodes:
        Nodes of the quadrature centred on the integrand that one-latent log predictive
        densities use (default 128: within 1e-7 nats of adaptive reference quadrature
        for Poisson counts at predictive variances up to 50; 64 gives about 1e-4).
    marginals:
        How the marginals of q(f) at a batch are computed: ``"solve"`` (triangular solve
        of Kzz's factor against the batch, 6-10 B M^2 flops per step, most accurate),
        ``"quad"`` (precomputed ``R = Lzz^{-T} (I - S S^T) Lzz^{-1}``, 4 B M^2 flops in
        matrix products plus ~15 M^3, loses up to ``eps * cond(Kzz)`` of a variance to
        cancellation) or ``"auto"`` (``"quad"`` in float64 when the batch has at least
        2 M points and Kzz is well conditioned, else ``"solve"``).
    distributed:
        Whether a fit inside an initialised ``torch.distributed`` default group trains
        data-parallel in it (default True).  False: every fit in the block runs in this
        process alone, as without a group (a model's local sub-fit, such as QSGP's
        pretraining of its hyperparameters on the same rows in every process).
    """

    dtype: torch.dtype = torch.float64
    jitter: float = 1e-6
    max_jitter_tries: int = 6
    chunk_size: int | None = None
    num_gauss_hermite: int = 20
    num_mc_samples: int = 32
    num_predictive_samples: int | None = None
    num_quadrature_nodes: int = 128
    marginals: str = "auto"
    distributed: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.distributed, bool):
            raise ValueError(f"config distributed must be True or False, got {self.distributed!r}")
        if self.marginals not in ("auto", "solve", "quad"):
            raise ValueError(
                f"config marginals must be 'auto', 'solve' or 'quad', got {self.marginals!r}"
            )
        if not (isinstance(self.dtype, torch.dtype) and self.dtype.is_floating_point):
            raise ValueError(f"config dtype must be a floating torch dtype, got {self.dtype!r}")
        if not (isinstance(self.jitter, (int, float)) and 0 < self.jitter < 1):
            raise ValueError(f"config jitter must be a number in (0, 1), got {self.jitter!r}")
        _check_int("max_jitter_tries", self.max_jitter_tries, 0, 30)
        if self.chunk_size is not None:
            _check_int("chunk_size", self.chunk_size, 1, None)
        # numpy's Gauss-Hermite rule overflows to NaN weights from about 370 points on
        _check_int("num_gauss_hermite", self.num_gauss_hermite, 1, MAX_GAUSS_HERMITE)
        _check_int("num_mc_samples", self.num_mc_samples, 1, None)
        if self.num_predictive_samples is not None:
            _check_int("num_predictive_samples", self.num_predictive_samples, 1, None)
        _check_int("num_quadrature_nodes", self.num_quadrature_nodes, 2, 4096)


#: Largest Gauss-Hermite rule the library builds (its weights stay finite and sum to 1).
MAX_GAUSS_HERMITE = 300


def _check_int(name: str, value: object, low: int, high: int | None) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
    if not ok or (high is not None and value > high):  # type: ignore[operator]
        upper = "" if high is None else f" and <= {high}"
        raise ValueError(f"config {name} must be an integer >= {low}{upper}, got {value!r}")


_ACTIVE: contextvars.ContextVar[Config] = contextvars.ContextVar(
    "latentgp_config", default=Config()  # noqa: B039 -- Config is a frozen dataclass
)


def get_config() -> Config:
    """Return the :class:`Config` active in the calling context (thread / task)."""
    return _ACTIVE.get()


@contextlib.contextmanager
def config(**overrides: object) -> Iterator[Config]:
    """Override configuration values inside a ``with`` block (this context only)."""
    fields = {f.name for f in dataclasses.fields(Config)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(f"unknown config option(s) {unknown}; the options are {sorted(fields)}")
    new = dataclasses.replace(_ACTIVE.get(), **overrides)  # type: ignore[arg-type]
    token = _ACTIVE.set(new)
    try:
        yield new
    finally:
        _ACTIVE.reset(token)


def default_dtype(dtype: torch.dtype | None = None) -> torch.dtype:
    """``dtype`` if given, else the configured default."""
    return get_config().dtype if dtype is None else dtype
