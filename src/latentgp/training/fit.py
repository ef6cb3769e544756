"""The one training loop every model uses.

A model provides ``objective(X_batch, y_batch, num_data)`` (an unbiased estimate of its
training objective, to maximise).  ``fit`` minimises ``-objective / N`` with the chosen
optimiser over shuffled minibatches, shows progress, stops on a tolerance or a callback,
survives non-finite steps by restoring the last good parameters and lowering the learning
rate, writes checkpoints it can resume from exactly, stops cleanly on Ctrl-C, and runs
data-parallel when a ``torch.distributed`` process group is active (see
:mod:`latentgp.training.distributed`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..linalg import CholeskyError
from . import distributed as D
from .checkpoint import load_checkpoint, save_checkpoint
from .progress import ProgressBar

OPTIMIZERS = ("adam", "adadelta", "sgd", "lbfgs")


class TrainingWarning(UserWarning):
    """Something went wrong during training and was repaired (see ``history_.events``)."""


@dataclasses.dataclass
class FitHistory:
    """What happened in a call to ``fit``.

    Attributes
    ----------
    objective: training-objective estimate at each step (in the data's units).
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


def _grads_finite(params: Sequence[torch.Tensor]) -> bool:
    total = None
    for p in params:
        if p.grad is not None:
            s = p.grad.sum()
            total = s if total is None else total + s
    return total is None or bool(torch.isfinite(total))


class _Sampler:
    """Shuffled minibatch indices, one permutation per epoch, with a checkpointable cursor."""

    def __init__(self, N: int, B: int, seed: int | None) -> None:
        self.N, self.B = N, B
        self.gen = torch.Generator(device="cpu")
        self.gen.manual_seed(0 if seed is None else int(seed))
        self.steps_per_epoch = math.ceil(N / B)
        self.perm: torch.Tensor | None = None
        self.pos = 0

    def next(self) -> torch.Tensor | None:
        """Indices of the next batch (None for the full batch in order)."""
        if self.B >= self.N:
            return None
        if self.perm is None or self.pos >= self.steps_per_epoch:
            self.perm = torch.randperm(self.N, generator=self.gen)
            self.pos = 0
        idx = self.perm[self.pos * self.B : (self.pos + 1) * self.B]
        self.pos += 1
        return idx

    def state(self) -> dict[str, Any]:
        return {"gen": self.gen.get_state(), "perm": self.perm, "pos": self.pos}

    def load(self, s: dict[str, Any]) -> None:
        self.gen.set_state(s["gen"])
        self.perm, self.pos = s["perm"], int(s["pos"])


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
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int | None = None,
    checkpoint_seconds: float | None = None,
    resume: bool = False,
) -> FitHistory:
    """Train ``model`` on validated tensors ``X`` ``(N, D)`` and ``y`` ``(N,)``/``(N, P)``.

    Parameters
    ----------
    batch_size: minibatch size B (default: all N); with W processes, the global batch.
    epochs: passes over the data; exactly ``epochs * ceil(N / B)`` steps are taken.
    max_steps: number of steps if ``epochs`` is not given.
    lr, optimizer: ``"adam"``, ``"adadelta"``, ``"sgd"`` or ``"lbfgs"`` (full batch only).
    progress: show a progress bar (None: only on an interactive terminal; rank 0 only).
    seed: seeds shuffling and Monte Carlo draws.
    tol: stop when the relative change of the per-epoch mean objective stays below
        ``tol`` for ``patience`` epochs (full batch: per step).
    callbacks: each called after every step with a dict (step, epoch, objective, model,
        seconds); returning True stops training.
    objective_offset: constant added to reported objectives (undoing target scaling).
    params: parameters to optimise (default: all of the model's).
    checkpoint: file to write checkpoints to (atomically), every ``checkpoint_every``
        steps and/or ``checkpoint_seconds`` seconds, and at the end or on Ctrl-C.
    resume: continue from ``checkpoint`` if it exists; the result then matches an
        uninterrupted run with the same arguments and seed.
    """
    N = X.shape[0]
    B = N if batch_size is None else min(int(batch_size), N)
    optimizer = optimizer.lower()
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {list(OPTIMIZERS)}")
    if optimizer == "lbfgs" and B < N:
        raise ValueError(
            f"L-BFGS needs the full batch (batch_size={batch_size} < N={N}); "
            "use adam for minibatches"
        )
    rank, W = D.world()
    if W > 1 and not getattr(model, "supports_minibatch", True):
        raise ValueError(
            f"{type(model).__name__} trains on the full data at once; distributed training "
            "needs a minibatch model such as SVGP"
        )
    sampler = _Sampler(N, B, seed)
    steps_per_epoch = sampler.steps_per_epoch
    if epochs is not None:
        total = int(epochs) * steps_per_epoch
    elif max_steps is not None:
        total = int(max_steps)
    else:
        total = 1000
    if seed is not None:
        torch.manual_seed(seed)

    params = [p for p in (params if params is not None else model.parameters()) if p.requires_grad]
    if W > 1:
        D.broadcast_state(model)
    opt = _make_optimizer(optimizer, params, lr)
    history = FitHistory()
    step = 0
    # the global batch sequence does not depend on the number of processes, so a run may
    # resume with another world size (an elastic restart) and follow the same trajectory
    fingerprint = {
        "N": N,
        "B": B,
        "seed": seed,
        "optimizer": optimizer,
        "model": type(model).__name__,
    }
    if resume and checkpoint is not None and os.path.exists(checkpoint):
        ck = load_checkpoint(checkpoint)
        if ck.get("fingerprint") != fingerprint:
            raise ValueError(
                f"checkpoint {checkpoint} belongs to a different run "
                f"({ck.get('fingerprint')}), not this one ({fingerprint})"
            )
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        sampler.load(ck["sampler"])
        torch.set_rng_state(ck["torch_rng"])
        step = int(ck["step"])
        history.objective = list(ck["history"]["objective"])
        history.events = list(ck["history"]["events"])
        history.events.append(f"resumed from {checkpoint} at step {step}")

    def write_checkpoint() -> None:
        if checkpoint is None or rank != 0:
            return
        save_checkpoint(
            checkpoint,
            {
                "fingerprint": fingerprint,
                "step": step,
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "sampler": sampler.state(),
                "torch_rng": torch.get_rng_state(),
                "history": {"objective": history.objective, "events": history.events},
            },
        )

    bar = ProgressBar(total, desc=type(model).__name__, enabled=progress if rank == 0 else False)
    bar.count = step
    t0 = last_ck = time.perf_counter()
    snapshot = copy.deepcopy(model.state_dict())
    snapshot_every = max(1, min(100, steps_per_epoch))
    consecutive = 0
    epoch_values: list[float] = []
    prev_epoch_mean: float | None = None
    calm = 0
    scale = 1.0 / N

    def closure_for(xb, yb, weight):
        def closure():
            opt.zero_grad(set_to_none=True)
            obj = model.objective(xb, yb, N * weight)
            value = obj.detach().clone().reshape(())
            if W > 1:
                D.all_reduce_mean_([value])
            ok = bool(torch.isfinite(value))
            loss = -obj * scale
            if ok:
                loss.backward()
                if W > 1:
                    D.all_reduce_mean_([p.grad for p in params if p.grad is not None])
            if math.isnan(closure.value):  # value at the parameters the step starts from
                closure.value = float(value)
            return loss if W == 1 else -value * scale

        closure.value = float("nan")
        return closure

    try:
        while step < total:
            idx = sampler.next()
            if idx is None:
                xb, yb, weight = X, y, 1.0
                if W > 1:
                    part, weight = D.local_part(torch.arange(N))
                    xb, yb = X[part.to(X.device)], y[part.to(X.device)]
            else:
                part, weight = D.local_part(idx)
                part = part.to(X.device)
                xb, yb = X[part], y[part]
            closure = closure_for(xb, yb, weight)
            try:
                if optimizer == "lbfgs":
                    opt.step(closure)
                    value = closure.value
                    ok = math.isfinite(value) and all(bool(torch.isfinite(p).all()) for p in params)
                else:
                    closure()
                    value = closure.value
                    ok = math.isfinite(value) and _grads_finite(params)
                    if ok:
                        opt.step()
            except CholeskyError as err:
                ok, value = False, float("nan")
                history.events.append(f"step {step}: {err}")
            if not ok:
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
            bar.update(1, items=B, objective=(value + objective_offset) * scale)
            now = time.perf_counter()
            if checkpoint is not None and (
                (checkpoint_every and step % checkpoint_every == 0)
                or (checkpoint_seconds and now - last_ck >= checkpoint_seconds)
            ):
                write_checkpoint()
                last_ck = now
            info = {
                "step": step,
                "epoch": step / steps_per_epoch,
                "objective": value + objective_offset,
                "model": model,
                "seconds": now - t0,
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
    except KeyboardInterrupt:
        # the step in flight was not applied: parameters are the last completed step's
        history.stopped = f"interrupted at step {step}"
        history.events.append(history.stopped)
        write_checkpoint()
        warnings.warn(
            f"training interrupted at step {step}/{total}; the model keeps the parameters "
            "of the last completed step" + (f" (checkpoint {checkpoint})" if checkpoint else ""),
            TrainingWarning,
            stacklevel=3,
        )
    finally:
        bar.close()
        history.steps = step
        history.epochs = step / steps_per_epoch
        history.seconds = time.perf_counter() - t0
    if not history.stopped:
        history.stopped = "step budget reached"
    if checkpoint is not None and not history.stopped.startswith("interrupted"):
        write_checkpoint()
    return history
