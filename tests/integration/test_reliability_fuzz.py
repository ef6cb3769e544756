"""Issue 11, part 4: fuzzing the CLI with malformed CSV, Parquet and model files.

Marked ``fuzz`` (excluded from the default run):
``pytest -m fuzz tests/integration/test_reliability_fuzz.py``.
Each test feeds hypothesis-generated files to :func:`latentgp.cli.main` for a bounded
time (``LATENTGP_FUZZ_SECONDS``, default 60 s per test) and asserts the exit status is 0
or 2, that nothing prints a traceback, and that a usage error is exactly one
``latentgp: error:`` line (after at most a few ``latentgp: warning:`` lines).  The number
of inputs tried is printed (``-s``) so the budget can be reported.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import latentgp as lg
from latentgp.cli import main

pytestmark = pytest.mark.fuzz

BUDGET = float(os.environ.get("LATENTGP_FUZZ_SECONDS", "60"))
RUN = settings(  # one round; the test repeats rounds until the time budget is spent
    max_examples=20,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
FIT = ["--inducing", "3", "--max-steps", "2", "--no-progress"]


class _Budget:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds
        self.tried = 0
        self.by_status: dict[int, int] = {}

    def spent(self) -> bool:
        return time.monotonic() > self.end


def _run(argv: list[str], budget: _Budget) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main([str(a) for a in argv])
    text = err.getvalue()
    budget.tried += 1
    budget.by_status[rc] = budget.by_status.get(rc, 0) + 1
    assert rc in (0, 2), (rc, text)
    assert "Traceback" not in text, text
    lines = [ln for ln in text.strip().splitlines() if ln]
    errors = [ln for ln in lines if ln.startswith("latentgp: error:")]
    if rc == 2:
        assert len(errors) == 1 and lines[-1] == errors[0], text
    assert all(ln.startswith(("latentgp: error:", "latentgp: warning:")) for ln in lines), text


FIELDS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-10**6, 10**6).map(str),
    st.sampled_from(["", "nan", "NaN", "inf", "-inf", "1e309", "-0", "abc", '"1,5"', "1;2",
                     "0x10", "1_000", " 3 ", "\t", "é", "\x00", "TRUE", "None", "1e-320"]),
    st.text(max_size=6),
)  # fmt: skip


@st.composite
def csv_text(draw):
    ncol = draw(st.integers(1, 4))
    nrow = draw(st.integers(0, 12))
    header = draw(st.booleans())
    lines = []
    if header:
        lines.append(",".join(draw(st.lists(st.text(max_size=4), min_size=ncol, max_size=ncol))))
    for _ in range(nrow):
        k = ncol if draw(st.integers(0, 9)) else draw(st.integers(0, ncol + 2))
        if draw(st.integers(0, 2)):
            row = [repr(draw(st.floats(-5, 5))) for _ in range(k)]
        else:
            row = draw(st.lists(FIELDS, min_size=k, max_size=k))
        lines.append(",".join(row))
    sep = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    prefix = draw(st.sampled_from(["", "\ufeff", "# comment\n"]))
    return prefix + sep.join(lines) + draw(st.sampled_from(["", sep]))


@pytest.fixture(scope="module")
def budget_log():
    log: dict[str, _Budget] = {}
    yield log
    for name, b in log.items():
        print(f"\nfuzz {name}: {b.tried} inputs in {BUDGET:g} s, exit statuses {b.by_status}")


def test_fuzz_csv_files(tmp_path_factory, budget_log):
    d = tmp_path_factory.mktemp("fuzzcsv")
    budget = budget_log.setdefault("csv", _Budget(BUDGET))

    @RUN
    @given(
        text=csv_text(),
        lik=st.sampled_from(["gaussian", "bernoulli", "poisson", "studentt"]),
        target=st.one_of(st.none(), st.sampled_from(["0", "-1", "y", "3", "zz"])),
        frac=st.one_of(st.none(), st.sampled_from(["0", "0.5", "0.99"])),
    )
    def one(text, lik, target, frac):
        if budget.spent():
            return
        path = d / "f.csv"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        argv = ["fit", "--data", path, "--likelihood", lik, *FIT]
        if target is not None:
            argv += ["--target", target]
        if frac is not None:
            argv += ["--test-fraction", frac]
        _run(argv, budget)

    while not budget.spent():
        one()
    assert budget.tried > 0


def _good_model(d: Path) -> tuple[bytes, Path]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2))
    data = d / "good.csv"
    rows = ["a,b,y"] + [f"{a},{b},{a + b}" for a, b in X]
    data.write_text("\n".join(rows) + "\n")
    out = d / "m.pt"
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert main(["fit", "--data", str(data), "--out", str(out), *FIT]) == 0, err.getvalue()
    return out.read_bytes(), data


def test_fuzz_model_files(tmp_path_factory, budget_log):
    d = tmp_path_factory.mktemp("fuzzmodel")
    good, data = _good_model(d)
    budget = budget_log.setdefault("model", _Budget(BUDGET))

    @RUN
    @given(
        cut=st.integers(0, len(good)),
        flips=st.lists(st.tuples(st.integers(0, len(good) - 1), st.integers(0, 255)), max_size=6),
        junk=st.binary(max_size=64),
        command=st.sampled_from(["predict", "evaluate"]),
    )
    def one(cut, flips, junk, command):
        if budget.spent():
            return
        blob = bytearray(good)
        for i, b in flips:
            blob[i] = b
        blob = bytes(blob[:cut]) + junk if cut < len(good) or junk else bytes(blob)
        path = d / "fuzz.pt"
        path.write_bytes(blob)
        _run([command, "--model-file", path, "--data", data], budget)

    while not budget.spent():
        one()
    assert budget.tried > 0


def test_fuzz_parquet_files(tmp_path_factory, budget_log):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    d = tmp_path_factory.mktemp("fuzzparquet")
    budget = budget_log.setdefault("parquet", _Budget(BUDGET))
    column = st.one_of(
        st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=0, max_size=8),
        st.lists(st.integers(-(2**40), 2**40), max_size=8),
        st.lists(st.one_of(st.none(), st.floats(-3, 3)), max_size=8),
        st.lists(st.text(max_size=3), max_size=8),
        st.lists(st.booleans(), max_size=8),
    )

    @RUN
    @given(
        cols=st.lists(column, min_size=1, max_size=4),
        names=st.lists(st.text(min_size=1, max_size=3), min_size=4, max_size=4, unique=True),
        corrupt=st.one_of(st.none(), st.tuples(st.integers(0, 10_000), st.binary(max_size=16))),
    )
    def one(cols, names, corrupt):
        if budget.spent():
            return
        n = min(len(c) for c in cols)
        table = pa.table({names[j]: c[:n] for j, c in enumerate(cols)})
        path = d / f"f{budget.tried}.parquet"  # a new name: the shard cache keys on mtime
        pq.write_table(table, path)
        if corrupt is not None:
            raw = bytearray(path.read_bytes())
            at = corrupt[0] % max(len(raw), 1)
            raw[at : at + len(corrupt[1])] = corrupt[1]
            path.write_bytes(bytes(raw))
        _run(["fit", "--data", path, *FIT], budget)

    while not budget.spent():
        one()
    assert budget.tried > 0


def test_fuzz_budget_is_bounded():
    assert 0 < BUDGET <= 3600
    assert lg.__version__
