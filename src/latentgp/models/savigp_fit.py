"""SAVIGP's training protocols (notes A.10): the paper's ADADELTA settings and its global
loop, which optimises one parameter group at a time.

Both work on a SAVIGP through public names only (``parameter_groups``, ``parameters``,
``built``, ``history_``); the model's ``fit`` hands them the keyword arguments and a
function that runs one ordinary fit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The paper's ADADELTA settings (decay rate 0.95, epsilon 1e-6; notes A.10).
PAPER_ADADELTA = {"rho": 0.95, "eps": 1e-6}


def savigp_fit_options(
    options: dict[str, Any], *, num_data: int | None, paper_adadelta: bool
) -> dict[str, Any]:
    """``fit`` keywords with SAVIGP's defaults filled in (a new dict): L-BFGS runs on the
    full batch; ADADELTA takes lr 1.0 unless ``lr`` is given and, with ``paper_adadelta``,
    the paper's decay and epsilon (entries of ``optimizer_kwargs`` take precedence)."""
    kwargs = dict(options)
    if kwargs.get("optimizer") == "lbfgs" and kwargs.get("batch_size") is None:
        kwargs["batch_size"] = num_data  # L-BFGS is a full-batch method
    if kwargs.get("optimizer") == "adadelta" and kwargs.get("lr") is None:
        kwargs["lr"] = 1.0
    if paper_adadelta and kwargs.get("optimizer") == "adadelta":
        given = kwargs.get("optimizer_kwargs") or {}
        kwargs["optimizer_kwargs"] = {**PAPER_ADADELTA, **given}
    return kwargs


def fit_alternating(
    model: Any,
    fit_once: Callable[..., Any],
    *,
    global_iters: int,
    inner_steps: int,
    global_tol: float,
) -> None:
    """The paper's global loop on ``model``: each group of ``model.parameter_groups()`` is
    optimised for ``inner_steps`` with the others fixed, for up to ``global_iters`` rounds,
    stopping when the objective changes by less than ``global_tol`` (relative).

    ``fit_once(**overrides)`` runs one ordinary fit with the caller's options updated by
    ``overrides`` (``max_steps``, and for the building pass ``optimizer`` and ``lr``).
    ``model.history_`` becomes the history of all inner fits together."""
    if not model.built:  # build and initialise with a zero-step budget pass
        fit_once(max_steps=1, optimizer="adam", lr=1e-12)
    groups = {k: v for k, v in model.parameter_groups().items() if v}
    everything = [p for p in model.parameters() if p.requires_grad]
    history, prev = None, None
    try:
        for _ in range(int(global_iters)):
            for params in groups.values():
                keep = {id(p) for p in params}
                for p in everything:
                    p.requires_grad_(id(p) in keep)
                fit_once(max_steps=inner_steps)
                h = model.history_
                if history is None:
                    history = h
                else:
                    history.objective += h.objective
                    history.steps += h.steps
                    history.seconds += h.seconds
                    history.events += h.events
            for p in everything:
                p.requires_grad_(True)
            cur = history.objective[-1] if history.objective else None
            if cur is not None and prev is not None:
                if abs(cur - prev) <= global_tol * max(abs(prev), 1.0):
                    history.stopped = "converged (global loop)"
                    break
            prev = cur
    finally:
        for p in everything:
            p.requires_grad_(True)
    if history is not None and not history.stopped.startswith("converged"):
        history.stopped = "global iteration budget reached"
    model.history_ = history
