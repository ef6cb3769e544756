"""The one training loop every model uses.

A model provides ``objective(X_batch, y_batch, num_data)`` (an unbiased estimate of its
training objective, to maximise).  ``fit`` minimises ``-objective / N`` with the chosen
optimiser over shuffled minibatches, shows progress, stops on a tolerance or a
callback, and survives non-finite steps by restoring the last good parameters and
lowering the learning rate.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..linalg import CholeskyError
from .progress import ProgressBar

OPTIMIZERS = ("adam", "adadelta", "sgd", "lbfgs")


class TrainingWarning(UserWarning):
    """Something went wrong during training and was repaired (see ``history_.events``)."""


@dataclasses.dataclass
class FitHistory:
    """What happened in a call to ``fit``.

    Attributes
    ----------
    objective: training-objective estimate after each step (in the data's units).
    steps: optimiser steps taken.  epochs: passes over the data (fractional for max_steps).
    seconds: wall-clock training time.  stopped: why the loop ended.
    events: repairs made (non-finite objective, jitter raised, learning rate lowered).
    """

    objective: list[float] = dataclasses.field(default_factory=list)
    steps: int = 0
    epochs: float = 0.0
    seconds: float = 0.0
    stopped: str = ""
    events: list[str] = dataclasses.field(default_factory=list)


def _make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "adadelta":
        return torch.optim.Adadelta(params, lr=lr, rho=0.9, eps=1e-5)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "lbfgs":
        return torch.optim.LBFGS(
            params,
            lr=lr,
            max_iter=1,
            max_eval=30,
            line_search_fn="strong_wolfe",
            history_size=50,
            tolerance_grad=1e-9,
            tolerance_change=1e-12,
        )
    raise ValueError(f"unknown optimizer {name!r}; choose one of {list(OPTIMIZERS)}")


def _all_finite(params: Sequence[torch.Tensor]) -> bool:
    total = None
    for p in params:
        if p.grad is not None:
            s = p.grad.sum()
            total = s if total is None else total + s
    return total is None or bool(torch.isfinite(total))


def fit(
    model: Any,
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    batch_size: int | None = None,
    epochs: int | None = None,
    max_steps: int | None = None,
    lr: float = 0.01,
    optimizer: str = "adam",
    progress: bool | None = None,
    seed: int | None = None,
    tol: float | None = None,
    patience: int = 3,
    callbacks: Sequence[Callable[[dict], bool | None]] = (),
    objective_offset: float = 0.0,
    params: Sequence[torch.nn.Parameter] | None = None,
    max_failures: int = 8,
) -> FitHistory:
    """Train ``model`` on validated tensors ``X`` ``(N, D)`` and ``y`` ``(N,)``/``(N, P)``.

    Parameters
    ----------
    batch_size: minibatch size B (default: all N).
    epochs: passes over the data; exactly ``epochs * ceil(N / B)`` steps are taken.
    max_steps: number of steps if ``epochs`` is not given.
    lr, optimizer: ``"adam"``, ``"adadelta"``, ``"sgd"`` or ``"lbfgs"`` (full batch only).
    progress: show a progress bar (None: only on an interactive terminal).
    seed: seeds shuffling and Monte Carlo draws.
    tol: stop when the relative change of the per-epoch mean objective stays below
        ``tol`` for ``patience`` epochs (full batch: per step).
    callbacks: each called after every step with a dict (step, epoch, objective, model,
        seconds); returning True stops training.
    objective_offset: constant added to reported objectives (undoing target scaling).
    params: parameters to optimise (default: all of the model's).
    """
    N = X.shape[0]
    B = N if batch_size is None else int(batch_size)
    B = min(B, N)
    optimizer = optimizer.lower()
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {list(OPTIMIZERS)}")
    if optimizer == "lbfgs" and B < N:
        raise ValueError(
            f"L-BFGS needs the full batch (batch_size={batch_size} < N={N}); "
            "use adam for minibatches"
        )
    steps_per_epoch = math.ceil(N / B)
    if epochs is not None:
        total = int(epochs) * steps_per_epoch
    elif max_steps is not None:
        total = int(max_steps)
    else:
        total = 1000
    if seed is not None:
        torch.manual_seed(seed)
    gen = torch.Generator(device="cpu")
    gen.manual_seed(0 if seed is None else int(seed))

    params = [p for p in (params if params is not None else model.parameters()) if p.requires_grad]
    opt = _make_optimizer(optimizer, params, lr)
    history = FitHistory()
    bar = ProgressBar(total, desc=type(model).__name__, enabled=progress)
    t0 = time.perf_counter()
    snapshot = copy.deepcopy(model.state_dict())
    snapshot_every = max(1, min(100, steps_per_epoch))
    failures = consecutive = 0
    epoch_values: list[float] = []
    prev_epoch_mean: float | None = None
    calm = 0
    perm = None
    step = 0
    full_batch = B == N
    scale = 1.0 / N

    def closure_for(xb, yb):
        def closure():
            opt.zero_grad(set_to_none=True)
            obj = model.objective(xb, yb, N)
            loss = -obj * scale
            if torch.isfinite(loss):
                loss.backward()
            if math.isnan(closure.value):  # value at the parameters the step starts from
                closure.value = float(obj.detach())
            return loss

        closure.value = float("nan")
        return closure

    try:
        while step < total:
            pos = step % steps_per_epoch
            if full_batch:
                xb, yb = X, y
            else:
                if pos == 0 or perm is None:
                    perm = torch.randperm(N, generator=gen).to(X.device)
                idx = perm[pos * B : (pos + 1) * B]
                xb, yb = X[idx], y[idx]
            closure = closure_for(xb, yb)
            ok = True
            try:
                if optimizer == "lbfgs":
                    opt.step(closure)
                    value = closure.value
                    ok = math.isfinite(value) and all(bool(torch.isfinite(p).all()) for p in params)
                else:
                    closure()
                    value = closure.value
                    ok = math.isfinite(value) and _all_finite(params)
                    if ok:
                        opt.step()
            except CholeskyError as err:
                ok, value = False, float("nan")
                history.events.append(f"step {step}: {err}")
            if not ok:
                failures += 1
                consecutive += 1
                model.load_state_dict(snapshot)
                for g in opt.param_groups:
                    g["lr"] *= 0.5
                opt.state.clear()
                msg = (
                    f"step {step}: non-finite objective or gradient; restored the last good "
                    f"parameters and lowered the learning rate to {opt.param_groups[0]['lr']:.3g}"
                )
                history.events.append(msg)
                warnings.warn(msg, TrainingWarning, stacklevel=3)
                if consecutive >= max_failures:
                    raise FloatingPointError(
                        f"training failed {consecutive} times in a row with a non-finite "
                        "objective or gradient even after lowering the learning rate; the "
                        "last good parameters were restored. Check the data scale and the "
                        "initial hyperparameters."
                    )
            else:
                consecutive = 0
                history.objective.append(value + objective_offset)
                epoch_values.append(value)
                if (step + 1) % snapshot_every == 0:
                    snapshot = copy.deepcopy(model.state_dict())
            step += 1
            bar.update(1, items=xb.shape[0], objective=(value + objective_offset) * scale)
            info = {
                "step": step,
                "epoch": step / steps_per_epoch,
                "objective": value + objective_offset,
                "model": model,
                "seconds": time.perf_counter() - t0,
            }
            if any(cb(info) for cb in callbacks):
                history.stopped = "callback"
                break
            if tol is not None and (step % steps_per_epoch == 0) and epoch_values:
                mean = sum(epoch_values) / len(epoch_values)
                epoch_values = []
                if prev_epoch_mean is not None:
                    rel = abs(mean - prev_epoch_mean) / max(abs(prev_epoch_mean), 1e-12)
                    calm = calm + 1 if rel < tol else 0
                    if calm >= patience:
                        history.stopped = f"converged (relative change < {tol:g})"
                        break
                prev_epoch_mean = mean
    finally:
        bar.close()
        history.steps = step
        history.epochs = step / steps_per_epoch
        history.seconds = time.perf_counter() - t0
    if not history.stopped:
        history.stopped = "step budget reached"
    del failures
    return history
