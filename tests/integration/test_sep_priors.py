"""SEP with hyperpriors (MAP-II; issue 23's diagnosis on crabs).

References: the log-normal density and its derivative written out by hand, the step of
plain gradient descent, the EP energy with the sites held (backtracking must never lower
``log Z_q + log p``), and GFITC's MAP-II point (SEP and GFITC share EP fixed points, so
with the same prior they must reach the same hyperparameters).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from small_sets import one_torch_thread, sep_check_data  # noqa: F401 (fixture)

import latentgp as lg
from latentgp.training.optim import SignAdaptive

pytestmark = pytest.mark.usefixtures("one_torch_thread")

Z6 = np.linspace(-2.5, 2.5, 6)[:, None]


def _lognormal(v: float, loc: float, scale: float) -> tuple[float, float]:
    """log density of LogNormal(loc, scale) at v and its derivative in v (by hand)."""
    z = (math.log(v) - loc) / scale
    logp = -math.log(v) - math.log(scale * math.sqrt(2 * math.pi)) - 0.5 * z * z
    return logp, -1.0 / v - z / (scale * v)


def _sep(prior: lg.priors.Prior | None, **kw) -> lg.SEP:
    m = lg.SEP(Z=Z6, learn_inducing=False, **kw)
    if prior is not None:
        m.set_prior("kernel.variance", prior)
    return m


def test_prior_enters_the_step_gradient_and_the_reported_objective():
    """One batch step of plain gradient descent: the prior moves raw_variance by
    ``lr / N * dlog p/dv * sigmoid(raw)`` more than the evidence alone, and the reported
    objective is ``log Z_q + log p(theta_0)`` (the sweep itself does not see the prior)."""
    X, y = sep_check_data()
    N, lr, loc, scale = X.shape[0], 0.5, 1.0, 0.7
    runs = {}
    for name, prior in (("plain", None), ("map", lg.priors.LogNormal(loc, scale))):
        m = _sep(prior)
        m.fit(X, y, seed=0, max_steps=1, optimizer="sgd", lr=lr)
        runs[name] = (float(m.kernel.raw_variance.detach()), float(m.history_.objective[0]))
    raw0 = float(lg.SEP(Z=Z6).initialize(X, y, seed=0).kernel.raw_variance)
    v0 = float(torch.nn.functional.softplus(torch.tensor(raw0, dtype=torch.float64)))
    logp, dlogp = _lognormal(v0, loc, scale)
    sig = 1.0 / (1.0 + math.exp(-raw0))
    assert runs["map"][0] - runs["plain"][0] == pytest.approx(lr / N * dlogp * sig, rel=1e-9)
    assert runs["map"][1] - runs["plain"][1] == pytest.approx(logp, rel=1e-12, abs=1e-12)


def test_backtracking_never_lowers_the_map_energy():
    """A strong prior against the evidence's pull and a large rate: every accepted step
    keeps ``log Z_q + log p`` (sites held) at or above the swept value."""
    X, y = sep_check_data()
    m = _sep(lg.priors.LogNormal(-2.0, 0.1))
    Xt, ypm = m.prepare_training(X, y, seed=0)
    N = Xt.shape[0]
    opt = SignAdaptive([p for p in m.parameters() if p.requires_grad], lr=50.0)
    for _ in range(30):
        v = m.batch_step(Xt, ypm, opt, N, backtrack=True)
        after = m.fixed_site_evidence(Xt, ypm) + float(m.log_prior())
        assert after >= v - 1e-9 * max(1.0, abs(v))
    assert opt.halvings > 0
    # the evidence alone does fall on some of these steps: the prior is what is checked
    plain = _sep(None)
    Xt, ypm = plain.prepare_training(X, y, seed=0)
    plain.load_state_dict(m.state_dict())
    assert plain.fixed_site_evidence(Xt, ypm) != pytest.approx(
        m.fixed_site_evidence(Xt, ypm) + float(m.log_prior())
    )


def test_sep_reaches_gfitc_map_point():
    """With the same priors on variance and lengthscale, SEP's sweeps and GFITC's L-BFGS
    reach the same MAP-II hyperparameters and predictions (they share EP fixed points)."""
    X, y = sep_check_data()
    priors = {
        "kernel.variance": lg.priors.LogNormal(0.0, 1.0),
        "kernel.lengthscale": lg.priors.LogNormal(0.0, 1.0),
    }
    s = _sep(None)
    g = lg.GFITC(Z=Z6, learn_inducing=False)
    for name, p in priors.items():
        s.set_prior(name, p)
        g.set_prior(name, p)
    s.fit(X, y, seed=0, max_steps=400)
    g.fit(X, y, seed=0, max_steps=200, tol=1e-12)
    for k in ("variance", "lengthscale"):
        a = getattr(s.kernel, k).detach().reshape(-1)
        b = getattr(g.kernel, k).detach().reshape(-1)
        torch.testing.assert_close(a, b, rtol=1e-3, atol=0.0)
    Xs = np.linspace(-3, 3, 25)[:, None]
    np.testing.assert_allclose(s.predict_y(Xs)[0], g.predict_y(Xs)[0], atol=1e-4)
    # without the prior the same runs stop elsewhere: the prior is what they agree on
    s0 = _sep(None).fit(X, y, seed=0, max_steps=400)
    assert abs(float(s0.kernel.variance) / float(s.kernel.variance) - 1.0) > 1e-2


def test_bounds_are_refused():
    """SEP's steps are not projected onto a box: set_bounds is an error, not ignored."""
    with pytest.raises(ValueError, match="set_prior"):
        lg.SEP(Z=Z6).set_bounds("kernel.variance", 1e-3, 1e3)


def test_gfitc_map_objective_and_step_gradient():
    """GFITC takes the same priors through the shared fit loop: the first recorded value
    is ``log Z_EP + log p(theta_0)`` (the log-normal densities written out by hand), and
    one plain gradient step moves each raw parameter by ``lr / N`` times the derivative
    of that sum, taken here by central finite differences of the re-converged evidence."""
    X, y = sep_check_data(40, seed=3)
    N, lr, h = X.shape[0], 0.3, 1e-5
    ell0, v0 = 0.8, 1.5
    pri = {"variance": (1.2, 0.5), "lengthscale": (-0.5, 0.6)}  # (loc, scale), far from theta_0

    def model(ell, var):
        kern = lg.kernels.RBF(lengthscale=ell, variance=var)
        return lg.GFITC(Z=Z6[::2], kernel=kern, learn_inducing=False, ep_tol=1e-13,
                        max_sweeps=5000)

    def map_value(ell, var):
        lp = _lognormal(var, *pri["variance"])[0] + _lognormal(ell, *pri["lengthscale"])[0]
        return model(ell, var).converge(X, y) + lp

    m = model(ell0, v0)
    for k, (loc, scale) in pri.items():
        m.set_prior(f"kernel.{k}", lg.priors.LogNormal(loc, scale))
    m.initialize(X, y, seed=0)
    raw0 = {k: float(getattr(m.kernel, f"raw_{k}").detach().reshape(-1)[0]) for k in pri}
    unit = float(m.kernel.input_unit[0])  # lengthscale = softplus(raw) * unit
    assert float(m.kernel.lengthscale.reshape(-1)[0]) == pytest.approx(ell0, rel=1e-12)
    m.fit(X, y, seed=0, max_steps=1, optimizer="sgd", lr=lr)
    assert m.history_.objective[0] == pytest.approx(map_value(ell0, v0), abs=1e-8)
    fd = {
        "variance": (map_value(ell0, v0 + h) - map_value(ell0, v0 - h)) / (2 * h),
        "lengthscale": (map_value(ell0 + h, v0) - map_value(ell0 - h, v0)) / (2 * h),
    }
    for k, slope in (("variance", 1.0), ("lengthscale", unit)):
        moved = float(getattr(m.kernel, f"raw_{k}").detach().reshape(-1)[0]) - raw0[k]
        dvalue_draw = slope / (1.0 + math.exp(-raw0[k]))
        assert moved == pytest.approx(lr / N * fd[k] * dvalue_draw, rel=1e-5)
    # the prior's pull is a large part of the step: without it the steps differ
    plain = model(ell0, v0).fit(X, y, seed=0, max_steps=1, optimizer="sgd", lr=lr)
    moved_plain = float(plain.kernel.raw_variance.detach().reshape(-1)[0]) - raw0["variance"]
    moved_map = float(m.kernel.raw_variance.detach().reshape(-1)[0]) - raw0["variance"]
    assert abs(moved_plain - moved_map) > 0.1 * abs(moved_map)
