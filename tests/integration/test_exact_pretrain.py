"""ExactGP's fit on the iterative path: an exact fit on a subset, then a full-data fine-tune."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.linalg_iterative import conjugate_gradients, default_rank
from latentgp.models.exact import pretrain_subset


def _data(N, seed=0, D=3):
    g = np.random.default_rng(seed)
    X = g.uniform(0, 5, (N, D))
    y = np.sin(X).sum(1) + 0.2 * g.standard_normal(N)
    return X, y


def _at_cholesky(model):
    new = model.clone()
    new.solver = "cholesky"
    return new.log_marginal_likelihood()


def test_pretrain_then_finetune_to_convergence_reaches_the_cholesky_optimum():
    X, y = _data(400, seed=2)
    ref = lg.ExactGP(solver="cholesky").fit(X, y, seed=0)
    # value exact (rank 400 = N), gradient's trace term a 64-probe estimate (see
    # test_exact_iterative.test_fit_on_the_cg_path_reaches_the_cholesky_optimum)
    opts = {"pretrain_rows": 120, "finetune_steps": None, "num_probes": 64}
    m = lg.ExactGP(solver="cg", iterative=opts).fit(X, y, seed=0)
    first, second = m.history_.stages
    assert first["stage"] == "pretrain" and first["rows"] == 120 and first["solver"] == "cholesky"
    assert first["reason"] == "converged" and first["steps"] > 0
    assert second["stage"] == "finetune" and second["rows"] == 400 and second["solver"] == "cg"
    assert second["reason"] == "converged" == m.history_.reason
    assert second["steps"] == m.history_.steps > 0
    assert any("pretrained on 120 of 400 rows" in e for e in m.history_.events)
    assert _at_cholesky(m) > ref.log_marginal_likelihood() - 0.05


def test_pretrain_stage_is_the_cholesky_fit_of_the_subset():
    X, y = _data(500, seed=3)
    m = lg.ExactGP(solver="cg", normalize_y=False,
                   iterative={"pretrain_rows": 150, "finetune_steps": 1}).fit(X, y, seed=4)
    idx = pretrain_subset(500, 150, 4).numpy()
    assert len(set(idx.tolist())) == 150 and np.all(np.diff(idx) > 0)
    sub = lg.ExactGP(solver="cholesky", normalize_y=False).fit(X[idx], y[idx], seed=4)
    # the pretrain stage's final objective is the subset's optimum (same rows, same model)
    stage = m.history_.stages[0]
    assert math.isclose(stage["objective"], sub.history_.objective[-1], rel_tol=1e-4)
    # one full-data step, the default budget replaced by finetune_steps
    assert m.history_.stages[1]["steps"] == 1 and m.history_.reason == "budget"
    # the fine-tune starts from the subset's optimum and improves the full-data likelihood
    at_sub = sub.clone().set_data(X, y)
    at_sub.solver = "cholesky"
    assert _at_cholesky(m) > at_sub.log_marginal_likelihood()


def test_no_pretrain_when_it_does_not_apply():
    X, y = _data(300)
    small = lg.ExactGP(solver="cg", iterative={"rank": 50}).fit(X, y, max_steps=2, seed=0)
    assert small.history_.stages == []  # 300 <= pretrain_rows (2,100)
    off = lg.ExactGP(solver="cg", iterative={"pretrain_rows": 0, "rank": 50})
    off.fit(X, y, max_steps=2, seed=0)
    assert off.history_.stages == [] and off.history_.steps == 2
    chol = lg.ExactGP(solver="cholesky", iterative={"pretrain_rows": 100}).fit(
        X, y, max_steps=2, seed=0)
    assert chol.history_.stages == []
    # a budget named by the call applies to the fine-tune; a second fit continues
    m = lg.ExactGP(solver="cg", iterative={"pretrain_rows": 100, "rank": 50})
    m.fit(X, y, max_steps=2, seed=0)
    assert [s["stage"] for s in m.history_.stages] == ["pretrain", "finetune"]
    assert m.history_.steps == 2
    m.fit(X, y, max_steps=1, seed=0)
    assert m.history_.stages == [] and m.history_.steps == 1


def test_bad_pretrain_options_are_refused():
    with pytest.raises(ValueError, match="pretrain_rows"):
        lg.ExactGP(solver="cg", iterative={"pretrain_rows": -5})
    with pytest.raises(ValueError, match="pretrain_rows"):
        lg.ExactGP.Iterative(pretrain_rows=1)
    with pytest.raises(ValueError, match="finetune_steps"):
        lg.ExactGP.Iterative(finetune_steps=0)
    with pytest.raises(ValueError, match="finetune_steps"):
        lg.ExactGP.Iterative(finetune_steps=2.5)
    with pytest.raises(ValueError, match="predict_tol"):
        lg.ExactGP.Iterative(predict_tol=0.0)


def test_warm_started_cg_reaches_the_same_solution():
    g = torch.Generator().manual_seed(0)
    A = torch.randn(60, 60, generator=g, dtype=torch.float64)
    A = A @ A.mT + 60 * torch.eye(60, dtype=torch.float64)
    B = torch.randn(60, 3, generator=g, dtype=torch.float64)
    ref = torch.linalg.solve(A, B)
    cold = conjugate_gradients(lambda V: A @ V, B, tol=1e-12)
    warm = conjugate_gradients(lambda V: A @ V, B, tol=1e-12, x0=ref + 1e-6)
    assert torch.allclose(warm.solution, ref, atol=1e-10)
    assert warm.iterations < cold.iterations
    with pytest.raises(ValueError, match="x0"):
        conjugate_gradients(lambda V: A @ V, B, x0=B[:, :2])


def test_default_rank_fits_the_memory_target():
    # the factor (N, rank) within 2 KiB per point from 32,768 points on; 1000 below 8,389
    assert default_rank(800) == 800 and default_rank(8_000) == 1000
    for n in (41_157, 100_000, 200_000):
        assert default_rank(n) == 256 and 8 * default_rank(n) <= 2048
