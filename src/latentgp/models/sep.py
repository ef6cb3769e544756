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
  site sums, ``log Z`` and gradients are all-reduced (see
  :func:`latentgp.training.tasks.distributed_sweep`).
- ``"stochastic"``: minibatches (damping 0.99); the sites of a minibatch are refined against
  ``q`` built from the running natural-parameter sums ``A = sum nu_i upsilon_i upsilon_i'``,
  ``c = sum mu_i upsilon_i`` (O(M^3) per step), then a step with the stochastic gradient
  ``(N/|B|) sum_batch`` (eq. 6), ADADELTA (rho 0.9, eps 1e-5) by default, or Adam.  Each
  site keeps the ``upsilon_i`` it was last updated with so it can be removed exactly from
  ``A, c``: memory O(N M), the seed's bound (notes §1.5).

Training runs through the one fit (:func:`latentgp.training.fit`, reached through the
registered fit engine: models do not import the training layer) with SEP's plan
(:func:`latentgp.training.tasks.sep_plan`: site updates, then one hyperparameter step with
:class:`latentgp.training.optim.SignAdaptive` or a ``torch.optim`` optimiser), so it has
the same sources, seeds, progress bar, callbacks, ``tol``,
:class:`~latentgp.training.FitHistory`, repair of failed steps, exact checkpoint/resume
and Ctrl-C handling as the gradient-trained models.  The step's maths is here
(:meth:`SEP.batch_step`, :meth:`SEP.stochastic_step`); sums over processes come in as a
reducer argument.  Inside a ``torch.distributed`` default group (``latentgp fit --nproc``)
every process updates the sites of its part of the data and the natural-parameter sums of
all parts are added (:meth:`SEP.fit`).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch.special import log_ndtr

from ..linalg import solve_lower, solve_upper_t
from ..rng import seeded_scope
from ..validation import keyword_only_after_first
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
from .inducing_ep import LEGACY_ARGUMENT_TAIL, InducingEPClassifier, check_damping

SCHEMES = ("batch", "stochastic")


class _OneProcess:
    """Sums and maxima over "all processes" when there is only this one: the identity.
    Training passes :class:`latentgp.training.distributed.Reducer` instead (duck-typed:
    ``world``, ``rank``, ``reduce(t)`` = sum, ``reduce.maximum(t)``)."""

    world = 1
    rank = 0

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def maximum(self, t: torch.Tensor) -> torch.Tensor:
        return t


_ONE_PROCESS = _OneProcess()


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

    Training: ``fit`` takes the options of :meth:`GPModel.fit`.
    Fit to inputs ``X`` ``(N, D)`` and labels ``y`` in {0, 1} ``(N,)``.

    Batch scheme: one step = one sweep over all sites + one hyperparameter step
    (``epochs`` = ``max_steps`` = sweeps; default: until converged, see
    :mod:`latentgp.training.convergence`; the seed ran 250).  Stochastic
    scheme: one step = one minibatch; ``epochs=E`` takes ``E * ceil(N / batch_size)``
    steps.  ``optimizer``: ``"sign"`` (seed's batch rule, default for batch),
    ``"adadelta"`` (default for stochastic, lr 1), ``"adam"``, ``"sgd"``;
    ``optimizer_kwargs`` go to its constructor (e.g. ``{"rho": 0.95, "eps": 1e-6}`` for
    adadelta, ``{"up": 1.05, "down": 0.5}`` for sign).
    ``tol``: stop when the relative change of log Z_q per epoch stays below ``tol`` for
    3 epochs.  The loop is :func:`latentgp.training.loop.run_loop`: ``progress``,
    ``callbacks``, Ctrl-C, and ``checkpoint``/``checkpoint_every``/
    ``checkpoint_seconds``/``resume`` behave as in :meth:`GPModel.fit` (a checkpoint
    holds the sites, the running sums and the optimiser state, so a resumed run
    matches an uninterrupted one).

    Data-parallel training, two ways:

    - inside an initialised default ``torch.distributed`` group (``latentgp fit
      --nproc``, torchrun, :func:`latentgp.training.distributed.spawn`), every process
      passes the SAME full ``X, y``; each works on its part of the data (batch scheme)
      or of each minibatch (stochastic scheme), the site-parameter updates of all
      processes are combined (their natural-parameter sums ``A, c`` and the log Z
      terms are summed, the new sites exchanged) and gradients summed, so the run
      equals the one-process run up to round-off and every process holds the full
      state (checkpoints work, and may be resumed with another number of processes);
    - ``process_group=g``: ``X, y`` are this process's shard and each process keeps
      only its shard's sites (batch scheme only; no checkpoints).  Parameters are
      broadcast from the group's first rank, so give ``Z`` and a fixed kernel init
      for runs that must match a single-process run exactly.

    """

    @keyword_only_after_first(legacy=("kernel", "Z", "scheme", "damping", *LEGACY_ARGUMENT_TAIL))
    def __init__(
        self,
        num_inducing: int = 50,
        *,
        scheme: str = "batch",
        damping: float | None = None,
        **inducing_kwargs: Any,
    ) -> None:
        """Other keywords (``kernel``, ``Z``, ``learn_inducing``, ``inducing_init``,
        ``likelihood``, ``normalize_y``, ``device``, ``dtype``) are those of
        :class:`~latentgp.models.inducing_ep.InducingEPClassifier`."""
        super().__init__(num_inducing, **inducing_kwargs)
        if scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {list(SCHEMES)}, got {scheme!r}")
        self.scheme = scheme
        self.damping = None if damping is None else check_damping(damping)
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
        self.prepare_training(X, y, seed=seed)
        return self

    def prepare_training(
        self, X: Any, y: Any, *, seed: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Validated inputs ``(N, D)`` and labels in {-1, +1} ``(N,)``; builds and
        initialises on first use (after ``torch.manual_seed(seed)``, in a private random
        state: :func:`latentgp.rng.seeded_scope`) and creates the N sites when needed."""
        with seeded_scope(seed, [self.device_]):
            return self._prepare_sites(X, y, seed)

    def training_state(self) -> dict[str, Any]:
        """What a checkpoint holds of the model: parameters, sites, running sums, counters."""
        return {
            "model": self.state_dict(),
            "sites": {k: getattr(self, k) for k in self._SITE_STATE},
            "counters": [self.site_updates_, self.skipped_updates_],
        }

    def load_training_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`training_state` returned."""
        self.load_state_dict(state["model"])
        for k, v in state["sites"].items():
            setattr(self, k, None if v is None else v.to(device=self.device_, dtype=self.dtype_))
        self.site_updates_, self.skipped_updates_ = (int(v) for v in state["counters"])

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

    def _batch_posterior(self, L, V, reduce: Any, nu=None, mu=None) -> WhitenedPosterior:
        nu = self.site_nu if nu is None else nu
        mu = self.site_mu if mu is None else mu
        LtAL, h = site_sums(V, nu, mu)
        both = reduce(torch.cat([LtAL.reshape(-1), h]))
        M = L.shape[0]
        return WhitenedPosterior(L, both[: M * M].reshape(M, M), both[M * M :])

    @torch.no_grad()
    def sweep(
        self,
        X: torch.Tensor,
        ypm: torch.Tensor,
        reduce: Any = None,
        rows: torch.Tensor | None = None,
    ):
        """One parallel, damped update of all sites of ``X`` (batch scheme, eqs. 14-25).

        ``rows``: ``X`` holds only these rows of the training data (this process's part in
        a data-parallel run whose every process stores all N sites); the new sites of all
        parts are then combined by ``reduce`` so that every process holds all of them.
        Returns ``(L, V, s, q)`` with ``q`` rebuilt from the new sites.
        """
        reduce = reduce or _ONE_PROCESS
        nu0 = self.site_nu if rows is None else self.site_nu[rows]
        mu0 = self.site_mu if rows is None else self.site_mu[rows]
        L = self.prior_factor()
        V, s = self._blocks(X, L)
        post = self._batch_posterior(L, V, reduce, nu0, mu0)
        cav = cavity_projection(post, V, V, nu0, mu0, same=True)
        nu_new, mu_new, _, ok = probit_site_update(ypm, cav["a"], cav["v"], s)
        ok = ok & cav["valid"]
        rho = self.rho
        nu1 = damp(nu_new, nu0, rho, ok)
        mu1 = damp(mu_new, mu0, rho, ok)
        if rows is None:
            self._count(ok)
            self.site_nu, self.site_mu = nu1, mu1
        else:
            self._share_sites(None, rows, nu1, mu1, None, ok, reduce)
        return L, V, s, self._batch_posterior(L, V, reduce, nu1, mu1)

    def sweep_evidence(
        self, X: torch.Tensor, ypm: torch.Tensor, reduce: Any = None
    ) -> tuple[float, torch.Tensor, torch.Tensor]:
        """One :meth:`sweep` of the sites of ``X`` ``(N, D)`` (labels ``ypm`` in {-1, +1})
        and the EP estimate ``log Z_q`` after it (summed over processes by ``reduce``);
        sets ``q`` and returns ``(log Z_q, mean (M,), covariance (M, M))``."""
        reduce = reduce or _ONE_PROCESS
        _, V, s, post = self.sweep(X, ypm, reduce)
        with torch.no_grad():
            _, lzt = self._site_terms(post, V, V, s, ypm, self.site_nu, self.site_mu, True)
            value = float(self._global_term(post) + reduce(lzt.sum()))
            T = post.sqrt_cov
        self._set_q(post.mean, T)
        return value, post.mean, T @ T.mT

    def _share_sites(self, targets, pos, nu, mu, upsilon, ok, reduce: Any, extra=None):
        """Write this process's new sites and receive everybody else's (data-parallel runs).

        ``targets``: the training rows being updated by all processes together (None: all
        N); ``pos``: the positions within ``targets`` of this process's ``nu, mu`` (and
        ``upsilon`` ``(|pos|, M)`` for the stochastic scheme, else None).  Each process
        contributes its rows (zeros elsewhere) to one summed message, so every process
        ends with the same sites and counters.  Returns the sum over processes of
        ``extra`` (None if not given).
        """
        T = self.site_nu.shape[0] if targets is None else targets.numel()
        M = self.num_inducing
        n_up = T * M if upsilon is not None else 0
        n_extra = 0 if extra is None else extra.numel()
        buf = self.site_nu.new_zeros(2 * T + n_up + 2 + n_extra)
        buf[pos] = nu
        buf[T + pos] = mu
        if upsilon is not None:
            buf[2 * T : 2 * T + n_up].view(T, M)[pos] = upsilon
        o = 2 * T + n_up
        buf[o] = ok.numel()
        buf[o + 1] = (~ok).sum()
        if extra is not None:
            buf[o + 2 :] = extra.reshape(-1)
        tot = reduce(buf)
        if targets is None:
            self.site_nu, self.site_mu = tot[:T].clone(), tot[T : 2 * T].clone()
        else:
            self.site_nu[targets] = tot[:T]
            self.site_mu[targets] = tot[T : 2 * T]
            if upsilon is not None:
                self.site_upsilon[targets] = tot[2 * T : o].view(T, M)
        self.site_updates_ += int(round(float(tot[o])))
        self.skipped_updates_ += int(round(float(tot[o + 1])))
        return None if extra is None else tot[o + 2 :].view_as(extra).clone()

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
        if X.shape[0] == 0:  # an empty part of a minibatch (data-parallel run)
            return prior_weight * prior
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
            post = self._batch_posterior(L, V, _ONE_PROCESS)
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
            post = self._batch_posterior(L, V, _ONE_PROCESS)
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
            return {"optimizer": "sign", "lr": 0.2, "batch_size": N}
        return {
            "optimizer": "adadelta",
            "lr": 1.0,
            "batch_size": min(N, self.num_inducing),
        }

    def _grad_step(self, F: torch.Tensor, opt, params, scale: float, reduce: Any) -> bool:
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

    def _batch_surrogate(
        self, X, ypm, post: WhitenedPosterior, prior_weight: float = 1.0, nu=None, mu=None
    ):
        """Batch-scheme ``F(xi)`` (same value and gradient as :meth:`_surrogate` with
        ``Po = V``) and, from the same forward pass, ``sum_i log Ztilde_i`` at ``xi``
        (``nu, mu``: the sites of the rows of ``X``; default all sites).

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
        if X.shape[0] == 0:  # an empty part (more processes than rows)
            return prior_weight * prior, prior.new_zeros(())
        V = solve_lower(L, self.kernel(self.Z, X))
        PV = P.mT @ V  # (M, N): T' upsilon_i(xi)
        c = V.mT @ p  # upsilon_i(xi)' mu
        c0, PV0 = c.detach(), PV.detach()
        d0 = PV0.square().sum(0)
        nu = self.site_nu if nu is None else nu
        mu = self.site_mu if mu is None else mu
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

    def batch_step(
        self,
        X: torch.Tensor,
        ypm: torch.Tensor,
        opt: torch.optim.Optimizer,
        params: list[torch.nn.Parameter],
        N_total: int,
        reduce: Any = None,
        rows: torch.Tensor | None = None,
    ) -> float:
        """Sweep + one hyperparameter step; returns the EP estimate ``log Z_q``.

        ``X`` ``(N, D)``, labels ``ypm`` in {-1, +1} ``(N,)``; ``opt`` steps ``params``
        on the gradient of ``-F / N_total`` (``N_total``: data points over all
        processes); ``reduce``: sums over processes
        (:class:`latentgp.training.distributed.Reducer`; None: one process).  ``rows``:
        this process's rows of ``X`` when every process holds all the data and all the
        sites (None: all of ``X``, which is then the whole data set or, with an explicit
        process group, this process's shard).  ``FloatingPointError`` for a non-finite
        gradient (nothing is stepped then).
        """
        reduce = reduce or _ONE_PROCESS
        Xp, yp = (X, ypm) if rows is None else (X[rows], ypm[rows])
        _, _, _, post = self.sweep(Xp, yp, reduce, rows)
        self._set_q(post.mean, post.sqrt_cov)
        nu = self.site_nu if rows is None else self.site_nu[rows]
        mu = self.site_mu if rows is None else self.site_mu[rows]
        F, lzt = self._batch_surrogate(Xp, yp, post, 1.0 / reduce.world, nu, mu)
        value = float(self._global_term(post) + reduce(lzt))
        if not self._grad_step(F, opt, params, 1.0 / N_total, reduce):
            raise FloatingPointError("non-finite gradient of the EP evidence")
        return value

    def stochastic_step(
        self,
        X: torch.Tensor,
        ypm: torch.Tensor,
        idx: torch.Tensor,
        opt: torch.optim.Optimizer,
        params: list[torch.nn.Parameter],
        N: int,
        reduce: Any = None,
    ) -> float:
        """Minibatch ``idx`` (B,) of ``X`` ``(N, D)``, ``ypm`` ``(N,)``: refine its sites
        against ``q`` from the running sums ``A, c``, then one step of ``opt`` on the
        stochastic gradient; returns the estimate of ``log Z_q``.  With a data-parallel
        ``reduce`` each process refines its part of the batch; the changes of ``A, c`` and
        the new sites are summed over processes, which is the one-process step exactly
        (the sites of a minibatch are updated in parallel against the same ``q``)."""
        reduce = reduce or _ONE_PROCESS
        B = idx.shape[0]
        W = reduce.world
        pos = torch.tensor_split(torch.arange(B, device=idx.device), W)[reduce.rank]
        sub = idx if W == 1 else idx[pos]
        with torch.no_grad():
            L = self.prior_factor()
            Xb, yb = X[sub], ypm[sub]
            V, s = self._blocks(Xb, L)
            post = WhitenedPosterior(L, L.mT @ self.A @ L, L.mT @ self.c)
            U_old = self.site_upsilon[sub].mT  # (M, b)
            nu_old, mu_old = self.site_nu[sub], self.site_mu[sub]
            cav = cavity_projection(post, V, L.mT @ U_old, nu_old, mu_old)
            nu_new, mu_new, _, ok = probit_site_update(yb, cav["a"], cav["v"], s)
            ok = ok & cav["valid"]
            nu_d = damp(nu_new, nu_old, self.rho, ok)
            mu_d = damp(mu_new, mu_old, self.rho, ok)
            U_new = torch.where(ok[None, :], solve_upper_t(L, V), U_old)
            dA = (U_new * nu_d) @ U_new.mT - (U_old * nu_old) @ U_old.mT
            dc = U_new @ mu_d - U_old @ mu_old
            if W == 1:
                self._count(ok)
                A = self.A + dA
                c = self.c + dc
                self.site_nu[idx], self.site_mu[idx] = nu_d, mu_d
                self.site_upsilon[idx] = U_new.mT
            else:
                M = dA.shape[0]
                both = self._share_sites(
                    idx, pos, nu_d, mu_d, U_new.mT, ok, reduce, torch.cat([dA.reshape(-1), dc])
                )
                A = self.A + both[: M * M].view(M, M)
                c = self.c + both[M * M :]
            self.A = 0.5 * (A + A.mT)
            self.c = c
            post = WhitenedPosterior(L, L.mT @ self.A @ L, L.mT @ self.c)
            Po = L.mT @ U_new
            cav, lzt = self._site_terms(post, V, Po, s, yb, nu_d, mu_d, False)
            value = float(self._global_term(post) + (N / B) * reduce(lzt.sum()))
        self._set_q(post.mean, post.sqrt_cov)
        F = self._surrogate(Xb, yb, post, Po, cav, N / B, prior_weight=1.0 / W)
        if not self._grad_step(F, opt, params, 1.0 / N, reduce):
            raise FloatingPointError("non-finite gradient of the EP evidence")
        return value

    @torch.no_grad()
    def finish_training(self, X: torch.Tensor, reduce: Any = None, rows=None) -> None:
        """Set ``q`` from the final sites (after the last hyperparameter step): from the
        sites of ``X`` (batch scheme; ``rows``: this process's rows) or from the running
        sums ``A, c`` (stochastic scheme)."""
        reduce = reduce or _ONE_PROCESS
        L = self.prior_factor()
        if self.scheme == "batch":
            Xp = X if rows is None else X[rows]
            nu = self.site_nu if rows is None else self.site_nu[rows]
            mu = self.site_mu if rows is None else self.site_mu[rows]
            V, _ = self._blocks(Xp, L)
            post = self._batch_posterior(L, V, reduce, nu, mu)
        else:
            post = WhitenedPosterior(L, L.mT @ self.A @ L, L.mT @ self.c)
        self._set_q(post.mean, post.sqrt_cov)

    _SITE_STATE = ("site_nu", "site_mu", "site_upsilon", "A", "c")

    def snapshot_training_state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """A copy of the parameters, buffers, sites and running sums (to restore after a
        failed step)."""
        sites = {
            k: (None if getattr(self, k) is None else getattr(self, k).clone())
            for k in self._SITE_STATE
        }
        return copy.deepcopy(self.state_dict()), sites

    def restore_training_state(self, snapshot: tuple[dict[str, Any], dict[str, Any]]) -> None:
        """Put back what :meth:`snapshot_training_state` returned."""
        state, sites = snapshot
        self.load_state_dict(state)
        for k, v in sites.items():
            setattr(self, k, None if v is None else v.clone())


#: names that lived here before the one fit, and where they are now
_MOVED = {
    "SignAdaptive": "latentgp.training.optim",
    "distributed_sweep": "latentgp.training.tasks",
}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        raise AttributeError(
            f"latentgp.models.sep.{name} moved to {_MOVED[name]}.{name} (models do not "
            "import the training layer)"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
