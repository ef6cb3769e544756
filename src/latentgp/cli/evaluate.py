"""``latentgp evaluate``: the test metrics of a model file on a dataset or CSV file."""

from __future__ import annotations

import argparse
import os
from typing import Any

from latentgp.cli.common import (
    CONFIG_HELP,
    EXIT_OK,
    HELP_FORMAT,
    CLIError,
    check_output_path,
    emit_json,
    metric_line,
    nonneg_int,
    out,
    write_json,
)
from latentgp.cli.datafiles import data_for_model, is_csv
from latentgp.cli.modelfile import apply_inputs, compute_metrics, load_model_file

EPILOG = """\
examples:
  latentgp evaluate --model-file boston.pt --data boston --metrics test.json
  latentgp evaluate --model-file m.pt --data holdout.csv --target yield
  latentgp evaluate --config run.toml --json      # options from the [evaluate] table

A registry dataset is evaluated on its test set (--split as in fit); a CSV file is used
whole, with the training target column (or --target, or the last column) as y.
"""


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Run ``latentgp evaluate``."""
    check_output_path(args.metrics, "--metrics")
    model, record = load_model_file(args.model_file)
    data = data_for_model(args, model, record)
    if is_csv(args.data):
        X, y, source = data.X_train, data.y_train, "the whole file"
    else:
        X, y, source = data.X_test, data.y_test, "the test set"
        if X.shape[0] == 0:
            raise CLIError(f"dataset {data.name!r} has no test set for this split")
    metrics: dict[str, Any] = {
        "model": type(model).__name__,
        "model_file": os.fspath(args.model_file),
        "dataset": args.data,
        "likelihood": type(model.likelihood).__name__.lower(),
        "n_test": int(X.shape[0]),
    }
    metrics.update(compute_metrics(model, apply_inputs(X, record), y))
    if args.metrics:
        write_json(args.metrics, metrics)
    if args.json:
        emit_json(args, metrics, metrics=args.metrics)
        return EXIT_OK
    out(f"evaluated {args.model_file} on {source} of {args.data} ({X.shape[0]} points)")
    out(f"  {metric_line(metrics)}")
    if args.metrics:
        out(f"  metrics written to {args.metrics}")
    return EXIT_OK


def add_parser(sub: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``evaluate`` command to the subparsers ``sub``."""
    p = sub.add_parser(
        "evaluate",
        parents=[common],
        help="compute test metrics of a saved model",
        description="Compute the metrics of a saved model on a dataset or CSV file.",
        epilog=EPILOG,
        formatter_class=HELP_FORMAT,
    )
    p.add_argument("--model-file", required=True, metavar="MODEL_FILE")
    p.add_argument("--data", required=True, metavar="NAME_OR_CSV")
    p.add_argument("--target", metavar="COL", help="CSV target column (name or index)")
    p.add_argument("--split", type=nonneg_int, metavar="K", help="dataset split")
    p.add_argument("--data-home", metavar="DIR", help="folder of data-home files")
    p.add_argument("--metrics", metavar="JSON", help="write the metrics here")
    p.add_argument("--json", action="store_true", help="print the metrics as JSON")
    p.add_argument("--config", metavar="TOML", help=CONFIG_HELP)
    p.set_defaults(func=cmd_evaluate)
    return p
