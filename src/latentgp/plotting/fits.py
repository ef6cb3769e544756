"""Fits drawn over their data: 1-D bands (regression, binary, multi-class) and 2-D maps."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .figure import column, inducing_inputs, new_figure, points, pyplot, save_figure

__all__ = ["plot_1d", "plot_2d"]


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
    Z = inducing_inputs(model)

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

    fig, ax = new_figure(ax, figsize, dpi)
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
    x = column(X, "X")
    yv = column(y, "y")
    if x.shape != yv.shape:
        raise ValueError(f"X has {x.shape[0]} points but y has {yv.shape[0]}")
    xt = yt = None
    if X_test is not None or y_test is not None:
        if X_test is None or y_test is None:
            raise ValueError("give both X_test and y_test, or neither")
        xt, yt = column(X_test, "X_test"), column(y_test, "y_test")
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
    Z = inducing_inputs(model, flat=False)
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
    Xv = points(X, "X", 2)
    yv = None if y is None else column(y, "y")
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
        plt = pyplot()
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
    cmap = pyplot().get_cmap("tab10")
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
