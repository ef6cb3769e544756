"""Reading and writing numeric CSV files with the standard library (no pandas).

:func:`load_csv` splits a numeric table into inputs and one target column and reports
problems precisely: the file, the column and the first offending row.  :func:`csv_columns`
and :func:`iter_csv_chunks` read the same files a chunk of rows at a time (the CSV source
of :mod:`latentgp.data.streaming` converts them so, never holding the whole file). Files ending in
``.gz`` are read and written gzip-compressed.
"""

from __future__ import annotations

import csv
import gzip
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

__all__ = [
    "CSVColumns",
    "count_csv_rows",
    "csv_columns",
    "iter_csv_chunks",
    "load_csv",
    "save_csv",
]


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


@dataclass(frozen=True)
class CSVColumns:
    """The layout of a numeric CSV file (see :func:`csv_columns`).

    Attributes: ``names`` (every column, in file order; ``col0, col1, ...`` without a
    header), ``target`` (the target column's index), ``header`` (whether the first
    non-blank row is a header).
    """

    names: list[str]
    target: int
    header: bool

    @property
    def feature_names(self) -> list[str]:
        """The input columns' names (every column but the target, in file order)."""
        return [n for j, n in enumerate(self.names) if j != self.target]

    @property
    def target_name(self) -> str:
        return self.names[self.target]


def csv_columns(
    path: str | os.PathLike,
    target: str | int | None = None,
    delimiter: str = ",",
    header: bool | None = None,
) -> CSVColumns:
    """The columns of a numeric CSV file, read from its first non-blank row only.

    ``target``, ``delimiter`` and ``header`` are those of :func:`load_csv`.  Raises
    ``FileNotFoundError`` for a missing file and ``ValueError`` for an empty file, bad
    header names or a target column that does not exist (the message lists the columns).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"CSV file not found: {path}")
    first = next(_nonblank_rows(path, delimiter), None)
    if first is None:
        raise ValueError(f"{path}: the file is empty (no rows)")
    row = first[1]
    if header is None:
        header = any(not _is_number(field) for field in row)
    names = _header_names(path, row) if header else [f"col{j}" for j in range(len(row))]
    return CSVColumns(
        names, _target_index(path, target, names, header, delimiter), bool(header)
    )


def iter_csv_chunks(
    path: str | os.PathLike,
    columns: CSVColumns,
    delimiter: str = ",",
    chunk_rows: int = 65536,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The data rows of a CSV file laid out as ``columns`` (:func:`csv_columns`), read
    ``chunk_rows`` at a time: ``(X (k, D), y (k,))`` float64 arrays, in file order.

    Only one chunk is held at a time.  ``ValueError`` at the first bad field, naming the
    file, the column, the data row and the line: an empty, non-numeric or non-finite
    value, or a row with another number of fields than the first.
    """
    path = Path(path)
    rows = _nonblank_rows(path, delimiter)
    if columns.header:
        next(rows, None)
    keep = [j for j in range(len(columns.names)) if j != columns.target]
    fields: list[list[str]] = []
    lines: list[int] = []
    start = 0
    for line, row in rows:
        fields.append(row)
        lines.append(line)
        if len(fields) == chunk_rows:
            data = _parse_rows(path, fields, lines, columns.names, start, delimiter)
            yield np.ascontiguousarray(data[:, keep]), data[:, columns.target].copy()
            start, fields, lines = start + len(fields), [], []
    if fields:
        data = _parse_rows(path, fields, lines, columns.names, start, delimiter)
        yield np.ascontiguousarray(data[:, keep]), data[:, columns.target].copy()


def count_csv_rows(path: str | os.PathLike, columns: CSVColumns, delimiter: str = ",") -> int:
    """The number of data rows (non-blank rows after the header) of a CSV file."""
    return sum(1 for _ in _nonblank_rows(Path(path), delimiter)) - int(columns.header)


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

    :func:`csv_columns` and :func:`iter_csv_chunks` read the same files a chunk of rows
    at a time (``latentgp.datasets.CSVSource`` trains from them without loading them).
    """
    columns = csv_columns(path, target, delimiter, header)
    chunks = list(iter_csv_chunks(path, columns, delimiter))
    if not chunks:
        raise ValueError(f"{Path(path)}: the file has a header ({columns.names}) but no data rows")
    X = np.concatenate([c[0] for c in chunks]) if len(chunks) > 1 else chunks[0][0]
    y = np.concatenate([c[1] for c in chunks]) if len(chunks) > 1 else chunks[0][1]
    return X, y, columns.feature_names, columns.target_name


def _nonblank_rows(path: Path, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """``(line number, fields)`` of the non-blank rows of the file, streamed."""
    with _open(path, "r") as fh:
        reader = csv.reader(fh, delimiter=delimiter)
        for row in reader:
            if not row or all(not field.strip() for field in row):
                continue  # blank line
            yield reader.line_num, row


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
    start: int,
    delimiter: str = ",",
) -> np.ndarray:
    """The data rows as a float64 array ``(N, n_cols)``; an error at the first bad field
    (``start``: the data-row number of the first of them)."""
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
            where = f"column {names[j]!r} (index {j}), data row {start + i} (line {line})"
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
