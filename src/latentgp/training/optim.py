"""Optimisers of the one fit: the ``torch.optim`` choices of the gradient loop and the two
rules that belong to a method (SEP's sign-adaptive step, QSGP's row-sparse AdaGrad).

- :func:`make_optimizer`: ``"adam"``, ``"adadelta"``, ``"sgd"`` or ``"lbfgs"`` with the
  loop's defaults (``optimizer_kwargs`` override them).
- :class:`SignAdaptive`: the batch-EP step rule of the SEP seed (a per-entry rate that
  grows while the gradient keeps its sign and halves when it flips); a
  ``torch.optim.Optimizer``.
- :class:`SparseRowOptimizer`: AdaGrad (or plain SGD) on the *gathered rows* of
  length-``m`` parameter vectors, as QSGP's sparse steps need: only the sampled rows are
  read, updated and written back, so a step costs ``O(rows)`` whatever ``m``.  It is not a
  ``torch.optim.Optimizer`` (those update whole tensors); its accumulators live with the
  model's training state, which checkpoints carry.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

from ..linalg import CholeskyError

#: ``"natural"``: natural-gradient steps on Gaussian q(u) and Adam on the rest
#: (:mod:`latentgp.training.natural`)
OPTIMIZERS = ("adam", "adadelta", "sgd", "lbfgs", "natural")
SPARSE_OPTIMIZERS = ("adagrad", "sgd")

__all__ = [
    "OPTIMIZERS",
    "SPARSE_OPTIMIZERS",
    "SignAdaptive",
    "SparseRowOptimizer",
    "check_optimizer_kwargs",
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


class SignAdaptive(torch.optim.Optimizer):
    """The SEP seed's batch step rule (minimising the loss), in log coordinates for
    positive parameters and with an optional backtracking safeguard.

    Each parameter entry has its own rate, starting at ``lr``; after every step it is
    multiplied by ``up`` when the entry's gradient kept its sign since the last step and
    by ``down`` when it flipped (unchanged when either is zero).  The step is
    ``x -= rate * grad_x`` with the updated rate, where ``x`` is the parameter itself, or
    for a parameter group with ``log_space=True`` (softplus-stored positive parameters,
    ``theta = softplus(raw)``; :func:`latentgp.parameters.positive_raw_parameters`)
    ``x = log softplus(raw)``, whose gradient is ``grad_raw * softplus(raw) /
    sigmoid(raw)``: a positive parameter then moves by a factor ``exp(-rate * grad_x)``
    per step, so it can cross orders of magnitude in tens of steps, where additive
    steps on ``raw`` (``~ theta`` once ``theta`` is large) need hundreds.
    ``up = down = 1`` is plain gradient descent at rate ``lr``.

    ``step(closure)`` backtracks: ``closure()`` (no gradient needed) returns the loss at
    the current parameter values; it is called once before the step and once after
    each trial.  A trial whose loss is not finite or exceeds the first by more than
    ``1e-9 * max(1, |loss|)`` is halved (at most ``max_halvings`` times; then the
    parameters stay where they were).  Every rate is multiplied by the fraction of the
    step taken (0.5 when none was), so the next step starts from a size that worked.
    :attr:`last_fraction` is that fraction and :attr:`halvings` counts halvings so far.
    Without a closure the step is taken as it is.  When a group's ``lr`` is changed
    between steps (the loop's repair of a failed step halves it), every rate of the
    group is scaled by the same factor.

    Parameters
    ----------
    params: the parameters (or parameter groups, which may set ``log_space``).
    lr: initial rate of every entry.  up, down: the rate factors (1.02 and 0.5 in the seed).
    log_space: default of the groups' ``log_space`` (False).
    backtrack: tells callers that can evaluate the loss to pass a closure to
        :meth:`step` (SEP's batch scheme does; :attr:`backtrack`).
    max_halvings: at most this many halvings of one step (backtracking).
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        up: float = 1.02,
        down: float = 0.5,
        *,
        log_space: bool = False,
        backtrack: bool = True,
        max_halvings: int = 10,
    ) -> None:
        for name, v in (("lr", lr), ("up", up), ("down", down)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
        if not isinstance(max_halvings, int) or max_halvings < 0:
            raise ValueError(f"max_halvings must be an integer >= 0, got {max_halvings!r}")
        super().__init__(params, {"lr": lr, "up": up, "down": down, "log_space": log_space})
        self.backtrack = bool(backtrack)
        self.max_halvings = max_halvings
        self.last_fraction = 1.0
        self.halvings = 0

    def _entries(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    yield group, p

    @staticmethod
    def _coords(group, p: torch.Tensor) -> torch.Tensor:
        return torch.log(F.softplus(p)) if group["log_space"] else p.clone()

    @staticmethod
    def _set(group, p: torch.Tensor, x: torch.Tensor) -> None:
        if group["log_space"]:
            # raw = inv_softplus(e^x) = e^x + log(1 - exp(-e^x)), stable at both ends
            v = torch.exp(x)
            x = v + torch.log(-torch.expm1(-v))
        p.copy_(x)

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102 - see the class docstring
        moves = []
        for group, p in self._entries():
            st = self.state[p]
            if "rate" not in st:
                st["rate"] = torch.full_like(p, group["lr"])
                st["prev"] = torch.zeros_like(p)
                st["lr"] = group["lr"]
            if group["lr"] != st.get("lr", group["lr"]):  # lr lowered (step repair)
                st["rate"].mul_(group["lr"] / st["lr"])
            st["lr"] = group["lr"]
            g = p.grad
            if group["log_space"]:
                g = g * F.softplus(p) / torch.sigmoid(p)
            same = g * st["prev"]
            factor = torch.where(
                same > 0,
                torch.full_like(g, group["up"]),
                torch.where(same < 0, torch.full_like(g, group["down"]), torch.ones_like(g)),
            )
            st["rate"].mul_(factor)
            st["prev"].copy_(g)
            moves.append((group, p, p.clone(), self._coords(group, p), -st["rate"] * g))
        if closure is None:
            for group, p, _, x0, d in moves:
                self._set(group, p, x0 + d)
            return None
        loss0 = float(closure())
        tol = 1e-9 * max(1.0, abs(loss0))
        fraction = 1.0
        for _ in range(self.max_halvings + 1):
            for group, p, _, x0, d in moves:
                self._set(group, p, x0 + fraction * d)
            loss = _trial_loss(closure)
            if math.isfinite(loss) and loss <= loss0 + tol:
                break
            fraction *= 0.5
            self.halvings += 1
        else:
            fraction = 0.0
            for _, p, p0, _, _ in moves:
                p.copy_(p0)
        self.last_fraction = fraction
        if fraction < 1.0:
            for _, p, _, _, _ in moves:
                self.state[p]["rate"].mul_(fraction if fraction > 0 else 0.5)
        return loss0


def _trial_loss(closure) -> float:
    """The closure's loss at a trial point; ``inf`` where the point breaks the model's
    numerics (a failed factorisation or a non-finite value), so the trial is halved."""
    try:
        return float(closure())
    except (CholeskyError, FloatingPointError):
        return math.inf


def make_sign_adaptive(
    params: Iterable[Any], lr: float, optimizer_kwargs: Mapping[str, Any] | None = None
) -> SignAdaptive:
    """:class:`SignAdaptive` with ``optimizer_kwargs`` (``up``, ``down``, ``log_space``,
    ``backtrack``, ``max_halvings``), or a ``ValueError`` that names what it takes."""
    try:
        return SignAdaptive(params, lr=lr, **dict(optimizer_kwargs or {}))
    except TypeError as err:
        raise ValueError(
            f"optimizer_kwargs {optimizer_kwargs} do not suit the sign optimizer "
            f"(it takes up, down, log_space, backtrack and max_halvings): {err}"
        ) from None


class SparseRowOptimizer:
    """AdaGrad or SGD on gathered rows (QSGP's sparse steps).

    A step reads rows ``index`` of a parameter into a leaf tensor, differentiates the
    objective with respect to that leaf, and :meth:`update` writes the new rows back::

        adagrad:  G[index] += g**2;   param[index] = leaf - lr * g / (sqrt(G[index]) + eps)
        sgd:      param[index] = leaf - lr * g

    Parameters
    ----------
    kind: ``"adagrad"`` or ``"sgd"`` (no momentum: a running expectation of the rows, as
        QSGP's control variate keeps, needs updates that touch only the sampled rows).
    lr: step size (lowered by the loop's repair of failed steps through :attr:`lr`).
    eps: AdaGrad's constant added to the root of the accumulated squared gradients.
    """

    def __init__(self, kind: str, lr: float, eps: float = 1e-10) -> None:
        if kind not in SPARSE_OPTIMIZERS:
            raise ValueError(f"kind must be one of {list(SPARSE_OPTIMIZERS)}, got {kind!r}")
        self.kind, self.lr, self.eps = kind, float(lr), float(eps)

    @classmethod
    def from_kwargs(
        cls, kind: str, lr: float, optimizer_kwargs: Mapping[str, Any] | None = None
    ) -> SparseRowOptimizer:
        """Build from ``fit``'s ``optimizer_kwargs`` (adagrad takes ``eps`` only)."""
        kw = dict(optimizer_kwargs or {})
        allowed = {"eps"} if kind == "adagrad" else set()
        unknown = sorted(set(kw) - allowed)
        if unknown:
            raise ValueError(
                f"optimizer_kwargs {unknown} are not settings of QSGP's sparse {kind} "
                f"(it accepts {sorted(allowed) or 'none'})"
            )
        eps = kw.get("eps", 1e-10)
        if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps >= 0):
            raise ValueError(f"optimizer_kwargs['eps'] must be a number >= 0, got {eps!r}")
        return cls(kind, lr, float(eps))

    @torch.no_grad()
    def update(
        self, param: torch.Tensor, accumulator: torch.Tensor, index: Any, leaf: torch.Tensor
    ) -> torch.Tensor:
        """Write the new rows ``index`` of ``param`` from the gradient of ``leaf`` (the
        rows as they were gathered, ``param[index]``); returns the new rows.  A leaf
        without a gradient is left as it is.  ``accumulator``: AdaGrad's running sum of
        squared gradients, shaped like ``param`` (unused by sgd)."""
        g = leaf.grad
        if g is None:
            return leaf.detach()
        if self.kind == "adagrad":
            accumulator[index] = accumulator[index] + g * g
            new = leaf.detach() - self.lr * g / (torch.sqrt(accumulator[index]) + self.eps)
        else:
            new = leaf.detach() - self.lr * g
        param.data[index] = new
        return new
