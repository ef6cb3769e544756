"""Checks at the boundary where data enters: clear errors naming what and where.

Every public entry point (``fit``, ``predict_*``, the CLI, the sklearn estimators)
passes its arrays through these functions once; code below them may assume finite,
correctly shaped tensors.
"""

from __future__ import annotations

import functools
import inspect
import math
import warnings
from typing import Any

import numpy as np
import torch


def _first_bad(mask: np.ndarray) -> str:
    idx = np.argwhere(mask)[0]
    if len(idx) == 1:
        return f"row {idx[0]}"
    return f"row {idx[0]}, column {idx[1]}"


def _check_magnitude(amax: float, where: str, name: str, dtype: torch.dtype) -> None:
    """Refuse finite values whose squares overflow ``dtype`` (distances, variances)."""
    limit = math.sqrt(torch.finfo(dtype).max) * 1e-4
    if amax > limit:
        raise ValueError(
            f"{name} has a value of magnitude {amax:.3g} at {where}, too large to compute "
            f"with in {str(dtype).replace('torch.', '')} (squares overflow beyond "
            f"{limit:.3g}); rescale it, e.g. standardise the columns"
        )


def to_numpy(a: Any, name: str) -> np.ndarray:
    """Convert array-likes (numpy, torch, pandas, lists) to a numpy array."""
    if isinstance(a, torch.Tensor):
        return a.detach().cpu().numpy()
    if hasattr(a, "to_numpy"):  # pandas
        a = a.to_numpy()
    try:
        arr = np.asarray(a)
    except Exception as err:  # noqa: BLE001
        raise ValueError(f"{name} could not be converted to an array: {err}") from None
    if arr.dtype == object or arr.dtype.kind in "USO":
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError):
            raise ValueError(
                f"{name} must be numeric, but it holds values of type {arr.dtype} "
                f"(e.g. {arr.ravel()[0]!r})"
            ) from None
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be numeric, got dtype {arr.dtype}")
    return arr


def check_inputs(
    X: Any,
    name: str = "X",
    input_dim: int | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
    allow_empty: bool = False,
) -> torch.Tensor:
    """Validate inputs and return a ``(N, D)`` tensor.

    A 1-D array is taken as ``N`` points of one input dimension.  Boolean inputs (numpy,
    torch, pandas) are taken as the numbers 0 and 1, as scikit-learn does.  Raises ``ValueError``
    for NaN/inf, wrong number of dimensions, empty data, or a column count that differs
    from the ``input_dim`` the model was trained with.
    """
    if isinstance(X, torch.Tensor) and X.dtype.is_floating_point:
        t = X.detach()
        if t.ndim == 1:
            t = t[:, None]
        arr = None
    else:
        arr = to_numpy(X, name)
        if arr.dtype.kind == "b":
            arr = arr.astype(np.float64)  # True/False as 1/0 (torch cannot take abs of bools)
        if arr.ndim == 1:
            arr = arr[:, None]
        t = None
    shape = tuple(t.shape) if t is not None else arr.shape
    if len(shape) != 2:
        raise ValueError(f"{name} must be a 2-D array of shape (N, D); got shape {shape}")
    if shape[0] == 0 and not allow_empty:
        raise ValueError(f"{name} is empty (0 rows): at least one data point is needed")
    if shape[1] == 0:
        raise ValueError(f"{name} has 0 columns: at least one input dimension is needed")
    if input_dim is not None and shape[1] != input_dim:
        raise ValueError(
            f"{name} has {shape[1]} columns but the model was trained with {input_dim} "
            "input dimensions"
        )
    if t is None:
        finite = np.isfinite(arr)
        if not finite.all():
            raise ValueError(f"{name} contains NaN or inf at {_first_bad(~finite)}")
        with warnings.catch_warnings():
            # read-only arrays (np.load(mmap_mode="r") and views of them) are fine:
            # latentgp only reads its inputs, it never writes to them in place
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            t = torch.as_tensor(arr)
    else:
        finite = torch.isfinite(t)
        if not bool(finite.all()):
            raise ValueError(f"{name} contains NaN or inf at {_first_bad((~finite).cpu().numpy())}")
    if t.numel():
        absval = t.abs()
        amax = float(absval.max())
        if amax > math.sqrt(torch.finfo(dtype).max) * 1e-4:
            where = _first_bad((absval == absval.max()).cpu().numpy())
            _check_magnitude(amax, where, name, dtype)
    return t.to(device=device, dtype=dtype)


def check_targets(
    y: Any,
    num_data: int,
    name: str = "y",
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
    allow_missing: bool = False,
) -> torch.Tensor:
    """Validate targets: finite, numeric, one per data point.

    Returns ``(N,)`` for single-output targets or ``(N, P)`` for multi-column targets
    (a ``(N, 1)`` column is flattened to ``(N,)``).  ``allow_missing``: NaN marks an
    output that was not observed (likelihoods with missing outputs); inf is still refused.
    """
    arr = to_numpy(y, name)
    if arr.ndim == 0:
        raise ValueError(f"{name} must be an array with one entry per data point, got a scalar")
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim > 2:
        raise ValueError(f"{name} must be 1-D (N,) or 2-D (N, P); got shape {arr.shape}")
    if arr.shape[0] != num_data:
        raise ValueError(
            f"{name} has {arr.shape[0]} entries but X has {num_data} rows: they must match"
        )
    finite = np.isfinite(arr)
    if allow_missing:
        finite = finite | np.isnan(arr)
    if not finite.all():
        raise ValueError(f"{name} contains NaN or inf at {_first_bad(~finite)}")
    if arr.size and dtype.is_floating_point and np.isfinite(arr).any():
        absval = np.abs(np.where(np.isfinite(arr), arr, 0).astype(np.float64))
        amax = float(absval.max())
        if amax > math.sqrt(torch.finfo(dtype).max) * 1e-4:
            _check_magnitude(amax, _first_bad(absval == amax), name, dtype)
    return torch.as_tensor(arr).to(device=device, dtype=dtype)


def check_positive_int(value: Any, name: str, minimum: int = 1) -> int:
    """An integer >= ``minimum`` (bools rejected)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


class SizeCappedWarning(UserWarning):
    """A ``batch_size`` or ``num_inducing`` larger than the training data was reduced to
    the number of training rows N (see :func:`cap_at_rows`)."""


def cap_at_rows(value: int, num_rows: int, *, name: str) -> int:
    """``min(value, num_rows)``: the one rule of every front end (``fit``, the estimators
    of :mod:`latentgp.sklearn`, ``latentgp fit``) for a ``batch_size`` or ``num_inducing``
    above the number of training rows N.  A batch of N rows is the whole data, and N
    inducing points picked from N rows are all of them, so the request means N; a
    :class:`SizeCappedWarning` says so when the value is reduced."""
    value = check_positive_int(value, name)
    if value > num_rows:
        warnings.warn(
            f"{name}={value} is larger than the {num_rows} training rows; "
            f"using {name}={num_rows}",
            SizeCappedWarning,
            stacklevel=2,
        )
        return int(num_rows)
    return value


#: The largest seed every generator latentgp seeds accepts (torch's are 64-bit unsigned).
MAX_SEED = 2**64 - 1


def check_seed(value: Any, name: str = "seed") -> int | None:
    """``None``, or an integer seed in ``[0, 2**64 - 1]`` (what torch and numpy accept);
    anything else is a ``ValueError`` naming ``name`` and the range."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer in [0, 2**64 - 1] or None, got {value!r}")
    if not 0 <= int(value) <= MAX_SEED:
        raise ValueError(f"{name} must be in [0, 2**64 - 1], got {value}")
    return int(value)


def check_mean_covariance(
    mean: Any,
    covariance: Any,
    *,
    num_latent: int,
    size: int,
    name: str,
    dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A Gaussian over ``num_latent`` (Q) vectors of ``size`` (M) entries, checked: mean
    ``(Q, M)`` (or ``(M,)`` when Q = 1), covariance ``(Q, M, M)`` (or ``(M, M)``),
    finite, symmetric and positive semi-definite (both to round-off).  Returns them as
    ``(Q, M)`` and ``(Q, M, M)`` tensors of ``dtype``; a ``ValueError`` naming ``name``
    and the problem otherwise."""
    Q, M = int(num_latent), int(size)
    m = torch.as_tensor(to_numpy(mean, f"{name} mean"), dtype=torch.float64)
    C = torch.as_tensor(to_numpy(covariance, f"{name} covariance"), dtype=torch.float64)
    if tuple(m.shape) not in ((Q, M),) + (((M,),) if Q == 1 else ()):
        raise ValueError(f"{name} mean has shape {tuple(m.shape)}; expected ({Q}, {M})")
    if tuple(C.shape) not in ((Q, M, M),) + (((M, M),) if Q == 1 else ()):
        raise ValueError(
            f"{name} covariance has shape {tuple(C.shape)}; expected ({Q}, {M}, {M})"
        )
    m, C = m.reshape(Q, M), C.reshape(Q, M, M)
    for what, t in (("mean", m), ("covariance", C)):
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{name} {what} contains NaN or inf")
    top = float(C.abs().amax()) if C.numel() else 0.0
    if float((C - C.mT).abs().amax()) > 1e-10 * max(top, 1e-300):
        raise ValueError(f"{name} covariance is not symmetric")
    low = float(torch.linalg.eigvalsh(0.5 * (C + C.mT)).amin())
    if low < -1e-10 * max(top, 1e-300) * M:
        raise ValueError(
            f"{name} covariance is not positive semi-definite (smallest eigenvalue {low:.3g})"
        )
    return m.to(dtype), C.to(dtype)


def check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of ``choices``, else a ``ValueError`` listing them."""
    if value not in choices:
        names = ", ".join(repr(c) for c in choices[:-1]) + f" or {choices[-1]!r}"
        raise ValueError(f"{name} must be {names}, got {value!r}")
    return value


def check_positive_float(value: Any, name: str) -> float:
    """A finite float > 0."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number, got {value!r}") from None
    if not np.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return v


def check_learning_rate(lr: Any, name: str = "lr") -> float:
    """A learning rate: a finite number > 0 (``ValueError`` naming it otherwise)."""
    if isinstance(lr, bool) or not (
        isinstance(lr, (int, float, np.integer, np.floating)) and math.isfinite(lr) and lr > 0
    ):
        raise ValueError(f"{name} must be a positive number, got {lr!r}")
    return float(lr)


def constant_columns(X: Any) -> list[int]:
    """Indices of the columns of ``X`` ``(N, D)`` that hold a single value (N >= 2).

    Such a column carries no information; the models handle it (its lengthscale gets no
    gradient and standardisation leaves it at zero), and front ends warn about it.
    """
    arr = np.asarray(X)
    if arr.ndim != 2 or arr.shape[0] < 2:
        return []
    return [int(j) for j in np.flatnonzero((arr == arr[:1]).all(axis=0))]


def keyword_only_after_first(max_legacy: int | None = None, legacy: tuple[str, ...] = ()):
    """Decorator for a model's ``__init__`` whose arguments after the first are keyword-only.

    Scripts written when they could be passed by position keep working: extra positional
    arguments are bound to the names they had before -- ``legacy`` (the old positional
    order), else the keyword-only parameters in order, at most ``max_legacy`` of them
    (None: all) -- with a ``DeprecationWarning`` that shows the keyword spelling.  Every
    other call is unchanged.
    """

    def decorate(init):
        sig = inspect.signature(init)
        kwonly = [p.name for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY]
        order = list(legacy) or kwonly
        limit = len(order) if max_legacy is None else max_legacy

        @functools.wraps(init)
        def wrapper(self, *args, **kwargs):
            if len(args) > 1:
                extra = args[1:]
                cls = type(self).__name__
                if len(extra) > limit:
                    raise TypeError(
                        f"{cls}() takes 1 positional argument; pass the others by keyword "
                        f"({', '.join(order[:limit + 1])}, ...)"
                    )
                names = order[: len(extra)]
                for name, value in zip(names, extra, strict=True):
                    if name in kwargs:
                        raise TypeError(f"{cls}() got two values for {name!r}")
                    kwargs[name] = value
                spelled = ", ".join(f"{n}=..." for n in names)
                warnings.warn(
                    f"{cls}: passing {', '.join(names)} by position is deprecated; write "
                    f"{cls}(<first>, {spelled})",
                    DeprecationWarning,
                    stacklevel=2,
                )
                args = args[:1]
            return init(self, *args, **kwargs)

        return wrapper

    return decorate
