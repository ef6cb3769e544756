"""Diagnostics: training curves, calibration, reliability, inducing inputs, latent spaces."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .figure import column, inducing_inputs, new_figure, points, pyplot, save_figure

__all__ = [
    "plot_calibration",
    "plot_inducing",
    "plot_latent",
    "plot_metric_traces",
    "plot_objective",
    "plot_reliability",
]


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
    fig, ax = new_figure(ax, figsize, dpi)
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

    yv, m, v = column(y, "y"), column(mean, "mean"), column(var, "var")
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
    fig, ax = new_figure(ax, figsize, dpi)
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
    yv = column(y, "y")
    p = np.asarray(
        probs.detach().cpu().numpy() if hasattr(probs, "detach") else probs, dtype=np.float64
    )
    if p.ndim == 2 and p.shape[1] == 2:
        p = p[:, 1]
    p = column(p, "probs")
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
    fig, ax = new_figure(ax, figsize, dpi)
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
    plt = pyplot()
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
    Z = inducing_inputs(model, flat=False)
    if Z is None:
        raise ValueError(f"{type(model).__name__} has no inducing inputs in its input space")
    D = Z.shape[1]
    Xv = points(X, "X", D)
    names = list(feature_names) if feature_names is not None else [f"x{j + 1}" for j in range(D)]
    fig, ax = new_figure(ax, figsize, dpi)
    if D == 1:
        if y is not None:
            ax.scatter(Xv[:, 0], column(y, "y"), s=10, c="k", alpha=0.6, label="data")
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
    Z = inducing_inputs(model, flat=False)
    colour = {"c": "k"} if codes is None else {
        "c": codes, "cmap": "tab10", "vmin": 0, "vmax": max(9, len(names) - 1)}
    fig, ax = new_figure(ax, figsize, dpi)
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
