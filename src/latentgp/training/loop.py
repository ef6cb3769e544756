"""The loop driver every training procedure runs on.

A training procedure is a :class:`StepTask`: it knows how to take ONE step (a gradient step
with an optimiser for SVGP-like models, EP site updates plus a hyperparameter step for SEP,
sparse AdaGrad row updates for QSGP), how to undo a failed step, and how to write and read
its own state.  :func:`run_loop` owns everything around the step:

- the minibatch cursor (:class:`Sampler`: one permutation per epoch from a seeded
  generator whose state is checkpointed, so a resumed run sees the same batches);
- the progress bar (rank 0 only), callbacks, the ``tol``/``patience`` early stop and the
  :class:`FitHistory`;
- repair of failed steps (non-finite objective, Cholesky failure): the task restores its
  last good state and lowers its learning rate, up to ``max_failures`` times in a row;
- checkpoints written atomically every ``checkpoint_every`` steps / ``checkpoint_seconds``
  seconds, at the end and on Ctrl-C, and exact resume from them;
- Ctrl-C: stop cleanly, keep the last completed step.

Distributed training is the task's business (it decides which rows of a batch this process
works on and how results are combined); the driver only needs the process's rank so that
one process draws the bar and writes the checkpoint.  Tasks that run data-parallel keep
their state identical on every process, so rank 0's checkpoint is the run's state.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .checkpoint import load_checkpoint, save_checkpoint
from .convergence import Convergence, StoppingRule, user_rule
from .progress import ProgressBar

SAMPLER_MODES = ("epoch", "always", "none")


class TrainingWarning(UserWarning):
    """Something went wrong during training and was repaired, or the fit ended at a
    degenerate solution (:mod:`latentgp.training.diagnostics`); see ``history_.events``."""


@dataclasses.dataclass
class FitHistory:
    """What happened in a call to ``fit``.

    Attributes
    ----------
    objective: training-objective estimate at each step (in the data's units).
    steps: optimiser steps taken.  epochs: passes over the data (fractional for max_steps).
    seconds: wall-clock training time.  stopped: why the loop ended, in words.
    reason: the same as one word: ``"converged"`` (the automatic rule of a fit without a
    budget), ``"ceiling"`` (that fit's step ceiling, unconverged), ``"tol"`` (the
    user's ``tol``), ``"budget"`` (the user's ``epochs``/``max_steps`` ran out),
    ``"callback"`` or ``"interrupted"``.
    convergence: the criterion's rule and last numbers (change of window means, its
    bound, the noise standard error; see :mod:`latentgp.training.convergence`).
    events: repairs made (non-finite objective, jitter raised, learning rate lowered).
    optimizer: the optimiser that took the steps (e.g. ``"lbfgs"``, ``"adam"``; set by
    :func:`latentgp.training.fit`, which may choose it: see ``GPModel.fit``).
    batch_size: rows per step (N for a full-batch fit).
    holdout: the automatic held-out stopping rule's record when it ran (rows held out,
    best step and score, every score: :mod:`latentgp.training.holdout`), else empty.
    stages: a fit made of several stages records one dict per stage here (ExactGP on the
    iterative path: an exact fit on a subset, then the fine-tune on all the data; the
    other fields describe the last stage), else empty.
    """

    objective: list[float] = dataclasses.field(default_factory=list)
    steps: int = 0
    epochs: float = 0.0
    seconds: float = 0.0
    stopped: str = ""
    reason: str = ""
    convergence: dict[str, Any] = dataclasses.field(default_factory=dict)
    events: list[str] = dataclasses.field(default_factory=list)
    optimizer: str = ""
    batch_size: int = 0
    holdout: dict[str, Any] = dataclasses.field(default_factory=dict)
    stages: list[dict[str, Any]] = dataclasses.field(default_factory=list)


class Sampler:
    """Minibatch indices with a checkpointable cursor.

    Parameters
    ----------
    N, B: number of data points and (global) batch size.
    seed: seeds the generator (None: 0).
    mode: ``"epoch"``: a fresh permutation of ``range(N)`` per epoch, sliced into
        ``ceil(N / B)`` batches, and ``None`` (all rows in order) when ``B >= N``;
        ``"always"``: the same but permuting even when ``B >= N``; ``"none"``: ``next``
        always returns ``None`` and the task draws what it needs from :attr:`gen` (whose
        state is still checkpointed).
    """

    def __init__(self, N: int, B: int, seed: int | None, mode: str = "epoch") -> None:
        if mode not in SAMPLER_MODES:
            raise ValueError(f"sampler mode must be one of {list(SAMPLER_MODES)}, got {mode!r}")
        self.N, self.B, self.mode = N, B, mode
        self.gen = torch.Generator(device="cpu")
        self.gen.manual_seed(0 if seed is None else int(seed))
        self.steps_per_epoch = math.ceil(N / B)
        self.perm: torch.Tensor | None = None
        self.pos = 0

    def next(self) -> torch.Tensor | None:
        """Indices ``(B,)`` of the next batch (None: the full batch in order, or mode none)."""
        if self.mode == "none" or (self.mode == "epoch" and self.B >= self.N):
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


class StepTask:
    """One training procedure, as :func:`run_loop` drives it (subclass and override).

    Attributes
    ----------
    failure_errors: exceptions of :meth:`step` that count as a failed step (recorded in
        ``history.events`` and repaired) rather than propagating.
    warn_on_failure: emit a :class:`TrainingWarning` for each repaired step.
    """

    failure_errors: tuple[type[BaseException], ...] = ()
    warn_on_failure: bool = True

    def step(self, step: int, idx: torch.Tensor | None) -> tuple[float, bool]:
        """Take step number ``step`` on the batch ``idx`` (None: the task's full data).

        Returns ``(objective, ok)``: the objective estimate (in the model's internal units,
        before the driver adds ``objective_offset``) and whether the step was applied.
        """
        raise NotImplementedError

    def probe(self) -> float | None:
        """The objective at the current parameters on a fixed set of rows (internal units,
        as :meth:`step` returns it), a deterministic function of the parameters; None when
        the task has none (the rule then keeps to the minibatch values for the rest of the
        fit).  Where it exists the stochastic rule tests the slope of these values inside
        each window instead of the noisy minibatch means
        (:class:`~latentgp.training.convergence.Convergence`)."""
        return None

    def finished(self) -> bool:
        """Whether the task has converged by its own test (checked after each step; a
        task whose plan ``stops_itself``, e.g. the batched L-BFGS's per-member test)."""
        return False

    def take_snapshot(self) -> None:
        """Remember the current state as the last good one."""

    def recover(self, step: int) -> str:
        """Undo a failed step (restore the snapshot, lower the rate); return the event text."""
        return f"step {step}: failed"

    def give_up(self, failures: int) -> str:
        """Message of the ``FloatingPointError`` raised after ``failures`` in a row."""
        return f"training failed {failures} times in a row"

    def state_dict(self) -> dict[str, Any]:
        """The task's part of a checkpoint (tensors, numbers, strings, lists, dicts)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` wrote (``state`` is the whole checkpoint)."""


def lower_learning_rate(opt: torch.optim.Optimizer, step: int, failure: str, kept: str) -> str:
    """Step repair's remedy, after the task restored its last good ``kept``: halve every
    group's learning rate and forget the optimiser's running state (its moments were built
    on the failed direction).  Returns the event message for ``failure``."""
    for g in opt.param_groups:
        g["lr"] *= 0.5
    opt.state.clear()
    lr = float(opt.param_groups[0]["lr"])
    return (
        f"step {step}: non-finite {failure}; restored the last good {kept} and lowered "
        f"the learning rate to {lr:.3g}"
    )


class RestoringTask(StepTask):
    """A step task whose repair restores the state from before the failed step and
    lowers the learning rate of ``self.opt`` (:func:`lower_learning_rate`).

    Subclasses set ``opt`` and provide :meth:`snapshot_state` / :meth:`restore_state`;
    ``failure`` (what was non-finite) and ``kept`` (what is restored, plural) word the
    events and the final error.
    """

    failure: str = "objective or gradient"
    kept: str = "parameters"
    opt: torch.optim.Optimizer
    snapshot: Any = None

    def snapshot_state(self) -> Any:
        """A copy of the state a failed step would spoil."""
        raise NotImplementedError

    def restore_state(self, snapshot: Any) -> None:
        """Put back what :meth:`snapshot_state` returned."""
        raise NotImplementedError

    def take_snapshot(self) -> None:
        self.snapshot = self.snapshot_state()

    def recover(self, step: int) -> str:
        self.restore_state(self.snapshot)
        return lower_learning_rate(self.opt, step, self.failure, self.kept)

    def give_up(self, failures: int) -> str:
        return (
            f"training failed {failures} times in a row with a non-finite "
            f"{self.failure} even after lowering the learning rate; the "
            f"last good {self.kept} were restored. Check the data scale and the "
            "initial hyperparameters."
        )


def plan_fingerprint(N: int, B: int, seed: int | None, optimizer: str, model: str,
                     **extra: Any) -> dict[str, Any]:
    """What a checkpoint must match to be resumed: data size, batch, seed, optimiser,
    model (and any model-specific sizes in ``extra``)."""
    return {"N": N, "B": B, "seed": seed, "optimizer": optimizer, "model": model, **extra}


def total_steps(
    steps_per_epoch: int, epochs: int | None, max_steps: int | None, default: int = 1000
) -> int:
    """``epochs * steps_per_epoch`` or ``max_steps``, whichever comes first when both are
    given, else ``default``."""
    if epochs is not None:
        by_epochs = int(epochs) * steps_per_epoch
        return by_epochs if max_steps is None else min(by_epochs, int(max_steps))
    if max_steps is not None:
        return int(max_steps)
    return default


def run_loop(
    task: StepTask,
    sampler: Sampler,
    total: int,
    *,
    desc: str = "",
    progress: bool | None = None,
    tol: float | None = None,
    patience: int = 3,
    rule: StoppingRule | None = None,
    callbacks: Sequence[Callable[[dict], bool | None]] = (),
    model: Any = None,
    objective_offset: float = 0.0,
    objective_scale: float = 1.0,
    max_failures: int = 8,
    snapshot_every: int | None = None,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int | None = None,
    checkpoint_seconds: float | None = None,
    resume: bool = False,
    fingerprint: dict[str, Any] | None = None,
    rank: int = 0,
    stacklevel: int = 3,
) -> FitHistory:
    """Drive ``task`` for ``total`` steps over the batches of ``sampler``.

    Parameters
    ----------
    task: the step function and its state (see :class:`StepTask`).
    sampler: the batch cursor; ``sampler.B`` points are counted per step for the bar.
    total: number of steps (a resumed run continues up to it).
    desc, progress: bar label; show it (None: only on an interactive terminal; rank 0 only).
    tol, patience: stop when the relative change of the per-epoch mean objective stays
        below ``tol`` for ``patience`` epochs.
    rule: the automatic convergence rule of a fit without a budget (``total`` is then its
        step ceiling: reaching it warns); applied to the objective times
        ``objective_scale``.  Overrides ``tol``.
    callbacks: each called after every step with a dict (step, epoch, objective, model,
        seconds); returning True stops training.  A callback with a ``finish(info)``
        method has it called once when training ends (not when interrupted); a string it
        returns is added to ``history.events``
        (:class:`~latentgp.training.EarlyStopping` restores its best parameters there).
    model: what callbacks receive as ``info["model"]``.
    objective_offset: added to the task's objective for the history and callbacks.
    objective_scale: the bar shows ``(objective + offset) * objective_scale`` (e.g. 1 / N).
    max_failures: failed steps in a row before giving up with ``FloatingPointError``.
    snapshot_every: steps between snapshots of the last good state (default
        ``min(100, steps per epoch)``).
    checkpoint, checkpoint_every, checkpoint_seconds, resume: see ``latentgp.training.fit``.
    fingerprint: what identifies the run; resuming from a checkpoint of another run fails.
    rank: this process's rank (only rank 0 draws the bar and writes checkpoints).
    stacklevel: ``warnings.warn`` stack level, so warnings point at the user's call.
    """
    steps_per_epoch = sampler.steps_per_epoch
    fingerprint = dict(fingerprint or {})
    history = FitHistory()
    conv = (Convergence(rule, objective_scale, probe=task.probe) if rule is not None
            else Convergence(None if tol is None else user_rule(tol, steps_per_epoch, patience)))
    step = 0
    if resume and checkpoint is not None and os.path.exists(checkpoint):
        step = _resume(checkpoint, fingerprint, task, sampler, history, conv)

    def write_checkpoint() -> None:
        if checkpoint is None or rank != 0:
            return
        save_checkpoint(
            checkpoint,
            {
                "fingerprint": fingerprint,
                "step": step,
                **task.state_dict(),
                "sampler": sampler.state(),
                "torch_rng": torch.get_rng_state(),
                "history": {"objective": history.objective, "events": history.events},
                "loop": conv.state(),
            },
        )

    bar = ProgressBar(total, desc=desc, enabled=progress if rank == 0 else False)
    bar.count = step
    t0 = last_ck = time.perf_counter()
    task.take_snapshot()
    if snapshot_every is None:
        snapshot_every = max(1, min(100, steps_per_epoch))
    consecutive = 0
    in_flight = False
    try:
        while step < total:
            # the cursor and random state before this step: an interrupt inside the step
            # rewinds to them, so a resumed run takes this very step again
            before = (sampler.state(), torch.get_rng_state())
            in_flight = True
            value, ok = _take_step(task, step, sampler.next(), history)
            if not ok:
                consecutive += 1
                _repair(task, step, consecutive, max_failures, history, stacklevel + 1)
            else:
                consecutive = 0
                history.objective.append(value + objective_offset)
                conv.add(value)
                if (step + 1) % snapshot_every == 0:
                    task.take_snapshot()
            step += 1
            in_flight = False
            # the rule's window closes before any checkpoint of this step is written
            converged = conv.end_of_step(step)
            bar.update(1, items=sampler.B, objective=(value + objective_offset) * objective_scale)
            now = time.perf_counter()
            if checkpoint is not None and _checkpoint_due(
                step, now - last_ck, checkpoint_every, checkpoint_seconds
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
                history.stopped = history.reason = "callback"
                break
            stop = _convergence_stop(task, converged, rule, tol, step)
            if stop is not None:
                history.stopped, history.reason = stop
                break
    except KeyboardInterrupt:
        # the step in flight was not applied: the state is the last completed step's
        if in_flight:
            sampler.load(before[0])
            torch.set_rng_state(before[1])
        history.stopped = f"interrupted at step {step}"
        history.reason = "interrupted"
        history.events.append(history.stopped)
        write_checkpoint()
        warnings.warn(
            f"training interrupted at step {step}/{total}; the model keeps the parameters "
            "of the last completed step" + (f" (checkpoint {checkpoint})" if checkpoint else ""),
            TrainingWarning,
            stacklevel=stacklevel,
        )
    finally:
        bar.close()
        history.steps = step
        history.epochs = step / steps_per_epoch
        history.seconds = time.perf_counter() - t0
    _finish_history(history, conv, rule, total, stacklevel + 1)
    if not history.stopped.startswith("interrupted"):
        last = {"step": step, "epoch": step / steps_per_epoch, "model": model,
                "seconds": history.seconds}
        _finish_callbacks(callbacks, last, history)
        if checkpoint is not None:
            write_checkpoint()
    return history


def _convergence_stop(
    task: StepTask, converged: bool, rule: StoppingRule | None, tol: float | None, step: int
) -> tuple[str, str] | None:
    """``(stopped, reason)`` when the run has converged after ``step`` steps: by the
    objective's rule (``converged``) or by the task's own test (:meth:`StepTask.finished`)."""
    if converged:
        if rule is None:
            return f"converged (relative change < {tol:g})", "tol"
        return f"converged at step {step}", "converged"
    if task.finished():
        return f"converged at step {step} (the task's own test)", "converged"
    return None


def _checkpoint_due(
    step: int, since: float, every: int | None, seconds: float | None
) -> bool:
    """Whether a periodic checkpoint is due after ``step`` steps, ``since`` seconds after
    the last one."""
    return bool((every and step % every == 0) or (seconds and since >= seconds))


def _finish_history(
    history: FitHistory, conv: Convergence, rule: StoppingRule | None, total: int,
    stacklevel: int,
) -> None:
    """Why the loop ended (when no earlier cause was recorded) and the criterion's numbers;
    an automatic fit that ran into its ceiling unconverged warns."""
    if conv.rule is not None:
        history.convergence = {**dataclasses.asdict(conv.rule), **conv.last,
                               "calm_windows": conv.calm, "ceiling": total if rule else None}
    if history.stopped:
        return
    if rule is None:
        history.stopped, history.reason = "step budget reached", "budget"
        return
    history.stopped = f"step ceiling reached ({total} steps) before convergence"
    history.reason = "ceiling"
    warnings.warn(
        f"training stopped at its step ceiling of {total} steps without converging "
        f"({conv.describe()}); the model may be underfitted.  Call fit again to continue "
        "from here, pass a larger max_steps/epochs, or lower lr if the objective "
        "oscillates (history_.objective shows the trace)",
        TrainingWarning,
        stacklevel=stacklevel,
    )


def check_matching_state(expected: Any, found: Any, where: str, path: str = "") -> None:
    """Refuse a checkpoint whose tensors differ in shape or dtype from the ones the run
    holds at the same place (``expected``: the task's own ``state_dict()``), before any is
    loaded: ``load_state_dict`` would cast integers to floats silently and fail on a
    shape deep inside torch.  Places that only one side has are left to the task."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(found, torch.Tensor):
            raise ValueError(f"{where}: record {path or '/'} is not a tensor")
        if found.dtype != expected.dtype or tuple(found.shape) != tuple(expected.shape):
            raise ValueError(
                f"{where}: record {path} is {str(found.dtype).replace('torch.', '')} "
                f"{tuple(found.shape)}, but this run has "
                f"{str(expected.dtype).replace('torch.', '')} {tuple(expected.shape)}; "
                "delete the checkpoint to start afresh"
            )
    elif isinstance(expected, dict) and isinstance(found, dict):
        for key in expected.keys() & found.keys():
            check_matching_state(expected[key], found[key], where, f"{path}/{key}")
    elif isinstance(expected, (list, tuple)) and isinstance(found, (list, tuple)):
        for i, (e, f) in enumerate(zip(expected, found, strict=False)):
            check_matching_state(e, f, where, f"{path}/{i}")


def _resume(
    checkpoint: str | os.PathLike,
    fingerprint: dict[str, Any],
    task: StepTask,
    sampler: Sampler,
    history: FitHistory,
    conv: Convergence,
) -> int:
    """Load a checkpoint into the task, sampler, torch's random state, the history and
    the convergence rule; returns the step to continue from."""
    ck = load_checkpoint(checkpoint)
    if ck.get("fingerprint") != fingerprint:
        raise ValueError(
            f"checkpoint {checkpoint} belongs to a different run "
            f"({ck.get('fingerprint')}), not this one ({fingerprint})"
        )
    check_matching_state(task.state_dict(), ck, f"checkpoint {checkpoint}")
    try:
        task.load_state_dict(ck)
    except (RuntimeError, KeyError, TypeError, IndexError) as err:
        raise ValueError(
            f"checkpoint {checkpoint} does not fit this model and run "
            f"({type(err).__name__}: {err}); delete it to start afresh"
        ) from None
    sampler.load(ck["sampler"])
    torch.set_rng_state(ck["torch_rng"])
    step = int(ck["step"])
    history.objective = list(ck["history"]["objective"])
    history.events = list(ck["history"]["events"])
    history.events.append(f"resumed from {checkpoint} at step {step}")
    loop = ck.get("loop")
    if loop is not None:  # early-stopping state (absent in older checkpoints)
        conv.load(loop)
    return step


def _take_step(
    task: StepTask, step: int, idx: torch.Tensor | None, history: FitHistory
) -> tuple[float, bool]:
    """``task.step``; an error of ``task.failure_errors`` is a failed step (recorded)."""
    try:
        value, ok = task.step(step, idx)
        return value, bool(ok) and math.isfinite(value)
    except task.failure_errors as err:
        history.events.append(f"step {step}: {err}")
        return float("nan"), False


def _repair(
    task: StepTask,
    step: int,
    consecutive: int,
    max_failures: int,
    history: FitHistory,
    stacklevel: int,
) -> None:
    """Undo a failed step (recorded and warned); give up after ``max_failures`` in a row."""
    msg = task.recover(step)
    history.events.append(msg)
    if task.warn_on_failure:
        warnings.warn(msg, TrainingWarning, stacklevel=stacklevel)
    if consecutive >= max_failures:
        raise FloatingPointError(task.give_up(consecutive))


def _finish_callbacks(callbacks: Sequence[Any], last: dict[str, Any], history: FitHistory) -> None:
    """Callbacks with a ``finish(info)`` hook (EarlyStopping restores its best parameters);
    a message they return goes into the history's events."""
    for cb in callbacks:
        finish = getattr(cb, "finish", None)
        message = finish(last) if finish is not None else None
        if message:
            history.events.append(message)
