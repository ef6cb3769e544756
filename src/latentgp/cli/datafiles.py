"""The data of the commands: registry datasets and numeric CSV files as train/test arrays.

``--data`` is a registry name (see ``latentgp datasets list``) or a numeric CSV file (a
name ending in ``.csv`` / ``.csv.gz``, or any existing file).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from latentgp.cli.common import CLIError, warn

CSV_SUFFIXES = (".csv", ".csv.gz")


@dataclass
class CLIData:
    """A train/test partition as the CLI sees it."""

    name: str
    X_train: Any
    y_train: Any
    X_test: Any
    y_test: Any
    task: str | None  # None: unknown (CSV files); decided by the likelihood
    feature_names: list[str]
    target_name: str
    classes: list | None = None
    split: int | None = None


@dataclass
class Table:
    """Every column of a numeric CSV file: ``values`` (N, K) float64, column ``names`` and
    whether the file has a header row."""

    values: Any
    names: list[str]
    has_header: bool


def is_csv(spec: str) -> bool:
    """Whether ``--data spec`` names a CSV file (else a registry dataset)."""
    return spec.lower().endswith(CSV_SUFFIXES) or os.path.isfile(spec)


def read_table(path: str) -> Table:
    """Every column of a numeric CSV file, in file order."""
    import numpy as np

    from latentgp.datasets import load_csv

    X, y, names, target = load_csv(path)
    values = np.column_stack([X, y]) if X.shape[1] else y[:, None]
    all_names = list(names) + [target]
    has_header = all_names != [f"col{j}" for j in range(len(all_names))]
    return Table(values, all_names, has_header)


def csv_target(path: str, target: str | None) -> str | int | None:
    """``--target`` of a CSV file as ``CSVSource`` takes it: a column's name, else its
    integer index (``--target 0``)."""
    if target is None or not target.lstrip("-").isdigit():
        return target
    from latentgp.datasets import csv_columns

    return target if target in csv_columns(path).names else int(target)


def column_index(table: Table, target: str, path: str) -> int:
    """The index of column ``target`` (a name, else an integer index) of ``table``."""
    if target in table.names:
        return table.names.index(target)
    try:
        j = int(target)
    except ValueError:
        j = None
    if j is not None and -len(table.names) <= j < len(table.names):
        return j % len(table.names)
    raise ValueError(f"{path}: no column named {target!r}; the columns are {table.names}")


def split_table(table: Table, target: str | None, path: str) -> tuple[Any, Any, list[str], str]:
    """``(X, y, feature_names, target_name)``: ``target`` (default: the last column) as y."""
    t = len(table.names) - 1 if target is None else column_index(table, target, path)
    keep = [j for j in range(len(table.names)) if j != t]
    if not keep:
        raise ValueError(f"{path}: only one column ({table.names[t]!r}); no input columns left")
    return table.values[:, keep], table.values[:, t], [table.names[j] for j in keep], table.names[t]


def select_features(
    X: Any, names: list[str], has_header: bool, want: Sequence[str] | None, dim: int, path: str
) -> Any:
    """The model's feature columns of ``X``: by name when possible, else by position."""
    if want and has_header and all(n in names for n in want):
        return X[:, [names.index(n) for n in want]]
    if X.shape[1] == dim:
        if want and has_header and list(names) != list(want):
            warn(
                f"{path}: column names {names} differ from the training features "
                f"{list(want)}; using the columns by position"
            )
        return X
    expected = f" ({', '.join(want)})" if want else ""
    raise CLIError(
        f"{path} has {X.shape[1]} input column(s) but the model expects {dim}{expected}; "
        "give the same feature columns as in training (a header row selects them by name)"
    )


def load_fit_data(args: argparse.Namespace) -> CLIData:
    """The training and test data of ``latentgp fit``."""
    if is_csv(args.data):
        return load_csv_data(args)
    for opt, val in (("--target", args.target), ("--test-data", args.test_data)):
        if val is not None:
            raise CLIError(f"{opt} applies only when --data is a CSV file")
    return load_registry(args.data, args.split, args.test_fraction, args.data_home)


def load_registry(
    name: str, split: int | None, test_fraction: float | None, data_home: str | None
) -> CLIData:
    """One split of a registry dataset."""
    from latentgp import datasets

    kwargs = {} if test_fraction is None else {"test_fraction": test_fraction}
    try:
        ds = datasets.load(name, split=split, data_home=data_home, **kwargs)
    except ValueError as err:
        if "unknown dataset" in str(err):
            raise ValueError(f"{err} (a CSV file name must end in .csv)") from None
        raise
    return CLIData(
        name=ds.name,
        X_train=ds.X_train,
        y_train=ds.y_train,
        X_test=ds.X_test,
        y_test=ds.y_test,
        task=ds.task,
        feature_names=list(ds.feature_names),
        target_name=ds.target_name,
        classes=None if ds.classes is None else list(ds.classes),
        split=ds.split,
    )


def load_csv_data(args: argparse.Namespace) -> CLIData:
    """A CSV file split at random into train and test (or with ``--test-data``)."""
    from latentgp import datasets

    table = read_table(args.data)
    X, y, names, target = split_table(table, args.target, args.data)
    if args.test_data is not None:
        if args.test_fraction is not None:
            raise CLIError("give either --test-data or --test-fraction, not both")
        test = read_table(args.test_data)
        X_all, y_te, names_te, _ = split_table(
            test, target if target in test.names else None, args.test_data
        )
        X_te = select_features(
            X_all,
            names_te,
            test.has_header,
            names if table.has_header else None,
            X.shape[1],
            args.test_data,
        )
        return CLIData(args.data, X, y, X_te, y_te, None, names, target)
    fraction = 0.2 if args.test_fraction is None else args.test_fraction
    split = 0 if args.split is None else args.split
    if fraction > 0 and X.shape[0] < 2:
        raise ValueError(f"{args.data}: {X.shape[0]} row(s) cannot be split into train and test")
    tr, te = datasets.random_split(X.shape[0], split, fraction)
    return CLIData(args.data, X[tr], y[tr], X[te], y[te], None, names, target)


def class_count(data: CLIData) -> int:
    """Number of classes: the dataset's, else one more than the largest label (>= 2)."""
    import numpy as np

    if data.classes is not None:
        return len(data.classes)
    labels = np.concatenate([data.y_train.reshape(-1), data.y_test.reshape(-1)])
    return max(2, int(labels.max()) + 1) if labels.size else 2


def data_for_model(args: argparse.Namespace, model: Any, record: dict[str, Any]) -> CLIData:
    """``--data`` (with ``--target``/``--split``/``--data-home``) of evaluate and plot.

    A CSV file is used whole: all its rows in the train part (empty test part), the
    target column by ``--target``, else the training target's name, else the last
    column.  A registry dataset gives its split; when the model was fitted on that
    dataset and ``--split`` is not given, the split (and test fraction) of the fit.
    """
    import numpy as np

    if is_csv(args.data):
        if args.split is not None:
            raise CLIError("--split applies only to registry datasets; a CSV is used whole")
        table = read_table(args.data)
        target = args.target
        if target is None and record.get("target") in table.names and table.has_header:
            target = record["target"]
        X, y, names, target = split_table(table, target, args.data)
        X = select_features(
            X, names, table.has_header, record.get("feature_names"), model.input_dim, args.data
        )
        empty = np.empty((0, X.shape[1]))
        return CLIData(args.data, X, y, empty, y[:0], None, names, target)
    if args.target is not None:
        raise CLIError("--target applies only when --data is a CSV file")
    from latentgp import datasets

    split, fraction = args.split, None
    if split is None and record.get("dataset") == datasets.get_spec(args.data).name:
        # the model was fitted on this dataset: use the same held-out part
        split, fraction = record.get("split"), record.get("test_fraction")
    return load_registry(args.data, split, fraction, args.data_home)
