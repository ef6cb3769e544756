"""Fit until converged, by default (issue 30, item 1).

- the rule itself (``latentgp.training.convergence``): window means, the noise allowance
  and the ceiling against closed forms;
- a default fit of a small problem stops with reason "converged" before its ceiling, and
  its test NLPD is within tolerance of a long run's;
- a fit that cannot converge within its ceiling stops there and warns;
- explicit budgets (``epochs``/``max_steps``, with or without ``tol``) give the same
  objective traces as before the convergence default (recorded from the code before it);
- a default fit interrupted mid-window and resumed from its checkpoint equals the
  uninterrupted one (the rule's windows are part of the checkpoint).
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib

import numpy as np
import pytest
import torch
from small_sets import cls_data, one_torch_thread, reg_data  # noqa: F401 (fixture)

import latentgp as lg
from latentgp.training.convergence import (
    Convergence,
    StoppingRule,
    default_ceiling,
    default_rule,
    step_ceiling,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")
DATA = pathlib.Path(__file__).resolve().parents[1] / "data"


# ------------------------------------------------------------------------ the rule --
def _feed(conv: Convergence, values) -> list[int]:
    """Steps (1-based) after which ``conv`` said converged."""
    done = []
    for step, v in enumerate(values, start=1):
        conv.add(v)
        if conv.end_of_step(step):
            done.append(step)
    return done


def test_window_means_and_bound_match_closed_form():
    rule = StoppingRule(window=4, rtol=0.01, floor=1.0, z=2.0, patience=1)
    conv = Convergence(rule, scale=0.5)  # values are halved (objective per point)
    raw = [2.0, 2.02, 2.0, 2.02, 2.4, 2.42, 2.4, 2.42]
    assert _feed(conv, raw) == []  # a change of 0.2 against a bound of about 0.02
    v = [0.5 * r for r in raw]
    m1, m2 = np.mean(v[:4]), np.mean(v[4:])
    d1, d2 = np.diff(v[:4]), np.diff(v[4:])
    ss = ((d1 - d1.mean()) ** 2).sum() + ((d2 - d2.mean()) ** 2).sum()
    var = ss / (2 * (2 + 2))  # var(noise) = var(first differences) / 2, dof (4-2)+(4-2)
    se = math.sqrt(var * (1 / 4 + 1 / 4))
    assert conv.last["change"] == pytest.approx(abs(m2 - m1), rel=1e-14)
    assert conv.last["noise_se"] == pytest.approx(se, rel=1e-14)
    assert conv.last["bound"] == pytest.approx(0.01 * max(abs(m1), 1.0) + 2 * se, rel=1e-14)
    assert conv.last["change"] > conv.last["bound"] and conv.calm == 0


def test_noise_allowance_lets_a_flat_noisy_objective_converge():
    rng = np.random.default_rng(0)
    flat = -1.0 + 0.05 * rng.standard_normal(2000)  # no trend, noise 0.05 per step
    quiet = StoppingRule(window=50, rtol=1e-4, z=0.0, patience=2)
    noisy = StoppingRule(window=50, rtol=1e-4, z=2.0, patience=2)
    assert _feed(Convergence(quiet), flat) == []  # noise alone keeps changes above 1e-4
    assert _feed(Convergence(noisy), flat)[0] <= 300
    # a steady trend of 1e-3 per window-step is never noise: it does not stop
    trend = -1.0 + 1e-3 * np.arange(2000) + 0.01 * rng.standard_normal(2000)
    assert _feed(Convergence(noisy), trend) == []


def test_growing_windows_see_a_slow_trend_that_fixed_windows_take_for_noise():
    # the late phase of a minibatch fit: after a fast start the objective still improves
    # by 2e-5 per step, under noise 0.03 per step.  Per 50-step window that trend moves
    # the mean by 1e-3, below one standard error of the difference of two window means
    # (about 0.006): fixed windows stop.  A window a fifth of the run long grows the
    # trend's change linearly and shrinks the noise allowance like 1/sqrt(window): it
    # keeps going while the trend lasts (checked on 40 seeds while writing this test).
    rng = np.random.default_rng(0)
    t = np.arange(6000)
    noise = 0.03 * rng.standard_normal(t.size)
    trend = -0.7 + 0.3 * np.exp(-t / 300) - 2e-5 * t
    fixed = StoppingRule(window=50, rtol=2e-4, z=1.0, patience=2)
    growing = dataclasses.replace(fixed, growth=0.2)
    assert _feed(Convergence(fixed), trend + noise)[0] < 1200
    assert _feed(Convergence(growing), trend + noise) == []
    # once the objective is flat (from step 2,000), the growing rule stops within about
    # twice the steps it had when the trend ended
    flat = np.where(t < 2000, trend, trend[1999]) + noise
    assert 2000 < _feed(Convergence(growing), flat)[0] < 4000
    # window lengths: max(window, ceil(growth * steps so far))
    assert [growing.length(s) for s in (0, 100, 250, 251, 1000)] == [50, 50, 50, 51, 200]


def test_grown_window_tolerance_is_per_base_window():
    # rtol is a change per base window: a window 1.5x as long gets 1.5x the tolerance,
    # so growing windows are no stricter about a steady trend than fixed ones
    rule = StoppingRule(window=10, rtol=1e-3, z=0.0, patience=9, growth=0.5)
    conv = Convergence(rule)
    v = -3.0 + 1e-4 * np.arange(45)
    assert _feed(conv, v) == []  # windows [0,10) [10,20) [20,30) [30,45)
    prev, cur = v[20:30].mean(), v[30:45].mean()
    assert conv.last["change"] == pytest.approx(cur - prev, rel=1e-12)
    assert conv.last["bound"] == pytest.approx(1e-3 * abs(prev) * 1.5, rel=1e-14)


def test_growing_window_state_resumes_exactly():
    rule = default_rule(1, deterministic=False)
    assert rule.growth == 0.2
    rng = np.random.default_rng(2)
    values = -1.0 + 1.0 / np.arange(1, 4001) + 0.01 * rng.standard_normal(4000)
    whole = _feed(Convergence(rule), values)
    first = Convergence(rule)
    cut = 555  # mid-window (windows end at 519 and 623)
    assert _feed(first, values[:cut]) == []
    second = Convergence(rule)
    second.load(json.loads(json.dumps(first.state())))
    rest = [s + cut for s in _feed_from(second, values[cut:], cut)]
    assert whole and rest[: len(whole)] == whole


def _feed_from(conv: Convergence, values, done_steps: int) -> list[int]:
    out = []
    for i, v in enumerate(values, start=1):
        conv.add(v)
        if conv.end_of_step(done_steps + i):
            out.append(i)
    return out


def test_a_probe_replaces_the_window_means_by_the_slope_of_its_values():
    # the stochastic rule with a probe (StepTask.probe: the objective on fixed rows) probes
    # probe_points times per window and tests the least-squares slope of those values:
    # calm when |b| + probe_z se(b) < probe_rate * max(|mean|, 1).  Re-derived here with
    # numpy for g(t) = -1 - 0.5 e^(-t/400) (per point; the probe returns it in internal
    # units, x2, and scale 0.5 undoes that); the minibatch values' noise changes nothing
    rule = StoppingRule(window=50, rtol=2e-4, z=1.0, patience=2, growth=0.2,
                        probe_rate=2e-5, probe_z=2.0, probe_points=8)
    g = lambda t: -1.0 - 0.5 * np.exp(-np.asarray(t, dtype=float) / 400.0)  # noqa: E731
    expected, start, calm = None, 0, 0
    while expected is None:
        length = rule.length(start)
        every = max(1, length // 8)
        x = np.arange(start + every, start + length + 1, every)
        x = x[x - start <= length]
        b, a0 = np.polyfit(x, g(x), 1)
        res = g(x) - (a0 + b * x)
        se = math.sqrt((res ** 2).sum() / (len(x) - 2) / ((x - x.mean()) ** 2).sum())
        calm = calm + 1 if abs(b) + 2.0 * se < 2e-5 * max(abs(g(x).mean()), 1.0) else 0
        start += length
        if calm >= 2:
            expected = start
    step = [0]
    rng = np.random.default_rng(0)
    conv = Convergence(rule, scale=0.5, probe=lambda: 2.0 * float(g(step[0])))
    stopped = None
    for k in range(1, 50001):
        step[0] = k
        conv.add(2.0 * float(g(k)) + 3.0 * rng.standard_normal())  # noise 30x the trend
        if conv.end_of_step(k):
            stopped = k
            break
    assert stopped == expected
    assert conv.last["probes"] == 8.0 and conv.last["change"] < conv.last["bound"]
    assert "fixed rows" in conv.describe()
    # the same rule without a probe (or with probe_rate 0) compares the noisy window means
    plain = Convergence(rule, scale=0.5)
    off = Convergence(dataclasses.replace(rule, probe_rate=0.0), scale=0.5, probe=lambda: 0.0)
    assert plain.probe is None and off.probe is None
    rng = np.random.default_rng(0)
    assert _feed(plain, [2.0 * float(g(k)) + 3.0 * rng.standard_normal()
                         for k in range(1, 50001)])[0] < expected / 2


def test_probed_state_resumes_exactly():
    from latentgp.models.svgp import PROBED_RULE

    assert default_rule(1, deterministic=False).probe_rate == 0.0  # no probe by default
    rule = default_rule(1, deterministic=False, overrides=PROBED_RULE)
    assert (rule.probe_rate, rule.probe_z) == (2e-5, 2.0)
    g = lambda t: -1.0 + 1.0 / (1.0 + t / 50.0)  # noqa: E731
    step = [0]

    def run(conv, lo, hi):
        out = []
        for k in range(lo, hi):
            step[0] = k
            conv.add(g(k))
            if conv.end_of_step(k):
                out.append(k)
        return out

    whole = run(Convergence(rule, probe=lambda: g(step[0])), 1, 20001)
    first = Convergence(rule, probe=lambda: g(step[0]))
    cut = 700  # mid-window
    assert run(first, 1, cut) == []
    second = Convergence(rule, probe=lambda: g(step[0]))
    second.load(json.loads(json.dumps(first.state())))
    assert whole and run(second, cut, 20001)[:1] == whole[:1]


def test_deterministic_rule_is_relative_change_per_step():
    rule = default_rule(7, deterministic=True)
    assert (rule.window, rule.kind, rule.z) == (1, "deterministic", 0.0)
    values = [-10.0 + 2.0 ** -k for k in range(60)]  # halving improvements
    steps = _feed(Convergence(rule), values)
    # calm when 2^-k < rtol * 10 (after the first step); patience windows in a row
    first_calm = next(k for k in range(1, 60) if 2.0 ** -k < rule.rtol * (10 - 2.0 ** -(k - 1)))
    assert steps[0] == first_calm + rule.patience


def test_ceiling_is_proportional_to_the_data_with_floor_and_cap():
    assert step_ceiling(10, epochs=500, floor=3000, cap=30000) == 5000
    assert step_ceiling(1, epochs=500, floor=3000, cap=30000) == 3000
    assert step_ceiling(1000, epochs=500, floor=3000, cap=30000) == 30000
    assert default_ceiling(20, deterministic=False) == 10000
    assert default_ceiling(1, deterministic=True) == 1000
    assert default_ceiling(1, deterministic=False, overrides={"floor": 7}) == 500
    stochastic = default_rule(3, deterministic=False)
    assert stochastic.window == 50 and default_rule(80, deterministic=False).window == 80


# ---------------------------------------------------------------- default fits --
def _nlpd(model, X, y) -> float:
    return -float(np.mean(model.log_predictive_density(X, y)))


def test_default_exact_fit_converges_like_a_long_run():
    X, y = reg_data(n=120)
    Xt, yt = reg_data(n=200, seed=5)
    m = lg.ExactGP().fit(X, y, progress=False)
    h = m.history_
    assert h.reason == "converged" and h.steps < h.convergence["ceiling"] == 1000
    assert h.convergence["kind"] == "deterministic" and h.convergence["calm_windows"] == 3
    long = lg.ExactGP().fit(X, y, max_steps=300, progress=False)
    assert long.history_.reason == "budget"
    assert _nlpd(m, Xt, yt) == pytest.approx(_nlpd(long, Xt, yt), abs=1e-4)


@pytest.mark.slow
def test_default_svgp_fit_converges_like_a_long_run():
    X, y = reg_data(n=150)
    Xt, yt = reg_data(n=200, seed=5)
    m = lg.SVGP(num_inducing=10).fit(X, y, batch_size=50, seed=0, progress=False)
    h = m.history_
    assert h.reason == "converged" and h.stopped == f"converged at step {h.steps}"
    assert h.steps < h.convergence["ceiling"] == 3000
    assert h.convergence["kind"] == "stochastic" and h.convergence["window"] == 50
    assert h.convergence["change"] < h.convergence["bound"]
    long = lg.SVGP(num_inducing=10).fit(X, y, batch_size=50, max_steps=2 * h.steps, seed=0,
                                        progress=False)
    assert _nlpd(m, Xt, yt) == pytest.approx(_nlpd(long, Xt, yt), abs=0.03)


class _LowCeilingSVGP(lg.SVGP):
    """An SVGP whose automatic fit has a ceiling of 200 steps (through the public
    ``fit_defaults`` hook)."""

    def fit_defaults(self, N):
        return {**super().fit_defaults(N), "ceiling": {"floor": 200, "epochs": 1, "cap": 200}}


def test_fit_that_cannot_converge_stops_at_the_ceiling_and_warns():
    X, y = reg_data(n=100)
    with pytest.warns(lg.TrainingWarning, match="ceiling of 200 steps without converging"):
        m = _LowCeilingSVGP(num_inducing=10).fit(X, y, lr=1e-3, seed=0, progress=False)
    h = m.history_
    assert h.reason == "ceiling" and h.steps == 200
    assert h.stopped == "step ceiling reached (200 steps) before convergence"
    assert h.convergence["change"] >= h.convergence["bound"]


def test_explicit_budget_never_stops_early_and_never_warns():
    X, y = reg_data(n=100)
    with warnings_as_errors():
        m = _LowCeilingSVGP(num_inducing=10).fit(X, y, max_steps=250, lr=1e-3, seed=0,
                                                 progress=False)
    assert m.history_.reason == "budget" and m.history_.steps == 250


class warnings_as_errors:
    def __enter__(self):
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("error", lg.TrainingWarning)

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)


# ------------------------------------------------------------ budgets unchanged --
def _budget_cases():
    X, y = reg_data()
    Xc, yc = cls_data()
    return {
        "svgp_max_steps": (lambda: lg.SVGP(num_inducing=8), X, y),
        "svgp_epochs": (lambda: lg.SVGP(num_inducing=8, likelihood="bernoulli"), Xc, yc),
        "exact_max_steps": (lambda: lg.ExactGP(), X, y),
        "exact_tol": (lambda: lg.ExactGP(), X, y),
        "sep_max_steps": (lambda: lg.SEP(num_inducing=6), Xc, yc),
        # recorded with the seed's gradient mean step and learned hyperparameters from
        # their initial values, QSGP's defaults then
        "qsgp_max_steps": (
            lambda: lg.QSGP(num_basis=60, basis_batch=20, mean_step="gradient",
                            hyperparameters={"pretrain_rows": 0}), X, y
        ),
    }


BEFORE = json.loads((DATA / "budget_traces_before_convergence.json").read_text())
#: options that select the step rule the traces were recorded with (issue 23 changed SEP's
#: default batch step; the old rule is kept as an option and must still give the trace)
RECORDED_RULE = {"sep_max_steps": {"optimizer_kwargs": {"log_space": False, "backtrack": False}}}


@pytest.mark.parametrize("case", sorted(BEFORE))
def test_explicit_budgets_give_the_traces_of_before(case):
    """Recorded with the code before the convergence default (main at cac0d4f): the same
    steps, stop and objective trace, to 1e-10 relative.  Not bit for bit: the traces were
    recorded on AMD EPYC machines, and on an Intel Xeon the same code's BLAS rounds
    differently (up to 7e-14 relative on these traces); a changed step rule or budget
    moves them by far more than 1e-10."""
    make, X, y = _budget_cases()[case]
    ref = BEFORE[case]
    m = make().fit(X, y, progress=False, **ref["kwargs"], **RECORDED_RULE.get(case, {}))
    assert m.history_.steps == ref["steps"] and m.history_.stopped == ref["stopped"]
    assert len(m.history_.objective) == len(ref["objective"])
    np.testing.assert_allclose(m.history_.objective, ref["objective"], rtol=1e-10, atol=0)


# ------------------------------------------------------------------ resume --
def test_default_fit_resumed_mid_window_equals_uninterrupted(tmp_path):
    X, y = reg_data(n=90)

    def make():
        return lg.SVGP(num_inducing=6)

    ref = make().fit(X, y, batch_size=30, seed=1, progress=False)
    assert ref.history_.reason == "converged"
    stop = ref.history_.steps - 75  # inside a window of 50 steps, before the last two
    ck = tmp_path / "run.ckpt"

    def interrupt(info):
        if info["step"] == stop:
            raise KeyboardInterrupt

    first = make()
    with pytest.warns(lg.TrainingWarning, match=f"interrupted at step {stop}"):
        first.fit(X, y, batch_size=30, seed=1, progress=False, checkpoint=ck,
                  callbacks=[interrupt])
    assert first.history_.reason == "interrupted"
    resumed = make().fit(X, y, batch_size=30, seed=1, progress=False, checkpoint=ck,
                         resume=True)
    h, r = resumed.history_, ref.history_
    assert (h.steps, h.reason, h.stopped) == (r.steps, r.reason, r.stopped)
    assert h.objective == r.objective and h.convergence == r.convergence
    for a, b in zip(resumed.state_dict().values(), ref.state_dict().values(), strict=True):
        assert torch.equal(a, b)


# ------------------------------------------------------------------ front ends --
def test_gp_regressor_picks_exact_then_vfe_and_trains_until_converged():
    from latentgp.sklearn import GPRegressor

    X, y = reg_data(n=80)
    small = GPRegressor(max_exact=100).fit(X, y)
    large = GPRegressor(max_exact=50, num_inducing=10).fit(X, y)
    assert small.method_ == "exact" and isinstance(small.model_, lg.ExactGP)
    assert large.method_ == "vfe" and isinstance(large.model_, lg.SparseGP)
    assert large.model_.method == "vfe" and large.model_.num_inducing == 10
    for est in (small, large):
        assert est.model_.history_.reason == "converged"
    budget = GPRegressor(max_exact=50, num_inducing=10, max_steps=3).fit(X, y)
    assert budget.model_.history_.reason == "budget" and budget.model_.history_.steps == 3


def test_cli_fit_without_a_budget_passes_none_and_a_budget_as_given():
    """``latentgp fit`` without --epochs/--max-steps hands ``fit`` no budget (it ran 20
    epochs); with them, the budget as before."""
    import argparse

    from latentgp.cli.fit import fit_kwargs
    from latentgp.cli.models import MODEL_BUILDERS

    def args(**kw):
        base = dict(optimizer=None, lr=None, seed=0, progress=False, batch_size=None,
                    epochs=None, max_steps=None, checkpoint=None, resume=False)
        return argparse.Namespace(**{**base, **kw})

    for name, builder in MODEL_BUILDERS.items():
        kw = fit_kwargs(args(), builder, 500)
        assert "epochs" not in kw and "max_steps" not in kw, name
    svgp = MODEL_BUILDERS["svgp"]
    assert fit_kwargs(args(epochs=5), svgp, 500)["epochs"] == 5
    assert fit_kwargs(args(max_steps=7), svgp, 500)["max_steps"] == 7
    both = fit_kwargs(args(epochs=5, max_steps=7), svgp, 500)
    assert (both["epochs"], both["max_steps"]) == (5, 7)  # whichever comes first, in fit
    # nothing else is restated: the model's own defaults decide, as in the Python API
    assert set(fit_kwargs(args(), svgp, 500)) == {"seed", "progress"}


def test_epochs_and_max_steps_together_stop_at_whichever_comes_first():
    """``fit(epochs=E, max_steps=S)``: min(E epochs, S steps), in the library as in the
    CLI (before, max_steps was accepted and ignored when epochs was given)."""
    from latentgp.training.loop import total_steps

    assert total_steps(10, 5, 7) == 7 and total_steps(10, 5, 70) == 50
    assert total_steps(10, 5, None) == 50 and total_steps(10, None, 7) == 7
    X = np.linspace(0, 1, 40)[:, None]
    y = np.sin(6 * X[:, 0])
    m = lg.SVGP(num_inducing=5).fit(X, y, epochs=4, max_steps=3, batch_size=10, progress=False)
    assert m.history_.steps == 3


# ------------------------------------------------------------ the fixed-row probe --
@pytest.mark.slow
def test_minibatch_svgp_default_converges_on_its_probes():
    """A minibatch SVGP fit without a budget (natural steps, B = 1,024 of 1,200 rows)
    converges by the probed rule; the probes only read the model (a budgeted fit, which
    has no rule and no probe, takes the same steps)."""
    X, y = reg_data(n=1200, seed=3)
    m = lg.SVGP(num_inducing=16).fit(X, y, seed=0, progress=False)  # natural, B = 1,024
    h = m.history_
    assert (h.optimizer, h.reason) == ("natural", "converged")
    assert h.convergence["probes"] == 8.0 and h.convergence["change"] < h.convergence["bound"]
    # the probes only read the model: a budgeted fit (no rule, no probe) takes the same steps
    same = lg.SVGP(num_inducing=16).fit(X, y, optimizer="natural", lr=0.01, batch_size=1024,
                                        max_steps=300, seed=0, progress=False)
    assert same.history_.objective == h.objective[:300]


def test_the_probe_is_the_objective_of_evenly_spaced_rows():
    """``GradientTask.probe``: the model's objective (with its log prior) on
    ``probe_rows`` (evenly spaced, none where a step sees every row), computed
    independently; it reads the model without changing it."""
    from latentgp.training.convergence import PROBE_ROWS, probe_rows
    from latentgp.training.fit import GradientTask

    X, y = reg_data(n=1200, seed=3)
    m = lg.SVGP(num_inducing=16).fit(X, y, optimizer="adam", batch_size=200, max_steps=20,
                                     seed=0, progress=False)
    rows = probe_rows(1200, 1024)
    assert rows.tolist() == np.round(np.linspace(0, 1199, min(1200, PROBE_ROWS))).tolist()
    assert probe_rows(1200, 1200) is None  # full batch: no probe
    ys = m.scale_targets(y)
    Xt = torch.as_tensor(X)
    task = GradientTask(m, Xt, ys, list(m.parameters()), torch.optim.SGD(m.parameters(), 0.1),
                        "adam")
    task.probe_rows = rows
    before = {k: v.clone() for k, v in m.state_dict().items()}
    with torch.no_grad():
        direct = float(m.objective(Xt[rows], ys[rows], 1200) + m.log_prior())
    assert task.probe() == pytest.approx(direct, rel=1e-14)
    assert all(torch.equal(v, before[k]) for k, v in m.state_dict().items())
    task.probe_rows = None
    assert task.probe() is None


def test_only_deterministic_objectives_are_probed():
    """The probe needs an objective that is a function of the parameters: SVGP with a
    closed-form or quadrature expectation has one; Monte Carlo expectations (a black-box
    likelihood, SAVIGP's estimators) keep the noisy window means."""
    assert lg.SVGP().deterministic_objective
    assert lg.SVGP(likelihood="bernoulli").deterministic_objective
    assert lg.SVGP(likelihood="poisson").deterministic_objective
    black_box = lg.SVGP(likelihood=lambda y, f: -np.abs(y - f))  # numpy: Monte Carlo
    assert not black_box.deterministic_objective
    assert not lg.SAVIGP(num_inducing=8, likelihood="bernoulli").deterministic_objective
