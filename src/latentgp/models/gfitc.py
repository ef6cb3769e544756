"""Generalised FITC with EP (Naish-Guzman & Holden 2008): the GFITC baseline of seed 002.

The inducing values are marginalised, giving the FITC prior
``p(f) = N(0, Q_ff + D0)``, ``Q_ff = V'V``, ``V = L^{-1} K_zx``, ``D0 = diag(K_ff - Q_ff)``,
and EP approximates every ``Phi(y_i f_i)`` by a site ``exp(-tau_i f_i^2 / 2 + nu_i f_i)``.
With ``T = diag(tau)``, ``w = tau / (1 + tau D0)``, ``g = 1 / (1 + tau D0)`` and
``B = I + V diag(w) V' = R R'`` (M x M), the posterior ``Sigma = (K_fitc^{-1} + T)^{-1}`` has::

    Sigma = diag(D0 g) + diag(g) V' B^{-1} V diag(g),     mu = Sigma nu

so a parallel EP sweep costs O(N M^2).  The EP evidence::

    log Z_EP = sum_i [log Z_i + log(1 + tau_i v_i)/2 + a_i^2/(2 v_i) - mu_i^2/(2 sigma_i^2)]
               - [sum_i log(1 + tau_i D0_i) + log|B|]/2 + nu' mu / 2

(cavity ``N(a_i, v_i)``, posterior marginal ``N(mu_i, sigma_i^2)``) is not a sum over data
points, so GFITC trains full-batch only.  As in the seed, EP is run to convergence
(warm-started from the previous sites) before every evaluation of the evidence; its gradient
at convergence is that of ``nu' Sigma(xi) nu / 2 - log|I + T^{1/2} K_fitc(xi) T^{1/2}| / 2``
with the sites fixed (Rasmussen & Williams eq. 5.27), which :meth:`GFITC.objective`
returns (value: ``log Z_EP``) to the shared training loop; L-BFGS by default (the seed used
L-BFGS-B).  Prediction projects the sites onto the inducing values:
``q(fbar) = N(mu, Sigma)`` with ``Sigma^{-1} = K^{-1} + sum_i w_i upsilon_i upsilon_i'`` and
``Sigma^{-1} mu = sum_i g_i nu_i upsilon_i``, then the same predictive as SEP.
"""

from __future__ import annotations

from typing import Any

import torch

from ..linalg import solve_lower
from ..validation import keyword_only_after_first
from .base import register_model
from .ep_sites import WhitenedPosterior, damp, probit_site_update, probit_tilted
from .inducing_ep import LEGACY_ARGUMENT_TAIL, InducingEPClassifier, check_damping


@register_model
class GFITC(InducingEPClassifier):
    """GFITC-EP binary probit classifier (full batch, EP to convergence per evaluation).

    Parameters: as :class:`~latentgp.SEP` (``num_inducing``, ``kernel``, ``Z``,
    ``learn_inducing``, ``inducing_init``) plus ``damping`` (0.5), ``ep_tol`` (largest site
    change that counts as converged) and ``max_sweeps`` per evaluation.
    Attributes: ``site_tau``, ``site_nu`` (N,), ``skipped_updates_``, ``ep_sweeps_`` (total).
    """

    default_optimizer = "lbfgs"
    default_lr = 1.0
    supports_minibatch = False  # the EP evidence is not a sum over data points
    CONFIG_ATTRIBUTES = ("damping", "ep_tol", "max_sweeps")

    @keyword_only_after_first(
        legacy=("kernel", "Z", "damping", "ep_tol", "max_sweeps", *LEGACY_ARGUMENT_TAIL)
    )
    def __init__(
        self,
        num_inducing: int = 50,
        *,
        damping: float = 0.5,
        ep_tol: float = 1e-6,
        max_sweeps: int = 200,
        **inducing_kwargs: Any,
    ) -> None:
        """Other keywords (``kernel``, ``Z``, ``learn_inducing``, ``inducing_init``,
        ``likelihood``, ``normalize_y``, ``device``, ``dtype``) are those of
        :class:`~latentgp.models.inducing_ep.InducingEPClassifier`."""
        super().__init__(num_inducing, **inducing_kwargs)
        self.damping = check_damping(damping)
        self.ep_tol, self.max_sweeps = float(ep_tol), int(max_sweeps)
        self.site_tau: torch.Tensor | None = None
        self.site_nu: torch.Tensor | None = None
        self.skipped_updates_ = 0
        self.ep_sweeps_ = 0

    def _default_fit_args(self, N: int) -> dict[str, Any]:
        return {"optimizer": "lbfgs", "lr": 1.0, "batch_size": N}

    def fit(self, X, y, *, batch_size=None, **kwargs) -> GFITC:
        """Fit with the shared loop (full batch; see :meth:`GPModel.fit`)."""
        Xt = self._check_X(X)
        if batch_size is not None and batch_size != Xt.shape[0]:
            raise ValueError(
                "GFITC's EP evidence is not a sum over data points: it trains full-batch "
                "only (use SEP(scheme='stochastic') for minibatches)"
            )
        return super().fit(X, y, batch_size=batch_size, **kwargs)

    def complete_fit(self, X: torch.Tensor, y: torch.Tensor) -> None:
        """The end of a fit: EP run to convergence at the final hyperparameters."""
        self.converge(X, y)

    # ------------------------------------------------------------------------- EP --
    def _posterior(self, V, d0, tau, nu):
        """Marginals ``mu, sigma^2`` (N,), the whitened q over fbar, ``g`` and ``log|B|``."""
        g = 1.0 / (1.0 + tau * d0)
        w = tau * g
        L = torch.eye(V.shape[0], dtype=V.dtype, device=V.device)
        post = WhitenedPosterior(L, (V * w) @ V.mT, V @ (g * nu))
        W = post.solve_R(V)  # (M, N)
        sigma2 = d0 * g + g.square() * W.square().sum(0)
        mean = d0 * g * nu + g * (W.mT @ (W @ (g * nu)))
        return mean, sigma2, post, g

    def _blocks(self, X, L):
        V = solve_lower(L, self.kernel(self.Z, X))
        d0 = (self.kernel.diag(X) - V.square().sum(0)).clamp_min(0.0)
        return V, d0

    @torch.no_grad()
    def run_ep(self, X: torch.Tensor, ypm: torch.Tensor) -> tuple[float, int]:
        """Parallel damped EP to convergence at the current hyperparameters (warm start).

        Returns ``(log Z_EP, sweeps)`` and sets ``q`` for prediction.
        """
        N = X.shape[0]
        if self.site_tau is None or self.site_tau.shape[0] != N:
            self.site_tau = torch.zeros(N, dtype=self.dtype_, device=self.device_)
            self.site_nu = torch.zeros(N, dtype=self.dtype_, device=self.device_)
        L = self.prior_factor()
        V, d0 = self._blocks(X, L)
        sweeps = 0
        for sweeps in range(1, self.max_sweeps + 1):  # noqa: B007 - EP iterations, not data
            mean, sigma2, _, _ = self._posterior(V, d0, self.site_tau, self.site_nu)
            tau_c = 1.0 / sigma2 - self.site_tau
            valid = tau_c > 0
            tau_c_safe = torch.where(valid, tau_c, torch.ones_like(tau_c))
            v = torch.where(valid, 1.0 / tau_c_safe, -torch.ones_like(tau_c))
            a = (mean / sigma2 - self.site_nu) / tau_c_safe
            tau_new, nu_new, _, ok = probit_site_update(ypm, a, v, torch.zeros_like(a))
            ok = ok & valid
            self.skipped_updates_ += int((~ok).sum())
            new_tau = damp(tau_new, self.site_tau, self.damping, ok)
            new_nu = damp(nu_new, self.site_nu, self.damping, ok)
            change = max(
                float((new_tau - self.site_tau).abs().max()),
                float((new_nu - self.site_nu).abs().max()),
            )
            self.site_tau, self.site_nu = new_tau, new_nu
            if change < self.ep_tol:
                break
        self.ep_sweeps_ += sweeps
        value = self._log_evidence(V, d0, ypm)
        _, _, post, _ = self._posterior(V, d0, self.site_tau, self.site_nu)
        W = solve_lower(post.R, L.mT)  # q over fbar: Sigma = L B^{-1} L', mu = L m_w
        self._set_q(L @ post.m_w, W.mT)
        return float(value), sweeps

    def _log_evidence(self, V, d0, ypm) -> torch.Tensor:
        tau, nu = self.site_tau, self.site_nu
        mean, sigma2, post, _ = self._posterior(V, d0, tau, nu)
        tau_c = 1.0 / sigma2 - tau
        v = 1.0 / tau_c
        a = (mean / sigma2 - nu) * v
        log_z, _, _ = probit_tilted(ypm, a, 1.0 + v)
        per_site = (
            log_z + 0.5 * torch.log1p(tau * v) + 0.5 * a.square() / v - 0.5 * mean.square() / sigma2
        )
        return (
            per_site.sum()
            - 0.5 * (torch.log1p(tau * d0).sum() + post.log_det_B())
            + 0.5 * (nu * mean).sum()
        )

    def converge(self, X: Any, y: Any) -> float:
        """Run EP to convergence on the training data at the current hyperparameters and
        return ``log Z_EP`` (sets the predictive ``q``)."""
        Xt, ypm = self._prepare(X, y, None)
        return self.run_ep(Xt, ypm)[0]

    def log_evidence(self, X: Any, y: Any) -> float:
        """``log Z_EP`` after running EP to convergence (alias of :meth:`converge`)."""
        return self.converge(X, y)

    def objective(self, X, y, num_data):
        """EP evidence (value) with the gradient of eq. 5.27 of R&W (sites fixed)."""
        ypm = 2.0 * y - 1.0
        value, _ = self.run_ep(X, ypm)
        tau, nu = self.site_tau, self.site_nu
        L = self.prior_factor()
        V, d0 = self._blocks(X, L)
        g = 1.0 / (1.0 + tau * d0)
        Bmat = torch.eye(V.shape[0], dtype=V.dtype, device=V.device) + (V * (tau * g)) @ V.mT
        R = torch.linalg.cholesky(Bmat)
        W = solve_lower(R, V @ (g * nu)[:, None])
        quad = (d0 * g * nu.square()).sum() + W.square().sum()
        F = 0.5 * quad - 0.5 * torch.log1p(tau * d0).sum() - R.diagonal().log().sum()
        return F - F.detach() + value
