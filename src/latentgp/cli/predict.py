"""``latentgp predict``: predictions of a model file at the inputs of a CSV file.

Columns: ``mean, var`` (regression, counts); ``p1, label`` (binary); ``p_<class>...,
label`` (multi-class).  The inputs get the model file's standardisation.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
from typing import IO, Any

from latentgp.cli.common import (
    CONFIG_HELP,
    EXIT_OK,
    HELP_FORMAT,
    atomic_write,
    check_output_path,
    emit_json,
    out,
)
from latentgp.cli.datafiles import named_features, read_table, select_features
from latentgp.cli.modelfile import apply_inputs, load_model_file

EPILOG = """\
examples:
  latentgp predict --model-file boston.pt --data new.csv --out predictions.csv
  latentgp predict --model-file boston.pt --data new.csv --json   # predictions in JSON

Columns: mean, var (regression, counts); p1, label (binary); p_<class>..., label
(multiclass).  With a header row, the training feature columns are picked by name: their
order does not matter and other columns (the target, an identifier, text) are ignored,
but every training feature must be there under its training name (a missing or renamed
column is an error, exit 2).  Without a header row the file must have exactly the
training columns, in training order.  Without --out the CSV goes to stdout.
"""


def prediction_columns(
    model: Any, mean: Any, var: Any, record: dict[str, Any]
) -> tuple[list[str], list[Any]]:
    """The names and values of the prediction columns for the model's task."""
    import numpy as np

    task = model.likelihood.task
    classes = record.get("classes")
    if task == "binary":
        labels = classes if classes and len(classes) == 2 else [0, 1]
        pred = [labels[int(p > 0.5)] for p in mean]
        return ["p1", "label"], [mean, pred]
    if task == "multiclass":
        C = mean.shape[1]
        labels = classes if classes and len(classes) == C else list(range(C))
        names = [f"p_{c}" for c in labels] + ["label"]
        pred = [labels[int(k)] for k in np.argmax(mean, axis=1)]
        return names, [mean[:, c] for c in range(C)] + [pred]
    if mean.ndim == 1:
        return ["mean", "var"], [mean, var]
    P = mean.shape[1]
    return (
        [f"mean_{p}" for p in range(P)] + [f"var_{p}" for p in range(P)],
        [mean[:, p] for p in range(P)] + [var[:, p] for p in range(P)],
    )


def write_csv(fh: IO, names: list[str], columns: list[Any]) -> None:
    """Write a header row ``names`` and the rows of ``columns`` (floats at full precision)."""
    writer = csv.writer(fh, lineterminator="\n")
    writer.writerow(names)
    for row in zip(*columns, strict=True):
        writer.writerow([repr(float(v)) if isinstance(v, float) else v for v in row])


#: Rows per block of ``predict`` when a progress bar is shown.
PREDICT_BLOCK = 20_000


def predict_blocks(model: Any, X: Any, progress: bool | None) -> tuple[Any, Any]:
    """``model.predict_y(X)``, in blocks under a progress bar on an interactive stderr."""
    import numpy as np

    from latentgp.training.progress import ProgressBar

    n = X.shape[0]
    show = sys.stderr.isatty() if progress is None else progress
    if not show or n <= PREDICT_BLOCK:
        return model.predict_y(X)
    bar = ProgressBar(math.ceil(n / PREDICT_BLOCK), desc="predict", enabled=True)
    means, variances = [], []
    for start in range(0, n, PREDICT_BLOCK):
        m, v = model.predict_y(X[start : start + PREDICT_BLOCK])
        means.append(m)
        variances.append(v)
        bar.update(1, items=min(PREDICT_BLOCK, n - start))
    bar.close()
    return np.concatenate(means), None if variances[0] is None else np.concatenate(variances)


def cmd_predict(args: argparse.Namespace) -> int:
    """Run ``latentgp predict``."""
    check_output_path(args.out, "--out")
    model, record = load_model_file(args.model_file)
    table = read_table(args.data, named_features(record.get("feature_names")))
    X = select_features(
        table.values,
        table.names,
        table.has_header,
        record.get("feature_names"),
        model.input_dim,
        args.data,
    )
    mean, var = predict_blocks(model, apply_inputs(X, record), getattr(args, "progress", None))
    names, columns = prediction_columns(model, mean, var, record)
    columns = [c.tolist() if hasattr(c, "tolist") else c for c in columns]
    to_stdout = args.out is None or args.out == "-"
    if not to_stdout:
        atomic_write(args.out, lambda fh: write_csv(fh, names, columns))
    if getattr(args, "json", False):
        result: dict[str, Any] = {
            "model_file": os.fspath(args.model_file),
            "data": args.data,
            "n": int(X.shape[0]),
            "columns": names,
        }
        if to_stdout:  # the predictions travel inside the JSON object
            result["predictions"] = dict(zip(names, columns, strict=True))
        emit_json(args, result, predictions=None if to_stdout else args.out)
    elif to_stdout:
        write_csv(sys.stdout, names, columns)
    else:
        out(f"wrote {X.shape[0]} predictions ({', '.join(names)}) to {args.out}")
    return EXIT_OK


def add_parser(sub: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``predict`` command to the subparsers ``sub``."""
    p = sub.add_parser(
        "predict",
        parents=[common],
        help="predict at new inputs from a CSV file",
        description="Predict with a model file written by 'latentgp fit'.",
        epilog=EPILOG,
        formatter_class=HELP_FORMAT,
    )
    p.add_argument("--model-file", required=True, metavar="MODEL_FILE")
    p.add_argument("--data", required=True, metavar="CSV", help="inputs (numeric CSV)")
    p.add_argument("--out", metavar="CSV", help="predictions file (default: stdout)")
    p.add_argument("--config", metavar="TOML", help=CONFIG_HELP)
    p.add_argument(
        "--json",
        action="store_true",
        help="print a JSON summary (holding the predictions when there is no --out)",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar (default: only on an interactive terminal)",
    )
    p.set_defaults(func=cmd_predict)
    return p
