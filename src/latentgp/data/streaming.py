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

import glob
import json
import os
from collections.abc import Iterator

import numpy as np
import torch


class ShardedArrays:
    """Rows stored as ``.npy`` shards (or a Parquet file converted to them).

    Parameters
    ----------
    path: a folder of ``X_*.npy`` / ``y_*.npy`` shards, or a ``.parquet`` file.
    target: for Parquet, the target column (name; default the last column).
    cache_dir: where Parquet is converted to (default ``<file>.latentgp-shards``).
    shard_rows: rows per shard when converting Parquet.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        target: str | None = None,
        cache_dir: str | os.PathLike | None = None,
        shard_rows: int = 1_000_000,
    ) -> None:
        path = os.fspath(path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no data at {path}")
        if path.endswith(".parquet"):
            path = _parquet_to_shards(path, target, cache_dir, shard_rows)
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
        return Xo, yo

    def iter_chunks(self, chunk_rows: int = 262_144) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """All rows in order, ``chunk_rows`` at a time."""
        for a, b in zip(self.X, self.y, strict=True):
            for s in range(0, a.shape[0], chunk_rows):
                yield np.asarray(a[s : s + chunk_rows]), np.asarray(b[s : s + chunk_rows])

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
    if os.path.exists(stamp):
        with open(stamp) as fh:
            meta = json.load(fh)
        if meta.get("source_mtime") == mtime and meta.get("target") == target:
            return out
    pf = pq.ParquetFile(path)
    cols = pf.schema_arrow.names
    tgt = target or cols[-1]
    if tgt not in cols:
        raise ValueError(f"{path} has no column {tgt!r}; its columns are {cols}")
    feats = [c for c in cols if c != tgt]
    os.makedirs(out, exist_ok=True)
    for old in glob.glob(os.path.join(out, "[Xy]_*.npy")):
        os.unlink(old)
    k, bufX, bufy, filled = 0, [], [], 0

    def flush():
        nonlocal k, bufX, bufy, filled
        if filled:
            np.save(os.path.join(out, f"X_{k:05d}.npy"), np.concatenate(bufX))
            np.save(os.path.join(out, f"y_{k:05d}.npy"), np.concatenate(bufy))
            k, bufX, bufy, filled = k + 1, [], [], 0

    for batch in pf.iter_batches(batch_size=65536):
        try:
            Xb = np.column_stack([batch.column(c).to_numpy(zero_copy_only=False) for c in feats])
            yb = batch.column(tgt).to_numpy(zero_copy_only=False)
            Xb, yb = Xb.astype(np.float64), yb.astype(np.float64)
        except (ValueError, TypeError) as err:
            raise ValueError(f"{path}: a column is not numeric ({err})") from None
        bufX.append(Xb)
        bufy.append(yb)
        filled += len(yb)
        if filled >= shard_rows:
            flush()
    flush()
    with open(stamp, "w") as fh:
        json.dump(
            {"source": path, "source_mtime": mtime, "target": tgt, "feature_names": feats}, fh
        )
    return out


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
