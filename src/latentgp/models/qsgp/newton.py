"""QSGP's randomised block-Newton mean step (``mean_step=lg.QSGP.Newton(damping, ridge,
anchor_every)``, Gaussian likelihood; the default mean step of a Gaussian QSGP).

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

Variance reduction (``Newton.anchor_every``, on by default): the minibatch gradient's
noise does not vanish at the optimum (it is ``(n / |B|) Phi_BU^T r_B`` with the optimum's
residual ``r``), so steps at a fixed rho stall at a noise floor of order
``rho m / |B|`` times the residual variance (kin40k, m = 2000, |B| = 1000: RMSE 0.36
where the exact mean gives 0.18).  With an *anchor* ``mu_a`` and its full-data gradient
``G_a = Phi^T (y - Phi mu_a)`` (one O(N m) pass, :func:`refresh_anchor`, every
``anchor_every`` steps) the step uses the SVRG estimate
``g_U = G_a[U] / sigma^2 - (n / |B|) Phi_BU^T Phi_B (mu - mu_a) / sigma^2 - S_UU mu_U``:
unbiased as before, with noise proportional to ``|Phi (mu - mu_a)|``, which vanishes as the
mean converges -- the steps then converge linearly to the optimal mean like exact block
coordinate descent.  ``G_a`` is stored without the ``1 / sigma^2`` (so a learned noise
enters exactly); a change of the random features' hyperparameters since the anchor makes
it slightly stale until the next refresh.

A check at each refresh (:func:`guarded_anchor`): the refresh's pass over the data gives
the exact mean part of the negative ELBO, ``J(mu) = |y - Phi mu|^2 / sigma^2 + mu^T S mu``,
at the new mean.  If the steps since the last anchor raised it (the features unchanged),
they are undone -- the mean goes back to the last anchor's -- the damping is halved and
the Levenberg-Marquardt ridge raised (to 0.01 of the block's mean diagonal, then 4 times
higher at each further back-off) for the rest of the fit.  The minibatch block ``H_UU``
underestimates the data curvature in directions that few rows span: with heavy-tailed
inputs (uci/protein) damped steps of 0.3 overshoot and the mean diverged after about 150
steps (RMSE 36 at the end of a default fit), where 0.1 converged; on uci/keggdirected (a
small noise, clustered rows) the first interval already diverged, and halving the damping
alone (11 back-offs) froze the mean, where the ridge of 0.01 converged.
"""

from __future__ import annotations

import torch

from ...linalg import cholesky
from ..base import GPModel
from .control_variates import shift_control_variate


def prior_block(model: GPModel, U: torch.Tensor) -> torch.Tensor:
    """``S_UU`` ``(|U|, |U|)``: the prior precision on the basis functions ``U``."""
    if model.basis.kind == "inducing":
        Z = model.Z[U]
        return model.kernel(Z, Z)
    return torch.diag(model.prior_diag(U))


def phi_mu(model: GPModel, X: torch.Tensor, v: torch.Tensor | None = None) -> torch.Tensor:
    """``Phi(X) v`` (default ``v = mu``) over all m basis functions ``(B,)``, chunked over
    the basis as the predictions are (O(B m) time, O(B chunk) memory)."""
    B, m = X.shape[0], model.m
    mu = model.mu.detach() if v is None else v
    f = X.new_zeros(B)
    chunk = max(1, min(m, 2**22 // max(B, 1)))
    for c0 in range(0, m, chunk):
        idx = torch.arange(c0, min(c0 + chunk, m), device=X.device)
        f += model.features(X, idx) @ mu[idx]
    return f


#: the Levenberg-Marquardt ridge of the Newton step after its first back-off (a fraction of
#: the block's mean diagonal; 4 times more at each further one)
BACKOFF_RIDGE = 0.01


def feature_parameters(model: GPModel) -> list[torch.Tensor]:
    """Copies of what the basis functions depend on and a fit may learn: the kernel's
    parameters and, for the inducing basis, ``Z``."""
    params = [p.detach().clone() for p in model.kernel.parameters()]
    if model.basis.kind == "inducing":
        params.append(model.Z.detach().clone())
    return params


def refresh_anchor(model: GPModel, X, y: torch.Tensor, chunk: int = 4096) -> dict:
    """The anchor of the variance-reduced step at the current mean: ``{"mu": mu_a (m,),
    "grad": Phi^T (y - Phi mu_a) (m,), "sse": |y - Phi mu_a|^2, "features":}`` (the last:
    :func:`feature_parameters`) over all rows of ``X`` ``(N, D)`` (a tensor or the lazy
    rows of an out-of-core source, read in slices) and scaled targets ``y`` ``(N,)``;
    O(N m) time in row chunks, O(m + chunk m / 8) memory."""
    mu_a = model.mu.detach().clone()
    grad = torch.zeros_like(mu_a)
    sse = mu_a.new_zeros(())
    N, m = X.shape[0], model.m
    cols = max(1, min(m, 2**22 // chunk))
    for r0 in range(0, N, chunk):
        Xc, yc = X[r0 : r0 + chunk], y[r0 : r0 + chunk]
        r = yc - phi_mu(model, Xc, mu_a)
        sse += r @ r
        for c0 in range(0, m, cols):
            idx = torch.arange(c0, min(c0 + cols, m), device=mu_a.device)
            grad[idx] += model.features(Xc, idx).T @ r
    return {"mu": mu_a, "grad": grad, "sse": sse, "features": feature_parameters(model)}


@torch.no_grad()
def prior_quadratic(model: GPModel, v: torch.Tensor, chunk: int = 2048) -> torch.Tensor:
    """``v^T S v`` for the prior precision ``S`` on the basis weights (diagonal for random
    features and the RVM; ``K(Z, Z)`` for the inducing basis, ``chunk`` rows at a time)."""
    if model.basis.kind != "inducing":
        return (model.prior_diag() * v * v).sum()
    Z = model.Z.detach()
    return sum((v[i : i + chunk] * (model.kernel(Z[i : i + chunk], Z) @ v)).sum()
               for i in range(0, Z.shape[0], chunk))


@torch.no_grad()
def mean_objective(model: GPModel, anchor: dict) -> float:
    """``J(mu_a) = |y - Phi mu_a|^2 / sigma^2 + mu_a^T S mu_a`` at the current noise and
    prior: twice the negative Gaussian ELBO's part that depends on the mean."""
    s2 = model.likelihood.variance.detach()
    return float(anchor["sse"] / s2 + prior_quadratic(model, anchor["mu"]))


def guarded_anchor(model: GPModel, X, y: torch.Tensor, state: dict, step: int) -> dict:
    """A new anchor (:func:`refresh_anchor`), unless the steps since ``state["anchor"]``
    raised :func:`mean_objective` with the features unchanged: then the mean goes back to
    that anchor's, ``state["newton_scale"]`` (the damping's factor) halves,
    ``state["newton_ridge"]`` becomes ``max(0.01, 4 x`` the ridge in use``)``, the step and
    both values are appended to ``state["newton_backoffs"]``, the control variate's running
    expectations (``state["cv"]``) follow the mean, and the old anchor is kept."""
    new = refresh_anchor(model, X, y)
    old = state.get("anchor")
    if old is None or not all(
            torch.equal(a, b) for a, b in zip(old["features"], new["features"], strict=True)):
        return new
    j_old, j_new = mean_objective(model, old), mean_objective(model, new)
    if j_new <= j_old + 1e-9 * abs(j_old):
        return new
    if state.get("cv") is not None:
        shift_control_variate(model, state["cv"], old["mu"] - model.mu.detach())
    model.mu.data.copy_(old["mu"])
    state["newton_scale"] = state.get("newton_scale", 1.0) / 2
    ridge = state.get("newton_ridge", getattr(model.mean_step, "ridge", 0.0))
    state["newton_ridge"] = max(BACKOFF_RIDGE, 4.0 * ridge)
    state.setdefault("newton_backoffs", []).append((step, j_old, j_new))
    return old


#: how the event of :func:`backoff_event` begins (what readers of ``history_.events`` match)
BACKOFF_EVENT = "the Newton mean step backed off "


def backoff_event(model: GPModel, state: dict) -> str | None:
    """What a fit's events say of the back-offs in ``state`` (None when there were none)."""
    backoffs = state.get("newton_backoffs") or []
    if not backoffs:
        return None
    return (f"{BACKOFF_EVENT}{len(backoffs)} time(s), to damping "
            f"{model.mean_step.damping * state['newton_scale']:.3g} and ridge "
            f"{state['newton_ridge']:.3g}: the steps since an anchor had raised the full-data "
            f"objective of the mean (first at step {backoffs[0][0]}), so they were undone")


def newton_mean(
    model: GPModel,
    Xl: torch.Tensor,
    yl: torch.Tensor,
    U: torch.Tensor,
    n: int,
    reduce: object = None,
    anchor: dict | None = None,
    damping: float | None = None,
    ridge: float | None = None,
) -> torch.Tensor:
    """One damped block-Newton step on ``mu_U`` from the rows ``(Xl, yl)`` (scaled
    targets) of ``n``; in a process group (``reduce``) the data parts are averaged over
    processes, as the gradients are.  ``H_UU`` gets ``ridge * mean(diag H_UU)``
    on its diagonal.  With an ``anchor`` (:func:`refresh_anchor`) the data gradient is
    the variance-reduced estimate of the module notes.  ``damping``, ``ridge``: the step
    fraction and the ridge (None: ``mean_step``'s).  Writes ``mu[U]`` and returns the new
    rows."""
    mu = model.mu.detach()
    Phi = model.features(Xl, U)
    s2 = model.likelihood.variance
    w = n / (Xl.shape[0] * s2)
    if anchor is None:
        g_data = w * (Phi.T @ (yl - phi_mu(model, Xl)))
    else:
        g_data = anchor["grad"][U] / s2 - w * (Phi.T @ phi_mu(model, Xl, mu - anchor["mu"]))
    H_data = w * (Phi.T @ Phi)
    if reduce is not None:
        reduce.mean_([g_data, H_data])
    S = prior_block(model, U)
    g = g_data - S @ mu[U]
    H = H_data + S
    ridge = model.mean_step.ridge if ridge is None else ridge
    if ridge:
        H.diagonal().add_(ridge * H.diagonal().mean())
    # as it is when it factorises (then one step with everything sampled is exact);
    # else with the configured escalating jitter (the minibatch block has rank <= n~,
    # and S = K adds little curvature in K's near-null directions)
    L, info = torch.linalg.cholesky_ex(H)
    if int(info) != 0:
        L, _ = cholesky(H, name="QSGP Newton block H_UU")
    rho = model.mean_step.damping if damping is None else damping
    new = mu[U] + rho * torch.cholesky_solve(g[:, None], L)[:, 0]
    model.mu.data[U] = new
    return new
