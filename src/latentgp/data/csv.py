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
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import numpy as np

__all__ = ["load_csv", "load_csv_table", "save_csv"]


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
    names, data_rows, data_lines, header = _split_header(path, delimiter, header)
    t = _target_index(path, target, names, header)
    data = _parse_rows(path, data_rows, data_lines, names)

    keep = [j for j in range(len(names)) if j != t]
    X = np.ascontiguousarray(data[:, keep])
    y = data[:, t].copy()
    return X, y, [names[j] for j in keep], names[t]


def load_csv_table(
    path: str | os.PathLike,
    *,
    columns: Sequence[str] | None = None,
    delimiter: str = ",",
    header: bool | None = None,
) -> tuple[np.ndarray, list[str], bool]:
    """Every column of a CSV file, in file order, as :func:`load_csv` reads it.

    Parameters
    ----------
    path, delimiter, header :
        As for :func:`load_csv`.
    columns : sequence of str, optional
        With a header row, the names of the columns to read: only they are parsed (and
        must be numeric); every other column holds NaN, whatever text it has, so that a
        caller picking columns by name can ignore, e.g., an identifier column.  Names the
        file lacks are not an error here (the caller knows what it needs).  ``None``, or a
        file without a header row: every column is parsed.

    Returns
    -------
    values : np.ndarray
        ``(N, K)`` float64.
    names : list of str
        ``K`` column names (``col0, col1, ...`` without a header row).
    has_header : bool
        Whether the first row was a header.

    Raises
    ------
    FileNotFoundError, ValueError
        As :func:`load_csv`, for the columns that are parsed.
    """
    path = Path(path)
    names, data_rows, data_lines, header = _split_header(path, delimiter, header)
    wanted = None if columns is None or not header else set(columns)
    return _parse_rows(path, data_rows, data_lines, names, wanted), names, header


def _split_header(
    path: Path, delimiter: str, header: bool | None
) -> tuple[list[str], list[list[str]], list[int], bool]:
    """``(names, data rows, their line numbers, has_header)`` of a CSV file (header
    detected when ``header`` is None); errors for a missing, empty or header-only file."""
    if not path.is_file():
        raise FileNotFoundError(f"CSV file not found: {path}")
    rows, lines = _read_rows(path, delimiter)
    if not rows:
        raise ValueError(f"{path}: the file is empty (no rows)")
    if header is None:
        header = any(not _is_number(field) for field in rows[0])
    if header:
        names = _header_names(path, rows[0])
        data_rows, data_lines = rows[1:], lines[1:]
    else:
        names = [f"col{j}" for j in range(len(rows[0]))]
        data_rows, data_lines = rows, lines
    if not data_rows:
        raise ValueError(f"{path}: the file has a header ({names}) but no data rows")
    return names, data_rows, data_lines, bool(header)


def _read_rows(path: Path, delimiter: str) -> tuple[list[list[str]], list[int]]:
    """The non-blank rows of the file and their line numbers.  A file that cannot be
    read as text is a ``ValueError`` naming it: not gzip data behind a ``.gz`` name,
    bytes that are not UTF-8, or a field longer than the csv module's limit."""
    rows: list[list[str]] = []
    lines: list[int] = []
    reader = None
    try:
        with _open(path, "r") as fh:
            reader = csv.reader(fh, delimiter=delimiter)
            for row in reader:
                if not row or all(not field.strip() for field in row):
                    continue  # blank line
                rows.append(row)
                lines.append(reader.line_num)
    except UnicodeDecodeError:
        raise ValueError(f"{path}: {_first_undecodable(path)}; save the file as UTF-8") from None
    except csv.Error as err:
        line = reader.line_num if reader is not None else 0
        raise ValueError(
            f"{path}: line {line} is not valid CSV ({err}); a field that long is not a number"
            if "field larger" in str(err)
            else f"{path}: line {line} is not valid CSV ({err})"
        ) from None
    except (OSError, EOFError, zlib.error) as err:
        if path.suffix != ".gz":
            raise
        raise ValueError(
            f"{path}: not a valid gzip file ({type(err).__name__}: {err}); a name ending in "
            ".gz must hold gzip-compressed CSV"
        ) from None
    return rows, lines


def _first_undecodable(path: Path) -> str:
    """Where the first byte that is not UTF-8 is (an error path: reads the whole file)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        data = fh.read()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        byte = data[err.start]
        return f"not UTF-8 text (byte 0x{byte:02x} on line {line}, byte offset {err.start})"
    return "not UTF-8 text"


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


def _target_index(path: Path, target: str | int | None, names: list[str], header: bool) -> int:
    """Index of the target column (a name, a possibly negative index, or None: the last)."""
    n_cols = len(names)
    if target is None:
        return n_cols - 1
    if isinstance(target, str):
        if target not in names:
            raise ValueError(
                f"{path}: no column named {target!r}; the columns are {names}"
                + ("" if header else " (the file has no header row)")
            )
        return names.index(target)
    if isinstance(target, (int, np.integer)) and not isinstance(target, bool):
        if not -n_cols <= int(target) < n_cols:
            raise ValueError(
                f"{path}: target index {target} is out of range for {n_cols} columns {names}"
            )
        return int(target) % n_cols
    raise ValueError(f"target must be a column name, an index or None, got {target!r}")


def _parse_rows(
    path: Path,
    data_rows: list[list[str]],
    data_lines: list[int],
    names: list[str],
    wanted: set[str] | None = None,
) -> np.ndarray:
    """The data rows as a float64 array ``(N, n_cols)``; an error at the first bad field.
    With ``wanted``, only the columns of those names are parsed (the others hold NaN)."""
    n_cols = len(names)
    data = np.full((len(data_rows), n_cols), np.nan, dtype=np.float64)
    parsed = [j for j in range(n_cols) if wanted is None or names[j] in wanted]
    for i, (row, line) in enumerate(zip(data_rows, data_lines, strict=True)):
        if len(row) != n_cols:
            raise ValueError(
                f"{path}: line {line} has {len(row)} fields but the first row has {n_cols} "
                f"(ragged rows)"
            )
        for j in parsed:
            text = row[j].strip()
            where = f"column {names[j]!r} (index {j}), data row {i} (line {line})"
            if not text:
                raise ValueError(f"{path}: missing (empty) value in {where}")
            try:
                value = float(text)
            except ValueError:
                raise ValueError(f"{path}: non-numeric value {text!r} in {where}") from None
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
