"""EarlyStopping: held-out scoring, stopping after `patience`, restoring the best state."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.training import EarlyStopping


def _data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(80, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=80)
    # held-out targets from another function: the better the fit, the worse the score,
    # so the best score is the first one
    Xv = rng.uniform(-2, 2, size=(30, 1))
    yv = -np.sin(2 * Xv[:, 0])
    return X, y, Xv, yv


def _fit(stop, max_steps=60):
    X, y, Xv, yv = _data()
    model = lg.SVGP(num_inducing=10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X, y, max_steps=max_steps, lr=0.05, seed=0, callbacks=[stop])
    return model, Xv, yv


def test_stops_after_patience_scores_without_improvement():
    stop = EarlyStopping(*_data()[2:], every=5, patience=3)
    model, _, _ = _fit(stop)
    steps = [s for s, _ in stop.scores]
    assert steps == [1, 5, 10, 15]  # step 1, then three misses in a row
    assert model.history_.stopped == "callback" and model.history_.steps == 15
    values = [v for _, v in stop.scores]
    assert stop.best_step == 1 and stop.best_score == max(values) == values[0]


def test_restores_the_parameters_of_the_best_score():
    stop = EarlyStopping(*_data()[2:], every=5, patience=1000)  # never stops
    model, Xv, yv = _fit(stop)
    assert model.history_.steps == 60 and stop.scores[-1][0] == 60
    assert stop.scores[-1][1] < stop.best_score - 1e-3  # the last state was worse
    # the model now scores exactly the best score again: its parameters were put back
    assert stop.score(model) == pytest.approx(stop.best_score, rel=0, abs=1e-12)
    assert any("restored the parameters of step 1" in e for e in model.history_.events)


def test_keeps_the_last_state_when_it_is_the_best_or_restore_is_off():
    X, y, _, _ = _data()
    stop = EarlyStopping(X, y, every=10, patience=1000)  # held out = training data
    model, _, _ = _fit(stop, max_steps=30)
    values = [v for _, v in stop.scores]
    assert values == sorted(values) and stop.best_step == 30  # improving to the end
    assert not any("early stopping" in e for e in model.history_.events)
    assert stop.score(model) == pytest.approx(stop.best_score, abs=1e-12)
    off = EarlyStopping(*_data()[2:], every=5, patience=1000, restore_best=False)
    model, _, _ = _fit(off)
    assert off.score(model) == pytest.approx(off.scores[-1][1], abs=1e-12)


def test_bad_held_out_data_fails_at_the_first_step():
    X, y, Xv, yv = _data()
    stop = EarlyStopping(np.c_[Xv, Xv], yv, every=1000)
    model = lg.SVGP(num_inducing=10)
    with pytest.raises(ValueError, match="column"):
        model.fit(X, y, max_steps=5000, seed=0, callbacks=[stop])
    assert len(stop.scores) == 0


@pytest.mark.parametrize(
    "kw,msg",
    [({"every": 0}, "every"), ({"patience": 1.5}, "patience"), ({"min_delta": -1}, "min_delta"),
     ({"min_delta": float("nan")}, "min_delta")],
)
def test_bad_arguments(kw, msg):
    with pytest.raises(ValueError, match=msg):
        EarlyStopping(np.zeros((2, 1)), np.zeros(2), **kw)


def test_restored_state_is_a_copy_not_a_view():
    X, y, Xv, yv = _data()
    stop = EarlyStopping(Xv, yv, every=5, patience=1000)
    model, _, _ = _fit(stop)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X, y, max_steps=3, lr=0.05, seed=1)  # training on moves the parameters
    moved = any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert moved and stop.best_state is not None
    assert all(torch.equal(stop.best_state[k], before[k]) for k in before)
