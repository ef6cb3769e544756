"""Quick diagnostic plots: 1-D fits, training curves, calibration and reliability.

matplotlib is optional (``pip install latentgp[plot]``) and imported only when a plot
is made.  Without a display (a Linux session with neither ``DISPLAY`` nor
``WAYLAND_DISPLAY``) the non-interactive Agg backend is selected, so the functions work
on servers and in CI.  Every function returns the matplotlib ``Figure``; with ``path``
it is also saved (atomically: a temporary file in the same folder renamed into place),
in the format given by the file extension (PNG by default).
"""

from __future__ import annotations

from .diagnostics import (
    plot_calibration,
    plot_inducing,
    plot_latent,
    plot_metric_traces,
    plot_objective,
    plot_reliability,
)
from .figure import save_figure
from .fits import plot_1d, plot_2d

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
