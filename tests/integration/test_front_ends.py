"""One rule for every front end: ``batch_size`` and ``num_inducing`` above the number of
training rows N mean N, with the same SizeCappedWarning, from the Python API, the CLI and
the scikit-learn estimators (issue 30), on scikit-learn's 442-row diabetes set."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import latentgp as lg
from latentgp.cli import main
from latentgp.cli.modelfile import load_model_file
from latentgp.validation import SizeCappedWarning, cap_at_rows

sklearn_datasets = pytest.importorskip("sklearn.datasets")

MESSAGES = [
    "batch_size=1024 is larger than the 442 training rows; using batch_size=442",
    "num_inducing=1000 is larger than the 442 training rows; using num_inducing=442",
]
STEPS = 3


@pytest.fixture(scope="module")
def diabetes():
    X, y = sklearn_datasets.load_diabetes(return_X_y=True)
    assert X.shape == (442, 10)
    return X, y


def _capped_messages(caught) -> list[str]:
    return sorted(str(w.message) for w in caught if issubclass(w.category, SizeCappedWarning))


def test_cap_at_rows_rule():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cap_at_rows(442, 442, name="batch_size") == 442  # no warning at N
        assert cap_at_rows(5, 442, name="batch_size") == 5
    with pytest.warns(SizeCappedWarning, match="^num_inducing=443 is larger than the 442"):
        assert cap_at_rows(443, 442, name="num_inducing") == 442
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        cap_at_rows(0, 442, name="batch_size")


def test_api_caps_with_the_note(diabetes):
    X, y = diabetes
    model = lg.SVGP(num_inducing=1000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(X, y, batch_size=1024, max_steps=STEPS, seed=0)
    assert _capped_messages(caught) == MESSAGES
    assert model.num_inducing == 442 and tuple(model.Z.shape) == (442, 10)
    assert model.history_.epochs == STEPS  # each step saw all 442 rows
    # the model file records the capped size: it loads back to the same predictions
    assert model.get_config()["num_inducing"] == 442


@pytest.mark.parametrize("cls", [lg.SparseGP, lg.SHGP, lg.SEP])
def test_every_inducing_model_caps_before_allocating(diabetes, cls):
    X, y = diabetes
    if cls is lg.SEP:
        y = (y > np.median(y)).astype(float)
    # 10^5 inducing points would need 80 GB for an M x M covariance: capped before building
    model = cls(num_inducing=100_000)
    with pytest.warns(SizeCappedWarning, match="num_inducing=100000 is larger than the 442"):
        model.fit(X, y, max_steps=1)
    assert model.num_inducing == 442


def test_given_inducing_inputs_are_not_capped(diabetes):
    X, y = diabetes
    Z = np.repeat(X[:1], 500, axis=0) + 0.01 * np.arange(500)[:, None]
    model = lg.SVGP(Z=Z)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SizeCappedWarning)
        model.initialize(X, y)
    assert tuple(model.Z.shape) == (500, 10)


def test_cli_caps_with_the_same_note(diabetes, tmp_path, capsys):
    X, y = diabetes
    data = tmp_path / "diabetes.csv"
    np.savetxt(
        data,
        np.c_[X, y],
        delimiter=",",
        header=",".join([f"x{j}" for j in range(10)] + ["y"]),
        comments="",
    )
    out = tmp_path / "m.pt"
    argv = ["fit", "--data", str(data), "--inducing", "1000", "--batch-size", "1024",
            "--max-steps", str(STEPS), "--test-fraction", "0", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert sorted(line for line in err.splitlines() if "larger than" in line) == [
        f"latentgp: warning: {m}" for m in MESSAGES
    ]
    model, record = load_model_file(out)
    assert model.num_inducing == 442
    assert record["history"]["epochs"] == STEPS


def test_estimators_cap_with_the_same_note(diabetes):
    from latentgp.sklearn import GPRegressor

    X, y = diabetes
    est = GPRegressor(method="svgp", num_inducing=1000, batch_size=1024, max_steps=STEPS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y)
    assert _capped_messages(caught) == MESSAGES
    assert est.model_.num_inducing == 442
    assert est.model_.history_.epochs == STEPS
    assert est.get_params()["num_inducing"] == 1000  # the user's parameter is left as given


def test_fit_help_cites_the_papers(capsys):
    assert main(["fit", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "seed 00" not in text
    for citation in ("Titsias, 2009", "Bonilla, Krauth & Dezfouli", "Liu et al., 2021",
                     "Hernandez-Lobato & Hernandez-Lobato", "Evans & Nair, 2020"):  # fmt: skip
        assert citation in text, citation


def test_semicolon_csv_gets_a_delimiter_hint(diabetes, tmp_path, capsys):
    from latentgp.datasets import load_csv

    X, y = diabetes
    path = tmp_path / "semi.csv"
    np.savetxt(path, np.c_[X[:20], y[:20]], delimiter=";", header="a;b;c;d;e;f;g;h;i;j;y",
               comments="")  # fmt: skip
    with pytest.raises(ValueError, match=r"looks separated by ';', not ',': save it comma-sep"):
        load_csv(path)
    with pytest.raises(ValueError, match=r"no column named 'y'.*looks separated by ';'"):
        load_csv(path, target="y")
    assert main(["fit", "--data", str(path), "--max-steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("latentgp: error: ") and "looks separated by ';'" in err
    # a comma-separated file reads as before
    ok = tmp_path / "ok.csv"
    np.savetxt(ok, np.c_[X[:5, :2], y[:5]], delimiter=",", header="a,b,y", comments="")
    assert load_csv(ok)[0].shape == (5, 2)
