"""Likelihood interface and the integrators that take expectations under q(f).

A user-defined likelihood only needs ``log_prob(y, f)``.  Everything else has a
default: one-latent likelihoods integrate by Gauss-Hermite quadrature, multi-latent
ones by Monte Carlo; subclasses override with closed forms where they exist.

Shapes
------
``y``: ``(N,)`` targets (or ``(N, P)`` for multi-output likelihoods).
``f``: ``(..., N)`` when ``latent_dim == 1``, else ``(..., N, Q)``.
``mean``, ``var``: marginals of q(f_n), ``(N,)`` or ``(N, Q)`` like ``f`` without the
leading sample dims.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from ..config import get_config
from ..constants import LOG_2PI
from .integrators import quadrature_score, score_function


@functools.lru_cache(maxsize=16)
def _gauss_hermite_nodes(n: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    # computed once per n: numpy's hermgauss (an eigenproblem) costs more than a small
    # model's whole objective, and every quadrature expectation asks for the nodes
    x, w = np.polynomial.hermite.hermgauss(n)
    return tuple(x * math.sqrt(2.0)), tuple(w / math.sqrt(math.pi))


def gauss_hermite(n: int, dtype=torch.float64, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Nodes ``x`` and weights ``w`` with ``E_{N(0,1)}[g] ~= sum_i w_i g(x_i)`` (``(n,)`` each)."""
    x, w = _gauss_hermite_nodes(int(n))
    return (
        torch.tensor(x, dtype=dtype, device=device),
        torch.tensor(w, dtype=dtype, device=device),
    )


@functools.lru_cache(maxsize=16)
def _normal_points(n: int, dim: int) -> torch.Tensor:
    # computed once per (n, dim): a fixed scrambled Sobol sequence (seed 20231)
    u = torch.quasirandom.SobolEngine(dim, scramble=True, seed=20231).draw(n, dtype=torch.float64)
    z = math.sqrt(2.0) * torch.erfinv((2.0 * u - 1.0).clamp(-1 + 1e-15, 1 - 1e-15))
    z = torch.cat([z, -z])
    if z.shape[0] <= dim:
        return z
    # moment matching: z <- z L^-T with L L^T the points' second moment, so that their
    # covariance is exactly the identity
    chol = torch.linalg.cholesky(z.T @ z / z.shape[0])
    return torch.linalg.solve_triangular(chol, z.T, upper=False).T


def normal_points(n: int, dim: int, dtype=torch.float64, device=None) -> torch.Tensor:
    """``(2 n, dim)`` fixed points for ``E_{N(0, I_dim)}[g] ~= mean_s g(z_s)``: ``n``
    scrambled Sobol points (a fixed seed) mapped through the normal quantile, and their
    negatives (antithetic pairs: the rule is exact for every odd function), then
    linearly transformed so that their second moment is exactly the identity (so the
    rule is exact for every polynomial of degree up to 3).  The same points at every
    call, so an expectation taken with them is a deterministic function of its
    arguments."""
    return _normal_points(int(n), int(dim)).to(dtype=dtype, device=device)


def gauss_legendre(n: int, dtype=torch.float64, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Gauss-Legendre nodes and weights on (-1, 1), ``(n,)`` each."""
    t, w = np.polynomial.legendre.leggauss(n)
    kw = {"dtype": dtype, "device": device}
    return torch.as_tensor(t, **kw), torch.as_tensor(w, **kw)


class Likelihood(nn.Module):
    """Base class: ``p(y_n | f_n)`` for one data point, factorising over points.

    Attributes
    ----------
    latent_dim:
        Number of latent function values each observation depends on (Q).
    task:
        ``"regression"``, ``"binary"``, ``"multiclass"`` or ``"count"``: how predictions
        are reported (probabilities for classification).
    """

    latent_dim: int = 1
    task: str = "regression"
    #: location-scale family in y: targets may be standardised before fitting
    scale_family: bool = False
    #: ``log_prob`` is torch code that autograd can differentiate in ``f``; False makes
    #: the expectations use the score-function integrators (``likelihoods.integrators``)
    differentiable: bool | None = True

    @property
    def deterministic_expectation(self) -> bool:
        """Whether :meth:`expected_log_prob` is free of Monte Carlo noise (a closed form,
        or Gauss-Hermite quadrature for one differentiable latent), so that a full-batch
        ELBO is a deterministic function of the parameters, as a line search (L-BFGS)
        needs.  Several latents are integrated by Monte Carlo unless a subclass has a
        closed form (and then sets this True)."""
        return self.latent_dim == 1 and self.differentiable is True

    # -- what a user writes --------------------------------------------------------
    def log_prob(self, y: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        """``log p(y_n | f_n)``, shape ``f.shape`` without the latent dim."""
        raise NotImplementedError

    # -- checks --------------------------------------------------------------------
    def adapt_to_targets(self, y: torch.Tensor) -> None:
        """Take sizes that are left to the data from the training targets ``y`` (e.g. the
        number of classes of ``Softmax()``); called once, before the model is built.
        The default takes nothing."""

    def validate_targets(self, y: torch.Tensor, name: str = "y") -> torch.Tensor:
        """Raise ``ValueError`` for targets outside the support; return them (maybe cast)."""
        return y

    # -- expectations --------------------------------------------------------------
    def _gh_points(self, mean: torch.Tensor, var: torch.Tensor, n: int | None = None):
        x, w = gauss_hermite(n or get_config().num_gauss_hermite, mean.dtype, mean.device)
        f = mean + var.clamp_min(0).sqrt() * x.reshape((-1,) + (1,) * mean.ndim)
        return f, w.reshape((-1,) + (1,) * mean.ndim)

    def _mc_points(
        self,
        mean: torch.Tensor,
        var: torch.Tensor,
        num_samples: int | None = None,
        fixed: bool = False,
    ):
        """``S`` draws of f from ``N(mean, var)``, shape ``(S,) + mean.shape``.

        ``fixed=True`` (used for predictions) draws one set of standard-normal numbers from
        a fixed seed and shares it across data points, so predictions are deterministic
        and a point's prediction does not depend on which other points are in the batch.
        """
        S = num_samples or get_config().num_mc_samples
        if fixed:
            g = torch.Generator().manual_seed(20231)
            shape = (S,) + (1,) * (mean.ndim - 1) + tuple(mean.shape[-1:])
            eps = torch.randn(shape, generator=g, dtype=mean.dtype).to(mean.device)
        else:
            eps = torch.randn((S,) + tuple(mean.shape), dtype=mean.dtype, device=mean.device)
        return mean + var.clamp_min(0).sqrt() * eps

    def expected_log_prob(
        self, y: torch.Tensor, mean: torch.Tensor, var: torch.Tensor
    ) -> torch.Tensor:
        """``E_{q(f_n)}[log p(y_n | f_n)]`` per point, shape ``(N,)``.

        Gauss-Hermite for one latent, Monte Carlo (reparameterised) otherwise; for a
        likelihood that is not ``differentiable``, the score-function identity under the
        same quadrature (one latent) or the Monte Carlo score-function estimator with
        control variates (several), so any model can train with it.
        """
        if not self.differentiable:
            return self._score_expected_log_prob(y, mean, var)
        if self.latent_dim == 1:
            f, w = self._gh_points(mean, var)
            return (w * self.log_prob(y, f)).sum(0)
        f = self._mc_points(mean, var)
        return self.log_prob(y, f).mean(0)

    def _score_expected_log_prob(self, y, mean, var):
        if self.latent_dim == 1:
            x, w = gauss_hermite(get_config().num_gauss_hermite, mean.dtype, mean.device)
            return quadrature_score(lambda f: self.log_prob(y, f), mean, var, x, w)
        S = get_config().num_mc_samples
        eps = torch.randn((S,) + tuple(mean.shape), dtype=mean.dtype, device=mean.device)
        return score_function(lambda f: self.log_prob(y, f), mean, var, eps)

    def predictive_log_density(
        self, y: torch.Tensor, mean: torch.Tensor, var: torch.Tensor,
        num_samples: int | None = None,
    ) -> torch.Tensor:
        """``log E_{q(f_n)}[p(y_n | f_n)]`` per point, shape ``(N,)``.

        One latent: quadrature centred on the integrand (:meth:`adaptive_log_density`),
        accurate to about 1e-7 nats even when q(f) is much wider than the likelihood;
        several latents: ``num_samples`` Monte Carlo draws from a fixed seed (default
        ``config.num_predictive_samples``, else 1000; relative error about
        ``1 / sqrt(num_samples)`` of the density's spread).
        """
        if self.latent_dim == 1:
            return self.adaptive_log_density(y, mean, var)
        S = num_samples or get_config().num_predictive_samples or 1000
        f = self._mc_points(mean, var, S, fixed=True)
        return torch.logsumexp(self.log_prob(y, f), dim=0) - math.log(f.shape[0])

    def adaptive_log_density(
        self, y: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, n: int | None = None
    ) -> torch.Tensor:
        """``log int p(y | f) N(f | mean, var) df`` by quadrature centred on the integrand.

        The integrand's mode and curvature scale ``s`` are found by damped Newton steps on
        ``h(f) = log p(y | f) + log N(f | mean, var)``; then ``n / 2`` Gauss-Legendre nodes
        on each side of the mode, in ``t`` in (-1, 0) and (0, 1), are mapped by
        ``f = mode + s sinh(a t)``, which puts them densely
        at the peak and reaches far enough (``s sinh(a) = max(12 s, 12 sqrt(var) +
        |mean - mode|)``) for a one-sided or wide integrand.  So a narrow likelihood under
        a wide q(f) (a Poisson count with predictive variance 50) and a likelihood that
        cuts q off (a zero count) are both integrated: against adaptive reference
        quadrature the Poisson log density is within 1e-7 nats over means -5..5,
        variances 0.01..50 and counts 0..40 with the default ``n = 128`` (1e-4 with 64);
        ``n`` is the knob (default ``config.num_quadrature_nodes``).  Likelihoods that are
        not differentiable centre the nodes on q(f) itself.
        """
        n = n or get_config().num_quadrature_nodes
        var = var.clamp_min(1e-300)
        sd = var.sqrt()
        if self.differentiable:
            mode, scale = self._integrand_mode(y, mean.detach(), var.detach())
        else:
            mode, scale = mean, sd
        far = torch.maximum(12.0 * scale, 12.0 * sd + (mean - mode).abs())
        a = torch.asinh(far / scale)
        # each side of the mode separately (n / 2 nodes on (0, 1) each), so a kink at the
        # mode (Laplace: at f = y) is an end point, not inside a panel
        u, wu = gauss_legendre(max(1, n // 2), mean.dtype, mean.device)
        u, wu = 0.5 * (u + 1.0), 0.5 * wu
        t = torch.cat([-u, u]).reshape((-1,) + (1,) * mean.ndim)
        w = torch.cat([wu, wu]).reshape(t.shape)
        f = mode + scale * torch.sinh(a * t)
        log_jacobian = torch.log(scale * a * torch.cosh(a * t))
        log_prior = -0.5 * (LOG_2PI + var.log() + (f - mean) ** 2 / var)
        return torch.logsumexp(self.log_prob(y, f) + log_prior + log_jacobian + w.log(), 0)

    def _integrand_mode(self, y, mean, var, iters: int = 25):
        """Mode and curvature scale of ``h(f) = log p(y | f) - (f - mean)^2 / (2 var)``,
        elementwise: Newton steps (curvature clamped to at most ``-1 / var``, steps to at
        most ``max(1, sqrt(var))``) halved until ``h`` does not decrease, so a likelihood
        that is not log-concave (Student-t) still climbs to a mode.  Falls back to q's own
        moments wherever the result is not finite."""

        def h(f):
            return self.log_prob(y, f) - 0.5 * (f - mean) ** 2 / var

        f = mean.clone()
        limit = var.sqrt().clamp_min(1.0)
        d2 = -1.0 / var
        with torch.enable_grad():
            for _ in range(iters):
                fg = f.detach().requires_grad_(True)
                lp = self.log_prob(y, fg)
                (g1,) = torch.autograd.grad(lp.sum(), fg, create_graph=True)
                (g2,) = torch.autograd.grad(g1.sum(), fg, allow_unused=True)
                g2 = torch.zeros_like(f) if g2 is None else g2
                d1 = g1.detach() - (f - mean) / var
                d2 = (g2.detach() - 1.0 / var).clamp_max(-1.0 / var)
                step = (-d1 / d2).clamp(-limit, limit)
                with torch.no_grad():
                    h0 = h(f)
                    for _ in range(30):  # backtrack where h would decrease
                        worse = ~(h(f + step) >= h0)
                        if not bool(worse.any()):
                            break
                        step = torch.where(worse, 0.5 * step, step)
                f = f + step
                if bool((step.abs() <= 1e-7 * ((-1.0 / d2).sqrt() + f.abs())).all()):
                    break
        scale = (-1.0 / d2).sqrt()
        ok = torch.isfinite(f) & torch.isfinite(scale) & (scale > 0)
        return torch.where(ok, f, mean), torch.where(ok, scale, var.sqrt())

    # -- predictions of y --------------------------------------------------------
    def conditional_mean(self, f: torch.Tensor) -> torch.Tensor:
        """``E[y | f]``."""
        raise NotImplementedError(
            f"{type(self).__name__} defines no conditional_mean(f), so predictive means of y "
            "are unavailable; use predict_f or log_predictive_density, or define it"
        )

    def conditional_variance(self, f: torch.Tensor) -> torch.Tensor:
        """``Var[y | f]``."""
        raise NotImplementedError(
            f"{type(self).__name__} defines no conditional_variance(f), so predictive "
            "variances of y are unavailable; define it"
        )

    def predictive_moments(
        self, mean: torch.Tensor, var: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and variance of y under ``q(f)``, by the law of total variance."""
        if self.latent_dim == 1:
            f, w = self._gh_points(mean, var)
            mu = self.conditional_mean(f)
            m = (w * mu).sum(0)
            v = (w * (self.conditional_variance(f) + mu**2)).sum(0) - m**2
            return m, v.clamp_min(0)
        f = self._mc_points(mean, var, get_config().num_predictive_samples or 256, fixed=True)
        mu = self.conditional_mean(f)
        m = mu.mean(0)
        v = (self.conditional_variance(f) + mu**2).mean(0) - m**2
        return m, v.clamp_min(0)

    def sample_y(self, f: torch.Tensor) -> torch.Tensor:
        """Draw ``y ~ p(y | f)`` (optional)."""
        raise NotImplementedError(f"{type(self).__name__} cannot draw samples of y")

    # -- serialisation -----------------------------------------------------------
    def to_config(self) -> dict[str, Any]:
        return {"type": type(self).__name__, **self._config_args()}

    def _config_args(self) -> dict[str, Any]:
        return {}


class CallableLikelihood(Likelihood):
    """Wrap a plain function ``fn(y, f) -> log p(y | f)`` as a likelihood.

    ``latent_dim`` says how many latent values each observation depends on.  The
    function may be torch code or numpy code (a simulator, anything that can only be
    evaluated): once, with the training targets and ``f = 0`` before the first fit
    (:meth:`adapt_to_targets`, one latent) or at its first call, it is tried on torch
    tensors; if that fails or gives no autograd graph, it is treated as a
    black box: evaluated on numpy arrays when torch inputs fail, and
    ``differentiable = False``, so expectations use the score-function integrators.
    ``differentiable`` may also be given to skip the inspection.
    """

    def __init__(
        self,
        fn: Callable,
        latent_dim: int = 1,
        task: str = "regression",
        differentiable: bool | None = None,
    ) -> None:
        super().__init__()
        self.fn = fn
        self.latent_dim = int(latent_dim)
        self.task = task
        self.differentiable = differentiable
        #: None until the first call: whether ``fn`` is evaluated on numpy arrays
        self.evaluates_numpy: bool | None = None

    @property
    def deterministic_expectation(self) -> bool:
        """True for one latent and a function that autograd differentiates (declared, or
        found by :meth:`adapt_to_targets` before the first fit chooses its defaults, so
        that a model's first and later fits take the same default optimiser): its
        expectation is then Gauss-Hermite quadrature."""
        return self.latent_dim == 1 and self.differentiable is True

    def adapt_to_targets(self, y: torch.Tensor) -> None:
        """With one latent, inspect ``fn`` (:meth:`inspect`) on the training targets and
        ``f = 0``, the latent value of a zero-mean model before training (the first
        call of the expectation would make), unless ``differentiable`` was declared."""
        if self.latent_dim == 1 and self.differentiable is None:
            self.inspect(y, torch.zeros_like(y))  # y: the model's float dtype

    def inspect(self, y: torch.Tensor, f: torch.Tensor) -> bool:
        """Find out, once, with the real arguments ``y`` and ``f``, how ``fn`` evaluates;
        returns :attr:`differentiable`."""
        if self.evaluates_numpy is None:
            fg = f.detach().clone().requires_grad_(True)
            try:
                with torch.enable_grad():
                    out = self.fn(y, fg)
                graph = isinstance(out, torch.Tensor) and out.requires_grad
                torch_ok = isinstance(out, torch.Tensor)
            except Exception:  # noqa: BLE001 -- any failure means "not torch code"
                graph = torch_ok = False
            self.evaluates_numpy = not torch_ok
            if self.differentiable is None:
                self.differentiable = graph
        return bool(self.differentiable)

    def log_prob(self, y, f):
        if self.evaluates_numpy is None:
            self.inspect(y, f)
        if self.evaluates_numpy:
            out = self.fn(y.detach().cpu().numpy(), f.detach().cpu().numpy())
            return torch.as_tensor(np.asarray(out, dtype=np.float64), device=f.device).to(f.dtype)
        out = self.fn(y, f)
        if not isinstance(out, torch.Tensor):
            out = torch.as_tensor(np.asarray(out), dtype=f.dtype, device=f.device)
        return out

    def expected_log_prob(self, y, mean, var):
        if self.differentiable is None:
            self.inspect(y, mean[None])
        return super().expected_log_prob(y, mean, var)

    def to_config(self):
        raise ValueError(
            "a model with a likelihood given as a plain function cannot be saved: the "
            "function is code, and model files never store code; subclass Likelihood "
            "in an importable module instead"
        )


_REGISTRY: dict[str, type[Likelihood]] = {}


def register(*names: str):
    """Class decorator adding a likelihood to the name registry."""

    def deco(cls):
        for n in names:
            _REGISTRY[n] = cls
        _REGISTRY[cls.__name__] = cls
        return cls

    return deco


def likelihood_from_name(name: str | Likelihood | Callable | None, **kwargs) -> Likelihood:
    """A likelihood from a name (``"gaussian"``, ``"bernoulli"``, ``"probit"``, ...), a
    :class:`Likelihood` (copied, so that training never changes the caller's object), any
    object with a ``log_prob(y, f)`` method (its ``latent_dim`` and ``task`` attributes
    are used when present) or a plain callable ``log_prob(y, f)``."""
    if name is None:
        name = "gaussian"
    if isinstance(name, Likelihood):
        return copy.deepcopy(name)  # the model trains its own copy: never the user's object
    log_prob = getattr(name, "log_prob", None)
    if callable(log_prob) and not isinstance(name, str):
        return CallableLikelihood(
            log_prob,
            latent_dim=getattr(name, "latent_dim", 1),
            task=getattr(name, "task", "regression"),
            differentiable=getattr(name, "differentiable", None),
        )
    if callable(name) and not isinstance(name, str):
        return CallableLikelihood(name)
    if not isinstance(name, str):
        raise ValueError(
            "likelihood must be a name, a Likelihood, an object with a log_prob(y, f) "
            f"method or a callable log_prob(y, f), got {type(name).__name__}"
        )
    key = name.lower().replace("-", "").replace("_", "")
    if key not in _REGISTRY:
        choices = sorted(k for k in _REGISTRY if k.islower())
        raise ValueError(f"unknown likelihood {name!r}; choose one of {choices}")
    cls = _REGISTRY[key]
    if key in ("probit",):
        kwargs.setdefault("link", "probit")
    return cls(**kwargs)


def likelihood_from_config(cfg: dict[str, Any]) -> Likelihood:
    """Rebuild a likelihood from :meth:`Likelihood.to_config` output."""
    cfg = dict(cfg)
    kind = cfg.pop("type")
    if kind not in _REGISTRY:
        raise ValueError(f"unknown likelihood type {kind!r} in model file")
    return _REGISTRY[kind](**cfg)
