"""Quick diagnostic plots: 1-D fits, training curves, calibration and reliability.

matplotlib is optional (``pip install latentgp[plot]``) and imported only when a plot
is made.  Without a display (a Linux session with neither ``DISPLAY`` nor
``WAYLAND_DISPLAY``) the non-interactive Agg backend is selected, so the functions work
on servers and in CI.  Every function returns the matplotlib ``Figure``; with ``path``
it is also saved (atomically: a temporary file in the same folder renamed into place),
in the format given by the file extension (PNG by default).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from .io import atomic_write

__all__ = [
    "plot_1d",
    "plot_2d",
    "plot_objective",
    "plot_metric_traces",
    "plot_inducing",
    "plot_latent",
    "plot_calibration",
    "plot_reliability",
    "save_figure",
]

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


def _inducing_inputs(model: Any, flat: bool = True) -> np.ndarray | None:
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
    ``y`` (filled) and of the latent ``f`` (dashed, lighter; not for models without a
    single latent function, such as SHGP), the training points and the test points when
    given.  Binary models: ``P(y = 1)`` with the labels at 0 and 1;
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
    _check_model(model, "plot_1d", 1, "one input dimension")
    _check_num_grid(num_grid)
    x, yv, xt, yt = _points_1d(X, y, X_test, y_test)
    Z = _inducing_inputs(model)

    xs = [x] + ([xt] if xt is not None else []) + ([Z] if Z is not None else [])
    lo, hi = float(min(a.min() for a in xs)), float(max(a.max() for a in xs))
    pad = 0.05 * (hi - lo) if hi > lo else 1.0
    grid = np.linspace(lo - pad, hi + pad, int(num_grid))
    mean_y, var_y = model.predict_y(grid[:, None])
    try:
        pred_f = model.predict_f(grid[:, None])
    except NotImplementedError:  # no single latent f (the modulated GPs): no f band
        pred_f = None
    if pred_f is not None and np.ndim(pred_f[0]) != 1:  # several latents (SVHGP's noise)
        pred_f = None
    task = getattr(model.likelihood, "task", "regression")

    fig, ax = _figure(ax, figsize, dpi)
    if task == "binary":
        _draw_1d_binary(ax, grid, mean_y, x, yv, xt, yt)
    elif task == "multiclass":
        _draw_1d_multiclass(ax, grid, mean_y, x, yv)
    else:
        _draw_1d_regression(ax, grid, (mean_y, var_y), pred_f, x, yv, xt, yt)
    if Z is not None:
        _mark_inducing_1d(ax, Z)
    ax.set_xlim(grid[0], grid[-1])
    ax.set_xlabel("x")
    if title:
        ax.set_title(title)
    # beside the axes, never over the data (points can fill every corner of the plot)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize="small")
    save_figure(fig, path)
    return fig


def _check_model(model: Any, fn: str, dim: int, dims: str) -> None:
    """``model`` is fitted, has ``dim`` input dimensions and a single output."""
    if getattr(model, "input_dim", None) is None:
        raise ValueError(f"{fn} needs a fitted model: call fit(X, y) first")
    if model.input_dim != dim:
        raise ValueError(f"{fn} needs a model with {dims}, got {model.input_dim}")
    if (getattr(model, "output_dim", 1) or 1) > 1:
        raise ValueError(f"{fn} supports single-output models only")


def _check_num_grid(num_grid: int) -> None:
    if int(num_grid) < 2:
        raise ValueError(f"num_grid must be >= 2, got {num_grid}")


def _points_1d(
    X: Any, y: Any, X_test: Any, y_test: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Training and (optional) test points of :func:`plot_1d` as checked 1-D arrays."""
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
    return x, yv, xt, yt


def _draw_1d_binary(
    ax: Any, grid: np.ndarray, mean_y: Any, x: np.ndarray, yv: np.ndarray,
    xt: np.ndarray | None, yt: np.ndarray | None,
) -> None:
    ax.plot(grid, mean_y, color="C0", lw=2, label="P(y = 1)")
    ax.scatter(x, yv, s=12, color="k", alpha=0.6, label="training data", zorder=3)
    if xt is not None:
        ax.scatter(xt, yt, s=14, color="C3", marker="x", label="test data", zorder=3)
    ax.set_ylim(-0.08, 1.08)
    ax.set_ylabel("probability")


def _draw_1d_multiclass(
    ax: Any, grid: np.ndarray, mean_y: Any, x: np.ndarray, yv: np.ndarray
) -> None:
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


def _draw_1d_regression(
    ax: Any, grid: np.ndarray, pred_y: tuple[Any, Any], pred_f: tuple[Any, Any] | None,
    x: np.ndarray, yv: np.ndarray, xt: np.ndarray | None, yt: np.ndarray | None,
) -> None:
    mean_y, var_y = pred_y
    sd_y = np.sqrt(np.maximum(var_y, 0))
    ax.fill_between(
        grid,
        mean_y - 2 * sd_y,
        mean_y + 2 * sd_y,
        color="C0",
        alpha=0.2,
        lw=0,
        label="±2 sd of y",
    )
    if pred_f is not None:
        mean_f, sd_f = pred_f[0], np.sqrt(np.maximum(pred_f[1], 0))
        ax.plot(grid, mean_f - 2 * sd_f, color="C0", alpha=0.45, lw=1, ls="--", label="±2 sd of f")
        ax.plot(grid, mean_f + 2 * sd_f, color="C0", alpha=0.45, lw=1, ls="--")
    ax.plot(grid, mean_y, color="C0", lw=2, label="predictive mean")
    ax.scatter(x, yv, s=10, color="k", alpha=0.6, label="training data", zorder=3)
    if xt is not None:
        ax.scatter(xt, yt, s=14, color="C3", marker="x", label="test data", zorder=3)
    ax.set_ylabel("y")


def _mark_inducing_1d(ax: Any, Z: np.ndarray) -> None:
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


# ====================================================================== plot_objective
def plot_objective(
    history: Any,
    path: str | os.PathLike | None = None,
    ax: Any = None,
    title: str | None = None,
    figsize: tuple[float, float] = (6.0, 4.0),
    dpi: float = 100,
    steps: Any = None,
) -> Any:
    """Training objective against optimiser step.

    ``history`` is a :class:`~latentgp.FitHistory` (``model.history_``), a fitted model,
    or a sequence of objective values ``(T,)``.  ``steps`` ``(T,)`` gives the step of each
    value (default ``1..T``), for thinned records.
    """
    if hasattr(history, "history_"):
        history = history.history_
    if history is None:
        raise ValueError("no training history: fit the model first")
    values = getattr(history, "objective", history)
    y = np.asarray(list(values), dtype=np.float64).reshape(-1)
    if y.size == 0:
        raise ValueError("the history holds no objective values")
    if steps is None:
        steps = np.arange(1, y.size + 1)
    else:
        steps = np.asarray(steps, dtype=np.float64).reshape(-1)
        if steps.shape != y.shape:
            raise ValueError(f"steps has {steps.size} entries but there are {y.size} values")
    fig, ax = _figure(ax, figsize, dpi)
    ax.plot(steps, y, color="C0", lw=1.2)
    ax.set_xlabel("step")
    ax.set_ylabel("training objective (higher is better)")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    save_figure(fig, path)
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
    save_figure(fig, path)
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
    save_figure(fig, path)
    return fig


# ============================================================================ plot_2d
def _points(X: Any, name: str, dim: int) -> np.ndarray:
    if hasattr(X, "detach"):
        X = X.detach().cpu().numpy()
    arr = np.asarray(X, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != dim:
        raise ValueError(f"{name} must have shape (N, {dim}), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf")
    return arr


def _grid_2d(points: list[np.ndarray], num_grid: int) -> tuple[np.ndarray, np.ndarray]:
    """Axis ranges spanning ``points`` with 5% padding: two arrays ``(num_grid,)``."""
    both = np.concatenate(points, axis=0)
    axes = []
    for j in range(2):
        lo, hi = float(both[:, j].min()), float(both[:, j].max())
        pad = 0.05 * (hi - lo) if hi > lo else 1.0
        axes.append(np.linspace(lo - pad, hi + pad, int(num_grid)))
    return axes[0], axes[1]


def plot_2d(
    model: Any,
    X: Any,
    y: Any = None,
    path: str | os.PathLike | None = None,
    num_grid: int = 80,
    axes: Any = None,
    title: str | None = None,
    feature_names: tuple[str, str] | None = None,
    class_names: Any = None,
    figsize: tuple[float, float] | None = None,
    dpi: float = 100,
) -> Any:
    """Maps of a fitted model with two input dimensions.

    Regression and count models: the predictive mean of ``y`` (left) and its predictive
    standard deviation (right) on a ``num_grid x num_grid`` grid spanning the data, with
    the points coloured by ``y`` on the mean map.  Binary models: ``P(y = 1)`` with the
    0.5 contour.  Multi-class models: the most probable class, shaded by its probability
    (white where the classes are equally likely).  Inducing inputs (``model.Z``) are drawn
    as crosses.

    Parameters
    ----------
    model: a fitted latentgp model with ``input_dim == 2`` and one output.
    X: inputs ``(N, 2)`` to draw (and to span the grid); y: their targets ``(N,)`` or None.
    path: save the figure there (PNG unless the extension says otherwise).
    num_grid: grid points per axis.
    axes: draw into these Axes: two (mean, sd) for regression, one for classification.
    title: figure title.  feature_names: axis labels.  class_names: legend labels.
    figsize, dpi: size of a new figure (default 10 x 4.2 in for regression, 6 x 5 in for
        classification); the saved image is ``figsize * dpi`` pixels.

    Returns
    -------
    The matplotlib ``Figure``.
    """
    _check_model(model, "plot_2d", 2, "two input dimensions")
    _check_num_grid(num_grid)
    Xv, yv = _points_2d(X, y)
    Z = _inducing_inputs(model, flat=False)
    g0, g1 = _grid_2d([Xv] + ([Z] if Z is not None else []), num_grid)
    G0, G1 = np.meshgrid(g0, g1)  # (G, G), rows follow the second input
    grid = np.column_stack([G0.ravel(), G1.ravel()])
    mean, var = model.predict_y(grid)
    mean, var = np.asarray(mean, dtype=np.float64), np.asarray(var, dtype=np.float64)
    task = getattr(model.likelihood, "task", "regression")
    fig, axes = _axes_2d(axes, task, figsize, dpi)
    extent = (g0[0], g0[-1], g1[0], g1[-1])

    if task == "binary":
        _draw_2d_binary(fig, axes[0], (G0, G1), extent, mean, Xv, yv)
    elif task == "multiclass":
        _draw_2d_multiclass(axes[0], G0.shape, extent, mean, Xv, yv, class_names)
    else:
        _draw_2d_regression(fig, axes, G0.shape, extent, (mean, var), Xv, yv)
    names2 = feature_names or ("x1", "x2")
    for ax in axes:
        _finish_axes_2d(ax, Z, g0, g1, names2)
    axes[0].legend(loc="best", fontsize="small", framealpha=0.8)
    if title:
        fig.suptitle(title)
    save_figure(fig, path)
    return fig


def _points_2d(X: Any, y: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """Points ``(N, 2)`` and their targets ``(N,)`` (or None) of :func:`plot_2d`, checked."""
    Xv = _points(X, "X", 2)
    yv = None if y is None else _column(y, "y")
    if yv is not None and yv.shape[0] != Xv.shape[0]:
        raise ValueError(f"X has {Xv.shape[0]} points but y has {yv.shape[0]}")
    return Xv, yv


def _axes_2d(
    axes: Any, task: str, figsize: tuple[float, float] | None, dpi: float
) -> tuple[Any, list]:
    """The figure and Axes of :func:`plot_2d`: one for classification, two otherwise."""
    classify = task in ("binary", "multiclass")
    n_axes = 1 if classify else 2
    if axes is None:
        plt = _pyplot()
        size = figsize or ((6.0, 5.0) if classify else (10.0, 4.2))
        fig, axes = plt.subplots(
            1, n_axes, figsize=size, dpi=dpi, squeeze=False, layout="constrained"
        )
        return fig, list(axes[0])
    axes = list(np.atleast_1d(axes))
    if len(axes) != n_axes:
        raise ValueError(f"give {n_axes} Axes for a {task} model, got {len(axes)}")
    return axes[0].figure, axes


def _scatter_points(ax: Any, Xv: np.ndarray, colour: Any = None, **kw: Any) -> None:
    if colour is None:
        ax.scatter(Xv[:, 0], Xv[:, 1], s=10, c="k", alpha=0.6, label="data", **kw)
    else:
        ax.scatter(Xv[:, 0], Xv[:, 1], s=14, c=colour, edgecolors="k", linewidths=0.4,
                   label="data", **kw)


def _draw_2d_binary(
    fig: Any, ax: Any, mesh: tuple[np.ndarray, np.ndarray], extent: tuple, mean: np.ndarray,
    Xv: np.ndarray, yv: np.ndarray | None,
) -> None:
    G0, G1 = mesh
    shape = G0.shape
    im = ax.imshow(mean.reshape(shape), origin="lower", extent=extent, aspect="auto",
                   cmap="RdBu_r", vmin=0.0, vmax=1.0)
    ax.contour(G0, G1, mean.reshape(shape), levels=[0.5], colors="k", linewidths=1)
    fig.colorbar(im, ax=ax, label="P(y = 1)")
    _scatter_points(ax, Xv, None if yv is None else yv, cmap="RdBu_r", vmin=0, vmax=1)


def _draw_2d_multiclass(
    ax: Any, shape: tuple[int, ...], extent: tuple, mean: np.ndarray, Xv: np.ndarray,
    yv: np.ndarray | None, class_names: Any,
) -> None:
    C = mean.shape[1]
    cmap = _pyplot().get_cmap("tab10")
    colours = np.array([cmap(c % 10)[:3] for c in range(C)])
    top = mean.argmax(axis=1)
    strength = (mean.max(axis=1) - 1.0 / C) / (1.0 - 1.0 / C)
    rgb = 1.0 - strength[:, None] * (1.0 - colours[top])
    ax.imshow(rgb.reshape(*shape, 3), origin="lower", extent=extent, aspect="auto")
    names = list(range(C)) if class_names is None else list(class_names)
    if yv is None:
        _scatter_points(ax, Xv)
        return
    labels = yv.astype(int)
    for c in range(C):
        sel = labels == c
        if sel.any():
            ax.scatter(Xv[sel, 0], Xv[sel, 1], s=14, color=colours[c], edgecolors="k",
                       linewidths=0.4, label=f"class {names[c]}")


def _draw_2d_regression(
    fig: Any, axes: list, shape: tuple[int, ...], extent: tuple,
    pred: tuple[np.ndarray, np.ndarray], Xv: np.ndarray, yv: np.ndarray | None,
) -> None:
    mean, var = pred
    sd = np.sqrt(np.maximum(var, 0.0))
    lo = float(mean.min()) if yv is None else float(min(mean.min(), yv.min()))
    hi = float(mean.max()) if yv is None else float(max(mean.max(), yv.max()))
    im = axes[0].imshow(mean.reshape(shape), origin="lower", extent=extent, aspect="auto",
                        cmap="viridis", vmin=lo, vmax=hi)
    fig.colorbar(im, ax=axes[0], label="predictive mean")
    _scatter_points(axes[0], Xv, yv, cmap="viridis", vmin=lo, vmax=hi)
    axes[0].set_title("predictive mean of y")
    im = axes[1].imshow(sd.reshape(shape), origin="lower", extent=extent, aspect="auto",
                        cmap="magma")
    fig.colorbar(im, ax=axes[1], label="predictive sd")
    axes[1].scatter(Xv[:, 0], Xv[:, 1], s=4, c="w", alpha=0.5)
    axes[1].set_title("predictive sd of y")


def _finish_axes_2d(
    ax: Any, Z: np.ndarray | None, g0: np.ndarray, g1: np.ndarray, names2: Any
) -> None:
    """Inducing inputs, the grid's limits and the axis labels on one Axes of plot_2d."""
    if Z is not None:
        ax.scatter(Z[:, 0], Z[:, 1], marker="x", s=30, c="C1", linewidths=1.5,
                   label=f"inducing inputs ({Z.shape[0]})")
    ax.set_xlim(g0[0], g0[-1])
    ax.set_ylim(g1[0], g1[-1])
    ax.set_xlabel(names2[0])
    ax.set_ylabel(names2[1])


# ================================================================= plot_metric_traces
def plot_metric_traces(
    steps: Any,
    traces: dict[str, Any],
    path: str | os.PathLike | None = None,
    title: str | None = None,
    figsize: tuple[float, float] | None = None,
    dpi: float = 100,
) -> Any:
    """Metrics recorded during training (e.g. test RMSE and NLPD), one panel per metric.

    Parameters
    ----------
    steps: optimiser steps ``(T,)`` at which the metrics were computed.
    traces: metric name -> values ``(T,)``.
    path: save the figure there.  title: figure title.
    figsize, dpi: figure size (default ``3.6 * K x 3.4`` in for K metrics).

    Returns
    -------
    The matplotlib ``Figure``.
    """
    s = np.asarray(steps, dtype=np.float64).reshape(-1)
    if s.size == 0 or not traces:
        raise ValueError("no metric traces to plot")
    values = {}
    for name, v in traces.items():
        arr = np.asarray(v, dtype=np.float64).reshape(-1)
        if arr.shape != s.shape:
            raise ValueError(f"trace {name!r} has {arr.size} values but there are {s.size} steps")
        values[name] = arr
    plt = _pyplot()
    k = len(values)
    fig, axes = plt.subplots(1, k, figsize=figsize or (3.6 * k, 3.4), dpi=dpi, squeeze=False)
    for ax, (name, arr) in zip(axes[0], values.items(), strict=True):
        ax.plot(s, arr, "o-", color="C0", ms=3, lw=1.2)
        ax.set_xlabel("step")
        ax.set_title(name)
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path)
    return fig


# ====================================================================== plot_inducing
def plot_inducing(
    model: Any,
    X: Any,
    y: Any = None,
    path: str | os.PathLike | None = None,
    dims: tuple[int, int] = (0, 1),
    ax: Any = None,
    title: str | None = None,
    feature_names: Any = None,
    figsize: tuple[float, float] = (6.0, 5.0),
    dpi: float = 100,
) -> Any:
    """Inducing inputs over the data.

    One input dimension: the data ``(x, y)`` (or a rug of ``x``) with the inducing inputs
    as ticks on the x axis; two or more: the data in input dimensions ``dims`` with the
    inducing inputs (projected on those dimensions) as crosses.

    Parameters
    ----------
    model: a fitted model with inducing inputs ``model.Z`` in its input space.
    X: inputs ``(N, D)``; y: targets ``(N,)`` (used for 1-D), or None.
    dims: the two input dimensions drawn when ``D >= 2``.
    """
    Z = _inducing_inputs(model, flat=False)
    if Z is None:
        raise ValueError(f"{type(model).__name__} has no inducing inputs in its input space")
    D = Z.shape[1]
    Xv = _points(X, "X", D)
    names = list(feature_names) if feature_names is not None else [f"x{j + 1}" for j in range(D)]
    fig, ax = _figure(ax, figsize, dpi)
    if D == 1:
        if y is not None:
            ax.scatter(Xv[:, 0], _column(y, "y"), s=10, c="k", alpha=0.6, label="data")
            ax.set_ylabel("y")
        else:
            ax.plot(Xv[:, 0], np.zeros(len(Xv)), "|", color="k", alpha=0.5, label="data")
        ax.plot(Z[:, 0], np.zeros(Z.shape[0]), "|", color="C1", ms=14, mew=1.5,
                transform=ax.get_xaxis_transform(), clip_on=False,
                label=f"inducing inputs ({Z.shape[0]})")
        ax.set_xlabel(names[0])
    else:
        i, j = dims
        if not (0 <= i < D and 0 <= j < D and i != j):
            raise ValueError(f"dims must be two different dimensions in [0, {D}), got {dims}")
        ax.scatter(Xv[:, i], Xv[:, j], s=8, c="k", alpha=0.4, label="data")
        ax.scatter(Z[:, i], Z[:, j], marker="x", s=36, c="C1", linewidths=1.5,
                   label=f"inducing inputs ({Z.shape[0]})")
        ax.set_xlabel(names[i])
        ax.set_ylabel(names[j])
    ax.set_title(title or "inducing inputs")
    ax.legend(loc="best", fontsize="small", framealpha=0.8)
    save_figure(fig, path)
    return fig


def plot_latent(
    model: Any,
    labels: Any = None,
    path: str | os.PathLike | None = None,
    dims: tuple[int, int] | None = None,
    ax: Any = None,
    title: str | None = None,
    figsize: tuple[float, float] = (6.0, 5.0),
    dpi: float = 100,
) -> Any:
    """The latent space of a fitted :class:`~latentgp.BayesianGPLVM`: the means of q(X)
    (coloured by ``labels`` ``(N,)`` when given, one colour per distinct label) and the
    inducing inputs as crosses.

    ``dims``: the two latent dimensions drawn; default the two with the shortest
    lengthscales (the most relevant under ARD).  One latent dimension: the means against
    the row number with +-2 sd bars.
    """
    mean, var = model.latent_posterior()
    N, Q = mean.shape
    codes, names = None, None
    if labels is not None:
        lab = np.asarray(labels).reshape(-1)
        if lab.shape[0] != N:
            raise ValueError(f"labels has {lab.shape[0]} entries; the model has {N} rows")
        names, codes = np.unique(lab, return_inverse=True)
    Z = _inducing_inputs(model, flat=False)
    colour = {"c": "k"} if codes is None else {
        "c": codes, "cmap": "tab10", "vmin": 0, "vmax": max(9, len(names) - 1)}
    fig, ax = _figure(ax, figsize, dpi)
    if Q == 1:
        ax.errorbar(np.arange(N), mean[:, 0], yerr=2 * np.sqrt(var[:, 0]), fmt="none",
                    ecolor="0.7", lw=0.6)
        ax.scatter(np.arange(N), mean[:, 0], s=8, **colour)
        ax.set_xlabel("row")
        ax.set_ylabel("latent x1")
    else:
        if dims is None:
            ls = model.kernel.lengthscale.detach().cpu().numpy().reshape(-1)
            dims = tuple(int(d) for d in np.argsort(ls)[:2]) if ls.size == Q else (0, 1)
        i, j = dims
        if not (0 <= i < Q and 0 <= j < Q and i != j):
            raise ValueError(f"dims must be two different dimensions in [0, {Q}), got {dims}")
        sc = ax.scatter(mean[:, i], mean[:, j], s=8, alpha=0.8, **colour)
        if Z is not None:
            ax.scatter(Z[:, i], Z[:, j], marker="x", s=30, c="C3", linewidths=1.2,
                       label=f"inducing inputs ({Z.shape[0]})")
            ax.legend(loc="best", fontsize="small", framealpha=0.8)
        if names is not None and len(names) <= 20:
            handles = [ax.scatter([], [], s=12, color=sc.cmap(sc.norm(k))) for k in
                       range(len(names))]
            fig.legend(handles, [str(n) for n in names], loc="outside right upper",
                       fontsize="small", title="label")
        ax.set_xlabel(f"latent x{i + 1}")
        ax.set_ylabel(f"latent x{j + 1}")
    ax.set_title(title or f"latent space (N = {N}, Q = {Q})")
    save_figure(fig, path)
    return fig
