"""QSGP's data-dependent initial values (notes B.1, B.3): the basis centres ``Z`` (a seeded
subset of the training inputs), the random features' input offset, ``log|S|`` of the
inducing basis, the zero mean, and the diagonal of ``C`` by Proposition 1 with the column
norms ``|phi_r|^2`` it needs.

Plain functions of a built :class:`~latentgp.models.qsgp.QSGP` (its public state:
``m``, ``k``, ``basis``, ``kernel``, ``likelihood``, ``mu``, ``c_raw``, ``c_dense``,
``Z`` / ``input_offset``, ``log_s``, ``logdet_S``, ``features``, ``prior_diag``); the
model's ``_init_from_data``, :meth:`~latentgp.models.qsgp.QSGP.column_norms` and
:meth:`~latentgp.models.qsgp.QSGP.set_closed_form_diagonal` call them.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from ...config import config
from ...likelihoods import Gaussian
from ...linalg import cholesky
from ..exact import ExactGP, pretrain_subset
from .factor import column_values, optimal_log_diagonal

__all__ = [
    "closed_form_log_diagonal", "column_norms", "initial_values", "optimal_noise_variance",
    "pretrain_hyperparameters",
]


def column_norms(model: Any, X: Any, chunk: int = 4096) -> torch.Tensor:
    """``|phi_r|^2`` over the rows of ``X`` (a validated tensor or lazy rows) for all m
    columns ``(m,)``: O(N m), ``chunk`` basis functions and ``2^22 / chunk`` rows at a
    time."""
    out = torch.zeros_like(model.mu)
    rows = max(1, 2**22 // chunk)
    for c0 in range(0, model.m, chunk):
        idx = torch.arange(c0, min(c0 + chunk, model.m), device=model.mu.device)
        for r0 in range(0, X.shape[0], rows):
            out[idx] += (model.features(X[r0 : r0 + rows], idx) ** 2).sum(0)
    return out


def closed_form_log_diagonal(model: Any, X: Any) -> torch.Tensor:
    """Proposition 1's ``log c_rr`` ``(m,)`` for every column at the current
    hyperparameters, from the column norms over ``X`` (Gaussian likelihood)."""
    s2 = model.likelihood.variance
    return optimal_log_diagonal(column_norms(model, X), s2, model.prior_diag())


@torch.no_grad()
def initial_values(model: Any, X: torch.Tensor) -> None:
    """Set the data-dependent initial values from the training inputs ``X`` ``(N, D)``:
    the input offset (random features) or the basis centres (a subset drawn by a generator
    seeded with ``basis.seed``), ``log|S|`` (inducing basis, m <= 4096), ``mu = 0``, dense
    columns 0, ``log s = 0`` (RVM) and the diagonal of ``C`` by Proposition 1 with
    ``|phi_r|^2`` estimated cheaply (O(1) per column for random features, else from at
    most 256 rows)."""
    N = X.shape[0]
    kind = model.basis.kind
    if kind == "rff":
        model.input_offset.copy_(X.mean(0))
    if kind != "rff":
        g = torch.Generator(device="cpu").manual_seed(model.basis.seed)
        if model.m == N:
            idx = torch.arange(N)
        else:
            idx = torch.randperm(N, generator=g)[: model.m]
        model.Z.copy_(X[idx.to(X.device)])
    if kind == "inducing" and model.m <= 4096:
        L, model.last_jitter = cholesky(model.kernel(model.Z), "K(Z, Z)")
        model.logdet_S.copy_(2.0 * torch.log(torch.diagonal(L)).sum())
    model.mu.zero_()
    model.c_dense.zero_()
    if kind == "rvm":
        model.log_s.zero_()
    # c_rr from Prop. 1 with |phi_r|^2 estimated cheaply (O(1) per column for rff)
    gaussian = isinstance(model.likelihood, Gaussian)
    s2 = float(model.likelihood.variance) if gaussian else 1.0
    if kind == "rff":
        colnorm = torch.full_like(model.mu, N * float(model.kernel.variance) / model.m)
    else:
        colnorm = column_norms(model, X[: min(N, 256)]) * (N / min(N, 256))
    model.c_raw.copy_(optimal_log_diagonal(colnorm, s2, model.prior_diag()))


def pretrain_hyperparameters(model: Any, X: torch.Tensor, y: torch.Tensor,
                             rows: int) -> dict[str, Any]:
    """Set ``model``'s kernel and noise hyperparameters to those of an exact GP fitted by
    Cholesky and L-BFGS, to convergence, on ``min(rows, N)`` training rows drawn by
    :func:`~latentgp.models.exact.pretrain_subset` of ``basis.seed`` (the seed's
    protocol), in this process alone (inside a process group every process fits the same
    rows to the same values).  ``X`` ``(N, D)``, ``y`` ``(N,)`` are the model's inputs and
    *scaled* targets, so the exact GP does not rescale them (``normalize_y=False``) and its
    hyperparameters carry over in the model's units.  Returns the stage's record (rows,
    steps, reason, seconds, CPU seconds, the exact GP's log marginal likelihood)."""
    n = min(int(rows), X.shape[0])
    idx = pretrain_subset(X.shape[0], n, model.basis.seed).to(X.device)
    t0, c0 = time.perf_counter(), time.process_time()
    exact = ExactGP(kernel=model.kernel, likelihood=type(model.likelihood)(),
                    normalize_y=False, dtype=X.dtype, device=X.device)
    with config(distributed=False):  # the same rows and fit in every process of a group
        exact.fit(X[idx], y[idx], seed=model.basis.seed, progress=False)
    with torch.no_grad():
        model.kernel.load_state_dict(exact.kernel.state_dict())
        model.likelihood.load_state_dict(exact.likelihood.state_dict())
    h = exact.history_
    return {"stage": "pretrain", "rows": n, "solver": "cholesky", "steps": h.steps,
            "reason": h.reason, "seconds": time.perf_counter() - t0,
            "cpu_seconds": time.process_time() - c0,
            "objective": h.objective[-1] if h.objective else None}


@torch.no_grad()
def optimal_noise_variance(model: Any, X: Any, y: Any, chunk: int = 4096) -> float:
    """The Gaussian ELBO's optimal noise variance at the current q(w) and kernel:
    ``(|y - Phi mu|^2 + |Phi C|_F^2) / N`` (the expected squared residual under q), in the
    model's scaled-target units.  ``X`` ``(N, D)`` (a tensor or lazy rows) and the scaled
    targets ``y`` ``(N,)``; O(N m), ``chunk`` basis functions and ``2^22 / chunk`` rows at a
    time.  ``|Phi C|^2`` splits into the diagonal columns, ``sum_r c_rr^2 |phi_r|^2``, and
    the ``k`` dense columns, ``|Phi C[:, :k]|^2``."""
    m, k, N = model.m, model.k, X.shape[0]
    c = torch.exp(model.c_raw)
    all_rows = torch.arange(m, device=model.mu.device)
    dense = (column_values(all_rows, torch.arange(k, device=c.device), model.c_dense,
                           model.c_raw) if k else None)
    rows = max(1, 2**22 // chunk)
    total = 0.0
    for r0 in range(0, N, rows):
        Xb, yb = X[r0 : r0 + rows], y[r0 : r0 + rows]
        f = torch.zeros_like(yb)
        dense_part = torch.zeros(yb.shape[0], k, dtype=yb.dtype, device=yb.device)
        diag_part = yb.new_zeros(())
        for c0 in range(0, m, chunk):
            idx = torch.arange(c0, min(c0 + chunk, m), device=model.mu.device)
            Phi = model.features(Xb, idx)
            f += Phi @ model.mu[idx]
            keep = idx >= k  # columns of C that are diagonal only
            diag_part += (Phi[:, keep] ** 2 @ c[idx[keep]] ** 2).sum()
            if k:
                dense_part += Phi @ dense[idx]
        total += float(((yb - f) ** 2).sum() + diag_part + (dense_part**2).sum())
    return total / N
