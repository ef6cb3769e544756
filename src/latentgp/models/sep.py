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
  sign-adaptive rule of the seed (per-parameter rate x1.02 / x0.5; the kernel's positive
  parameters in log coordinates, each step halved until ``log Z_q`` with the swept sites
  held does not drop: :meth:`SEP.fixed_site_evidence`, docs/design.md) or Adam/ADADELTA.
  Memory: the sites' ``nu, mu`` (2N numbers) and O(rows M) transient work for one chunk
  of rows at a time (:meth:`SEP.sweep_chunk_rows`); from an out-of-core source the
  inputs are read a chunk at a time and never all held.  With
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

from typing import Any

import numpy as np
import torch

from ..linalg import solve_lower, solve_upper_t
from ..rng import seeded_scope
from ..validation import check_positive_int, keyword_only_after_first
from .base import register_model
from .ep_sites import (
    ONE_PROCESS,
    WhitenedPosterior,
    add_sums,
    batch_surrogate,
    cavity_projection,
    damp,
    global_term,
    posterior_from_sums,
    probit_site_update,
    site_sums,
    site_terms,
    surrogate,
)
from .inducing_ep import LEGACY_ARGUMENT_TAIL, InducingEPClassifier, check_damping
from .sep_sites import SiteStore

SCHEMES = ("batch", "stochastic")


def stepped_parameters(opt: torch.optim.Optimizer) -> list[torch.nn.Parameter]:
    """The parameters ``opt`` steps, in its order (what the gradient is taken for)."""
    return [p for group in opt.param_groups for p in group["params"]]


@register_model
class SEP(SiteStore, InducingEPClassifier):
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
    adadelta, ``{"up": 1.05, "down": 0.5}`` for sign; sign also takes ``log_space``
    and ``backtrack``, both True by default, and ``max_halvings``).
    ``tol``: stop when the relative change of log Z_q per epoch stays below ``tol`` for
    3 epochs.  Hyperpriors (:meth:`set_prior`, none by default) make the fit MAP-II:
    ``log p(theta)`` is added to the step's gradient, to the energy the sign rule's
    backtracking checks and to ``history_.objective`` (as for GFITC).
    The loop is :func:`latentgp.training.loop.run_loop`: ``progress``,
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

    CONFIG_ATTRIBUTES = ("scheme", "damping")

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

    def set_bounds(self, name: str, lower: float | None = None, upper: float | None = None):
        """Refused: SEP's steps (sign rule with backtracking, or a torch optimiser) are
        not projected onto a box; put a prior on the hyperparameter instead."""
        raise ValueError(
            "SEP does not take hyperparameter bounds (its steps are not projected onto a "
            f"box); put a prior on {name!r} with set_prior instead"
        )

    @property
    def rho(self) -> float:
        if self.damping is not None:
            return self.damping
        return 0.5 if self.scheme == "batch" else 0.99

    # ---------------------------------------------------------------------- sites --
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

    def prepare_source(self, source: Any, *, seed: int | None = None) -> tuple[Any, torch.Tensor]:
        """:meth:`prepare_training` for an out-of-core source
        (``latentgp.datasets.ShardedArrays``, ``CSVSource``): builds and initialises on
        first use from the seeded sample of :func:`~latentgp.models.base.init_sample`
        (at most 20,000 rows: the sample an in-memory fit initialises from too, so that
        both are the same fit), reads and checks the labels a chunk at a time
        (:meth:`sweep_chunk_rows`), and creates the N sites.  Returns a lazy view of the
        inputs ``(N, D)`` (rows are read when indexed, never all at once) and the labels
        in {-1, +1} ``(N,)``."""
        N = self.check_source(source)
        with seeded_scope(seed, [self.device_]):
            self._init_from_source(source, seed)
        ys = []
        step = self.sweep_chunk_rows()
        for a in range(0, N, step):
            _, yc = source.rows(np.arange(a, min(N, a + step)))
            ys.append(self._check_y(yc, len(yc)))
        ypm = 2.0 * torch.cat(ys) - 1.0
        self._ensure_sites(N)
        return source.lazy_arrays(self.dtype_, self.device_)[0], ypm

    def _prepare_sites(self, X: Any, y: Any, seed: int | None = None):
        """Validated inputs ``(N, D)`` and labels in {-1, +1} ``(N,)``; sites exist for N."""
        Xt, ypm = self._prepare(X, y, seed)
        self._ensure_sites(Xt.shape[0])
        return Xt, ypm

    #: Rows per chunk of the batch scheme's passes over the data (None: the one chunk
    #: size rule, :meth:`sweep_chunk_rows`).  The ``(M, rows)`` blocks and the
    #: surrogate's autograd graph exist for one chunk at a time, so a sweep's memory is
    #: the O(N) sites plus O(rows M), whatever N; from an out-of-core source the rows
    #: are read a chunk at a time and never all held.  An in-memory fit chunks alike,
    #: so both are equal exactly; sums over chunks equal one pass up to round-off.
    chunk_rows: int | None = None

    def sweep_chunk_rows(self) -> int:
        """Rows per chunk of a sweep: :attr:`chunk_rows` when set, else the prediction
        chunk of :func:`latentgp.models.predict.rows_per_chunk` (``config.chunk_size``
        if set, else about 2^20 entries of the ``(rows, M)`` block, clipped to
        [256, 65536] rows)."""
        if self.chunk_rows is not None:
            check_positive_int(self.chunk_rows, "chunk_rows")
        return self.prediction_chunk_rows(self.chunk_rows)

    def _chunks(self, X: Any, rows: torch.Tensor | None):
        """The site positions of consecutive chunks of the rows of ``X``: slices, or
        pieces of ``rows`` when only these are used (at least one chunk, maybe empty)."""
        step, n = self.sweep_chunk_rows(), X.shape[0] if rows is None else rows.numel()
        for a in range(0, max(n, 1), step):
            yield slice(a, a + step) if rows is None else rows[a : a + step]

    def _blocks(self, X: torch.Tensor, L: torch.Tensor):
        """``V = L^{-1} K_zx`` (M, B) and the FITC variances ``s`` (B,)."""
        V = solve_lower(L, self.kernel(self.Z, X))
        s = (self.kernel.diag(X) - V.square().sum(0)).clamp_min(0.0)
        return V, s

    def _site_posterior(self, L, X, rows, reduce: Any) -> WhitenedPosterior:
        """q from the current sites of the rows of ``X`` (``rows``: only these), their
        sums taken chunk by chunk (:attr:`chunk_rows`) and over processes."""
        sums = None
        for sel in self._chunks(X, rows):
            V, _ = self._blocks(X[sel], L)
            sums = add_sums(sums, site_sums(V, self.site_nu[sel], self.site_mu[sel]))
        return posterior_from_sums(L, sums, reduce)

    @torch.no_grad()
    def sweep(
        self,
        X: Any,
        ypm: torch.Tensor,
        reduce: Any = None,
        rows: torch.Tensor | None = None,
    ) -> WhitenedPosterior:
        """One parallel, damped update of all sites of ``X`` (batch scheme, eqs. 14-25).

        ``X`` ``(N, D)``: a tensor or a lazy view of a source's rows (read
        :meth:`sweep_chunk_rows` at a time).  ``rows``: update only these rows (this process's
        part in a data-parallel run whose every process stores all N sites); the new
        sites of all parts are then combined by ``reduce`` so that every process holds
        all of them.  Returns ``q`` (:class:`~.ep_sites.WhitenedPosterior`) rebuilt from
        the new sites.
        """
        reduce = reduce or ONE_PROCESS
        L = self.prior_factor()
        post = self._site_posterior(L, X, rows, reduce)
        nu0, mu0, rho = self.site_nu, self.site_mu, self.rho
        new, sums = [], None
        for sel in self._chunks(X, rows):
            V, s = self._blocks(X[sel], L)
            cav = cavity_projection(post, V, V, nu0[sel], mu0[sel], same=True)
            nu_new, mu_new, _, ok = probit_site_update(ypm[sel], cav["a"], cav["v"], s)
            ok = ok & cav["valid"]
            nu1, mu1 = damp(nu_new, nu0[sel], rho, ok), damp(mu_new, mu0[sel], rho, ok)
            sums = add_sums(sums, site_sums(V, nu1, mu1))
            new.append((nu1, mu1, ok))
        nu1, mu1, ok = (torch.cat(t) for t in zip(*new, strict=True))
        if rows is None:
            self._count(ok)
            self.site_nu, self.site_mu = nu1, mu1
        else:
            self._share_sites(None, rows, nu1, mu1, None, ok, reduce)
        return posterior_from_sums(L, sums, reduce)

    def sweep_evidence(
        self, X: Any, ypm: torch.Tensor, reduce: Any = None
    ) -> tuple[float, torch.Tensor, torch.Tensor]:
        """One :meth:`sweep` of the sites of ``X`` ``(N, D)`` (labels ``ypm`` in {-1, +1})
        and the EP estimate ``log Z_q`` after it (summed over processes by ``reduce``);
        sets ``q`` and returns ``(log Z_q, mean (M,), covariance (M, M))``."""
        reduce = reduce or ONE_PROCESS
        post = self.sweep(X, ypm, reduce)
        with torch.no_grad():
            value = float(global_term(post) + reduce(self._site_term_sum(post, X, ypm)))
            T = post.sqrt_cov
        self._set_q(post.mean, T)
        return value, post.mean, T @ T.mT

    # ------------------------------------------------------------------- evidence --
    def _site_term_sum(self, post: WhitenedPosterior, X: Any, ypm: torch.Tensor, rows=None):
        """``sum_i log Ztilde_i`` of the current sites of the rows of ``X`` (``rows``: only
        these), by chunks."""
        total = None
        for sel in self._chunks(X, rows):
            V, s = self._blocks(X[sel], post.L)
            nu, mu = self.site_nu[sel], self.site_mu[sel]
            lzt = site_terms(post, V, V, s, ypm[sel], nu, mu, True)[1].sum()
            total = lzt if total is None else total + lzt
        return total

    def _kernel_blocks(self, X: torch.Tensor, L: torch.Tensor):
        """``K_zx`` ``(M, B)`` and ``diag K_xx`` ``(B,)`` with autograd (empty for no rows)."""
        if X.shape[0] == 0:  # an empty part (more processes than rows)
            return L.new_zeros(L.shape[0], 0), L.new_zeros(0)
        return self.kernel(self.Z, X), self.kernel.diag(X)

    def _evidence_posterior(self, X: Any, y: Any):
        """Checked ``X``, labels in {-1, +1} and ``q`` of the current sites of ``X``."""
        self._require_built()
        Xt, ypm = self._prepare(X, y, None)
        self._check_sites(Xt.shape[0])
        with torch.no_grad():
            post = self._site_posterior(self.prior_factor(), Xt, None, ONE_PROCESS)
        return Xt, ypm, post

    @torch.no_grad()
    def fixed_site_evidence(
        self, X: Any, ypm: torch.Tensor, reduce: Any = None, rows: torch.Tensor | None = None
    ) -> float:
        """``log Z_q`` at the current hyperparameters with the sites held as they are (the
        EP energy that a batch-scheme hyperparameter step is checked against), summed
        over processes by ``reduce``; ``X``, ``ypm``, ``rows`` as in :meth:`batch_step`."""
        reduce = reduce or ONE_PROCESS
        post = self._site_posterior(self.prior_factor(), X, rows, reduce)
        return float(global_term(post) + reduce(self._site_term_sum(post, X, ypm, rows)))

    def log_evidence(self, X: Any, y: Any) -> float:
        """The EP estimate ``log Z_q`` (eq. 28, corrected eq. 29) for the current sites and
        hyperparameters, using all of ``X`` (O(N M^2)); sites must belong to ``X``."""
        Xt, ypm, post = self._evidence_posterior(X, y)
        with torch.no_grad():
            return float(global_term(post) + self._site_term_sum(post, Xt, ypm))

    def log_evidence_grad(self, X: Any, y: Any) -> dict[str, torch.Tensor]:
        """Gradient of ``log Z_q`` w.r.t. every trainable parameter by eq. 4 (sites fixed;
        exact at an EP fixed point).  Returns ``{name: grad}``."""
        Xt, ypm, post = self._evidence_posterior(X, y)
        named = [(n, p) for n, p in self.named_parameters() if p.requires_grad]
        grads, _ = self._surrogate_grads(Xt, ypm, post, None, [p for _, p in named], 1.0, -1.0)
        return {n: g for (n, _), g in zip(named, grads, strict=True)}

    def converge_sites(self, X: Any, y: Any, max_sweeps: int = 500, tol: float = 1e-10) -> int:
        """Run parallel damped EP sweeps at fixed hyperparameters until the largest site
        change is below ``tol``; returns the number of sweeps."""
        Xt, ypm = self._prepare_sites(X, y)
        self._check_sites(Xt.shape[0])
        for it in range(1, max_sweeps + 1):  # noqa: B007 - returned below
            old_nu, old_mu = self.site_nu.clone(), self.site_mu.clone()
            post = self.sweep(Xt, ypm)
            change = max(
                float((self.site_nu - old_nu).abs().max()),
                float((self.site_mu - old_mu).abs().max()),
            )
            if change < tol:
                break
        self._set_q(post.mean, post.sqrt_cov)
        return it

    # ------------------------------------------------------------------ training --
    def _default_fit_args(self, N: int) -> dict[str, Any]:
        if self.scheme == "batch":
            return {"optimizer": "sign", "lr": 0.2, "batch_size": N}
        return {
            "optimizer": "adadelta",
            "lr": 1.0,
            "batch_size": min(N, self.num_inducing),
        }

    @staticmethod
    def _grads(F: torch.Tensor, params, scale: float) -> list[torch.Tensor]:
        """The gradient of ``-F * scale`` w.r.t. ``params`` (zeros where unused)."""
        grads = torch.autograd.grad(-F * scale, params, allow_unused=True)
        return [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads, strict=True)]

    def _surrogate_grads(self, X, ypm, post, rows, params, prior_weight: float, scale: float):
        """:meth:`_grads` of the batch-scheme ``F`` of the rows of ``X`` (``rows``: only
        these) and ``sum_i log Ztilde_i`` of their sites, accumulated chunk by chunk: one
        chunk's autograd graph at a time.  The prior term enters with the first chunk."""
        grads = lzt = None
        for sel in self._chunks(X, rows):
            L = self.prior_factor()
            Kzx, kxx = self._kernel_blocks(X[sel], L)
            nu, mu = self.site_nu[sel], self.site_mu[sel]
            weight = prior_weight if lzt is None else 0.0
            F, part = batch_surrogate(post, L, Kzx, kxx, ypm[sel], nu, mu, weight)
            g = self._grads(F, params, scale)
            grads = g if grads is None else [a + b for a, b in zip(grads, g, strict=True)]
            lzt = part if lzt is None else lzt + part
        return grads, lzt

    def _with_prior(self, grads, params, scale: float) -> tuple[list[torch.Tensor], float]:
        """``grads`` plus the gradient of ``-log p(theta) * scale`` (the hyperpriors set
        with :meth:`set_prior`; ``scale`` includes ``1 / processes``, as the gradients
        are summed over processes) and the value of ``log p(theta)`` (0.0 without any)."""
        lp = self.log_prior()
        if not lp.requires_grad:
            return grads, float(lp)
        extra = self._grads(lp, params, scale)
        return [a + b for a, b in zip(grads, extra, strict=True)], float(lp.detach())

    def _apply_grads(self, grads, opt, params, reduce: Any, closure=None) -> bool:
        """Sum ``grads`` over processes and step ``opt`` (with ``closure`` when given);
        False (no step) if not finite."""
        ok = True
        for p, g in zip(params, grads, strict=True):
            g = reduce(g)
            ok = ok and bool(torch.isfinite(g).all())
            p.grad = g
        if ok:
            opt.step() if closure is None else opt.step(closure)
        return ok

    def batch_step(
        self,
        X: torch.Tensor,
        ypm: torch.Tensor,
        opt: torch.optim.Optimizer,
        N_total: int,
        reduce: Any = None,
        rows: torch.Tensor | None = None,
        *,
        backtrack: bool = False,
    ) -> float:
        """Sweep + one hyperparameter step; returns the EP estimate ``log Z_q``.

        ``X`` ``(N, D)`` (a tensor or a lazy view of a source's rows: the sweep and the
        gradient read :meth:`sweep_chunk_rows` rows at a time), labels ``ypm`` in {-1, +1}
        ``(N,)``; ``opt`` steps the parameters it was made for
        on the gradient of ``-F / N_total`` (``N_total``: data points over all
        processes); ``reduce``: sums over processes
        (:class:`latentgp.training.distributed.Reducer`; None: one process).  ``rows``:
        this process's rows of ``X`` when every process holds all the data and all the
        sites (None: all of ``X``, which is then the whole data set or, with an explicit
        process group, this process's shard).  ``backtrack``: step with
        ``opt.step(closure)``, the closure returning ``-log Z_q / N_total`` with the swept
        sites held (:meth:`fixed_site_evidence`; its first call, at the parameters of the
        sweep, returns the value already known), for an optimiser that checks its step
        against it (:class:`latentgp.training.optim.SignAdaptive`).
        ``FloatingPointError`` for a non-finite gradient (nothing is stepped then).
        """
        reduce = reduce or ONE_PROCESS
        params = stepped_parameters(opt)
        post = self.sweep(X, ypm, reduce, rows)
        self._set_q(post.mean, post.sqrt_cov)
        grads, lzt = self._surrogate_grads(
            X, ypm, post, rows, params, 1.0 / reduce.world, 1.0 / N_total
        )
        grads, log_prior = self._with_prior(grads, params, 1.0 / (N_total * reduce.world))
        value = float(global_term(post) + reduce(lzt)) + log_prior
        known = [value]

        def closure() -> float:
            if known:
                return -known.pop() / N_total
            v = self.fixed_site_evidence(X, ypm, reduce, rows) + float(self.log_prior())
            return -v / N_total

        if not self._apply_grads(grads, opt, params, reduce, closure if backtrack else None):
            raise FloatingPointError("non-finite gradient of the EP evidence")
        return value

    def stochastic_step(
        self,
        X: torch.Tensor,
        ypm: torch.Tensor,
        idx: torch.Tensor,
        opt: torch.optim.Optimizer,
        N: int,
        reduce: Any = None,
    ) -> float:
        """Minibatch ``idx`` (B,) of ``X`` ``(N, D)``, ``ypm`` ``(N,)``: refine its sites
        against ``q`` from the running sums ``A, c``, then one step of ``opt`` on the
        stochastic gradient; returns the estimate of ``log Z_q``.  With a data-parallel
        ``reduce`` each process refines its part of the batch; the changes of ``A, c`` and
        the new sites are summed over processes, which is the one-process step exactly
        (the sites of a minibatch are updated in parallel against the same ``q``)."""
        reduce = reduce or ONE_PROCESS
        params = stepped_parameters(opt)
        B = idx.shape[0]
        W = reduce.world
        pos = torch.tensor_split(torch.arange(B, device=idx.device), W)[reduce.rank]
        sub = idx if W == 1 else idx[pos]
        with torch.no_grad():
            L = self.prior_factor()
            Xb, yb = X[sub], ypm[sub]
            V, s = self._blocks(Xb, L)
            post = self._running_posterior(L)
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
            post = self._running_posterior(L)
            Po = L.mT @ U_new
            cav, lzt = site_terms(post, V, Po, s, yb, nu_d, mu_d, False)
            value = float(global_term(post) + (N / B) * reduce(lzt.sum()))
        self._set_q(post.mean, post.sqrt_cov)
        L = self.prior_factor()
        Kzx, kxx = self._kernel_blocks(Xb, L)
        F = surrogate(post, L, Kzx, kxx, yb, Po, cav, N / B, prior_weight=1.0 / W)
        grads, log_prior = self._with_prior(self._grads(F, params, 1.0 / N), params, 1.0 / (N * W))
        if not self._apply_grads(grads, opt, params, reduce):
            raise FloatingPointError("non-finite gradient of the EP evidence")
        return value + log_prior

    def _running_posterior(self, L: torch.Tensor) -> WhitenedPosterior:
        """q from the running sums ``A, c`` (stochastic scheme)."""
        return WhitenedPosterior(L, L.mT @ self.A @ L, L.mT @ self.c)

    @torch.no_grad()
    def finish_training(self, X: Any, reduce: Any = None, rows=None) -> None:
        """Set ``q`` from the final sites (after the last hyperparameter step): from the
        sites of ``X`` (batch scheme; ``rows``: this process's rows) or from the running
        sums ``A, c`` (stochastic scheme)."""
        reduce = reduce or ONE_PROCESS
        L = self.prior_factor()
        if self.scheme == "batch":
            post = self._site_posterior(L, X, rows, reduce)
        else:
            post = self._running_posterior(L)
        self._set_q(post.mean, post.sqrt_cov)


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
