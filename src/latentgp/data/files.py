"""The data home and reading its numeric CSV files.

The data home is the folder that holds the benchmark files which no package ships (the
``uci/`` and ``savigp/`` layouts of the project's shared data folder). This module only
needs numpy; it sits at the bottom of :mod:`latentgp.data` next to the registry.
"""

from __future__ import annotations

import functools
import gzip
import os
from pathlib import Path

import numpy as np

__all__ = ["DATA_HOME_ENV", "data_home", "find_file", "read_numeric", "read_header"]

#: Environment variable naming the data home.
DATA_HOME_ENV = "LATENTGP_DATA"


def data_home(data_home: str | os.PathLike | None = None) -> Path:
    """Folder holding the data-home files.

    Parameters
    ----------
    data_home : str or path-like, optional
        Explicit folder; wins over everything else.

    Returns
    -------
    Path
        ``data_home`` if given, else ``$LATENTGP_DATA`` if set and non-empty, else
        ``$XDG_CACHE_HOME/latentgp`` if ``XDG_CACHE_HOME`` is set, else
        ``~/.cache/latentgp``. The folder is not created.
    """
    if data_home is not None:
        return Path(data_home).expanduser()
    env = os.environ.get(DATA_HOME_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "latentgp"


def _how_home_was_chosen(arg: str | os.PathLike | None) -> str:
    if arg is not None:
        return "given by the data_home argument"
    if os.environ.get(DATA_HOME_ENV, "").strip():
        return f"from the environment variable {DATA_HOME_ENV}"
    return f"the default, because the environment variable {DATA_HOME_ENV} is not set"


def find_file(
    name: str,
    rel: str,
    home_arg: str | os.PathLike | None,
    origin: str,
) -> Path:
    """Path of the data-home file ``rel`` (``.csv.gz``, or the plain ``.csv`` next to it).

    Parameters
    ----------
    name : str
        Dataset name, for the error message.
    rel : str
        Path relative to the data home, e.g. ``"uci/kin40k/data.csv.gz"``.
    home_arg : str or path-like, optional
        The ``data_home`` argument of the caller (see :func:`data_home`).
    origin : str
        Public origin of the file, for the error message.

    Raises
    ------
    FileNotFoundError
        Neither file exists; the message names the path, the data home, how it was
        chosen (``LATENTGP_DATA``) and the file's public origin.
    """
    home = data_home(home_arg)
    path = home / rel
    if path.is_file():
        return path
    plain = path.with_suffix("") if path.suffix == ".gz" else None
    if plain is not None and plain.is_file():
        return plain
    raise FileNotFoundError(
        f"dataset {name!r} needs the file {path}, which does not exist (also looked for "
        f"{plain.name if plain is not None else path.name}). The data home is {home} "
        f"({_how_home_was_chosen(home_arg)}); set {DATA_HOME_ENV} or pass data_home= to use "
        f"another folder. The file's public origin is {origin}: copy it to that path "
        f"(gzip-compressed .csv.gz or plain .csv)."
    )


@functools.lru_cache(maxsize=16)
def _read_numeric_cached(path: str, mtime_ns: int, size: int, skip_header: bool) -> np.ndarray:
    del mtime_ns, size  # cache keys only
    arr = np.loadtxt(path, delimiter=",", ndmin=2, dtype=np.float64, skiprows=int(skip_header))
    arr.setflags(write=False)
    return arr


def read_numeric(path: Path, name: str, skip_header: bool = False) -> np.ndarray:
    """Read a numeric, headerless (or one-header-row) CSV file, checking finiteness.

    Returns
    -------
    np.ndarray
        Read-only float64 array of shape ``(rows, columns)``, cached by path, modification
        time and size.

    Raises
    ------
    ValueError
        The file does not parse, is empty, or holds NaN/inf (the message names the row
        and column).
    """
    st = path.stat()
    try:
        arr = _read_numeric_cached(str(path), st.st_mtime_ns, st.st_size, skip_header)
    except ValueError as err:
        raise ValueError(f"dataset {name!r}: could not parse {path}: {err}") from None
    if arr.size == 0:
        raise ValueError(f"dataset {name!r}: {path} holds no data")
    if not np.all(np.isfinite(arr)):
        r, c = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(f"dataset {name!r}: {path} has a non-finite value at row {r}, column {c}")
    return arr


def read_header(path: Path) -> list[str]:
    """Column names of the first line of a (possibly gzip-compressed) CSV file."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [h.strip() for h in fh.readline().strip().split(",")]
