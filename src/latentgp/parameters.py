"""Constrained parameters: positive values stored through an inverse softplus.

A positive quantity ``theta`` is stored as an unconstrained ``raw`` tensor with
``theta = softplus(raw) + lower``, so gradient steps can never make it negative.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from .columns import column_varies
from .constants import LOG_2PI as LOG_2PI  # re-exported for older imports


def softplus(raw: torch.Tensor, lower: float = 0.0) -> torch.Tensor:
    """``log(1 + exp(raw)) + lower``."""
    return F.softplus(raw) + lower


def softplus_slope(raw: torch.Tensor) -> torch.Tensor:
    """``d softplus(raw) / d raw`` as torch's ``F.softplus`` differentiates it (the
    logistic function; exactly 1 above its linear threshold 20), for gradients written
    in closed form."""
    return torch.where(raw > 20.0, torch.ones_like(raw), torch.sigmoid(raw))


def inv_softplus(value: torch.Tensor | float, lower: float = 0.0) -> torch.Tensor:
    """Inverse of :func:`softplus`, stable for large and small values."""
    v = torch.as_tensor(value, dtype=torch.float64) - lower
    if bool((v <= 0).any()):
        raise ValueError(f"a positive parameter must be > {lower}, got {value}")
    # log(exp(v) - 1) = v + log(1 - exp(-v))
    return v + torch.log(-torch.expm1(-v))


def positive_raw_parameters(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The trainable parameters of ``module`` named ``raw_*``: by this library's convention
    each holds a positive quantity as ``softplus(raw) + lower`` (times a fixed unit), so
    ``log softplus(raw)`` is an unconstrained log coordinate of it (SEP's sign rule steps
    in it, :class:`latentgp.training.optim.SignAdaptive`)."""
    return [
        p
        for name, p in module.named_parameters()
        if p.requires_grad and name.rsplit(".", 1)[-1].startswith("raw_")
    ]


def positive_parameter(
    value: torch.Tensor | float, shape: tuple[int, ...], dtype: torch.dtype, device=None
) -> torch.nn.Parameter:
    """A raw parameter of ``shape`` initialised so that ``softplus(raw) == value``."""
    raw = inv_softplus(value).to(dtype=dtype, device=device)
    return torch.nn.Parameter(raw.expand(shape).clone())




def check_positive_values(value, what: str) -> None:
    """``ValueError`` naming ``what`` unless every entry of ``value`` (a number, list or
    tensor) is a positive finite number."""
    try:
        v = torch.as_tensor(value, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        msg = f"{what} must be a positive number or a list of them, got {value!r}"
        raise ValueError(msg) from None
    if v.numel() == 0 or not bool(torch.isfinite(v).all()) or bool((v <= 0).any()):
        raise ValueError(f"{what} must be positive and finite, got {value!r}")


def assign_positive(
    raw: torch.Tensor,
    value,
    what: str,
    *,
    unit: torch.Tensor | None = None,
    lower: float = 0.0,
) -> None:
    """Set ``raw`` in place so that ``softplus(raw, lower) * unit`` equals ``value``
    (broadcast to ``raw``'s shape): the setter of every positive parameter (kernel
    lengthscales and variances, likelihood noise).  ``ValueError`` naming ``what`` for a
    value that is not positive and finite, not above ``lower``, or of a shape that does
    not fit."""
    check_positive_values(value, what)
    with torch.no_grad():
        v = torch.as_tensor(value, dtype=torch.float64).to(raw.device)
        try:
            v = torch.broadcast_to(v, raw.shape)
        except RuntimeError:
            raise ValueError(
                f"{what} has shape {tuple(v.shape)}, which does not fit the parameter's "
                f"{tuple(raw.shape)}"
            ) from None
        if unit is not None:
            v = v / unit.double()
        if bool((v <= lower).any()):
            raise ValueError(f"{what} must be larger than its lower bound {lower:g}, got {value!r}")
        raw.copy_(inv_softplus(v, lower).to(raw))


def column_unit(X: torch.Tensor) -> torch.Tensor:
    """``(D,)`` unit of each input column: its standard deviation (1 where the column is
    constant or there is a single row).

    Parameters that live in input units (inducing inputs, lengthscales, periods) are
    stored divided by this unit, so an optimiser's steps are in proportion to the spread
    of the data: training on ``X * c`` then takes the same raw steps as on ``X``.
    """
    if X.shape[0] < 2:
        return torch.ones(X.shape[-1], dtype=X.dtype, device=X.device)
    return spread_unit(X.std(0), X.amin(0), X.amax(0))


def spread_unit(sd: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """Per-column units: the standard deviation ``sd`` where the column varies, 1 where
    it is constant (or ``sd`` is not finite).

    Constancy is read from the column's range ``[lo, hi]``
    (:func:`latentgp.columns.column_varies`, the rule the data ``Standardizer``
    uses too): a round-off deviation taken for a spread gave a constant column of
    keggdirected split 2 a unit of ~1e-20, so that any unseen value of it sent the
    prediction to the prior.
    """
    ok = torch.isfinite(sd) & (sd > 0) & column_varies(lo, hi)
    return torch.where(ok, sd, torch.ones_like(sd))


def sharded_column_unit(
    X: torch.Tensor,
    total: Callable[[torch.Tensor], torch.Tensor],
    maximum: Callable[[torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """:func:`column_unit` of the rows of all processes, each holding a shard ``X``.

    ``total(t)`` sums a tensor over the processes and ``maximum(t)`` takes its elementwise
    maximum (all-reduces).  Two passes (mean, then squared deviations) as in
    ``torch.std``, so a sharded run uses the unit of the full data.
    """
    n = total(torch.tensor([float(X.shape[0])], dtype=X.dtype, device=X.device))
    if float(n) < 2:
        return torch.ones(X.shape[-1], dtype=X.dtype, device=X.device)
    mean = total(X.sum(0)) / n
    sd = (total(((X - mean) ** 2).sum(0)) / (n - 1)).sqrt()
    none = torch.full((X.shape[-1],), -torch.inf, dtype=X.dtype, device=X.device)  # empty shard
    hi = maximum(X.amax(0) if X.shape[0] else none)
    lo = -maximum(-X.amin(0) if X.shape[0] else none)
    return spread_unit(sd, lo, hi)


def adopt_input_unit(module: torch.nn.Module, unit: torch.Tensor) -> None:
    """Store every input-unit parameter of ``module`` and its children (lengthscales,
    periods, inducing inputs) in the new column ``unit`` ``(D,)``, keeping their values."""
    for m in module.modules():
        fn = getattr(m, "adopt_input_unit", None)
        if fn is not None:
            fn(unit)
