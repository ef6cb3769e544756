"""QSGP's control variates (notes B.4; Prop. 3, Appendix F).

The control variate of Prop. 3 (``ControlVariate.rank`` support points ``X_p``, running
expectation ``a = Phi_p mu`` updated in ``O(n_bar m~)``, sparse-gradient scaling of
Appendix F.1) is applied to the ``Phi^T Phi`` term of the mean and of every sampled dense
column, with the support features frozen at the hyperparameters of the moment it was
set up (Appendix F.3).  With ``basis="inducing"`` (``S = K``) the Nyström control
variate of Appendix F.2 is applied to the prior term ``mu^T K mu`` (and to each sampled
dense column): ``-(m/m~)^2 mu_i~^T Q_i~j~ mu_j~ + mu^T Q mu`` with
``Q = K(Z, P) K(P, P)^{-1} K(P, Z)`` on the support points P and ``|L_P^{-1} K(P, Z) mu|^2``
kept as a running expectation (the paper's Table 3; it assumes fixed kernel
hyperparameters, the inducing basis's default).

The state is a dict: ``Xp`` (support inputs), ``hypers`` (the frozen feature
hyperparameters, ``basis="rff"``), ``a`` ``(n_bar,)`` and ``A`` ``(k, n_bar)`` (the
running expectations of the mean and of the dense columns), and for the Nyström one
``Lp``, ``b``, ``B``; a step adds the support features of its rows (``PhiP``, ``WP``),
which :func:`track_control_variate` then uses.
"""

from __future__ import annotations

from typing import Any

import torch

from ...linalg import cholesky, solve_lower
from ..base import GPModel
from .factor import column_values


def uses_nystrom(model: GPModel) -> bool:
    """Whether a control variate set up now includes the Nyström one (Appendix F.2)."""
    return model.control_variate.nystrom and model.basis.kind == "inducing"


def make_control_variate(model: GPModel, X: torch.Tensor, rank: int, seed: int) -> dict:
    """The state of a control variate on ``rank`` support points drawn from ``X`` (seeded
    by ``seed``), its running expectations set at the current parameters."""
    g = torch.Generator(device="cpu").manual_seed(seed + 7919)
    p = torch.randperm(X.shape[0], generator=g)[: min(rank, X.shape[0])].to(X.device)
    Xp = X[p]
    hypers = None
    if model.basis.kind == "rff":
        hypers = {
            "lengthscale": model.kernel.lengthscale.detach().clone(),
            "variance": model.kernel.variance.detach().clone(),
        }
    a = Xp.new_zeros(Xp.shape[0])
    A = Xp.new_zeros(model.k, Xp.shape[0])
    with torch.no_grad():
        nz = torch.nonzero(model.mu).flatten()
        for c0 in range(0, nz.shape[0], 65536):
            idx = nz[c0 : c0 + 65536]
            a += model.features(Xp, idx, frozen=hypers) @ model.mu[idx]
        if model.k:
            # dense columns c_r have rows r..m-1; chunk over rows
            cols = torch.arange(model.k, device=X.device)
            for c0 in range(0, model.m, 65536):
                idx = torch.arange(c0, min(c0 + 65536, model.m), device=X.device)
                Cb = column_values(idx, cols, model.c_dense[idx], model.c_raw[idx])
                A += (model.features(Xp, idx, frozen=hypers) @ Cb).T
    cv: dict[str, Any] = {"Xp": Xp, "hypers": hypers, "a": a, "A": A}
    if uses_nystrom(model):
        # Appendix F.2: support inputs P = Xp; b = L_P^{-1} K(P, Z) mu (the running
        # expectation of the prior term's control variate), B = L_P^{-1} K(P, Z) C_dense
        with torch.no_grad():
            Lp, _ = cholesky(model.kernel(Xp), "K(P, P) of the Nystrom control variate")
        cv["Lp"] = Lp
        cv["b"] = solve_lower(Lp, a[:, None])[:, 0]
        cv["B"] = solve_lower(Lp, A.T).T.contiguous()  # (k, n_bar)
    return cv


def control_variate(
    model: GPModel,
    s: dict,
    lv: dict[str, torch.Tensor],
    CU: torch.Tensor,
    cv: dict,
    n: int,
    s2: torch.Tensor,
) -> torch.Tensor:
    """Prop. 3 + Appendix F.1: ``-(n m^2/(s2 n_bar m~^2)) mu_j~^T Phi_pj~^T Phi_pi~ mu_i~
    + (n/(s2 n_bar)) |a|^2`` with the sparse-gradient scaling, for the mean and for the
    sampled dense columns (times ``sR``), plus the Nyström term when set up.  Zero mean:
    adds no bias.  Stores the support features of the sampled rows in ``cv``."""
    U, iI, iJ = s["U"], s["invI"], s["invJ"]
    sI, sJ, sR = s["sI"], s["sJ"], s["sR"]
    nbar = cv["Xp"].shape[0]
    PhiP = model.features(cv["Xp"], U, frozen=cv["hypers"])  # (n_bar, |U|)
    cv["PhiP"] = PhiP.detach()
    coef = n / (s2 * nbar)
    ratio = model.m / U.shape[0]
    mu = lv["mu"]
    pI, pJ = sI * (PhiP[:, iI] @ mu[iI]), sJ * (PhiP[:, iJ] @ mu[iJ])
    a = cv["a"] + PhiP @ (mu - mu.detach())
    aa = (a * a).sum()
    out = -coef * (pJ @ pI) + coef * (ratio * aa + ((1.0 - ratio) * aa).detach())
    if CU.shape[1]:
        R = s["R"]
        PI, PJ = sI * (PhiP[:, iI] @ CU[iI]), sJ * (PhiP[:, iJ] @ CU[iJ])  # (n_bar, |R|)
        A = cv["A"][R].T + PhiP @ (CU - CU.detach())  # (n_bar, |R|)
        AA = (A * A).sum()
        out = out + sR * (
            -coef * (PJ * PI).sum() + coef * (ratio * AA + ((1.0 - ratio) * AA).detach())
        )
    if "Lp" in cv:
        out = out + nystrom_control_variate(model.m, s, lv, CU, cv, PhiP)
    return out


def nystrom_control_variate(
    m: int, s: dict, lv: dict[str, torch.Tensor], CU: torch.Tensor, cv: dict, PhiP: torch.Tensor
) -> torch.Tensor:
    """Appendix F.2 for ``S = K``: ``-(m/m~)^2 mu_j~^T Q_j~i~ mu_i~ + |b|^2`` with
    ``Q = W^T W``, ``W = L_P^{-1} K(P, Z)`` (here ``K(P, Z_U)`` is ``Phi_p``), the
    running expectation ``b = W mu`` and the sparse-gradient scaling of Appendix F.1;
    the same for every sampled dense column (times ``sR``).  Zero mean."""
    iI, iJ = s["invI"], s["invJ"]
    sI, sJ, sR = s["sI"], s["sJ"], s["sR"]
    W = solve_lower(cv["Lp"], PhiP)  # (n_bar, |U|)
    cv["WP"] = W
    ratio = m / s["U"].shape[0]
    mu = lv["mu"]
    qI, qJ = sI * (W[:, iI] @ mu[iI]), sJ * (W[:, iJ] @ mu[iJ])
    b = cv["b"] + W @ (mu - mu.detach())
    bb = (b * b).sum()
    out = -(qJ @ qI) + ratio * bb + ((1.0 - ratio) * bb).detach()
    if CU.shape[1]:
        R = s["R"]
        QI, QJ = sI * (W[:, iI] @ CU[iI]), sJ * (W[:, iJ] @ CU[iJ])
        Bm = cv["B"][R].T + W @ (CU - CU.detach())  # (n_bar, |R|)
        BB = (Bm * Bm).sum()
        out = out + sR * (-(QJ * QI).sum() + ratio * BB + ((1.0 - ratio) * BB).detach())
    return out


@torch.no_grad()
def shift_control_variate(model: GPModel, cv: dict, d_mu: torch.Tensor,
                          chunk: int = 4096) -> None:
    """Keep the running expectations ``a = Phi_p mu`` (and the Nyström ``b = W mu``) in
    step with a move of the whole mean by ``d_mu`` ``(m,)`` (the Newton step's back-off to
    its anchor), ``chunk`` basis functions at a time."""
    for c0 in range(0, model.m, chunk):
        idx = torch.arange(c0, min(c0 + chunk, model.m), device=d_mu.device)
        PhiP = model.features(cv["Xp"], idx, frozen=cv["hypers"])  # (n_bar, chunk)
        cv["a"] += PhiP @ d_mu[idx]
        if "Lp" in cv and "b" in cv:
            cv["b"] += solve_lower(cv["Lp"], PhiP) @ d_mu[idx]


def track_control_variate(
    cv: dict,
    R: torch.Tensor,
    d_mu: torch.Tensor,
    new_C: torch.Tensor | None,
    old_C: torch.Tensor | None,
) -> None:
    """Keep the control variate's running expectations ``a = Phi_p mu`` (and the
    Nyström ``b``), ``A`` (and ``B``) on the sampled dense columns ``R`` in step with
    a sparse update that moved ``mu`` by ``d_mu`` and the rows of ``C`` from ``old_C``
    to ``new_C`` (None: no dense column sampled)."""
    PhiP = cv["PhiP"]
    cv["a"] += PhiP @ d_mu
    if "WP" in cv:
        cv["b"] += cv["WP"] @ d_mu
    if new_C is not None:
        cv["A"][R] += (PhiP @ (new_C - old_C)).T
        if "WP" in cv:
            cv["B"][R] += (cv["WP"] @ (new_C - old_C)).T
