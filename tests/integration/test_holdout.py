"""The automatic held-out stopping rule of a fit without a budget (training.holdout):
when it runs, how many rows it holds out, that it keeps the best parameters, and that
SLGP's default fit with it is close to an exact GP on small data where a long fit on the
bound is not."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.training import EarlyStopping
from latentgp.training.holdout import HOLDOUT_DEFAULTS, holdout_rows


@pytest.mark.parametrize(
    "n,rows",
    [(19, 0), (20, 10), (30, 15), (39, 19), (40, 20), (93, 20), (199, 20), (201, 21),
     (456, 46), (19_999, 2000), (10**6, 2000)],
)
def test_rows_held_out(n, rows):
    # clamp(ceil(0.1 N), 20, 2000) capped at half the rows, and none below 10
    assert holdout_rows(n, {}) == rows
    wide = {"fraction": 0.25, "min_rows": 1, "max_rows": 10**9}
    assert holdout_rows(n, wide) == math.ceil(n / 4)


def _small(n=60, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 1))
    y = np.sin(2 * X[:, 0]) + 0.2 * rng.normal(size=n)
    return X, y


def _tiny_slgp():
    return lg.SLGP(num_inducing=8, hidden=(8,), num_samples=2, num_predict_samples=20)


def _capped(model, steps, **extra):
    """``model`` with its fit defaults' step ceiling at ``steps`` (and ``extra`` keys)."""
    base = model.fit_defaults
    model.fit_defaults = lambda N: {**base(N), "ceiling": {"floor": steps, "epochs": steps},
                                    **extra}
    return model


def _fit(model, X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(X, y, seed=3, progress=False, **kw)


def test_slgp_default_fit_holds_out_and_restores_the_best_parameters():
    X, y = _small()
    settings = {**HOLDOUT_DEFAULTS, "every": 10, "patience": 2, "relative_patience": 0.0}
    model = _capped(_tiny_slgp(), 300, holdout=settings)
    before = torch.get_rng_state()
    _fit(model, X, y)
    assert torch.equal(torch.get_rng_state(), before)  # the split's generator is private
    rec = model.history_.holdout
    assert rec["rows"] == 20 and rec["train_rows"] == 40
    # the held-out rows, re-derived: the first 20 of a permutation seeded with the fit's seed
    held = torch.randperm(60, generator=torch.Generator().manual_seed(3))[:20].numpy()
    stop = EarlyStopping(X[held], y[held])
    assert stop.score(model) == pytest.approx(rec["best_score"], abs=1e-10)
    assert rec["best_score"] == max(v for _, v in rec["scores"])
    steps = [s for s, _ in rec["scores"]]
    assert steps[0] == 1 and all(s % 10 == 0 for s in steps[1:])
    h = model.history_
    if h.steps < 300:  # stopped by the rule: two misses after the best score
        assert h.reason == "converged" and "held-out" in h.stopped
        assert steps[-1] == h.steps and len([s for s in steps if s > rec["best_step"]]) == 2
    assert any("20 of 60 rows held out" in e for e in h.events)
    # trained on 40 rows: the inducing inputs were capped at them, not at 60
    assert model.num_inducing == 8


@pytest.mark.parametrize(
    "kw",
    [{"max_steps": 5}, {"epochs": 2}, {"tol": 1e-3, "max_steps": None}],
)
def test_an_explicit_budget_or_tolerance_trains_on_every_row(kw):
    X, y = _small(30)
    model = _capped(
        lg.SLGP(num_inducing=30, hidden=(8,), num_samples=2, num_predict_samples=10), 5
    )
    _fit(model, X, y, **kw)
    assert model.history_.holdout == {}
    assert model.num_inducing == 30  # all 30 rows (held out: 10, which would cap it at 20)


def test_a_users_early_stopping_replaces_the_rule():
    X, y = _small(40)
    stop = EarlyStopping(X[:10], y[:10], every=5, patience=1)
    model = _capped(
        lg.SLGP(num_inducing=40, hidden=(8,), num_samples=2, num_predict_samples=10), 20
    )
    _fit(model, X, y, callbacks=[stop])
    assert model.history_.holdout == {} and model.num_inducing == 40 and stop.scores


def test_too_few_rows_and_other_models_get_no_rule():
    X, y = _small(19)
    model = _capped(
        lg.SLGP(num_inducing=19, hidden=(8,), num_samples=2, num_predict_samples=10), 10
    )
    _fit(model, X, y)
    assert model.history_.holdout == {} and model.num_inducing == 19
    assert "holdout" in lg.SLGP().fit_defaults(100)
    assert "holdout" not in lg.SVGP().fit_defaults(100)
    svgp = _fit(_capped(lg.SVGP(num_inducing=5), 10), *_small(40))
    assert svgp.history_.holdout == {}


def test_relative_patience_waits_in_proportion_to_the_best_step():
    X, y = _small(80)
    rng = np.random.default_rng(1)
    Xv = rng.uniform(-2, 2, size=(30, 1))
    yv = np.sin(2 * Xv[:, 0])
    # a held-out set the fit keeps improving on for a while, then a fixed budget: the
    # stop comes after `patience` misses AND half the best step since the best
    stop = EarlyStopping(Xv, yv, every=5, patience=1, relative_patience=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lg.SVGP(num_inducing=10).fit(X, y, max_steps=400, lr=0.05, seed=0, callbacks=[stop])
    last = stop.scores[-1][0]
    if last < 400:
        assert last - stop.best_step >= 0.5 * stop.best_step
        # and not later than the first score that satisfies both conditions
        assert last - 5 - stop.best_step < max(5, 0.5 * stop.best_step)
    with pytest.raises(ValueError, match="relative_patience"):
        EarlyStopping(Xv, yv, relative_patience=-0.1)


def _hetero(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, size=(n, 1))
    y = np.sin(6 * X[:, 0]) + (0.05 + 0.4 * X[:, 0]) * rng.normal(size=n)
    return X, y


@pytest.mark.slow
def test_slgp_default_on_small_data_is_close_to_the_exact_gp():
    # 90 training rows, as mcycle: before the rule, the default fit ran to its ceiling with
    # the encoder networks memorising the data (mcycle test NLPD 75.6 against 4.6).  One
    # fit is chaotic in floating-point order (the same seed gave 0.67 on one thread and
    # 1.03 on two with 10 held-out rows), so the claim is about a few seeds' fits.
    X, y = _hetero(90, 0)
    Xt, yt = _hetero(400, 1)
    exact = _fit(lg.ExactGP(), X, y)
    e = -float(np.mean(exact.log_predictive_density(Xt, yt)))
    nlpd = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the measurement below is on one thread (see above)
    try:
        for seed in range(3):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                slgp = lg.SLGP().fit(X, y, seed=seed, progress=False)
            assert slgp.history_.holdout["rows"] == 20  # clamp(ceil(9.0), 20, 2000)
            nlpd.append(-float(np.mean(slgp.log_predictive_density(Xt, yt))))
    finally:
        torch.set_num_threads(threads)
    # measured over fit seeds 0-19 (one thread; docs/results/holdout_rule.md): exact 0.241;
    # the default's test NLPD median 0.354, mean 0.380, worst 0.69, 16 of 20 below e + 0.2
    # (with 10 held-out rows: median 0.393, worst 0.78); seeds 0-2: 0.408, 0.456, 0.334
    # (on two threads 0.503, 0.419, 0.460: another draw from the same spread); the same
    # SLGP on every row for 1,000 / 3,000 steps: 0.782 / 3.394
    assert float(np.median(nlpd)) < e + 0.2, (nlpd, e)
    assert max(nlpd) < e + 0.5, (nlpd, e)


def test_a_stop_by_another_callback_keeps_its_reason():
    X, y = _small(40)
    model = _capped(_tiny_slgp(), 200)
    _fit(model, X, y, callbacks=[lambda info: info["step"] >= 7])
    h = model.history_
    assert h.steps == 7 and h.reason == "callback" and h.holdout["rows"] == 20
