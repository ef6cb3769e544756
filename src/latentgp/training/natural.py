"""Natural-gradient steps for Gaussian q(u) (Hensman, Fusi & Lawrence 2013; Salimbeni,
Eleftheriadis & Hensman 2018), with Adam on every other parameter.

For each latent, ``q = N(m, S)`` with ``S = R R^T`` (full) or diagonal.  Its natural
parameters are ``theta_1 = S^{-1} m`` and ``theta_2 = -S^{-1} / 2``, its expectation
parameters ``eta_1 = m`` and ``eta_2 = S + m m^T``.  The natural gradient of the ELBO with
respect to ``theta`` is the ordinary gradient with respect to ``eta``, so a step of size
``gamma`` is

    theta <- theta + gamma dELBO/deta,   i.e.   P' = P - 2 gamma G_2,   P' m' = P m + gamma G_1

with the precision ``P = S^{-1}`` and ``G_i = dELBO/deta_i``.  For a Gaussian likelihood,
the expected log-likelihood is linear in ``eta``, so one full-batch step with ``gamma = 1``
lands q at its optimum whatever the start.

``G`` comes from the gradients the fit loop has already computed with respect to q's
stored parameters (``q_mu``, ``q_sqrt_raw``): a vector-Jacobian product through the map
``eta -> (m, raw(S))`` (one Cholesky per latent, ``O(M^3)``), so a natural step costs no
second pass over the data.  The same holds whitened or not: the step acts on the
distribution q stores (over ``v = Lzz^{-1} u`` when whitened).

Non-conjugate likelihoods need a smaller step: ``warmup`` steps raise ``gamma``
log-linearly from ``gamma / 10^4`` to its value (the schedule of Salimbeni et al. 2018).
Minibatches need one too, conjugate or not (:func:`natural_step_size`: 0.1).
A step whose new precision is not positive definite is halved until it is (counted in
``halvings``), so a natural step never leaves the family.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any

import torch

from ..likelihoods import Gaussian
from ..linalg import CholeskyError
from ..parameters import inv_softplus, softplus
from ..variational import GaussianVariational

__all__ = ["NaturalAdam", "gaussian_q_modules"]


def gaussian_q_modules(model: torch.nn.Module) -> list[GaussianVariational]:
    """The Gaussian q(u) modules of ``model`` (SVGP's ``q``, the modulated models' ``q``)."""
    return [m for m in model.modules() if isinstance(m, GaussianVariational)]


def _expectation_grads(q: GaussianVariational, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``G_1 (Q, M)`` and ``G_2`` (``(Q, M, M)`` full, ``(Q, M)`` diagonal): the ELBO's
    gradient with respect to ``eta``, from the loss gradients on q's stored parameters
    (``ELBO = -scale * loss``).

    With ``m = eta_1`` and ``S = eta_2 - eta_1 eta_1^T``: ``G_2 = dELBO/dS`` and
    ``G_1 = dELBO/dm - 2 G_2 m``.  ``dELBO/dS`` is the reverse of ``S -> raw(S)`` (the
    Cholesky factor, or the softplus-inverse of the standard deviations), taken at ``S``
    built from the stored factor, never as ``eta_2 - m m^T`` (which cancels)."""
    g_mu, g_raw = q.q_mu.grad, q.q_sqrt_raw.grad
    g_mu = torch.zeros_like(q.q_mu) if g_mu is None else g_mu
    g_raw = torch.zeros_like(q.q_sqrt_raw) if g_raw is None else g_raw
    m, raw = q.q_mu.detach(), q.q_sqrt_raw.detach()
    if q.is_diag:
        s = softplus(raw)
        g_S = g_raw / (torch.sigmoid(raw) * 2.0 * s)  # d raw/d var = 1 / (softplus'(raw) 2 s)
        G1, G2 = g_mu - 2.0 * g_S * m, g_S
    else:
        g_S = _factor_to_covariance_grad(torch.tril(raw), torch.tril(g_raw))
        G1, G2 = g_mu - 2.0 * (g_S @ m[..., None])[..., 0], g_S
    return -scale * G1, -scale * G2


@contextlib.contextmanager
def _gradients_only_for(wanted: list[torch.Tensor], others: list[torch.Tensor]):
    """Within the block, ``others`` do not require gradients (a backward pass computes
    only ``wanted``'s); restored afterwards."""
    flags = [p.requires_grad for p in others]
    try:
        for p in others:
            p.requires_grad_(False)
            p.grad = None
        yield
    finally:
        for p, f in zip(others, flags, strict=True):
            p.requires_grad_(f)


def _finite(loss: torch.Tensor, params: list[torch.Tensor]) -> bool:
    """The loss and every gradient of ``params`` are finite."""
    return bool(torch.isfinite(loss)) and all(
        p.grad is None or bool(torch.isfinite(p.grad).all()) for p in params
    )


def _factor_to_covariance_grad(R: torch.Tensor, g_R: torch.Tensor) -> torch.Tensor:
    """``dL/dS`` (symmetric) for a loss that depends on the lower-triangular ``R``
    ``(..., M, M)`` only through ``S = R R^T``, from ``g_R = dL/dR`` (lower triangle):
    the reverse of the Cholesky factorisation taken at ``R`` itself (Murray 2016),
    ``sym(R^{-T} Phi(R^T g_R) R^{-1}) / 2`` with ``Phi`` the lower triangle with its
    diagonal halved; two triangular solves, no factorisation of ``S`` (``S = R R^T`` and a
    Cholesky of it first cost about 1.5 times as much at M = 1,024)."""
    P = torch.tril(R.mT @ g_R)
    P.diagonal(dim1=-2, dim2=-1).mul_(0.5)
    X = torch.linalg.solve_triangular(R.mT, P, upper=True)  # R^{-T} Phi
    X = torch.linalg.solve_triangular(R, X, upper=False, left=False)  # ... R^{-1}
    return 0.5 * (X + X.mT)


def _lower_factor_of_inverse(P: torch.Tensor) -> torch.Tensor:
    """The lower Cholesky factor of ``P^{-1}`` for SPD ``P`` (``(..., M, M)``), without
    forming the inverse: with ``J`` the order reversal and ``J P J = L L^T``,
    ``P = U U^T`` for the upper ``U = J L J``, so ``P^{-1} = U^{-T} U^{-1}`` and the factor
    is ``U^{-T}``, one triangular solve.  Raises ``CholeskyError`` if ``P`` is not SPD."""
    flip = P.flip(-1).flip(-2)
    L, info = torch.linalg.cholesky_ex(flip)
    if bool((info != 0).any()):
        raise CholeskyError("the natural step's precision is not positive definite")
    Ut = L.flip(-1).flip(-2).mT  # U^T, lower triangular
    eye = torch.eye(P.shape[-1], dtype=P.dtype, device=P.device).expand_as(P)
    return torch.linalg.solve_triangular(Ut, eye, upper=False)


def _natural_update(q: GaussianVariational, G1, G2, gamma: float) -> tuple[torch.Tensor, ...]:
    """The new ``(q_mu, q_sqrt_raw)`` after a natural step of size ``gamma``."""
    m = q.q_mu.detach()
    if q.is_diag:
        prec = softplus(q.q_sqrt_raw.detach()).square().reciprocal()
        new_prec = prec - 2.0 * gamma * G2
        if not bool((new_prec > 0).all()):
            raise CholeskyError("the natural step's precision is not positive")
        new_m = (prec * m + gamma * G1) / new_prec
        return new_m, inv_softplus(new_prec.rsqrt())
    R = torch.tril(q.q_sqrt_raw.detach())
    P = torch.cholesky_inverse(R)  # the natural parameter itself: -2 theta_2
    theta1 = torch.cholesky_solve(m[..., None], R)[..., 0] + gamma * G1
    new_P = P - 2.0 * gamma * G2
    new_R = _lower_factor_of_inverse(0.5 * (new_P + new_P.mT))
    new_m = (new_R @ (new_R.mT @ theta1[..., None]))[..., 0]
    return new_m, new_R


class NaturalAdam:
    """Natural-gradient steps on the Gaussian q(u) modules ``qs`` and Adam on ``params``
    (every other trainable parameter), one step of each per call of :meth:`step`.

    ``num_data``: N, the loss the loop differentiates is ``-ELBO / N``.  ``natural_lr``:
    gamma (1 for a conjugate model: one step to the optimum); ``warmup``: steps of the
    log-linear warm-up from ``gamma / 10^4``.  ``alternate``: with a closure,
    :meth:`step` takes the natural step first and Adam's step from the gradient at the
    new q (one more evaluation of the minibatch), as GPflow's examples alternate their two
    optimisers; without, both steps use the same gradient (GPyTorch's ``NGD`` + Adam).
    Measured on kin40k (M = 1,024, B = 1,024, the shared start of
    ``benchmarks/time_to_accuracy.py``): alternating reaches test NLPD -0.15 in 100 steps,
    the shared gradient 0.04; a step costs about 1.55 times as much.  Behaves as a
    ``torch.optim.Optimizer`` for the loop: ``param_groups`` (the natural step's group
    last, so step repair halves its rate too), ``state`` (Adam's moments), ``zero_grad``,
    ``state_dict``.
    """

    def __init__(
        self,
        qs: list[GaussianVariational],
        params: list[torch.nn.Parameter],
        *,
        lr: float,
        num_data: int,
        natural_lr: float = 1.0,
        warmup: int = 0,
        alternate: bool = True,
        adam_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if not qs:
            raise ValueError(
                "optimizer='natural' needs a model with a Gaussian q(u) (SVGP, SHGP, SMGP, "
                "SVHGP, SLGP); this model has none"
            )
        if not (isinstance(natural_lr, (int, float)) and 0 < natural_lr <= 1):
            raise ValueError(f"natural_lr must be in (0, 1], got {natural_lr!r}")
        if not (isinstance(warmup, int) and warmup >= 0):
            raise ValueError(f"natural_warmup must be an integer >= 0, got {warmup!r}")
        if not isinstance(alternate, bool):
            raise ValueError(f"natural_alternate must be True or False, got {alternate!r}")
        self.qs, self.num_data, self.warmup = qs, int(num_data), warmup
        self.alternate = alternate
        own = {id(p) for q in qs for p in (q.q_mu, q.q_sqrt_raw)}
        others = [p for p in params if id(p) not in own]
        dummy = [torch.zeros((), dtype=qs[0].q_mu.dtype)] if not others else others
        self.adam = torch.optim.Adam(dummy, lr=lr, **(adam_kwargs or {}))
        self.has_others = bool(others)
        self.natural_group = {
            "params": [p for q in qs for p in (q.q_mu, q.q_sqrt_raw)],
            "lr": float(natural_lr),
            "steps": 0,
            "halvings": 0,
        }
        self.param_groups = [*self.adam.param_groups, self.natural_group]

    @property
    def state(self):
        return self.adam.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.adam.zero_grad(set_to_none=set_to_none)
        for p in self.natural_group["params"]:
            p.grad = None

    def gamma(self) -> float:
        """This step's natural step size (after the warm-up schedule)."""
        g, k, w = self.natural_group["lr"], self.natural_group["steps"], self.warmup
        if k >= w:
            return g
        return g * 10.0 ** (-4.0 * (1.0 - k / w))

    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> bool:
        """One natural step on q(u) and one Adam step on the rest.

        Without ``closure``: both from the gradients in place.  With ``closure`` (zeroes
        the gradients, evaluates the loss, backpropagates, returns the loss) the step
        evaluates the loss itself: with ``alternate``, once for q's gradients alone, then,
        after the natural step, once for the others' gradients alone at the new q (each
        backward pass skips the parameters it does not need); otherwise once for all.
        Returns False where an evaluation is not finite (the loop then repairs the step;
        Adam's step is not taken)."""
        if closure is None:
            self._natural_step()
            if self.has_others:
                self.adam.step()
            return True
        mine = self.natural_group["params"]
        others = [p for g in self.adam.param_groups for p in g["params"]] if self.has_others else []
        if not self.alternate:
            if not _finite(closure(), mine + others):
                return False
            self._natural_step()
            if others:
                self.adam.step()
            return True
        with _gradients_only_for(mine, others):
            loss = closure()
        if not _finite(loss, mine):
            return False
        self._natural_step()
        if not others:
            return True
        with _gradients_only_for(others, mine):
            loss = closure()
        if not _finite(loss, others):
            return False
        self.adam.step()
        return True

    def _natural_step(self) -> None:
        gamma = self.gamma()
        grads = [_expectation_grads(q, float(self.num_data)) for q in self.qs]
        updates = None
        for _ in range(30):
            try:
                pairs = zip(self.qs, grads, strict=True)
                updates = [_natural_update(q, *g, gamma) for q, g in pairs]
                break
            except CholeskyError:
                gamma *= 0.5
                self.natural_group["halvings"] += 1
        if updates is None:
            raise CholeskyError("no natural step kept q(u)'s precision positive definite")
        with torch.no_grad():
            for q, (new_m, new_raw) in zip(self.qs, updates, strict=True):
                q.q_mu.copy_(new_m)
                q.q_sqrt_raw.copy_(new_raw)
        self.natural_group["steps"] += 1

    def state_dict(self) -> dict[str, Any]:
        g = self.natural_group
        return {
            "adam": self.adam.state_dict(),
            "natural": {"lr": g["lr"], "steps": g["steps"], "halvings": g["halvings"]},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.adam.load_state_dict(state["adam"])
        self.param_groups[: len(self.adam.param_groups)] = self.adam.param_groups
        self.natural_group.update(state["natural"])


def natural_step_size(model: Any, *, batch_size: int | None = None,
                      num_data: int | None = None) -> tuple[float, int]:
    """Default ``(natural_lr, warmup)``.

    ``(1, 0)`` where the likelihood is conjugate to a full-covariance q (a plain Gaussian
    on f) and each step sees every row (``batch_size`` None or ``>= num_data``): one step
    reaches the optimum.  With minibatches that step would land q on each minibatch's
    optimum (the time-to-accuracy race on elevators, B = 1,024 of 16,599 rows: 0.557 test
    NLPD at rate 1 against 0.489 at 0.1 after the same time), so a conjugate model gets
    ``(0.1, 0)``: each step moves the natural parameters a tenth of the way to the
    minibatch's optimum, an average over about the last ten minibatches.  Otherwise
    ``(0.1, 5)``: a non-conjugate likelihood (or a diagonal q, which the conjugate update
    does not keep diagonal) with the warm-up of Salimbeni et al. (2018), gamma raised
    log-linearly from 1e-5 to 0.1 over 5 steps."""
    lik = getattr(model, "likelihood", None)
    qs = gaussian_q_modules(model)
    if type(lik) is Gaussian and len(qs) == 1 and not qs[0].is_diag:
        full = batch_size is None or num_data is None or batch_size >= num_data
        return (1.0, 0) if full else (0.1, 0)
    return 0.1, 5


def make_natural_adam(
    model: Any, params: list[torch.nn.Parameter], lr: float, num_data: int,
    optimizer_kwargs: dict[str, Any] | None, *, batch_size: int | None = None,
) -> NaturalAdam:
    """``optimizer="natural"`` of the fit: ``optimizer_kwargs`` may hold ``natural_lr``,
    ``natural_warmup`` (defaults: :func:`natural_step_size` for minibatches of
    ``batch_size`` rows, None: every row) and ``natural_alternate`` (default True); the
    rest go to Adam."""
    kwargs = dict(optimizer_kwargs or {})
    default_lr, default_warmup = natural_step_size(model, batch_size=batch_size,
                                                   num_data=num_data)
    natural_lr = kwargs.pop("natural_lr", default_lr)
    warmup = kwargs.pop("natural_warmup", default_warmup)
    alternate = kwargs.pop("natural_alternate", True)
    if not math.isfinite(float(lr)):
        raise ValueError(f"lr must be finite, got {lr!r}")
    return NaturalAdam(
        gaussian_q_modules(model), params, lr=lr, num_data=num_data,
        natural_lr=natural_lr, warmup=warmup, alternate=alternate, adam_kwargs=kwargs,
    )
