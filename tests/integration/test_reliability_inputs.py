"""Issue 11, part 1: every bad input at every boundary gets a specific message.

One table, :data:`CASES`: a boundary (Python API, sklearn estimators, CLI, dataset
loaders, model files) x a bad input (NaN/inf, wrong dimensions, mismatched lengths,
non-numeric or missing CSV values, labels outside the support or unseen at prediction,
negative/non-integer counts, empty data, constant columns, M > N, batch size > N, absurd
hyperparameters, a test set with other columns).  Each row runs the bad call and states
the outcome it must have (exception type or CLI exit status) and a fragment of the exact
message.  CLI rows must also print exactly one line on stderr and no traceback.

``benchmarks/reliability_report.py`` imports this table to print the message each input
really gets into ``docs/results/reliability.md``.
"""

from __future__ import annotations

import contextlib
import io
import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.cli import main


@dataclass
class Outcome:
    kind: str  # exception class name, "exit N" for the CLI, or "ok"
    message: str


@dataclass
class Case:
    boundary: str
    what: str
    run: Callable[[Path], Outcome]
    kind: str
    fragment: str


def _data(n: int = 30, d: int = 2, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)


def api(fn: Callable[[], object]) -> Outcome:
    """Run a library call; the outcome is the exception it raises (or ``ok`` + warnings)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn()
        except Exception as err:  # noqa: BLE001 - the outcome under test
            return Outcome(type(err).__name__, " ".join(str(err).split()))
    return Outcome("ok", " | ".join(str(w.message) for w in caught))


def cli(*argv: str) -> Outcome:
    """Run ``latentgp.cli.main`` in-process; the outcome is its exit status and stderr."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        rc = main([str(a) for a in argv])
    return Outcome(f"exit {rc}", err.getvalue().strip())


def _csv(d: Path, name: str, text: str) -> Path:
    path = d / name
    path.write_text(text)
    return path


def _table(d: Path, name: str, cols: list[str], rows) -> Path:
    lines = [",".join(cols)] + [",".join(str(v) for v in r) for r in rows]
    return _csv(d, name, "\n".join(lines) + "\n")


def good_csv(d: Path, name: str = "good.csv", n: int = 40) -> Path:
    X, y = _data(n)
    return _table(d, name, ["a", "b", "y"], np.c_[X, y])


def counts_csv(d: Path, bad) -> Path:
    X, _ = _data(40)
    y = np.full(40, 2.0)
    y[3] = bad
    return _table(
        d,
        "counts.csv",
        ["a", "y"],
        [(f"{a:.6f}", f"{c:g}") for a, c in zip(X[:, 0], y, strict=True)],
    )


def labels_csv(d: Path, name: str = "labels.csv", bad: float | None = None) -> Path:
    X, _ = _data(40)
    y = (X[:, 0] > 0).astype(float)
    if bad is not None:
        y[3] = bad
    return _table(
        d, name, ["a", "y"], [(f"{a:.6f}", f"{c:g}") for a, c in zip(X[:, 0], y, strict=True)]
    )


FAST = ("--inducing", "5", "--max-steps", "2", "--no-progress")


def model_file(d: Path, likelihood: str = "gaussian") -> Path:
    data = good_csv(d) if likelihood == "gaussian" else labels_csv(d)
    out = d / "model.pt"
    assert (
        cli("fit", "--data", data, "--likelihood", likelihood, "--out", out, *FAST).kind == "exit 0"
    )
    return out


def fitted(make=None, likelihood="gaussian", y=None):
    X, y0 = _data()
    m = (make or (lambda: lg.SVGP(num_inducing=5, likelihood=likelihood)))()
    return m.fit(X, y0 if y is None else y, max_steps=2)


def _with(arr, index, value):
    arr = np.array(arr, dtype=object if isinstance(value, str) else float)
    arr[index] = value
    return arr


def _model_payload(d: Path):
    X, y = _data()
    lg.SVGP(num_inducing=5).fit(X, y, max_steps=2).save(d / "m.pt")
    return torch.load(d / "m.pt", weights_only=True)


def _edited_model(d: Path, edit) -> Path:
    payload = _model_payload(d)
    header = json.loads(payload["header"])
    state = dict(payload["state"])
    edit(header, state)
    torch.save({"header": json.dumps(header), "state": state}, d / "edited.pt")
    return d / "edited.pt"


def _crafted_cli_model(d: Path, edit) -> Path:
    """The CLI's model file with its header changed by ``edit`` and consistent checksums
    (what someone crafting a file would write)."""
    from latentgp.io import digest

    payload = torch.load(model_file(d), weights_only=True)
    header = json.loads(payload["header"])
    edit(header)
    payload["header"] = json.dumps(header)
    payload["checksums"]["header"] = digest(payload["header"])
    torch.save(payload, d / "crafted.pt")
    return d / "crafted.pt"


X0, Y0 = _data()
SVGP5 = lambda: lg.SVGP(num_inducing=5)  # noqa: E731
K = lg.kernels
L = lg.likelihoods

CASES: list[Case] = [
    # ---------------------------------------------------------------- Python API
    Case(
        "api fit",
        "NaN in X",
        lambda d: api(lambda: SVGP5().fit(_with(X0, (3, 1), np.nan), Y0)),
        "ValueError",
        "X contains NaN or inf at row 3, column 1",
    ),
    Case(
        "api fit",
        "inf in y (ExactGP)",
        lambda d: api(lambda: lg.ExactGP().fit(X0, _with(Y0, 7, np.inf))),
        "ValueError",
        "y contains NaN or inf at row 7",
    ),
    Case(
        "api predict",
        "NaN in test X",
        lambda d: api(lambda: fitted().predict_y(np.full((2, 2), np.nan))),
        "ValueError",
        "X contains NaN or inf at row 0, column 0",
    ),
    Case(
        "api fit",
        "X with 3 dimensions",
        lambda d: api(lambda: SVGP5().fit(X0.reshape(2, 15, 2), Y0)),
        "ValueError",
        "X must be a 2-D array of shape (N, D); got shape (2, 15, 2)",
    ),
    Case(
        "api fit",
        "y with 3 dimensions",
        lambda d: api(lambda: SVGP5().fit(X0, np.zeros((30, 2, 2)))),
        "ValueError",
        "y must be 1-D (N,) or 2-D (N, P); got shape (30, 2, 2)",
    ),
    Case(
        "api fit",
        "len(y) != len(X)",
        lambda d: api(lambda: SVGP5().fit(X0, Y0[:-1])),
        "ValueError",
        "y has 29 entries but X has 30 rows: they must match",
    ),
    Case(
        "api fit",
        "non-numeric X",
        lambda d: api(lambda: SVGP5().fit(_with(X0, (2, 0), "abc"), Y0)),
        "ValueError",
        "X must be numeric, but it holds values of type object",
    ),
    Case(
        "api fit",
        "complex X",
        lambda d: api(lambda: SVGP5().fit(X0 + 1j, Y0)),
        "ValueError",
        "X must be numeric, got dtype complex128",
    ),
    Case(
        "api fit",
        "empty data",
        lambda d: api(lambda: SVGP5().fit(X0[:0], Y0[:0])),
        "ValueError",
        "X is empty (0 rows): at least one data point is needed",
    ),
    Case(
        "api predict",
        "empty test X",
        lambda d: api(lambda: fitted().predict_y(np.zeros((0, 2)))),
        "ValueError",
        "X is empty (0 rows)",
    ),
    Case(
        "api predict",
        "test X with 3 columns (trained on 2)",
        lambda d: api(lambda: fitted().predict_y(np.zeros((4, 3)))),
        "ValueError",
        "X has 3 columns but the model was trained with 2 input dimensions",
    ),
    Case(
        "api predict",
        "test y with 2 columns (trained on 1)",
        lambda d: api(lambda: fitted().log_predictive_density(X0, np.zeros((30, 2)))),
        "ValueError",
        "y has 2 output column(s) but the model was trained with 1",
    ),
    Case(
        "api fit",
        "Bernoulli label 2",
        lambda d: api(
            lambda: lg.SVGP(num_inducing=5, likelihood="bernoulli").fit(
                X0, _with(np.zeros(30), 4, 2)
            )
        ),
        "ValueError",
        "y must hold binary labels 0 or 1 for a Bernoulli likelihood; found 2 at row 4",
    ),
    Case(
        "api fit",
        "softmax label 5 with 3 classes",
        lambda d: api(
            lambda: lg.SVGP(num_inducing=5, likelihood=L.Softmax(3)).fit(
                X0, _with(np.arange(30) % 3, 6, 5)
            )
        ),
        "ValueError",
        "integer class labels 0..2 for a 3-class softmax likelihood; found 5 at row 6",
    ),
    Case(
        "api predict",
        "class label unseen in training (softmax, label 3)",
        lambda d: api(
            lambda: fitted(
                lambda: lg.SVGP(num_inducing=5, likelihood=L.Softmax(3)), y=np.arange(30) % 3
            ).log_predictive_density(X0[:4], [0, 1, 3, 2])
        ),
        "ValueError",
        "class labels 0..2 for a 3-class softmax likelihood; found 3 at row 2",
    ),
    Case(
        "api fit",
        "Poisson count -1",
        lambda d: api(
            lambda: lg.SVGP(num_inducing=5, likelihood="poisson").fit(X0, _with(np.ones(30), 9, -1))
        ),
        "ValueError",
        "y must hold non-negative integer counts for a Poisson likelihood; found -1 at row 9",
    ),
    Case(
        "api fit",
        "Poisson count 2.5",
        lambda d: api(
            lambda: lg.SVGP(num_inducing=5, likelihood="poisson").fit(
                X0, _with(np.ones(30), 9, 2.5)
            )
        ),
        "ValueError",
        "non-negative integer counts for a Poisson likelihood; found 2.5 at row 9",
    ),
    Case(
        "api predict",
        "Poisson count -1 at prediction",
        lambda d: api(
            lambda: fitted(likelihood="poisson", y=np.ones(30)).log_predictive_density(
                X0[:3], [1, -1, 0]
            )
        ),
        "ValueError",
        "non-negative integer counts for a Poisson likelihood; found -1 at row 1",
    ),
    Case(
        "api fit",
        "M > N (SVGP)",
        lambda d: api(lambda: lg.SVGP(num_inducing=50).fit(X0, Y0, max_steps=2)),
        "ok",
        "num_inducing=50 is larger than the 30 training rows; using num_inducing=30",
    ),
    Case(
        "api fit",
        "M > N (VFE)",
        lambda d: api(lambda: lg.SparseGP(num_inducing=50).fit(X0, Y0, max_steps=2)),
        "ok",
        "num_inducing=50 is larger than the 30 training rows; using num_inducing=30",
    ),
    Case(
        "api fit",
        "batch_size > N",
        lambda d: api(lambda: SVGP5().fit(X0, Y0, batch_size=64, max_steps=2)),
        "ok",
        "batch_size=64 is larger than the 30 training rows; using batch_size=30",
    ),
    Case(
        "api fit",
        "batch_size 0",
        lambda d: api(lambda: SVGP5().fit(X0, Y0, batch_size=0)),
        "ValueError",
        "batch_size must be >= 1, got 0",
    ),
    Case(
        "api fit",
        "epochs 0",
        lambda d: api(lambda: SVGP5().fit(X0, Y0, epochs=0)),
        "ValueError",
        "epochs must be >= 1, got 0",
    ),
    Case(
        "api fit",
        "learning rate NaN",
        lambda d: api(lambda: SVGP5().fit(X0, Y0, lr=float("nan"))),
        "ValueError",
        "lr must be a positive number, got nan",
    ),
    Case(
        "api fit",
        "L-BFGS with minibatches",
        lambda d: api(lambda: SVGP5().fit(X0, Y0, optimizer="lbfgs", batch_size=10)),
        "ValueError",
        "L-BFGS needs the full batch",
    ),
    Case(
        "api constructor",
        "num_inducing 0",
        lambda d: api(lambda: lg.SVGP(num_inducing=0)),
        "ValueError",
        "num_inducing must be >= 1, got 0",
    ),
    Case(
        "api constructor",
        "zero noise variance",
        lambda d: api(lambda: lg.ExactGP(likelihood=L.Gaussian(variance=0.0))),
        "ValueError",
        "Gaussian noise variance must be a positive finite number, got 0.0",
    ),
    Case(
        "api constructor",
        "negative noise variance",
        lambda d: api(lambda: L.Gaussian(variance=-1.0)),
        "ValueError",
        "Gaussian noise variance must be a positive finite number, got -1.0",
    ),
    Case(
        "api constructor",
        "negative Laplace scale",
        lambda d: api(lambda: L.Laplace(scale=-0.5)),
        "ValueError",
        "Laplace scale must be a positive finite number, got -0.5",
    ),
    Case(
        "api constructor",
        "Student-t df 0",
        lambda d: api(lambda: L.StudentT(df=0)),
        "ValueError",
        "StudentT df must be positive, got 0",
    ),
    Case(
        "api fit",
        "negative lengthscale",
        lambda d: api(
            lambda: lg.SVGP(num_inducing=5, kernel=K.RBF(lengthscale=-1.0)).fit(X0, Y0, max_steps=1)
        ),
        "ValueError",
        "RBF lengthscale must be positive and finite, got -1.0",
    ),
    Case(
        "api fit",
        "inputs of magnitude 1e300 (squares overflow)",
        lambda d: api(lambda: SVGP5().fit(X0 * 1e300, Y0)),
        "ValueError",
        "too large to compute with in float64 (squares overflow beyond 1.34e+150)",
    ),
    Case(
        "api fit",
        "inputs of magnitude 1e20 in float32",
        lambda d: api(lambda: lg.SVGP(num_inducing=5, dtype=torch.float32).fit(X0 * 1e20, Y0)),
        "ValueError",
        "too large to compute with in float32",
    ),
    Case(
        "api fit",
        "targets of magnitude 1e300",
        lambda d: api(lambda: lg.ExactGP().fit(X0, Y0 * 1e300)),
        "ValueError",
        "y has a value of magnitude",
    ),
    Case(
        "api fit",
        "Z with 3 columns for 2-D X",
        lambda d: api(lambda: lg.SVGP(Z=np.zeros((4, 3))).fit(X0, Y0)),
        "ValueError",
        "Z has 3 columns but X has 2",
    ),
    Case(
        "api fit",
        "constant input column (handled, see test_constant_column_*)",
        lambda d: api(lambda: lg.ExactGP().fit(np.c_[X0, np.full(30, 7.0)], Y0, max_steps=2)),
        "ok",
        "",
    ),
    # ---------------------------------------------------------------- sklearn
    Case(
        "sklearn",
        "NaN in X (GPRegressor.fit)",
        lambda d: api(lambda: _sk().GPRegressor(max_steps=2).fit(_with(X0, (2, 1), np.nan), Y0)),
        "ValueError",
        "Input X contains NaN",
    ),
    Case(
        "sklearn",
        "len(y) != len(X)",
        lambda d: api(lambda: _sk().GPRegressor(max_steps=2).fit(X0, Y0[:-1])),
        "ValueError",
        "inconsistent numbers of samples: [30, 29]",
    ),
    Case(
        "sklearn",
        "empty data",
        lambda d: api(lambda: _sk().GPRegressor(max_steps=2).fit(X0[:0], Y0[:0])),
        "ValueError",
        "Found array with 0 sample(s)",
    ),
    Case(
        "sklearn",
        "predict with 3 columns (fitted on 2)",
        lambda d: api(lambda: _sk().GPRegressor(max_steps=2).fit(X0, Y0).predict(np.zeros((3, 3)))),
        "ValueError",
        "X has 3 features, but GPRegressor is expecting 2 features as input",
    ),
    Case(
        "sklearn",
        "GPClassifier with one class",
        lambda d: api(lambda: _sk().GPClassifier(max_steps=2).fit(X0, np.zeros(30))),
        "ValueError",
        "GPClassifier needs samples of at least 2 classes",
    ),
    Case(
        "sklearn",
        "GPClassifier with continuous targets",
        lambda d: api(lambda: _sk().GPClassifier(max_steps=2).fit(X0, Y0)),
        "ValueError",
        "Unknown label type: continuous",
    ),
    Case(
        "sklearn",
        "GPCountRegressor with count -1",
        lambda d: api(
            lambda: _sk().GPCountRegressor(max_steps=2).fit(X0, _with(np.ones(30), 29, -1))
        ),
        "ValueError",
        "non-negative integer counts for a Poisson likelihood; found -1 at row 29",
    ),
    Case(
        "sklearn",
        "GPCountRegressor exposure 0",
        lambda d: api(lambda: _sk().GPCountRegressor(max_steps=2, exposure=0).fit(X0, np.ones(30))),
        "ValueError",
        "exposure must be a positive finite number, got 0",
    ),
    Case(
        "sklearn",
        "num_inducing 0",
        lambda d: api(
            lambda: _sk().GPRegressor(method="svgp", num_inducing=0, max_steps=2).fit(X0, Y0)
        ),
        "ValueError",
        "num_inducing must be >= 1, got 0",
    ),
    Case(
        "sklearn",
        "dtype float16",
        lambda d: api(lambda: _sk().GPRegressor(dtype="float16").fit(X0, Y0)),
        "ValueError",
        "dtype must be 'float64' or 'float32', got 'float16'",
    ),
    Case(
        "sklearn",
        "negative learning rate",
        lambda d: api(lambda: _sk().GPRegressor(method="svgp", lr=-1, max_steps=2).fit(X0, Y0)),
        "ValueError",
        "lr must be a positive number, got -1",
    ),
    Case(
        "sklearn",
        "unknown method",
        lambda d: api(lambda: _sk().GPRegressor(method="nope").fit(X0, Y0)),
        "ValueError",
        "method must be 'auto', 'exact', 'vfe' or 'svgp', got 'nope'",
    ),
    # ---------------------------------------------------------------- CLI
    Case(
        "cli fit",
        "NaN in a CSV cell",
        lambda d: cli("fit", "--data", _csv(d, "nan.csv", "a,b,y\n1,2,3\nnan,1,2\n3,4,5\n"), *FAST),
        "exit 2",
        "nan.csv: non-finite value 'nan' in column 'a' (index 0), data row 1 (line 3)",
    ),
    Case(
        "cli fit",
        "inf in a CSV cell",
        lambda d: cli("fit", "--data", _csv(d, "inf.csv", "a,b,y\n1,2,3\n1,2,inf\n3,4,5\n"), *FAST),
        "exit 2",
        "inf.csv: non-finite value 'inf' in column 'y' (index 2), data row 1 (line 3)",
    ),
    Case(
        "cli fit",
        "non-numeric CSV cell",
        lambda d: cli(
            "fit", "--data", _csv(d, "text.csv", "a,b,y\n1,2,3\nfoo,1,2\n3,4,5\n"), *FAST
        ),
        "exit 2",
        "text.csv: non-numeric value 'foo' in column 'a' (index 0), data row 1 (line 3)",
    ),
    Case(
        "cli fit",
        "missing CSV cell",
        lambda d: cli("fit", "--data", _csv(d, "gap.csv", "a,b,y\n1,2,3\n,1,2\n3,4,5\n"), *FAST),
        "exit 2",
        "gap.csv: missing (empty) value in column 'a' (index 0), data row 1 (line 3)",
    ),
    Case(
        "cli fit",
        "ragged CSV rows",
        lambda d: cli("fit", "--data", _csv(d, "ragged.csv", "a,b,y\n1,2,3\n1,2\n3,4,5\n"), *FAST),
        "exit 2",
        "ragged.csv: line 3 has 2 fields but the first row has 3 (ragged rows)",
    ),
    Case(
        "cli fit",
        "empty CSV file",
        lambda d: cli("fit", "--data", _csv(d, "empty.csv", ""), *FAST),
        "exit 2",
        "empty.csv: the file is empty (no rows)",
    ),
    Case(
        "cli fit",
        "CSV header without rows",
        lambda d: cli("fit", "--data", _csv(d, "hdr.csv", "a,b,y\n"), *FAST),
        "exit 2",
        "hdr.csv: the file has a header (['a', 'b', 'y']) but no data rows",
    ),
    Case(
        "cli fit",
        "CSV with only the target column",
        lambda d: cli("fit", "--data", _csv(d, "one.csv", "y\n1\n2\n3\n"), *FAST),
        "exit 2",
        "one.csv: only one column ('y'); no input columns left",
    ),
    Case(
        "cli fit",
        "missing target column",
        lambda d: cli("fit", "--data", good_csv(d), "--target", "zz", *FAST),
        "exit 2",
        "good.csv: no column named 'zz'; the columns are ['a', 'b', 'y']",
    ),
    Case(
        "cli fit",
        "missing data file",
        lambda d: cli("fit", "--data", d / "nope.csv", *FAST),
        "exit 2",
        "CSV file not found",
    ),
    Case(
        "cli fit",
        "Poisson count -1",
        lambda d: cli("fit", "--data", counts_csv(d, -1), "--likelihood", "poisson", *FAST),
        "exit 2",
        "y must hold non-negative integer counts for a Poisson likelihood; found -1",
    ),
    Case(
        "cli fit",
        "Poisson count 2.5",
        lambda d: cli("fit", "--data", counts_csv(d, 2.5), "--likelihood", "poisson", *FAST),
        "exit 2",
        "non-negative integer counts for a Poisson likelihood; found 2.5",
    ),
    Case(
        "cli fit",
        "Bernoulli label 3",
        lambda d: cli("fit", "--data", labels_csv(d, bad=3), "--likelihood", "bernoulli", *FAST),
        "exit 2",
        "y must hold binary labels 0 or 1 for a Bernoulli likelihood; found 3",
    ),
    Case(
        "cli fit",
        "M > N",
        lambda d: cli("fit", "--data", good_csv(d), "--inducing", "100", *FAST[2:]),
        "exit 0",
        "latentgp: warning: num_inducing=100 is larger than the 32 training rows; using",
    ),
    Case(
        "cli fit",
        "batch size 0",
        lambda d: cli("fit", "--data", good_csv(d), "--batch-size", "0", *FAST),
        "exit 2",
        "argument --batch-size: expected a positive integer, got '0'",
    ),
    Case(
        "cli fit",
        "batch size > N (capped at N, as documented)",
        lambda d: cli("fit", "--data", good_csv(d), "--batch-size", "1000", *FAST),
        "exit 0",
        "",
    ),
    Case(
        "cli fit",
        "learning rate NaN",
        lambda d: cli("fit", "--data", good_csv(d), "--lr", "nan", *FAST),
        "exit 2",
        "argument --lr: expected a positive number, got 'nan'",
    ),
    Case(
        "cli fit",
        "epochs -3",
        lambda d: cli("fit", "--data", good_csv(d), "--epochs", "-3"),
        "exit 2",
        "argument --epochs",
    ),
    Case(
        "cli fit",
        "constant input column (warning, then trains)",
        lambda d: cli(
            "fit",
            "--data",
            _table(
                d,
                "const.csv",
                ["a", "b", "y"],
                np.c_[_data(40)[0][:, 0], np.full(40, 7.0), _data(40)[1]],
            ),
            *FAST,
        ),
        "exit 0",
        "latentgp: warning: input column 'b' is constant (7) in the training data",
    ),
    Case(
        "cli fit",
        "--test-data with 3 unnamed columns (trained on 2)",
        lambda d: cli(
            "fit",
            "--data",
            good_csv(d),
            "--test-data",
            _csv(d, "t3.csv", "1,2,3,4\n2,3,4,5\n"),
            *FAST,
        ),
        "exit 2",
        "t3.csv has 3 input column(s) but the model expects 2 (a, b)",
    ),
    Case(
        "cli predict",
        "3 unnamed columns for a 2-input model",
        lambda d: cli(
            "predict", "--model-file", model_file(d), "--data", _csv(d, "p3.csv", "1,2,3\n2,3,4\n")
        ),
        "exit 2",
        "p3.csv has 3 input column(s) but the model expects 2 (a, b)",
    ),
    Case(
        "cli predict",
        "NaN in the prediction inputs",
        lambda d: cli(
            "predict",
            "--model-file",
            model_file(d),
            "--data",
            _csv(d, "pn.csv", "a,b\n1,2\nnan,3\n"),
        ),
        "exit 2",
        "pn.csv: non-finite value 'nan' in column 'a' (index 0), data row 1 (line 3)",
    ),
    Case(
        "cli evaluate",
        "label 2 unseen by a binary model",
        lambda d: cli(
            "evaluate",
            "--model-file",
            model_file(d, "bernoulli"),
            "--data",
            labels_csv(d, "test_labels.csv", bad=2),
        ),
        "exit 2",
        "y must hold binary labels 0 or 1 for a Bernoulli likelihood; found 2 at row 3",
    ),
    Case(
        "cli predict",
        "a text file as model file",
        lambda d: cli("predict", "--model-file", _csv(d, "m.pt", "hello"), "--data", good_csv(d)),
        "exit 2",
        "m.pt is not a readable latentgp model file (corrupted, truncated, or not a model file)",
    ),
    Case(
        "cli predict",
        "crafted model file claiming num_inducing = 500000",
        lambda d: cli(
            "predict",
            "--model-file",
            _crafted_cli_model(d, lambda h: h["config"].update(num_inducing=500_000)),
            "--data",
            good_csv(d),
        ),
        "exit 2",
        "crafted.pt: record 'state/Z_raw' has shape (5, 2) but the header describes (500000, 2)",
    ),
    Case(
        "cli predict",
        "missing model file",
        lambda d: cli("predict", "--model-file", d / "none.pt", "--data", good_csv(d)),
        "exit 2",
        "none.pt",
    ),
    Case(
        "cli fit",
        "corrupt Parquet file",
        lambda d: cli("fit", "--data", _csv(d, "bad.parquet", "PAR1garbagePAR1"), *FAST),
        "exit 2",
        "bad.parquet is not a readable Parquet file",
    ),
    Case(
        "cli fit",
        "unknown dataset name",
        lambda d: cli("fit", "--data", "bostn", *FAST),
        "exit 2",
        "unknown dataset 'bostn': did you mean 'boston'",
    ),
    # ---------------------------------------------------------------- dataset loaders
    Case(
        "loader",
        "unknown dataset name",
        lambda d: api(lambda: _ds().load("bostn")),
        "ValueError",
        "unknown dataset 'bostn': did you mean 'boston'",
    ),
    Case(
        "loader",
        "split out of range",
        lambda d: api(lambda: _ds().load("housing", split=99)),
        "ValueError",
        "split=99 is invalid for dataset 'uci/housing': valid splits are 0..9",
    ),
    Case(
        "loader",
        "data home without the file",
        lambda d: api(lambda: _ds().load("housing", data_home=d)),
        "FileNotFoundError",
        "dataset 'uci/housing' needs the file",
    ),
    Case(
        "loader",
        "load_csv: non-numeric cell",
        lambda d: api(lambda: _ds().load_csv(_csv(d, "t.csv", "a,y\n1,2\nx,3\n"))),
        "ValueError",
        "t.csv: non-numeric value 'x' in column 'a' (index 0), data row 1 (line 3)",
    ),
    Case(
        "loader",
        "Parquet with NaN",
        lambda d: api(
            lambda: _ds().ShardedArrays(_parquet(d, "n.parquet", [1.0, np.nan, 3.0])).stats()
        ),
        "ValueError",
        "X contains NaN or inf at row 1, column 0",
    ),
    Case(
        "loader",
        "Parquet with a text column",
        lambda d: api(lambda: _ds().ShardedArrays(_parquet(d, "s.parquet", ["x", "y", "z"]))),
        "ValueError",
        "s.parquet: a column is not numeric",
    ),
    Case(
        "loader",
        "corrupt Parquet file",
        lambda d: api(lambda: _ds().ShardedArrays(_csv(d, "c.parquet", "PAR1garbagePAR1"))),
        "ValueError",
        "c.parquet is not a readable Parquet file",
    ),
    # ---------------------------------------------------------------- model files
    Case(
        "model file",
        "missing file",
        lambda d: api(lambda: lg.load(d / "none.pt")),
        "FileNotFoundError",
        "no model file at",
    ),
    Case(
        "model file",
        "text file",
        lambda d: api(lambda: lg.load(_csv(d, "t.pt", "hello"))),
        "ValueError",
        "t.pt is not a readable latentgp model file",
    ),
    Case(
        "model file",
        "truncated file",
        lambda d: api(lambda: lg.load(_truncated(d))),
        "ValueError",
        "is not a readable latentgp model file (corrupted, truncated, or not a model file)",
    ),
    Case(
        "model file",
        "torch file without header",
        lambda d: api(lambda: lg.load(_torch_file(d, {"a": 1}))),
        "ValueError",
        "is not a latentgp model file (no header)",
    ),
    Case(
        "model file",
        "header not JSON",
        lambda d: api(lambda: lg.load(_torch_file(d, {"header": "{oops", "state": {}}))),
        "ValueError",
        "has a corrupted header (not valid JSON)",
    ),
    Case(
        "model file",
        "future format version",
        lambda d: api(lambda: lg.load(_edited_model(d, lambda h, s: h.update(format_version=99)))),
        "ValueError",
        "uses model-file format version 99, but this latentgp reads versions 1, 2",
    ),
    Case(
        "model file",
        "unknown model class",
        lambda d: api(lambda: lg.load(_edited_model(d, lambda h, s: h.update(model="Nope")))),
        "ValueError",
        "holds an unknown model class 'Nope'",
    ),
    Case(
        "model file",
        "tensor of the wrong shape",
        lambda d: api(
            lambda: lg.load(_edited_model(d, lambda h, s: s.update(Z_raw=torch.zeros(3, 7))))
        ),
        "ValueError",
        "edited.pt: record 'state/Z_raw' has shape (3, 7) but the header describes (5, 2)",
    ),
    Case(
        "model file",
        "header a JSON list",
        lambda d: api(lambda: lg.load(_torch_file(d, {"header": "[1, 2]", "state": {}}))),
        "ValueError",
        "x.pt has a corrupted header: it is a list, not a JSON object",
    ),
    Case(
        "model file",
        "integers in place of a float parameter",
        lambda d: api(
            lambda: lg.load(
                _edited_model(d, lambda h, s: s.update({"q.q_mu": s["q.q_mu"].long()}))
            )
        ),
        "ValueError",
        "edited.pt: record 'state/q.q_mu' holds torch.int64 values where the SVGP has "
        "torch.float64",
    ),
    Case(
        "model file",
        "garbage checkpoint",
        lambda d: api(lambda: lg.training.load_checkpoint(_csv(d, "ck.pt", "hello"))),
        "ValueError",
        "is corrupt or truncated and cannot be resumed from",
    ),
]


def _sk():
    import latentgp.sklearn as sk

    return sk


def _ds():
    from latentgp import datasets

    return datasets


def _parquet(d: Path, name: str, column) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a": column, "y": [1.0, 2.0, 3.0]}), d / name)
    return d / name


def _truncated(d: Path) -> Path:
    _model_payload(d)
    data = (d / "m.pt").read_bytes()
    (d / "m.pt").write_bytes(data[: len(data) // 3])
    return d / "m.pt"


def _torch_file(d: Path, obj) -> Path:
    torch.save(obj, d / "x.pt")
    return d / "x.pt"


def case_id(c: Case) -> str:
    return f"{c.boundary}: {c.what}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_bad_input_gets_specific_message(case: Case, tmp_path):
    if "parquet" in case.what.lower() and case.boundary == "loader":
        pytest.importorskip("pyarrow")
    got = case.run(tmp_path)
    assert got.kind == case.kind, got
    assert case.fragment in got.message, got
    if case.kind == "exit 2":
        lines = got.message.splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith("latentgp: error: ")
        assert "Traceback" not in got.message
    if case.kind == "exit 0":
        assert "Traceback" not in got.message and "error" not in got.message


def test_table_covers_every_boundary_and_issue_item():
    boundaries = {c.boundary.split()[0] for c in CASES}
    assert boundaries == {"api", "sklearn", "cli", "loader", "model"}
    text = " ".join(c.what.lower() for c in CASES)
    for item in [
        "nan",
        "inf",
        "dimensions",
        "len(y)",
        "non-numeric",
        "missing",
        "label",
        "unseen",
        "count -1",
        "2.5",
        "empty",
        "constant",
        "m > n",
        "batch_size > n",
        "lengthscale",
        "noise",
        "3 columns",
    ]:
        assert item in text, item


# ------------------------------------------------------------ constant columns, handled
def test_constant_column_changes_nothing_for_exact_gp():
    """A constant column adds zero to every distance, so an ARD model trained with it
    predicts what it predicts without it (its lengthscale gets no gradient)."""
    X, y = _data()
    Xt = np.random.default_rng(1).normal(size=(7, 2))
    # the same initial lengthscale (the default, sqrt(D) * std, depends on D)
    a = lg.ExactGP(kernel=K.RBF(lengthscale=1.0)).fit(X, y, max_steps=15)
    b = lg.ExactGP(kernel=K.RBF(lengthscale=1.0)).fit(np.c_[X, np.full(30, 7.0)], y, max_steps=15)
    ma, va = a.predict_y(Xt)
    mb, vb = b.predict_y(np.c_[Xt, np.full(7, 7.0)])
    np.testing.assert_allclose(mb, ma, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(vb, va, rtol=1e-9, atol=1e-12)


def test_constant_columns_helper():
    from latentgp.validation import constant_columns

    X = np.c_[np.arange(5.0), np.full(5, 2.0), np.ones(5) * -1, np.r_[0, 0, 0, 0, 1.0]]
    assert constant_columns(X) == [1, 2]
    assert constant_columns(X[:1]) == []


def test_setting_inducing_inputs_and_hyperparameters_checks_the_values():
    """``model.Z = ...`` and ``kernel.lengthscale/variance = ...`` (the ways to set them
    since they are stored in column units) refuse bad values with a message naming them."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    m = lg.SVGP(num_inducing=5).fit(X, X[:, 0], max_steps=1, progress=False)
    bad_Z = [
        (np.full((5, 2), np.nan), "Z contains NaN or inf at row 0, column 0"),
        (np.zeros((4, 2)), r"Z has shape \(4, 2\) but the model's inducing inputs have"),
        (np.zeros((5, 3)), "Z has 3 columns but the model's inducing inputs have 2"),
        ("abc", "Z must be an array of numbers, got str"),
    ]
    for value, message in bad_Z:
        with pytest.raises(ValueError, match=message):
            m.Z = value
    k = m.kernel
    with pytest.raises(ValueError, match="RBF lengthscale must be positive and finite"):
        k.lengthscale = -1.0
    with pytest.raises(ValueError, match=r"RBF lengthscale has shape \(3,\), which does not"):
        k.lengthscale = [1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="RBF variance must be positive and finite"):
        k.variance = float("nan")
    k.lengthscale, k.variance, m.Z = [0.5, 2.0], 3.0, np.ones((5, 2))
    torch.testing.assert_close(
        k.lengthscale.detach(), torch.tensor([[0.5, 2.0]], dtype=torch.float64)
    )
    assert float(k.variance.detach()) == pytest.approx(3.0)
    assert torch.equal(m.Z.detach(), torch.ones(5, 2, dtype=torch.float64))
