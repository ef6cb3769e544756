"""``latentgp <command> --config run.toml``: a TOML file equivalent to the flags."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch

from latentgp.cli import main


def _csv(path, n=90, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, n)
    y = np.sin(x) + 0.1 * rng.standard_normal(n)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["x", "y"])
        w.writerows(zip(x.tolist(), y.tolist(), strict=True))
    return str(path)


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("latentgp: error: ") and "Traceback" not in err
    return err


def _tensors(path):
    """The saved model's parameters and buffers, read back through the library."""
    import latentgp as lg

    return lg.load(path).state_dict()


def test_config_file_and_flags_give_the_same_run(tmp_path, capsys):
    data = _csv(tmp_path / "d.csv")
    (tmp_path / "run.toml").write_text(
        f'data = "{data}"\n'
        "seed = 3\n"
        "[fit]\n"
        'model = "svgp"\n'
        "inducing = 12\n"
        "batch_size = 32\n"  # underscore spelling
        "test-fraction = 0.25\n"  # dash spelling
        "epochs = 4\n"
        "lr = 0.05\n"
        "progress = false\n"
        'kernel = "matern52"\n'
        "[evaluate]\n"  # other commands' tables are ignored by fit
        'metrics = "ignored.json"\n'
    )
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    assert main(["fit", "--config", str(tmp_path / "run.toml"), "--out", str(a), "--json"]) == 0
    ma = json.loads(capsys.readouterr().out)
    flags = ["fit", "--data", data, "--seed", "3", "--model", "svgp", "--inducing", "12",
             "--batch-size", "32", "--test-fraction", "0.25", "--epochs", "4", "--lr", "0.05",
             "--no-progress", "--kernel", "matern52", "--out", str(b), "--json"]
    assert main(flags) == 0
    mb = json.loads(capsys.readouterr().out)
    for m in (ma, mb):
        m.pop("train_seconds"), m.pop("seconds"), m.pop("outputs")
    assert ma == mb
    summary = (ma["num_inducing"], ma["n_train"], ma["n_test"], ma["kernel"])
    assert summary == (12, 68, 22, "matern52")
    assert ma["steps"] == 4 * math.ceil(68 / 32)
    ta, tb = _tensors(a), _tensors(b)
    assert ta.keys() == tb.keys() and len(ta) > 3
    for k in ta:
        assert torch.equal(ta[k], tb[k]), k
    assert not (tmp_path / "ignored.json").exists()


def test_command_line_overrides_the_file(tmp_path, capsys):
    data = _csv(tmp_path / "d.csv")
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'[fit]\ndata = "{data}"\nepochs = 5\nbatch-size = 30\ninducing = 8\n'
                   "progress = false\n")
    assert main(["fit", "--epochs", "2", "--config", str(cfg), "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["steps"] == 2 * math.ceil(72 / 30)  # --epochs 2 wins over epochs = 5
    assert m["num_inducing"] == 8  # from the file


def test_evaluate_reads_its_own_table(tmp_path, capsys):
    data = _csv(tmp_path / "d.csv")
    model = tmp_path / "m.pt"
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f'data = "{data}"\n'
        f'model-file = "{model}"\n'  # top level: used by evaluate; fit has no such key...
        "[fit]\nepochs = 2\ninducing = 6\nprogress = false\n"
        f'[evaluate]\nmetrics = "{tmp_path / "eval.json"}"\njson = true\n'
    )
    # ... so fit cannot share that top-level key: it is an error naming the key and file
    assert main(["fit", "--config", str(cfg), "--out", str(model)]) == 2
    err = _error(capsys)
    assert "'model-file'" in err and str(cfg) in err and "latentgp fit" in err
    cfg.write_text(cfg.read_text().replace(f'model-file = "{model}"\n', ""))
    assert main(["fit", "--config", str(cfg), "--out", str(model)]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--config", str(cfg), "--model-file", str(model)]) == 0
    out = json.loads(capsys.readouterr().out)
    with open(tmp_path / "eval.json") as fh:
        written = json.load(fh)
    assert out["rmse"] == written["rmse"]
    assert out["outputs"]["metrics"] == str(tmp_path / "eval.json")


@pytest.mark.parametrize(
    "body, needle",
    [
        ("[fit]\nepochs = 2\ninducign = 8\n", "unknown key 'inducign' in [fit]"),
        ("[fitt]\nepochs = 2\n", "unknown table [fitt]"),
        ('[fit]\ninducing = "20"\n', "inducing = '20': expected an integer"),
        ("[fit]\ninducing = 2.5\n", "inducing = 2.5: expected an integer"),
        ("[fit]\ninducing = 0\n", "inducing = 0: expected a positive integer"),
        ('[fit]\nlr = "fast"\n', "lr = 'fast': expected a number"),
        ("[fit]\nprogress = 1\n", "progress = 1: expected true or false"),
        ("[fit]\njson = \"yes\"\n", "json = 'yes': expected true or false"),
        ('[fit]\nmodel = "nope"\n', "model = 'nope': choose one of"),
        ('[fit]\nkernel = ["rbf"]\n', "kernel = ['rbf']: expected a string"),
        ("[fit]\nepochs = \n", "not a valid TOML file"),
        ("[fit]\nconfig = 'other.toml'\n", "unknown key 'config'"),
    ],
)
def test_config_errors_name_the_file_and_key(tmp_path, capsys, body, needle):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(f'data = "{tmp_path / "d.csv"}"\n' + body)
    assert main(["fit", "--config", str(cfg)]) == 2
    err = _error(capsys)
    assert needle in err and str(cfg) in err


def test_missing_config_file_and_repeated_option(tmp_path, capsys):
    assert main(["fit", "--config", str(tmp_path / "none.toml")]) == 2
    assert "none.toml" in _error(capsys)
    cfg = tmp_path / "c.toml"
    cfg.write_text("")
    assert main(["fit", "--config", str(cfg), "--config", str(cfg)]) == 2
    assert "give --config once" in _error(capsys)
