"""One sparse training step of QSGP (notes B.3, B.11).

Every step draws its indices (:func:`.estimator.sample_indices`), gathers only the
sampled rows of the length-``m`` parameter vectors, differentiates the estimate with
respect to those rows, and writes them back with the row-sparse AdaGrad (or plain SGD) of
:class:`latentgp.training.optim.SparseRowOptimizer` -- no optimiser ever touches the whole
vector, so a step costs ``O(n~ m~ + m~^2)`` whatever ``m`` and ``N``; the few kernel /
noise hyperparameters use Adam.  The mean may instead take the block-Newton step
(:mod:`.newton`) and the RVM precisions their closed-form updates (:mod:`.rvm`); the
control variate's running expectations follow every update (:mod:`.control_variates`).
"""

from __future__ import annotations

from typing import Any

import torch

from ..base import GPModel
from .control_variates import track_control_variate
from .estimator import elbo_estimate, gather_rows, sample_indices
from .factor import column_values
from .newton import guarded_anchor, newton_mean
from .options import Newton
from .rvm import closed_form_precisions, rvm_em_update


def finite_step(opt: torch.optim.Optimizer) -> None:
    """``opt.step()`` unless a gradient of its first group is not finite."""
    params = opt.param_groups[0]["params"]
    if all(p.grad is None or bool(torch.isfinite(p.grad).all()) for p in params):
        opt.step()


def sparse_step(
    model: GPModel, state: dict[str, Any], data: tuple[Any, Any, int], batch_size: int,
    gen: torch.Generator, rows: Any, hopt: torch.optim.Optimizer | None, step: int,
    reduce: Any = None,
) -> float:  # fmt: skip
    """:meth:`QSGP.sparse_step` on the model's training ``state`` (the sparse optimiser's
    accumulators ``G_*``, the RVM column norms, the control variate ``cv``); ``data`` is
    ``(X, y, n)``, the other arguments are the method's."""
    X, y, n = data
    cv = state["cv"] if model.control_variate.rank else None
    s = sample_indices(model, n, batch_size, gen)
    lv = gather_rows(model, s)
    ell = s["ell"]
    W = 1 if reduce is None else reduce.world
    n_eff = n
    if W > 1:
        ell, weight = reduce.local_part(ell)
        n_eff = n * weight
    if hopt is not None:
        hopt.zero_grad(set_to_none=True)
    Xl, yl = X[ell], y[ell]
    obj = elbo_estimate(model, Xl, yl, n_eff, s, lv, cv)
    value = obj.detach()
    if W > 1:
        value = value.clone().reshape(())
        reduce.mean_([value])
    if not torch.isfinite(value):
        return float("nan")
    (-obj / n).backward()
    if W > 1:
        grads = [v.grad for v in lv.values() if v.grad is not None]
        if hopt is not None:
            grads += [p.grad for p in hopt.param_groups[0]["params"] if p.grad is not None]
        reduce.mean_(grads)
    with torch.no_grad():
        if isinstance(model.mean_step, Newton):
            every = model.mean_step.anchor_interval(n, batch_size, model.basis_batch)
            if every and (state.get("anchor") is None or step - state["anchor_step"] >= every):
                state["anchor"] = guarded_anchor(model, X, y, state, step)
                state["anchor_step"] = step
        # n_eff: this process's rows count N W / B each, so the mean over processes of
        # the Newton step's data terms is the one-process value (unequal parts included)
        _update_rows(model, state, s, lv, Xl, yl, n_eff, rows, cv, reduce)
        if hopt is not None and step >= model.hyperparameters.delay:
            finite_step(hopt)
    return float(value)


def _update_rows(model, state, s, lv, Xl, yl, n, rows, cv, reduce) -> None:
    """Write the sampled rows back: mean (optimiser or Newton), C, RVM precisions, and
    the control variate's running expectations."""
    U, R = s["U"], s["R"]
    if cv is not None:
        old_mu = lv["mu"].detach().clone()
        old_C = column_values(U, R, lv["dense"], lv["craw"]).detach()
    rows_cols = (U[:, None], R[None, :])
    if isinstance(model.mean_step, Newton):
        rho = model.mean_step.damping * state.get("newton_scale", 1.0)
        new_mu = newton_mean(model, Xl, yl, U, n, reduce, state.get("anchor"), rho,
                             state.get("newton_ridge"))
    else:
        new_mu = rows.update(model.mu, state["G_mu"], U, lv["mu"])
    new_craw = rows.update(model.c_raw, state["G_craw"], U, lv["craw"])
    new_dense = rows.update(model.c_dense, state["G_dense"], rows_cols, lv["dense"])
    if closed_form_precisions(model):
        rvm_em_update(model, U, state.get("colnorm"), mackay=model.basis.rvm_update == "mackay")
    elif model.basis.kind == "rvm":
        rows.update(model.log_s, state["G_log_s"], U, lv["log_s"])
    if cv is not None:
        new_C = column_values(U, R, new_dense, new_craw) if R.shape[0] else None
        track_control_variate(cv, R, new_mu - old_mu, new_C, old_C)
