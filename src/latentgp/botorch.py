"""Fitted latentgp models as BoTorch models (the optional extra ``latentgp[bo]``).

:class:`LatentGPModel` wraps a fitted model with a Gaussian (or Gaussian-approximate)
predictive so that BoTorch's acquisition functions and ``optimize_acqf`` use it::

    model = lg.ExactGP().fit(X, y)
    acqf = qLogNoisyExpectedImprovement(LatentGPModel(model), X_baseline=X)
    candidate, value = optimize_acqf(acqf, bounds=bounds, q=2, num_restarts=8, raw_samples=256)

What the posterior over ``q`` points is, per family (all in the targets' units):

* ExactGP, SparseGP, SVGP (and SEP, GFITC: models with a joint Gaussian predictive,
  :meth:`~latentgp.models.base.GPModel.predict_f_joint`): the joint Gaussian of the
  latent function(s); ``observation_noise=True`` adds the Gaussian likelihood's variance.
  Non-Gaussian likelihoods (an SVGP, SEP or GFITC classifier) give the latent ``f`` and
  have no observation noise to add.
* SHGP (``y = exp(w) f + eps``): the Gaussian with the exact joint mean and covariance of
  ``h = exp(w) f`` under q (log-normal moments,
  :meth:`~latentgp.likelihoods.ScaleModulatedGaussian.joint_moments`), and
  ``observation_noise=True`` adds the input-dependent noise ``E[c exp(2 w(x))]``; the
  marginals therefore match ``SHGP.predict_y``'s mean and variance.
* SAVIGP: its predictive is a mixture over the q(u) components; the posterior is the
  moment-matched Gaussian (the mixture's exact joint mean and covariance,
  :func:`~latentgp.mixtures.mixture_joint_moments`), not the mixture.
* BatchedExactGP (B independent exact GPs): a model of ``batch_shape`` ``(B,)``; inputs
  ``(..., B, q, d)`` give member b's joint Gaussian at its own ``q`` points, and
  ``observation_noise=True`` adds member b's noise.
* SMGP, SLGP, SVHGP (mixtures of experts or of latent inputs) and QSGP are refused with a
  ``TypeError``.

``condition_on_observations`` (and so ``fantasize`` and ``qKnowledgeGradient``): for
un-batched observations the result wraps the model's own ``condition_on`` where it has one:
:meth:`~latentgp.ExactGP.condition_on` (a rank-k update of the Cholesky factor),
:meth:`~latentgp.SparseGP.condition_on` (the new points' statistics added) and
:meth:`~latentgp.SVGP.condition_on` (Gaussian likelihood, full q(u): the online
variational conditioning of Maddox et al. 2021).  Otherwise (batched fantasies, or the
other families) the wrapped posterior's joint Gaussian is conditioned on the observations
with their Gaussian noise (:class:`ConditionedModel`): exact for ExactGP (the same
posterior as ``condition_on``), and for the approximate models a conditioning of their
Gaussian predictive, not a new variational fit.  The wrapped model is never changed.

:func:`default_model` is latentgp's Bayesian-optimisation default: an ExactGP set up as
BoTorch's own ``SingleTaskGP`` is (see its docstring), fitted and wrapped.
"""

from __future__ import annotations

import math
from typing import Any

import torch

try:
    from botorch.models.gpytorch import GPyTorchModel
    from botorch.models.model import FantasizeMixin, Model
    from botorch.posteriors.gpytorch import GPyTorchPosterior
    from gpytorch.distributions import MultitaskMultivariateNormal, MultivariateNormal
    from gpytorch.priors import LogNormalPrior as GPyTorchLogNormal
    from linear_operator import to_linear_operator
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError(
        "latentgp.botorch needs BoTorch: pip install 'latentgp[bo]'"
    ) from err

from .kernels import RBF
from .likelihoods import Gaussian, ScaleModulatedGaussian
from .linalg import cholesky, solve_lower
from .mixtures import mixture_joint_moments
from .models import SAVIGP, SVGP, BatchedExactGP, ExactGP, GPModel, SparseGP
from .models.hyperpriors import Hyperparameter, hyperparameter_names
from .models.modulated.base import MixturePredictive
from .priors import LogNormal
from .variational import cached_conditional

__all__ = ["ConditionedModel", "LatentGPModel", "default_model", "fit_map_lbfgsb"]

#: noise floor and smallest lengthscale of :func:`default_model` (BoTorch 0.18's
#: ``MIN_INFERRED_NOISE_LEVEL`` and its lengthscale constraint)
MIN_NOISE, MIN_LENGTHSCALE = 1e-4, 0.025


def fit_map_lbfgsb(model: ExactGP, X: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
    """Fit ``model``'s trainable hyperparameters as BoTorch's ``fit_gpytorch_mll`` fits a
    ``SingleTaskGP`` (its first attempt): scipy's L-BFGS-B with its default options on the
    hyperparameters' *values* (lengthscales, noise variance, constant mean: BoTorch's
    constraints on a ``SingleTaskGP`` have no transform, so its optimiser sees values,
    not softplus raw parameters), within the model's bounds, minimising
    ``-(log p(y) + log prior) / N`` (the standardised targets' evidence, as BoTorch's
    ``ExactMarginalLogLikelihood``), from the model's current values.

    ``X`` ``(N, D)``, ``y`` ``(N,)`` in the targets' units; the model must be initialised
    on them (:meth:`~latentgp.models.base.GPModel.initialize`).  Returns scipy's
    ``success``, ``status``, ``message``, ``nit``, ``nfev`` and the final objective
    ``fun``.  A run that stops abnormally (``success`` False) keeps its last point;
    BoTorch would warn and restart from hyperparameters drawn from the priors.
    """
    from scipy.optimize import minimize

    if not model.built:
        raise ValueError("fit_map_lbfgsb needs a model initialised on the data "
                         "(model.initialize(X, y))")
    ys = model.scale_targets(y)
    N = X.shape[0]
    hypers = [Hyperparameter(model, n) for n in hyperparameter_names(model)]
    hypers = [h for h in hypers if h.raw.requires_grad]
    raws = {id(h.raw) for h in hypers}
    plain = [p for p in model.parameters() if p.requires_grad and id(p) not in raws]
    values = [h.value().detach().reshape(-1) for h in hypers] + [p.detach().reshape(-1)
                                                                 for p in plain]
    sizes = [v.numel() for v in values]
    bounds: list[tuple[float | None, float | None]] = []
    for h in hypers:  # one (lower, upper) pair per entry, None for an open side
        lo, hi = model.bounds.get(h.name, (-math.inf, math.inf))
        pair = (lo if math.isfinite(lo) else None, hi if math.isfinite(hi) else None)
        bounds += [pair] * h.value().numel()
    bounds += [(None, None)] * sum(p.numel() for p in plain)
    x0 = torch.cat(values).cpu().numpy()

    def assign(x) -> None:
        parts = torch.as_tensor(x, dtype=model.dtype_, device=model.device_).split(sizes)
        with torch.no_grad():
            for h, v in zip(hypers, parts, strict=False):  # the properties' own setters
                setattr(h.module, h.prop, v.reshape(h.value().shape))
            for p, v in zip(plain, parts[len(hypers):], strict=True):
                p.copy_(v.reshape(p.shape))

    def loss_and_grad(x):
        assign(x)
        loss = -(model.objective(X, ys, N) + model.log_prior()) / N
        leaves = [h.raw for h in hypers] + plain
        grads = list(torch.autograd.grad(loss, leaves))
        for i, h in enumerate(hypers):  # d/dvalue = d/draw / (dvalue / draw), elementwise
            (slope,) = torch.autograd.grad(h.value().sum(), h.raw)
            grads[i] = grads[i] / slope
        g = torch.cat([t.reshape(-1) for t in grads])
        return float(loss.detach()), g.detach().cpu().numpy().astype("float64")

    res = minimize(loss_and_grad, x0, jac=True, method="L-BFGS-B", bounds=bounds)
    assign(res.x)
    return {"success": bool(res.success), "status": int(res.status),
            "message": str(res.message), "nit": int(res.nit), "nfev": int(res.nfev),
            "fun": float(res.fun)}


def default_model(
    train_X: torch.Tensor,
    train_Y: torch.Tensor,
    *,
    mean: str = "constant",
    fit: bool = True,
    fitter: str = "lbfgsb",
    **fit_options: Any,
) -> LatentGPModel:
    """An ExactGP for Bayesian optimisation, fitted to ``train_X`` ``(n, d)`` (inputs
    scaled to the unit cube, as BoTorch expects) and ``train_Y`` ``(n, 1)`` (or ``(n,)``),
    and wrapped: latentgp's counterpart of BoTorch 0.18's ``SingleTaskGP`` defaults
    (Hvarfner et al. 2024, "Vanilla Bayesian optimization performs great in high
    dimensions"):

    - targets standardised (mean, standard deviation with N - 1), a learned constant
      prior mean (``mean="constant"``), signal variance fixed at 1;
    - ARD RBF kernel, lengthscale prior ``LogNormal(sqrt(2) + log(d) / 2, sqrt(3))``
      (dimension-scaled, so that in 6-D the few points of a BO run do not drive the
      lengthscales to 0 or to 10^4), lengthscales at least 0.025, starting at the
      prior's mode (as BoTorch computes it, in float32);
    - noise prior ``LogNormal(-4, 1)``, noise at least 1e-4 (standardised units),
      starting at the prior's mode (likewise);
    - MAP fitted as BoTorch fits it (``fitter="lbfgsb"``, :func:`fit_map_lbfgsb`: scipy's
      L-BFGS-B on the hyperparameters' values from the same starting point), so that on
      the same data both fits take the same path to the same local optimum of the MAP
      objective; ``fitter="latentgp"`` fits by ``ExactGP.fit(**fit_options)`` instead
      (latentgp's L-BFGS on the softplus raw parameters, which can stop in a different
      local optimum).  The scipy fit's report is ``model.wrapped.map_fit_``.

    ``mean="zero"`` keeps the prior mean at the targets' mean instead (ExactGP's general
    default; on Hartmann-6 it costs BO a factor of several in regret, see the benchmark).
    ``fit=False`` returns the model initialised, not fitted (``.wrapped.fit(...)`` fits
    it).  Why these defaults: ``docs/results/bo_benchmark.md``.
    """
    if not isinstance(train_X, torch.Tensor) or not isinstance(train_Y, torch.Tensor):
        raise TypeError("train_X and train_Y must be torch tensors")
    if train_X.ndim != 2:
        raise ValueError(f"train_X must be (n, d), got shape {tuple(train_X.shape)}")
    y = train_Y[:, 0] if train_Y.ndim == 2 and train_Y.shape[1] == 1 else train_Y
    if y.ndim != 1 or y.shape[0] != train_X.shape[0]:
        raise ValueError(
            f"train_Y must be (n, 1) or (n,) with n = {train_X.shape[0]}, got shape "
            f"{tuple(train_Y.shape)}"
        )
    if fitter not in ("lbfgsb", "latentgp"):
        raise ValueError(f"fitter must be 'lbfgsb' or 'latentgp', got {fitter!r}")
    if fit_options and fitter != "latentgp":
        raise ValueError(f"fit options {sorted(fit_options)} go to ExactGP.fit: they need "
                         "fitter='latentgp'")
    d = train_X.shape[1]
    loc, scale = math.sqrt(2.0) + 0.5 * math.log(d), math.sqrt(3.0)
    # BoTorch's priors are gpytorch's, whose parameters are float32 tensors: the same
    # rounded parameters here, and their modes computed as BoTorch computes its starting
    # values (the lengthscale's differs from exp(loc - scale^2) by 5e-8, enough to set
    # the two fits on different paths)
    ls_g, noise_g = GPyTorchLogNormal(loc, scale), GPyTorchLogNormal(-4.0, 1.0)
    ls_prior = LogNormal(float(ls_g.loc), float(ls_g.scale))
    noise_prior = LogNormal(float(noise_g.loc), float(noise_g.scale))
    ls0, noise0 = float(ls_g.mode), float(noise_g.mode)
    model = ExactGP(
        RBF(lengthscale=ls0),
        mean=mean,
        noise_variance=noise0,
        dtype=train_X.dtype if train_X.dtype.is_floating_point else None,
        device=train_X.device,
    )
    model.set_prior("kernel.lengthscale", ls_prior)
    model.set_bounds("kernel.lengthscale", lower=MIN_LENGTHSCALE)
    model.set_prior("likelihood.variance", noise_prior)
    model.set_bounds("likelihood.variance", lower=MIN_NOISE)
    model.initialize(train_X, y)
    model.kernel.raw_variance.requires_grad_(False)  # the signal variance stays 1
    if fit and fitter == "lbfgsb":
        model.map_fit_ = fit_map_lbfgsb(model, train_X, y)
    elif fit:
        model.fit(train_X, y, **fit_options)
    return LatentGPModel(model)


def _unscale(model: GPModel, mean: torch.Tensor, cov: torch.Tensor):
    """Moments ``(..., q, m)``, ``(..., m, q, q)`` from scaled to target units."""
    offset, scale = model.target_scaling()
    return mean * scale + offset, cov * (scale**2)[:, None, None]


def _savigp_joint(model: SAVIGP, X: torch.Tensor):
    """Moment-matched joint Gaussian of SAVIGP's mixture predictive (scaled units)."""
    _, parts, pcache = model.prediction_cache()
    # one singleton axis per leading axis of q's mean (components, latents)
    Xe = X.reshape(X.shape[:-2] + (1,) * (pcache.q_mu.ndim - 1) + X.shape[-2:])
    mean, cov = cached_conditional(
        pcache, model.kernel(model.Z, Xe), model.kernel(Xe), full_cov=True
    )
    # (..., K, Q, q) and (..., K, Q, q, q): components first for the mixture
    mean, cov = mixture_joint_moments(parts[0].detach(), mean.movedim(-3, 0), cov.movedim(-4, 0))
    return mean.mT, cov


def _has_own_conditioning(model: GPModel) -> bool:
    """Whether the model's ``condition_on`` applies: ExactGP (rank-k factor update),
    SparseGP (added statistics), SVGP with a Gaussian likelihood and full q(u) (online
    variational conditioning)."""
    if isinstance(model, (ExactGP, SparseGP)):
        return True
    return (
        isinstance(model, SVGP)
        and type(model.likelihood) is Gaussian
        and model.covariance == "full"
    )


class LatentGPModel(GPyTorchModel, FantasizeMixin):
    """A fitted latentgp model as a ``botorch.models.model.Model`` (see the module
    docstring for what the posterior is per model family).

    It is a ``GPyTorchModel`` because its posterior is a ``GPyTorchPosterior`` over a
    (multitask) multivariate normal with a dense covariance: that is what BoTorch's
    Monte Carlo acquisitions check before they reuse a cached root decomposition of the
    baseline posterior (``cache_root``, qLogNEI's default for BoTorch's own models), so a
    wrapped model gets the same sampling scheme as a ``SingleTaskGP``.  Every method that
    class implements through a GPyTorch model (``posterior``, ``batch_shape``,
    ``num_outputs``, ``condition_on_observations``) is overridden here.

    Parameters
    ----------
    model: a fitted :class:`~latentgp.models.base.GPModel` (ExactGP, SparseGP, SVGP,
        SHGP, SAVIGP, ...).  It is used, never changed; fit it before wrapping.
    """

    def __init__(self, model: GPModel) -> None:
        if not isinstance(model, GPModel):
            raise TypeError(f"model must be a latentgp model, got {type(model).__name__}")
        if not model.built:
            raise ValueError(f"the {type(model).__name__} is not fitted yet: call fit(X, y)")
        if isinstance(model, MixturePredictive) and not isinstance(
            model.likelihood, ScaleModulatedGaussian
        ):
            raise TypeError(
                f"{type(model).__name__}'s predictive is not a Gaussian of its latent GPs; "
                "latentgp.botorch wraps ExactGP, SparseGP, SVGP, SHGP, SAVIGP, SEP and GFITC"
            )
        super().__init__()
        self._wrapped = (model,)  # a tuple: not a submodule, so train()/to() never touch it
        probe = torch.zeros(*self.batch_shape, 1, model.input_dim, dtype=model.dtype_,
                            device=model.device_)
        try:
            with torch.no_grad():
                self.predictive_joint(probe)
        except NotImplementedError:
            raise TypeError(
                f"{type(model).__name__} has no joint Gaussian predictive to give BoTorch "
                "(supported: ExactGP, SparseGP, SVGP, SHGP, SAVIGP, SEP, GFITC)"
            ) from None

    # -------------------------------------------------------------- the contract --
    @property
    def wrapped(self) -> GPModel:
        """The latentgp model."""
        return self._wrapped[0]

    @property
    def likelihood(self) -> Any:
        """The wrapped model's likelihood (BoTorch's ``fantasize`` looks at it)."""
        return self.wrapped.likelihood

    @property
    def num_outputs(self) -> int:
        model = self.wrapped
        if isinstance(model.likelihood, ScaleModulatedGaussian):
            return 1
        return int(model.num_latent)

    @property
    def batch_shape(self) -> torch.Size:
        """``(B,)`` for a :class:`~latentgp.BatchedExactGP` (B independent models: inputs
        ``(..., B, q, d)``), else ``()``."""
        model = self.wrapped
        return torch.Size([model.num_gps]) if isinstance(model, BatchedExactGP) else torch.Size([])

    def predictive_joint(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean ``(..., q, m)`` and covariance ``(..., m, q, q)`` of the outputs at
        ``X`` ``(..., q, d)``, without observation noise; differentiable in ``X``."""
        model = self.wrapped
        if isinstance(model, SAVIGP):
            return _unscale(model, *_savigp_joint(model, X.to(model.dtype_)))
        if isinstance(model.likelihood, ScaleModulatedGaussian):
            m, C = model.predict_f_joint(X, scaled=True)  # latents f (0) and g (1)
            mean, cov, _ = model.likelihood.joint_moments(m[..., 0], C[..., 0, :, :],
                                                          m[..., 1], C[..., 1, :, :])
            return _unscale(model, mean[..., None], cov[..., None, :, :])
        return model.predict_f_joint(X)

    def noise_variance(self, X: torch.Tensor) -> torch.Tensor:
        """Observation-noise variance ``(..., q, m)`` at ``X`` ``(..., q, d)``, in target
        units (input-dependent for SHGP)."""
        model = self.wrapped
        lik = model.likelihood
        _, scale = model.target_scaling()
        if isinstance(lik, ScaleModulatedGaussian):
            m, C = model.predict_f_joint(X, scaled=True)
            _, _, noise = lik.joint_moments(m[..., 0], C[..., 0, :, :], m[..., 1], C[..., 1, :, :])
            return noise[..., None] * scale**2
        if not isinstance(lik, Gaussian):
            raise ValueError(
                f"observation_noise=True needs Gaussian noise; the {type(lik).__name__} "
                "likelihood has none (the posterior is over the latent function)"
            )
        if isinstance(model, BatchedExactGP):  # one noise per member: (B, 1, 1)
            var = (lik.variance.detach() * scale**2)[:, None, None]
        else:
            var = lik.variance.detach().reshape(-1) * scale**2
        return var.expand(X.shape[:-1] + (self.num_outputs,))

    def posterior(
        self,
        X: torch.Tensor,
        output_indices: list[int] | None = None,
        observation_noise: bool | torch.Tensor = False,
        posterior_transform: Any = None,
    ) -> Any:
        """The joint posterior over the ``q`` points of each batch of ``X``
        ``(batch, q, d)``: a ``GPyTorchPosterior`` whose ``rsample`` is differentiable
        with respect to ``X``.  ``observation_noise``: False, True (the model's noise) or
        a tensor of noise variances broadcasting against ``(batch, q, m)``."""
        if not isinstance(X, torch.Tensor):
            raise TypeError(f"X must be a torch.Tensor, got {type(X).__name__}")
        mean, cov = self.predictive_joint(X)
        if isinstance(observation_noise, torch.Tensor):
            noise = observation_noise.to(mean).expand(mean.shape)
        elif observation_noise is True:
            noise = self.noise_variance(X)
        elif observation_noise is False:
            noise = None
        else:
            raise TypeError(
                f"observation_noise must be a bool or a tensor, got {observation_noise!r}"
            )
        if noise is not None:
            cov = cov + torch.diag_embed(noise.mT)
        if output_indices is not None:
            idx = list(output_indices)
            if not idx or min(idx) < 0 or max(idx) >= mean.shape[-1]:
                raise ValueError(
                    f"output_indices {output_indices!r} are not among the model's "
                    f"{mean.shape[-1]} outputs"
                )
            mean, cov = mean[..., idx], cov[..., idx, :, :]
        # a linear operator: factorised lazily, with jitter, when a sample needs it
        mvns = [
            MultivariateNormal(mean[..., i], to_linear_operator(cov[..., i, :, :]))
            for i in range(mean.shape[-1])
        ]
        if len(mvns) == 1:
            dist = mvns[0]
        else:
            dist = MultitaskMultivariateNormal.from_independent_mvns(mvns)
        post = GPyTorchPosterior(dist)
        return post if posterior_transform is None else posterior_transform(post)

    def condition_on_observations(
        self, X: torch.Tensor, Y: torch.Tensor, noise: torch.Tensor | None = None
    ) -> LatentGPModel:
        """This model conditioned on observations ``Y`` ``(batch', n, m)`` at ``X``
        ``(batch, n, d)`` with noise variances ``noise`` (default: the model's); see the
        module docstring.  ``self`` is not changed."""
        if not isinstance(X, torch.Tensor) or not isinstance(Y, torch.Tensor):
            raise TypeError("X and Y must be torch tensors")
        if Y.ndim < 2 or Y.shape[-1] != self.num_outputs or Y.shape[-2] != X.shape[-2]:
            raise ValueError(
                f"Y must have shape (..., {X.shape[-2]}, {self.num_outputs}) for X of shape "
                f"{tuple(X.shape)}, got {tuple(Y.shape)}"
            )
        model = self.wrapped
        if type(self) is LatentGPModel and _has_own_conditioning(model) and noise is None and (
            X.ndim == 2 and Y.ndim == 2
        ):
            y = Y[:, 0] if Y.shape[-1] == 1 else Y
            return LatentGPModel(model.condition_on(X.detach(), y.detach()))
        return ConditionedModel(self, X, Y, noise)


class ConditionedModel(LatentGPModel):
    """A :class:`LatentGPModel` conditioned on Gaussian observations ``(X, Y)`` with noise
    variances ``noise`` (default: the parent's noise at ``X``): the parent's joint
    posterior over ``[X, X*]`` conditioned on ``Y``,

        mean* + S*x (Sxx + N)^{-1} (Y - mean_x),   S** - S*x (Sxx + N)^{-1} Sx*,

    by one Cholesky factor of ``Sxx + N`` per batch.  Batch shape: that of ``X`` and ``Y``
    broadcast (``fantasize`` gives ``num_fantasies x batch``)."""

    def __init__(
        self, parent: LatentGPModel, X: torch.Tensor, Y: torch.Tensor, noise: torch.Tensor | None
    ) -> None:
        Model.__init__(self)
        self._wrapped = (parent.wrapped,)
        self._parent = (parent,)
        self.X_obs, self.Y_obs = X, Y.to(parent.wrapped.dtype_)
        self.noise_obs = (
            parent.noise_variance(X) if noise is None else noise.to(self.Y_obs)
        ).expand(self.Y_obs.shape)

    @property
    def batch_shape(self) -> torch.Size:
        return torch.broadcast_shapes(self.X_obs.shape[:-2], self.Y_obs.shape[:-2])

    def noise_variance(self, X: torch.Tensor) -> torch.Tensor:
        return self._parent[0].noise_variance(X)

    def predictive_joint(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch = torch.broadcast_shapes(self.batch_shape, X.shape[:-2])
        k = self.X_obs.shape[-2]
        Xo = self.X_obs.to(X.dtype).expand(batch + self.X_obs.shape[-2:])
        both = torch.cat([Xo, X.expand(batch + X.shape[-2:])], -2)
        mean, cov = self._parent[0].predictive_joint(both)  # (..., k+q, m), (..., m, k+q, k+q)
        S11 = cov[..., :k, :k] + torch.diag_embed(self.noise_obs.mT)
        L, _ = cholesky(S11, "observed covariance + noise", jitter=0.0)
        B = solve_lower(L, cov[..., :k, k:])  # (..., m, k, q)
        r = solve_lower(L, (self.Y_obs - mean[..., :k, :]).mT[..., None])  # (..., m, k, 1)
        post_mean = mean[..., k:, :] + (B.mT @ r)[..., 0].mT
        return post_mean, cov[..., k:, k:] - B.mT @ B
