"""Every bad input named in the foundation issue gets a ValueError saying what and where."""

import numpy as np
import pytest
import torch

import latentgp as lg


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2))
    y = X[:, 0] + 0.1 * rng.normal(size=30)
    return X, y


MODELS = [lambda: lg.SVGP(num_inducing=5), lambda: lg.ExactGP()]


@pytest.mark.parametrize("make", MODELS)
def test_nan_and_inf(make, data):
    X, y = data
    Xb = X.copy()
    Xb[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"X contains NaN or inf at row 3, column 1"):
        make().fit(Xb, y)
    yb = y.copy()
    yb[7] = np.inf
    with pytest.raises(ValueError, match=r"y contains NaN or inf at row 7"):
        make().fit(X, yb)


@pytest.mark.parametrize("make", MODELS)
def test_shapes_and_lengths(make, data):
    X, y = data
    with pytest.raises(ValueError, match="y has 29 entries but X has 30 rows"):
        make().fit(X, y[:-1])
    with pytest.raises(ValueError, match=r"X must be a 2-D array.*\(2, 15, 2\)"):
        make().fit(X.reshape(2, 15, 2), y)
    with pytest.raises(ValueError, match="X is empty"):
        make().fit(X[:0], y[:0])
    with pytest.raises(ValueError, match="y must be 1-D"):
        make().fit(X, np.zeros((30, 2, 2)))


@pytest.mark.parametrize("make", MODELS)
def test_predict_with_wrong_columns(make, data):
    X, y = data
    m = make().fit(X, y, max_steps=2)
    with pytest.raises(ValueError, match="X has 3 columns but the model was trained with 2"):
        m.predict_y(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="y has 3 entries but X has 4 rows"):
        m.log_predictive_density(np.zeros((4, 2)), np.zeros(3))


def test_predict_before_fit(data):
    with pytest.raises(RuntimeError, match="not fitted yet"):
        lg.SVGP().predict_y(data[0])


def test_labels_outside_support(data):
    X, _ = data
    y = np.zeros(30)
    y[4] = 2
    with pytest.raises(ValueError, match="binary labels 0 or 1.*found 2 at row 4"):
        lg.SVGP(num_inducing=5, likelihood="bernoulli").fit(X, y)
    y = np.ones(30)
    y[9] = -1
    with pytest.raises(ValueError, match="non-negative integer counts.*-1 at row 9"):
        lg.SVGP(num_inducing=5, likelihood="poisson").fit(X, y)
    y[9] = 2.5
    with pytest.raises(ValueError, match="2.5 at row 9"):
        lg.SVGP(num_inducing=5, likelihood="poisson").fit(X, y)


def test_more_inducing_points_than_data(data):
    X, y = data
    with pytest.warns(lg.SizeCappedWarning, match="num_inducing=50 is larger than the 30"):
        m = lg.SVGP(num_inducing=50).fit(X, y, max_steps=2)
    assert m.num_inducing == 30


def test_non_numeric_data(data):
    X, y = data
    Xs = X.astype(object)
    Xs[2, 0] = "abc"
    with pytest.raises(ValueError, match="X must be numeric"):
        lg.SVGP(num_inducing=5).fit(Xs, y)
    with pytest.raises(ValueError, match="y must be numeric"):
        lg.SVGP(num_inducing=5).fit(X, np.array(["a"] * 30))


def test_bad_training_arguments(data):
    X, y = data
    m = lg.SVGP(num_inducing=5)
    with pytest.warns(lg.SizeCappedWarning, match="batch_size=64 is larger than the 30"):
        m.fit(X, y, batch_size=64, max_steps=2)
    with pytest.raises(ValueError, match="epochs must be >= 1"):
        m.fit(X, y, epochs=0)
    with pytest.raises(ValueError, match="lr must be a positive number"):
        m.fit(X, y, lr=-1.0)
    with pytest.raises(ValueError, match="unknown optimizer"):
        m.fit(X, y, optimizer="rmsprop-ish")
    with pytest.raises(ValueError, match="L-BFGS needs the full batch"):
        lg.SVGP(num_inducing=5).fit(X, y, optimizer="lbfgs", batch_size=10)


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="num_inducing must be an integer"):
        lg.SVGP(num_inducing=2.5)
    with pytest.raises(ValueError, match="unknown kernel"):
        lg.SVGP(kernel="nope")
    with pytest.raises(ValueError, match="unknown likelihood"):
        lg.SVGP(likelihood="nope")
    with pytest.raises(ValueError, match="ExactGP needs a Gaussian likelihood"):
        lg.ExactGP(likelihood="bernoulli")
    with pytest.raises(ValueError, match="Z contains NaN"):
        lg.SVGP(Z=np.array([[0.0], [np.nan]]))
    with pytest.raises(ValueError, match="covariance must be"):
        lg.SVGP(covariance="banded")


def test_z_column_mismatch(data):
    X, y = data
    with pytest.raises(ValueError, match="Z has 3 columns but X has 2"):
        lg.SVGP(Z=np.zeros((4, 3))).fit(X, y)


def test_torch_inputs_accepted_and_checked(data):
    X, y = data
    m = lg.SVGP(num_inducing=5).fit(torch.tensor(X), torch.tensor(y), max_steps=2)
    Xb = torch.tensor(X)
    Xb[0, 0] = float("nan")
    with pytest.raises(ValueError, match="row 0, column 0"):
        m.predict_y(Xb)


def test_non_finite_steps_are_repaired_and_reported(data):
    X, y = data
    calls = {"n": 0}

    def flaky(y, f):  # NaN on the 2nd and 3rd evaluation, a Gaussian otherwise
        calls["n"] += 1
        lp = -0.5 * (y - f) ** 2
        return lp * float("nan") if calls["n"] in (2, 3) else lp

    m = lg.SVGP(num_inducing=5, likelihood=flaky)
    with pytest.warns(lg.TrainingWarning, match="restored the last good parameters"):
        m.fit(X, y, max_steps=10, lr=0.01, seed=0)
    assert len(m.history_.events) == 2
    assert m.history_.steps == 10 and len(m.history_.objective) == 8
    assert all(torch.isfinite(p).all() for p in m.parameters())


def test_persistent_nan_stops_with_clear_error_and_finite_state(data):
    X, y = data
    m = lg.SVGP(num_inducing=5, likelihood=lambda y, f: f * float("nan"))
    with pytest.warns(lg.TrainingWarning):
        with pytest.raises(FloatingPointError, match="last good parameters were restored"):
            m.fit(X, y, max_steps=50, seed=0)
    assert all(torch.isfinite(p).all() for p in m.parameters())
