import io

import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.inducing import greedy_variance, kmeans_pp, random_subset
from latentgp.training import ProgressBar


@pytest.fixture
def X():
    g = torch.Generator().manual_seed(0)
    return torch.cat(
        [torch.randn(200, 2, generator=g, dtype=torch.float64) + c for c in (-5.0, 0.0, 5.0)]
    )


def test_kmeans_finds_clusters(X):
    Z = kmeans_pp(X, 3, seed=0)
    centres = sorted(Z[:, 0].tolist())
    np.testing.assert_allclose(centres, [-5, 0, 5], atol=0.3)


def test_kmeans_with_duplicates_gives_distinct_centres():
    X = torch.zeros(50, 2, dtype=torch.float64)
    X[25:] = 1.0
    Z = kmeans_pp(X, 5, seed=0)
    assert torch.cdist(Z, Z).add(torch.eye(5, dtype=torch.float64)).min() > 0


def test_random_subset_rows_of_X(X):
    Z = random_subset(X, 10, seed=1)
    assert all(any(torch.equal(z, x) for x in X) for z in Z)


def test_greedy_variance_reduces_residual_variance():
    # uniform inputs: greedy selection spreads Z evenly, a random subset leaves gaps
    X = torch.linspace(0, 10, 500, dtype=torch.float64)[:, None]
    k = lg.kernels.RBF(lengthscale=1.0).build(1)
    Zg = greedy_variance(X, 12, k, seed=0)
    Zr = random_subset(X, 12, seed=0)

    def resid(Z):
        Kzz = k(Z).detach() + 1e-8 * torch.eye(len(Z), dtype=torch.float64)
        Kzx = k(Z, X).detach()
        return float((k.diag(X) - (Kzx * torch.linalg.solve(Kzz, Kzx)).sum(0)).sum())

    assert resid(Zg) < 0.5 * resid(Zr)


def test_inducing_init_options_train(X):
    y = torch.sin(X[:, 0])
    for init in ("kmeans", "random", "greedy"):
        m = lg.SVGP(num_inducing=12, inducing_init=init).fit(X, y, max_steps=3, seed=0)
        assert m.Z.shape == (12, 2)


def test_fixed_inducing_inputs_stay_fixed(X):
    y = torch.sin(X[:, 0])
    Z0 = X[:10].clone()
    m = lg.SVGP(Z=Z0, learn_inducing=False).fit(X, y, max_steps=20, seed=0)
    torch.testing.assert_close(m.Z.detach(), Z0)
    m2 = lg.SVGP(Z=Z0).fit(X, y, max_steps=20, seed=0)
    assert not torch.allclose(m2.Z.detach(), Z0)


def test_separate_inducing_inputs_per_latent(X):
    y = torch.stack([torch.sin(X[:, 0]), torch.cos(X[:, 1])], 1)
    m = lg.SVGP(num_inducing=6, shared_inducing=False).fit(X, y, max_steps=5, seed=0)
    assert m.Z.shape == (2, 6, 2)
    assert m.kernel.lengthscale.shape == (2, 2)


@pytest.mark.parametrize("model", ["svgp", "savigp"])
def test_a_shared_start_with_separate_inducing_inputs_gives_each_latent_its_own(X, model):
    """``Z`` ``(M, D)`` with ``shared_inducing=False`` is the start of each latent's own
    set (as GPflow's SeparateIndependent and GPyTorch's LMC are usually started), not a
    silently shared one: the latents' sets part as they train."""
    y = torch.stack([torch.sin(X[:, 0]), torch.cos(2.0 * X[:, 1])], 1)
    Z0 = X[::60].clone()
    if model == "svgp":
        m = lg.SVGP(Z=Z0, shared_inducing=False)
    else:
        m = lg.SAVIGP(Z=Z0, shared_inducing=False, likelihood="gaussian")
    m.initialize(X, y)
    assert not m.shared_inducing and m.Z.shape == (2, *Z0.shape)
    torch.testing.assert_close(m.Z.detach(), Z0.expand(2, *Z0.shape))
    m.fit(X, y, max_steps=30, seed=0, progress=False)
    assert (m.Z[0] - m.Z[1]).abs().max() > 1e-3
    shared = lg.SVGP(Z=Z0)  # the default still shares a 2-D Z
    shared.initialize(X, y)
    assert shared.shared_inducing and shared.Z.shape == Z0.shape


def test_callback_can_stop_and_tolerance_stops(X):
    y = torch.sin(X[:, 0])
    seen = []
    m = lg.SVGP(num_inducing=5).fit(
        X, y, max_steps=100, callbacks=[lambda info: seen.append(info["step"]) or info["step"] >= 7]
    )
    assert m.history_.steps == 7 and seen == list(range(1, 8))
    assert m.history_.stopped == "callback"
    e = lg.ExactGP().fit(X[:100], y[:100], max_steps=500, tol=1e-6)
    assert e.history_.steps < 500 and "converged" in e.history_.stopped


@pytest.mark.parametrize("opt", ["adam", "adadelta", "sgd"])
def test_optimizers_improve_the_objective(X, opt):
    y = torch.sin(X[:, 0])
    lr = {"adam": 0.05, "adadelta": 1.0, "sgd": 0.01}[opt]
    m = lg.SVGP(num_inducing=10).fit(
        X, y, batch_size=600, max_steps=60, optimizer=opt, lr=lr, seed=0
    )
    h = m.history_.objective
    assert h[-1] > h[0]


def test_lbfgs_for_svgp_full_batch(X):
    y = torch.sin(X[:, 0])
    m = lg.SVGP(num_inducing=10).fit(X, y, optimizer="lbfgs", lr=1.0, max_steps=30, seed=0)
    assert m.history_.objective[-1] > m.history_.objective[0]


def test_lbfgs_without_batch_size_uses_all_points_beyond_the_minibatch_default():
    # SVGP's default minibatch is min(N, 1024); asking for L-BFGS must mean the full batch,
    # so that each step is one pass over the data (with B = 1024 it would be 3072/1100 passes).
    g = torch.Generator().manual_seed(0)
    X = torch.randn(1100, 1, generator=g, dtype=torch.float64)
    y = torch.sin(2 * X[:, 0]) + 0.1 * torch.randn(1100, generator=g, dtype=torch.float64)
    m = lg.SVGP(num_inducing=8).fit(X, y, optimizer="lbfgs", lr=1.0, max_steps=3, seed=0)
    assert m.history_.steps == 3
    assert m.history_.epochs == pytest.approx(3.0)


def test_progress_bar_renders():
    buf = io.StringIO()
    bar = ProgressBar(10, desc="SVGP", enabled=True, stream=buf, interval=0.0)
    for _ in range(10):
        bar.update(1, items=100, objective=-1.5)
    bar.close()
    out = buf.getvalue()
    assert "10/10" in out and "objective=-1.5" in out and "pts/s" in out
    quiet = io.StringIO()
    ProgressBar(10, stream=quiet).update(5)  # not a terminal: silent
    assert quiet.getvalue() == ""


@pytest.mark.parametrize(
    "make, allowed",
    [
        (lambda v: lg.SVGP(inducing_init=v), "'kmeans', 'random' or 'greedy'"),
        (lambda v: lg.SparseGP(inducing_init=v), "'kmeans', 'random' or 'greedy'"),
        (lambda v: lg.SEP(inducing_init=v), "'kmeans', 'random' or 'greedy'"),
        (lambda v: lg.SAVIGP(inducing_init=v), "'kmeans' or 'random'"),
    ],
)
def test_unknown_inducing_init_is_refused_at_construction(make, allowed):
    with pytest.raises(ValueError, match=f"inducing_init must be {allowed}, got 'kmean'"):
        make("kmean")


def test_lbfgs_reuses_the_line_search_evaluation(monkeypatch):
    """torch's LBFGS.step starts by evaluating the objective where the previous line search
    stopped; the loop reuses that evaluation instead of repeating it.  Same trajectory to
    the last bit, about half the evaluations."""
    import importlib

    fit_module = importlib.import_module("latentgp.training.fit")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=300)

    def run():
        m = lg.SparseGP(method="fitc", num_inducing=12)
        calls = []
        objective = m.objective

        def counted(*a, **k):
            calls.append(1)
            return objective(*a, **k)

        m.objective = counted
        m.fit(X, y, max_steps=25, progress=False)
        return m.history_.objective, m.predict_y(X[:5]), len(calls)

    hist, pred, n_memo = run()
    monkeypatch.setattr(fit_module.GradientTask, "memoize_lbfgs", False)
    hist0, pred0, n_plain = run()
    assert hist == hist0
    np.testing.assert_array_equal(pred[0], pred0[0])
    np.testing.assert_array_equal(pred[1], pred0[1])
    assert n_memo <= 0.65 * n_plain, (n_memo, n_plain)


def test_predictions_during_training_follow_the_parameters():
    """A callback that predicts during training must see the current parameters: the
    default Adam is fused, whose updates do not bump the parameters' version counters."""
    g = torch.Generator().manual_seed(1)
    X = torch.randn(400, 2, generator=g, dtype=torch.float64)
    y = (X[:, 0] > 0).to(torch.float64)
    Xs = torch.randn(50, 2, generator=g, dtype=torch.float64)
    seen = []

    def callback(info):
        m = info["model"]
        if info["step"] % 10 == 0:
            p_cached = m.predict_y(Xs)[0].copy()
            m.clear_prediction_cache()
            seen.append((p_cached, m.predict_y(Xs)[0]))
        return False

    m = lg.SVGP(num_inducing=10, likelihood="probit")
    m.fit(X, y, batch_size=100, max_steps=60, lr=0.05, seed=0, callbacks=[callback])
    assert len(seen) >= 5
    for cached, fresh in seen:
        np.testing.assert_allclose(cached, fresh, rtol=1e-12, atol=1e-12)
    # a write through .data (no version bump) is seen as well
    before = m.predict_y(Xs)[0].copy()
    m.q.q_mu.data += 1.0
    assert not np.allclose(m.predict_y(Xs)[0], before)
