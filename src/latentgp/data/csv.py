"""Reading and writing numeric CSV files with the standard library (no pandas).

:func:`load_csv` splits a numeric table into inputs and one target column and reports
problems precisely: the file, the column and the first offending row. Files ending in
``.gz`` are read and written gzip-compressed.
"""

from __future__ import annotations

import csv
import gzip
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import numpy as np

__all__ = ["load_csv", "save_csv"]


def _open(path: Path, mode: str) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, mode + "t", encoding="utf-8-sig", newline="")
    return open(path, mode, encoding="utf-8-sig", newline="")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def load_csv(
    path: str | os.PathLike,
    target: str | int | None = None,
    delimiter: str = ",",
    header: bool | None = None,
) -> tuple[np.ndarray, np.ndarray, list[str], str]:
    """Read a numeric CSV file into inputs and a target.

    Parameters
    ----------
    path : str or path-like
        The file (``.gz`` files are decompressed).
    target : str or int, optional
        Target column, by header name or by (possibly negative) index. Default: the last
        column.
    delimiter : str
        Field separator.
    header : bool, optional
        Whether the first row is a header. ``None`` detects it: the first row is a header
        when any of its fields is not a number. Without a header the columns are named
        ``col0, col1, ...``.

    Returns
    -------
    X : np.ndarray
        Inputs, shape ``(N, D)`` float64 (every column but the target, in file order).
    y : np.ndarray
        Target, shape ``(N,)`` float64.
    feature_names : list of str
        ``D`` column names.
    target_name : str
        Name of the target column.

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    ValueError
        The file is empty or has only a header; rows have different numbers of fields;
        a value is empty, non-numeric or not finite (the message names the file, column
        and first offending row); the target column does not exist (the message lists
        the columns); or column names are duplicated.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"CSV file not found: {path}")
    rows, lines = _read_rows(path, delimiter)
    if not rows:
        raise ValueError(f"{path}: the file is empty (no rows)")

    if header is None:
        header = any(not _is_number(field) for field in rows[0])
    n_cols = len(rows[0])
    if header:
        names = _header_names(path, rows[0])
        data_rows, data_lines = rows[1:], lines[1:]
    else:
        names = [f"col{j}" for j in range(n_cols)]
        data_rows, data_lines = rows, lines
    if not data_rows:
        raise ValueError(f"{path}: the file has a header ({names}) but no data rows")

    t = _target_index(path, target, names, header, delimiter)
    data = _parse_rows(path, data_rows, data_lines, names, delimiter)

    keep = [j for j in range(n_cols) if j != t]
    X = np.ascontiguousarray(data[:, keep])
    y = data[:, t].copy()
    return X, y, [names[j] for j in keep], names[t]


def _read_rows(path: Path, delimiter: str) -> tuple[list[list[str]], list[int]]:
    """The non-blank rows of the file and their line numbers."""
    with _open(path, "r") as fh:
        reader = csv.reader(fh, delimiter=delimiter)
        rows: list[list[str]] = []
        lines: list[int] = []
        for row in reader:
            if not row or all(not field.strip() for field in row):
                continue  # blank line
            rows.append(row)
            lines.append(reader.line_num)
    return rows, lines


def _header_names(path: Path, row: list[str]) -> list[str]:
    """Column names from the header row; an error for empty or duplicated names."""
    names = [field.strip() for field in row]
    if any(not n for n in names):
        empty = [j for j, n in enumerate(names) if not n]
        raise ValueError(f"{path}: the header has empty column names at index {empty}")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"{path}: duplicated column names in the header: {dupes}")
    return names


def _target_index(
    path: Path, target: str | int | None, names: list[str], header: bool, delimiter: str = ","
) -> int:
    """Index of the target column (a name, a possibly negative index, or None: the last)."""
    n_cols = len(names)
    if target is None:
        return n_cols - 1
    if isinstance(target, str):
        if target not in names:
            raise ValueError(
                f"{path}: no column named {target!r}; the columns are {names}"
                + ("" if header else " (the file has no header row)")
                + (delimiter_hint(names[0], delimiter) if len(names) == 1 else "")
            )
        return names.index(target)
    if isinstance(target, (int, np.integer)) and not isinstance(target, bool):
        if not -n_cols <= int(target) < n_cols:
            raise ValueError(
                f"{path}: target index {target} is out of range for {n_cols} columns {names}"
            )
        return int(target) % n_cols
    raise ValueError(f"target must be a column name, an index or None, got {target!r}")


def delimiter_hint(text: str, delimiter: str) -> str:
    """A hint for a field that holds another common separator (``;``, tab, ``|``): the
    file is probably not separated by ``delimiter``; empty otherwise."""
    for other, name in ((";", "';'"), ("\t", "tabs"), ("|", "'|'")):
        if other != delimiter and other in text:
            return (
                f" (the file looks separated by {name}, not {delimiter!r}: "
                f"save it comma-separated, e.g. pandas.read_csv(path, sep={other!r})"
                ".to_csv(new_path, index=False))"
            )
    return ""


def _parse_rows(
    path: Path,
    data_rows: list[list[str]],
    data_lines: list[int],
    names: list[str],
    delimiter: str = ",",
) -> np.ndarray:
    """The data rows as a float64 array ``(N, n_cols)``; an error at the first bad field."""
    n_cols = len(names)
    data = np.empty((len(data_rows), n_cols), dtype=np.float64)
    for i, (row, line) in enumerate(zip(data_rows, data_lines, strict=True)):
        if len(row) != n_cols:
            raise ValueError(
                f"{path}: line {line} has {len(row)} fields but the first row has {n_cols} "
                f"(ragged rows)"
            )
        for j, field in enumerate(row):
            text = field.strip()
            where = f"column {names[j]!r} (index {j}), data row {i} (line {line})"
            if not text:
                raise ValueError(f"{path}: missing (empty) value in {where}")
            try:
                value = float(text)
            except ValueError:
                hint = delimiter_hint(text, delimiter)
                raise ValueError(f"{path}: non-numeric value {text!r} in {where}{hint}") from None
            if not math.isfinite(value):
                raise ValueError(f"{path}: non-finite value {text!r} in {where}")
            data[i, j] = value
    return data


def save_csv(
    path: str | os.PathLike,
    X: np.ndarray,
    y: np.ndarray | None = None,
    feature_names: Sequence[str] | None = None,
    target_name: str = "y",
    header: bool = True,
    delimiter: str = ",",
) -> Path:
    """Write inputs (and optionally a target as the last column) to a CSV file.

    Values are written with ``repr`` so that :func:`load_csv` reads back identical floats.

    Parameters
    ----------
    path : str or path-like
        Output file; a ``.gz`` suffix writes gzip.
    X : np.ndarray
        Inputs, shape ``(N, D)`` (or ``(N,)``, taken as one column).
    y : np.ndarray, optional
        Target, shape ``(N,)``, written as the last column.
    feature_names : sequence of str, optional
        ``D`` column names; default ``x0, ..., x{D-1}``.
    target_name : str
        Header name of the target column.
    header : bool
        Write a header row.
    delimiter : str
        Field separator.

    Returns
    -------
    Path
        The written path.
    """
    path = Path(path)
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise ValueError(f"X must be 1-D or 2-D, got shape {X.shape}")
    names = (
        list(feature_names) if feature_names is not None else [f"x{j}" for j in range(X.shape[1])]
    )
    if len(names) != X.shape[1]:
        raise ValueError(f"{len(names)} feature_names for {X.shape[1]} columns")
    table = X
    if y is not None:
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        if y.shape[0] != X.shape[0]:
            raise ValueError(f"y has {y.shape[0]} rows but X has {X.shape[0]}")
        table = np.column_stack([X, y])
        names = names + [target_name]
    with _open(path, "w") as fh:
        writer = csv.writer(fh, delimiter=delimiter, lineterminator="\n")
        if header:
            writer.writerow(names)
        for row in table:
            writer.writerow([repr(float(v)) for v in row])
    return path
