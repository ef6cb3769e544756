"""Kernel base class, combination kernels and the kernel registry.

Shapes
------
A kernel may carry a batch shape (``batch_shape``, e.g. ``(Q,)`` for Q independent
latent functions with their own hyperparameters).  Inputs are ``(..., N, D)``;
``kernel(X, Z)`` returns ``(*batch, N, M)`` and ``kernel.diag(X)`` returns
``(*batch, N)``, broadcasting the batch shape against the leading dims of X.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..parameters import positive_parameter, softplus

#: what :meth:`Kernel.against` returns: ``block(A, out=None) -> k(A, Z)``
Block = Callable[..., torch.Tensor]


#: kernels take ``exp`` of an exponent no lower than this fraction of ``log`` of the
#: dtype's smallest normal number (about -567 in float64, -70 in float32):
#: :func:`floored_exp`
EXP_FLOOR_FRACTION = 0.8


def exp_floor(dtype: torch.dtype) -> float:
    """The lowest exponent :func:`floored_exp` passes to ``exp`` for ``dtype``."""
    return EXP_FLOOR_FRACTION * math.log(torch.finfo(dtype).tiny)


def floored_exp(
    x: torch.Tensor, *, inplace: bool = False, lowest: float | None = None
) -> torch.Tensor:
    """``exp(max(x, floor))`` with :func:`exp_floor` of ``x``'s dtype (``exp(-567)`` is
    ``1e-246`` in float64): a kernel value that would be below the floor takes it.

    On the CPU an ``exp`` whose result is subnormal or underflows to zero takes a slow
    path (one thread, 2.6M float64 entries: 0.43 s at ``x = -745``, 0.11 s at ``-800``,
    0.012 s at ``-700``), and a product of a kernel block holding subnormal numbers is
    slower again (0.29 s against 0.007 s for the same block of normal numbers).  Trained
    lengthscales put many far pairs there (design.md, "exact GP without a Cholesky").
    The floor changes an entry of ``K`` by at most ``1e-246`` times ``max(1, variance)``
    (RBF's product form puts the variance inside the exponent); the gradient below the
    floor (as small) is zero.

    ``lowest``: a lower bound of ``x`` that the caller knows; at or above the floor the
    clamp (one more pass over ``x``) is skipped.  ``inplace``: clamp and exponentiate
    ``x`` itself (no autograd)."""
    floor = exp_floor(x.dtype)
    if lowest is None or lowest < floor:
        x = x.clamp_(min=floor) if inplace else x.clamp(min=floor)
    return x.exp_() if inplace else torch.exp(x)


def into(
    values: torch.Tensor, out: torch.Tensor | None, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """``values``, or ``out`` holding them when ``out`` is given (a block function's
    ``out`` argument, :meth:`Kernel.against`), in ``dtype`` when given (``out``'s own
    dtype when there is one)."""
    if out is not None:
        return out.copy_(values)
    return values if dtype is None else values.to(dtype)


class Kernel(nn.Module):
    """A covariance function ``k(x, x')``.

    Parameters are created lazily by :meth:`build` once the input dimension is known,
    so kernels can be constructed before seeing data: ``lg.kernels.RBF()``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.input_dim: int | None = None
        self.batch_shape: tuple[int, ...] = ()

    # -- construction ------------------------------------------------------------
    @property
    def built(self) -> bool:
        return self.input_dim is not None

    def build(
        self,
        input_dim: int,
        batch_shape: tuple[int, ...] = (),
        dtype: torch.dtype = torch.float64,
        device: torch.device | str | None = None,
    ) -> Kernel:
        """Allocate parameters for ``input_dim`` inputs (idempotent)."""
        if self.built:
            if self.input_dim != input_dim:
                raise ValueError(
                    f"{type(self).__name__} was built for {self.input_dim} input dimensions, "
                    f"but data with {input_dim} columns was given"
                )
            return self
        self.input_dim = int(input_dim)
        self.batch_shape = tuple(batch_shape)
        self._build(dtype, device)
        return self

    def _build(self, dtype: torch.dtype, device: torch.device | str | None) -> None:
        """Create parameters; ``self.input_dim`` and ``self.batch_shape`` are set."""

    def init_from_data(self, X: torch.Tensor) -> None:
        """Set data-dependent initial values for hyperparameters the user did not fix."""

    def _check_built(self) -> None:
        if not self.built:
            raise RuntimeError(
                f"{type(self).__name__} has no parameters yet: call build(input_dim) or fit a "
                "model with it first"
            )

    # -- evaluation --------------------------------------------------------------
    def forward(self, X: torch.Tensor, Z: torch.Tensor | None = None) -> torch.Tensor:
        """Covariance matrix ``(*batch, N, M)`` between rows of X and Z (Z = X if None)."""
        raise NotImplementedError

    def diag(self, X: torch.Tensor) -> torch.Tensor:
        """Diagonal ``k(x_n, x_n)``, shape ``(*batch, N)``, without forming K."""
        raise NotImplementedError

    def against(self, Z: torch.Tensor, *, dtype: torch.dtype | None = None) -> Block:
        """``block(A, out=None) -> k(A, Z)`` ``(*batch, rows, M)`` with ``Z`` ``(..., M, D)``
        fixed: for callers that take many row blocks against the same ``Z`` (the
        matrix-free products of :mod:`latentgp.linalg_iterative`).  Kernels whose ``Z``
        side costs ``O(M D)`` per call (scaling, centring, norms) do that work once here;
        the values equal ``self(A, Z)`` up to rounding.  ``out``: a tensor of the block's
        shape that receives the values and is returned (outside autograd only), so that a
        caller taking many blocks reuses one buffer instead of allocating each (RBF
        computes the block in it; other kernels copy into it).  ``dtype``: the blocks'
        dtype (default: the kernel's); RBF computes its blocks in it (a float32 block
        costs less than half a float64 one on the CPU), other kernels compute in their own
        dtype and convert.  The function holds the parameters' values when it was made:
        make a new one after they change."""

        def block(A, out=None):
            return into(self(A, Z), out, dtype)

        return block

    # -- algebra -----------------------------------------------------------------
    def __add__(self, other: Kernel) -> Kernel:
        return Sum(self, other)

    def __mul__(self, other: Kernel | float) -> Kernel:
        if isinstance(other, (int, float)):
            return Scale(self, variance=float(other))
        return Product(self, other)

    __rmul__ = __mul__

    def on(self, dims) -> Active:
        """This kernel on the input columns ``dims`` only (active dimensions):
        ``RBF().on([0, 1]) * Coregion(num_tasks=3).on([2])``."""
        return Active(self, dims)

    # -- serialisation -----------------------------------------------------------
    def to_config(self) -> dict[str, Any]:
        """JSON-serialisable description from which :func:`kernel_from_config` rebuilds."""
        return {"type": type(self).__name__, **self._config_args()}

    def _config_args(self) -> dict[str, Any]:
        return {}


class Sum(Kernel):
    """``k(x, x') = k1(x, x') + k2(x, x')``."""

    def __init__(self, *kernels: Kernel) -> None:
        super().__init__()
        self.kernels = nn.ModuleList(kernels)

    def build(self, input_dim, batch_shape=(), dtype=torch.float64, device=None):  # noqa: D102
        for k in self.kernels:
            k.build(input_dim, batch_shape, dtype, device)
        self.input_dim, self.batch_shape = int(input_dim), tuple(batch_shape)
        return self

    def init_from_data(self, X: torch.Tensor) -> None:  # noqa: D102
        for k in self.kernels:
            k.init_from_data(X)

    def forward(self, X, Z=None):  # noqa: D102
        out = self.kernels[0](X, Z)
        for k in self.kernels[1:]:
            out = out + k(X, Z)
        return out

    def against(self, Z, *, dtype=None):  # noqa: D102
        parts = [k.against(Z, dtype=dtype) for k in self.kernels]

        def block(A, out=None):
            res = parts[0](A, out=out)
            for p in parts[1:]:
                res = res + p(A) if out is None else res.add_(p(A))
            return res

        return block

    def diag(self, X):  # noqa: D102
        out = self.kernels[0].diag(X)
        for k in self.kernels[1:]:
            out = out + k.diag(X)
        return out

    def _config_args(self):
        return {"kernels": [k.to_config() for k in self.kernels]}


class Product(Sum):
    """``k(x, x') = k1(x, x') * k2(x, x')``."""

    def forward(self, X, Z=None):  # noqa: D102
        out = self.kernels[0](X, Z)
        for k in self.kernels[1:]:
            out = out * k(X, Z)
        return out

    def against(self, Z, *, dtype=None):  # noqa: D102
        parts = [k.against(Z, dtype=dtype) for k in self.kernels]

        def block(A, out=None):
            res = parts[0](A, out=out)
            for p in parts[1:]:
                res = res * p(A) if out is None else res.mul_(p(A))
            return res

        return block

    def diag(self, X):  # noqa: D102
        out = self.kernels[0].diag(X)
        for k in self.kernels[1:]:
            out = out * k.diag(X)
        return out


class Scale(Kernel):
    """``k(x, x') = s * k0(x, x')`` with a learnable positive scale ``s``."""

    def __init__(self, kernel: Kernel, variance: float = 1.0) -> None:
        super().__init__()
        self.kernel = kernel
        self._init_variance = float(variance)

    def build(self, input_dim, batch_shape=(), dtype=torch.float64, device=None):  # noqa: D102
        self.kernel.build(input_dim, batch_shape, dtype, device)
        if not self.built:
            self.input_dim, self.batch_shape = int(input_dim), tuple(batch_shape)
            self.raw_variance = positive_parameter(
                self._init_variance, self.batch_shape, dtype, device
            )
        return self

    def init_from_data(self, X):  # noqa: D102
        self.kernel.init_from_data(X)

    @property
    def variance(self) -> torch.Tensor:
        return softplus(self.raw_variance)

    def forward(self, X, Z=None):  # noqa: D102
        return self.variance[..., None, None] * self.kernel(X, Z)

    def against(self, Z, *, dtype=None):  # noqa: D102
        inner, s = self.kernel.against(Z, dtype=dtype), self.variance[..., None, None]
        s = s if dtype is None else s.to(dtype)

        def block(A, out=None):
            res = inner(A, out=out)
            return s * res if out is None else res.mul_(s)

        return block

    def diag(self, X):  # noqa: D102
        return self.variance[..., None] * self.kernel.diag(X)

    def _config_args(self):
        return {"kernel": self.kernel.to_config(), "variance": self._init_variance}


class Active(Kernel):
    """``k(x, x') = k0(x[dims], x'[dims])``: a kernel on a subset of the input columns."""

    def __init__(self, kernel: Kernel, dims) -> None:
        super().__init__()
        try:
            dims = [int(d) for d in dims]
        except (TypeError, ValueError):
            raise ValueError(f"dims must be a list of column indices, got {dims!r}") from None
        if not dims or min(dims) < 0 or len(set(dims)) != len(dims):
            raise ValueError(f"dims must be distinct non-negative column indices, got {dims!r}")
        self.kernel, self.dims = kernel, dims

    def build(self, input_dim, batch_shape=(), dtype=torch.float64, device=None):  # noqa: D102
        if max(self.dims) >= input_dim:
            raise ValueError(
                f"the kernel is on columns {self.dims}, but the data have {input_dim} columns"
            )
        self.kernel.build(len(self.dims), batch_shape, dtype, device)
        self.input_dim, self.batch_shape = int(input_dim), tuple(batch_shape)
        return self

    def _columns(self, X):
        return None if X is None else X[..., self.dims]

    def init_from_data(self, X):  # noqa: D102
        self.kernel.init_from_data(self._columns(X))

    def forward(self, X, Z=None):  # noqa: D102
        return self.kernel(self._columns(X), self._columns(Z))

    def against(self, Z, *, dtype=None):  # noqa: D102
        inner = self.kernel.against(self._columns(Z), dtype=dtype)
        return lambda A, out=None: inner(self._columns(A), out=out)

    def diag(self, X):  # noqa: D102
        return self.kernel.diag(self._columns(X))

    def _config_args(self):
        return {"kernel": self.kernel.to_config(), "dims": self.dims}


_REGISTRY: dict[str, type[Kernel]] = {}


def register(*names: str):
    """Class decorator adding a kernel to the name registry."""

    def deco(cls):
        for n in names:
            _REGISTRY[n] = cls
        _REGISTRY[cls.__name__] = cls
        return cls

    return deco


register()(Sum)
register()(Product)
register()(Scale)
register()(Active)


def kernel_from_name(name: str | Kernel | None) -> Kernel:
    """Make a kernel from a name such as ``"rbf"`` or ``"matern32"``; a :class:`Kernel`
    object is copied, so that building and training a model never change the caller's."""
    if name is None:
        name = "rbf"
    if isinstance(name, Kernel):
        return copy.deepcopy(name)
    if not isinstance(name, str):
        raise ValueError(f"kernel must be a name or a latentgp Kernel, got {type(name).__name__}")
    key = name.lower().replace("-", "").replace("_", "")
    if key not in _REGISTRY:
        choices = sorted(k for k in _REGISTRY if k.islower())
        raise ValueError(f"unknown kernel {name!r}; choose one of {choices}")
    return _REGISTRY[key]()


def kernel_from_config(cfg: dict[str, Any]) -> Kernel:
    """Rebuild an (unbuilt) kernel from :meth:`Kernel.to_config` output."""
    cfg = dict(cfg)
    kind = cfg.pop("type")
    if kind not in _REGISTRY:
        raise ValueError(f"unknown kernel type {kind!r} in model file")
    cls = _REGISTRY[kind]
    if kind in ("Sum", "Product"):
        return cls(*[kernel_from_config(c) for c in cfg["kernels"]])
    # composites: their parts are kernel configs under "kernel" / "kernels"
    if "kernel" in cfg:
        cfg["kernel"] = kernel_from_config(cfg["kernel"])
    if "kernels" in cfg:
        cfg["kernels"] = [kernel_from_config(c) for c in cfg["kernels"]]
    return cls(**cfg)
