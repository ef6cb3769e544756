"""CSV files as a fit source (``lg.datasets.CSVSource``) and SEP's streamed sweeps.

- a CSV source holds exactly the rows ``load_csv`` reads, converted a chunk at a time;
- SVGP, SEP (both schemes) and QSGP trained from a CSV source equal the in-memory run;
- a missing file, a non-numeric cell and a missing target column are clear errors;
- SEP's batch scheme reads a source ``chunk_rows`` rows at a time (never all rows after
  the initial sample), equals the in-memory run with the same chunks exactly, and the
  chunked sums equal one pass up to round-off.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from small_sets import cls_data, one_torch_thread, reg_data  # noqa: F401 (fixture)

import latentgp as lg
from latentgp.data import streaming
from latentgp.datasets import CSVSource, ShardedArrays, load_csv, save_csv

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _csv(path, X, y, **kw):
    save_csv(path, X, y, target_name="target", **kw)
    return path


def _state(m):
    """Parameters, buffers, SEP's sites and the history of a fitted model."""
    out = {f"p.{k}": v.detach().clone() for k, v in m.state_dict().items()}
    for k in ("site_nu", "site_mu", "site_upsilon", "A", "c"):
        if getattr(m, k, None) is not None:
            out[k] = getattr(m, k).clone()
    out["objective"] = torch.tensor(m.history_.objective, dtype=torch.float64)
    return out


def _assert_same(a, b, tol=0.0):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=tol, atol=tol, msg=k)


# ------------------------------------------------------------------------- the source --
def test_csv_source_holds_the_rows_load_csv_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(streaming, "CSV_CHUNK_ROWS", 7)  # several parse chunks
    X, y = reg_data(n=50)
    path = _csv(tmp_path / "d.csv", X, y)
    src = CSVSource(path, target="target", shard_rows=20, cache_dir=tmp_path / "c")
    Xr, yr, names, _ = load_csv(path, target="target")
    assert (src.num_rows, src.input_dim, src.feature_names) == (50, 2, ["x0", "x1"])
    assert len(src.X) == 3  # 20 + 20 + 10 rows
    idx = np.array([49, 0, 21, 7, 7])
    Xs, ys = src.rows(idx)
    np.testing.assert_array_equal(Xs, X[idx])  # repr-written floats read back exactly
    np.testing.assert_array_equal(ys, y[idx])
    np.testing.assert_array_equal(src.rows(np.arange(50))[0], Xr)


def test_csv_source_options_target_by_index_and_no_header(tmp_path):
    X, y = reg_data(n=12)
    path = _csv(tmp_path / "d.csv.gz", np.c_[y, X], None, header=False, delimiter=";")
    src = CSVSource(path, target=0, delimiter=";", cache_dir=tmp_path / "c")
    assert src.feature_names == ["col1", "col2"]
    got = src.rows(np.arange(12))
    np.testing.assert_array_equal(got[0], X)
    np.testing.assert_array_equal(got[1], y)
    # ShardedArrays takes a CSV file with the default options, like a Parquet file
    plain = ShardedArrays(_csv(tmp_path / "e.csv", X, y), target="target")
    np.testing.assert_array_equal(plain.rows(np.arange(12))[1], y)


def test_csv_source_is_converted_again_when_the_file_changes(tmp_path):
    X, y = reg_data(n=10)
    path = _csv(tmp_path / "d.csv", X, y)
    cache = tmp_path / "c"
    CSVSource(path, cache_dir=cache)
    _csv(path, X, y + 1.0)
    import os

    os.utime(path, (1e9, 1e9))  # a different modification time
    np.testing.assert_array_equal(CSVSource(path, cache_dir=cache).rows(np.arange(10))[1], y + 1)


def test_csv_source_errors_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothere.csv"):
        CSVSource(tmp_path / "nothere.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,target\n1,2,0\n3,4,1\n5,oops,1\n")
    with pytest.raises(ValueError, match=r"bad\.csv: non-numeric value 'oops' in column 'b' "
                       r"\(index 1\), data row 2 \(line 4\)"):
        CSVSource(bad, cache_dir=tmp_path / "c1")
    ok = _csv(tmp_path / "ok.csv", *reg_data(n=5))
    with pytest.raises(ValueError, match=r"no column named 'label'; the columns are "
                       r"\['x0', 'x1', 'target'\]"):
        CSVSource(ok, target="label", cache_dir=tmp_path / "c2")
    empty = tmp_path / "empty.csv"
    empty.write_text("x0,target\n")
    with pytest.raises(ValueError, match="header .* but no data rows"):
        CSVSource(empty, cache_dir=tmp_path / "c3")


def test_a_bad_cell_in_a_later_chunk_names_its_row(tmp_path, monkeypatch):
    monkeypatch.setattr(streaming, "CSV_CHUNK_ROWS", 4)
    rows = "".join(f"{i},{i % 2}\n" for i in range(9)) + "inf,1\n"
    bad = tmp_path / "late.csv"
    bad.write_text("x,target\n" + rows)
    with pytest.raises(ValueError, match=r"non-finite value 'inf' in column 'x' \(index 0\), "
                       r"data row 9 \(line 11\)"):
        CSVSource(bad, cache_dir=tmp_path / "c")


# ------------------------------------------------------------------- fits from a CSV --
def _svgp():
    return lg.SVGP(num_inducing=5)


def _sep(scheme="batch"):
    return lg.SEP(num_inducing=6, scheme=scheme)


def _qsgp():
    return lg.QSGP(num_basis=60, covariance="chevron", num_dense=3, cv_rank=10, basis_batch=20)


FITS = {
    "svgp": (_svgp, reg_data, dict(batch_size=20, max_steps=8, seed=2)),
    "svgp-full-batch": (_svgp, reg_data, dict(max_steps=5, seed=2)),
    "sep-batch": (_sep, cls_data, dict(max_steps=6, seed=3)),
    "sep-stochastic": (lambda: _sep("stochastic"), cls_data, dict(batch_size=15, epochs=2, seed=3)),
    "qsgp": (_qsgp, reg_data, dict(batch_size=15, max_steps=10, seed=3)),
}


@pytest.mark.parametrize("case", list(FITS))
def test_fit_from_csv_equals_in_memory(case, tmp_path):
    make, data, kw = FITS[case]
    X, y = data()
    src = CSVSource(_csv(tmp_path / "d.csv", X, y), target="target", shard_rows=25)
    ref = make().fit(X, y, **kw)
    got = make().fit(src, **kw)
    _assert_same(_state(got), _state(ref))
    np.testing.assert_array_equal(got.predict_y(X)[0], ref.predict_y(X)[0])


# ---------------------------------------------------------------- SEP's chunked sweeps --
class _CountingSource:
    """A source that records how many rows each read asks for."""

    def __init__(self, inner):
        self.inner, self.reads = inner, []
        self.num_rows, self.input_dim = inner.num_rows, inner.input_dim

    def rows(self, idx):
        self.reads.append(len(idx))
        return self.inner.rows(idx)

    def stats(self):
        return self.inner.stats()

    def lazy_arrays(self, dtype, device=None):
        return (
            streaming.LazyRows(self, "X", dtype, device),
            streaming.LazyRows(self, "y", dtype, device),
        )


def _chunked_sep(chunk_rows):
    m = _sep()
    m.chunk_rows = chunk_rows
    return m


def test_sep_batch_reads_a_source_a_chunk_at_a_time(tmp_path):
    X, y = cls_data()
    kw = dict(max_steps=4, seed=3)
    src = _CountingSource(CSVSource(_csv(tmp_path / "d.csv", X, y), target="target"))
    got = _chunked_sep(16).fit(src, **kw)
    assert src.reads[0] == 61  # the initial sample: every row of a small source
    assert max(src.reads[1:]) == 16 and len(src.reads) > 4 * 3 * 4, src.reads[:12]
    # the in-memory run with the same chunks is the same run exactly ...
    _assert_same(_state(got), _state(_chunked_sep(16).fit(X, y, **kw)))
    # ... and chunking changes only the order of sums (round-off)
    _assert_same(_state(got), _state(_sep().fit(X, y, **kw)), tol=1e-9)


def test_sep_stochastic_reads_only_its_minibatch_rows(tmp_path):
    X, y = cls_data()
    kw = dict(batch_size=15, max_steps=5, seed=3)
    src = _CountingSource(CSVSource(_csv(tmp_path / "d.csv", X, y), target="target"))
    got = _sep("stochastic").fit(src, **kw)
    # the initial sample and the labels (a chunk of rows each), then one minibatch a step
    # (an epoch of 61 rows in batches of 15: the fifth holds the one row left)
    assert src.reads == [61, 61, 15, 15, 15, 15, 1]
    _assert_same(_state(got), _state(_sep("stochastic").fit(X, y, **kw)))


def test_sep_evidence_and_gradient_do_not_depend_on_chunks():
    X, y = cls_data()
    whole = _sep().fit(X, y, max_steps=3, seed=1)
    parts = _chunked_sep(10).fit(X, y, max_steps=3, seed=1)
    assert parts.log_evidence(X, y) == pytest.approx(whole.log_evidence(X, y), rel=1e-10)
    g1, g2 = whole.log_evidence_grad(X, y), parts.log_evidence_grad(X, y)
    for k in g1:
        torch.testing.assert_close(g2[k], g1[k], rtol=1e-8, atol=1e-10, msg=k)


def test_sep_chunk_rows_must_be_positive():
    X, y = cls_data()
    with pytest.raises(ValueError, match="chunk_rows"):
        _chunked_sep(0).fit(X, y, max_steps=1)


@pytest.mark.parametrize("scheme", ["batch", "stochastic"])
def test_sep_from_a_source_larger_than_the_init_sample_equals_in_memory(scheme, tmp_path):
    """Beyond 20,000 rows a source initialises from a seeded sample of rows; an in-memory
    SEP fit initialises from the same sample, so the two are still the same fit."""
    X, y = cls_data(n=20_500, seed=4)
    folder = tmp_path / "shards"
    folder.mkdir()
    for i, (a, b) in enumerate(zip(np.array_split(X, 3), np.array_split(y, 3), strict=True)):
        np.save(folder / f"X_{i:05d}.npy", a)
        np.save(folder / f"y_{i:05d}.npy", b)
    kw = dict(max_steps=2, seed=5)
    if scheme == "stochastic":
        kw.update(batch_size=50, max_steps=3)

    def make():
        m = _sep(scheme)
        m.chunk_rows = 4096
        return m

    got = make().fit(ShardedArrays(folder), **kw)
    ref = make().fit(X, y, **kw)
    _assert_same(_state(got), _state(ref))
    # the initial values are those of the sample's rows alone (not of every row)
    sample = lg.models.base.init_sample(20_500, 5)
    assert len(sample) == 20_000
    whole = _sep(scheme).initialize(X, y, seed=5)
    part = _sep(scheme).initialize(X[sample], y[sample], seed=5)
    _assert_same(dict(whole.state_dict()), dict(part.state_dict()))
