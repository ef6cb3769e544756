"""The one fit: :func:`fit` trains every latentgp model.

``GPModel.fit`` (and ``SEP.fit``, ``QSGP.fit``) hand the model to :func:`fit`, registered
as the fit engine of :mod:`latentgp.models.base` when this package is imported.  It
resolves the data (arrays or out-of-core sources), the arguments against the model's
defaults, the seed (in a private random state), the process group, checkpoints, callbacks
and the history once, then runs the model's plan (:mod:`latentgp.training.tasks`) on
:func:`latentgp.training.loop.run_loop` (progress, tolerance, repair of non-finite
steps, exact checkpoint/resume, Ctrl-C).

The plan of the gradient-trained models is here: a model provides
``objective(X_batch, y_batch, num_data)`` (an unbiased estimate of its training
objective, to maximise) and :class:`GradientTask` minimises ``-objective / N`` with the
chosen optimiser over shuffled minibatches, data-parallel when a ``torch.distributed``
process group is active (see :mod:`latentgp.training.distributed`).
"""

from __future__ import annotations

import copy
import inspect
import math
import os
import re
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from ..io import WriteError, check_writable
from ..linalg import CholeskyError, JitterWarning
from ..models.base import GPModel
from ..models.fit_choices import CHOICES, automatic_defaults  # noqa: F401 (public here too)
from ..rng import seeded_scope
from ..validation import cap_at_rows, check_learning_rate, check_positive_int, check_seed
from . import distributed as D
from .convergence import default_ceiling, default_rule, probe_rows
from .diagnostics import diagnose_fit
from .holdout import Holdout, applies
from .loop import (
    FitHistory,
    RestoringTask,
    Sampler,
    TrainingWarning,
    run_loop,
)
from .natural import make_natural_adam
from .optim import OPTIMIZERS, check_optimizer_kwargs, make_optimizer
from .tasks import FitData, FitOptions, FitPlan, make_plan, plan_builder, read_rows, register_plan

__all__ = [
    "OPTIMIZERS",
    "FitHistory",
    "GradientTask",
    "JitterLog",
    "TrainingWarning",
    "check_optimizer_kwargs",
    "fit",
    "gradient_plan",
    "make_optimizer",
]


def _grads_finite(params: Sequence[torch.Tensor]) -> bool:
    total = None
    for p in params:
        if p.grad is not None:
            s = p.grad.sum()
            total = s if total is None else total + s
    return total is None or bool(torch.isfinite(total))


class LineSearchError(RuntimeError):
    """torch's strong-Wolfe line search broke down (it raises ``IndexError`` when its trial
    points give non-finite values); a failed step, repaired like a non-finite one."""


class GradientTask(RestoringTask):
    """A step of ``optimizer`` on ``-model.objective(batch) / N`` (data-parallel over the
    parts of the global batch when a process group is active)."""

    failure_errors = (CholeskyError, LineSearchError)

    #: Full-batch L-BFGS: reuse the objective and gradient of the point where the last
    #: line search stopped instead of evaluating it again (same results, fewer
    #: evaluations).  Set False on the class to compare against plain evaluation.
    memoize_lbfgs: bool = True

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
        self.reduce = D.Reducer()
        self.W = self.reduce.world
        # L-BFGS (full batch): the objective and gradient at the point where the last line
        # search stopped.  torch's LBFGS.step starts by evaluating the closure at the
        # current parameters, which is that same point, so with one iteration per step
        # every step would otherwise evaluate it twice.
        self._memo: tuple | None = None

    #: rows of :meth:`probe` (``convergence.probe_rows``); None: no probe
    probe_rows: torch.Tensor | None = None

    def probe(self) -> float | None:
        """The objective (with the log prior) on :attr:`probe_rows`, without gradients."""
        rows = self.probe_rows
        if rows is None:
            return None
        rows = rows.to(self.X.device)
        with torch.no_grad():
            obj = self.model.objective(self.X[rows], self.y[rows], self.N)
            value = float(obj + self.model.log_prior())
        return value if math.isfinite(value) else None

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
            # evaluate inside the box: L-BFGS's line search moves the parameters itself
            model.apply_bounds()
            # MAP: the log prior of the hyperparameters (0 without priors) joins each part
            obj = model.objective(xb, yb, self.N * weight) + model.log_prior()
            value = obj.detach().clone().reshape(())
            if W > 1:
                self.reduce.mean_([value])
            ok = bool(torch.isfinite(value))
            loss = -obj * scale
            if ok:
                loss.backward()
                if W > 1:
                    self.reduce.mean_([p.grad for p in params if p.grad is not None])
                model.project_gradients()  # a value held at its bound stays there
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
                part, weight = self.reduce.local_part(torch.arange(self.N))
                xb, yb = X[part.to(X.device)], y[part.to(X.device)]
        else:
            part, weight = self.reduce.local_part(idx)
            part = part.to(X.device)
            xb, yb = X[part], y[part]
        memoize = self.memoize_lbfgs and self.optimizer == "lbfgs" and idx is None
        closure = self._closure(xb, yb, weight, memoize=memoize)
        if self.optimizer == "lbfgs":
            try:
                self.opt.step(closure)
            except IndexError as err:  # torch.optim.lbfgs._strong_wolfe, non-finite trials
                raise LineSearchError(
                    f"the L-BFGS line search broke down ({err}): non-finite trial values"
                ) from None
            self.model.apply_bounds()
            value = closure.value
            ok = math.isfinite(value) and all(bool(torch.isfinite(p).all()) for p in self.params)
        elif self.optimizer == "natural":
            # the step evaluates the objective itself (alternating: q's gradients, the
            # natural step, then the others' at the new q); the value is at its start
            ok = self.opt.step(closure)
            value = closure.value
            ok = ok and math.isfinite(value)
            self.model.apply_bounds()
        else:
            closure()
            value = closure.value
            ok = math.isfinite(value) and _grads_finite(self.params)
            if ok:
                self.opt.step()
                self.model.apply_bounds()
        return value, ok

    def snapshot_state(self) -> dict[str, Any]:
        return copy.deepcopy(self.model.state_dict())

    def restore_state(self, snapshot: dict[str, Any]) -> None:
        self._memo = None
        self.model.load_state_dict(snapshot)

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.opt.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._memo = None
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])


class JitterLog:
    """Count the :class:`~latentgp.linalg.JitterWarning` s raised while training (and let
    every warning through unchanged), so that ``fit`` can report raised jitter in
    ``history_.events``."""

    def __enter__(self) -> JitterLog:
        self.count, self.largest = 0, 0.0
        self._ctx = warnings.catch_warnings(record=True)
        self._caught = self._ctx.__enter__()
        warnings.simplefilter("always", JitterWarning)  # count even those the caller hides
        return self

    def __exit__(self, *exc: Any) -> None:
        self._ctx.__exit__(*exc)
        for w in self._caught:
            if issubclass(w.category, JitterWarning):
                self.count += 1
                m = re.search(r"needed relative jitter ([0-9.e+-]+)", str(w.message))
                if m:
                    self.largest = max(self.largest, float(m.group(1)))
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def _resolve_data(model: Any, X: Any, y: Any, streams: bool) -> FitData:
    if y is None and hasattr(X, "lazy_arrays"):
        N = model.check_source(X)  # out-of-core rows (latentgp.datasets.ShardedArrays)
        if streams:
            return FitData(None, None, X, N)
        Xt, yt = read_rows(model, X)
        return FitData(Xt, yt, None, N)
    if y is None:
        raise ValueError("y is missing: fit(X, y), or fit(source) for out-of-core data")
    Xt, yt = model.check_training_data(X, y)
    return FitData(Xt, yt, None, int(Xt.shape[0]))


def _resolve_options(model: Any, N: int, **kw: Any) -> FitOptions:
    batch_size, epochs, max_steps = kw["batch_size"], kw["epochs"], kw["max_steps"]
    given = batch_size is not None
    if given:
        batch_size = cap_at_rows(batch_size, N, name="batch_size")
    if epochs is not None:
        epochs = check_positive_int(epochs, "epochs")
    if max_steps is not None:
        max_steps = check_positive_int(max_steps, "max_steps")
    optimizer_kwargs = check_optimizer_kwargs(kw["optimizer_kwargs"])
    defaults = automatic_defaults(model.fit_defaults(N), kw)
    optimizer = kw["optimizer"] or defaults["optimizer"]
    if not isinstance(optimizer, str):
        raise ValueError(f"optimizer must be a name, got {optimizer!r}")
    optimizer = optimizer.lower()
    lr = check_learning_rate(defaults["lr"] if kw["lr"] is None else kw["lr"])
    if batch_size is None:
        # L-BFGS is a full-batch method: asking for it without a batch size means all N
        # points, whatever minibatch size the model would pick for its default optimiser.
        batch_size = N if optimizer == "lbfgs" else defaults.get("batch_size", N)
    # no budget: the plan's total is replaced by the automatic rule's ceiling (fit)
    tol = kw["tol"]
    return FitOptions(
        batch_size=int(batch_size),
        batch_size_given=given,
        epochs=epochs,
        max_steps=max_steps,
        lr=lr,
        optimizer=optimizer,
        optimizer_kwargs=optimizer_kwargs,
        seed=kw["seed"],
        tol=tol,
        checkpoint=_writable_checkpoint(kw["checkpoint"]),
        resume=bool(kw["resume"]),
        process_group=kw["process_group"],
        defaults=defaults,
    )


def _writable_checkpoint(path: str | os.PathLike | None) -> str | None:
    """The checkpoint path, checked before any training (its folder is created and must be
    writable), so that a run is not lost at its first checkpoint."""
    if path is None:
        return None
    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as err:
        raise WriteError(err.errno or 0, f"checkpoint {os.fspath(path)!r}: {err}") from None
    return check_writable(path, "checkpoint")


def gradient_plan(model: Any, data: FitData, opts: FitOptions) -> FitPlan:
    """The plan of every model that provides ``objective(X_batch, y_batch, N)``: a step
    of the optimiser on ``-objective / N`` over shuffled minibatches (data-parallel in a
    process group)."""
    if opts.process_group is not None:
        raise ValueError(
            "process_group= is SEP's sharded mode; this model runs data-parallel in the "
            "default process group (latentgp fit --nproc, torchrun)"
        )
    N, seed = data.num_rows, opts.seed
    if data.source is not None:
        X, y = model.initialize_from_source(data.source, seed=seed, batch_size=opts.batch_size)
    else:
        X, y = data.X, model.initialize_training(data.X, data.y, seed=seed)
    B = min(opts.batch_size, N)
    optimizer = opts.optimizer
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {list(OPTIMIZERS)}")
    if optimizer == "lbfgs" and B < N:
        raise ValueError(
            f"L-BFGS needs the full batch (batch_size={opts.batch_size} < N={N}); "
            "use adam for minibatches"
        )
    reduce = D.Reducer()
    W = reduce.world
    if W > 1 and not getattr(model, "supports_minibatch", True):
        raise ValueError(
            f"{type(model).__name__} trains on the full data at once; distributed training "
            "needs a minibatch model such as SVGP"
        )
    sampler = Sampler(N, B, seed)
    if seed is not None:
        torch.manual_seed(seed)  # inside the fit's private random state (seeded_scope)
    # Z kept at its placement in this fit (SVGP's automatic L-BFGS): fit holds it
    held = model.inducing_parameters() if opts.defaults.get("fixed_inducing") else []
    params = [p for p in model.parameters()
              if p.requires_grad and all(p is not h for h in held)]
    model.log_prior()  # names of priors set before the model was built are checked here
    model.apply_bounds()
    reduce.broadcast_module(model)
    if optimizer == "natural":
        opt = make_natural_adam(model, params, opts.lr, N, opts.optimizer_kwargs,
                               batch_size=B)
    else:
        opt = make_optimizer(optimizer, params, opts.lr, opts.optimizer_kwargs)
    # the global batch sequence does not depend on the number of processes, so a run may
    # resume with another world size (an elastic restart) and follow the same trajectory
    task = GradientTask(model, X, y, params, opt, optimizer)
    if W == 1 and model.deterministic_objective and not opts.defaults.get("fixed_samples"):
        task.probe_rows = probe_rows(N, B)
    plan = make_plan(model, task, sampler, opts, reduce)
    plan.held = held
    fixed = opts.defaults.get("fixed_samples")
    if fixed:
        # common random numbers (the deep GP's full-batch L-BFGS): the same samples at every
        # evaluation make the objective deterministic; their seed comes from the fit's seed
        model.fix_training_samples(int(fixed), seed=int(torch.randint(2**62, ()).item()))
        plan.release = lambda: model.fix_training_samples(None)
    return plan


def _automatic_stop(plan: FitPlan, opts: FitOptions, tol: float | None) -> tuple[Any, int]:
    """The convergence rule and step ceiling of a fit without a budget (``epochs`` and
    ``max_steps`` both None): the rule of :mod:`latentgp.training.convergence` for the
    plan's objective (deterministic for full-batch L-BFGS; an explicit ``tol`` replaces
    it) and a ceiling proportional to the data.  With a budget: ``(None, plan.total)``."""
    if opts.epochs is not None or opts.max_steps is not None:
        return None, plan.total
    spe = plan.sampler.steps_per_epoch
    deterministic = opts.optimizer == "lbfgs"
    ceiling = default_ceiling(spe, deterministic=deterministic,
                              overrides=opts.defaults.get("ceiling"))
    if tol is not None or plan.stops_itself:
        return None, ceiling
    rule = default_rule(spe, deterministic=deterministic,
                        overrides=opts.defaults.get("convergence"))
    return rule, ceiling


#: The options of a fit and their defaults: those of ``GPModel.fit``, the one signature.
FIT_OPTIONS: dict[str, Any] = {
    name: p.default
    for name, p in inspect.signature(GPModel.fit).parameters.items()
    if p.kind is p.KEYWORD_ONLY
}


def fit(model: Any, X: Any, y: Any = None, **options: Any) -> Any:
    """THE fit of every latentgp model (``model.fit(...)`` calls it); returns ``model``.

    Resolved here, once, for every model: the data (arrays ``X`` ``(N, D)`` and ``y``
    ``(N,)``/``(N, P)``, or an out-of-core source ``fit(model, ShardedArrays(path))`` over
    ``.npy`` shards or Parquet), the arguments against the model's defaults
    (:meth:`~latentgp.models.base.GPModel.fit_defaults`), the seed (all seeded work runs
    in :func:`latentgp.rng.seeded_scope`: the caller's global random state is the same
    after the fit as before, and a seed gives the same result every time), the process
    group, checkpoints, callbacks (early stopping is a callback:
    :class:`~latentgp.training.EarlyStopping`), the progress bar and the history
    (``model.history_``, with raised jitter in its events).  What a step *is* comes from
    the plan registered for the model's class (:mod:`latentgp.training.tasks`: the
    gradient plan below, SEP's sites, QSGP's sparse rows).

    ``options`` are those of :meth:`latentgp.models.base.GPModel.fit` (which documents
    them); an unknown one is a ``TypeError``, as for a misspelt keyword.
    """
    unknown = sorted(set(options) - set(FIT_OPTIONS))
    if unknown:
        raise TypeError(f"fit() got unexpected keyword argument(s) {unknown}")
    kw = {**FIT_OPTIONS, **options}
    kw["seed"] = check_seed(kw["seed"])
    progress, callbacks, seed = kw["progress"], kw["callbacks"], kw["seed"]
    build, streams = plan_builder(model)
    data = _resolve_data(model, X, y, streams)
    opts = _resolve_options(
        model,
        data.num_rows,
        **{k: kw[k] for k in ("batch_size", "epochs", "max_steps", "lr", "optimizer",
                              "optimizer_kwargs", "seed", "tol", "checkpoint", "resume",
                              "process_group")},
    )
    holdout = None
    if applies(opts.defaults, data, kw, callbacks):  # held-out stopping (training.holdout)
        holdout = Holdout(opts.defaults["holdout"], data.num_rows, seed)
        if holdout.rows:
            data = holdout.split(data)
            callbacks = [*callbacks, holdout.stop]
        else:
            holdout = None
    with seeded_scope(seed, [getattr(model, "device_", None)]), JitterLog() as jitter_log:
        plan = build(model, data, opts)
        rule, total = _automatic_stop(plan, opts, kw["tol"])
        model.train()
        model.clear_prediction_cache()
        for p in plan.held:
            p.requires_grad_(False)
        try:
            history = run_loop(
                plan.task,
                plan.sampler,
                total,
                desc=plan.desc,
                progress=progress,
                tol=plan.tol,
                rule=rule,
                callbacks=callbacks,
                model=model,
                objective_offset=plan.objective_offset,
                objective_scale=plan.objective_scale,
                checkpoint=opts.checkpoint,
                checkpoint_every=kw["checkpoint_every"],
                checkpoint_seconds=kw["checkpoint_seconds"],
                resume=opts.resume,
                fingerprint=plan.fingerprint,
                rank=plan.rank,
                stacklevel=4,
            )
        finally:
            for p in plan.held:
                p.requires_grad_(True)
            if plan.release is not None:
                plan.release()
        history.optimizer = opts.optimizer
        history.batch_size = min(opts.batch_size, data.num_rows)
        if holdout is not None:
            history.holdout = holdout.record()
            history.events.append(holdout.event())
            if history.reason == "callback" and holdout.stop.stopped_step == history.steps:
                history.stopped = (f"converged: the held-out density stopped improving "
                                   f"(best at step {holdout.stop.best_step})")
                history.reason = "converged"
        model.history_ = history
        if plan.finish is not None:
            plan.finish()
    if jitter_log.count:
        history.events.append(
            f"jitter raised: {jitter_log.count} Cholesky factorisation(s) needed more than "
            f"the default jitter, up to relative jitter {jitter_log.largest:.1e}"
        )
    model.clear_prediction_cache()
    model.eval()
    if data.X is not None:
        model.complete_fit(data.X, data.y)
    for finding in diagnose_fit(model, data, history):  # degenerate solutions
        history.events.append(finding)
        warnings.warn(finding, TrainingWarning, stacklevel=3)
    return model


register_plan(GPModel, gradient_plan, streams=True)
