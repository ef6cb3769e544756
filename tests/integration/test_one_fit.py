"""The one fit (issue 22, item 2): every model, SEP and QSGP included, trains through
``latentgp.training.fit``.

- SEP and QSGP trained from a Parquet source equal the in-memory run;
- a run interrupted (Ctrl-C in a callback, or a step budget) and resumed from its
  checkpoint equals the uninterrupted run, also from a Parquet source;
- two ``torch.distributed`` processes reading the Parquet source equal one process;
- a seeded fit leaves the caller's global torch random state as it was, and the same
  seed gives the same result;
- the models layer never imports the training layer (layers import downwards).
"""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest
import torch
from small_sets import cls_data, one_torch_thread, reg_data  # noqa: F401 (fixture)

import latentgp as lg
from latentgp.datasets import ShardedArrays
from latentgp.training import distributed as D

SRC = pathlib.Path(lg.__file__).resolve().parent


pytestmark = pytest.mark.usefixtures("one_torch_thread")






def _sep(scheme="batch"):
    # kernel and inducing inputs from the data (seeded): the source path must initialise
    # exactly as the in-memory one
    return lg.SEP(num_inducing=6, scheme=scheme)


def _qsgp():
    return lg.QSGP(
        num_basis=60,
        basis=lg.QSGP.Basis(batch=20),
        covariance=lg.QSGP.Covariance(kind="chevron", num_dense=3),
        control_variate=10,
    )


# name: (model factory, data, fit arguments, step at which the interrupted run stops)
CASES = {
    "sep-batch": (_sep, cls_data, dict(max_steps=10, seed=3), 4),
    "sep-stochastic": (
        lambda: _sep("stochastic"),
        cls_data,
        dict(batch_size=15, epochs=3, seed=3),
        6,  # mid-epoch
    ),
    "qsgp": (_qsgp, reg_data, dict(batch_size=15, max_steps=20, seed=3), 7),
}


def _parquet(path, X, y):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    cols = {f"x{j}": X[:, j] for j in range(X.shape[1])}
    pq.write_table(pa.table({**cols, "target": y}), path, row_group_size=20)
    return path


def _source(path, cache):
    return ShardedArrays(path, target="target", cache_dir=cache, shard_rows=25)


def _state(m):
    """Everything a run determines: parameters, buffers, sites / training state, history."""
    out = {f"p.{k}": v.detach().clone() for k, v in m.state_dict().items()}
    for k in ("site_nu", "site_mu", "site_upsilon", "A", "c"):
        if getattr(m, k, None) is not None:
            out[k] = getattr(m, k).clone()
    out["objective"] = torch.tensor(m.history_.objective, dtype=torch.float64)
    out["steps"] = torch.tensor(float(m.history_.steps), dtype=torch.float64)
    return out


def _assert_same(a, b, tol=0.0):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=tol, atol=tol, msg=k)


# --------------------------------------------------------------------------- sources --
@pytest.mark.parametrize("case", list(CASES))
def test_parquet_source_equals_in_memory(case, tmp_path):
    make, data, kw, _ = CASES[case]
    X, y = data()
    path = _parquet(tmp_path / "d.parquet", X, y)
    ref = make().fit(X, y, **kw)
    got = make().fit(_source(path, tmp_path / "c"), **kw)
    _assert_same(_state(got), _state(ref))
    np.testing.assert_array_equal(got.predict_y(X)[0], ref.predict_y(X)[0])


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
        from latentgp.data.streaming import LazyRows

        return LazyRows(self, "X", dtype, device), LazyRows(self, "y", dtype, device)


def test_qsgp_streams_its_rows(tmp_path):
    """QSGP reads a source row by row (sampled rows per step, chunks for the closed-form
    diagonal) after the initial subsample, and still equals the in-memory run."""
    X, y = reg_data(n=3000)
    path = _parquet(tmp_path / "d.parquet", X, y)
    kw = dict(batch_size=15, max_steps=6, seed=1)
    src = _CountingSource(_source(path, tmp_path / "c"))
    got = _qsgp().fit(src, **kw)
    assert src.reads[0] == 3000  # the initial subsample (every row of a small source)
    assert len(src.reads) > 6 and max(src.reads[1:]) <= 1024, src.reads[:20]
    _assert_same(_state(got), _state(_qsgp().fit(X, y, **kw)))


def test_npy_shards_source_for_sep(tmp_path):
    X, y = cls_data()
    folder = tmp_path / "shards"
    folder.mkdir()
    for i, (a, b) in enumerate(zip(np.array_split(X, 3), np.array_split(y, 3), strict=True)):
        np.save(folder / f"X_{i:05d}.npy", a)
        np.save(folder / f"y_{i:05d}.npy", b)
    kw = dict(max_steps=5, seed=1)
    _assert_same(
        _state(_sep().fit(ShardedArrays(folder), **kw)), _state(_sep().fit(X, y, **kw))
    )


def test_source_with_wrong_width_is_refused(tmp_path):
    X, y = cls_data()
    m = _sep().fit(X, y, max_steps=2)
    path = _parquet(tmp_path / "d.parquet", np.c_[X, X[:, :1]], y)
    with pytest.raises(ValueError, match="3 columns but the model was trained with 2"):
        m.fit(_source(path, tmp_path / "c"), max_steps=2)


# ------------------------------------------------------------------ checkpoint/resume --
@pytest.mark.parametrize("case", list(CASES))
def test_ctrl_c_then_resume_equals_uninterrupted(case, tmp_path):
    make, data, kw, stop = CASES[case]
    X, y = data()
    path = _parquet(tmp_path / "d.parquet", X, y)
    ref = make().fit(X, y, **kw)
    ck = tmp_path / "run.ckpt"

    def interrupt(info):
        if info["step"] == stop:
            raise KeyboardInterrupt

    first = make()
    with pytest.warns(lg.TrainingWarning, match=f"interrupted at step {stop}"):
        first.fit(_source(path, tmp_path / "c"), **kw, checkpoint=ck, callbacks=[interrupt])
    assert first.history_.stopped == f"interrupted at step {stop}"
    resumed = make().fit(_source(path, tmp_path / "c"), **kw, checkpoint=ck, resume=True)
    # the resume is recorded (a model's end-of-fit events, e.g. QSGP's final noise step,
    # may follow it)
    assert f"resumed from {ck} at step {stop}" in resumed.history_.events
    _assert_same(_state(resumed), _state(ref))


@pytest.mark.parametrize("case", ["sep-batch", "qsgp"])
def test_step_budget_then_resume_equals_uninterrupted(case, tmp_path):
    """A run that stopped at its step budget continues, with a larger budget, from its
    checkpoint exactly as one run with the larger budget."""
    make, data, kw, stop = CASES[case]
    X, y = data()
    ref = make().fit(X, y, **kw)
    ck = tmp_path / "run.ckpt"
    short = {k: v for k, v in kw.items() if k not in ("max_steps", "epochs")}
    first = make().fit(X, y, **short, max_steps=stop, checkpoint=ck)
    assert first.history_.steps == stop
    # the fingerprint does not hold the budget: the longer run takes the checkpoint over
    resumed = make().fit(X, y, **kw, checkpoint=ck, resume=True)
    _assert_same(_state(resumed), _state(ref))


# --------------------------------------------------------------------- data-parallel --
def test_two_processes_from_parquet_equal_one_process(tmp_path):
    """SEP (batch and stochastic: summed site statistics) and QSGP (averaged row
    gradients), each reading the Parquet source in two gloo processes, follow the
    one-process in-memory trajectory up to round-off."""
    X, y = cls_data()
    Xr, yr = reg_data()
    cls_path = _parquet(tmp_path / "c.parquet", X, y)
    reg_path = _parquet(tmp_path / "r.parquet", Xr, yr)
    out = tmp_path / "two.pt"
    D.spawn(_two_worker, 2, str(cls_path), str(reg_path), str(tmp_path / "cache"), str(out))
    two = torch.load(out, weights_only=True)
    for case, (make, data, kw, _) in CASES.items():
        Xc, yc = data()
        one = _state(make().fit(Xc, yc, **kw))
        _assert_same(two[case], one, tol=1e-9)


def _two_worker(cls_path, reg_path, cache, out):
    rank = D.world()[0]
    res = {}
    for case, (make, _, kw, _) in CASES.items():
        path = reg_path if case == "qsgp" else cls_path
        source = _source(path, f"{cache}-{rank}-{case}")  # one conversion per process
        res[case] = _state(make().fit(source, **kw))
    if D.is_main():
        torch.save(res, out)


# ------------------------------------------------------------------------------ seeds --
def _fit_svgp(seed):
    X, y = reg_data()
    return lg.SVGP(num_inducing=5).fit(X, y, batch_size=20, max_steps=4, seed=seed)


def _fit_sep(seed):
    X, y = cls_data()
    return _sep("stochastic").fit(X, y, batch_size=15, max_steps=4, seed=seed)


def _fit_qsgp(seed):
    X, y = reg_data()
    return _qsgp().fit(X, y, batch_size=15, max_steps=4, seed=seed)


@pytest.mark.parametrize("fit", [_fit_svgp, _fit_sep, _fit_qsgp], ids=["svgp", "sep", "qsgp"])
def test_seeded_fit_leaves_the_global_rng_alone(fit):
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    a = fit(7)
    assert torch.equal(torch.get_rng_state(), before)  # not reseeded, not advanced
    expected = torch.rand(3)
    torch.manual_seed(1234)
    b = fit(7)
    assert torch.equal(torch.rand(3), expected)
    _assert_same(_state(a), _state(b))  # the seed still fixes the result
    torch.manual_seed(99)
    _assert_same(_state(fit(7)), _state(a))  # whatever the caller's random state


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_seeded_fit_on_cuda_leaves_the_cuda_rng_alone():
    X, y = reg_data()
    before = torch.cuda.get_rng_state()
    before_cpu = torch.get_rng_state()
    lg.SVGP(num_inducing=5, device="cuda").fit(X, y, batch_size=20, max_steps=3, seed=2)
    assert torch.equal(torch.cuda.get_rng_state(), before)
    assert torch.equal(torch.get_rng_state(), before_cpu)


def test_moved_names_say_where_they_went():
    import latentgp.models.sep as sep_module

    with pytest.raises(AttributeError, match="moved to latentgp.training.optim.SignAdaptive"):
        sep_module.SignAdaptive  # noqa: B018
    assert lg.training.optim.SignAdaptive is lg.training.SignAdaptive


def test_seeded_initialize_leaves_the_global_rng_alone():
    X, y = reg_data()
    before = torch.get_rng_state()
    lg.SVGP(num_inducing=5).initialize(X, y, seed=3)
    Xc, yc = cls_data()
    _sep().initialize(Xc, yc, seed=3)
    assert torch.equal(torch.get_rng_state(), before)


# ---------------------------------------------------------------------------- layers --
def _imports(path: pathlib.Path) -> list[str]:
    """Absolute names of the ``latentgp`` modules that ``path`` imports."""
    package = list(path.relative_to(SRC.parent).parts[:-1])  # e.g. [latentgp, models]
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names.append(mod)
            names += [f"{mod}.{a.name}" for a in node.names]
    return [n for n in names if n.startswith(("latentgp", "torch.distributed"))]


def test_models_never_import_training():
    """Models sit below training: they reach the fit through the registered engine and
    get sums over processes as a reducer argument (never ``torch.distributed``)."""
    offenders = []
    for path in sorted((SRC / "models").rglob("*.py")):
        for name in _imports(path):
            if name.startswith(("latentgp.training", "torch.distributed")):
                offenders.append(f"{path.relative_to(SRC)} imports {name}")
    assert not offenders, offenders


def test_fit_engine_is_the_one_training_fit():
    from latentgp.models.base import fit_engine

    assert fit_engine() is lg.training.fit
    # every model family reaches a plan of the one fit
    for model in (lg.SVGP(), lg.SEP(), lg.QSGP(), lg.GFITC(), lg.ExactGP()):
        build, _ = lg.training.tasks.plan_builder(model)
        assert callable(build)


# ------------------------------------------------------------------------------- CLI --
def test_cli_sep_from_parquet_with_two_processes(tmp_path, capsys):
    """``latentgp fit --data x.parquet --model sep`` streams into the one fit, and with
    ``--nproc 2`` gives the one-process model."""
    from latentgp.cli import main

    X, y = cls_data(n=120)
    path = _parquet(tmp_path / "d.parquet", X, y)
    outs = []
    for nproc in ("1", "2"):
        out = str(tmp_path / f"sep{nproc}.pt")
        args = ["fit", "--data", str(path), "--target", "target", "--model", "sep"]
        args += ["--likelihood", "probit", "--inducing", "6", "--max-steps", "5"]
        args += ["--seed", "0", "--nproc", nproc, "--out", out]
        assert main(args) == 0
        outs.append(torch.load(out, weights_only=True)["state"])
    capsys.readouterr()
    for k in outs[0]:
        torch.testing.assert_close(outs[1][k], outs[0][k], rtol=1e-9, atol=1e-9, msg=k)
