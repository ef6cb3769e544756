"""Priors and bounds on hyperparameters (issues 25 item 4 and 28 item 4): MAP fitting,
bounds that no optimiser step leaves, and both kept in model files."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

import latentgp as lg


def _data(n=60, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, 1))
    return X, np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=n)


def test_log_prior_is_the_sum_of_the_densities():
    X, y = _data()
    m = lg.ExactGP().fit(X, y, max_steps=2, seed=0)
    m.set_prior("kernel.lengthscale", lg.priors.LogNormal(0.3, 0.7))
    m.set_prior("likelihood.variance", lg.priors.Gamma(2.0, 3.0))
    ls, nv = float(m.kernel.lengthscale.detach()), float(m.likelihood.variance.detach())
    ref = stats.lognorm.logpdf(ls, 0.7, scale=math.exp(0.3)) + stats.gamma.logpdf(
        nv, 2.0, scale=1 / 3.0
    )
    assert abs(float(m.log_prior().detach()) - ref) < 1e-10


def test_a_sharp_prior_pins_the_map_estimate():
    X, y = _data()
    free = lg.ExactGP().fit(X, y, seed=0)
    pinned = lg.ExactGP().set_prior("kernel.lengthscale", lg.priors.LogNormal(math.log(3.0), 1e-3))
    pinned.fit(X, y, seed=0)
    assert abs(float(free.kernel.lengthscale.detach()) - 3.0) > 1.0  # the data say otherwise
    assert abs(float(pinned.kernel.lengthscale.detach()) - 3.0) < 0.01


@pytest.mark.parametrize("model", ["exact", "svgp"])
def test_no_step_leaves_the_bounds(model):
    X, y = _data()
    seen = []

    def record(info):
        seen.append(float(m.kernel.lengthscale.detach()))

    m = lg.ExactGP() if model == "exact" else lg.SVGP(num_inducing=10)
    m.set_bounds("kernel.lengthscale", 1.5, 2.0)
    m.fit(X, y, max_steps=60, lr=0.05 if model == "svgp" else None, seed=0, callbacks=[record])
    assert seen and min(seen) >= 1.5 and max(seen) <= 2.0
    # the unbounded optimum is 1.04: the lower bound is active at the end
    assert abs(seen[-1] - 1.5) < 1e-6


def test_priors_and_bounds_survive_a_model_file(tmp_path):
    X, y = _data()
    m = lg.SVGP(num_inducing=8)
    m.set_prior("kernel.variance", lg.priors.HalfNormal(2.0)).set_bounds(
        "likelihood.variance", 1e-3, None
    )
    m.fit(X, y, max_steps=5, seed=0)
    m.save(tmp_path / "m.lgp")
    back = lg.load(tmp_path / "m.lgp")
    assert back.bounds == {"likelihood.variance": (1e-3, math.inf)}
    assert repr(back.priors["kernel.variance"]) == "HalfNormal(scale=2.0)"
    assert torch.equal(back.log_prior(), m.log_prior())


def test_bad_names_and_values_are_refused():
    X, y = _data()
    with pytest.raises(ValueError, match="'kernel.bogus' is not a hyperparameter"):
        lg.ExactGP().set_prior("kernel.bogus", lg.priors.Gamma()).fit(X, y, max_steps=1)
    with pytest.raises(TypeError, match="latentgp.priors.Prior"):
        lg.ExactGP().set_prior("kernel.lengthscale", torch.distributions.Normal(0, 1))
    with pytest.raises(ValueError, match="must be below upper"):
        lg.ExactGP().set_bounds("kernel.lengthscale", 2.0, 1.0)
    with pytest.raises(ValueError, match="LogNormal scale must be a positive"):
        lg.priors.LogNormal(0.0, -1.0)


@pytest.mark.parametrize("side", ["lower", "upper"])
def test_a_one_sided_bound_projects_to_a_finite_value(side):
    # the projection once clamped to ``hi - 1e-9 * abs(hi)`` = inf - inf = nan for an open
    # upper side (and -inf + inf for an open lower side), writing NaN into the parameter
    X, y = _data()
    m = lg.ExactGP().fit(X, y, max_steps=2, seed=0)
    if side == "lower":
        m.set_bounds("likelihood.variance", lower=0.5)
    else:
        m.set_bounds("kernel.lengthscale", upper=0.2)
    name = "likelihood.variance" if side == "lower" else "kernel.lengthscale"
    value = float(m.likelihood.variance.detach() if side == "lower"
                  else m.kernel.lengthscale.detach())
    assert math.isfinite(value)
    assert abs(value - (0.5 if side == "lower" else 0.2)) < 1e-6, name


def test_a_noise_floor_on_noise_free_clustered_data_fits():
    # Bayesian optimisation's situation (issue 28): noise-free values at points that
    # cluster near an optimum push the noise against its lower bound at every step; each
    # projection wrote NaN (above), and the fit gave up with FloatingPointError
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.uniform(0, 1, (10, 2)), 0.5 + 0.01 * rng.normal(size=(25, 2))])
    y = np.sin(6 * X[:, 0]) + np.cos(4 * X[:, 1])
    m = lg.ExactGP().set_bounds("likelihood.variance", lower=1e-4)
    m.set_prior("likelihood.variance", lg.priors.LogNormal(-4.0, 1.0))
    m.fit(X, y, seed=0)
    noise = float(m.likelihood.variance.detach())
    assert 1e-4 <= noise < 1.01e-4  # the floor is active and respected
    assert not any("non-finite" in str(e) for e in m.history_.events)
