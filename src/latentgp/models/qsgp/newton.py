"""QSGP's randomised block-Newton mean step (``mean_step=lg.QSGP.Newton(damping, ridge)``,
Gaussian likelihood).

On a minibatch ``B`` of rows and the sampled basis functions ``U``: the block gradient
``g_U = (n / |B|) Phi_BU^T (y_B - Phi_B mu) / sigma^2 - S_UU mu_U`` and Hessian block
``H_UU = (n / |B|) Phi_BU^T Phi_BU / sigma^2 + S_UU`` of the ELBO in ``mu`` (both
unbiased over the rows), then ``mu_U += rho H_UU^{-1} g_U``.  The residual uses all m
basis functions (chunked), so a step costs O(n~ m + n~ |U|^2 + |U|^3): independent of
n, not of m -- the sub-sampled estimator's gradient is far too noisy to be multiplied by
``H^{-1}``.  With all rows and all basis functions and ``rho = 1`` this is one exact
Newton step to the optimal mean.  It converges where first-order steps on the kernel
bases' ill-conditioned mean crawl (with ``Basis.rvm_update="em"`` it makes the QSRVM prune; see
docs/results/qsgp_reproduction.md).  ``Newton.ridge`` adds ``ridge * mean(diag H_UU)`` to
the diagonal (Levenberg-Marquardt): with small data batches (n~ / n of a few percent) and
local kernel columns the minibatch block is nearly singular and undamped steps can wander
off; 0.01 keeps them in check.
"""

from __future__ import annotations

import torch

from ...linalg import cholesky
from ..base import GPModel


def prior_block(model: GPModel, U: torch.Tensor) -> torch.Tensor:
    """``S_UU`` ``(|U|, |U|)``: the prior precision on the basis functions ``U``."""
    if model.basis.kind == "inducing":
        Z = model.Z[U]
        return model.kernel(Z, Z)
    return torch.diag(model.prior_diag(U))


def phi_mu(model: GPModel, X: torch.Tensor) -> torch.Tensor:
    """``Phi(X) mu`` over all m basis functions ``(B,)``, chunked over the basis as
    the predictions are (O(B m) time, O(B chunk) memory)."""
    B, m = X.shape[0], model.m
    mu = model.mu.detach()
    f = X.new_zeros(B)
    chunk = max(1, min(m, 2**22 // max(B, 1)))
    for c0 in range(0, m, chunk):
        idx = torch.arange(c0, min(c0 + chunk, m), device=X.device)
        f += model.features(X, idx) @ mu[idx]
    return f


def newton_mean(
    model: GPModel,
    Xl: torch.Tensor,
    yl: torch.Tensor,
    U: torch.Tensor,
    n: int,
    reduce: object = None,
) -> torch.Tensor:
    """One damped block-Newton step on ``mu_U`` from the rows ``(Xl, yl)`` (scaled
    targets) of ``n``; in a process group (``reduce``) the data parts are averaged over
    processes, as the gradients are.  ``H_UU`` gets ``ridge * mean(diag H_UU)``
    on its diagonal.  Writes ``mu[U]`` and returns the new rows."""
    mu = model.mu.detach()
    Phi = model.features(Xl, U)
    w = n / (Xl.shape[0] * model.likelihood.variance)
    g_data, H_data = w * (Phi.T @ (yl - phi_mu(model, Xl))), w * (Phi.T @ Phi)
    if reduce is not None:
        reduce.mean_([g_data, H_data])
    S = prior_block(model, U)
    g = g_data - S @ mu[U]
    H = H_data + S
    if model.mean_step.ridge:
        H.diagonal().add_(model.mean_step.ridge * H.diagonal().mean())
    # as it is when it factorises (then one step with everything sampled is exact);
    # else with the configured escalating jitter (the minibatch block has rank <= n~,
    # and S = K adds little curvature in K's near-null directions)
    L, info = torch.linalg.cholesky_ex(H)
    if int(info) != 0:
        L, _ = cholesky(H, name="QSGP Newton block H_UU")
    new = mu[U] + model.mean_step.damping * torch.cholesky_solve(g[:, None], L)[:, 0]
    model.mu.data[U] = new
    return new
