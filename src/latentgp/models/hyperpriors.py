"""Priors and bounds on a model's hyperparameters (a mixin of :class:`GPModel`).

A hyperparameter is named by the path of its module and its property, the value in its
own units: ``"kernel.lengthscale"``, ``"likelihood.variance"``,
``"kernel.kernels.0.period"``.  The property is backed by a raw parameter of the same
module, ``raw_<property>`` (the library's convention: ``lengthscale =
softplus(raw_lengthscale) * unit``), which is what optimisers and samplers move.

- ``set_prior(name, prior)``: the fit maximises ``objective + log p(theta)`` (MAP);
  :func:`latentgp.training.fit_with_restarts` draws starting points from it.
- ``set_bounds(name, lower, upper)``: after every optimiser step the value is projected
  back into ``[lower, upper]`` (projected gradient), so no step leaves the box; the
  objective is evaluated at projected values (L-BFGS's line search probes too), and the
  gradient of a value held at a bound and pushed outward is zeroed
  (:meth:`HyperpriorMixin.project_gradients`), so that the optimiser's model of the
  objective is the one of the box.  (Without the last two, L-BFGS accepted line-search
  points outside the box whose projections were worse: with a noise floor on
  noise-free data the objective fell step after step, issue 28.)

Both are kept in the model's config, so saved files keep them.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..priors import Prior, prior_from_config


class Hyperparameter:
    """A named hyperparameter: its module, property and raw parameter."""

    def __init__(self, model: torch.nn.Module, name: str) -> None:
        path, _, prop = name.rpartition(".")
        try:
            module = model.get_submodule(path) if path else model
        except AttributeError:
            raise ValueError(f"{name!r}: the model has no module {path!r}") from None
        raw = getattr(module, f"raw_{prop}", None)
        # a Parameter, or the tensor torch.func.functional_call put in its place
        if not isinstance(raw, torch.Tensor) or not hasattr(type(module), prop):
            raise ValueError(
                f"{name!r} is not a hyperparameter of this model: {path or 'the model'} has "
                f"no property {prop!r} backed by a parameter raw_{prop}; known: "
                f"{', '.join(hyperparameter_names(model)) or 'none (fit or build first)'}"
            )
        self.name, self.module, self.prop, self.raw = name, module, prop, raw

    def value(self) -> torch.Tensor:
        return getattr(self.module, self.prop)

    def set_value(self, target: torch.Tensor) -> None:
        """Set the raw parameter so that the value equals ``target`` (elementwise Newton
        steps through the property's monotone map: properties have no inverse)."""
        raw = self.raw
        target = torch.broadcast_to(torch.as_tensor(target).to(raw), raw.shape)
        frozen = not raw.requires_grad
        raw.requires_grad_(True)
        try:
            for _ in range(50):
                with torch.enable_grad():
                    v = torch.broadcast_to(self.value(), raw.shape)
                    (slope,) = torch.autograd.grad(v.sum(), raw)
                gap = v.detach() - target
                if bool((gap.abs() <= 1e-13 * target.abs().clamp_min(1e-300)).all()):
                    break
                with torch.no_grad():
                    raw.sub_(gap / slope.clamp_min(1e-300))
        finally:
            raw.requires_grad_(not frozen)


def hyperparameter_names(model: torch.nn.Module) -> list[str]:
    """Every ``<module path>.<property>`` with a ``raw_<property>`` parameter."""
    names = []
    for path, module in model.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            prop = pname[4:] if pname.startswith("raw_") else None
            if prop and isinstance(p, torch.nn.Parameter) and hasattr(type(module), prop):
                names.append(f"{path}.{prop}" if path else prop)
    return names


class HyperpriorMixin:
    """``set_prior``, ``set_bounds``, ``log_prior``, ``apply_bounds`` and
    ``project_gradients`` for a model."""

    def _hyper_store(self) -> tuple[dict[str, Prior], dict[str, tuple[float, float]]]:
        if "hyper_priors" not in self.__dict__:
            self.__dict__["hyper_priors"] = {}
            self.__dict__["hyper_bounds"] = {}
        return self.__dict__["hyper_priors"], self.__dict__["hyper_bounds"]

    def _check_name(self, name: str) -> None:
        if self.built:  # type: ignore[attr-defined]
            Hyperparameter(self, name)  # type: ignore[arg-type]
        elif not isinstance(name, str) or "." not in name:
            raise ValueError(f"a hyperparameter name is '<module>.<property>', got {name!r}")

    def set_prior(self, name: str, prior: Prior | None) -> Any:
        """Put ``prior`` on the hyperparameter ``name`` (None removes it); returns the model.

        Before the model is built the name is checked when it is (at the first fit)."""
        if not getattr(self, "supports_hyperpriors", True):
            raise ValueError(
                f"{type(self).__name__} trains with its own method's steps, which take no "
                "hyperparameter priors"
            )
        if prior is not None and not isinstance(prior, Prior):
            raise TypeError(f"prior must be a latentgp.priors.Prior, got {type(prior).__name__}")
        self._check_name(name)
        priors, _ = self._hyper_store()
        if prior is None:
            priors.pop(name, None)
        else:
            priors[name] = prior
        self.clear_prediction_cache()  # type: ignore[attr-defined]
        return self

    def set_bounds(self, name: str, lower: float | None = None, upper: float | None = None):
        """Keep the hyperparameter ``name`` in ``[lower, upper]`` during fitting (None: no
        bound on that side); returns the model."""
        lo = -math.inf if lower is None else float(lower)
        hi = math.inf if upper is None else float(upper)
        if not lo < hi:
            raise ValueError(f"bounds of {name!r}: lower {lower!r} must be below upper {upper!r}")
        self._check_name(name)
        _, bounds = self._hyper_store()
        bounds[name] = (lo, hi)
        if self.built:  # type: ignore[attr-defined]
            self.apply_bounds()
        return self

    @property
    def priors(self) -> dict[str, Prior]:
        """The priors set on hyperparameters, by name (a copy)."""
        return dict(self._hyper_store()[0])

    @property
    def bounds(self) -> dict[str, tuple[float, float]]:
        """The bounds set on hyperparameters, by name (a copy)."""
        return dict(self._hyper_store()[1])

    def log_prior(self) -> torch.Tensor:
        """``sum log p(theta)`` over the hyperparameters with a prior (0 without any)."""
        priors, _ = self._hyper_store()
        total = torch.zeros((), dtype=self.dtype_, device=self.device_)  # type: ignore[attr-defined]
        for name, prior in priors.items():
            total = total + prior.log_prob(Hyperparameter(self, name).value()).sum()  # type: ignore[arg-type]
        return total

    def apply_bounds(self) -> None:
        """Project every bounded hyperparameter back into its box (after a step)."""
        _, bounds = self._hyper_store()
        for name, (lo, hi) in bounds.items():
            hp = Hyperparameter(self, name)  # type: ignore[arg-type]
            v = hp.value().detach()
            clamped = v.clamp(lo, hi)
            if not torch.equal(clamped, v):
                # land strictly inside: the Newton solve is exact to ~1e-12 relative.  An
                # open side stays open (inf - 1e-9 * inf would be NaN and poison the value)
                inner_lo = lo + 1e-9 * abs(lo) if math.isfinite(lo) else lo
                inner_hi = hi - 1e-9 * abs(hi) if math.isfinite(hi) else hi
                inside = clamped.clamp(inner_lo, inner_hi)
                hp.set_value(torch.where(v == clamped, v, inside))

    def project_gradients(self) -> None:
        """Zero the gradient (of the loss, ``-objective``) of every bounded raw parameter
        whose value sits at its bound (within 1e-7 relative) and whose descent step would
        leave the box.  Values rise with their raw parameters (the library's positive
        maps), so at the lower bound a positive gradient points outward."""
        _, bounds = self._hyper_store()
        for name, (lo, hi) in bounds.items():
            hp = Hyperparameter(self, name)  # type: ignore[arg-type]
            g = hp.raw.grad
            if g is None:
                continue
            v = hp.value().detach()
            if v.shape != g.shape:
                if v.numel() != g.numel():
                    continue  # not elementwise (a shared raw, a per-column unit): leave it
                v = v.reshape(g.shape)
            near_lo = lo + 1e-7 * abs(lo) if math.isfinite(lo) else lo  # -inf: never
            near_hi = hi - 1e-7 * abs(hi) if math.isfinite(hi) else hi
            g.masked_fill_(((v <= near_lo) & (g > 0)) | ((v >= near_hi) & (g < 0)), 0.0)

    def hyperprior_config(self) -> dict[str, Any]:
        priors, bounds = self._hyper_store()
        out: dict[str, Any] = {}
        if priors:
            out["priors"] = {k: p.to_config() for k, p in priors.items()}
        if bounds:
            out["bounds"] = {k: [lo, hi] for k, (lo, hi) in bounds.items()}
        return out

    def restore_hyperpriors(self, config: dict[str, Any]) -> None:
        """Set the priors and bounds of :meth:`hyperprior_config` (model files)."""
        priors, bounds = self._hyper_store()
        for k, c in (config.get("priors") or {}).items():
            priors[k] = prior_from_config(c)
        for k, (lo, hi) in (config.get("bounds") or {}).items():
            bounds[k] = (float(lo), float(hi))
