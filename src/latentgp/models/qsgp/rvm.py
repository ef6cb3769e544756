"""The relevance vector machine within QSGP (QSRVM; ``basis="rvm"``, notes B.1, B.8.5).

``S = diag(s)`` with one learned precision per basis function.  ``Basis.rvm_update`` picks
how ``s`` is learned: ``"gradient"`` takes the sparse optimiser's steps on ``log s``
(the seed's way); ``"em"`` and ``"mackay"`` set ``s_i`` in closed form for every row a
step samples (:func:`rvm_em_update`): ``"em"`` sets ``s_i`` to its ELBO optimum
``1 / (mu_i^2 + Sigma_ii)`` -- and, with the Gaussian likelihood, first the diagonal entry
``c_ii`` of a diagonal-only column to its optimum (Prop. 1; the column norms are computed
once per fit) -- i.e. coordinate ascent on the same ELBO; ``"mackay"`` takes MacKay's
re-estimate ``s_i = (1 - s_i Sigma_ii) / mu_i^2`` instead, which has the same fixed points
and moves ``s_i`` further per update (with the exact posterior it prunes in far fewer
iterations than em; within QSGP the slowly converging mean still limits both, see
``benchmarks/qsgp_rvm_diagnostic.py``).
"""

from __future__ import annotations

import math

import torch

from ...likelihoods import Gaussian
from ..base import GPModel
from .factor import column_values, optimal_log_diagonal

RVM_UPDATES = ("gradient", "em", "mackay")
#: cap of the RVM precisions under Basis(rvm_update="mackay") (a weight with s_i this large has
#: prior sd 1e-6 of the targets' scale: pruned)
RVM_MAX_PRECISION = 1e12


def closed_form_precisions(model: GPModel) -> bool:
    """Whether the RVM precisions take closed-form updates ("em" or "mackay")."""
    return model.basis.kind == "rvm" and model.basis.rvm_update in ("em", "mackay")


def needs_column_norms(model: GPModel) -> bool:
    """Whether the closed-form updates also set ``c_ii`` (Gaussian likelihood), for
    which a fit computes the column norms ``|phi_i|^2`` once."""
    return closed_form_precisions(model) and isinstance(model.likelihood, Gaussian)


def rvm_em_update(
    model: GPModel, U: torch.Tensor, colnorm: torch.Tensor | None, mackay: bool = False
) -> None:
    """Closed-form update of the sampled rows ``U``: the optimal ``c_ii`` of each
    diagonal-only column (Prop. 1, Gaussian likelihood, needs ``colnorm`` =
    ``|phi_i|^2`` over all n points), then

    - em: ``s_i = 1 / (mu_i^2 + Sigma_ii)``, the maximiser of the ELBO's only s_i
      terms ``(log s_i - s_i (mu_i^2 + Sigma_ii)) / 2`` (coordinate ascent);
    - mackay: ``s_i = gamma_i / mu_i^2`` with ``gamma_i = 1 - s_i Sigma_ii`` (MacKay's
      re-estimate, as in Tipping's RVM), capped at ``RVM_MAX_PRECISION``.  Its fixed
      points are em's (``s (mu^2 + Sigma) = 1`` either way), but it moves ``s_i``
      by the factor ``gamma_i / (s_i mu_i^2)`` per update instead of at most
      ``+|phi_i|^2 / sigma^2``, so pruned weights leave in far fewer steps.  Rows
      with ``gamma_i <= 0`` (a not yet converged q with ``Sigma_ii >= 1 / s_i``) take
      em's update instead of collapsing ``s_i`` to ~0.

    Writes ``c_raw[U]`` and ``log_s[U]`` of ``model``.
    """
    k = model.k
    s_U = torch.exp(model.log_s.data[U])
    if colnorm is not None:
        s2 = model.likelihood.variance.detach()
        diag_only = U >= k
        c = optimal_log_diagonal(colnorm[U], s2, s_U)
        model.c_raw.data[U] = torch.where(diag_only, c, model.c_raw.data[U])
    # Sigma_ii = |row i of C|^2: the dense columns (diagonal included for i < k), plus
    # the diagonal-only entry for i >= k
    craw = model.c_raw.data[U]
    cols = torch.arange(k, device=U.device)
    dense = column_values(U, cols, model.c_dense.data[U], craw)
    sigma = dense.square().sum(1) + torch.where(U >= k, torch.exp(2.0 * craw), 0.0)
    mu2 = model.mu.data[U] ** 2
    log_s_em = -torch.log(mu2 + sigma)
    if not mackay:
        model.log_s.data[U] = log_s_em
        return
    # gamma_i <= 0 means Sigma_ii >= 1 / s_i: a posterior variance above the prior's,
    # which q can hold only before it has converged.  MacKay's formula would then send
    # s_i to ~0 (and the weight's prior variance to ~inf); em's update has the same
    # fixed point and is always finite, so those rows take it instead.
    gamma = 1.0 - s_U * sigma
    tiny = torch.finfo(sigma.dtype).tiny
    log_s = torch.log(gamma.clamp_min(tiny)) - torch.log(mu2.clamp_min(tiny))
    log_s = torch.where(gamma > 0, log_s, log_s_em)
    model.log_s.data[U] = log_s.clamp_max(math.log(RVM_MAX_PRECISION))
