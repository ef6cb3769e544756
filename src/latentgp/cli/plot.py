"""``latentgp plot``: pictures of a model file written by ``latentgp fit``.

Kinds (``--kind``):

* ``predictive``: one input -- predictive mean with +-2 sd bands of ``y`` and ``f``, the
  data and the inducing inputs (:func:`latentgp.plotting.plot_1d`); two inputs -- maps of
  the predictive mean and sd, or of the class probabilities
  (:func:`latentgp.plotting.plot_2d`).  Needs ``--data``.
* ``objective``: the training objective per step, from the history that ``fit`` stores
  in the model file.
* ``metrics``: test metrics during training (``fit --eval-every K``).
* ``calibration``: regression -- observed against nominal coverage of central intervals;
  binary -- reliability diagram; multi-class -- reliability of the top-class probability.
  Needs ``--data`` (a registry dataset's test set, or the whole CSV file).
* ``inducing``: inducing inputs over the data (first two input dimensions).
* ``latent``: the latent space of a Bayesian GPLVM (the means of q(X), coloured by
  ``--labels``, a text file of one label per row; :func:`latentgp.plotting.plot_latent`).
  The default for a GPLVM.

The default is ``predictive`` for models with one or two inputs when ``--data`` is given,
``calibration`` for more inputs, and ``objective`` without ``--data``.  Plots are drawn in
the data's own units (the CLI's input standardisation is undone).  The image is
``--width`` x ``--height`` pixels (defaults: the kind's size in inches times ``--dpi``).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from latentgp.cli.common import (
    EXIT_OK,
    HELP_FORMAT,
    CLIError,
    check_output_path,
    emit_json,
    nonneg_int,
    out,
    positive_float,
    positive_int,
)
from latentgp.cli.datafiles import data_for_model
from latentgp.cli.modelfile import load_model_file

if TYPE_CHECKING:
    import numpy as np

KINDS = ("predictive", "objective", "metrics", "calibration", "inducing", "latent")

#: Figure size in inches for each kind (and each case of ``predictive``).
DEFAULT_INCHES = {
    "predictive-1d": (8.0, 4.5),
    "predictive-2d": (10.0, 4.2),
    "predictive-2d-class": (6.0, 5.0),
    "objective": (6.0, 4.0),
    "metrics": (3.6, 3.4),  # per metric panel in width
    "calibration": (5.0, 5.0),
    "inducing": (6.0, 5.0),
    "latent": (7.0, 5.0),
}

EPILOG = """\
examples:
  latentgp plot --model-file m.pt --data train.csv --out fit.png        # 1-D bands / 2-D maps
  latentgp plot --model-file m.pt --kind objective --out objective.png
  latentgp plot --model-file m.pt --kind metrics --out metrics.png      # fit --eval-every K
  latentgp plot --model-file m.pt --data boston --kind calibration --out calib.png
  latentgp plot --model-file m.pt --data pima --kind calibration --width 600 --height 600
  latentgp plot --model-file m.pt --data train.csv --kind inducing --dpi 150 --out z.pdf
  latentgp plot --model-file gplvm.pt --labels labels.txt --out latent.png  # GPLVM

Kinds: predictive (default with --data for 1 or 2 inputs), calibration (default with
--data for more inputs; a reliability diagram for classifiers), objective (default
without --data), metrics (test metrics recorded by 'latentgp fit --eval-every K'),
inducing, latent (the default for a Bayesian GPLVM).  The file format follows the
extension of --out (png, pdf, svg).
"""


class InputUnits:
    """A fitted model seen in the data's units: applies the stored standardisation.

    Exposes what :mod:`latentgp.plotting` reads: ``input_dim``, ``output_dim``,
    ``likelihood``, ``predict_y``, ``predict_f`` and the inducing inputs ``Z`` (mapped back
    to data units; ``None`` when they do not live in the input space).
    """

    def __init__(self, model: Any, record: dict[str, Any]) -> None:
        self.model = model
        self.likelihood = model.likelihood
        self.input_dim = model.input_dim
        self.output_dim = getattr(model, "output_dim", 1)
        import numpy as np

        D = int(model.input_dim)
        mean, scale = record.get("x_mean"), record.get("x_scale")
        self.mean = np.zeros(D) if mean is None else np.asarray(mean, dtype=np.float64)
        self.scale = np.ones(D) if scale is None else np.asarray(scale, dtype=np.float64)

    def _inputs(self, X: Any) -> np.ndarray:
        import numpy as np

        return (np.asarray(X, dtype=np.float64) - self.mean) / self.scale

    def predict_y(self, X: Any) -> tuple[Any, Any]:
        return self.model.predict_y(self._inputs(X))

    def predict_f(self, X: Any) -> tuple[Any, Any]:
        return self.model.predict_f(self._inputs(X))

    @property
    def Z(self) -> np.ndarray | None:
        import numpy as np

        Z = getattr(self.model, "Z", None)
        if Z is None:
            return None
        Z = np.asarray(Z.detach().cpu().numpy() if hasattr(Z, "detach") else Z, dtype=float)
        if Z.ndim < 2 or Z.shape[-1] != self.input_dim:
            return None
        return Z * self.scale + self.mean


def add_parser(sub: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``plot`` command to the subparsers ``sub``."""
    p = sub.add_parser(
        "plot",
        parents=[common],
        help="draw a model file: predictions, training traces, calibration",
        description="Draw a model written by 'latentgp fit' (PNG, PDF or SVG by extension).",
        epilog=EPILOG,
        formatter_class=HELP_FORMAT,
    )
    p.add_argument("--config", metavar="TOML", help="read options from a TOML file")
    p.add_argument("--model-file", required=True, metavar="MODEL_FILE")
    p.add_argument(
        "--data",
        metavar="NAME_OR_CSV",
        help="data to draw: a registry dataset (train and test parts) or a CSV file",
    )
    p.add_argument("--target", metavar="COL", help="CSV target column (name or index)")
    p.add_argument("--split", type=nonneg_int, metavar="K", help="dataset split")
    p.add_argument("--data-home", metavar="DIR", help="folder of data-home files")
    p.add_argument("--kind", choices=KINDS, help="what to draw (default: see below)")
    p.add_argument("--out", required=True, metavar="IMAGE", help="image file (.png/.pdf/.svg)")
    p.add_argument("--width", type=positive_int, metavar="PX", help="image width in pixels")
    p.add_argument("--height", type=positive_int, metavar="PX", help="image height in pixels")
    p.add_argument(
        "--dpi", type=positive_float, default=100.0, help="dots per inch (default 100)"
    )
    p.add_argument("--title", help="figure title")
    p.add_argument(
        "--labels", metavar="FILE",
        help="--kind latent: a text file of one label per training row (colours the points)",
    )
    p.add_argument("--json", action="store_true", help="print a JSON summary")
    p.set_defaults(func=cmd_plot)
    return p


def load_plot_data(
    args: argparse.Namespace, model: Any, record: dict[str, Any]
) -> dict[str, Any]:
    """Arrays in data units: ``{"train": (X, y), "test": (X, y) or None}`` (a CSV file is
    all "train"; a registry dataset has both parts, as in ``latentgp evaluate``)."""
    data = data_for_model(args, model, record)
    test = (data.X_test, data.y_test) if data.X_test.shape[0] else None
    return {"train": (data.X_train, data.y_train), "test": test}


def _default_kind(model: Any, has_data: bool) -> str:
    if hasattr(model, "latent_posterior"):
        return "latent"
    if not has_data:
        return "objective"
    if model.input_dim <= 2 and (getattr(model, "output_dim", 1) or 1) == 1:
        return "predictive"
    return "calibration"


def _history(record: dict[str, Any], path: str) -> dict[str, Any]:
    history = record.get("history")
    if not isinstance(history, dict):
        raise CLIError(
            f"{path} holds no training history (written by an older 'latentgp fit'); refit it"
        )
    return history


def _size(args: argparse.Namespace, inches: tuple[float, float]) -> tuple[int, int]:
    w = args.width or int(round(inches[0] * args.dpi))
    h = args.height or int(round(inches[1] * args.dpi))
    return w, h


def _feature_names(record: dict[str, Any], model: Any) -> list[str]:
    return record.get("feature_names") or [f"x{j + 1}" for j in range(model.input_dim)]


def _predictive_key(model: Any, task: str) -> str:
    """The :data:`DEFAULT_INCHES` key of a predictive plot; an error beyond 2 inputs."""
    D = int(model.input_dim)
    P = getattr(model, "output_dim", 1) or 1
    if D > 2 or P > 1:
        raise CLIError(
            f"--kind predictive draws models with 1 or 2 inputs and one output; this one "
            f"has {D} input(s) and {P} output(s): use --kind calibration or inducing"
        )
    if D == 1:
        return "predictive-1d"
    return "predictive-2d-class" if task in ("binary", "multiclass") else "predictive-2d"


def _metric_trace(record: dict[str, Any], path: str) -> dict[str, Any]:
    """The test-metric trace that ``fit --eval-every K`` stored in the model file."""
    trace = _history(record, path).get("eval")
    if not trace:
        raise CLIError(f"{path} has no test-metric trace: fit with --eval-every K")
    return trace


def _metric_names(trace: dict[str, Any]) -> list[str]:
    return [k for k in trace if k not in ("on", "steps")]


def _figure_key(
    args: argparse.Namespace, model: Any, record: dict[str, Any], kind: str, task: str
) -> tuple[str, dict[str, Any] | None]:
    """The :data:`DEFAULT_INCHES` key of ``kind`` and, for ``metrics``, the trace."""
    if kind == "predictive":
        return _predictive_key(model, task), None
    if kind == "metrics":
        return "metrics", _metric_trace(record, args.model_file)
    return kind, None


def _draw_predictive(
    args: argparse.Namespace, view: InputUnits, record: dict[str, Any], data: dict[str, Any],
    task: str, figsize: tuple[float, float],
) -> Any:
    from latentgp import plotting

    names = _feature_names(record, view.model)
    dpi = args.dpi
    X, y = data["train"]
    if int(view.model.input_dim) == 1:
        Xt, yt = data["test"] if data["test"] is not None else (None, None)
        fig = plotting.plot_1d(view, X, y, X_test=Xt, y_test=yt, title=args.title,
                               figsize=figsize, dpi=dpi)
        fig.axes[0].set_xlabel(names[0])
        if task not in ("binary", "multiclass") and record.get("target"):
            fig.axes[0].set_ylabel(str(record["target"]))
        return fig
    return plotting.plot_2d(view, X, y, title=args.title, feature_names=tuple(names[:2]),
                            class_names=record.get("classes"), figsize=figsize, dpi=dpi)


def _draw(
    args: argparse.Namespace, kind: str, view: InputUnits, record: dict[str, Any],
    data: dict[str, Any] | None, trace: dict[str, Any] | None, figsize: tuple[float, float],
) -> Any:
    """The figure of ``kind`` (not yet saved)."""
    import numpy as np

    from latentgp import plotting

    dpi = args.dpi
    task = getattr(view.model.likelihood, "task", "regression")
    if kind == "predictive":
        return _draw_predictive(args, view, record, data, task, figsize)
    if kind == "objective":
        history = _history(record, args.model_file)
        values = [np.nan if v is None else v for v in history.get("objective", [])]
        return plotting.plot_objective(values, steps=history.get("objective_steps"),
                                       title=args.title, figsize=figsize, dpi=dpi)
    if kind == "metrics":
        return plotting.plot_metric_traces(
            trace["steps"],
            {f"{k} ({trace.get('on', 'test')})": trace[k] for k in _metric_names(trace)},
            title=args.title, figsize=figsize, dpi=dpi,
        )
    if kind == "calibration":
        return _calibration(view, data, task, args.title, figsize, dpi)
    if kind == "latent":
        return _latent(args, view.model, figsize)
    # inducing
    if view.Z is None:
        raise CLIError(
            f"{type(view.model).__name__} has no inducing inputs in its input space"
        )
    X, y = data["train"]
    return plotting.plot_inducing(view, X, y, title=args.title,
                                  feature_names=_feature_names(record, view.model),
                                  figsize=figsize, dpi=dpi)


def cmd_plot(args: argparse.Namespace) -> int:
    """Run ``latentgp plot``."""
    from latentgp import plotting

    check_output_path(args.out, "--out")
    model, record = load_model_file(args.model_file)
    kind = args.kind or _default_kind(model, args.data is not None)
    if kind in ("predictive", "calibration", "inducing") and args.data is None:
        raise CLIError(f"--kind {kind} needs --data (a CSV file or a registry dataset)")
    data = load_plot_data(args, model, record) if args.data is not None else None
    view = InputUnits(model, record)
    task = getattr(model.likelihood, "task", "regression")
    key, trace = _figure_key(args, model, record, kind, task)
    inches = DEFAULT_INCHES[key]
    if kind == "metrics":
        inches = (inches[0] * len(_metric_names(trace)), inches[1])
    width, height = _size(args, inches)
    figsize = (width / args.dpi, height / args.dpi)
    dpi = args.dpi

    fig = _draw(args, kind, view, record, data, trace, figsize)
    try:
        plotting.save_figure(fig, args.out)
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
    summary = {
        "kind": kind,
        "model_file": str(args.model_file),
        "data": args.data,
        "width": width,
        "height": height,
        "dpi": dpi,
    }
    if args.json:
        emit_json(args, summary, plot=args.out)
    else:
        out(f"wrote the {kind} plot ({width} x {height} px) to {args.out}")
    return EXIT_OK


def _latent(args: argparse.Namespace, model: Any, figsize: tuple[float, float]) -> Any:
    import numpy as np

    from latentgp import plotting

    if not hasattr(model, "latent_posterior"):
        raise CLIError(
            f"--kind latent draws a Bayesian GPLVM; {type(model).__name__} has no latent space"
        )
    labels = None
    if args.labels is not None:
        try:
            labels = np.loadtxt(args.labels, dtype=str, ndmin=1)
        except OSError as err:
            raise CLIError(f"--labels {args.labels}: {err}") from None
    try:
        return plotting.plot_latent(model, labels, title=args.title, figsize=figsize,
                                    dpi=args.dpi)
    except ValueError as err:
        raise CLIError(str(err)) from None


def _calibration(view: InputUnits, data: dict[str, Any], task: str, title: str | None,
                 figsize: tuple[float, float], dpi: float) -> Any:
    import numpy as np
    import torch

    from latentgp import plotting

    X, y = data["test"] if data["test"] is not None else data["train"]
    torch.manual_seed(0)  # Monte Carlo predictions (softmax) are reproducible
    mean, var = view.predict_y(X)
    mean, var = np.asarray(mean, dtype=np.float64), np.asarray(var, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if task == "binary":
        return plotting.plot_reliability(y, mean, title=title, figsize=figsize, dpi=dpi)
    if task == "multiclass":
        correct = (mean.argmax(axis=1) == y.astype(int)).astype(np.float64)
        fig = plotting.plot_reliability(
            correct, mean.max(axis=1), title=title or f"top-class reliability (N = {y.size})",
            figsize=figsize, dpi=dpi,
        )
        fig.axes[0].set_xlabel("mean top-class probability")
        fig.axes[0].set_ylabel("observed accuracy")
        return fig
    return plotting.plot_calibration(y.reshape(-1), mean.reshape(-1), var.reshape(-1),
                                     title=title, figsize=figsize, dpi=dpi)
