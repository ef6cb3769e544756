"""Quick diagnostic plots: 1-D fits, training curves, calibration and reliability.

matplotlib is optional (``pip install latentgp[plot]``) and imported only when a plot
is made.  Without a display (a Linux session with neither ``DISPLAY`` nor
``WAYLAND_DISPLAY``) the non-interactive Agg backend is selected, so the functions work
on servers and in CI.  Every function returns the matplotlib ``Figure``; with ``path``
it is also saved (atomically: a temporary file in the same folder renamed into place),
in the format given by the file extension (PNG by default).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from typing import Any

import numpy as np

__all__ = ["plot_1d", "plot_objective", "plot_calibration", "plot_reliability"]

_INSTALL_HINT = "plotting needs matplotlib: pip install latentgp[plot]"


def _pyplot() -> Any:
    """Import pyplot lazily; pick the Agg backend when there is no display."""
    try:
        import matplotlib
    except ImportError as err:
        raise ImportError(_INSTALL_HINT) from err
    if "matplotlib.pyplot" not in sys.modules and _no_display():
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _no_display() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    return not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _figure(ax: Any, figsize: tuple[float, float], dpi: float) -> tuple[Any, Any]:
    if ax is not None:
        return ax.figure, ax
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=figsize, dpi=dpi)
    return fig, ax


def _save(fig: Any, path: str | os.PathLike | None) -> None:
    """Save ``fig`` at its own size and dpi, atomically (no partial file on failure)."""
    if path is None:
        return
    path = os.fspath(path)
    fmt = os.path.splitext(path)[1].lstrip(".").lower() or "png"
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fig.savefig(fh, format=fmt, dpi=fig.dpi)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _column(a: Any, name: str) -> np.ndarray:
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


def _inducing_inputs(model: Any) -> np.ndarray | None:
    Z = getattr(model, "Z", None)
    if Z is None:
        return None
    if hasattr(Z, "detach"):
        Z = Z.detach().cpu().numpy()
    Z = np.asarray(Z, dtype=np.float64)
    return Z.reshape(-1)  # (M, 1) or (Q, M, 1): every inducing input of the one dimension


# ============================================================================ plot_1d
def plot_1d(
    model: Any,
    X: Any,
    y: Any,
    path: str | os.PathLike | None = None,
    X_test: Any = None,
    y_test: Any = None,
    num_grid: int = 400,
    ax: Any = None,
    title: str | None = None,
    figsize: tuple[float, float] = (8.0, 4.5),
    dpi: float = 100,
) -> Any:
    """Plot a fitted model with one input dimension.

    Regression and count models: predictive mean, a band of +-2 standard deviations of
    ``y`` (filled) and of the latent ``f`` (dashed, lighter), the training points and the
    test points when given.  Binary models: ``P(y = 1)`` with the labels at 0 and 1;
    multi-class models: one probability curve per class.  Inducing inputs (``model.Z``)
    are marked as ticks along the x axis.

    Parameters
    ----------
    model: a fitted latentgp model with ``input_dim == 1`` and one output.
    X, y: training inputs ``(N,)`` or ``(N, 1)`` and targets ``(N,)`` (model input units).
    path: save the figure there (PNG unless the extension says otherwise).
    X_test, y_test: optional test points, drawn in a second colour.
    num_grid: number of grid points for the curves.
    ax: draw into this matplotlib ``Axes`` instead of a new figure.
    title: axes title.
    figsize, dpi: size of a new figure (the saved image is ``figsize * dpi`` pixels).

    Returns
    -------
    The matplotlib ``Figure``.
    """
    if getattr(model, "input_dim", None) is None:
        raise ValueError("plot_1d needs a fitted model: call fit(X, y) first")
    if model.input_dim != 1:
        raise ValueError(f"plot_1d needs a model with one input dimension, got {model.input_dim}")
    if (getattr(model, "output_dim", 1) or 1) > 1:
        raise ValueError("plot_1d supports single-output models only")
    if int(num_grid) < 2:
        raise ValueError(f"num_grid must be >= 2, got {num_grid}")
    x = _column(X, "X")
    yv = _column(y, "y")
    if x.shape != yv.shape:
        raise ValueError(f"X has {x.shape[0]} points but y has {yv.shape[0]}")
    xt = yt = None
    if X_test is not None or y_test is not None:
        if X_test is None or y_test is None:
            raise ValueError("give both X_test and y_test, or neither")
        xt, yt = _column(X_test, "X_test"), _column(y_test, "y_test")
        if xt.shape != yt.shape:
            raise ValueError(f"X_test has {xt.shape[0]} points but y_test has {yt.shape[0]}")
    Z = _inducing_inputs(model)

    xs = [x] + ([xt] if xt is not None else []) + ([Z] if Z is not None else [])
    lo, hi = float(min(a.min() for a in xs)), float(max(a.max() for a in xs))
    pad = 0.05 * (hi - lo) if hi > lo else 1.0
    grid = np.linspace(lo - pad, hi + pad, int(num_grid))
    mean_y, var_y = model.predict_y(grid[:, None])
    mean_f, var_f = model.predict_f(grid[:, None])
    task = getattr(model.likelihood, "task", "regression")

    fig, ax = _figure(ax, figsize, dpi)
    if task == "binary":
        ax.plot(grid, mean_y, color="C0", lw=2, label="P(y = 1)")
        ax.scatter(x, yv, s=12, color="k", alpha=0.6, label="training data", zorder=3)
        if xt is not None:
            ax.scatter(xt, yt, s=14, color="C3", marker="x", label="test data", zorder=3)
        ax.set_ylim(-0.08, 1.08)
        ax.set_ylabel("probability")
    elif task == "multiclass":
        for c in range(mean_y.shape[1]):
            ax.plot(grid, mean_y[:, c], color=f"C{c}", lw=2, label=f"P(y = {c})")
        ax.scatter(
            x,
            yv / max(1, mean_y.shape[1] - 1),
            s=12,
            color="k",
            alpha=0.6,
            label="labels (scaled to [0, 1])",
            zorder=3,
        )
        ax.set_ylim(-0.08, 1.08)
        ax.set_ylabel("probability")
    else:
        sd_y, sd_f = np.sqrt(np.maximum(var_y, 0)), np.sqrt(np.maximum(var_f, 0))
        ax.fill_between(
            grid,
            mean_y - 2 * sd_y,
            mean_y + 2 * sd_y,
            color="C0",
            alpha=0.2,
            lw=0,
            label="±2 sd of y",
        )
        ax.plot(grid, mean_f - 2 * sd_f, color="C0", alpha=0.45, lw=1, ls="--", label="±2 sd of f")
        ax.plot(grid, mean_f + 2 * sd_f, color="C0", alpha=0.45, lw=1, ls="--")
        ax.plot(grid, mean_y, color="C0", lw=2, label="predictive mean")
        ax.scatter(x, yv, s=10, color="k", alpha=0.6, label="training data", zorder=3)
        if xt is not None:
            ax.scatter(xt, yt, s=14, color="C3", marker="x", label="test data", zorder=3)
        ax.set_ylabel("y")
    if Z is not None:
        # ticks at the bottom edge, in axes coordinates so they ignore the y range
        ax.plot(
            Z,
            np.zeros_like(Z),
            "|",
            color="C1",
            ms=12,
            mew=1.5,
            transform=ax.get_xaxis_transform(),
            clip_on=False,
            label=f"inducing inputs ({Z.size})",
        )
    ax.set_xlim(grid[0], grid[-1])
    ax.set_xlabel("x")
    if title:
        ax.set_title(title)
    ax.legend(loc="best", fontsize="small", framealpha=0.8)
    _save(fig, path)
    return fig


# ====================================================================== plot_objective
def plot_objective(
    history: Any,
    path: str | os.PathLike | None = None,
    ax: Any = None,
    title: str | None = None,
    figsize: tuple[float, float] = (6.0, 4.0),
    dpi: float = 100,
) -> Any:
    """Training objective against optimiser step.

    ``history`` is a :class:`~latentgp.FitHistory` (``model.history_``), a fitted model,
    or a sequence of objective values.
    """
    if hasattr(history, "history_"):
        history = history.history_
    if history is None:
        raise ValueError("no training history: fit the model first")
    values = getattr(history, "objective", history)
    y = np.asarray(list(values), dtype=np.float64).reshape(-1)
    if y.size == 0:
        raise ValueError("the history holds no objective values")
    fig, ax = _figure(ax, figsize, dpi)
    steps = np.arange(1, y.size + 1)
    ax.plot(steps, y, color="C0", lw=1.2)
    ax.set_xlabel("step")
    ax.set_ylabel("training objective (higher is better)")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    _save(fig, path)
    return fig


# ==================================================================== plot_calibration
def plot_calibration(
    y: Any,
    mean: Any,
    var: Any,
    path: str | os.PathLike | None = None,
    levels: Any = None,
    ax: Any = None,
    title: str | None = None,
    figsize: tuple[float, float] = (4.5, 4.5),
    dpi: float = 100,
) -> Any:
    """Regression calibration: observed coverage of central Gaussian intervals.

    For each nominal level ``p`` the fraction of ``y`` inside ``mean +- z_p sd`` is
    plotted against ``p``; a calibrated model follows the diagonal (below it:
    over-confident, above it: under-confident).
    """
    from latentgp import metrics

    yv, m, v = _column(y, "y"), _column(mean, "mean"), _column(var, "var")
    if not (yv.shape == m.shape == v.shape):
        raise ValueError(
            f"y, mean and var must have the same length: {yv.shape}, {m.shape}, {v.shape}"
        )
    if np.any(v < 0):
        raise ValueError("var must be non-negative")
    lv = np.linspace(0.05, 0.95, 19) if levels is None else np.asarray(levels, dtype=float)
    if lv.ndim != 1 or lv.size == 0 or np.any((lv <= 0) | (lv >= 1)):
        raise ValueError("levels must be a non-empty 1-D sequence of numbers in (0, 1)")
    observed = np.array([metrics.coverage(yv, m, v, float(p)) for p in lv])
    fig, ax = _figure(ax, figsize, dpi)
    ax.plot([0, 1], [0, 1], color="0.6", ls="--", lw=1, label="calibrated")
    ax.plot(lv, observed, "o-", color="C0", ms=4, label="model")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    ax.set_xlabel("nominal coverage of central interval")
    ax.set_ylabel("observed coverage")
    ax.set_title(title or f"calibration (N = {yv.size})")
    ax.legend(loc="upper left", fontsize="small")
    ax.grid(alpha=0.3)
    _save(fig, path)
    return fig


# ==================================================================== plot_reliability
def plot_reliability(
    y: Any,
    probs: Any,
    path: str | os.PathLike | None = None,
    num_bins: int = 10,
    ax: Any = None,
    title: str | None = None,
    figsize: tuple[float, float] = (4.5, 4.5),
    dpi: float = 100,
) -> Any:
    """Reliability diagram of binary predictions ``P(y = 1)``.

    Predictions are grouped into ``num_bins`` equal-width bins; for each non-empty bin
    the observed frequency of ``y = 1`` is plotted against the mean predicted
    probability, with marker areas proportional to the bin counts.  ``probs`` may also
    be ``(N, 2)`` class probabilities.
    """
    yv = _column(y, "y")
    p = np.asarray(
        probs.detach().cpu().numpy() if hasattr(probs, "detach") else probs, dtype=np.float64
    )
    if p.ndim == 2 and p.shape[1] == 2:
        p = p[:, 1]
    p = _column(p, "probs")
    if p.shape != yv.shape:
        raise ValueError(f"y has {yv.size} points but probs has {p.size}")
    if np.any((yv != 0) & (yv != 1)):
        raise ValueError("y must hold binary labels 0 or 1")
    if np.any((p < 0) | (p > 1)):
        raise ValueError("probs must lie in [0, 1]")
    if int(num_bins) < 1:
        raise ValueError(f"num_bins must be >= 1, got {num_bins}")
    edges = np.linspace(0.0, 1.0, int(num_bins) + 1)
    idx = np.clip(np.digitize(p, edges[1:-1]), 0, int(num_bins) - 1)
    counts = np.bincount(idx, minlength=int(num_bins))
    keep = counts > 0
    mean_p = np.bincount(idx, weights=p, minlength=int(num_bins))[keep] / counts[keep]
    freq = np.bincount(idx, weights=yv, minlength=int(num_bins))[keep] / counts[keep]
    fig, ax = _figure(ax, figsize, dpi)
    ax.plot([0, 1], [0, 1], color="0.6", ls="--", lw=1, label="calibrated")
    ax.plot(mean_p, freq, "-", color="C0", lw=1)
    sizes = 20 + 180 * counts[keep] / counts.max()
    ax.scatter(mean_p, freq, s=sizes, color="C0", alpha=0.8, zorder=3, label="bins (area ~ count)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    ax.set_xlabel("mean predicted P(y = 1)")
    ax.set_ylabel("observed frequency of y = 1")
    ax.set_title(title or f"reliability (N = {yv.size})")
    ax.legend(loc="upper left", fontsize="small")
    ax.grid(alpha=0.3)
    _save(fig, path)
    return fig
