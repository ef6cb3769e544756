"""QSGP's sampled objective: index draws, the ELBO estimator and the Theorem 3 bound.

Gaussian likelihood: the ELBO ``-(L_mu + L_Sigma + L_const) / 2`` (notes B.2) is estimated
without bias by sub-sampling data rows ``l~`` once and basis functions three times
(rows ``i~`` and ``j~``, dense columns ``r~``; Theorems 1-2, Prop. 2; notes B.3).  Two
details differ from the printed estimator and stay unbiased: the terms with a diagonal
``S`` use ``(m / m~) sum_i s_i mu_i^2`` (averaged over ``i~`` and ``j~``) instead of
``mu_j~^T S_j~i~ mu_i~``, and the diagonal columns of the chevron use their exact row
(``c_rr^2 (|phi_r|^2 / s2 + s_rr) - 2 log c_rr`` with ``|phi_r|^2`` from ``l~``), which is
what the chevron sparsity buys; dense columns are sampled without replacement.  The
control variates (:mod:`.control_variates`) are added to the Gaussian estimate.

Non-Gaussian log-concave likelihoods (Bernoulli logit/probit, Laplace): the lower
bound of Theorem 3 (notes B.5).  **Correction.** The paper writes the site argument as
``a + z v`` with ``v`` an unbiased estimate of the *variance* ``phi Sigma phi^T``; the
correct reparameterisation is ``a + z sqrt(v)`` and a square root of an unbiased
estimate is no longer an expectation, so Jensen does not apply to it.  We derive the
bound instead from ``f = phi (mu + C eps)``, ``eps ~ N(0, I_m)``: the argument is the
expectation over index draws of

    A^ = (m/m~) phi_i~ mu_i~ + sum_r eps_r x_r,
    x_r = (k/|r~|) (m/m~) phi_i~ C_i~r  (sampled dense columns),
    x_i = (m/m~) count_i phi_i c_ii      (diagonal columns hit by i~),

so concavity of ``log g`` gives ``E_q log g(phi w) >= E_idx E_z log g(a + z sqrt(v))``
with ``v = sum_r x_r^2``: a genuine lower bound that uses the *standard deviation* of
``A^`` given the indices, and equals the exact expected log-likelihood when all basis
functions are used.  ``tests/integration/test_qsgp.py`` checks both claims by quadrature, and that
the printed form (``z`` times the variance) is not the expected log-likelihood.

Every function takes the (built) QSGP model and reads its public attributes: ``m``,
``k``, the option groups ``basis`` and ``covariance``, the parameters ``mu``, ``c_raw``,
``c_dense`` (``log_s``), ``features`` and ``prior_diag``.
"""

from __future__ import annotations

from typing import Any

import torch

from ...likelihoods import Gaussian
from ...parameters import LOG_2PI
from ..base import GPModel
from .control_variates import control_variate
from .factor import column_values, dense_factor


def sample_indices(model: GPModel, n: int, batch_size: int, gen: torch.Generator) -> dict:
    """One draw of the indices of a step: data rows ``ell`` (all when ``batch_size >= n``),
    basis rows ``I`` and ``J`` (``basis_batch`` each, with replacement, scales ``sI``,
    ``sJ`` = m / m~), dense columns ``R`` (without replacement, scale ``sR``), their union
    ``U`` and the positions ``invI``, ``invJ``, ``invR`` of each draw in ``U``."""
    dev = model.mu.device
    m, k = model.m, model.k
    s: dict[str, Any] = {}
    if batch_size >= n:
        s["ell"] = torch.arange(n, device=dev)
    else:
        s["ell"] = torch.randint(n, (batch_size,), generator=gen).to(dev)
    mt = model.basis_batch
    if mt >= m:
        s["I"] = s["J"] = torch.arange(m, device=dev)
        s["sI"] = s["sJ"] = 1.0
    else:
        s["I"] = torch.randint(m, (mt,), generator=gen).to(dev)
        s["J"] = torch.randint(m, (mt,), generator=gen).to(dev)
        s["sI"] = s["sJ"] = m / mt
    num_columns = model.covariance.num_columns
    ncols = min(k, 10) if num_columns is None else min(k, num_columns)
    if ncols >= k:
        s["R"] = torch.arange(k, device=dev)
        s["sR"] = 1.0
    else:
        s["R"] = torch.randperm(k, generator=gen)[:ncols].to(dev)
        s["sR"] = k / ncols
    allidx = torch.cat([s["I"], s["J"], s["R"]])
    U, inv = torch.unique(allidx, return_inverse=True)
    nI, nJ = s["I"].shape[0], s["J"].shape[0]
    s["U"], s["invI"], s["invJ"], s["invR"] = U, inv[:nI], inv[nI : nI + nJ], inv[nI + nJ :]
    return s


def gather_rows(model: GPModel, s: dict) -> dict[str, torch.Tensor]:
    """Copies of the sampled rows ``U`` of the parameter vectors (and of the dense
    columns ``R``), leaves that require grad: what one step differentiates."""
    U, R = s["U"], s["R"]
    leaves = {
        "mu": model.mu.detach()[U].clone(),
        "craw": model.c_raw.detach()[U].clone(),
        "dense": model.c_dense.detach()[U[:, None], R[None, :]].clone(),
    }
    if model.basis.kind == "rvm":
        leaves["log_s"] = model.log_s.detach()[U].clone()
    for v in leaves.values():
        v.requires_grad_(True)
    return leaves


def elbo_estimate(
    model: GPModel,
    Xl: torch.Tensor,
    yl: torch.Tensor,
    n: int,
    s: dict,
    lv: dict[str, torch.Tensor],
    cv: dict | None = None,
) -> torch.Tensor:
    """One stochastic estimate of the ELBO (Gaussian) or of its Theorem 3 lower bound
    (other likelihoods), from the rows ``(Xl, yl)`` drawn in ``s`` and the gathered rows
    ``lv`` (scaled-target units); ``cv`` the control variate's state (Gaussian only)."""
    m, k = model.m, model.k
    I, J, R, U = s["I"], s["J"], s["R"], s["U"]
    iI, iJ, iR = s["invI"], s["invJ"], s["invR"]
    sI, sJ, sR = s["sI"], s["sJ"], s["sR"]
    nt = Xl.shape[0]
    PhiU = model.features(Xl, U)  # (n~, |U|)
    PhiI, PhiJ = PhiU[:, iI], PhiU[:, iJ]
    muI, muJ = lv["mu"][iI], lv["mu"][iJ]
    CU = column_values(U, R, lv["dense"], lv["craw"])  # (|U|, |R|)
    CI, CJ = CU[iI], CU[iJ]
    craw_R = lv["craw"][iR]
    log_s = lv.get("log_s")
    if model.basis.kind == "inducing":
        KJI = model.kernel(model.Z[J], model.Z[I])
        prior_mu = sI * sJ * (muJ @ (KJI @ muI))
        prior_C = sI * sJ * ((KJI @ CI) * CJ).sum(0)  # (|R|,)
        sdI, sdJ = model.kernel.diag(model.Z[I]), model.kernel.diag(model.Z[J])
    else:
        sU = model.prior_diag(U, log_s)
        sdI, sdJ = sU[iI], sU[iJ]
        prior_mu = 0.5 * (sI * (sdI * muI**2).sum() + sJ * (sdJ * muJ**2).sum())
        prior_C = 0.5 * (sI * (sdI[:, None] * CI**2).sum(0) + sJ * (sdJ[:, None] * CJ**2).sum(0))
    # diagonal-only columns r >= k, hit by the row draws
    crI, crJ = lv["craw"][iI], lv["craw"][iJ]
    offI, offJ = (I >= k).to(Xl.dtype), (J >= k).to(Xl.dtype)
    if model.basis.kind == "rff":
        logdet_S = Xl.new_zeros(())
    elif model.basis.kind == "rvm":
        lsI, lsJ = log_s[iI], log_s[iJ]
        logdet_S = 0.5 * (sI * lsI.sum() + sJ * lsJ.sum())
    else:
        logdet_S = model.logdet_S
    data_scale = n / nt
    if isinstance(model.likelihood, Gaussian):
        s2 = model.likelihood.variance
        aI, aJ = sI * (PhiI @ muI), sJ * (PhiJ @ muJ)
        L_mu = -2.0 * data_scale / s2 * (yl @ aI) + data_scale / s2 * (aJ @ aI) + prior_mu
        VI, VJ = sI * (PhiI @ CI), sJ * (PhiJ @ CJ)  # (n~, |R|)
        quad = data_scale / s2 * (VJ * VI).sum(0)
        L_sig = sR * (quad + prior_C - 2.0 * craw_R).sum()
        colI = data_scale * (PhiI**2).sum(0)
        colJ = data_scale * (PhiJ**2).sum(0)
        TI = torch.exp(2 * crI) * (colI / s2 + sdI) - 2 * crI
        TJ = torch.exp(2 * crJ) * (colJ / s2 + sdJ) - 2 * crJ
        L_sig = L_sig + 0.5 * (sI * (offI * TI).sum() + sJ * (offJ * TJ).sum())
        if cv is not None:
            # (the dense-column control variates are included in the same call)
            L_mu = L_mu + control_variate(model, s, lv, CU, cv, n, s2.detach())
        L_const = -logdet_S - m + n * (LOG_2PI + torch.log(s2)) + data_scale * (yl @ yl) / s2
        return -0.5 * (L_mu + L_sig + L_const)
    # ---- Theorem 3 lower bound (corrected: standard deviation, see module docstring)
    a = sI * (PhiI @ muI)
    X_dense = sR * sI * (PhiI @ CI)  # (n~, |R|) coefficient of eps_r
    agg = Xl.new_zeros(nt, U.shape[0])
    agg = agg.index_add(1, iR, X_dense)
    X_diag = sI * PhiI * (offI * torch.exp(crI))[None, :]
    agg = agg.index_add(1, iI, X_diag)
    v = (agg**2).sum(1)
    ell = data_scale * model.likelihood.expected_log_prob(yl, a, v).sum()
    TI = torch.exp(2 * crI) * sdI - 2 * crI
    TJ = torch.exp(2 * crJ) * sdJ - 2 * crJ
    kl = 0.5 * (
        prior_mu
        + sR * (prior_C - 2.0 * craw_R).sum()
        + 0.5 * (sI * (offI * TI).sum() + sJ * (offJ * TJ).sum())
        - logdet_S
        - m
    )
    return ell - kl


def exact_elbo(model: GPModel, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The exact ELBO (Gaussian, notes B.2) or exact ``E_q log p(y|w) - KL`` (quadrature)
    with all rows and basis functions: what :func:`elbo_estimate` estimates (Gaussian)
    or bounds.  O(N m^2 + m^3)."""
    m = model.m
    idx = torch.arange(m, device=X.device)
    Phi = model.features(X, idx)
    C = dense_factor(model.c_raw.detach(), model.c_dense.detach())
    mu = model.mu.detach()
    if model.basis.kind == "inducing":
        S = model.kernel(model.Z)
        logdet_S = model.logdet_S
    else:
        sd = model.prior_diag()
        S = torch.diag(sd)
        logdet_S = torch.log(sd).sum()
    Sigma = C @ C.T
    logdet_Sigma = 2 * torch.log(torch.diagonal(C)).sum()
    if isinstance(model.likelihood, Gaussian):
        s2 = model.likelihood.variance
        f = Phi @ mu
        L_mu = (-2 * (y @ f) + f @ f) / s2 + mu @ S @ mu
        L_sig = ((Phi @ C) ** 2).sum() / s2 + torch.trace(S @ Sigma) - logdet_Sigma
        n = X.shape[0]
        L_const = -logdet_S - m + n * (LOG_2PI + torch.log(s2)) + (y @ y) / s2
        return -0.5 * (L_mu + L_sig + L_const)
    var = ((Phi @ C) ** 2).sum(1)
    ell = model.likelihood.expected_log_prob(y, Phi @ mu, var).sum()
    kl = 0.5 * (torch.trace(S @ Sigma) + mu @ S @ mu - m - logdet_S - logdet_Sigma)
    return ell - kl
