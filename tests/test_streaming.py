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
