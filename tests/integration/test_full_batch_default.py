"""Full-batch L-BFGS as the default fit of the inducing-point variational models on small
data (issue 30: the default fit converges in about the time a tuned run takes).

- which likelihoods have a deterministic expected log likelihood (the one predicate of
  ``SVGP.fit`` and the sklearn estimators);
- the default fit of a small SVGP is L-BFGS on all rows, and reaches the optimum: with Z
  fixed, the optimum of the uncollapsed ELBO is Titsias' collapsed bound optimised over
  the hyperparameters (VFE, an independent closed form); for a Bernoulli likelihood, no
  long Adam run gets higher, and further L-BFGS steps gain nothing;
- every explicit choice (optimiser, learning rate, batch size, budget) wins over it, and
  an explicit learning rate with L-BFGS is used;
- ``history_`` says which optimiser ran, on how many rows, and why it stopped.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from small_sets import cls_data, one_torch_thread, reg_data  # noqa: F401 (fixture)

import latentgp as lg
from latentgp.models.svgp import FULL_BATCH_ROWS, LBFGS_CEILING, LBFGS_RULE, PROBED_RULE
from latentgp.training.fit import automatic_defaults

pytestmark = pytest.mark.usefixtures("one_torch_thread")
L = lg.likelihoods


def test_likelihoods_say_whether_their_expectation_is_deterministic():
    closed_or_quadrature = [L.Gaussian(), L.Bernoulli(), L.Poisson(), L.StudentT(),
                            L.HeteroscedasticGaussian(), L.ScaleModulatedGaussian(),
                            L.DirichletClassification(), L.Ordinal(3)]
    assert all(lik.deterministic_expectation for lik in closed_or_quadrature)
    # several latents by Monte Carlo; a softmax without its class count must not raise
    monte_carlo = [L.Softmax(), L.Softmax(3), L.GaussianExperts(2)]
    assert not any(lik.deterministic_expectation for lik in monte_carlo)
    # a plain function: undecided until inspected; the inspection happens on the training
    # targets before the first fit picks its defaults, so first and later fits agree
    own = L.CallableLikelihood(lambda y, f: -((y - f) ** 2))
    assert not own.deterministic_expectation
    X, y = reg_data(n=30)
    first = lg.SVGP(num_inducing=3, likelihood=own).fit(X, y, progress=False)
    assert first.likelihood.differentiable and first.likelihood.deterministic_expectation
    assert first.history_.optimizer == "lbfgs"
    assert first.fit(X, y, progress=False).history_.optimizer == "lbfgs"
    assert L.CallableLikelihood(lambda y, f: -((y - f) ** 2),
                                differentiable=True).deterministic_expectation
    # numpy code (a black box) is not differentiable: Monte Carlo, Adam, for every fit
    box = L.CallableLikelihood(lambda y, f: -np.abs(np.asarray(y) - np.asarray(f)))
    boxed = lg.SVGP(num_inducing=3, likelihood=box).fit(X, y, max_steps=2, progress=False)
    assert boxed.likelihood.evaluates_numpy and not box.deterministic_expectation
    assert boxed.fit(X, y, tol=0.5, progress=False).history_.optimizer == "adam"
    # a declared value is not second-guessed
    declared = L.CallableLikelihood(lambda y, f: -((y - f) ** 2), differentiable=False)
    lg.SVGP(num_inducing=3, likelihood=declared).fit(X, y, max_steps=2, progress=False)
    assert declared.differentiable is False and not declared.deterministic_expectation


def test_which_models_default_to_full_batch_lbfgs():
    small, large = 200, FULL_BATCH_ROWS + 1
    auto = {"optimizer": "lbfgs", "lr": 1.0, "convergence": LBFGS_RULE,
            "ceiling": LBFGS_CEILING, "fixed_inducing": True}
    for model in (lg.SVGP(), lg.SVGP(likelihood="poisson", whiten=False), lg.SHGP(10),
                  lg.SVHGP(10)):
        assert model.fit_defaults(small)["automatic"] == auto, type(model).__name__
    for model in (lg.SHGP(10), lg.SVHGP(10)):
        assert "automatic" not in model.fit_defaults(large)
    assert lg.SVGP().fit_defaults(large)["automatic"]["optimizer"] == "natural"
    # an explicit learn_inducing is the user's: Z is trained (True) or fixed (False) anyway
    for learn in (True, False):
        got = lg.SVGP(learn_inducing=learn).fit_defaults(small)["automatic"]
        assert got == {**auto, "fixed_inducing": False}
    for model in (lg.SVGP(likelihood=L.Softmax(3)), lg.SMGP(2, num_inducing=10)):
        assert "automatic" not in model.fit_defaults(small), type(model).__name__
    # without "automatic", the defaults of before (Adam, minibatches)
    got = lg.SVGP(likelihood="studentt").fit_defaults(large)
    assert got == {"optimizer": "adam", "lr": 0.01, "batch_size": 1024}


def test_which_models_default_to_natural_gradients_on_large_data():
    """SVGP on more than FULL_BATCH_ROWS rows with a Gaussian or Poisson likelihood:
    natural steps on q(u), Adam (lr 0.01) on the rest, minibatches of 1,024 and the probed
    stopping rule (the measured choice, docs/results/time_to_accuracy.md and
    natural_default.md); Adam for the others (Bernoulli included: its Adam default was the
    faster on flights-binary)."""
    large = FULL_BATCH_ROWS + 1
    natural = {"optimizer": "natural", "lr": 0.01, "batch_size": 1024,
               "convergence": PROBED_RULE}
    for model in (lg.SVGP(likelihood="poisson"), lg.SVGP(likelihood="poisson",
                                                         covariance="diag"),
                  lg.SVGP()):
        defaults = model.fit_defaults(large)
        assert defaults["automatic"] == natural
        assert automatic_defaults(defaults, {})["optimizer"] == "natural"
        # an explicit choice gets Adam, as before; naming natural keeps its entry
        assert automatic_defaults(defaults, {"lr": 0.02})["optimizer"] == "adam"
        assert automatic_defaults(defaults, {"optimizer": "Natural"}) == natural
    for model in (lg.SVGP(likelihood="studentt"), lg.SVGP(likelihood=L.Softmax(3)),
                  lg.SVGP(likelihood="negativebinomial"), lg.SVGP(likelihood="bernoulli")):
        assert "automatic" not in model.fit_defaults(large), model.likelihood
    small = lg.SVGP(likelihood="poisson").fit_defaults(FULL_BATCH_ROWS)
    assert small["automatic"]["optimizer"] == "lbfgs"


def test_explicit_choices_set_aside_the_automatic_defaults():
    defaults = lg.SVGP().fit_defaults(100)
    none = dict.fromkeys(("optimizer", "lr", "batch_size", "epochs", "max_steps"))
    assert automatic_defaults(defaults, none)["optimizer"] == "lbfgs"
    assert automatic_defaults(defaults, {**none, "tol": 1e-3})["optimizer"] == "lbfgs"
    for given in ({"lr": 0.02}, {"batch_size": 100}, {"epochs": 3}, {"max_steps": 9},
                  {"optimizer": "adam"}, {"optimizer": "SGD"}):
        got = automatic_defaults(defaults, {**none, **given})
        assert got == {"optimizer": "adam", "lr": 0.01, "batch_size": 100}, given
    # naming L-BFGS keeps its unit step and rule, whatever the budget
    for given in ({"optimizer": "lbfgs"}, {"optimizer": "LBFGS", "max_steps": 4}):
        got = automatic_defaults(defaults, {**none, **given})
        assert got["lr"] == 1.0 and got["convergence"] == LBFGS_RULE, given


def test_explicit_choices_win_in_the_fit_and_history_says_what_ran():
    X, y = reg_data(n=40)

    def fit(**kw):
        return lg.SVGP(num_inducing=4).fit(X, y, seed=0, progress=False, **kw).history_

    for kw in ({"max_steps": 5}, {"epochs": 2}, {"optimizer": "adam", "max_steps": 5},
               {"lr": 0.05, "max_steps": 5}, {"batch_size": 10, "max_steps": 5}):
        h = fit(**kw)
        assert h.optimizer == "adam" and h.reason == "budget", kw
    assert fit(batch_size=10, max_steps=5).batch_size == 10
    h = fit(optimizer="lbfgs", max_steps=6)
    assert (h.optimizer, h.batch_size, h.steps) == ("lbfgs", 40, 6)
    # an explicit learning rate with L-BFGS is used, not taken and ignored
    slow = fit(optimizer="lbfgs", lr=0.05, max_steps=6)
    assert slow.objective != h.objective
    assert fit(tol=1e-2).optimizer == "lbfgs"  # tol is a stopping choice, not an optimiser


def test_default_svgp_fit_reaches_the_collapsed_optimum():
    """At fixed Z, max over q(u) of SVGP's ELBO is the VFE bound; both then maximised
    over the hyperparameters: the default fit's ELBO equals VFE's optimum."""
    X, y = reg_data(n=60)
    Z = X[::10][:6]
    m = lg.SVGP(Z=Z, learn_inducing=False).fit(X, y, seed=0, progress=False)
    h = m.history_
    assert (h.optimizer, h.batch_size, h.reason) == ("lbfgs", 60, "converged")
    assert h.stopped == f"converged at step {h.steps}" and h.steps < 2000
    c = h.convergence
    assert c["kind"] == "deterministic" and c["rtol"] == LBFGS_RULE["rtol"]
    assert c["window"] == 5 and c["calm_windows"] == 2 and c["ceiling"] == 2000
    assert c["change"] < c["bound"]
    vfe = lg.SparseGP(Z=Z, learn_inducing=False).fit(X, y, seed=0, progress=False)
    bound = vfe.log_marginal_likelihood()
    elbo = m.elbo(X, y)
    assert elbo <= bound + 1e-6 * abs(bound)  # an upper bound on any SVGP ELBO at this Z
    assert elbo == pytest.approx(bound, abs=60 * 1e-4)


def test_default_bernoulli_fit_is_a_maximum_no_long_adam_run_beats():
    X, y = cls_data(n=50)

    def make():
        return lg.SVGP(num_inducing=5, likelihood="bernoulli")

    m = make().fit(X, y, seed=0, progress=False)
    assert m.history_.optimizer == "lbfgs" and m.history_.reason == "converged"
    elbo = m.elbo(X, y)
    adam = make().fit(X, y, seed=0, progress=False, optimizer="adam", lr=0.05,
                      max_steps=800)
    assert adam.history_.optimizer == "adam"
    assert elbo >= adam.elbo(X, y) - 50 * 1e-4
    # near a maximum: 200 further L-BFGS steps gain less than 2e-4 nats per point
    more = m.fit(X, y, seed=0, progress=False, optimizer="lbfgs", max_steps=200)
    assert np.isfinite(elbo) and more.elbo(X, y) - elbo < 50 * 2e-4


def test_automatic_fit_keeps_z_unless_learn_inducing_is_given():
    X, y = reg_data(n=40)

    def z_after(**kw):
        m = lg.SVGP(num_inducing=4, **{k: v for k, v in kw.items() if k == "learn_inducing"})
        placed = lg.SVGP(num_inducing=4).initialize(X, y, seed=0).Z.detach().clone()
        fit_kw = {k: v for k, v in kw.items() if k != "learn_inducing"}
        m.fit(X, y, seed=0, progress=False, **fit_kw)
        return m, placed

    m, placed = z_after()  # the automatic L-BFGS: Z stays at its k-means placement
    assert m.history_.optimizer == "lbfgs" and torch.equal(m.Z.detach(), placed)
    assert m.Z_raw.requires_grad  # held for that fit only
    m, placed = z_after(learn_inducing=True)  # asked for: learned by the same L-BFGS
    assert m.history_.optimizer == "lbfgs" and not torch.allclose(m.Z.detach(), placed)
    m, placed = z_after(max_steps=20)  # the Adam defaults learn Z, as before
    assert m.history_.optimizer == "adam" and not torch.allclose(m.Z.detach(), placed)


def test_a_broken_line_search_is_repaired_like_a_non_finite_step(monkeypatch):
    """torch's strong-Wolfe search raises IndexError when its trial values are not finite
    (SHGP's default fit in docs/models/modulated.md met it at step 54): the step is
    undone, the step size halved and the curvature pairs dropped, and the fit goes on."""
    import torch.optim.lbfgs as torch_lbfgs

    real, calls = torch_lbfgs._strong_wolfe, []

    def breaks_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise IndexError("list index out of range")
        return real(*args, **kwargs)

    monkeypatch.setattr(torch_lbfgs, "_strong_wolfe", breaks_once)
    X, y = reg_data(n=40)
    with pytest.warns(lg.TrainingWarning, match="lowered the learning rate to 0.5"):
        m = lg.SVGP(num_inducing=4).fit(X, y, seed=0, progress=False)
    h = m.history_
    assert h.optimizer == "lbfgs" and h.reason == "converged"
    assert h.events[0] == ("step 2: the L-BFGS line search broke down (list index out of "
                           "range): non-finite trial values")
    assert "restored the last good parameters" in h.events[1]
