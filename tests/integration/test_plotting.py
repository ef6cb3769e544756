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


# ---------------------------------------------------------------------------- 2-D
class _Lik:
    def __init__(self, task):
        self.task = task


class _Closed:
    """A 'model' with closed-form predictions, to check what the maps show."""

    input_dim, output_dim = 2, 1

    def __init__(self, task="regression", Z=None, probs=None):
        self.likelihood = _Lik(task)
        self.Z = Z
        self.probs = probs

    def predict_y(self, X):
        X = np.asarray(X)
        if self.task == "multiclass":
            return np.tile(self.probs, (X.shape[0], 1)), None
        if self.task == "binary":
            return 1.0 / (1.0 + np.exp(-X[:, 0])), None
        return X[:, 0] + 2.0 * X[:, 1], X[:, 0] ** 2 + 1.0

    @property
    def task(self):
        return self.likelihood.task


def _png_size(path):
    import struct

    with open(path, "rb") as fh:
        head = fh.read(24)
    assert head[:8] == PNG_SIGNATURE and head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def test_plot_2d_regression_maps_show_mean_and_sd(tmp_path):
    rng = np.random.default_rng(5)
    X = rng.uniform([0, -1], [2, 1], (50, 2))
    Z = np.array([[0.5, 0.0], [1.5, 0.5]])
    model = _Closed(Z=Z)
    fig = plotting.plot_2d(model, X, X[:, 0], path=tmp_path / "m.png", num_grid=30,
                           figsize=(6, 3), dpi=50, feature_names=("a", "b"))
    assert _png_size(tmp_path / "m.png") == (300, 150)
    ax_mean, ax_sd = fig.axes[0], fig.axes[1]
    mean_img = np.asarray(ax_mean.images[0].get_array())
    sd_img = np.asarray(ax_sd.images[0].get_array())
    x0_lo, x0_hi, x1_lo, x1_hi = ax_mean.images[0].get_extent()
    assert x0_lo < X[:, 0].min() and x0_hi > X[:, 0].max()
    g0, g1 = np.linspace(x0_lo, x0_hi, 30), np.linspace(x1_lo, x1_hi, 30)
    G0, G1 = np.meshgrid(g0, g1)
    np.testing.assert_allclose(mean_img, G0 + 2 * G1, atol=1e-12)
    np.testing.assert_allclose(sd_img, np.sqrt(G0**2 + 1), atol=1e-12)
    assert ax_mean.get_xlabel() == "a" and ax_mean.get_ylabel() == "b"
    labels = [t.get_text() for t in ax_mean.get_legend().get_texts()]
    assert "inducing inputs (2)" in labels


def test_plot_2d_classifiers(tmp_path):
    rng = np.random.default_rng(6)
    X = rng.normal(size=(40, 2))
    fig = plotting.plot_2d(_Closed("binary"), X, (X[:, 0] > 0).astype(float), num_grid=20)
    p = np.asarray(fig.axes[0].images[0].get_array())
    assert p.shape == (20, 20) and np.all(np.diff(p, axis=1) > 0)  # P(y=1) grows with x1
    flat = _Closed("multiclass", probs=np.full(3, 1 / 3))
    fig = plotting.plot_2d(flat, X, rng.integers(0, 3, 40), num_grid=10)
    np.testing.assert_allclose(fig.axes[0].images[0].get_array(), 1.0)  # undecided: white
    sure = _Closed("multiclass", probs=np.array([0.0, 1.0, 0.0]))
    fig = plotting.plot_2d(sure, X, None, num_grid=10, class_names=["a", "b", "c"])
    import matplotlib

    c1 = np.array(matplotlib.colormaps["tab10"](1)[:3])
    np.testing.assert_allclose(fig.axes[0].images[0].get_array(), np.broadcast_to(c1, (10, 10, 3)))
    with pytest.raises(ValueError, match="must have shape"):
        plotting.plot_2d(flat, X[:, :1], None)


def test_plot_metric_traces_and_thinned_objective(tmp_path):
    fig = plotting.plot_metric_traces([10, 20, 30], {"rmse": [3, 2, 1], "nlpd": [1, 0, -1]},
                                      path=tmp_path / "t.png", figsize=(5, 2), dpi=40)
    assert _png_size(tmp_path / "t.png") == (200, 80)
    assert [ax.get_title() for ax in fig.axes] == ["rmse", "nlpd"]
    np.testing.assert_array_equal(fig.axes[1].get_lines()[0].get_xdata(), [10, 20, 30])
    with pytest.raises(ValueError, match="'rmse' has 2 values but there are 3 steps"):
        plotting.plot_metric_traces([1, 2, 3], {"rmse": [1, 2]})
    fig = plotting.plot_objective([5.0, 6.0], steps=[1, 100])
    np.testing.assert_array_equal(fig.axes[0].get_lines()[0].get_xdata(), [1, 100])
    with pytest.raises(ValueError, match="steps has 1 entries"):
        plotting.plot_objective([5.0, 6.0], steps=[1])


def test_plot_inducing(sine_model, tmp_path):
    model, X, y = sine_model
    fig = plotting.plot_inducing(model, X, y, path=tmp_path / "z.png", figsize=(3, 2), dpi=50)
    assert _png_size(tmp_path / "z.png") == (150, 100)
    ticks = fig.axes[0].get_lines()[0].get_xdata()
    np.testing.assert_allclose(np.sort(ticks), np.sort(model.Z.detach().numpy()[:, 0]))
    Z3 = np.array([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    X3 = np.zeros((4, 3))
    fake = _Closed(Z=Z3)
    fake.input_dim = 3
    fig = plotting.plot_inducing(fake, X3, dims=(2, 0))
    np.testing.assert_allclose(fig.axes[0].collections[1].get_offsets(), [[2, 0], [5, 3]])
    fake.Z = np.zeros((4, 5))  # inducing inputs outside the input space (e.g. SLGP)
    with pytest.raises(ValueError, match="no inducing inputs in its input space"):
        plotting.plot_inducing(fake, X3)


def _bbox(fig, artist):
    fig.canvas.draw()
    return artist.get_window_extent(fig.canvas.get_renderer())


def test_objective_plot_keeps_its_y_label_inside_the_image(tmp_path):
    # large objective values give long tick labels, which pushed the label off the image
    fig = plotting.plot_objective(
        np.linspace(-1.5e6, -1.2e6, 40), path=tmp_path / "objective.png", figsize=(4, 3)
    )
    ax = fig.axes[0]
    label, whole = _bbox(fig, ax.yaxis.label), fig.bbox
    assert label.x0 >= whole.x0 and label.x1 <= whole.x1
    assert label.y0 >= whole.y0 and label.y1 <= whole.y1
    for tick in ax.get_yticklabels():
        if tick.get_text():
            assert _bbox(fig, tick).x0 >= whole.x0


def test_fit_plot_legend_covers_no_point(tmp_path):
    # the guide's picture: a 1-D fit with training and test points everywhere
    ds = lg.datasets.load("snelson")
    X, y = ds.X_train[:300], ds.y_train[:300]
    model = lg.SVGP(num_inducing=30).fit(X, y, batch_size=100, epochs=5, seed=0, progress=False)
    fig = plotting.plot_1d(model, X, y, path=tmp_path / "fit.png", X_test=ds.X_test,
                           y_test=ds.y_test)  # fmt: skip
    ax = fig.axes[0]
    legend = _bbox(fig, ax.get_legend())
    points = ax.transData.transform(np.r_[np.c_[X[:, 0], y], np.c_[ds.X_test[:, 0], ds.y_test]])
    inside = (
        (points[:, 0] >= legend.x0) & (points[:, 0] <= legend.x1)
        & (points[:, 1] >= legend.y0) & (points[:, 1] <= legend.y1)
    )  # fmt: skip
    assert not inside.any()
    assert legend.x1 <= fig.bbox.x1  # and the legend itself is in the image


@pytest.mark.parametrize("cls", [lg.SHGP, lg.SVHGP])
def test_plot_1d_of_a_heteroscedastic_model_draws_the_y_band_only(cls, tmp_path):
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (60, 1))
    y = np.sin(X[:, 0]) + 0.1 * (1 + X[:, 0] ** 2) * rng.standard_normal(60)
    model = cls(num_inducing=8).fit(X, y, max_steps=5, seed=0, progress=False)
    fig = plotting.plot_1d(model, X, y, path=tmp_path / "band.png", num_grid=50)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "±2 sd of y" in labels and "±2 sd of f" not in labels  # no single latent f
    band = fig.axes[0].collections[0].get_paths()[0].vertices[:, 1]
    mean, var = model.predict_y(np.linspace(X.min(), X.max(), 50)[:, None])
    assert band.max() == pytest.approx(np.max(mean + 2 * np.sqrt(var)), rel=0.05)
