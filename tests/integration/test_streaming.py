"""Out-of-core training from .npy shards and Parquet gives the in-memory answer."""

import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.datasets import ShardedArrays


@pytest.fixture
def shards(tmp_path):
    lg.datasets.write_gp_draws_npy(
        tmp_path / "s", 3000, shard_size=1000, input_dim=3, seed=0, noise=0.05
    )
    return tmp_path / "s"


def _in_memory(folder):
    X = np.concatenate([np.load(p) for p in sorted(folder.glob("X_*.npy"))])
    y = np.concatenate([np.load(p) for p in sorted(folder.glob("y_*.npy"))])
    return X, y


def test_rows_in_any_order(shards):
    src = ShardedArrays(shards)
    X, y = _in_memory(shards)
    idx = np.array([2999, 5, 1000, 999, 1500, 5])
    Xr, yr = src.rows(idx)
    np.testing.assert_array_equal(Xr, X[idx])
    np.testing.assert_array_equal(yr, y[idx])


def test_streaming_statistics_equal_in_memory(shards):
    src = ShardedArrays(shards)
    X, y = _in_memory(shards)
    st = src.stats()
    np.testing.assert_allclose(st["x_mean"], X.mean(0), rtol=1e-12)
    np.testing.assert_allclose(st["x_std"], X.std(0, ddof=1), rtol=1e-12)
    np.testing.assert_allclose(st["y_std"][0], y.std(ddof=1), rtol=1e-12)


def test_training_from_shards_equals_in_memory(shards):
    X, y = _in_memory(shards)
    kw = dict(batch_size=256, max_steps=25, lr=0.05, seed=2)
    a = lg.SVGP(num_inducing=15).fit(X, y, **kw)
    b = lg.SVGP(num_inducing=15).fit(ShardedArrays(shards), **kw)
    # same scaling, same permutation sequence; inducing inputs come from a subsample
    assert float(a.y_mean) == pytest.approx(float(b.y_mean), rel=1e-12)
    assert float(a.y_scale) == pytest.approx(float(b.y_scale), rel=1e-12)
    rmse_a = np.sqrt(np.mean((a.predict_y(X)[0] - y) ** 2))
    rmse_b = np.sqrt(np.mean((b.predict_y(X)[0] - y) ** 2))
    assert abs(rmse_a - rmse_b) < 0.05


def test_same_initial_state_gives_identical_training(shards):
    X, y = _in_memory(shards)
    kw = dict(batch_size=256, max_steps=10, lr=0.05, seed=2)
    Z = X[:12]
    a = lg.SVGP(Z=Z).fit(X, y, **kw)
    b = lg.SVGP(Z=Z).fit(ShardedArrays(shards), **kw)
    for (k, v), (_, w) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        torch.testing.assert_close(v, w, rtol=1e-10, atol=1e-12, msg=k)


def test_parquet_source(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    X, y = lg.datasets.gp_draws(2000, input_dim=2, seed=1, noise=0.05)
    table = pa.table({"a": X[:, 0], "b": X[:, 1], "target": y})
    path = tmp_path / "d.parquet"
    pq.write_table(table, path, row_group_size=300)
    src = ShardedArrays(path, target="target", shard_rows=700)
    assert src.num_rows == 2000 and src.input_dim == 2 and src.feature_names == ["a", "b"]
    np.testing.assert_array_equal(src.rows(np.arange(2000))[1], y)
    with pytest.raises(ValueError, match="no column 'nope'"):
        ShardedArrays(path, target="nope", cache_dir=tmp_path / "c2")


def test_bad_sources(tmp_path, shards):
    with pytest.raises(FileNotFoundError):
        ShardedArrays(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="matching X_"):
        ShardedArrays(tmp_path / "empty")
    Xb = np.load(shards / "X_00001.npy")
    Xb[7, 1] = np.nan
    np.save(shards / "X_00001.npy", Xb)
    with pytest.raises(ValueError, match="NaN or inf at row 1007, column 1"):
        lg.SVGP(num_inducing=5).fit(ShardedArrays(shards), batch_size=100, max_steps=2)
    with pytest.raises(ValueError, match="y is missing"):
        lg.SVGP().fit(np.zeros((3, 1)))


def test_parquet_conversion_streams_shards_exactly(tmp_path):
    """Shard sizes 700/700/600 from row groups of 300 and record batches: every row lands once,
    in order, as float64 (including an integer column)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    X, y = lg.datasets.gp_draws(2000, input_dim=2, seed=2, noise=0.05)
    ints = np.arange(2000, dtype=np.int32)
    pq.write_table(pa.table({"a": X[:, 0], "i": ints, "t": y}), tmp_path / "d.parquet",
                   row_group_size=300)
    src = ShardedArrays(tmp_path / "d.parquet", target="t", shard_rows=700)
    assert [a.shape[0] for a in src.X] == [700, 700, 600]
    Xr, yr = src.rows(np.arange(2000))
    np.testing.assert_array_equal(Xr, np.column_stack([X[:, 0], ints.astype(float)]))
    np.testing.assert_array_equal(yr, y)
    assert Xr.dtype == np.float64


def test_random_reads_release_mapped_pages_beyond_the_budget(shards, monkeypatch):
    """Random reads count the pages they may map (64 KiB per row and array); past
    ``max_mapped_bytes`` the mappings are released, and the rows read stay correct."""
    X, y = _in_memory(shards)
    file_bytes = 3000 * 3 * 8 + 3000 * 8
    src = ShardedArrays(shards, max_mapped_bytes=file_bytes - 1)
    released = []
    monkeypatch.setattr(src, "release_shard", lambda s: released.append(s))
    rng = np.random.default_rng(0)
    idx = rng.integers(0, 3000, 20)
    Xr, yr = src.rows(idx)  # may map the whole (small) file: over the budget
    assert sorted(released) == [0, 1, 2]  # every shard released once
    np.testing.assert_array_equal(Xr, X[idx])
    np.testing.assert_array_equal(yr, y[idx])
    # a file smaller than the budget is never released by random reads
    small = ShardedArrays(shards)
    monkeypatch.setattr(small, "release_shard", lambda s: released.append(("small", s)))
    small.rows(rng.integers(0, 3000, 3000))
    assert not [r for r in released if isinstance(r, tuple)]


def test_released_pages_leave_the_process(tmp_path):
    """On Linux the file-backed resident memory drops after release_pages."""
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc/self/status")

    def rss_file_kib():
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("RssFile"):
                    return int(line.split()[1])
        pytest.skip("no RssFile line")

    folder = tmp_path / "big"
    folder.mkdir()
    np.save(folder / "X_00000.npy", np.ones((400_000, 8)))  # 25.6 MB
    np.save(folder / "y_00000.npy", np.zeros(400_000))
    src = ShardedArrays(folder)
    before = rss_file_kib()
    src.X[0].sum()  # touch every page of X
    touched = rss_file_kib()
    src.release_pages()
    after = rss_file_kib()
    assert touched - before > 20_000  # ~25 MB mapped
    assert touched - after > 20_000  # and dropped again
