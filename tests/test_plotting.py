"""Diagnostic plots write valid images of the requested size."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("matplotlib")

import latentgp as lg  # noqa: E402
from latentgp import plotting  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _read_png(path):
    import matplotlib.image as mpimg

    with open(path, "rb") as fh:
        assert fh.read(8) == PNG_SIGNATURE
    return mpimg.imread(str(path))


@pytest.fixture(scope="module")
def sine_model():
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (60, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(60)
    model = lg.SVGP(num_inducing=8).fit(X, y, max_steps=30, lr=0.05, seed=0, progress=False)
    return model, X, y


def test_plot_1d_writes_png_of_requested_size(sine_model, tmp_path):
    model, X, y = sine_model
    path = tmp_path / "fit.png"
    fig = plotting.plot_1d(model, X, y, path=path, X_test=X[:5], y_test=y[:5],
                           figsize=(4, 3), dpi=50, title="sine", num_grid=50)
    img = _read_png(path)
    assert img.shape[:2] == (150, 200)  # rows = 3 in * 50 dpi, columns = 4 in * 50 dpi
    assert img[..., :3].std() > 0.05  # something was drawn, not a blank canvas
    ax = fig.axes[0]
    assert ax.get_title() == "sine"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("inducing inputs (8)" in t for t in labels)
    assert any("sd of y" in t for t in labels) and any("sd of f" in t for t in labels)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fit.png"]  # no temp files left


def test_plot_1d_into_given_axes_without_saving(sine_model):
    import matplotlib.pyplot as plt

    model, X, y = sine_model
    fig, axes = plt.subplots(1, 2, figsize=(6, 2), dpi=40)
    out = plotting.plot_1d(model, X, y, ax=axes[1])
    assert out is fig and axes[1].has_data() and not axes[0].has_data()
    plt.close(fig)


def test_plot_1d_exact_model_and_binary(tmp_path):
    rng = np.random.default_rng(1)
    X = rng.uniform(-2, 2, (40, 1))
    exact = lg.ExactGP().fit(X, np.cos(X[:, 0]), max_steps=10)
    fig = plotting.plot_1d(exact, X, np.cos(X[:, 0]), path=tmp_path / "exact.png", dpi=30)
    assert not any("inducing" in t.get_text() for t in fig.axes[0].get_legend().get_texts())
    yb = (X[:, 0] > 0).astype(float)
    clf = lg.SVGP(num_inducing=6, likelihood="bernoulli").fit(X, yb, max_steps=10, seed=0)
    plotting.plot_1d(clf, X, yb, path=tmp_path / "binary.png", figsize=(3, 2), dpi=40)
    assert _read_png(tmp_path / "binary.png").shape[:2] == (80, 120)


def test_plot_1d_rejects_bad_input(sine_model):
    model, X, y = sine_model
    with pytest.raises(ValueError, match="X has 60 points but y has 59"):
        plotting.plot_1d(model, X, y[:-1])
    rng = np.random.default_rng(2)
    X2 = rng.normal(size=(30, 2))
    model2 = lg.SVGP(num_inducing=5).fit(X2, X2[:, 0], max_steps=2)
    with pytest.raises(ValueError, match="one input dimension"):
        plotting.plot_1d(model2, X2, X2[:, 0])


def test_plot_objective(sine_model, tmp_path):
    model, _, _ = sine_model
    fig = plotting.plot_objective(model.history_, path=tmp_path / "obj.png")
    _read_png(tmp_path / "obj.png")
    line = fig.axes[0].get_lines()[0]
    assert len(line.get_xdata()) == len(model.history_.objective) == 30
    plotting.plot_objective([3.0, 2.0, 1.0])  # a plain sequence works too
    with pytest.raises(ValueError):
        plotting.plot_objective([])


def test_plot_calibration_matches_coverage(tmp_path):
    rng = np.random.default_rng(3)
    y = rng.standard_normal(2000)
    fig = plotting.plot_calibration(y, np.zeros_like(y), np.ones_like(y),
                                    path=tmp_path / "cal.png")
    _read_png(tmp_path / "cal.png")
    nominal, observed = fig.axes[0].get_lines()[1].get_data()
    assert np.max(np.abs(observed - nominal)) < 0.05  # well calibrated by construction
    # an over-confident model (variance too small) covers less than nominal
    fig2 = plotting.plot_calibration(y, np.zeros_like(y), 0.25 * np.ones_like(y))
    nominal2, observed2 = fig2.axes[0].get_lines()[1].get_data()
    assert np.all(observed2 < nominal2)


def test_plot_reliability(tmp_path):
    rng = np.random.default_rng(4)
    p = rng.uniform(0, 1, 5000)
    y = (rng.uniform(0, 1, 5000) < p).astype(float)
    fig = plotting.plot_reliability(y, p, path=tmp_path / "rel.png", num_bins=5)
    _read_png(tmp_path / "rel.png")
    mean_p, freq = fig.axes[0].get_lines()[1].get_data()
    assert len(mean_p) == 5 and np.max(np.abs(freq - mean_p)) < 0.05
    with pytest.raises(ValueError, match="binary labels"):
        plotting.plot_reliability(y + 1, p)


def test_missing_matplotlib_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"pip install latentgp\[plot\]"):
        plotting.plot_objective([1.0, 2.0])
