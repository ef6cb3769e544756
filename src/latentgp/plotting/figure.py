"""What every plot shares: lazy pyplot (Agg without a display), a new figure, atomic
saving, and the checks that turn user arrays into finite float64 arrays."""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from ..io import atomic_write

__all__ = ["column", "inducing_inputs", "new_figure", "points", "pyplot", "save_figure"]

INSTALL_HINT = "plotting needs matplotlib: pip install latentgp[plot]"


def pyplot() -> Any:
    """Import pyplot lazily; pick the Agg backend when there is no display."""
    try:
        import matplotlib
    except ImportError as err:
        raise ImportError(INSTALL_HINT) from err
    if "matplotlib.pyplot" not in sys.modules and no_display():
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def no_display() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    return not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def new_figure(ax: Any, figsize: tuple[float, float], dpi: float) -> tuple[Any, Any]:
    if ax is not None:
        return ax.figure, ax
    plt = pyplot()
    # constrained layout keeps the axis labels (and an outside legend) inside the image
    fig, ax = plt.subplots(figsize=figsize, dpi=dpi, layout="constrained")
    return fig, ax


def save_figure(fig: Any, path: str | os.PathLike | None) -> None:
    """Save ``fig`` at its own size and dpi, atomically (no partial file on failure).

    The format follows the extension of ``path`` (PNG without one); ``None`` saves
    nothing.  This is what the plot functions' ``path=`` does.
    """
    if path is None:
        return
    path = os.fspath(path)
    fmt = os.path.splitext(path)[1].lstrip(".").lower() or "png"
    atomic_write(path, lambda fh: fig.savefig(fh, format=fmt, dpi=fig.dpi))


def column(a: Any, name: str) -> np.ndarray:
    """A finite 1-D float array from a vector or an ``(N, 1)`` column."""
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    arr = np.asarray(a, dtype=np.float64)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (N,) or a single column (N, 1), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf")
    return arr


def inducing_inputs(model: Any, flat: bool = True) -> np.ndarray | None:
    """Inducing inputs of ``model`` in its input space, ``(M_total,)`` for one input
    dimension (``flat``) or ``(M_total, D)``; ``None`` when the model has none there."""
    Z = getattr(model, "Z", None)
    if Z is None:
        return None
    if hasattr(Z, "detach"):
        Z = Z.detach().cpu().numpy()
    Z = np.asarray(Z, dtype=np.float64)
    D = getattr(model, "input_dim", None)
    if D is None or Z.ndim < 2 or Z.shape[-1] != D:
        return None  # e.g. SLGP's inducing inputs live in an augmented latent space
    Z = Z.reshape(-1, D)  # (M, D) or (Q, M, D): every inducing input
    return Z.reshape(-1) if flat and D == 1 else Z


def points(X: Any, name: str, dim: int) -> np.ndarray:
    """A finite ``(N, dim)`` float array from ``X`` (array or tensor)."""
    if hasattr(X, "detach"):
        X = X.detach().cpu().numpy()
    arr = np.asarray(X, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != dim:
        raise ValueError(f"{name} must have shape (N, {dim}), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf")
    return arr
