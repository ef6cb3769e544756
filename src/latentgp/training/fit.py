"""The shared training loop of the gradient-trained models.

A model provides ``objective(X_batch, y_batch, num_data)`` (an unbiased estimate of its
training objective, to maximise).  ``fit`` minimises ``-objective / N`` with the chosen
optimiser over shuffled minibatches.  The loop itself (progress, tolerance, callbacks,
repair of non-finite steps, exact checkpoint/resume, Ctrl-C) is
:func:`latentgp.training.loop.run_loop`; this module plugs a gradient step into it
(:class:`GradientTask`), data-parallel when a ``torch.distributed`` process group is
active (see :mod:`latentgp.training.distributed`).  Models with other updates (SEP's EP
sites, QSGP's sparse rows) plug their own :class:`~latentgp.training.loop.StepTask` in.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ..linalg import CholeskyError
from . import distributed as D
from .loop import FitHistory, Sampler, StepTask, TrainingWarning, run_loop, total_steps

OPTIMIZERS = ("adam", "adadelta", "sgd", "lbfgs")

__all__ = [
    "OPTIMIZERS",
    "FitHistory",
    "GradientTask",
    "TrainingWarning",
    "fit",
    "make_optimizer",
]

# the loop's settings for each optimiser; ``optimizer_kwargs`` override them
_OPTIMIZER_DEFAULTS: dict[str, tuple[type[torch.optim.Optimizer], dict[str, Any]]] = {
    "adam": (torch.optim.Adam, {}),
    "adadelta": (torch.optim.Adadelta, {"rho": 0.9, "eps": 1e-5}),
    "sgd": (torch.optim.SGD, {"momentum": 0.9}),
    "lbfgs": (
        torch.optim.LBFGS,
        {
            "max_iter": 1,
            "max_eval": 30,
            "line_search_fn": "strong_wolfe",
            "history_size": 50,
            "tolerance_grad": 1e-9,
            "tolerance_change": 1e-12,
        },
    ),
}


def make_optimizer(
    name: str, params, lr: float, optimizer_kwargs: Mapping[str, Any] | None = None
) -> torch.optim.Optimizer:
    """The optimiser ``name`` over ``params`` at learning rate ``lr``.

    ``optimizer_kwargs`` are passed to the ``torch.optim`` constructor, overriding the
    loop's defaults (adadelta: ``rho=0.9, eps=1e-5``; sgd: ``momentum=0.9``; lbfgs: one
    iteration per step with a strong-Wolfe line search).
    """
    if name not in _OPTIMIZER_DEFAULTS:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {list(OPTIMIZERS)}")
    cls, defaults = _OPTIMIZER_DEFAULTS[name]
    extra = dict(optimizer_kwargs or {})
    if "lr" in extra or "params" in extra:
        raise ValueError("optimizer_kwargs must not hold 'lr' or 'params': pass lr= to fit")
    params = list(params)
    kwargs = {**defaults, **extra}
    if name == "adam" and "fused" not in kwargs and "foreach" not in kwargs:
        # one fused kernel for all parameters (about 7% of a small SVGP step on a CPU);
        # the same update as the per-parameter loop up to round-off
        with contextlib.suppress(RuntimeError, TypeError, ValueError):
            return cls(params, lr=lr, fused=True, **kwargs)
    try:
        return cls(params, lr=lr, **kwargs)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"optimizer_kwargs {extra} do not suit the {name} optimizer "
            f"(torch.optim.{cls.__name__}): {err}"
        ) from None


def check_optimizer_kwargs(optimizer_kwargs: Any) -> dict[str, Any] | None:
    """``None`` or a dict with string keys (else ``ValueError``)."""
    if optimizer_kwargs is None:
        return None
    if not isinstance(optimizer_kwargs, Mapping) or not all(
        isinstance(k, str) for k in optimizer_kwargs
    ):
        raise ValueError(
            f"optimizer_kwargs must be a dict of keyword arguments, got {optimizer_kwargs!r}"
        )
    return dict(optimizer_kwargs)


def _grads_finite(params: Sequence[torch.Tensor]) -> bool:
    total = None
    for p in params:
        if p.grad is not None:
            s = p.grad.sum()
            total = s if total is None else total + s
    return total is None or bool(torch.isfinite(total))


# kept for code that imported the old name
_Sampler = Sampler


class GradientTask(StepTask):
    """A step of ``optimizer`` on ``-model.objective(batch) / N`` (data-parallel over the
    parts of the global batch when a process group is active)."""

    failure_errors = (CholeskyError,)

    def __init__(
        self,
        model: Any,
        X: torch.Tensor,
        y: torch.Tensor,
        params: list[torch.nn.Parameter],
        opt: torch.optim.Optimizer,
        optimizer: str,
    ) -> None:
        self.model, self.X, self.y, self.params = model, X, y, params
        self.opt, self.optimizer = opt, optimizer
        self.N = X.shape[0]
        self.W = D.world()[1]
        self.snapshot = None
        # L-BFGS (full batch): the objective and gradient at the point where the last line
        # search stopped.  torch's LBFGS.step starts by evaluating the closure at the
        # current parameters, which is that same point, so with one iteration per step
        # every step would otherwise evaluate it twice.
        self._memo: tuple | None = None

    def _memo_hit(self) -> tuple | None:
        memo = self._memo
        if memo is None:
            return None
        if all(torch.equal(p.detach(), q) for p, q in zip(self.params, memo[0], strict=True)):
            return memo
        return None

    def _closure(self, xb, yb, weight, memoize: bool = False):
        model, opt, params, W = self.model, self.opt, self.params, self.W
        scale = 1.0 / self.N

        def closure():
            if memoize and math.isnan(closure.value):
                hit = self._memo_hit()
                if hit is not None:
                    _, value, grads, loss = hit
                    for p, g in zip(params, grads, strict=True):
                        p.grad = None if g is None else g.clone()
                    closure.value = float(value)
                    return loss.clone()
            opt.zero_grad(set_to_none=True)
            obj = model.objective(xb, yb, self.N * weight)
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
            out = loss if W == 1 else -value * scale
            if memoize:
                self._memo = (
                    (
                        [p.detach().clone() for p in params],
                        value,
                        [None if p.grad is None else p.grad.detach().clone() for p in params],
                        out.detach().clone(),
                    )
                    if ok
                    else None
                )
            return out

        closure.value = float("nan")
        return closure

    def step(self, step: int, idx: torch.Tensor | None) -> tuple[float, bool]:
        X, y = self.X, self.y
        if idx is None:
            xb, yb, weight = X, y, 1.0
            if self.W > 1:
                part, weight = D.local_part(torch.arange(self.N))
                xb, yb = X[part.to(X.device)], y[part.to(X.device)]
        else:
            part, weight = D.local_part(idx)
            part = part.to(X.device)
            xb, yb = X[part], y[part]
        closure = self._closure(xb, yb, weight, memoize=self.optimizer == "lbfgs" and idx is None)
        if self.optimizer == "lbfgs":
            self.opt.step(closure)
            value = closure.value
            ok = math.isfinite(value) and all(bool(torch.isfinite(p).all()) for p in self.params)
        else:
            closure()
            value = closure.value
            ok = math.isfinite(value) and _grads_finite(self.params)
            if ok:
                self.opt.step()
        return value, ok

    def take_snapshot(self) -> None:
        self.snapshot = copy.deepcopy(self.model.state_dict())

    def recover(self, step: int) -> str:
        self._memo = None
        self.model.load_state_dict(self.snapshot)
        for g in self.opt.param_groups:
            g["lr"] *= 0.5
        self.opt.state.clear()
        return (
            f"step {step}: non-finite objective or gradient; restored the last good "
            f"parameters and lowered the learning rate to {self.opt.param_groups[0]['lr']:.3g}"
        )

    def give_up(self, failures: int) -> str:
        return (
            f"training failed {failures} times in a row with a non-finite "
            "objective or gradient even after lowering the learning rate; the "
            "last good parameters were restored. Check the data scale and the "
            "initial hyperparameters."
        )

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.opt.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._memo = None
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])


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
    optimizer_kwargs: Mapping[str, Any] | None = None,
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
    optimizer_kwargs: extra keyword arguments of the ``torch.optim`` constructor, e.g.
        ``{"rho": 0.95, "eps": 1e-6}`` for adadelta or ``{"betas": (0.8, 0.99)}`` for adam;
        they override the loop's defaults (see :func:`make_optimizer`).
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
    optimizer_kwargs = check_optimizer_kwargs(optimizer_kwargs)
    rank, W = D.world()
    if W > 1 and not getattr(model, "supports_minibatch", True):
        raise ValueError(
            f"{type(model).__name__} trains on the full data at once; distributed training "
            "needs a minibatch model such as SVGP"
        )
    sampler = Sampler(N, B, seed)
    total = total_steps(sampler.steps_per_epoch, epochs, max_steps)
    if seed is not None:
        torch.manual_seed(seed)

    params = [p for p in (params if params is not None else model.parameters()) if p.requires_grad]
    if W > 1:
        D.broadcast_state(model)
    opt = make_optimizer(optimizer, params, lr, optimizer_kwargs)
    # the global batch sequence does not depend on the number of processes, so a run may
    # resume with another world size (an elastic restart) and follow the same trajectory
    fingerprint = {
        "N": N,
        "B": B,
        "seed": seed,
        "optimizer": optimizer,
        "model": type(model).__name__,
    }
    return run_loop(
        GradientTask(model, X, y, params, opt, optimizer),
        sampler,
        total,
        desc=type(model).__name__,
        progress=progress,
        tol=tol,
        patience=patience,
        callbacks=callbacks,
        model=model,
        objective_offset=objective_offset,
        objective_scale=1.0 / N,
        max_failures=max_failures,
        checkpoint=checkpoint,
        checkpoint_every=checkpoint_every,
        checkpoint_seconds=checkpoint_seconds,
        resume=resume,
        fingerprint=fingerprint,
        rank=rank,
        stacklevel=4,
    )
