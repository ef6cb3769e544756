"""Step tasks: how each model family trains, plugged into the one fit.

:func:`latentgp.training.fit` resolves everything a fit shares (data and sources,
arguments and the model's defaults, seeds, the process group, checkpoints, callbacks and
early stopping) into a :class:`FitData` and a :class:`FitOptions`, then asks the model's
*plan builder* for a :class:`FitPlan`: the :class:`~latentgp.training.loop.StepTask` that
takes one step, its batch :class:`~latentgp.training.loop.Sampler`, the step budget, what
identifies the run in a checkpoint, and what to do after the last step.  The plan runs on
:func:`~latentgp.training.loop.run_loop`.

Builders are registered per model class (:func:`register_plan`; looked up along the
class's MRO): SVGP-like models use the gradient plan of :mod:`latentgp.training.fit`, SEP
and QSGP the plans below.  This module imports the model modules; the models never import
it (layers import downwards).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..linalg import CholeskyError
from ..models.qsgp import QSGP, VARIATIONAL_OPTIMIZERS
from ..models.sep import SEP
from ..parameters import adopt_input_unit, positive_raw_parameters, sharded_column_unit
from ..validation import check_positive_float
from . import distributed as D
from .loop import (
    RestoringTask,
    Sampler,
    StepTask,
    TrainingWarning,
    plan_fingerprint,
    total_steps,
)
from .optim import SparseRowOptimizer, make_optimizer, make_sign_adaptive

__all__ = [
    "FitData",
    "FitOptions",
    "FitPlan",
    "PlanBuilder",
    "QSGPTask",
    "SEPTask",
    "distributed_sweep",
    "make_plan",
    "plan_builder",
    "read_rows",
    "register_plan",
]


@dataclasses.dataclass
class FitData:
    """The training data of one fit, checked once by :func:`latentgp.training.fit`.

    Attributes
    ----------
    X, y: validated tensors ``(N, D)`` and ``(N,)``/``(N, P)`` in the data's units (None
        when ``source`` is streamed).
    source: an out-of-core source (``latentgp.datasets.ShardedArrays``) that the plan
        streams from (None: the data are in ``X, y``).
    num_rows: N.
    """

    X: torch.Tensor | None
    y: torch.Tensor | None
    source: Any
    num_rows: int


@dataclasses.dataclass
class FitOptions:
    """The arguments of one fit, resolved once against the model's defaults.

    ``batch_size`` (B <= N), ``epochs``/``max_steps`` (both None: the fit runs until
    converged, under the ceiling that replaces the plan's ``total``), ``lr`` (positive),
    ``optimizer`` (lower case) and ``tol`` are
    resolved; ``optimizer_kwargs`` is a checked dict or None; ``batch_size_given`` tells
    whether the caller chose B.
    """

    batch_size: int
    batch_size_given: bool
    epochs: int | None
    max_steps: int | None
    lr: float
    optimizer: str
    optimizer_kwargs: dict[str, Any] | None
    seed: int | None
    tol: float | None
    checkpoint: Any
    resume: bool
    process_group: Any
    defaults: dict[str, Any]


@dataclasses.dataclass
class FitPlan:
    """What a plan builder hands to the loop (see :func:`~latentgp.training.loop.run_loop`).

    ``finish``: called after the last step (not when a step budget was never started);
    ``stops_itself``: the task decides when it has converged
    (:meth:`~latentgp.training.loop.StepTask.finished`), so a fit without a budget runs
    no convergence rule on the objective, only the step ceiling;
    ``objective_offset``/``objective_scale``: for the history and the progress bar;
    ``held``: trainable parameters this fit keeps fixed (``fit`` turns their gradients off
    for the run and back on after it, however it ends); ``release``: called after the run
    however it ends (undoes a model setting made for this fit only, such as the deep GP's
    fixed training samples).
    """

    task: StepTask
    sampler: Sampler
    total: int
    fingerprint: dict[str, Any]
    desc: str
    objective_offset: float = 0.0
    objective_scale: float = 1.0
    rank: int = 0
    tol: float | None = None
    finish: Callable[[], None] | None = None
    stops_itself: bool = False
    held: list[Any] = dataclasses.field(default_factory=list)
    release: Callable[[], None] | None = None


def make_plan(
    model: Any,
    task: StepTask,
    sampler: Sampler,
    opts: FitOptions,
    reduce: D.Reducer,
    *,
    identity: dict[str, Any] | None = None,
) -> FitPlan:
    """The :class:`FitPlan` of ``task`` on ``sampler`` for ``model``, what every plan
    shares: the step budget from ``opts.epochs`` / ``opts.max_steps``; the checkpoint
    fingerprint (N, B, seed, optimiser, the model's class name and its sizes in
    ``identity``); the progress label; the history's objective per point in the
    targets' units (``objective_offset = -N target_log_scale``, ``objective_scale =
    1 / N``); the reporting rank of ``reduce``; ``tol = opts.tol``.  A plan changes
    what differs (``finish``, a checked ``tol``, ...) on the returned plan."""
    name, N = type(model).__name__, sampler.N
    return FitPlan(
        task=task,
        sampler=sampler,
        total=total_steps(sampler.steps_per_epoch, opts.epochs, opts.max_steps),
        fingerprint=plan_fingerprint(
            N, sampler.B, opts.seed, opts.optimizer, name, **(identity or {})
        ),
        desc=name,
        objective_offset=-N * model.target_log_scale(),
        objective_scale=1.0 / N,
        rank=reduce.rank,
        tol=opts.tol,
    )


#: ``builder(model, data, options) -> FitPlan``
PlanBuilder = Callable[[Any, FitData, FitOptions], FitPlan]


@dataclasses.dataclass(frozen=True)
class _Registration:
    build: PlanBuilder
    streams: bool


_PLANS: dict[type, _Registration] = {}


def register_plan(model_cls: type, builder: PlanBuilder, *, streams: bool = False) -> None:
    """Train instances of ``model_cls`` (and subclasses without their own) with
    ``builder``.  ``streams``: the builder takes an out-of-core source as it is (lazy row
    views); otherwise the one fit reads a source into memory first."""
    _PLANS[model_cls] = _Registration(builder, bool(streams))


def plan_builder(model: Any) -> tuple[PlanBuilder, bool]:
    """The plan builder registered for ``model``'s class (nearest in its MRO) and whether
    it streams sources; ``LookupError`` when none is."""
    for cls in type(model).__mro__:
        reg = _PLANS.get(cls)
        if reg is not None:
            return reg.build, reg.streams
    raise LookupError(f"no training plan is registered for {type(model).__name__}")


def read_rows(model: Any, source: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """All rows of an out-of-core source, checked by ``model`` (for plans that need
    them in memory)."""
    return model.check_training_data(*source.rows(np.arange(int(source.num_rows))))


# ------------------------------------------------------------------------------ SEP --
class SEPTask(RestoringTask):
    """SEP's step: site updates (a sweep over all sites, or a minibatch's sites) followed
    by one hyperparameter step of ``opt`` (on the parameters it was made for).

    ``X`` ``(N, D)``, labels ``ypm`` in {-1, +1} ``(N,)``; ``N_total``: data points over
    all processes; ``reduce``: the :class:`~latentgp.training.distributed.Reducer`;
    ``rows``: this process's rows (batch scheme with the full data on every process)."""

    failure_errors = (CholeskyError, FloatingPointError)
    failure = "EP evidence or gradient"
    kept = "sites and parameters"

    def __init__(
        self,
        model: SEP,
        X: torch.Tensor,
        ypm: torch.Tensor,
        opt: torch.optim.Optimizer,
        N_total: int,
        reduce: D.Reducer,
        rows: torch.Tensor | None,
    ) -> None:
        self.model, self.X, self.ypm, self.opt = model, X, ypm, opt
        self.N_total, self.reduce, self.rows = N_total, reduce, rows

    def step(self, step: int, idx: torch.Tensor | None) -> tuple[float, bool]:
        m = self.model
        if m.scheme == "batch":
            value = m.batch_step(
                self.X, self.ypm, self.opt, self.N_total, self.reduce, self.rows,
                backtrack=bool(getattr(self.opt, "backtrack", False)),
            )
        else:
            idx = idx.to(self.X.device)
            value = m.stochastic_step(
                self.X, self.ypm, idx, self.opt, self.X.shape[0], self.reduce
            )
        return value, math.isfinite(value)

    def snapshot_state(self) -> Any:
        return self.model.snapshot_training_state()

    def restore_state(self, snapshot: Any) -> None:
        self.model.restore_training_state(snapshot)

    def state_dict(self) -> dict[str, Any]:
        return {**self.model.training_state(), "optimizer": self.opt.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_training_state(state)
        self.opt.load_state_dict(state["optimizer"])


def _sep_reducer(model: SEP, opts: FitOptions) -> tuple[D.Reducer, bool]:
    """The reducer of a SEP fit and whether every process holds the full data."""
    group = opts.process_group
    if group is None:
        reduce = D.Reducer()
        return reduce, reduce.world > 1
    if model.scheme != "batch":
        raise ValueError("distributed training (process_group) needs scheme='batch'")
    if opts.checkpoint is not None or opts.resume:
        raise ValueError(
            "SEP cannot checkpoint with process_group= (each process holds only its "
            "shard's sites); run in the default process group with the full data "
            "on every process (latentgp fit --nproc, torchrun) instead"
        )
    return D.Reducer(group), False


def _sign_groups(model: SEP, params: list, opts: FitOptions) -> list[dict[str, Any]]:
    """The sign rule's parameter groups: the kernel's positive (softplus-stored)
    parameters step in log coordinates unless ``optimizer_kwargs={"log_space": False}``;
    the rest (inducing inputs) step as they are (docs/design.md, SEP's step rule)."""
    log_space = (opts.optimizer_kwargs or {}).get("log_space", True)
    if not isinstance(log_space, bool):
        raise ValueError(f"optimizer_kwargs['log_space'] must be True or False, got {log_space!r}")
    positive = {id(p) for p in positive_raw_parameters(model.kernel)} if log_space else set()
    groups = [
        {"params": [p for p in params if id(p) in positive], "log_space": True},
        {"params": [p for p in params if id(p) not in positive], "log_space": False},
    ]
    return [g for g in groups if g["params"]]


def _without(kwargs: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    return None if kwargs is None else {k: v for k, v in kwargs.items() if k != key}


def sep_plan(model: SEP, data: FitData, opts: FitOptions) -> FitPlan:
    """SEP's plan: sites, sums over processes, the sign-adaptive (or torch) optimiser."""
    reduce, replicated = _sep_reducer(model, opts)
    fresh = not model.built
    if data.source is not None and opts.process_group is None:
        # lazy rows: a sweep reads chunks, a minibatch its rows; labels and sites in memory
        Xt, ypm = model.prepare_source(data.source, seed=opts.seed)
    else:  # process_group= holds this process's shard (its input units come from it)
        X, y = (data.X, data.y) if data.source is None else read_rows(model, data.source)
        Xt, ypm = model.prepare_training(X, y, seed=opts.seed)
    if opts.process_group is not None:
        if fresh:  # input units of the full data, not of this process's shard
            adopt_input_unit(model, sharded_column_unit(Xt, reduce, reduce.maximum))
        reduce.broadcast_module(model)
    elif replicated:
        reduce.broadcast_module(model)
    N = Xt.shape[0]
    if replicated:
        N_total = N
    else:
        N_total = int(reduce(torch.tensor(float(N), dtype=torch.float64)).item())
    B = opts.batch_size
    if model.scheme == "batch" and B != N:
        raise ValueError(
            "the batch scheme updates all sites each sweep; use "
            "SEP(scheme='stochastic') for minibatches"
        )
    if replicated and B < reduce.world:
        raise ValueError(
            f"batch_size={B} is smaller than the {reduce.world} processes: every process "
            "needs at least one point of each batch"
        )
    params = [p for p in model.parameters() if p.requires_grad]
    if opts.optimizer == "sign":
        opt = make_sign_adaptive(_sign_groups(model, params, opts), opts.lr,
                                 _without(opts.optimizer_kwargs, "log_space"))
    elif opts.optimizer == "lbfgs":
        raise ValueError("SEP takes one gradient step per sweep: use sign, adadelta or adam")
    else:
        opt = make_optimizer(opts.optimizer, params, opts.lr, opts.optimizer_kwargs)
    mode = "epoch" if model.scheme == "batch" else "always"
    sampler = Sampler(N, B, opts.seed, mode=mode)
    rows = None
    if replicated and model.scheme == "batch":
        rows = torch.tensor_split(torch.arange(N, device=Xt.device), reduce.world)[reduce.rank]
    task = SEPTask(model, Xt, ypm, opt, N_total, reduce, rows)
    plan = make_plan(model, task, sampler, opts, reduce, identity={"scheme": model.scheme})
    plan.objective_scale = 1.0 / N_total  # with process_group=, N is this shard's
    plan.finish = lambda: model.finish_training(Xt, reduce, rows)
    return plan


def distributed_sweep(
    model: SEP, X_shard: Any, y_shard: Any, group: Any = None
) -> tuple[float, torch.Tensor, torch.Tensor]:
    """One distributed SEP sweep (seed Fig. 1 right) on this process's shard.

    Every process of ``group`` (gloo on CPU, or NCCL) calls this with its own shard
    ``X_shard`` ``(N_k, D)`` and labels ``y_shard`` in {0, 1}; the model's sites are those
    of the shard (created on the first call; the model's parameters must already agree
    across processes).  Each process updates its sites against the same ``q``; ``q`` is
    rebuilt from the all-reduced per-shard sums ``A_k = sum nu_j upsilon_j upsilon_j'``
    and ``c_k = sum mu_j upsilon_j``.  Returns the global ``log Z_q`` and ``q``'s mean
    ``(M,)`` and covariance ``(M, M)``: identical on all processes, and equal to a
    one-process sweep up to round-off.
    """
    reduce = D.Reducer(group)
    Xt, ypm = model.prepare_training(X_shard, y_shard)
    return model.sweep_evidence(Xt, ypm, reduce)


# ----------------------------------------------------------------------------- QSGP --
class QSGPTask(StepTask):
    """QSGP's sparse step (:meth:`QSGP.sparse_step`).  A non-finite estimate skips the
    step and halves the learning rate of the row optimiser (nothing was changed, so
    there is nothing to restore)."""

    warn_on_failure = False

    def __init__(
        self,
        model: QSGP,
        X: Any,
        y: Any,
        batch_size: int,
        sampler: Sampler,
        rows: SparseRowOptimizer,
        hopt: torch.optim.Optimizer | None,
        reduce: D.Reducer,
    ) -> None:
        self.model, self.X, self.y, self.batch_size = model, X, y, batch_size
        self.sampler, self.rows, self.hopt, self.reduce = sampler, rows, hopt, reduce

    def step(self, step: int, idx: torch.Tensor | None) -> tuple[float, bool]:
        value = self.model.sparse_step(
            self.X,
            self.y,
            self.X.shape[0],
            self.batch_size,
            self.sampler.gen,
            rows=self.rows,
            hyper_optimizer=self.hopt,
            step=step,
            reduce=self.reduce if self.reduce.world > 1 else None,
        )
        return value, math.isfinite(value)

    def recover(self, step: int) -> str:
        self.rows.lr *= 0.5
        return f"step {step}: non-finite objective; step skipped, lr lowered to {self.rows.lr:.3g}"

    def give_up(self, failures: int) -> str:
        return (
            f"QSGP training produced a non-finite objective {failures} times in a row; "
            "lower lr or check the data scale"
        )

    def state_dict(self) -> dict[str, Any]:
        return {
            **self.model.training_state(),
            "hyper_optimizer": None if self.hopt is None else self.hopt.state_dict(),
            "lr": self.rows.lr,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_training_state(state)
        if self.hopt is not None:
            self.hopt.load_state_dict(state["hyper_optimizer"])
        self.rows.lr = float(state["lr"])


def qsgp_plan(model: QSGP, data: FitData, opts: FitOptions) -> FitPlan:
    """QSGP's plan: sparse AdaGrad/SGD on sampled rows, Adam on the hyperparameters."""
    if opts.process_group is not None:
        raise ValueError(
            "process_group= is SEP's sharded mode; QSGP runs data-parallel in the default "
            "process group (latentgp fit --nproc, torchrun)"
        )
    if opts.optimizer not in VARIATIONAL_OPTIMIZERS:
        raise ValueError(
            f"QSGP trains with sparse updates: optimizer must be one of "
            f"{list(VARIATIONAL_OPTIMIZERS)} (momentum methods would break the "
            f"control variate's running expectation), got {opts.optimizer!r}"
        )
    rows = SparseRowOptimizer.from_kwargs(opts.optimizer, opts.lr, opts.optimizer_kwargs)
    tol = None if opts.tol is None else check_positive_float(opts.tol, "tol")
    reduce = D.Reducer()
    B, N = opts.batch_size, data.num_rows
    if reduce.world > 1 and B < reduce.world:
        raise ValueError(
            f"batch_size={B} is smaller than the {reduce.world} processes: every process "
            "needs at least one row of each batch"
        )
    first = not model.built
    if data.source is None:
        X, ys = data.X, model.initialize_training(data.X, data.y, seed=opts.seed)
    elif model.streams:
        # lazy row views: steps read their sampled rows, full passes read in chunks
        X, ys = model.initialize_from_source(data.source, seed=opts.seed, batch_size=B)
    else:  # the basis is every training input: the rows must be in memory
        Xt, yt = read_rows(model, data.source)
        X, ys = Xt, model.initialize_training(Xt, yt, seed=opts.seed)
    for message in model.fit_warnings(N, B):
        warnings.warn(message, TrainingWarning, stacklevel=4)
    if opts.seed is not None:
        torch.manual_seed(opts.seed)  # inside the fit's private random state
    closed_form = model.start_training(
        X, ys, first=first, seed=opts.seed, sync=reduce.broadcast_module
    )
    # the sampler only holds the index generator: the step draws rows (with replacement),
    # basis functions and columns from it
    sampler = Sampler(N, B, opts.seed, mode="none")
    hyper = model.hyper_parameters()
    hopt = torch.optim.Adam(hyper, lr=model.hyper_lr) if hyper else None
    task = QSGPTask(model, X, ys, B, sampler, rows, hopt, reduce)
    plan = make_plan(model, task, sampler, opts, reduce, identity={"m": model.m})
    plan.tol = tol
    plan.finish = lambda: model.finish_training(X, closed_form=closed_form, seed=opts.seed,
                                                y=ys)
    return plan


register_plan(SEP, sep_plan, streams=True)
register_plan(QSGP, qsgp_plan, streams=True)
