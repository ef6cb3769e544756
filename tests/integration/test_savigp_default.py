"""SAVIGP's default fit on small data (issue 30: defaults that converge): full-batch
L-BFGS on the sample-average approximation of the ELBO, the Monte Carlo draws held fixed
for the whole fit, where the reparameterisation estimator is known to apply.

- which models take it (one-latent and several-latent torch likelihoods, an explicit
  ``estimator="reparam"``), which do not (score-function estimators, plain functions not
  declared differentiable, more rows than ``FULL_BATCH_ROWS``);
- the objective is then deterministic: bit-identical at the same parameters, the draws do
  not move during the fit, and the line search makes every step an ascent;
- the rule fires (``history_.reason == "converged"``, no ceiling warning) at the optimum
  of the held-draw objective (further steps gain nothing), and the fitted ELBO,
  re-estimated with fresh draws, is that of a long Adam run (Bernoulli likelihood) and
  below Titsias' collapsed bound (Gaussian likelihood, VFE's closed form);
- explicit choices are the user's: Adam (named, or implied by a learning rate, batch size
  or budget) gets fresh draws at every step.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from small_sets import cls_data, one_torch_thread, reg_data  # noqa: F401 (fixture)

import latentgp as lg
from latentgp.models.svgp import FULL_BATCH_ROWS, LBFGS_CEILING, LBFGS_RULE

pytestmark = pytest.mark.usefixtures("one_torch_thread")
L = lg.likelihoods
AUTO = {"optimizer": "lbfgs", "lr": 1.0, "convergence": LBFGS_RULE, "ceiling": LBFGS_CEILING,
        "fixed_draws": True}


def fresh_elbo(model, X, y, num_samples=4000, repeats=4):
    """The fitted model's ELBO estimated with draws it was not fitted on (mean of
    ``repeats`` streams); the model's own draws are left as they were."""
    held = model.sample_seed
    try:
        values = []
        for k in range(repeats):
            model.sample_seed = 10**9 + k
            values.append(model.elbo(X, y, num_samples=num_samples))
    finally:
        model.sample_seed = held
    return float(np.mean(values)), float(np.std(values) / np.sqrt(repeats))


def test_which_savigp_models_default_to_lbfgs_on_held_draws():
    small, large = 200, FULL_BATCH_ROWS + 1
    for model in (lg.SAVIGP(), lg.SAVIGP(likelihood="bernoulli", posterior="mog2"),
                  lg.SAVIGP(likelihood=L.WarpedGaussian()), lg.SAVIGP(likelihood=L.Softmax(3)),
                  lg.SAVIGP(likelihood=L.Poisson(), estimator="reparam"),
                  lg.SAVIGP(likelihood=lambda y, f: -(y - f) ** 2,
                            estimator="reparam"),
                  lg.SAVIGP(likelihood=L.CallableLikelihood(lambda y, f: -(y - f) ** 2,
                                                            differentiable=True))):
        assert model.fit_defaults(small)["automatic"] == AUTO, model.likelihood
        assert "automatic" not in model.fit_defaults(large)
    # the score-function estimator's surrogate is not the gradient of the held-draw
    # objective, and a plain function is decided at its first call: no L-BFGS default
    for model in (lg.SAVIGP(estimator="score"),
                  lg.SAVIGP(likelihood=lambda y, f: y * f - np.exp(f))):
        assert "automatic" not in model.fit_defaults(small)
    assert lg.SAVIGP().fit_defaults(large) == {"optimizer": "adam", "lr": 0.01,
                                               "batch_size": 1024}


def test_held_draws_make_the_objective_deterministic_and_the_fit_converge():
    X, y = cls_data(n=61)
    seeds = []
    model = lg.SAVIGP(num_inducing=8, likelihood="bernoulli", posterior="fg")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ceiling warning, nothing else either
        model.fit(X, y, seed=0, progress=False,
                  callbacks=[lambda info: seeds.append(info["model"].sample_seed)])
    h = model.history_
    assert (h.optimizer, h.batch_size, h.reason) == ("lbfgs", 61, "converged")
    assert h.steps < LBFGS_CEILING["cap"]
    assert h.convergence["kind"] == "deterministic" and h.convergence["window"] == 5
    assert any("held fixed for the whole fit" in e for e in h.events)
    assert len(set(seeds)) == 1 and seeds[0] == model.sample_seed  # never advanced
    # a strong-Wolfe line search on one deterministic objective ascends at every step
    # (fresh draws at each step would not: their noise is ~0.1 nats here)
    objective = np.array(h.objective)
    assert np.all(np.diff(objective) >= -1e-9 * np.abs(objective[1:]))
    # bit-identical at the same parameters; the ELBO the model reports after the fit is
    # the objective the fit converged on (its held draws)
    Xt, yt = model.check_training_data(X, y)
    with torch.no_grad():
        first = model.objective(Xt, yt, 61)
        again = model.objective(Xt, yt, 61)
    assert torch.equal(first, again)
    assert model.elbo(X, y) == pytest.approx(objective[-1], rel=1e-6)


def test_default_fit_stops_at_the_optimum_of_the_held_draw_objective():
    """Gaussian likelihood, Z fixed: 200 further L-BFGS steps on the same held draws gain
    nothing, and the ELBO re-estimated with fresh draws is below Titsias' collapsed
    bound (VFE, a closed form that no ELBO at this Z exceeds)."""
    X, y = reg_data(n=60)
    Z = X[::10][:6]
    m = lg.SAVIGP(Z=Z, learn_inducing=False, posterior="fg",
                  estimator=lg.SAVIGP.Estimator(num_samples=200))
    m.fit(X, y, seed=0, progress=False)
    h = m.history_
    assert (h.optimizer, h.reason) == ("lbfgs", "converged") and h.steps < 300
    stopped = m.elbo(X, y)
    m.fit(X, y, seed=0, progress=False, optimizer="lbfgs", max_steps=200)
    assert m.elbo(X, y) - stopped < 1e-3
    vfe = lg.SparseGP(Z=Z, learn_inducing=False).fit(X, y, seed=0, progress=False)
    elbo, se = fresh_elbo(m, X, y)
    assert elbo <= vfe.log_marginal_likelihood() + 3 * se


@pytest.mark.slow  # 2,000 Adam steps: about 10 s of CPU, 40 s on a loaded machine
def test_default_fit_reaches_a_long_adam_runs_elbo():
    X, y = cls_data(n=61)

    def make():
        return lg.SAVIGP(num_inducing=8, likelihood="bernoulli", posterior="fg")

    default = make().fit(X, y, seed=0, progress=False)
    adam = make().fit(X, y, seed=0, progress=False, optimizer="adam", lr=0.02, max_steps=2000)
    assert adam.history_.optimizer == "adam" and default.history_.steps < 500
    got, se_got = fresh_elbo(default, X, y)
    want, se_want = fresh_elbo(adam, X, y)
    assert got >= want - 0.05 - 3 * np.hypot(se_got, se_want)


def test_explicit_choices_keep_fresh_draws_at_every_step():
    X, y = cls_data(n=40)

    def fit(**kw):
        m = lg.SAVIGP(num_inducing=5, likelihood="bernoulli", posterior="fg")
        start = m.fit(X, y, seed=0, progress=False, max_steps=1).sample_seed
        m.fit(X, y, seed=0, progress=False, **kw)
        return m, start

    for kw in ({"optimizer": "adam", "max_steps": 7}, {"lr": 0.02, "max_steps": 7},
               {"max_steps": 7}, {"batch_size": 20, "max_steps": 7}):
        m, start = fit(**kw)
        assert m.history_.optimizer == "adam", kw
        assert m.sample_seed == start + 7, kw
        assert not any("held fixed" in e for e in m.history_.events), kw
    m, start = fit(optimizer="lbfgs", max_steps=7)  # naming L-BFGS: held draws
    assert m.sample_seed == start and m.history_.optimizer == "lbfgs"
    m = lg.SAVIGP(num_inducing=5, likelihood="bernoulli", estimator="score")
    m.fit(X, y, seed=0, progress=False, max_steps=3)
    assert m.history_.optimizer == "adam"
