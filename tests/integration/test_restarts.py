"""Multi-start fitting (issue 28, item 4): starts drawn from priors or bounds, the best
kept, failed starts skipped and reported, the caller's random state untouched."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.training import fit_with_restarts
from latentgp.training.restarts import draw_start


def _data():
    rng = np.random.default_rng(1)
    X = rng.uniform(-3, 3, (40, 1))
    return X, np.sin(3 * X[:, 0]) + 0.1 * rng.normal(size=40)


def _stuck():
    """A start at lengthscale 30 stops in the optimum that calls everything noise."""
    return lg.ExactGP(kernel=lg.kernels.RBF(lengthscale=30.0)).set_bounds(
        "kernel.lengthscale", 0.01, 100.0
    )


def test_restarts_escape_the_noise_optimum():
    X, y = _data()
    one = _stuck().fit(X, y, seed=0)
    best = fit_with_restarts(_stuck(), X, y, restarts=6, seed=0)
    # measured: -43.66 from the single start, 16.30 with restarts
    assert best.history_.objective[-1] > one.history_.objective[-1] + 50
    assert float(best.kernel.lengthscale.detach()) < 2.0
    starts = [e for e in best.history_.events if e.startswith("start ")]
    assert len(starts) == 6 and best.history_.events[-1].startswith("kept start")
    finals = [float(e.rsplit(" ", 1)[1]) for e in starts]
    assert best.history_.objective[-1] == pytest.approx(max(finals), rel=1e-5)


def test_starts_are_drawn_from_priors_and_bounds():
    X, y = _data()
    m = lg.ExactGP().set_prior("kernel.lengthscale", lg.priors.LogNormal(np.log(0.3), 1e-3))
    m.set_bounds("likelihood.variance", 0.02, 0.05)
    m.initialize(X, y, seed=0)
    draw_start(m, torch.Generator().manual_seed(7))
    assert abs(float(m.kernel.lengthscale.detach()) - 0.3) < 0.01
    assert 0.02 <= float(m.likelihood.variance.detach()) <= 0.05


def test_restarts_are_reproducible_and_leave_the_global_rng_alone():
    X, y = _data()
    state = torch.get_rng_state()
    a = fit_with_restarts(_stuck(), X, y, restarts=3, seed=4, max_steps=3)
    b = fit_with_restarts(_stuck(), X, y, restarts=3, seed=4, max_steps=3)
    assert torch.equal(torch.get_rng_state(), state)
    for p, q in zip(a.state_dict().values(), b.state_dict().values(), strict=True):
        assert torch.equal(p, q)


def test_a_failing_start_is_skipped_and_reported():
    X, y = _data()
    calls = {"n": 0}

    def fail_in_second_start(info):
        if info["step"] == 1:
            calls["n"] += 1
            if calls["n"] == 2:
                raise FloatingPointError("injected failure")

    m = fit_with_restarts(_stuck(), X, y, restarts=3, seed=0, callbacks=[fail_in_second_start])
    assert any("start 1: failed (FloatingPointError: injected failure)" in e
               for e in m.history_.events)
    assert np.isfinite(m.history_.objective[-1])


def test_all_starts_failing_raises():
    X, y = _data()

    def always(info):
        raise FloatingPointError("injected")

    with pytest.raises(RuntimeError, match="all 2 starts failed"):
        fit_with_restarts(_stuck(), X, y, restarts=2, callbacks=[always])
