"""ExactGP's iterative path (CG, SLQ, LOVE) against its Cholesky path."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.models import exact as exact_module


def _data(N, seed=0, D=3):
    g = np.random.default_rng(seed)
    X = g.uniform(0, 5, (N, D))
    y = np.sin(X).sum(1) + 0.2 * g.standard_normal(N)
    Xs = g.uniform(0, 5, (200, D))
    return X, y, Xs


@pytest.fixture(scope="module")
def fitted():
    X, y, Xs = _data(800)
    m = lg.ExactGP(solver="cholesky")
    m.fit(X, y, max_steps=15, seed=0)
    return m, X, y, Xs


def _as(model, solver, **options):
    new = model.clone()
    new.solver = solver
    new.iterative = lg.ExactGP.Iterative(**options)
    return new


def test_cg_log_marginal_equals_cholesky(fitted):
    m, X, y, _ = fitted
    ref = m.log_marginal_likelihood()
    # full-rank preconditioner: log|P| is log|K| and the stochastic part vanishes
    exact = _as(m, "cg", rank=800, tol=1e-11).log_marginal_likelihood()
    assert math.isclose(exact, ref, rel_tol=1e-9, abs_tol=1e-7), (exact, ref)
    # the default rank, min(1000, N, max(256, 2^23 / N)), is all of these 800 points (the
    # pivoted Cholesky stops where the remainder's diagonal is rounding, at 482): P is
    # K + s^2 I, and one CG step leaves a residual at rounding (the tolerance is 1e-2)
    # when the products are float64
    default = _as(m, "cg", product_dtype="float64")
    v = default.log_marginal_likelihood()
    assert math.isclose(v, ref, rel_tol=1e-8, abs_tol=1e-6), (v, ref)
    assert default.last_cg["iterations"] <= 2
    # the default float32 products (tol 1e-2): P^{-1/2} A P^{-1/2} is the identity up to
    # their rounding only, a part in 10^4 of log p here
    single = _as(m, "cg")
    v = single.log_marginal_likelihood()
    assert single.last_cg["product_dtype"] == "float32"
    assert math.isclose(v, ref, rel_tol=1e-3), (v, ref)
    assert single.last_cg["iterations"] <= 2
    # rank 100, 16 probes: a stochastic estimate of the remainder, close
    low = _as(m, "cg", rank=100)
    v = low.log_marginal_likelihood()
    assert abs(v - ref) < 1e-3 * abs(ref) + 0.05, (v, ref)
    assert low.last_cg["converged"] and low.last_cg["iterations"] < 50
    # the record of the evaluation's solve: one entry per iteration, ending at the residual
    # reported, below the tolerance only at the end
    record = low.last_cg["residuals"]
    assert len(record) == low.last_cg["iterations"]
    assert record[-1] == low.last_cg["residual"] <= 1e-2 < min(record[:-1], default=1.0)


def test_cg_predictions_equal_cholesky(fitted):
    m, X, y, Xs = fitted
    m1, v1 = m.predict_f(Xs)
    for variance in ("love", "cg"):
        mc = _as(m, "cg", predict_tol=1e-10, variance=variance)
        m2, v2 = mc.predict_f(Xs)
        assert np.allclose(m2, m1, atol=1e-7, rtol=0)
        assert np.allclose(v2, v1, atol=1e-7 * float(np.max(v1)) + 1e-9, rtol=1e-5)
        lpd1 = m.log_predictive_density(Xs, np.sin(Xs).sum(1))
        lpd2 = mc.log_predictive_density(Xs, np.sin(Xs).sum(1))
        assert np.allclose(lpd1, lpd2, atol=1e-6)


def test_love_small_rank_is_close(fitted):
    m, X, y, Xs = fitted
    _, v1 = m.predict_f(Xs)
    # preconditioned (rank 100): the off-Krylov part taken as A ~ I errs downwards
    _, v2 = _as(m, "cg", predict_tol=1e-10, rank=100, love_rank=30).predict_f(Xs)
    assert np.all(v2 <= v1 + 1e-10)
    assert np.max(np.abs(v2 / v1 - 1)) < 1e-3
    # plain LOVE (no preconditioner): the Krylov part only, variances err upwards
    _, v3 = _as(m, "cg", predict_tol=1e-10, rank=0, love_rank=100).predict_f(Xs)
    assert np.all(v3 >= v1 - 1e-10)
    assert np.max(np.abs(v3 / v1 - 1)) < 1e-3


def test_joint_covariance_and_paths_on_the_iterative_path(fitted):
    m, X, y, Xs = fitted
    mc = _as(m, "cg", predict_tol=1e-11)
    Xt = torch.as_tensor(Xs[:20])
    mean1, K1 = m.predict_f_joint(Xt)
    mean2, K2 = mc.predict_f_joint(Xt)
    assert torch.allclose(mean1, mean2, atol=1e-8) and torch.allclose(K1, K2, atol=1e-8)
    # gradients with respect to the test inputs (acquisition functions) agree
    Xg = Xt.clone().requires_grad_()
    (ga,) = torch.autograd.grad(m.predict_f_joint(Xg)[1].sum(), Xg)
    Xg = Xt.clone().requires_grad_()
    (gb,) = torch.autograd.grad(mc.predict_f_joint(Xg)[1].sum(), Xg)
    assert torch.allclose(ga, gb, atol=1e-7)
    p1 = m.sample_paths(4, seed=3)(Xs[:10])
    p2 = mc.sample_paths(4, seed=3)(Xs[:10])
    assert np.allclose(np.asarray(p1), np.asarray(p2), atol=1e-6)


def test_objective_gradient_matches_cholesky_in_expectation():
    X, y, _ = _data(300, seed=1)
    m = lg.ExactGP(solver="cholesky", mean="constant")
    m.initialize(X, y, seed=0)
    Xt, yt = m.X_train, m.y_train

    def grads(model):
        model.zero_grad()
        model.objective(Xt, yt, Xt.shape[0]).backward()
        return torch.cat([p.grad.reshape(-1) for p in model.parameters()])

    ref = grads(m)
    mc = _as(m, "cg", rank=300, num_probes=3000, tol=1e-11)
    got = grads(mc)
    assert torch.allclose(got, ref, rtol=0.03, atol=0.03 * float(ref.abs().max())), (got, ref)


def test_auto_picks_by_size_and_the_cg_path_has_no_cholesky(monkeypatch):
    X, y, Xs = _data(300)
    m = lg.ExactGP()
    assert m.solver == "auto"
    assert m.solver_for(10_000) == "cholesky" and m.solver_for(10_001) == "cg"
    m.cholesky_max = 200  # this instance iterates above 200 points
    assert m.solver_for(300) == "cg"

    def refuse(*args, **kwargs):
        raise AssertionError("the iterative path factorised an N x N matrix")

    monkeypatch.setattr(exact_module, "cholesky", refuse)
    m.fit(X, y, max_steps=3, seed=0)
    m.predict_f(Xs)
    assert m.last_cg["converged"]


def _record_blocks(model) -> list[tuple[int, int]]:
    """The shapes of every kernel block ``model``'s kernel forms from now on, called
    directly or through a prepared side (``against``)."""
    shapes: list[tuple[int, int]] = []
    forward, against = model.kernel.forward, model.kernel.against

    def recording(A, B=None):
        shapes.append((A.shape[0], A.shape[0] if B is None else B.shape[0]))
        return forward(A, B)

    def recording_against(Z, **kw):
        block = against(Z, **kw)

        def recorded(A, out=None):
            shapes.append((A.shape[0], Z.shape[0]))
            return block(A, out=out)

        return recorded

    model.kernel.forward = recording
    model.kernel.against = recording_against
    return shapes


def test_cg_path_never_forms_an_n_by_n_block():
    X, y, Xs = _data(400)
    m = lg.ExactGP(solver="cg", iterative={"chunk_rows": 50, "rank": 10, "num_probes": 4})
    m.initialize(X, y, seed=0)
    shapes = _record_blocks(m)
    obj = m.objective(m.X_train, m.y_train, 400)
    obj.backward()
    m.predict_f(Xs, chunk_size=50)
    assert shapes
    assert max(a * b for a, b in shapes) <= 50 * 400, max(shapes)


def test_cg_path_predicts_in_the_blocks_of_its_products():
    """Without a chunk size, prediction on the iterative path (LOVE variances) takes the
    rows of one kernel block of the training products per chunk, so it forms no kernel
    block larger than theirs (the general rule's 256-row minimum did); the moments are the
    same as with larger chunks.  An explicit or configured chunk size, the CG variances
    (a solve per chunk) and the Cholesky path keep the general rule."""
    X, y, Xs = _data(600)
    m = lg.ExactGP(solver="cg", iterative={"chunk_rows": 20, "rank": 10, "num_probes": 4,
                                           "predict_tol": 1e-8})
    m.initialize(X, y, seed=0)
    assert m.prediction_chunk_rows() == 20
    mean_big, var_big = m.predict_f(Xs, chunk_size=256)
    shapes = _record_blocks(m)
    mean, var = m.predict_f(Xs)
    assert shapes and max(a * b for a, b in shapes) <= 20 * 600, max(shapes)
    np.testing.assert_allclose(mean, mean_big, rtol=0, atol=1e-10)
    np.testing.assert_allclose(var, var_big, rtol=0, atol=1e-10)
    assert m.prediction_chunk_rows(chunk_size=64) == 64
    with lg.config(chunk_size=33):
        assert m.prediction_chunk_rows() == 33
    # on 5,000 rows the general rule's minimum (256 rows) is above one 2^20-entry block
    X5, y5, _ = _data(5000, seed=1)
    rows = {}
    for label, solver, options in [("cholesky", "cholesky", {}), ("cg", "cg", {}),
                                   ("cg variances", "cg", {"variance": "cg"})]:
        model = lg.ExactGP(solver=solver, iterative=options)
        model.initialize(X5, y5, seed=0)
        rows[label] = model.prediction_chunk_rows()
    assert rows == {"cholesky": 256, "cg": (1 << 20) // 5000, "cg variances": 256}


def test_fit_on_the_cg_path_reaches_the_cholesky_optimum():
    X, y, _ = _data(400, seed=2)
    a = lg.ExactGP(solver="cholesky").fit(X, y, seed=0)
    # the value is exact here (the default rank is all 400 points) but the gradient's trace
    # term is still a probe estimate, whose noise moves L-BFGS's end point by a few
    # hundredths of a nat at 16 probes (0.07 with seed 0); 64 probes keep it within 0.05
    b = lg.ExactGP(solver="cg", iterative={"num_probes": 64}).fit(X, y, seed=0)
    b_at_chol = b.clone()
    b_at_chol.solver = "cholesky"
    # b's parameters are as good as a's under the exact marginal likelihood (to 0.05 nats)
    assert b_at_chol.log_marginal_likelihood() > a.log_marginal_likelihood() - 0.05


def test_save_load_keeps_solver_and_options(tmp_path, fitted):
    m, X, y, Xs = fitted
    mc = _as(m, "cg", predict_tol=1e-9, rank=50, variance="cg")
    path = tmp_path / "cg.lgp"
    mc.save(path)
    back = lg.load(path)
    assert back.solver == "cg" and back.iterative == mc.iterative
    assert np.allclose(back.predict_f(Xs)[0], mc.predict_f(Xs)[0], atol=1e-10)


def test_condition_on_on_the_iterative_path_equals_set_data(fitted):
    m, X, y, Xs = fitted
    mc = _as(m, "cg", predict_tol=1e-11)
    Xn, yn = X[:30] + 0.01, y[:30]
    a = mc.condition_on(Xn, yn)
    b = mc.clone().set_data(np.vstack([X, Xn]), np.concatenate([y, yn]))
    assert np.allclose(a.predict_f(Xs)[0], b.predict_f(Xs)[0], atol=1e-8)
    assert np.allclose(a.predict_f(Xs)[0], m.condition_on(Xn, yn).predict_f(Xs)[0], atol=1e-7)


def test_bad_solver_options_are_refused():
    with pytest.raises(ValueError, match="solver must be one of"):
        lg.ExactGP(solver="lu")
    with pytest.raises(ValueError, match="tol"):
        lg.ExactGP(solver="cg", iterative={"tol": 2.0})
    with pytest.raises(TypeError, match="no option"):
        lg.ExactGP(iterative={"tolerance": 1e-3})
    with pytest.raises(TypeError):
        lg.ExactGP(iterative="fast")
    with pytest.raises(ValueError, match="variance"):
        lg.ExactGP.Iterative(variance="exact")


def test_two_outputs_on_the_iterative_path():
    X, y, Xs = _data(300, seed=4)
    Y = np.stack([y, np.cos(X[:, 0])], 1)
    m = lg.ExactGP(solver="cholesky").initialize(X, Y, seed=0)
    mc = _as(m, "cg", rank=300, tol=1e-11, predict_tol=1e-11)
    assert math.isclose(mc.log_marginal_likelihood(), m.log_marginal_likelihood(),
                        rel_tol=1e-9, abs_tol=1e-7)
    (m1, v1), (m2, v2) = m.predict_f(Xs), mc.predict_f(Xs)
    assert m1.shape == (200, 2) and np.allclose(m1, m2, atol=1e-8)
    assert np.allclose(v1, v2, atol=1e-8)
