"""Issue 29, item 3: a fit that ends at a degenerate solution says so.

Each degenerate ending seen in the issue is reproduced and must end with one
:class:`latentgp.TrainingWarning` naming the cause and the remedy, recorded in
``history_.events``: an initial lengthscale of 1e-6 or 1e6 (the predictor stays flat:
gradients vanish), ``lr=10`` on SVGP (the lengthscale runs to ~1e-24), and a noise
variance running to zero while the objective climbs.  A sound fit of every public model
family gives no such warning and no such event.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from model_families import FAMILIES, family_data

import latentgp as lg
from latentgp.training import diagnostics


def _fit_recording(make, X, y, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = make().fit(X, y, seed=0, progress=False, **kw)
    found = [str(w.message) for w in caught if issubclass(w.category, lg.TrainingWarning)]
    return model, found


def _degenerate(events):
    return [e for e in events if e.startswith("degenerate fit")]


@pytest.mark.parametrize(
    ("lengthscale", "kw", "cause"),
    [
        (1e-6, {}, "times the spread of its input column, so the kernel sees every training"),
        (1e6, {}, "in every column, so the kernel is constant over the data"),
        (None, {"lr": 10.0}, "times the spread of its input column, so the kernel sees every"),
    ],
    ids=["lengthscale 1e-6", "lengthscale 1e6", "lr=10"],
)
def test_degenerate_svgp_fits_warn_and_record(lengthscale, kw, cause):
    X, y = family_data("regression", n=60)
    make = lambda: lg.SVGP(num_inducing=10, kernel=lg.kernels.RBF(lengthscale=lengthscale))  # noqa: E731
    model, found = _fit_recording(make, X, y, max_steps=150, **kw)
    assert any(cause in m for m in found), found
    assert all("Remedy: " in m for m in found), found
    # the flat predictor itself is found too, and every warning is an event of the fit
    assert any("the predictions are constant to round-off" in m for m in found), found
    assert _degenerate(model.history_.events) == found


def test_lr_10_drives_the_lengthscale_to_round_off():
    """The issue's numbers: lr=10 leaves an SVGP lengthscale ~1e-24 x the input spread."""
    X, y = family_data("regression", n=60)
    model, found = _fit_recording(lambda: lg.SVGP(num_inducing=10), X, y, max_steps=150, lr=10.0)
    ratio = (model.kernel.lengthscale / model.kernel.input_unit).min().item()
    assert ratio < diagnostics.MIN_LENGTHSCALE_RATIO
    assert f"reached {ratio:.3g} times" in found[0]


def test_exact_gp_flat_at_a_huge_lengthscale_warns_even_when_it_converges_at_once():
    X, y = family_data("regression", n=40)
    make = lambda: lg.ExactGP(kernel=lg.kernels.RBF(lengthscale=1e6))  # noqa: E731
    model, found = _fit_recording(make, X, y)
    assert model.history_.stopped.startswith("converged")
    assert len(found) == 2 and "constant over the data" in found[0], found


def test_noise_collapsing_while_the_objective_climbs_warns():
    """Noise-free targets, no lower bound on the noise, Adam still climbing at the end."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(40, 1))
    y = np.sin(X[:, 0])
    make = lambda: lg.ExactGP(likelihood=lg.likelihoods.Gaussian(min_variance=0.0))  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lg.JitterWarning)
        model, found = _fit_recording(make, X, y, optimizer="adam", lr=0.1, max_steps=300)
    assert [m for m in found if "predictive variance collapsed" in m], found
    assert "min_variance=" in found[0]
    assert _degenerate(model.history_.events) == found
    # the same data with the default noise floor is not degenerate
    _, found = _fit_recording(lg.ExactGP, X, y, optimizer="adam", lr=0.1, max_steps=300)
    assert not found


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_a_sound_fit_of_every_family_gives_no_diagnostic(family):
    X, y = family_data(family.task)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = family.fitted(X, y)
    found = [str(w.message) for w in caught if issubclass(w.category, lg.TrainingWarning)]
    assert not found, found
    inner = getattr(model, "model_", model)  # the sklearn estimators' fitted model
    assert not _degenerate(inner.history_.events)


def test_short_budgets_and_constant_targets_are_not_diagnosed():
    """A 2-step smoke test (q(u) still at its zero start) and constant targets (a constant
    predictor is right) are not degenerate solutions."""
    X, y = family_data("regression")
    _, found = _fit_recording(lambda: lg.SVGP(num_inducing=8), X, y, max_steps=2, lr=1e-12)
    assert not found
    _, found = _fit_recording(lambda: lg.SVGP(num_inducing=8), X, np.full(len(y), 3.0),
                              max_steps=40)
    assert not found
