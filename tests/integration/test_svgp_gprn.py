"""GPRN (several outputs, Q + PQ latents) under SVGP, the common backbone."""

import numpy as np
import pytest

import latentgp as lg


def _data(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, 1))
    g = np.sin(X[:, 0])
    W = np.stack([np.ones(n), np.cos(X[:, 0])], 1)
    return X, W * g[:, None] + 0.05 * rng.standard_normal((n, 2))


def test_svgp_gprn_fits_two_outputs_to_the_noise_level():
    X, Y = _data()
    lik = lg.likelihoods.GPRN(num_outputs=2, num_nodes=1, variance=0.01)
    m = lg.SVGP(num_inducing=20, likelihood=lik)
    m.fit(X, Y, max_steps=400, lr=0.03, seed=0, progress=False)
    Xt, Yt = _data(200, seed=1)
    mu, var = m.predict_y(Xt)
    assert mu.shape == (200, 2) and var.shape == (200, 2)
    rmse = np.sqrt(((mu - Yt) ** 2).mean(0))
    assert np.all(rmse < 0.1), rmse  # noise sd 0.05; the signal sd is about 0.7
    assert np.all(var > 0)
    # standardised residuals: the mean-field q(W) q(g) makes the predictive variance
    # conservative (about 0.4 here), never overconfident
    z2 = ((mu - Yt) ** 2 / var).mean()
    assert 0.25 < z2 < 1.5


def test_gprn_targets_must_have_p_columns_and_softmax_labels_stay_1d():
    X, Y = _data(50)
    lik = lg.likelihoods.GPRN(num_outputs=2, num_nodes=1)
    with pytest.raises(ValueError, match=r"shape \(N, 2\)"):
        lg.SVGP(num_inducing=5, likelihood=lik).fit(X, Y[:, :1], max_steps=1)
    with pytest.raises(ValueError, match="1-D array of class labels"):
        lg.SVGP(num_inducing=5, likelihood="softmax").fit(X, np.zeros((50, 2)), max_steps=1)
