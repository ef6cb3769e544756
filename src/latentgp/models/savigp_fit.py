"""SAVIGP's training protocols (notes A.10): the paper's ADADELTA settings and its global
loop, which optimises one parameter group at a time, and :func:`fit_savigp`, the body of
``SAVIGP.fit`` (the Monte Carlo draws' stream and whether they are held for the fit).

They work on a SAVIGP through public names only (``parameter_groups``, ``parameters``,
``built``, ``history_``, ``num_data``, ``sample_seed``, ``advance_draws``, ...); the
model's ``fit`` hands them the keyword arguments and a function that runs one ordinary
fit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .fit_choices import automatic_defaults

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
                    history.stopped, history.reason = "converged (global loop)", "tol"
                    break
            prev = cur
    finally:
        for p in everything:
            p.requires_grad_(True)
    if history is not None and not history.stopped.startswith("converged"):
        history.stopped, history.reason = "global iteration budget reached", "budget"
    model.history_ = history


def fit_savigp(
    model: Any,
    fit_once: Callable[..., Any],
    num_rows: int,
    options: dict[str, Any],
    *,
    alternate: bool,
    global_iters: int,
    inner_steps: int,
    global_tol: float,
    paper_adadelta: bool,
) -> Any:
    """``SAVIGP.fit`` on ``num_rows`` rows with the fit ``options``: the building fit's
    ``seed`` picks the Monte Carlo stream (later fits continue it); the draws advance
    after every step (:meth:`advance_draws` as a callback) unless the automatic L-BFGS
    fit holds them fixed (a deterministic objective; ``history_.events`` says so); with
    ``alternate``, :func:`fit_alternating`.  ``fit_once(**options)`` runs one ordinary
    fit on the data.  Returns ``model``."""
    if not model.built:
        model.num_data = num_rows
        if options.get("seed") is not None:
            # the building fit's seed picks the Monte Carlo stream; later fits continue it
            model.sample_seed = (int(options["seed"]) + 1) * 1_000_003 % 2**63  # torch's range
    kwargs = savigp_fit_options(options, num_data=model.num_data, paper_adadelta=paper_adadelta)
    # the automatic L-BFGS fit holds the draws fixed: a deterministic objective
    fixed = bool(automatic_defaults(model.fit_defaults(num_rows), options).get("fixed_draws"))
    callbacks = tuple(kwargs.pop("callbacks", ())) + (() if fixed else (model.advance_draws,))
    if not alternate:
        fit_once(callbacks=callbacks, **kwargs)
        if fixed:
            model.history_.events.append(
                f"Monte Carlo draws held fixed for the whole fit (sample-average "
                f"approximation, {model.estimator.num_samples} draws per point, latent "
                f"and component; sample_seed {model.sample_seed})"
            )
        return model
    for budget in ("epochs", "max_steps"):  # the loop sets the budget of each fit
        kwargs.pop(budget, None)
    fit_alternating(
        model,
        lambda **overrides: fit_once(callbacks=callbacks, **{**kwargs, **overrides}),
        global_iters=global_iters,
        inner_steps=inner_steps,
        global_tol=global_tol,
    )
    return model
