"""Out-of-core data: rows of (X, y) on disk, read a minibatch at a time.

A :class:`ShardedArrays` source is a folder of ``.npy`` shards (``X_00000.npy``,
``y_00000.npy``, ... as written by :func:`write_gp_draws_npy`, or any ``X_*.npy`` /
``y_*.npy`` pairs) or a Parquet file (converted once, streaming, into ``.npy`` shards in a
cache folder next to it).  Shards are memory-mapped, so resident memory holds only the
pages a minibatch touches.

Shuffling.  Training draws one global permutation of all N rows per epoch (the same
sequence as in-memory training with the same seed, so results are identical); a batch's
rows are read shard by shard in sorted order and returned in batch order.  Shuffling is
therefore across and within shards at once; the price is random reads, which the page
cache absorbs for data up to the machine's memory and which cost disk seeks beyond it.

Statistics for standardisation come from one streaming pass (Chan et al.'s pairwise
update of means and sums of squares), which also checks every value is finite.
"""

from __future__ import annotations

import contextlib
import glob
import json
import mmap
import os
from collections.abc import Iterator

import numpy as np
import torch

from ..validation import _check_magnitude

#: values whose squares overflow float64 (see latentgp.validation)
_TOO_LARGE = 1.3407807929942596e150


class ShardedArrays:
    """Rows stored as ``.npy`` shards (or a Parquet file converted to them).

    Parameters
    ----------
    path: a folder of ``X_*.npy`` / ``y_*.npy`` shards, a ``.parquet`` file or a numeric
        CSV file (``.csv``, ``.csv.gz``; :class:`CSVSource` takes CSV options).
    target: for Parquet and CSV, the target column (name; default the last column).
    cache_dir: where a file is converted to (default ``<file>.latentgp-shards``).
    shard_rows: rows per shard when converting a file.
    max_mapped_bytes: bound on the shard pages kept mapped in this process by random
        row reads (default 1 GiB; see :meth:`release_pages`), which bounds the resident
        memory of out-of-core training whatever the file size.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        target: str | None = None,
        cache_dir: str | os.PathLike | None = None,
        shard_rows: int = 1_000_000,
        max_mapped_bytes: int = 1 << 30,
    ) -> None:
        path = os.fspath(path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no data at {path}")
        if path.endswith(".parquet"):
            path = _parquet_to_shards(path, target, cache_dir, shard_rows)
        elif path.lower().endswith(CSV_SUFFIXES):
            path = _csv_to_shards(path, target, ",", None, cache_dir, shard_rows)
        self.folder = path
        xs = sorted(glob.glob(os.path.join(path, "X_*.npy")))
        ys = sorted(glob.glob(os.path.join(path, "y_*.npy")))
        if not xs or len(xs) != len(ys):
            raise ValueError(
                f"{path} must hold matching X_*.npy and y_*.npy shards; found {len(xs)} X and "
                f"{len(ys)} y files"
            )
        self.X = [np.load(p, mmap_mode="r") for p in xs]
        self.y = [np.load(p, mmap_mode="r") for p in ys]
        for px, py, a, b in zip(xs, ys, self.X, self.y, strict=True):
            if a.ndim != 2 or b.shape[0] != a.shape[0]:
                raise ValueError(
                    f"shards {os.path.basename(px)} {a.shape} and {os.path.basename(py)} "
                    f"{b.shape} do not match: X must be (rows, D) and y (rows,)"
                )
            if a.shape[1] != self.X[0].shape[1]:
                raise ValueError(f"shard {px} has {a.shape[1]} columns, not {self.X[0].shape[1]}")
        sizes = np.array([a.shape[0] for a in self.X])
        self.offsets = np.concatenate([[0], np.cumsum(sizes)])
        self.feature_names = _meta_names(path, self.X[0].shape[1])
        self._stats: dict | None = None
        self.max_mapped_bytes = int(max_mapped_bytes)
        self._file_bytes = sum(a.nbytes for a in (*self.X, *self.y))
        self._mapped = 0

    @property
    def num_rows(self) -> int:
        return int(self.offsets[-1])

    @property
    def input_dim(self) -> int:
        return int(self.X[0].shape[1])

    def __len__(self) -> int:
        return self.num_rows

    def rows(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``idx`` (any order) as ``(X (k, D), y (k,))`` arrays, in the order given."""
        idx = np.asarray(idx, dtype=np.int64)
        order = np.argsort(idx, kind="stable")
        sidx = idx[order]
        shard = np.searchsorted(self.offsets, sidx, side="right") - 1
        Xo = np.empty((len(idx), self.input_dim))
        yo = np.empty(len(idx))
        for s in np.unique(shard):
            sel = shard == s
            local = sidx[sel] - self.offsets[s]
            Xo[order[sel]] = self.X[s][local]
            yo[order[sel]] = self.y[s][local]
        # A read fault on a file mapping maps the surrounding 64 KiB ("fault-around"),
        # so each random row can bring 64 KiB of X and of y into this process.
        self._mapped += len(idx) * 2 * 65536
        if min(self._mapped, self._file_bytes) > self.max_mapped_bytes:
            self.release_pages()
        return Xo, yo

    def release_shard(self, shard: int) -> None:
        """:meth:`release_pages` for the one shard ``shard`` (its index in the list of
        files); :meth:`release_pages` calls it for every shard."""
        for arr in (self.X[shard], self.y[shard]):
            mm = getattr(arr, "_mmap", None)
            if mm is not None and hasattr(mm, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
                with contextlib.suppress(OSError, ValueError):
                    mm.madvise(mmap.MADV_DONTNEED)

    def release_pages(self) -> None:
        """Drop the shard pages mapped into this process (``madvise(MADV_DONTNEED)``).

        The data stay in the operating system's page cache, so re-reading them costs a
        minor page fault, but they no longer count towards this process's resident
        memory: without this, one epoch over a 10^7-row file keeps the whole file
        (640 MB for 8 float64 columns) resident.  A no-op where ``madvise`` is missing.
        :meth:`iter_chunks` calls it after every chunk; :meth:`rows` when the pages it
        may have mapped exceed ``max_mapped_bytes``.  Re-faulting released pages costs
        about 4 ms per 1,000 random rows, so files smaller than the budget are never
        released during training.
        """
        self._mapped = 0
        for s in range(len(self.X)):
            self.release_shard(s)

    def iter_chunks(self, chunk_rows: int = 262_144) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """All rows in order, ``chunk_rows`` at a time (pages released after each chunk)."""
        for a, b in zip(self.X, self.y, strict=True):
            for s in range(0, a.shape[0], chunk_rows):
                chunk = np.array(a[s : s + chunk_rows]), np.array(b[s : s + chunk_rows])
                self.release_pages()
                yield chunk

    def lazy_arrays(self, dtype: torch.dtype, device=None) -> tuple[LazyRows, LazyRows]:
        """Tensor-like views ``(X, y)`` that read rows on indexing (used by ``fit``)."""
        return LazyRows(self, "X", dtype, device), LazyRows(self, "y", dtype, device)

    def stats(self) -> dict[str, np.ndarray]:
        """Column means and standard deviations of X and y in one streaming pass;
        raises ``ValueError`` naming the row of the first non-finite value."""
        if self._stats is not None:
            return self._stats
        n = 0
        mx = np.zeros(self.input_dim)
        sx = np.zeros(self.input_dim)
        my = sy = 0.0
        start = 0
        for Xc, yc in self.iter_chunks():
            bad = ~np.isfinite(Xc)
            if bad.any():
                r, c = np.argwhere(bad)[0]
                raise ValueError(f"X contains NaN or inf at row {start + r}, column {c}")
            if not np.isfinite(yc).all():
                raise ValueError(
                    f"y contains NaN or inf at row {start + np.argmin(np.isfinite(yc))}"
                )
            for name, arr in (("X", Xc), ("y", yc)):
                if arr.size and float(np.abs(arr).max()) > _TOO_LARGE:
                    r = np.argwhere(np.abs(arr) == np.abs(arr).max())[0]
                    where = f"row {start + r[0]}" + (f", column {r[1]}" if len(r) > 1 else "")
                    _check_magnitude(float(np.abs(arr).max()), where, name, torch.float64)
            k = len(yc)
            cmx, cmy = Xc.mean(0), yc.mean()
            csx, csy = ((Xc - cmx) ** 2).sum(0), ((yc - cmy) ** 2).sum()
            tot = n + k
            dx, dy = cmx - mx, cmy - my
            sx = sx + csx + dx**2 * n * k / tot
            sy = sy + csy + dy**2 * n * k / tot
            mx = mx + dx * k / tot
            my = my + dy * k / tot
            n = tot
            start += k
        if n == 0:
            raise ValueError(f"{self.folder} holds no rows")
        ddof = 1 if n > 1 else 0
        self._stats = {
            "x_mean": mx,
            "x_std": np.sqrt(sx / max(n - ddof, 1)),
            "y_mean": np.array([my]),
            "y_std": np.array([np.sqrt(sy / max(n - ddof, 1))]),
            "n": n,
        }
        return self._stats


class LazyRows:
    """Tensor-like view of one side (X or y) of a :class:`ShardedArrays`: indexing with a
    tensor of row numbers reads those rows and returns a tensor (after ``transform``)."""

    def __init__(
        self, source: ShardedArrays, side: str, dtype: torch.dtype, device=None, transform=None
    ) -> None:
        self.source, self.side, self.dtype = source, side, dtype
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.transform = transform
        self.shape = (source.num_rows, source.input_dim) if side == "X" else (source.num_rows,)
        self.ndim = len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, idx) -> torch.Tensor:
        """Rows ``idx`` (a tensor or array of row numbers, or a slice) as a tensor."""
        if isinstance(idx, slice):
            idx = np.arange(*idx.indices(self.shape[0]))
        if isinstance(idx, torch.Tensor):
            idx = idx.cpu().numpy()
        X, y = self.source.rows(np.asarray(idx))
        t = torch.from_numpy(X if self.side == "X" else y).to(self.dtype).to(self.device)
        return self.transform(t) if self.transform is not None else t

    def with_transform(self, fn) -> LazyRows:
        return LazyRows(self.source, self.side, self.dtype, self.device, fn)


def _meta_names(folder: str, D: int) -> list[str]:
    meta = os.path.join(folder, "meta.json")
    if os.path.exists(meta):
        with open(meta) as fh:
            names = json.load(fh).get("feature_names")
        if names and len(names) == D:
            return list(names)
    return [f"x{i}" for i in range(D)]


def _parquet_to_shards(path: str, target: str | None, cache_dir, shard_rows: int) -> str:
    try:
        import pyarrow.parquet as pq
    except ImportError as err:
        raise ImportError("reading Parquet needs pyarrow: pip install latentgp[data]") from err
    out = os.fspath(cache_dir) if cache_dir else path + ".latentgp-shards"
    stamp = os.path.join(out, "meta.json")
    mtime = os.path.getmtime(path)
    if _converted(out, {"source_mtime": mtime, "target": target}):
        return out
    try:
        # no pre-buffering: pyarrow's default keeps every row group it has read cached
        # (700 MiB for a 10^7-row file); a 1 MiB read buffer keeps conversion ~130 MiB
        pf = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
    except Exception as err:  # noqa: BLE001 - pyarrow raises several types for bad files
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        raise ValueError(f"{path} is not a readable Parquet file ({first})") from None
    cols = pf.schema_arrow.names
    if not cols:
        raise ValueError(f"{path} has no columns")
    tgt = target or cols[-1]
    if tgt not in cols:
        raise ValueError(f"{path} has no column {tgt!r}; its columns are {cols}")
    feats = [c for c in cols if c != tgt]
    if not feats:
        raise ValueError(f"{path}: only one column ({tgt!r}); no input columns left")
    os.makedirs(out, exist_ok=True)
    _clear_shards(out)
    # Shards are streamed to disk batch by batch (npy header first, then raw rows), so
    # converting holds one record batch in memory, not a shard.
    total = pf.metadata.num_rows
    writer = _ShardWriter(out, len(feats), total, shard_rows)
    try:
        for batch in pf.iter_batches(batch_size=65536, use_threads=False):
            try:
                Xb = np.column_stack(
                    [batch.column(c).to_numpy(zero_copy_only=False) for c in feats]
                )
                yb = batch.column(tgt).to_numpy(zero_copy_only=False)
                Xb, yb = Xb.astype(np.float64), yb.astype(np.float64)
            except (ValueError, TypeError) as err:
                raise ValueError(f"{path}: a column is not numeric ({err})") from None
            writer.write(Xb, yb)
    except Exception as err:  # noqa: BLE001 - pyarrow raises OSError/ArrowException on damage
        if isinstance(err, ValueError) and "is not numeric" in str(err):
            raise
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        raise ValueError(f"{path} is not a readable Parquet file ({first})") from None
    finally:
        writer.close(complete=False)  # an error above is not hidden by the missing rows
    writer.close()
    with open(stamp, "w") as fh:
        json.dump(
            {"source": path, "source_mtime": mtime, "target": tgt, "feature_names": feats}, fh
        )
    return out


def _converted(out: str, stamp: dict) -> bool:
    """Whether ``out`` holds shards converted with the settings of ``stamp``."""
    meta = os.path.join(out, "meta.json")
    if not os.path.exists(meta):
        return False
    with open(meta) as fh:
        old = json.load(fh)
    return all(old.get(k) == v for k, v in stamp.items())


def _csv_to_shards(
    path: str,
    target: str | int | None,
    delimiter: str,
    header: bool | None,
    cache_dir,
    shard_rows: int,
) -> str:
    """Convert a CSV file to ``.npy`` shards, streaming: one pass counts the rows, a
    second parses them :data:`CSV_CHUNK_ROWS` at a time (errors name the file, the row
    and the column, see :func:`latentgp.data.csv.iter_csv_chunks`)."""
    from .csv import count_csv_rows, csv_columns, iter_csv_chunks

    out = os.fspath(cache_dir) if cache_dir else path + ".latentgp-shards"
    columns = csv_columns(path, target, delimiter, header)
    if len(columns.names) < 2:
        raise ValueError(
            f"{path}: only one column ({columns.target_name!r}); no input columns left"
        )
    stamp = {
        "source_mtime": os.path.getmtime(path),
        "target": columns.target_name,
        "delimiter": delimiter,
        "header": columns.header,
    }
    if _converted(out, stamp):
        return out
    total = count_csv_rows(path, columns, delimiter)
    if total == 0:
        raise ValueError(f"{path}: the file has a header ({columns.names}) but no data rows")
    os.makedirs(out, exist_ok=True)
    _clear_shards(out)
    writer = _ShardWriter(out, len(columns.names) - 1, total, shard_rows)
    try:
        for Xc, yc in iter_csv_chunks(path, columns, delimiter, CSV_CHUNK_ROWS):
            writer.write(Xc, yc)
    finally:
        writer.close(complete=False)
    writer.close()
    with open(os.path.join(out, "meta.json"), "w") as fh:
        json.dump({"source": path, **stamp, "feature_names": columns.feature_names}, fh)
    return out


#: rows parsed at a time when converting a CSV file
CSV_CHUNK_ROWS = 65536


def _clear_shards(out: str) -> None:
    for old in glob.glob(os.path.join(out, "[Xy]_*.npy")):
        os.unlink(old)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(out, "meta.json"))


class _ShardWriter:
    """Writes ``total`` rows as ``X_k.npy`` / ``y_k.npy`` shards of ``shard_rows`` rows."""

    def __init__(self, out: str, D: int, total: int, shard_rows: int) -> None:
        self.out, self.D, self.left, self.shard_rows = out, D, int(total), int(shard_rows)
        self.k, self.fx, self.fy, self.room = 0, None, None, 0

    def _open(self) -> None:
        rows = min(self.shard_rows, self.left)
        self.fx = open(os.path.join(self.out, f"X_{self.k:05d}.npy"), "wb")  # noqa: SIM115
        self.fy = open(os.path.join(self.out, f"y_{self.k:05d}.npy"), "wb")  # noqa: SIM115
        hx = {"descr": "<f8", "fortran_order": False, "shape": (rows, self.D)}
        np.lib.format.write_array_header_1_0(self.fx, hx)
        np.lib.format.write_array_header_1_0(
            self.fy, {"descr": "<f8", "fortran_order": False, "shape": (rows,)}
        )
        self.k, self.room = self.k + 1, rows

    def write(self, X: np.ndarray, y: np.ndarray) -> None:
        while len(y):
            if self.room == 0:
                self.close()
                self._open()
            n = min(self.room, len(y))
            self.fx.write(np.ascontiguousarray(X[:n], dtype="<f8").tobytes())
            self.fy.write(np.ascontiguousarray(y[:n], dtype="<f8").tobytes())
            X, y, self.room, self.left = X[n:], y[n:], self.room - n, self.left - n

    def close(self, complete: bool = True) -> None:
        """Close the open shard; ``complete``: check that every row was written."""
        for fh in (self.fx, self.fy):
            if fh is not None:
                fh.close()
        self.fx = self.fy = None
        if complete and self.room:
            raise ValueError(f"the file ended {self.room} rows early")


CSV_SUFFIXES = (".csv", ".csv.gz")


class CSVSource(ShardedArrays):
    """The rows of a numeric CSV file as an out-of-core source: ``model.fit(source)``
    trains every model from it without holding the file in memory.

    The file is converted once, streaming (:data:`CSV_CHUNK_ROWS` rows parsed at a
    time), to ``.npy`` shards in a cache folder; they are re-made when the file, the
    target, the delimiter or the header setting changes.  Then it is a
    :class:`ShardedArrays` (``num_rows``, ``input_dim``, ``rows(idx)``,
    ``lazy_arrays``, ``stats()``, ``feature_names``).

    Parameters
    ----------
    path: the file (``.gz`` is decompressed).
    target: the target column by header name or (possibly negative) index; default the
        last column.  Every other column is an input.
    delimiter: the field separator.
    header: whether the first non-blank row is a header; None detects it (a header when
        any of its fields is not a number; without one the columns are ``col0, ...``).
    cache_dir: where the shards go (default ``<file>.latentgp-shards``).
    shard_rows: rows per shard.
    max_mapped_bytes: as for :class:`ShardedArrays`.

    Raises ``FileNotFoundError`` for a missing file and ``ValueError`` naming the file,
    the data row and the column of an empty, non-numeric or non-finite cell, for a
    target column that does not exist (listing the columns), for ragged rows, and for a
    file without data rows.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        target: str | int | None = None,
        delimiter: str = ",",
        header: bool | None = None,
        cache_dir: str | os.PathLike | None = None,
        shard_rows: int = 1_000_000,
        max_mapped_bytes: int = 1 << 30,
    ) -> None:
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"CSV file not found: {path}")
        folder = _csv_to_shards(path, target, delimiter, header, cache_dir, shard_rows)
        super().__init__(folder, max_mapped_bytes=max_mapped_bytes)
        self.path = path


class StandardizedSource:
    """A source whose input columns are shifted and scaled on reading:
    ``(X - x_mean) / x_scale``, with the same interface as :class:`ShardedArrays`."""

    def __init__(self, source: ShardedArrays, x_mean: np.ndarray, x_scale: np.ndarray) -> None:
        self.source = source
        self.x_mean = np.asarray(x_mean, dtype=np.float64)
        self.x_scale = np.asarray(x_scale, dtype=np.float64)
        self.feature_names = source.feature_names

    @property
    def num_rows(self) -> int:
        return self.source.num_rows

    @property
    def input_dim(self) -> int:
        return self.source.input_dim

    def __len__(self) -> int:
        return self.num_rows

    def rows(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        X, y = self.source.rows(idx)
        return (X - self.x_mean) / self.x_scale, y

    def stats(self) -> dict[str, np.ndarray]:
        st = dict(self.source.stats())
        st["x_mean"] = (st["x_mean"] - self.x_mean) / self.x_scale
        st["x_std"] = st["x_std"] / self.x_scale
        return st

    def lazy_arrays(self, dtype: torch.dtype, device=None) -> tuple[LazyRows, LazyRows]:
        return LazyRows(self, "X", dtype, device), LazyRows(self, "y", dtype, device)
