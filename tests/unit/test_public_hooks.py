"""Public hooks that benchmarks use instead of model internals: ``GPModel.scale_targets``,
``SLGP.predict_components`` and ``SAVIGP.advance_draws``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import latentgp as lg


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 2))
    return X, 3.0 + 2.0 * np.sin(X[:, 0]) + 0.1 * rng.standard_normal(40)


def test_scale_targets_gives_the_training_units(data):
    X, y = data
    m = lg.ExactGP().initialize(X, y)
    got = m.scale_targets(y)
    want = (torch.as_tensor(y) - m.y_mean[0]) / m.y_scale[0]
    torch.testing.assert_close(got, want)
    m.objective(torch.as_tensor(X), got, len(y))  # the y that objective() takes


def test_scale_targets_needs_a_built_model(data):
    with pytest.raises(Exception, match="fit|initial"):
        lg.ExactGP().scale_targets(data[1])


def test_slgp_predict_components_mix_to_predict_y(data):
    X, y = data
    m = lg.SLGP(latent_dim=1, num_inducing=8, num_samples=2, hidden=(8,), num_predict_samples=6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.fit(X, y, max_steps=2, seed=0)
    means, variances = m.predict_components(X[:5])
    assert means.shape == variances.shape == (6, 5, 1)
    assert np.all(variances > 0)
    mean, _ = m.predict_y(X[:5])
    np.testing.assert_allclose(means[..., 0].mean(0), mean, rtol=1e-10)
    again, _ = m.predict_components(X[:5], num_samples=2, seed=3)
    np.testing.assert_array_equal(again, m.predict_components(X[:5], num_samples=2, seed=3)[0])


def test_savigp_advance_draws_gives_fresh_draws(data):
    X, y = data
    m = lg.SAVIGP(num_inducing=5)
    m.fit(X, y, max_steps=1, seed=0)
    with torch.no_grad():
        before = m.elbo(X, y)
        assert m.elbo(X, y) == before  # fixed draws within a step
        m.advance_draws()
        assert m.elbo(X, y) != before
