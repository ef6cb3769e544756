"""CLI scale-out: --nproc data-parallel runs, checkpoints and --resume."""

import json

import numpy as np
import torch

from latentgp.cli import main


def _csv(path, n=150, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=n)
    rows = ["a,b,y"] + [f"{a},{b},{t}" for (a, b), t in zip(X, y, strict=True)]
    path.write_text("\n".join(rows) + "\n")
    return path


def _fit(tmp_path, *extra):
    data = _csv(tmp_path / "d.csv")
    return main(
        [
            "fit",
            "--data",
            str(data),
            "--model",
            "svgp",
            "--inducing",
            "10",
            "--batch-size",
            "40",
            "--max-steps",
            "12",
            "--lr",
            "0.05",
            "--seed",
            "1",
            *extra,
        ]
    )


def test_nproc_2_matches_single_process(tmp_path, capsys):
    assert _fit(tmp_path, "--out", str(tmp_path / "one.pt"), "--json") == 0
    one = json.loads(capsys.readouterr().out)
    assert (
        _fit(
            tmp_path,
            "--nproc",
            "2",
            "--out",
            str(tmp_path / "two.pt"),
            "--metrics",
            str(tmp_path / "two.json"),
        )
        == 0
    )
    two = json.loads((tmp_path / "two.json").read_text())
    assert abs(one["rmse"] - two["rmse"]) < 1e-8
    a = torch.load(tmp_path / "one.pt", weights_only=True)["state"]
    b = torch.load(tmp_path / "two.pt", weights_only=True)["state"]
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-9, atol=1e-9)


def test_checkpoint_and_resume(tmp_path, capsys):
    ck = tmp_path / "run.ckpt"
    assert _fit(tmp_path, "--checkpoint", str(ck), "--checkpoint-every", "5", "--json") == 0
    first = json.loads(capsys.readouterr().out)
    assert ck.exists()
    # resuming a finished run takes no further steps and gives the same model
    assert _fit(tmp_path, "--checkpoint", str(ck), "--resume", "--json") == 0
    again = json.loads(capsys.readouterr().out)
    assert again["steps"] == first["steps"] == 12
    assert again["rmse"] == first["rmse"]


def test_resume_without_checkpoint_is_usage_error(tmp_path, capsys):
    assert _fit(tmp_path, "--resume") == 2
    err = capsys.readouterr().err
    assert "--resume needs --checkpoint" in err and "Traceback" not in err
    assert _fit(tmp_path, "--checkpoint", str(tmp_path / "c"), "--checkpoint-every", "x") == 2


def test_fit_streams_npy_shards_and_parquet(tmp_path, capsys):
    import latentgp as lg

    lg.datasets.write_gp_draws_npy(
        tmp_path / "shards", 3000, shard_size=1000, input_dim=2, seed=0, noise=0.01, lengthscale=1.5
    )
    code = main(
        [
            "fit",
            "--data",
            str(tmp_path / "shards"),
            "--inducing",
            "20",
            "--batch-size",
            "256",
            "--epochs",
            "3",
            "--lr",
            "0.05",
            "--json",
            "--out",
            str(tmp_path / "m.pt"),
        ]
    )
    assert code == 0
    m = json.loads(capsys.readouterr().out)
    assert m["n_train"] == 3000 and m["train_rmse"] < 0.5
    pa = __import__("pytest").importorskip("pyarrow")
    import pyarrow.parquet as pq

    X, y = lg.datasets.gp_draws(1000, input_dim=2, seed=1, noise=0.01, lengthscale=1.5)
    pq.write_table(pa.table({"u": X[:, 0], "v": X[:, 1], "t": y}), tmp_path / "d.parquet")
    assert (
        main(
            [
                "fit",
                "--data",
                str(tmp_path / "d.parquet"),
                "--target",
                "t",
                "--inducing",
                "20",
                "--batch-size",
                "200",
                "--epochs",
                "2",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["n_train"] == 1000


def test_fit_streams_a_csv_file_with_stream(tmp_path, capsys):
    """``fit --data x.csv --stream`` trains from a CSVSource (the target by name or
    index) and reports the training-sample metrics of a streamed fit; without a CSV
    file ``--stream`` is a usage error."""
    import latentgp as lg

    X, y = lg.datasets.gp_draws(600, input_dim=2, seed=2, noise=0.01, lengthscale=1.5)
    path = tmp_path / "d.csv"
    lg.datasets.save_csv(path, np.c_[y, X], None, header=False)  # the target first
    args = ["fit", "--data", str(path), "--stream", "--target", "0", "--inducing", "15",
            "--batch-size", "100", "--epochs", "2", "--json"]
    assert main(args) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["n_train"] == 600 and m["n_test"] == 0 and m["train_rmse"] < 0.5
    assert (tmp_path / "d.csv.latentgp-shards" / "X_00000.npy").exists()
    assert main(["fit", "--data", "synth", "--stream", "--epochs", "1"]) == 2
    assert "--stream applies to a CSV file" in capsys.readouterr().err
