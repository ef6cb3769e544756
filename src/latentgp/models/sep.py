"""Scalable expectation propagation for GP classification (SEP; seed 002, notes §1).

Model: ``p(y_i | fbar) ~= phi_i(fbar) = Phi(y_i upsilon_i' fbar / sqrt(1 + s_i))`` with the
FITC conditional applied to the inducing values ``fbar`` (eq. 1), approximated by one
rank-one Gaussian site per data point (eq. 10)::

    phit_i(fbar) = st_i exp(-nu_i/2 (upsilon_i' fbar)^2 + mu_i upsilon_i' fbar)

All cavities, tilted moments and site updates are closed form (:mod:`.ep_sites`).
Training alternates one parallel damped sweep of site updates with ONE gradient step on the
kernel hyperparameters and inducing inputs (no waiting for EP convergence, notes §1.5).
The gradient is that of the EP evidence ``log Z_q`` (eq. 4), obtained by automatic
differentiation of the surrogate (notes §1.4, verified)::

    F(xi) = E_q[log N(fbar | 0, K_xi)] + sum_i log Phi(y_i a_i(xi) / sqrt(b_i(xi)))

with ``q`` and every cavity frozen in ``fbar`` space.  The value reported in
``history_.objective`` is the EP estimate ``log Z_q`` itself (eq. 28 with the corrected
eq. 29), which is what F's gradient differentiates at an EP fixed point.

Training schemes (``scheme=``):

- ``"batch"``: every sweep updates all sites (damping 0.5), then one step of the
  sign-adaptive rule of the seed (per-parameter rate x1.02 / x0.5) or Adam/ADADELTA.
  Memory: the sites' ``nu, mu`` (2N numbers) and O(N M) transient work.  With
  ``fit(..., process_group=g)`` each ``torch.distributed`` process passes its own shard:
  site sums, ``log Z`` and gradients are all-reduced (see :func:`distributed_sweep`).
- ``"stochastic"``: minibatches (damping 0.99); the sites of a minibatch are refined against
  ``q`` built from the running natural-parameter sums ``A = sum nu_i upsilon_i upsilon_i'``,
  ``c = sum mu_i upsilon_i`` (O(M^3) per step), then a step with the stochastic gradient
  ``(N/|B|) sum_batch`` (eq. 6), ADADELTA (rho 0.9, eps 1e-5) by default, or Adam.  Each
  site keeps the ``upsilon_i`` it was last updated with so it can be removed exactly from
  ``A, c``: memory O(N M), the seed's bound (notes §1.5).

The training loop lives in :meth:`SEP.fit` (site updates need the indices of the minibatch,
which the shared loop does not pass); it honours ``epochs``/``max_steps``/``batch_size``/
``seed``/``progress``/``callbacks``/``tol`` and records a :class:`~latentgp.training.FitHistory`.
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from typing import Any

import torch
from torch.special import log_ndtr

from ..linalg import CholeskyError, solve_lower, solve_upper_t
from ..training import FitHistory, TrainingWarning
from ..training.fit import _make_optimizer
from ..training.progress import ProgressBar
from ..validation import check_positive_int
from .base import register_model
from .ep_sites import (
    LOG_2PI,
    WhitenedPosterior,
    cavity_projection,
    damp,
    log_site_normalisers,
    probit_site_update,
    probit_tilted,
    site_sums,
)
from .inducing_ep import InducingEPClassifier

SCHEMES = ("batch", "stochastic")


class SignAdaptive(torch.optim.Optimizer):
    """The seed's batch step rule: each parameter entry has its own rate, multiplied by
    ``up`` (1.02) when its gradient keeps its sign and by ``down`` (0.5) when it flips;
    the step is ``-rate * grad`` (minimising the loss)."""

    def __init__(self, params, lr: float = 1e-2, up: float = 1.02, down: float = 0.5):
        super().__init__(params, {"lr": lr, "up": up, "down": down})

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if "rate" not in st:
                    st["rate"] = torch.full_like(p, group["lr"])
                    st["prev"] = torch.zeros_like(p)
                g = p.grad
                same = g * st["prev"]
                factor = torch.where(
                    same > 0,
                    torch.full_like(g, group["up"]),
                    torch.where(same < 0, torch.full_like(g, group["down"]), torch.ones_like(g)),
                )
                st["rate"].mul_(factor)
                st["prev"].copy_(g)
                p.add_(-st["rate"] * g)


class _Reducer:
    """Sums over processes: identity for one process."""

    world = 1
    rank = 0

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        return t


class _AllReduce(_Reducer):
    def __init__(self, group) -> None:
        import torch.distributed as dist

        self.dist, self.group = dist, group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        t = t.clone()
        self.dist.all_reduce(t, op=self.dist.ReduceOp.SUM, group=self.group)
        return t

    def broadcast_module(self, module: torch.nn.Module) -> None:
        src = 0 if self.group is None else self.dist.get_global_rank(self.group, 0)
        for t in list(module.parameters()) + list(module.buffers()):
            self.dist.broadcast(t.data, src=src, group=self.group)


@register_model
class SEP(InducingEPClassifier):
    """Scalable EP for binary GP classification (probit likelihood, M inducing points).

    Parameters
    ----------
    num_inducing: M (ignored when ``Z`` is given).
    kernel: name or :class:`~latentgp.kernels.Kernel` (the seed uses ARD RBF).
    Z: initial inducing inputs ``(M, D)``; default: a random subset of the training inputs
        (``inducing_init="random"``, as in the seed), or ``"kmeans"``/``"greedy"``.
    scheme: ``"batch"`` or ``"stochastic"`` (see the module docstring).
    damping: EP damping rho (new = rho * update + (1 - rho) * old); default 0.5 (batch),
        0.99 (stochastic).
    learn_inducing: optimise Z with the hyperparameters.

    Attributes after ``fit``: ``site_nu``, ``site_mu`` (N,) site parameters,
    ``skipped_updates_`` (site updates skipped because the cavity or the new site would
    have had non-positive precision), ``site_updates_`` (updates attempted),
    ``history_`` (:class:`~latentgp.training.FitHistory`; ``objective`` holds log Z_q).
    """

    def __init__(
        self,
        num_inducing: int = 50,
        kernel: Any = "rbf",
        Z: Any = None,
        scheme: str = "batch",
        damping: float | None = None,
        learn_inducing: bool = True,
        inducing_init: str = "random",
        likelihood: Any = "probit",
        normalize_y: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(
            num_inducing,
            kernel,
            Z,
            learn_inducing,
            inducing_init,
            likelihood,
            normalize_y,
            device,
            dtype,
        )
        if scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {list(SCHEMES)}, got {scheme!r}")
        if damping is not None and not (isinstance(damping, (int, float)) and 0 < damping <= 1):
            raise ValueError(f"damping must be a number in (0, 1], got {damping!r}")
        self.scheme = scheme
        self.damping = None if damping is None else float(damping)
        self.site_nu: torch.Tensor | None = None
        self.site_mu: torch.Tensor | None = None
        self.site_upsilon: torch.Tensor | None = None  # (N, M), stochastic scheme only
        self.A: torch.Tensor | None = None
        self.c: torch.Tensor | None = None
        self.skipped_updates_ = 0
        self.site_updates_ = 0

    def get_config(self):
        cfg = super().get_config()
        cfg.update(scheme=self.scheme, damping=self.damping)
        return cfg

    @property
    def rho(self) -> float:
        if self.damping is not None:
            return self.damping
        return 0.5 if self.scheme == "batch" else 0.99

    # ---------------------------------------------------------------------- sites --
    def reset_sites(self, num_data: int) -> None:
        """Start every site at ``nu = mu = 0`` (q = prior)."""
        kw = {"dtype": self.dtype_, "device": self.device_}
        self.site_nu = torch.zeros(num_data, **kw)
        self.site_mu = torch.zeros(num_data, **kw)
        M = self.num_inducing
        self.A = torch.zeros(M, M, **kw)
        self.c = torch.zeros(M, **kw)
        self.site_upsilon = torch.zeros(num_data, M, **kw) if self.scheme == "stochastic" else None
        self.skipped_updates_ = 0
        self.site_updates_ = 0

    def initialize(self, X: Any, y: Any, seed: int | None = None) -> SEP:
        """Build, set data-dependent initial values and create the sites (q = prior)
        without training; a built model keeps its parameters.  Returns ``self``."""
        self._prepare_sites(X, y, seed)
        return self

    def _prepare_sites(self, X: Any, y: Any, seed: int | None = None):
        """Validated inputs ``(N, D)`` and labels in {-1, +1} ``(N,)``; sites exist for N."""
        Xt, ypm = self._prepare(X, y, seed)
        if self.site_nu is None or self.site_nu.shape[0] != Xt.shape[0]:
            self.reset_sites(Xt.shape[0])
        return Xt, ypm

    def _blocks(self, X: torch.Tensor, L: torch.Tensor):
        """``V = L^{-1} K_zx`` (M, B) and the FITC variances ``s`` (B,)."""
        V = solve_lower(L, self.kernel(self.Z, X))
        s = (self.kernel.diag(X) - V.square().sum(0)).clamp_min(0.0)
        return V, s

    def _count(self, ok: torch.Tensor) -> None:
        self.site_updates_ += int(ok.numel())
        self.skipped_updates_ += int((~ok).sum())

    def _batch_posterior(self, L, V, reduce: _Reducer) -> WhitenedPosterior:
        LtAL, h = site_sums(V, self.site_nu, self.site_mu)
        both = reduce(torch.cat([LtAL.reshape(-1), h]))
        M = L.shape[0]
        return WhitenedPosterior(L, both[: M * M].reshape(M, M), both[M * M :])

    @torch.no_grad()
    def sweep(self, X: torch.Tensor, ypm: torch.Tensor, reduce: _Reducer | None = None):
        """One parallel, damped update of all sites of ``X`` (batch scheme, eqs. 14-25).

        Returns ``(L, V, s, q)`` with ``q`` rebuilt from the new sites.
        """
        reduce = reduce or _Reducer()
        L = self.prior_factor()
        V, s = self._blocks(X, L)
        post = self._batch_posterior(L, V, reduce)
        cav = cavity_projection(post, V, V, self.site_nu, self.site_mu, same=True)
        nu_new, mu_new, _, ok = probit_site_update(ypm, cav["a"], cav["v"], s)
        ok = ok & cav["valid"]
        self._count(ok)
        rho = self.rho
        self.site_nu = damp(nu_new, self.site_nu, rho, ok)
        self.site_mu = damp(mu_new, self.site_mu, rho, ok)
        return L, V, s, self._batch_posterior(L, V, reduce)

    # ------------------------------------------------------------------- evidence --
    def _site_terms(self, post, V, Po, s, ypm, nu, mu, same):
        """Cavities (for the surrogate) and ``sum_i log Ztilde_i`` of the given sites."""
        cav = cavity_projection(post, V, Po, nu, mu, same=same)
        b = 1.0 + s + cav["v"].clamp_min(0.0)
        log_z, _, _ = probit_tilted(ypm, cav["a"], b)
        d = cav["d_oo"]
        valid = cav["valid"]
        lzt = log_site_normalisers(log_z, torch.where(valid, nu, 0.0), mu, cav["c_o"], d)
        # a site whose cavity is invalid (only after a skipped update) contributes nothing
        return cav, torch.where(valid, lzt, 0.0)

    @staticmethod
    def _global_term(post: WhitenedPosterior) -> torch.Tensor:
        """``g(theta) - g(theta_prior) = 1/2 log|Sigma| - 1/2 log|K| + 1/2 mu'Sigma^{-1}mu``."""
        return -0.5 * post.log_det_B() + 0.5 * post.quad_B()

    def _surrogate(self, X, ypm, post, Po, cav, weight: float, prior_weight: float = 1.0):
        """``F(xi)`` of notes §1.4 with q and the cavities frozen (autograd through xi)."""
        mu_f = post.mean.detach()
        T = post.sqrt_cov.detach()  # Sigma = T T'
        G = (T @ post.solve_R(Po)).detach()  # Sigma u_o (M, B)
        kappa, C = cav["kappa"].detach(), cav["C"].detach()
        L = self.prior_factor()
        M = L.shape[0]
        prior = (
            -0.5 * M * LOG_2PI
            - L.diagonal().log().sum()
            - 0.5 * solve_lower(L, T).square().sum()
            - 0.5 * solve_lower(L, mu_f[:, None]).square().sum()
        )
        V = solve_lower(L, self.kernel(self.Z, X))
        U = solve_upper_t(L, V)  # upsilon_i = K^{-1} k_i, (M, B)
        UG = (U * G).sum(0)
        a = U.mT @ mu_f + UG * kappa
        v = (T.mT @ U).square().sum(0) + C * UG.square()
        b = 1.0 + self.kernel.diag(X) - V.square().sum(0) + v
        data = log_ndtr(ypm * a / torch.sqrt(b.clamp_min(1e-12))).sum()
        return prior_weight * prior + weight * data

    def log_evidence(self, X: Any, y: Any) -> float:
        """The EP estimate ``log Z_q`` (eq. 28, corrected eq. 29) for the current sites and
        hyperparameters, using all of ``X`` (O(N M^2)); sites must belong to ``X``."""
        self._require_built()
        Xt, ypm = self._prepare(X, y, None)
        self._check_sites(Xt.shape[0])
        with torch.no_grad():
            L = self.prior_factor()
            V, s = self._blocks(Xt, L)
            post = self._batch_posterior(L, V, _Reducer())
            _, lzt = self._site_terms(post, V, V, s, ypm, self.site_nu, self.site_mu, True)
            return float(self._global_term(post) + lzt.sum())

    def log_evidence_grad(self, X: Any, y: Any) -> dict[str, torch.Tensor]:
        """Gradient of ``log Z_q`` w.r.t. every trainable parameter by eq. 4 (sites fixed;
        exact at an EP fixed point).  Returns ``{name: grad}``."""
        self._require_built()
        Xt, ypm = self._prepare(X, y, None)
        self._check_sites(Xt.shape[0])
        with torch.no_grad():
            L = self.prior_factor()
            V, _ = self._blocks(Xt, L)
            post = self._batch_posterior(L, V, _Reducer())
            cav = cavity_projection(post, V, V, self.site_nu, self.site_mu, same=True)
        F = self._surrogate(Xt, ypm, post, V, cav, 1.0)
        named = [(n, p) for n, p in self.named_parameters() if p.requires_grad]
        grads = torch.autograd.grad(F, [p for _, p in named], allow_unused=True)
        return {
            n: (torch.zeros_like(p) if g is None else g)
            for (n, p), g in zip(named, grads, strict=True)
        }

    def converge_sites(self, X: Any, y: Any, max_sweeps: int = 500, tol: float = 1e-10) -> int:
        """Run parallel damped EP sweeps at fixed hyperparameters until the largest site
        change is below ``tol``; returns the number of sweeps."""
        Xt, ypm = self._prepare_sites(X, y)
        self._check_sites(Xt.shape[0])
        for it in range(1, max_sweeps + 1):  # noqa: B007 - returned below
            old_nu, old_mu = self.site_nu.clone(), self.site_mu.clone()
            _, _, _, post = self.sweep(Xt, ypm)
            change = max(
                float((self.site_nu - old_nu).abs().max()),
                float((self.site_mu - old_mu).abs().max()),
            )
            if change < tol:
                break
        self._set_q(post.mean, post.sqrt_cov)
        return it

    def _check_sites(self, N: int) -> None:
        if self.site_nu is None or self.site_nu.shape[0] != N:
            raise ValueError(
                f"the EP sites belong to {0 if self.site_nu is None else self.site_nu.shape[0]} "
                f"training points, but X has {N} rows: pass the training data"
            )

    # ------------------------------------------------------------------ training --
    def _default_fit_args(self, N: int) -> dict[str, Any]:
        if self.scheme == "batch":
            return {"optimizer": "sign", "lr": 0.2, "batch_size": N, "max_steps": 250}
        return {
            "optimizer": "adadelta",
            "lr": 1.0,
            "batch_size": min(N, self.num_inducing),
            "max_steps": 1000,
        }

    def _grad_step(self, F: torch.Tensor, opt, params, scale: float, reduce: _Reducer) -> bool:
        grads = torch.autograd.grad(-F * scale, params, allow_unused=True)
        ok = True
        for p, g in zip(params, grads, strict=True):
            g = torch.zeros_like(p) if g is None else g
            g = reduce(g)
            ok = ok and bool(torch.isfinite(g).all())
            p.grad = g
        if ok:
            opt.step()
        return ok

    def _batch_surrogate(self, X, ypm, post: WhitenedPosterior, prior_weight: float = 1.0):
        """Batch-scheme ``F(xi)`` (same value and gradient as :meth:`_surrogate` with
        ``Po = V``) and, from the same forward pass, ``sum_i log Ztilde_i`` at ``xi``.

        With ``P = L^{-1} T`` and ``p = L^{-1} mu`` (M x M work): ``upsilon_i'mu = V_i'p``
        and ``T'upsilon_i = P'V_i``; the frozen site direction enters through the detached
        copy of ``P'V``.  Cost: two O(N M^2) products plus their backward pass.
        """
        mu_f = post.mean.detach()
        T = post.sqrt_cov.detach()
        L = self.prior_factor()
        M = L.shape[0]
        P = solve_lower(L, T)
        p = solve_lower(L, mu_f[:, None])[:, 0]
        prior = -0.5 * M * LOG_2PI - L.diagonal().log().sum() - 0.5 * P.square().sum()
        prior = prior - 0.5 * p.square().sum()
        V = solve_lower(L, self.kernel(self.Z, X))
        PV = P.mT @ V  # (M, N): T' upsilon_i(xi)
        c = V.mT @ p  # upsilon_i(xi)' mu
        c0, PV0 = c.detach(), PV.detach()
        d0 = PV0.square().sum(0)
        nu, mu = self.site_nu, self.site_mu
        one_minus = 1.0 - nu * d0
        valid = one_minus > 0
        safe = torch.where(valid, one_minus, torch.ones_like(one_minus))
        kappa, C = (nu * c0 - mu) / safe, nu / safe
        UG = (PV * PV0).sum(0)  # upsilon_i(xi)' Sigma upsilon_i(xi_0)
        a = c + UG * kappa
        v = PV.square().sum(0) + C * UG.square()
        b = 1.0 + self.kernel.diag(X) - V.square().sum(0) + v
        log_z = log_ndtr(ypm * a / torch.sqrt(b.clamp_min(1e-12)))
        F = prior_weight * prior + torch.where(valid, log_z, 0.0).sum()
        lzt = log_site_normalisers(log_z.detach(), torch.where(valid, nu, 0.0), mu, c0, d0)
        return F, torch.where(valid, lzt, 0.0).sum()

    def _batch_step(self, X, ypm, opt, params, N_total: int, reduce: _Reducer) -> float:
        _, _, _, post = self.sweep(X, ypm, reduce)
        self._set_q(post.mean, post.sqrt_cov)
        F, lzt = self._batch_surrogate(X, ypm, post, prior_weight=1.0 / reduce.world)
        value = float(self._global_term(post) + reduce(lzt))
        if not self._grad_step(F, opt, params, 1.0 / N_total, reduce):
            raise FloatingPointError("non-finite gradient of the EP evidence")
        return value

    def _stochastic_step(self, X, ypm, idx, opt, params, N: int) -> float:
        B = idx.shape[0]
        with torch.no_grad():
            L = self.prior_factor()
            Xb, yb = X[idx], ypm[idx]
            V, s = self._blocks(Xb, L)
            post = WhitenedPosterior(L, L.mT @ self.A @ L, L.mT @ self.c)
            U_old = self.site_upsilon[idx].mT  # (M, B)
            nu_old, mu_old = self.site_nu[idx], self.site_mu[idx]
            cav = cavity_projection(post, V, L.mT @ U_old, nu_old, mu_old)
            nu_new, mu_new, _, ok = probit_site_update(yb, cav["a"], cav["v"], s)
            ok = ok & cav["valid"]
            self._count(ok)
            nu_d = damp(nu_new, nu_old, self.rho, ok)
            mu_d = damp(mu_new, mu_old, self.rho, ok)
            U_new = torch.where(ok[None, :], solve_upper_t(L, V), U_old)
            self.A += (U_new * nu_d) @ U_new.mT - (U_old * nu_old) @ U_old.mT
            self.A = 0.5 * (self.A + self.A.mT)
            self.c += U_new @ mu_d - U_old @ mu_old
            self.site_nu[idx], self.site_mu[idx] = nu_d, mu_d
            self.site_upsilon[idx] = U_new.mT
            post = WhitenedPosterior(L, L.mT @ self.A @ L, L.mT @ self.c)
            Po = L.mT @ U_new
            cav, lzt = self._site_terms(post, V, Po, s, yb, nu_d, mu_d, False)
            value = float(self._global_term(post) + (N / B) * lzt.sum())
        self._set_q(post.mean, post.sqrt_cov)
        F = self._surrogate(Xb, yb, post, Po, cav, N / B)
        if not self._grad_step(F, opt, params, 1.0 / N, _Reducer()):
            raise FloatingPointError("non-finite gradient of the EP evidence")
        return value

    @torch.no_grad()
    def _final_posterior(self, X, reduce: _Reducer) -> None:
        L = self.prior_factor()
        if self.scheme == "batch":
            V, _ = self._blocks(X, L)
            post = self._batch_posterior(L, V, reduce)
        else:
            post = WhitenedPosterior(L, L.mT @ self.A @ L, L.mT @ self.c)
        self._set_q(post.mean, post.sqrt_cov)

    def fit(
        self,
        X: Any,
        y: Any,
        *,
        batch_size: int | None = None,
        epochs: int | None = None,
        max_steps: int | None = None,
        lr: float | None = None,
        optimizer: str | None = None,
        progress: bool | None = None,
        seed: int | None = None,
        tol: float | None = None,
        callbacks=(),
        process_group=None,
        checkpoint=None,
        checkpoint_every: int | None = None,
        checkpoint_seconds: float | None = None,
        resume: bool = False,
    ) -> SEP:
        """Fit to inputs ``X`` ``(N, D)`` and labels ``y`` in {0, 1} ``(N,)``.

        Batch scheme: one step = one sweep over all sites + one hyperparameter step
        (``epochs`` = ``max_steps`` = sweeps; default 250, the seed's budget).  Stochastic
        scheme: one step = one minibatch; ``epochs=E`` takes ``E * ceil(N / batch_size)``
        steps.  ``optimizer``: ``"sign"`` (seed's batch rule, default for batch),
        ``"adadelta"`` (default for stochastic, lr 1), ``"adam"``, ``"sgd"``.
        ``tol``: stop when the relative change of log Z_q per epoch stays below ``tol`` for
        3 epochs.  ``process_group``: a ``torch.distributed`` group; ``X, y`` are then this
        process's shard (batch scheme only; parameters are broadcast from the group's
        first rank, so give ``Z`` and a fixed kernel init for runs that must match a
        single-process run exactly).  Returns ``self``.
        """
        if checkpoint is not None or resume or checkpoint_every or checkpoint_seconds:
            raise ValueError("SEP does not write or resume checkpoints (its sites are not saved)")
        reduce: _Reducer = _AllReduce(process_group) if process_group is not None else _Reducer()
        if process_group is not None and self.scheme != "batch":
            raise ValueError("distributed training (process_group) needs scheme='batch'")
        Xt, ypm = self._prepare_sites(X, y, seed)
        if isinstance(reduce, _AllReduce):
            reduce.broadcast_module(self)
        N = Xt.shape[0]
        N_total = int(reduce(torch.tensor(float(N), dtype=torch.float64)).item())
        defaults = self._default_fit_args(N)
        if batch_size is not None:
            batch_size = check_positive_int(batch_size, "batch_size")
            if batch_size > N:
                raise ValueError(f"batch_size={batch_size} is larger than the {N} data points")
            if self.scheme == "batch" and batch_size != N:
                raise ValueError(
                    "the batch scheme updates all sites each sweep; use "
                    "SEP(scheme='stochastic') for minibatches"
                )
        if epochs is not None:
            epochs = check_positive_int(epochs, "epochs")
        if max_steps is not None:
            max_steps = check_positive_int(max_steps, "max_steps")
        B = batch_size or defaults["batch_size"]
        optimizer = (optimizer or defaults["optimizer"]).lower()
        lr = defaults["lr"] if lr is None else lr
        if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
            raise ValueError(f"lr must be a positive number, got {lr!r}")
        steps_per_epoch = math.ceil(N / B)
        if epochs is not None:
            total = epochs * steps_per_epoch
        else:
            total = max_steps if max_steps is not None else defaults["max_steps"]
        params = [p for p in self.parameters() if p.requires_grad]
        if optimizer == "sign":
            opt = SignAdaptive(params, lr=lr)
        elif optimizer == "lbfgs":
            raise ValueError("SEP takes one gradient step per sweep: use sign, adadelta or adam")
        else:
            opt = _make_optimizer(optimizer, params, lr)
        gen = torch.Generator(device="cpu")
        gen.manual_seed(0 if seed is None else int(seed))

        history = FitHistory()
        bar = ProgressBar(total, desc="SEP", enabled=progress and reduce.rank == 0)
        t0 = time.perf_counter()
        snapshot = self._snapshot()
        consecutive, step, perm = 0, 0, None
        epoch_values: list[float] = []
        prev_mean, calm = None, 0
        self.train()
        try:
            while step < total:
                pos = step % steps_per_epoch
                try:
                    if self.scheme == "batch":
                        value = self._batch_step(Xt, ypm, opt, params, N_total, reduce)
                    else:
                        if pos == 0 or perm is None:
                            perm = torch.randperm(N, generator=gen).to(Xt.device)
                        idx = perm[pos * B : (pos + 1) * B]
                        value = self._stochastic_step(Xt, ypm, idx, opt, params, N)
                    ok = math.isfinite(value)
                except (CholeskyError, FloatingPointError) as err:
                    ok, value = False, float("nan")
                    history.events.append(f"step {step}: {err}")
                if not ok:
                    consecutive += 1
                    self._restore(snapshot)
                    for g in opt.param_groups:
                        g["lr"] *= 0.5
                    opt.state.clear()
                    msg = (
                        f"step {step}: non-finite EP evidence or gradient; restored the last "
                        f"good state and lowered the learning rate to "
                        f"{opt.param_groups[0]['lr']:.3g}"
                    )
                    history.events.append(msg)
                    warnings.warn(msg, TrainingWarning, stacklevel=2)
                    if consecutive >= 8:
                        raise FloatingPointError(
                            "SEP training failed 8 times in a row; the last good state was "
                            "restored (check the data scale and initial hyperparameters)"
                        )
                else:
                    consecutive = 0
                    history.objective.append(value)
                    epoch_values.append(value)
                    if (step + 1) % max(1, min(100, steps_per_epoch)) == 0:
                        snapshot = self._snapshot()
                step += 1
                bar.update(1, items=B, objective=value / N_total)
                info = {
                    "step": step,
                    "epoch": step / steps_per_epoch,
                    "objective": value,
                    "model": self,
                    "seconds": time.perf_counter() - t0,
                }
                if any(cb(info) for cb in callbacks):
                    history.stopped = "callback"
                    break
                if tol is not None and step % steps_per_epoch == 0 and epoch_values:
                    mean = sum(epoch_values) / len(epoch_values)
                    epoch_values = []
                    if prev_mean is not None:
                        rel = abs(mean - prev_mean) / max(abs(prev_mean), 1e-12)
                        calm = calm + 1 if rel < tol else 0
                        if calm >= 3:
                            history.stopped = f"converged (relative change < {tol:g})"
                            break
                    prev_mean = mean
        finally:
            bar.close()
            history.steps = step
            history.epochs = step / steps_per_epoch
            history.seconds = time.perf_counter() - t0
        if not history.stopped:
            history.stopped = "step budget reached"
        self._final_posterior(Xt, reduce)
        self.history_ = history
        self.eval()
        return self

    def _snapshot(self):
        sites = {
            k: (None if getattr(self, k) is None else getattr(self, k).clone())
            for k in ("site_nu", "site_mu", "site_upsilon", "A", "c")
        }
        return copy.deepcopy(self.state_dict()), sites

    def _restore(self, snapshot) -> None:
        state, sites = snapshot
        self.load_state_dict(state)
        for k, v in sites.items():
            setattr(self, k, None if v is None else v.clone())


def distributed_sweep(
    model: SEP, X_shard: torch.Tensor, y_shard: torch.Tensor, group=None
) -> tuple[float, torch.Tensor, torch.Tensor]:
    """One distributed SEP sweep (seed Fig. 1 right) on this process's shard.

    Every process of ``group`` (gloo on CPU, or NCCL) calls this with its own shard
    ``X_shard`` ``(N_k, D)`` and labels ``y_shard`` in {0, 1}; the model's sites are those
    of the shard (created on the first call; the model's parameters must already agree
    across processes).  Each process updates its
    sites against the same ``q``; ``q`` is rebuilt from the all-reduced per-shard sums
    ``A_k = sum nu_j upsilon_j upsilon_j'`` and ``c_k = sum mu_j upsilon_j``.  Returns the
    global ``log Z_q`` and ``q``'s mean ``(M,)`` and covariance ``(M, M)``: identical on all
    processes, and equal to a one-process sweep up to round-off.
    """
    reduce = _AllReduce(group)
    Xt, ypm = model._prepare_sites(X_shard, y_shard)
    _, V, s, post = model.sweep(Xt, ypm, reduce)
    with torch.no_grad():
        _, lzt = model._site_terms(post, V, V, s, ypm, model.site_nu, model.site_mu, True)
        value = float(model._global_term(post) + reduce(lzt.sum()))
        T = post.sqrt_cov
    model._set_q(post.mean, T)
    return value, post.mean, T @ T.mT
