"""CG, pivoted Cholesky, SLQ and the BBMM marginal likelihood against dense Cholesky."""

from __future__ import annotations

import math

import pytest
import torch

from latentgp.kernels import RBF, Matern52
from latentgp.linalg import cho_solve, cholesky, logdet_chol
from latentgp.linalg_iterative import (
    GRAD_BLOCK_DIVISOR,
    IterativeOptions,
    KernelOperator,
    PivotedCholeskyPreconditioner,
    conjugate_gradients,
    iterative_log_marginal,
    iterative_solver,
    pivoted_cholesky,
    preconditioner_for,
    slq_logdet,
)

F64 = torch.float64


def _problem(N=200, D=3, seed=0, lengthscale=0.7, noise=0.1):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(N, D, generator=g, dtype=torch.float64) * 3
    k = RBF()
    k.build(D, (), torch.float64, torch.device("cpu"))
    k.lengthscale = lengthscale
    y = torch.sin(X.sum(1)) + 0.1 * torch.randn(N, generator=g, dtype=torch.float64)
    return X, y, k, torch.tensor(noise, dtype=F64)


def _dense(k, X, noise):
    return k(X).detach() + noise * torch.eye(X.shape[0], dtype=F64)


def test_cg_equals_cho_solve_well_conditioned():
    X, y, k, s2 = _problem(noise=0.5)
    K = _dense(k, X, s2)
    L, _ = cholesky(K, jitter=0.0)
    B = torch.stack([y, torch.cos(X[:, 0]), torch.ones(200, dtype=F64)], 1)
    op = KernelOperator(k, X, s2)
    res = conjugate_gradients(op.matmul, B, tol=1e-13, max_iter=500)
    assert res.converged
    assert torch.allclose(res.solution, cho_solve(L, B), atol=1e-10, rtol=0)
    pre = preconditioner_for(op, k.diag(X), 20)
    res_p = conjugate_gradients(op.matmul, B, precondition=pre.solve, tol=1e-13, max_iter=500)
    assert torch.allclose(res_p.solution, cho_solve(L, B), atol=1e-10, rtol=0)


def test_kernel_blocks_are_sized_by_device_and_chunking_keeps_the_product():
    """Default blocks: 2^20 entries (at least 64 rows) on the CPU, 2^25 elsewhere (a
    tensor on the ``meta`` device stands for an accelerator's); any block size gives the
    same product."""
    from latentgp.linalg_iterative import (
        CHUNK_ENTRIES,
        CHUNK_ENTRIES_ACCELERATOR,
        CHUNK_MIN_ROWS,
        block_rows,
    )

    X, y, k, s2 = _problem(N=300)
    assert KernelOperator(k, X, s2).chunk_rows == CHUNK_ENTRIES // 300
    meta = torch.empty(300, 3, dtype=F64, device="meta")
    assert KernelOperator(k, meta, s2).chunk_rows == CHUNK_ENTRIES_ACCELERATOR // 300
    # large N on the CPU: at least CHUNK_MIN_ROWS rows (the entries rule would give 10),
    # never more rows than there are
    assert block_rows(100_000, "cpu") == CHUNK_MIN_ROWS
    assert block_rows(10_000, "cpu") == CHUNK_ENTRIES // 10_000  # 104 rows
    assert block_rows(30, "cpu") == CHUNK_ENTRIES // 30  # rows of a block may exceed N
    assert block_rows(100_000, "meta") == CHUNK_ENTRIES_ACCELERATOR // 100_000
    V = torch.stack([y, torch.cos(X[:, 1])], 1)
    whole = _dense(k, X, s2) @ V
    for rows in (1, 7, 300):
        assert torch.allclose(KernelOperator(k, X, s2, chunk_rows=rows).matmul(V), whole,
                              atol=1e-12, rtol=0)


def test_products_prepare_the_kernel_once_and_follow_its_parameters():
    """A product through ``kernel.against`` (the full side prepared once per product)
    equals the dense product and the per-block ``cross`` path; a product after the kernel's
    parameters change uses the new values (nothing prepared is kept between products)."""
    X, y, k, s2 = _problem(N=250)
    V = torch.stack([y, torch.sin(X[:, 2])], 1)
    op = KernelOperator(k, X, s2, chunk_rows=37)
    plain = KernelOperator(lambda A, B: k(A, B), X, s2, chunk_rows=37)
    torch.testing.assert_close(op.matmul(V), _dense(k, X, s2) @ V, rtol=0, atol=1e-11)
    torch.testing.assert_close(op.matmul(V), plain.matmul(V), rtol=0, atol=1e-12)
    with torch.no_grad():
        k.lengthscale = 0.3
    torch.testing.assert_close(op.matmul(V), _dense(k, X, s2) @ V, rtol=0, atol=1e-11)


def test_pivoted_cholesky_full_rank_is_exact_and_preconditioner_algebra():
    X, _, k, s2 = _problem(N=60)
    Kx = k(X).detach()
    L = pivoted_cholesky(k.diag(X).detach(), lambda i: k(X[i], X).detach(), 60)
    assert torch.allclose(L @ L.mT, Kx, atol=1e-8)
    Lk = pivoted_cholesky(k.diag(X).detach(), lambda i: k(X[i], X).detach(), 10)
    pre = PivotedCholeskyPreconditioner(Lk, s2)
    P = Lk @ Lk.mT + s2 * torch.eye(60, dtype=F64)
    V = torch.randn(60, 3, generator=torch.Generator().manual_seed(1), dtype=F64)
    assert torch.allclose(pre.solve(V), torch.linalg.solve(P, V), atol=1e-9)
    assert math.isclose(float(pre.logdet()), float(torch.linalg.slogdet(P)[1]), rel_tol=1e-10)
    # square roots: P^{1/2} P^{1/2} = P, P^{-1/2} P^{1/2} = I, so probes P^{1/2} W start
    # the preconditioned Lanczos runs at W itself
    w, Q = torch.linalg.eigh(P)
    half = (Q * w.sqrt()) @ Q.mT
    assert torch.allclose(pre.power(V, 0.5), half @ V, atol=1e-10)
    assert torch.allclose(pre.power(pre.power(V, 0.5), -0.5), V, atol=1e-10)
    assert torch.allclose(pre.probes(V), half @ V, atol=1e-10)


def test_preconditioner_reduces_cg_iterations():
    X, y, k, s2 = _problem(N=400, noise=1e-3, lengthscale=1.0)
    op = KernelOperator(k, X, s2)
    B = y[:, None]
    plain = conjugate_gradients(op.matmul, B, tol=1e-8, max_iter=2000)
    pre = preconditioner_for(op, k.diag(X), 50)
    fast = conjugate_gradients(op.matmul, B, precondition=pre.solve, tol=1e-8, max_iter=2000)
    assert plain.converged and fast.converged
    assert fast.iterations * 3 < plain.iterations, (fast.iterations, plain.iterations)
    assert torch.allclose(fast.solution, plain.solution, atol=1e-5)


def test_operator_never_forms_an_n_by_n_block():
    X, y, k, s2 = _problem(N=300)
    shapes = []

    def cross(A, B):
        shapes.append((A.shape[0], B.shape[0]))
        return k(A, B)

    opts = IterativeOptions(chunk_rows=64, rank=10, num_probes=4)
    v = iterative_log_marginal(
        cross, X, s2.clone().requires_grad_(), y[:, None], list(k.parameters()),
        diag=k.diag(X).detach(), options=opts,
    )
    v.backward()
    solver = iterative_solver(cross, X, s2, diag=k.diag(X).detach(), options=opts)
    solver.solve(y[:, None])
    assert shapes and max(a for a, _ in shapes) <= 64
    assert all(a * b <= 64 * 300 for a, b in shapes)


def test_gradient_pass_takes_smaller_blocks_and_equals_dense_autograd():
    X, _, k, s2 = _problem(N=130)
    g = torch.Generator().manual_seed(5)
    A = torch.randn(130, 3, generator=g, dtype=F64)
    B = torch.randn(130, 3, generator=g, dtype=F64)
    rows = []

    def cross(P, Q):
        rows.append(P.shape[0])
        return k(P, Q)

    op = KernelOperator(cross, X, s2, chunk_rows=40)
    params = list(k.parameters())
    got = op.bilinear_grad(A, B, params)
    # blocks of chunk_rows // GRAD_BLOCK_DIVISOR rows (the last one shorter), covering N
    step = 40 // GRAD_BLOCK_DIVISOR
    assert rows[:-1] == [step] * (len(rows) - 1) and sum(rows) == 130
    want = torch.autograd.grad((A * (k(X, X) @ B)).sum(), params)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-12)


def test_slq_logdet_full_lanczos_is_exact_and_monte_carlo_close():
    X, _, k, s2 = _problem(N=150)
    exact = float(logdet_chol(cholesky(_dense(k, X, s2), jitter=0.0)[0]))
    op = KernelOperator(k, X, s2)
    # full-rank preconditioner: P = K + s^2 I, so the stochastic part is log|I| = 0
    full, _ = slq_logdet(op, num_probes=2, generator=torch.Generator().manual_seed(0),
                         rank=150, diag=k.diag(X), tol=1e-12)
    assert math.isclose(float(full), exact, rel_tol=1e-8)
    # no preconditioner: Lanczos run to convergence, Monte Carlo error of Hutchinson
    ests = []
    for seed in range(4):
        est, res = slq_logdet(op, num_probes=64, generator=torch.Generator().manual_seed(seed),
                              tol=1e-10)
        ests.append(float(est))
    mean = sum(ests) / len(ests)
    spread = (sum((e - mean) ** 2 for e in ests) / 3) ** 0.5
    # Hutchinson with Rademacher probes: sd = sqrt(2 sum_{i!=j} B_ij^2 / t), B = log(K)
    w, V = torch.linalg.eigh(_dense(k, X, s2))
    Blog = (V * w.log()) @ V.mT
    off = float(Blog.square().sum() - Blog.diagonal().square().sum())
    sd = math.sqrt(2 * off / (64 * 4))
    assert abs(mean - exact) < 4 * sd + 1e-6, (mean, exact, sd)
    assert spread > 0  # genuinely stochastic, the probes differ between seeds
    # preconditioned (rank 40): log|P| exact, Hutchinson with Rademacher probes on the
    # remainder F = log(P^{-1/2} K P^{-1/2}) only: sd = sqrt(2 sum_{i!=j} F_ij^2 / t)
    pre = preconditioner_for(op, k.diag(X), 40)
    P = pre.L @ pre.L.mT + s2 * torch.eye(150, dtype=F64)
    wp, Vp = torch.linalg.eigh(P)
    Pm = (Vp * wp.rsqrt()) @ Vp.mT
    wa, Va = torch.linalg.eigh(Pm @ _dense(k, X, s2) @ Pm)
    Flog = (Va * wa.log()) @ Va.mT
    assert math.isclose(float(pre.logdet()) + float(wa.log().sum()), exact, rel_tol=1e-9)
    off = float(Flog.square().sum() - Flog.diagonal().square().sum())
    ests = [float(slq_logdet(op, num_probes=16, generator=torch.Generator().manual_seed(s),
                             rank=40, diag=k.diag(X), tol=1e-10)[0]) for s in range(4)]
    sd = math.sqrt(2 * off / (16 * 4))
    assert sd < 0.5 * math.sqrt(2 * float(Blog.square().sum()) / (16 * 4))  # 3.6x smaller
    assert abs(sum(ests) / 4 - exact) < 4 * sd, (ests, exact, sd)


def _cholesky_logp_and_grad(k, X, s2, y):
    s2 = s2.clone().requires_grad_()
    K = k(X) + s2 * torch.eye(X.shape[0], dtype=F64)
    d = torch.distributions.MultivariateNormal(torch.zeros(X.shape[0], dtype=F64), K)
    v = d.log_prob(y)
    params = [s2, *k.parameters()]
    return float(v.detach()), [g.clone() for g in torch.autograd.grad(v, params)]


def test_iterative_log_marginal_value_and_gradient_match_cholesky():
    X, y, k, s2 = _problem(N=200)
    ref, ref_grads = _cholesky_logp_and_grad(k, X, s2, y)
    # full-rank preconditioner: the value is exact (the stochastic log|I| vanishes)
    opts = IterativeOptions(rank=200, num_probes=2000, tol=1e-11)
    s = s2.clone().requires_grad_()
    params = list(k.parameters())
    v = iterative_log_marginal(k, X, s, y[:, None], params, diag=k.diag(X).detach(),
                               options=opts)
    assert math.isclose(float(v.detach()), ref, rel_tol=1e-9, abs_tol=1e-8)
    grads = torch.autograd.grad(v, [s, *params])
    # the gradient is stochastic (trace estimator): in expectation equal; 2000 probes
    for g, r in zip(grads, ref_grads, strict=True):
        assert torch.allclose(g, r, rtol=0.03, atol=0.03 * float(r.abs().max()) + 1e-6), (g, r)


def test_iterative_gradient_is_unbiased_over_seeds():
    """The mean of the stochastic gradient over independent probe seeds approaches the
    exact gradient within its Monte Carlo error (each seed: 8 probes, rank 5)."""
    X, y, k, s2 = _problem(N=120)
    _, ref = _cholesky_logp_and_grad(k, X, s2, y)
    params = list(k.parameters())
    draws = []
    for seed in range(40):
        s = s2.clone().requires_grad_()
        opts = IterativeOptions(rank=5, num_probes=8, tol=1e-10, seed=seed)
        v = iterative_log_marginal(k, X, s, y[:, None], params, diag=k.diag(X).detach(),
                                   options=opts)
        draws.append(torch.cat([g.reshape(-1) for g in torch.autograd.grad(v, [s, *params])]))
    G = torch.stack(draws)
    mean, se = G.mean(0), G.std(0) / math.sqrt(G.shape[0])
    r = torch.cat([g.reshape(-1) for g in ref])
    assert bool(((mean - r).abs() < 4 * se + 1e-8).all()), (mean, r, se)
    assert bool((se > 0).all())


def test_finite_differences_of_the_deterministic_part():
    """With a full-rank preconditioner the value is exact; its gradient estimate with
    many probes matches central finite differences of the value."""
    X, y, k, s2 = _problem(N=80)
    opts = IterativeOptions(rank=80, num_probes=4000, tol=1e-12)
    params = list(k.parameters())
    s = s2.clone().requires_grad_()
    v = iterative_log_marginal(k, X, s, y[:, None], params, diag=k.diag(X).detach(),
                               options=opts)
    (g_s,) = torch.autograd.grad(v, [s])
    h = 1e-5

    def value(noise):
        s_ = torch.tensor(noise, dtype=F64)
        return float(iterative_log_marginal(k, X, s_, y[:, None], params,
                                            diag=k.diag(X).detach(), options=opts).detach())

    fd = (value(float(s2) + h) - value(float(s2) - h)) / (2 * h)
    assert math.isclose(float(g_s), fd, rel_tol=0.03), (float(g_s), fd)


def test_options_refuse_bad_values():
    with pytest.raises(ValueError, match="tol"):
        IterativeOptions(tol=0.0)
    with pytest.raises(ValueError, match="num_probes"):
        IterativeOptions(num_probes=0)
    with pytest.raises(ValueError, match="rank"):
        IterativeOptions(rank=-1)
    with pytest.raises(ValueError, match="chunk_rows"):
        IterativeOptions(chunk_rows=0)
    with pytest.raises(TypeError, match="no option"):
        IterativeOptions.from_config({"tolerance": 1e-3})
    with pytest.raises(ValueError, match="product_dtype"):
        IterativeOptions(product_dtype="half")


def test_product_dtype_rule():
    """``"auto"``: float32 products for a float64 model at a loose CG tolerance (the
    training default), the model's dtype at a tight one or for a float32 model."""
    from latentgp.linalg_iterative import SINGLE_PRODUCTS_TOL

    F32 = torch.float32
    assert IterativeOptions().products(F64) == F32
    assert IterativeOptions(tol=SINGLE_PRODUCTS_TOL).products(F64) == F32
    assert IterativeOptions(tol=SINGLE_PRODUCTS_TOL / 2).products(F64) == F64
    assert IterativeOptions().products(F32) == F32
    assert IterativeOptions(product_dtype="float64").products(F64) == F64
    assert IterativeOptions(product_dtype="float32", tol=1e-8).products(F64) == F32
    assert IterativeOptions(product_dtype="float64").products(F32) == F64


def _kernels(D):
    rbf = RBF()
    rbf.build(D, (), F64, torch.device("cpu"))
    rbf.lengthscale = [0.4, 0.9, 0.25]
    mat = Matern52()
    mat.build(D, (), F64, torch.device("cpu"))
    mat.lengthscale = 0.6
    composite = (RBF().on([0, 2]) * 2.5 + Matern52()) * RBF()
    composite.build(D, (), F64, torch.device("cpu"))
    return {"rbf": rbf, "matern52": mat, "composite": composite}


@pytest.mark.parametrize("name", ["rbf", "matern52", "composite", "plain callable"])
def test_float32_products_equal_float64_to_single_precision(name):
    """``product_dtype=float32``: the result is float64 and within float32 rounding of the
    float64 product, and really rounded (not silently computed in float64); a kernel's
    ``against(Z, dtype=)`` returns blocks of that dtype, equal to its float64 blocks to
    float32 precision."""
    X, y, _, s2 = _problem(N=257)
    k = _kernels(3)["composite" if name == "plain callable" else name]
    cross = (lambda A, B: k(A, B)) if name == "plain callable" else k
    V = torch.stack([y, torch.cos(X[:, 0]), torch.ones(257, dtype=F64)], 1)
    exact = _dense(k, X, s2) @ V
    op = KernelOperator(cross, X, s2, chunk_rows=50, product_dtype=torch.float32)
    got = op.matmul(V)
    assert got.dtype == F64
    err = float((got - exact).abs().max() / exact.abs().max())
    assert 1e-10 < err < 1e-5, err
    if name != "plain callable":
        block = k.against(X, dtype=torch.float32)(X[:40])
        assert block.dtype == torch.float32
        torch.testing.assert_close(block.double(), k(X[:40], X).detach(), rtol=1e-5, atol=1e-6)
        buf = torch.empty(40, 257, dtype=torch.float32)
        with torch.no_grad():  # out=: outside autograd only
            assert k.against(X, dtype=torch.float32)(X[:40], out=buf) is buf
        torch.testing.assert_close(buf, block.detach(), rtol=0, atol=0)


def test_training_evaluation_with_float32_products_matches_float64_products():
    """At the default ``tol`` the training objective's products are float32 (recorded in
    ``info``); its value and gradient equal the float64 products' to well within the
    stochastic estimate's own error, and the value is Cholesky's within that error."""
    X, y, k, _ = _problem(N=400, noise=0.05)
    out = {}
    for pd in ("float32", "float64"):
        s = torch.tensor(0.05, dtype=F64, requires_grad=True)
        params = [s, *k.parameters()]
        info = {}
        opts = IterativeOptions(rank=100, num_probes=64, product_dtype=pd)
        v = iterative_log_marginal(k, X, s, y[:, None], list(k.parameters()),
                                   diag=k.diag(X).detach(), options=opts, info=info)
        grads = torch.autograd.grad(v, params)
        out[pd] = (float(v.detach()), torch.cat([g.reshape(-1) for g in grads]))
        assert info["product_dtype"] == pd
    (v32, g32), (v64, g64) = out["float32"], out["float64"]
    K = _dense(k, X, torch.tensor(0.05, dtype=F64))
    L, _ = cholesky(K, jitter=0.0)
    exact = float(-0.5 * (y @ cho_solve(L, y[:, None])[:, 0]) - 0.5 * logdet_chol(L)
                  - 200 * math.log(2 * math.pi))
    assert abs(v32 - v64) < 1e-3  # the same probes: the rounding alone (6e-5 here)
    assert abs(v32 - exact) < 1.5 and abs(v64 - exact) < 1.5  # SLQ's error (0.56 here)
    assert float((g32 - g64).norm() / g64.norm()) < 1e-2


def test_cg_record_is_the_true_residual_of_each_iterate(monkeypatch, caplog):
    """The record of a solve: after k iterations it holds |b - A x_k| / |b| of the
    iterate x_k (re-derived by running CG for k iterations only and measuring the
    residual of its solution directly), the monitor sees the same numbers as they come,
    and a solve longer than the logging interval reports to the ``latentgp.iterative``
    logger."""
    import logging

    import latentgp.linalg_cg as linalg_cg

    X, y, k, s2 = _problem(N=120, noise=0.05)
    A = _dense(k, X, s2)
    B = torch.stack([y, torch.cos(X[:, 1])], 1)
    pre = preconditioner_for(KernelOperator(k, X, s2), k.diag(X), 5)
    seen = []
    res = conjugate_gradients(lambda V: A @ V, B, precondition=pre.solve, tol=1e-8,
                              max_iter=200, monitor=lambda p: seen.append(p))
    assert res.converged and res.residuals.shape == (res.iterations, 2)
    assert torch.equal(res.residuals[-1], res.residual)
    assert [p.iteration for p in seen] == list(range(1, res.iterations + 1))
    assert torch.equal(torch.stack([p.residual for p in seen]), res.residuals)
    assert seen[-1].active == 0 and seen[0].active == 2
    for kk in (1, 3, res.iterations // 2):
        part = conjugate_gradients(lambda V: A @ V, B, precondition=pre.solve, tol=1e-8,
                                   max_iter=kk)
        true = (B - A @ part.solution).norm(dim=0) / B.norm(dim=0)
        assert torch.allclose(res.residuals[kk - 1], true, rtol=1e-6, atol=1e-13)
    assert res.seconds > 0
    monkeypatch.setattr(linalg_cg, "LOG_EVERY_SECONDS", 0.0)
    with caplog.at_level(logging.INFO, logger="latentgp.iterative"):
        conjugate_gradients(lambda V: A @ V, B, tol=1e-8, max_iter=3)
    lines = [r.getMessage() for r in caplog.records if r.name == "latentgp.iterative"]
    assert len(lines) == 3 and lines[0].startswith("CG iteration 1: largest relative residual")
    assert "of 2 columns active" in lines[-1]


def test_cg_stops_each_column_at_its_own_tolerance():
    """``tol`` as one number per column: each column stops at the first iteration its
    relative residual is below its own tolerance, its true residual is then that small
    (as a solve of that column alone with that tolerance is), and a tolerance that is
    not positive is refused."""
    X, y, k, s2 = _problem(N=150, noise=0.02)
    A = _dense(k, X, s2)
    B = torch.stack([y, torch.cos(X[:, 1]), torch.sin(3 * X[:, 0])], 1)
    pre = preconditioner_for(KernelOperator(k, X, s2), k.diag(X), 3)
    tols = torch.tensor([1e-2, 1e-8, 1e-4], dtype=B.dtype)
    res = conjugate_gradients(lambda V: A @ V, B, precondition=pre.solve, tol=tols)
    assert res.converged and bool((res.residual <= tols).all())
    assert res.steps[0] < res.steps[2] < res.steps[1] == res.iterations
    exact = torch.linalg.solve(A, B)
    for c in range(3):
        m = int(res.steps[c])
        assert res.residuals[m - 1, c] <= tols[c] < res.residuals[m - 2, c]
        alone = conjugate_gradients(lambda V: A @ V, B[:, c:c + 1], precondition=pre.solve,
                                    tol=float(tols[c]))
        for x in (alone.solution[:, 0], res.solution[:, c]):
            err = (A @ (x - exact[:, c])).norm() / B[:, c].norm()
            assert err <= 1.01 * tols[c]
    with pytest.raises(ValueError, match="tol must be positive"):
        conjugate_gradients(lambda V: A @ V, B, tol=torch.tensor([1e-2, 0.0, 1e-4]))
    with pytest.raises(ValueError, match="one per column"):
        conjugate_gradients(lambda V: A @ V, B, tol=torch.tensor([1e-2, 1e-4]))


def test_prediction_workspace_gives_the_same_numbers_in_reused_buffers():
    """What prediction's chunks use on the iterative path, against the allocating forms:
    ``power(V, p, out=V)`` is ``power(V, p)``; LOVE's quadratic form with ``overwrite``
    equals it without (and leaves ``P^{-1/2} Kxs`` in the buffer); ``cross_columns``
    is ``K(X, Xs)`` and reuses one buffer for every chunk no wider than the widest so
    far; with a full Krylov space (k = N) the quadratic form is the exact one."""
    from latentgp.linalg_love import LoveCache

    X, y, k, s2 = _problem(N=300, noise=0.05)
    opts = IterativeOptions(rank=20, love_rank=300, predict_tol=1e-10)  # LOVE exact at k = N
    solver = iterative_solver(k, X, s2, diag=k.diag(X).detach(), options=opts)
    pre = solver.preconditioner
    g = torch.Generator().manual_seed(2)
    V = torch.randn(300, 7, generator=g, dtype=F64)
    for p in (0.5, -0.5):
        want = pre.power(V, p)
        W = V.clone()
        assert pre.power(W, p, out=W).data_ptr() == W.data_ptr()
        torch.testing.assert_close(W, want, rtol=1e-13, atol=1e-13)
    solver.love = LoveCache(solver.operator, pre, y, opts.love_rank)
    Xs = torch.rand(9, 3, generator=g, dtype=F64) * 3
    with torch.no_grad():
        cols = solver.cross_columns(Xs)
        torch.testing.assert_close(cols, k(X, Xs), rtol=1e-12, atol=1e-14)
        plain = solver.quad_form(cols.clone())
        got = solver.quad_form(cols, overwrite=True)
        torch.testing.assert_close(got, plain, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(cols, pre.power(k(X, Xs), -0.5), rtol=1e-12, atol=1e-13)
        A = _dense(k, X, s2)
        exact = (k(X, Xs) * torch.linalg.solve(A, k(X, Xs))).sum(0)
        torch.testing.assert_close(got, exact, rtol=1e-6, atol=1e-9)
        ptr = solver.cross_columns(Xs).data_ptr()
        assert solver.cross_columns(Xs[:4]).data_ptr() == ptr  # narrower: the same buffer
        torch.testing.assert_close(solver.cross_columns(Xs[:4]), k(X, Xs[:4]),
                                   rtol=1e-12, atol=1e-14)
        wide = torch.cat([Xs, Xs], 0)
        torch.testing.assert_close(solver.cross_columns(wide), k(X, wide), rtol=1e-12,
                                   atol=1e-14)


class _CountAllocations:
    """A dispatch mode that counts op outputs of ``shape`` held in new memory (not an
    input's, as ``out=`` writes, in-place ops and views are)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                inputs = {t.untyped_storage().data_ptr()
                          for t in torch.utils._pytree.tree_leaves((args, kwargs))
                          if isinstance(t, torch.Tensor)}
                for t in torch.utils._pytree.tree_leaves(out):
                    if (isinstance(t, torch.Tensor) and tuple(t.shape) == counter.shape
                            and t.untyped_storage().data_ptr() not in inputs):
                        counter.count += 1
                return out

        self.shape, self.count, self.mode = shape, 0, Mode()


def _allocations(run, shape) -> int:
    counter = _CountAllocations(shape)
    with counter.mode:
        run()
    return counter.count


@pytest.mark.parametrize("product_dtype", [None, torch.float32])
def test_cg_in_buffers_allocates_no_matrix_per_iteration_and_gives_the_same_solve(
        product_dtype):
    """With ``buffers`` the solve is the allocating solve (the same arithmetic in
    reused memory, to rounding), and the number of ``(N, C)`` matrices it allocates does
    not grow with the iterations (without buffers: four per iteration)."""
    X, y, k, s2 = _problem(N=240, noise=0.02)
    op = KernelOperator(k, X, s2, product_dtype=product_dtype)
    pre = preconditioner_for(op, k.diag(X).detach(), 10)
    # four columns: not the inputs' shape (D = 3), whose kernel preparation is not counted
    B = torch.stack([y, torch.cos(X[:, 1]), torch.sin(3 * X[:, 0]), X[:, 2]], 1)

    def solve(buffers, max_iter):
        return conjugate_gradients(op.matmul, B, precondition=pre.solve, tol=1e-12,
                                   max_iter=max_iter, buffers=buffers)

    plain, reused = solve(False, 400), solve(True, 400)
    assert reused.iterations == plain.iterations > 20
    torch.testing.assert_close(reused.solution, plain.solution, rtol=1e-10, atol=1e-12)
    for name in ("alphas", "betas", "residuals"):
        torch.testing.assert_close(getattr(reused, name), getattr(plain, name),
                                   rtol=1e-9, atol=1e-14)
    assert torch.equal(reused.steps, plain.steps)
    counts = {(b, n): _allocations(lambda b=b, n=n: solve(b, n), tuple(B.shape))
              for b in (False, True) for n in (5, 20)}
    # X, R, P, the three work matrices (and the cast of the product dtype's buffer once)
    assert counts[True, 20] == counts[True, 5] <= 7, counts
    assert counts[False, 20] - counts[False, 5] == 15 * 4, counts


def test_cg_records_grow_past_their_first_rows():
    """The per-iteration records start at 64 rows and double: a solve of more
    iterations keeps every row (against the same solve's monitor)."""
    X, y, k, s2 = _problem(N=300, noise=1e-4, lengthscale=0.3)
    A = _dense(k, X, s2)
    B = torch.stack([y, torch.cos(X[:, 1])], 1)
    seen = []
    res = conjugate_gradients(lambda V, out=None: torch.matmul(A, V, out=out), B,
                              tol=1e-10, max_iter=150, buffers=True,
                              monitor=lambda p: seen.append(p.residual))
    assert res.iterations > 64 and res.alphas.shape == (res.iterations, 2)
    assert torch.equal(torch.stack(seen), res.residuals)
    assert bool((res.alphas[: int(res.steps.min())] > 0).all())
