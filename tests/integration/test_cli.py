"""The ``latentgp`` command line, run in-process through ``main(argv)``."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

import latentgp as lg
from latentgp import cli
from latentgp.cli import main
from latentgp.cli import predict as cli_predict

FIT_FAST = ["--inducing", "20", "--batch-size", "64", "--lr", "0.05", "--no-progress"]


def _write_csv(path, columns, names=None):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        if names is not None:
            w.writerow(names)
        for row in zip(*columns, strict=True):
            w.writerow([repr(float(v)) for v in row])
    return str(path)


def _sine(rng, n):
    x = rng.uniform(-3, 3, n)
    return x, np.sin(x) + 0.1 * rng.standard_normal(n)


def _read_rows(path):
    with open(path, newline="") as fh:
        return list(csv.reader(fh))


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("latentgp: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """One SVGP fitted through the CLI on a 200-row sine CSV, with a separate test CSV."""
    d = tmp_path_factory.mktemp("cli")
    rng = np.random.default_rng(0)
    train = _write_csv(d / "train.csv", _sine(rng, 200), ["x", "y"])
    test = _write_csv(d / "test.csv", _sine(rng, 60), ["x", "y"])
    model, metrics = str(d / "model.pt"), str(d / "metrics.json")
    argv = ["fit", "--data", train, "--test-data", test, "--model", "svgp", "--epochs", "60",
            "--out", model, "--metrics", metrics, *FIT_FAST]
    assert main(argv) == 0
    with open(metrics) as fh:
        return {"dir": d, "train": train, "test": test, "model": model,
                "metrics": json.load(fh)}


# ------------------------------------------------------------------------------ fit
def test_fit_metrics_json(fitted):
    m = fitted["metrics"]
    for key in ("rmse", "mae", "nlpd", "train_seconds", "n_train", "n_test", "model",
                "dataset", "likelihood", "num_inducing"):
        assert key in m, key
    assert "error_rate" not in m  # classification metrics only for classification
    assert (m["model"], m["likelihood"], m["num_inducing"]) == ("svgp", "gaussian", 20)
    assert (m["n_train"], m["n_test"]) == (200, 60)
    y_test = np.array([float(r[1]) for r in _read_rows(fitted["test"])[1:]])
    # beats predicting the mean (rmse ~0.7) by far; noise sd is 0.1
    assert m["rmse"] < 0.3
    assert m["rmse"] < 0.5 * y_test.std()
    assert m["mae"] <= m["rmse"]
    assert m["train_seconds"] > 0


def test_fit_random_split_json_stdout(tmp_path, capsys):
    rng = np.random.default_rng(1)
    data = _write_csv(tmp_path / "d.csv", _sine(rng, 100), ["x", "y"])
    rc = main(["fit", "--data", data, "--test-fraction", "0.3", "--epochs", "5", "--json",
               *FIT_FAST])
    out = capsys.readouterr().out
    assert rc == 0
    m = json.loads(out)  # only JSON on stdout
    assert (m["n_train"], m["n_test"]) == (70, 30)
    assert {"rmse", "mae", "nlpd"} <= set(m)
    assert os.listdir(tmp_path) == ["d.csv"]  # nothing written without --out/--metrics


def test_fit_summary_is_human_readable(tmp_path, capsys):
    rng = np.random.default_rng(2)
    data = _write_csv(tmp_path / "d.csv", _sine(rng, 80), ["x", "y"])
    assert main(["fit", "--data", data, "--epochs", "2", *FIT_FAST]) == 0
    out = capsys.readouterr().out
    assert "SVGP" in out and "rmse" in out and "64 train / 16 test" in out
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)


def test_fit_exact_model(tmp_path, capsys):
    rng = np.random.default_rng(3)
    data = _write_csv(tmp_path / "d.csv", _sine(rng, 100), ["x", "y"])
    rc = main(["fit", "--data", data, "--model", "exact", "--max-steps", "30", "--json"])
    assert rc == 0
    m = json.loads(capsys.readouterr().out)
    assert m["model"] == "exact" and "num_inducing" not in m
    assert m["rmse"] < 0.3


def test_fit_binary_csv(tmp_path, capsys):
    rng = np.random.default_rng(4)
    x = rng.uniform(-3, 3, 120)
    y = (x + 0.3 * rng.standard_normal(120) > 0).astype(float)
    data = _write_csv(tmp_path / "b.csv", (x, y), ["x", "label"])
    model = str(tmp_path / "b.pt")
    rc = main(["fit", "--data", data, "--likelihood", "bernoulli", "--epochs", "20",
               "--out", model, "--json", *FIT_FAST])
    assert rc == 0
    m = json.loads(capsys.readouterr().out)
    assert {"error_rate", "nlp", "nlpd"} <= set(m) and "rmse" not in m
    assert m["error_rate"] < 0.25
    out = str(tmp_path / "p.csv")
    assert main(["predict", "--model-file", model, "--data", data, "--out", out]) == 0
    rows = _read_rows(out)
    assert rows[0] == ["p1", "label"] and len(rows) == 121
    p1 = np.array([float(r[0]) for r in rows[1:]])
    assert np.all((p1 >= 0) & (p1 <= 1))


# -------------------------------------------------------------------------- predict
def test_predict_writes_one_row_per_input(fitted, capsys):
    out = str(fitted["dir"] / "pred.csv")
    # the test CSV also holds the target column "y": the feature "x" is picked by name
    assert main(["predict", "--model-file", fitted["model"], "--data", fitted["test"],
                 "--out", out]) == 0
    rows = _read_rows(out)
    assert rows[0] == ["mean", "var"]
    assert len(rows) == 61
    pred = np.array(rows[1:], dtype=float)
    x = np.array([float(r[0]) for r in _read_rows(fitted["test"])[1:]])
    assert np.all(pred[:, 1] > 0)
    assert np.sqrt(np.mean((pred[:, 0] - np.sin(x)) ** 2)) < 0.2
    assert "60 predictions" in capsys.readouterr().out


def test_predict_headerless_positional_to_stdout(fitted, tmp_path, capsys):
    x = np.linspace(-2, 2, 7)
    data = _write_csv(tmp_path / "x.csv", (x,))
    assert main(["predict", "--model-file", fitted["model"], "--data", data]) == 0
    rows = list(csv.reader(capsys.readouterr().out.splitlines()))
    assert rows[0] == ["mean", "var"] and len(rows) == 8
    assert np.allclose(np.array(rows[1:], dtype=float)[:, 0], np.sin(x), atol=0.25)


def test_predict_applies_training_standardisation(fitted, tmp_path):
    """Predictions at the raw training inputs match the model on standardised inputs."""
    model, record = cli.load_model_file(fitted["model"])
    assert record["feature_names"] == ["x"] and record["target"] == "y"
    x = np.array([float(r[0]) for r in _read_rows(fitted["train"])[1:]])
    assert record["x_mean"][0] == pytest.approx(x.mean())
    assert record["x_scale"][0] == pytest.approx(x.std())
    out = str(tmp_path / "p.csv")
    assert main(["predict", "--model-file", fitted["model"], "--data", fitted["train"],
                 "--out", out]) == 0
    mean_cli = np.array(_read_rows(out)[1:], dtype=float)[:, 0]
    mean_lib, _ = model.predict_y(((x - x.mean()) / x.std())[:, None])
    np.testing.assert_allclose(mean_cli, mean_lib, rtol=1e-12, atol=1e-12)


def test_model_file_is_a_library_model_file(fitted):
    model = lg.load(fitted["model"])
    assert isinstance(model, lg.SVGP) and model.num_inducing == 20


# ------------------------------------------------------------------------- evaluate
def test_evaluate_reproduces_fit_metrics(fitted, capsys):
    out = str(fitted["dir"] / "eval.json")
    assert main(["evaluate", "--model-file", fitted["model"], "--data", fitted["test"],
                 "--metrics", out]) == 0
    with open(out) as fh:
        m = json.load(fh)
    assert m["n_test"] == 60
    for key in ("rmse", "mae", "nlpd"):
        assert m[key] == pytest.approx(fitted["metrics"][key], rel=1e-10, abs=1e-12), key
    assert "rmse" in capsys.readouterr().out


# ------------------------------------------------------------------------- datasets
def test_datasets_list(capsys):
    assert main(["datasets", "list"]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    assert header == ["name", "task", "source", "splits"]
    assert any(line.split()[0] == "boston" for line in out.splitlines()[1:])
    assert main(["datasets", "list", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)  # one JSON object
    assert "boston" in {r["name"] for r in result["datasets"]}
    assert result["count"] == len(result["datasets"]) == len(out.splitlines()) - 1


# --------------------------------------------------------------------------- errors
@pytest.fixture
def sine_csv(tmp_path):
    return _write_csv(tmp_path / "d.csv", _sine(np.random.default_rng(5), 50), ["x", "y"])


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--model", "gpflow"], "invalid choice"),
        (["--likelihood", "cauchy"], "unknown likelihood"),
        (["--kernel", "banana"], "unknown kernel"),
        (["--epochs", "-3"], "--epochs"),
        (["--epochs", "two"], "--epochs"),
        (["--lr", "0"], "--lr"),
        (["--test-fraction", "1.5"], "--test-fraction"),
        # --inducing 500 on 40 rows is capped with a warning: test_front_ends.py
        (["--likelihood", "poisson"], "non-negative"),  # sine targets are negative
    ],
)
def test_fit_usage_errors_exit_2_with_one_line(sine_csv, capsys, extra, needle):
    rc = main(["fit", "--data", sine_csv, "--epochs", "1", *FIT_FAST, *extra])
    assert rc == 2
    line = _one_error_line(capsys.readouterr().err)
    assert needle.lower() in line.lower()


def test_missing_file_exit_2(tmp_path, capsys):
    assert main(["fit", "--data", str(tmp_path / "nope.csv")]) == 2
    assert "nope.csv" in _one_error_line(capsys.readouterr().err)
    assert main(["predict", "--model-file", str(tmp_path / "nope.pt"), "--data", "x.csv"]) == 2
    assert "nope.pt" in _one_error_line(capsys.readouterr().err)


def test_unknown_dataset_exit_2(capsys):
    assert main(["fit", "--data", "bostn"]) == 2
    assert "boston" in _one_error_line(capsys.readouterr().err)  # suggests the close match


def test_non_numeric_column_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("x,y\n1.0,2.0\nabc,3.0\n")
    assert main(["fit", "--data", str(bad)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "non-numeric" in line and "'x'" in line


def test_predict_wrong_number_of_columns_exit_2(fitted, tmp_path, capsys):
    three = _write_csv(tmp_path / "three.csv", (np.ones(4), np.ones(4), np.ones(4)),
                       ["a", "b", "c"])
    assert main(["predict", "--model-file", fitted["model"], "--data", three]) == 2
    line = _one_error_line(capsys.readouterr().err)
    # a header row is matched by name (issue 29): the training feature 'x' is missing
    assert "no column named 'x' (a training feature)" in line
    three = _write_csv(tmp_path / "three_nohdr.csv", (np.ones(4), np.ones(4), np.ones(4)))
    assert main(["predict", "--model-file", fitted["model"], "--data", three]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "3 input column(s)" in line and "expects 1" in line
    headerless = _write_csv(tmp_path / "two.csv", (np.ones(4), np.ones(4)))
    out = tmp_path / "p.csv"
    assert main(["predict", "--model-file", fitted["model"], "--data", headerless,
                 "--out", str(out)]) == 2
    _one_error_line(capsys.readouterr().err)
    assert not out.exists()


def test_exact_refuses_large_training_sets(sine_csv, capsys, monkeypatch):
    # the limit is the model's own, not restated by the CLI
    assert cli.MODEL_BUILDERS["exact"].training_limit() == lg.ExactGP.max_num_data == 50_000
    monkeypatch.setitem(cli.MODEL_BUILDERS, "exact",
                        replace(cli.MODEL_BUILDERS["exact"], max_train=10))
    assert main(["fit", "--data", sine_csv, "--model", "exact"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "at most 10" in line and "svgp" in line


def test_failed_fit_keeps_existing_output(tmp_path, capsys):
    out, metrics = tmp_path / "model.pt", tmp_path / "m.json"
    out.write_bytes(b"previous model")
    metrics.write_text("previous metrics")
    bad = tmp_path / "bad.csv"
    bad.write_text("x,y\n1,2\n3,\n")
    rc = main(["fit", "--data", str(bad), "--out", str(out), "--metrics", str(metrics)])
    assert rc == 2
    _one_error_line(capsys.readouterr().err)
    assert out.read_bytes() == b"previous model"
    assert metrics.read_text() == "previous metrics"
    assert sorted(os.listdir(tmp_path)) == ["bad.csv", "m.json", "model.pt"]  # no temp files


def test_interrupt_exits_130_and_keeps_output(sine_csv, tmp_path, capsys, monkeypatch):
    out = tmp_path / "model.pt"
    out.write_bytes(b"previous model")

    def interrupted_fit(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(lg.SVGP, "fit", interrupted_fit)
    rc = main(["fit", "--data", sine_csv, "--out", str(out), *FIT_FAST])
    assert rc == 130
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "interrupted" in err
    assert out.read_bytes() == b"previous model"


def test_debug_shows_traceback(tmp_path, capsys):
    assert main(["fit", "--data", str(tmp_path / "nope.csv"), "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("latentgp: error:")


def test_atomic_write_failure_leaves_no_file(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")

    def explode(fh):
        fh.write("partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        cli.atomic_write(target, explode)
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["out.txt"]


# ----------------------------------------------------------------------------- help
@pytest.mark.parametrize(
    "command", ["fit", "predict", "evaluate", "datasets", "plot", "reproduce"]
)
def test_subcommand_help_has_example(command, capsys):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "example" in out and f"latentgp {command}" in out


def test_python_m_latentgp_help():
    proc = subprocess.run([sys.executable, "-m", "latentgp", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: latentgp")
    for command in ("fit", "predict", "evaluate", "datasets", "plot", "reproduce"):
        assert command in proc.stdout


_NO_TORCH_CHECK = """\
import contextlib, io, sys
from latentgp.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    status = main(sys.argv[1:])
heavy = sorted(m for m in ("torch", "latentgp.models", "matplotlib") if m in sys.modules)
print(status, heavy)
"""


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["datasets", "list"],
                                  ["fit", "--help"], ["plot", "--help"]])
def test_start_up_does_not_import_torch(argv):
    """--version, --help and datasets list import neither torch nor the models."""
    proc = subprocess.run([sys.executable, "-c", _NO_TORCH_CHECK, *argv],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "[]"], proc.stdout + proc.stderr


def test_cli_modules_import_downwards_only():
    """The modules of latentgp.cli form no import cycle and share only public names."""
    import ast
    from pathlib import Path

    graph: dict[str, set[str]] = {}
    for path in Path(cli.__file__).parent.glob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("latentgp.cli"):
                if node.module == "latentgp.cli":
                    deps |= {alias.name for alias in node.names}
                else:
                    deps.add(node.module.split(".")[2])
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.name} imports private names {private}"
        graph[path.stem] = deps - {path.stem}
    assert set().union(*graph.values()) <= set(graph)
    done: set[str] = set()
    while len(done) < len(graph):  # peel off the modules whose imports are all done
        ready = {m for m, deps in graph.items() if m not in done and deps <= done}
        assert ready, f"import cycle among {sorted(set(graph) - done)}"
        done |= ready


def test_python_m_latentgp_version_does_not_import_torch():
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "latentgp", "--version"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"latentgp {lg.__version__}"
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()}
    assert "latentgp.cli" in imported and "torch" not in imported


# --------------------------------------------------------------------------- --json
def test_predict_json(fitted, capsys):
    out = str(fitted["dir"] / "pred_json.csv")
    assert main(["predict", "--model-file", fitted["model"], "--data", fitted["test"],
                 "--out", out, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["n"] == 60 and summary["columns"] == ["mean", "var"]
    assert summary["outputs"] == {"predictions": out} and "predictions" not in summary
    rows = _read_rows(out)
    # without --out the predictions travel inside the one JSON object
    assert main(["predict", "--model-file", fitted["model"], "--data", fitted["test"],
                 "--json"]) == 0
    inline = json.loads(capsys.readouterr().out)
    assert inline["outputs"] == {}
    assert inline["predictions"]["mean"] == [float(r[0]) for r in rows[1:]]
    assert inline["predictions"]["var"] == [float(r[1]) for r in rows[1:]]


def test_evaluate_json_has_outputs_and_time(fitted, capsys):
    out = str(fitted["dir"] / "eval2.json")
    assert main(["evaluate", "--model-file", fitted["model"], "--data", fitted["test"],
                 "--metrics", out, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["outputs"] == {"metrics": out} and summary["seconds"] > 0
    assert summary["rmse"] == pytest.approx(fitted["metrics"]["rmse"], rel=1e-10)


# ------------------------------------------------------------------ model builders
@pytest.mark.parametrize(
    "name, likelihood, cls, size_attr, size",
    [
        ("svgp", "gaussian", "SVGP", "num_inducing", 128),
        ("exact", "gaussian", "ExactGP", None, None),
        ("savigp", "gaussian", "SAVIGP", "num_inducing", 128),
        ("vfe", "gaussian", "SparseGP", "num_inducing", 128),
        ("fitc", "gaussian", "SparseGP", "num_inducing", 128),
        ("shgp", "gaussian", "SHGP", "num_inducing", 100),
        ("slgp", "gaussian", "SLGP", "num_inducing", 100),
        ("deepgp", "bernoulli", "DeepGP", "num_inducing", 100),
        ("sep", "probit", "SEP", "num_inducing", 50),
        ("gfitc", "probit", "GFITC", "num_inducing", 50),
        ("qsgp", "laplace", "QSGP", "num_basis", 1000),
    ],
)
def test_model_builders_table(name, likelihood, cls, size_attr, size):
    from argparse import Namespace

    builder = cli.MODEL_BUILDERS[name]
    lik = lg.likelihoods.likelihood_from_name(likelihood)
    model = builder.build(Namespace(model=name, kernel="matern32", inducing=None), lik)
    assert type(model).__name__ == cls
    if size_attr is not None:
        assert getattr(model, size_attr) == size
        model = builder.build(Namespace(model=name, kernel="rbf", inducing=7), lik)
        assert getattr(model, size_attr) == 7
    if name in ("vfe", "fitc"):
        assert model.method == name
    assert builder.model_class == cls


def test_model_builders_training_defaults():
    """The optimiser and rate of each --model (read from the model classes where the CLI
    does not choose its own) are those the CLI always used."""
    expected = {
        "svgp": ("adam", 0.01), "exact": ("lbfgs", 1.0), "savigp": ("adam", 0.01),
        "sor": ("lbfgs", 1.0), "dtc": ("lbfgs", 1.0), "fitc": ("lbfgs", 1.0),
        "vfe": ("lbfgs", 1.0), "shgp": ("adam", 0.005), "smgp": ("adam", 0.005),
        "slgp": ("adam", 0.005), "svhgp": ("adam", 0.005), "deepgp": ("adam", 0.01),
        "sep": ("sign", 0.2),
        "gfitc": ("lbfgs", 1.0), "qsgp": ("adagrad", 0.1),
    }
    assert {n: b.fit_defaults() for n, b in cli.MODEL_BUILDERS.items()} == expected
    assert cli.MODEL_BUILDERS["exact"].optimizer is None  # not restated: ExactGP's own
    plain = cli.ModelBuilder(name="x", summary="", build=lambda args, lik: None)
    assert plain.fit_defaults() == ("adam", 0.01) and plain.training_limit() is None


@pytest.mark.parametrize(
    "name, likelihood, needle",
    [
        ("shgp", "bernoulli", "--model shgp is for regression (Gaussian noise)"),
        ("sep", "gaussian", "--model sep is a binary (probit) classifier"),
        ("qsgp", "poisson", "--model qsgp supports the gaussian, bernoulli and laplace"),
    ],
)
def test_model_builders_refuse_other_likelihoods(name, likelihood, needle):
    from argparse import Namespace

    lik = lg.likelihoods.likelihood_from_name(likelihood)
    with pytest.raises(cli.CLIError, match=re.escape(needle)):
        cli.MODEL_BUILDERS[name].build(Namespace(model=name, kernel="rbf", inducing=None), lik)


def test_predict_progress_bar_in_blocks_gives_the_same_predictions(fitted, capsys, monkeypatch):
    plain, blocks = str(fitted["dir"] / "plain.csv"), str(fitted["dir"] / "blocks.csv")
    assert main(["predict", "--model-file", fitted["model"], "--data", fitted["test"],
                 "--out", plain]) == 0
    assert "predict [" not in capsys.readouterr().err  # stderr is not a terminal: quiet
    monkeypatch.setattr(cli_predict, "PREDICT_BLOCK", 25)  # 60 rows: 3 blocks
    assert main(["predict", "--model-file", fitted["model"], "--data", fitted["test"],
                 "--out", blocks, "--progress"]) == 0
    assert "predict [####################] 3/3" in capsys.readouterr().err
    a, b = np.array(_read_rows(plain)[1:], float), np.array(_read_rows(blocks)[1:], float)
    np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-12)  # BLAS blocking rounds


def test_fit_with_a_mean_function(tmp_path, capsys):
    """``--mean linear`` trains and stores a linear prior mean; a model without one
    refuses the option with one error line."""
    rng = np.random.default_rng(5)
    x = rng.uniform(0, 5, 80)
    data = _write_csv(tmp_path / "d.csv", (x, 2.0 * x + np.sin(3 * x)), ["x", "y"])
    out = str(tmp_path / "m.pt")
    assert main(["fit", "--data", data, "--model", "exact", "--mean", "linear",
                 "--max-steps", "30", "--out", out, "--no-progress"]) == 0
    m = lg.load(out)
    assert type(m.mean_function).__name__ == "LinearMean"
    assert float(m.mean_function.weight.detach()[0, 0]) > 0.3  # the trend went to the mean
    capsys.readouterr()
    assert main(["fit", "--data", data, "--model", "qsgp", "--mean", "constant",
                 "--max-steps", "2", "--no-progress"]) != 0
    assert "no prior mean" in _one_error_line(capsys.readouterr().err)
