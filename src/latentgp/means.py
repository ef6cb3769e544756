"""Mean functions of the GP prior: ``f ~ GP(m, k)`` with ``m`` zero, a learnable
constant, a learnable linear function, or any ``torch.nn.Module`` of the inputs.

A mean function maps inputs ``X`` ``(N, D)`` to ``(N, Q)``: one value per latent
function (``Q`` from the model).  Like kernels, mean functions are built lazily
(:meth:`MeanFunction.build`) once the model knows ``D`` and ``Q``, so they can be given
before any data is seen: ``lg.SVGP(mean="constant")``.

Units.  A mean lives where the latent functions live: in the model's scaled-target units
when the model standardises its targets (``normalize_y``), else in the targets' own.
The weights of :class:`LinearMean` are stored per *column unit* of ``X`` (as lengthscales
and inducing inputs are, :func:`latentgp.parameters.column_unit`), so training does not
depend on the units of ``X``.

Models take ``mean=`` as ``"zero"`` (the default), ``"constant"``, ``"linear"``, a
:class:`MeanFunction`, or any ``torch.nn.Module`` (wrapped in :class:`ModuleMean`).  The
model keeps a *copy* of what it is given (:func:`mean_from_spec`): fitting never changes
a user's module.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import nn

from .parameters import column_unit

#: the names ``mean=`` accepts
MEAN_NAMES = ("zero", "constant", "linear")


class MeanFunction(nn.Module):
    """Base class: ``forward(X)`` ``(N, D)`` -> ``(N, Q)``."""

    #: the name a model file records (None: cannot be stored)
    name: str | None = None

    def __init__(self) -> None:
        super().__init__()
        self.input_dim: int | None = None
        self.num_latent: int | None = None

    @property
    def built(self) -> bool:
        return self.input_dim is not None

    @property
    def is_zero(self) -> bool:
        """Whether the mean is identically zero (models then skip it: bit-identical to a
        model without a mean)."""
        return False

    def build(
        self,
        input_dim: int,
        num_latent: int,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str | None = None,
    ) -> MeanFunction:
        """Allocate parameters for ``input_dim`` input columns and ``num_latent`` latent
        functions (idempotent for the same sizes)."""
        if self.built:
            if (self.input_dim, self.num_latent) != (input_dim, num_latent):
                raise ValueError(
                    f"{type(self).__name__} was built for {self.input_dim} inputs and "
                    f"{self.num_latent} latents, not {input_dim} and {num_latent}"
                )
            return self
        self.input_dim, self.num_latent = int(input_dim), int(num_latent)
        self._build(dtype, device)
        return self

    def _build(self, dtype: torch.dtype, device: torch.device | str | None) -> None:
        """Create parameters (``input_dim``, ``num_latent`` are set)."""

    def init_from_data(self, X: torch.Tensor) -> None:
        """Data-dependent set-up before training (``X`` ``(N, D)``); default: nothing."""

    def forward(self, X: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def to_config(self) -> dict[str, Any]:
        """JSON-serialisable description for model files."""
        if self.name is None:
            raise ValueError(
                f"a {type(self).__name__} mean cannot be stored in a model file (its code "
                "is not data); save the model's state_dict and rebuild it with the same module"
            )
        return {"type": self.name}


class ZeroMean(MeanFunction):
    """``m(x) = 0`` (the default)."""

    name = "zero"

    @property
    def is_zero(self) -> bool:
        return True

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return X.new_zeros(X.shape[:-1] + (self.num_latent or 1,))


class ConstantMean(MeanFunction):
    """``m_q(x) = c_q``: one learnable constant per latent function, initially ``value``."""

    name = "constant"

    def __init__(self, value: float = 0.0) -> None:
        super().__init__()
        self.initial_value = float(value)
        if not math.isfinite(self.initial_value):
            raise ValueError(f"ConstantMean value must be finite, got {value}")

    def _build(self, dtype, device):
        self.constant = nn.Parameter(
            torch.full((self.num_latent,), self.initial_value, dtype=dtype, device=device)
        )

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.constant.expand(X.shape[:-1] + (self.num_latent,))

    def to_config(self):
        return {"type": self.name, "value": self.initial_value}


class LinearMean(MeanFunction):
    """``m_q(x) = x^T w_q + b_q``: learnable weights ``(D, Q)`` and biases ``(Q,)``,
    initially zero.  ``weight`` is in the units of ``X``; it is stored per column unit
    (``weight = raw_weight / input_unit``, the unit measured by :meth:`init_from_data`)."""

    name = "linear"

    def _build(self, dtype, device):
        D, Q = self.input_dim, self.num_latent
        self.raw_weight = nn.Parameter(torch.zeros(D, Q, dtype=dtype, device=device))
        self.bias = nn.Parameter(torch.zeros(Q, dtype=dtype, device=device))
        self.register_buffer("input_unit", torch.ones(D, dtype=dtype, device=device))

    def init_from_data(self, X: torch.Tensor) -> None:
        with torch.no_grad():
            w = self.weight.clone()
            self.input_unit.copy_(column_unit(X).to(self.input_unit))
            self.weight = w

    @property
    def weight(self) -> torch.Tensor:
        """``(D, Q)`` weights in the units of ``X``."""
        return self.raw_weight / self.input_unit[:, None]

    @weight.setter
    def weight(self, value: Any) -> None:
        with torch.no_grad():
            v = torch.as_tensor(value, dtype=self.raw_weight.dtype, device=self.raw_weight.device)
            if v.ndim == 1:
                v = v[:, None]
            v = torch.broadcast_to(v, self.raw_weight.shape)
            self.raw_weight.copy_(v * self.input_unit[:, None])

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return X @ self.weight + self.bias


class ModuleMean(MeanFunction):
    """A user's ``torch.nn.Module`` as a mean: ``module(X)`` ``(N,)`` (one latent, or the
    same for every latent) or ``(N, Q)``.  Its parameters train with the model's.  A model
    file cannot hold it (:meth:`to_config` raises)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        if not isinstance(module, nn.Module):
            raise TypeError(f"ModuleMean needs a torch.nn.Module, got {type(module).__name__}")
        self.module = module

    def _build(self, dtype, device):
        self.module.to(dtype=dtype, device=device)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        out = self.module(X)
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"the mean module returned {type(out).__name__}, not a tensor")
        N, Q = X.shape[-2], self.num_latent
        if out.shape == X.shape[:-1]:
            out = out[..., None]
        if out.shape[:-1] != X.shape[:-1] or out.shape[-1] not in (1, Q):
            raise ValueError(
                f"the mean module maps X {tuple(X.shape)} to {tuple(out.shape)}; it must "
                f"return ({N},) or ({N}, {Q})"
            )
        return out.expand(X.shape[:-1] + (Q,))


def mean_from_spec(spec: Any) -> MeanFunction:
    """A model's own mean function from ``mean=``: None or ``"zero"``, ``"constant"``,
    ``"linear"``, a :class:`MeanFunction` or a ``torch.nn.Module`` (copied: the model never
    changes the object it was given)."""
    if spec is None:
        return ZeroMean()
    if isinstance(spec, str):
        name = spec.lower()
        if name == "zero":
            return ZeroMean()
        if name == "constant":
            return ConstantMean()
        if name == "linear":
            return LinearMean()
        raise ValueError(
            f"unknown mean {spec!r}; choose one of {', '.join(MEAN_NAMES)} or a module"
        )
    if isinstance(spec, MeanFunction):
        return copy.deepcopy(spec)
    if isinstance(spec, nn.Module):
        return ModuleMean(copy.deepcopy(spec))
    raise TypeError(
        f"mean must be one of {', '.join(MEAN_NAMES)}, a MeanFunction or a torch.nn.Module; "
        f"got {type(spec).__name__}"
    )


def mean_from_config(cfg: dict[str, Any] | str | None) -> MeanFunction:
    """The mean function a model file describes (None: the zero mean of older files)."""
    if cfg is None:
        return ZeroMean()
    if isinstance(cfg, str):
        return mean_from_spec(cfg)
    kind = cfg.get("type")
    if kind == "constant":
        return ConstantMean(cfg.get("value", 0.0))
    if kind in ("zero", "linear"):
        return mean_from_spec(kind)
    raise ValueError(f"unknown mean type {kind!r} in model file")
