"""Batched L-BFGS: many independent minimisations in one, each with its own steps.

A batch of independent models (:class:`~latentgp.models.BatchedExactGP`) has parameters
whose leading dimension is the member ``b``, and an objective that is a sum of the
members' objectives.  torch's L-BFGS on that sum would couple the members: one curvature
history built from all of them and one line search whose step suits the sum, so no
member's iterates are those of its own fit, and the sum "converges" while a few members
still move.  :class:`BatchedLBFGS` runs B minimisations side by side instead:

- a parameter vector ``x_b`` ``(P,)`` per member (every parameter tensor, flattened after
  its leading member dimension), its own curvature pairs (the two-loop recursion is
  vectorised over the members, pairs that fail the curvature test masked out) and its own
  initial Hessian scale ``s^T y / y^T y``;
- a backtracking line search with a step length per member (Armijo's sufficient
  decrease, halving from 1; the first iteration starts at ``min(1, 1 / |g|_1)``, as
  torch's does); every trial evaluates the whole batch once (one batched Cholesky), the
  members that already accepted a step stay where they are;
- a convergence test per member, the single exact fit's rule: the change of its
  objective per point below ``rtol * max(|f|, 1)`` for ``patience`` iterations in a row
  (``rtol`` from the model's fit defaults, ExactGP's 1e-9, or the fit's ``tol``;
  patience 3), or a gradient below ``1e-9`` (torch
  L-BFGS's ``tolerance_grad``), or a line search that found no decrease (the member
  stops where it is; the history's events count these).  Converged members stop moving;
  the fit ends when every member has converged (or at the step ceiling).

One step of the fit is one L-BFGS iteration of every member still moving.  The task
evaluates the members in chunks (their ``N x N`` matrices kept small enough for the
cache), an RBF model by its closed-form gradient
(:meth:`~latentgp.models.BatchedExactGP.member_log_marginal_and_grad`), other kernels by
autograd through ``torch.func.functional_call``.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from ..linalg import CholeskyError
from ..models.batched import BatchedExactGP
from . import distributed as D
from .convergence import DEFAULTS
from .loop import Sampler, StepTask
from .tasks import FitData, FitOptions, FitPlan, make_plan, register_plan

__all__ = ["BatchedLBFGS", "BatchedLBFGSTask", "batched_plan"]


class BatchedLBFGS:
    """L-BFGS on ``B`` independent problems at once (module notes).

    Parameters
    ----------
    evaluate: ``evaluate(x, idx)`` with the points ``x`` ``(b, P)`` of the members
        ``idx`` ``(b,)`` returns ``(f, g)``: their objectives to minimise ``(b,)`` and
        gradients ``(b, P)`` (non-finite values count as a failed trial of that member's
        line search).  Only the members whose line search is still open are evaluated.
    x0: the starting points ``(B, P)``.
    history_size, max_backtracks, c1: L-BFGS pairs kept, halvings per line search,
        Armijo constant.
    rtol, patience, grad_tol: the per-member convergence test.
    lr: scale of the first trial step.
    """

    def __init__(
        self,
        evaluate: Any,
        x0: torch.Tensor,
        *,
        history_size: int = 20,
        max_backtracks: int = 30,
        c1: float = 1e-4,
        rtol: float = DEFAULTS["deterministic"]["rtol"],
        patience: int = DEFAULTS["deterministic"]["patience"],
        grad_tol: float = 1e-9,
        lr: float = 1.0,
    ) -> None:
        self.evaluate = evaluate
        self.m, self.max_backtracks, self.c1 = int(history_size), int(max_backtracks), c1
        self.rtol, self.patience, self.grad_tol, self.lr = rtol, int(patience), grad_tol, lr
        B, P = x0.shape
        self.x = x0.clone()
        self.f: torch.Tensor | None = None
        self.g: torch.Tensor | None = None
        z = torch.zeros(self.m, B, P, dtype=x0.dtype, device=x0.device)
        self.S, self.Y = z, z.clone()
        self.valid = torch.zeros(self.m, B, dtype=torch.bool, device=x0.device)
        self.gamma = torch.ones(B, dtype=x0.dtype, device=x0.device)
        self.active = torch.ones(B, dtype=torch.bool, device=x0.device)
        self.calm = torch.zeros(B, dtype=torch.long, device=x0.device)
        self.stalled = torch.zeros(B, dtype=torch.bool, device=x0.device)
        self.iterations = torch.zeros(B, dtype=torch.long, device=x0.device)
        self.evaluations = 0
        self.member_evaluations = 0
        self.all = torch.arange(B, device=x0.device)
        self.slot = 0

    def _eval(self, x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f, g = self.evaluate(x, idx)
        self.evaluations += 1
        self.member_evaluations += int(idx.numel())
        bad = ~torch.isfinite(f) | ~torch.isfinite(g).all(-1)
        f = torch.where(bad, torch.inf, f)
        return f, torch.where(bad[:, None], 0.0, g)

    def direction(self, g: torch.Tensor) -> torch.Tensor:
        """``-H g`` per member by the two-loop recursion over its valid pairs ``(B, P)``."""
        q = g.clone()
        order = [(self.slot - 1 - i) % self.m for i in range(self.m)]  # newest first
        rho = torch.where(self.valid, 1.0 / (self.S * self.Y).sum(-1).where(self.valid, 1.0), 0.0)
        alphas = {}
        for i in order:
            a = rho[i] * (self.S[i] * q).sum(-1)
            alphas[i] = a
            q = q - a[:, None] * self.Y[i]
        r = self.gamma[:, None] * q
        for i in reversed(order):
            b = rho[i] * (self.Y[i] * r).sum(-1)
            r = r + (alphas[i] - b)[:, None] * self.S[i]
        return -r

    def step(self) -> None:
        """One iteration of every active member (the first call also evaluates ``x0``)."""
        if self.f is None:
            self.f, self.g = self._eval(self.x, self.all)
            if not bool(torch.isfinite(self.f).all()):
                raise FloatingPointError("the objective is not finite at the starting point")
            self._check_gradients(self.g)
        x, f, g, act = self.x, self.f, self.g, self.active
        assert g is not None
        if not bool(act.any()):
            return
        fresh = ~self.valid.any(0)
        d = self.direction(g)
        gtd = (g * d).sum(-1)
        uphill = ~(gtd < 0)
        if bool(uphill.any()):  # lost curvature information: restart from steepest descent
            self.valid[:, uphill] = False
            d = torch.where(uphill[:, None], -g, d)
            gtd = (g * d).sum(-1)
            fresh = fresh | uphill
        g1 = g.abs().sum(-1).clamp_min(1e-300)
        t = torch.where(fresh, (1.0 / g1).clamp(max=1.0), torch.ones_like(g1)) * self.lr
        pending = act & (gtd < 0)
        x_new, f_new, g_new = x.clone(), f.clone(), g.clone()
        for _ in range(self.max_backtracks):
            idx = pending.nonzero().squeeze(1)
            if idx.numel() == 0:
                break
            trial = x[idx] + t[idx, None] * d[idx]
            f_t, g_t = self._eval(trial, idx)
            ok = f_t <= f[idx] + self.c1 * t[idx] * gtd[idx]
            take = idx[ok]
            x_new[take], f_new[take], g_new[take] = trial[ok], f_t[ok], g_t[ok]
            pending[take] = False
            t = torch.where(pending, 0.5 * t, t)
        failed = act & (pending | ~(gtd < 0))
        moved = act & ~failed
        s, yv = x_new - x, g_new - g
        sy = (s * yv).sum(-1)
        keep = moved & (sy > 1e-10)
        self.S[self.slot] = torch.where(keep[:, None], s, 0.0)
        self.Y[self.slot] = torch.where(keep[:, None], yv, 0.0)
        self.valid[self.slot] = keep
        self.slot = (self.slot + 1) % self.m
        self.gamma = torch.where(keep, sy / (yv * yv).sum(-1).where(keep, 1.0), self.gamma)
        change = (f_new - f).abs()
        calm = moved & (change < self.rtol * f.abs().clamp_min(1.0))
        self.calm = torch.where(calm, self.calm + 1, torch.where(moved, 0, self.calm))
        small = g_new.abs().amax(-1) <= self.grad_tol
        self.iterations += moved.long()
        self.stalled |= failed
        self.active = act & ~failed & ~(self.calm >= self.patience) & ~small
        self.x = torch.where(moved[:, None], x_new, x)
        self.f, self.g = f_new, g_new

    def _check_gradients(self, g: torch.Tensor) -> None:
        small = g.abs().amax(-1) <= self.grad_tol
        self.active &= ~small

    @property
    def done(self) -> bool:
        """Whether every member has converged (or stalled)."""
        return self.f is not None and not bool(self.active.any())

    def state_dict(self) -> dict[str, Any]:
        """The iteration state (tensors), for checkpoints and repair."""
        keys = ("x", "f", "g", "S", "Y", "valid", "gamma", "active", "calm", "stalled",
                "iterations", "member_evaluations")
        return {**{k: copy.deepcopy(getattr(self, k)) for k in keys},
                "slot": self.slot, "evaluations": self.evaluations}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, copy.deepcopy(v))


class BatchedLBFGSTask(StepTask):
    """One :class:`BatchedLBFGS` iteration of a :class:`~latentgp.models.BatchedExactGP`
    on ``X`` ``(B, N, D)`` and scaled ``y`` ``(B, N)``; each member minimises its
    ``-log p(y_b) / N``.  Parameters whose leading dimension is not B are refused."""

    failure_errors = (CholeskyError,)

    def __init__(self, model: BatchedExactGP, X: torch.Tensor, y: torch.Tensor,
                 opts: FitOptions) -> None:
        self.model, self.X, self.y = model, X, y
        self.B, self.N = X.shape[0], X.shape[1]
        state = model.member_state()
        self.names = [n for n, t in state.items() if t.requires_grad]
        self.fixed = {n: t for n, t in state.items() if not t.requires_grad}
        self.params = [state[n] for n in self.names]
        self.sizes = [p[0].numel() for p in self.params]
        self.bounded = bool(model.bounds)
        # members per evaluation: about 1.3 million matrix entries, so that a chunk's
        # N x N matrices stay in cache (1000 members of N = 100 at once ran 3x slower
        # per member than chunks of 128)
        self.chunk = max(1, (1 << 20) // (self.N * self.N) + 1)
        # an RBF model's objective and gradient in closed form (no autograd graph); its
        # chunks are smaller, about 260,000 entries (27 members of N = 100): on the shared
        # 2-core machine they took 0.8 ms per member against 1.2-1.4 ms for chunks of 105
        # in one measurement, the same in another (docs/results/batched_gps.md)
        self.closed_form = model.closed_form_gradient
        if self.closed_form:
            self.chunk = max(1, (1 << 18) // (self.N * self.N) + 1)
        if X.device.type != "cpu":
            # an accelerator wants every member in one launch (CPU caches do not apply):
            # chunks of up to 2^25 matrix entries (256 MB per N x N stack in float64)
            self.chunk = max(1, (1 << 25) // (self.N * self.N))
        kw = dict(opts.optimizer_kwargs or {})
        rule = opts.defaults.get("convergence") or {}
        if opts.tol is not None or "rtol" in rule:
            kw.setdefault("rtol", float(opts.tol if opts.tol is not None else rule["rtol"]))
        try:
            self.opt = BatchedLBFGS(self.evaluate, self.flat(), lr=opts.lr, **kw)
        except TypeError as err:
            raise ValueError(f"optimizer_kwargs {kw} do not suit the batched L-BFGS: "
                             f"{err}") from None
        self._snapshot: Any = None

    def flat(self) -> torch.Tensor:
        """The members' trainable parameters, flattened after the member dimension
        ``(B, P)`` (the optimiser's points)."""
        return torch.cat([p.detach().reshape(self.B, -1) for p in self.params], 1)

    def _set(self, x: torch.Tensor) -> None:
        with torch.no_grad():
            for p, part in zip(self.params, x.split(self.sizes, 1), strict=True):
                p.copy_(part.reshape(p.shape))
            self.model.apply_bounds()

    def evaluate(self, x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Objectives ``-log p(y_b) / N`` ``(b,)`` and gradients ``(b, P)`` of the members
        ``idx`` at their points ``x`` ``(b, P)``, computed on those members only, in
        chunks of :attr:`chunk` members: in closed form when :attr:`closed_form` (an RBF
        model), else by autograd (``torch.func.functional_call`` with the members' slices
        of every tensor).  The optimiser's ``evaluate``."""
        if self.bounded:  # evaluate where the bounds put the point (as the fit keeps it)
            full = self.flat()
            full[idx] = x
            self._set(full)
            x = self.flat()[idx]
        parts = [self._evaluate_chunk(x[i : i + self.chunk], idx[i : i + self.chunk])
                 for i in range(0, idx.numel(), self.chunk)]
        return torch.cat([f for f, _ in parts]), torch.cat([g for _, g in parts])

    def _evaluate_chunk(self, x: torch.Tensor, idx: torch.Tensor):
        b = idx.numel()
        if self.closed_form:
            parts = [part.reshape(b, *p.shape[1:])
                     for p, part in zip(self.params, x.split(self.sizes, 1), strict=True)]
            state = {**{n: t[idx] for n, t in self.fixed.items()},
                     **dict(zip(self.names, parts, strict=True))}
            with torch.no_grad():
                value, grad = self.model.member_log_marginal_and_grad(
                    state, self.X[idx], self.y[idx])
            g = torch.cat([grad[n].reshape(b, -1) for n in self.names], 1)
            return -value / self.N, g / -self.N
        leaves = [part.reshape(b, *p.shape[1:]).detach().requires_grad_()
                  for p, part in zip(self.params, x.split(self.sizes, 1), strict=True)]
        state = {**{n: t[idx] for n, t in self.fixed.items()},
                 **dict(zip(self.names, leaves, strict=True))}
        value = torch.func.functional_call(self.model, state, (self.X[idx], self.y[idx]))
        loss = -value / self.N
        grads = torch.autograd.grad(loss.sum(), leaves)
        return loss.detach(), torch.cat([g.reshape(b, -1) for g in grads], 1)

    def step(self, step: int, idx: torch.Tensor | None) -> tuple[float, bool]:
        self.opt.step()
        self._set(self.opt.x)  # the accepted points (trials left other values behind)
        assert self.opt.f is not None
        value = float(-self.opt.f.sum() * self.N)
        return value, bool(torch.isfinite(self.opt.f).all())

    def finished(self) -> bool:  # noqa: D102 - see StepTask
        return self.opt.done

    def summary(self) -> str:
        """Iterations per member and stalled line searches, for the history's events."""
        it = self.opt.iterations
        text = (f"batched L-BFGS: {self.B} members, iterations per member median "
                f"{int(it.median())}, max {int(it.max())}; {self.opt.evaluations} batched "
                f"evaluations, {self.opt.member_evaluations / self.B:.1f} per member")
        stalled = int(self.opt.stalled.sum())
        if stalled:
            text += f"; {stalled} member(s) stopped where no step decreased the objective"
        return text

    def take_snapshot(self) -> None:
        self._snapshot = (copy.deepcopy(self.model.state_dict()), self.opt.state_dict())

    def recover(self, step: int) -> str:
        if self._snapshot is not None:
            self.model.load_state_dict(self._snapshot[0])
            self.opt.load_state_dict(self._snapshot[1])
        self.opt.valid[:] = False
        self.opt.lr *= 0.5
        return f"step {step}: failed; restored the last good state and halved the first step"

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.opt.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])


def batched_plan(model: BatchedExactGP, data: FitData, opts: FitOptions) -> FitPlan:
    """The plan of :class:`~latentgp.models.BatchedExactGP`: batched L-BFGS iterations
    until every member has converged (the task decides; the loop's rule on the summed
    objective is off)."""
    if opts.optimizer != "lbfgs":
        raise ValueError(
            "BatchedExactGP trains with the batched L-BFGS (a line search and convergence "
            f"test per member); optimizer={opts.optimizer!r} is not supported"
        )
    if opts.batch_size_given or opts.process_group is not None:
        raise ValueError("BatchedExactGP fits on all its data in one process: batch_size= "
                         "and process_group= are not supported")
    assert data.X is not None and data.y is not None
    ys = model.initialize_training(data.X, data.y, seed=opts.seed)
    task = BatchedLBFGSTask(model, data.X, ys, opts)
    N = data.X.shape[1]
    sampler = Sampler(N, N, opts.seed, mode="none")
    plan = make_plan(model, task, sampler, opts, D.Reducer(),
                     identity={"num_gps": model.num_gps})
    plan.tol = None
    plan.stops_itself = True

    def finish() -> None:
        if model.history_ is not None:
            model.history_.events.append(task.summary())

    plan.finish = finish
    return plan


register_plan(BatchedExactGP, batched_plan)
