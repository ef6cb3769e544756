"""Posterior samples of hyperparameters by NUTS (pyro's sampler), for models whose
objective is the exact log marginal likelihood: ``ExactGP`` and ``SparseGP`` (as GPflow's
``GPMC``/``SGPMC`` and GPyTorch with Pyro offer).

The sampled hyperparameters are those with a prior (``model.set_prior``); the others stay
at their current values (fit the model first).  NUTS moves the raw, unconstrained
parameters ``r`` (``value = g(r)``, e.g. ``softplus(r) * unit``), so the potential is

    U(r) = -[log p(y | theta) + sum log p(theta) + sum log |g'(r)|],   theta = g(r),

the last term the change of variables (elementwise maps: their derivative by autograd).
Sampling runs inside a private random state (the caller's global torch state is left as
it was).  ``pip install latentgp[mcmc]`` installs pyro.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from torch import nn

from .mixtures import mixture_moments
from .models.hyperpriors import Hyperparameter
from .rng import seeded_scope

__all__ = ["HyperparameterSamples", "sample_hyperparameters"]


class _Potential(nn.Module):
    """``-log posterior`` of the raw hyperparameters (a module, so that
    ``torch.func.functional_call`` can put NUTS's tensors in place of the parameters)."""

    def __init__(self, model, X, y, names: list[str]) -> None:
        super().__init__()
        self.model, self.X, self.y = model, X, y
        self.names = names
        self.paths = {n: _raw_path(model, n) for n in names}

    def forward(self) -> torch.Tensor:
        m = self.model
        log_post = m.objective(self.X, self.y, self.X.shape[0]) + m.log_prior()
        for name in self.names:
            hp = Hyperparameter(m, name)
            value = hp.value()
            (slope,) = torch.autograd.grad(value.sum(), hp.raw, create_graph=True)
            log_post = log_post + slope.abs().log().sum()
        return -log_post


def _raw_path(model: nn.Module, name: str) -> str:
    """``"model.<module path>.raw_<property>"``: the raw parameter's name in _Potential."""
    path, _, prop = name.rpartition(".")
    return ".".join(p for p in ("model", path, f"raw_{prop}") if p)


class HyperparameterSamples:
    """Draws of the hyperparameters and the predictions that average over them.

    ``values``: ``{name: (S, *shape)}`` tensors of the values (constrained units);
    ``raw``: the same for the raw parameters; ``model``: the fitted model they belong to
    (not modified).
    """

    def __init__(self, model: Any, names: list[str], raw: dict[str, torch.Tensor]) -> None:
        self.model, self.names, self.raw = model, names, raw
        self.num_samples = int(next(iter(raw.values())).shape[0])
        self.values = {}
        probe = copy.deepcopy(model)
        for name in names:
            hp = Hyperparameter(probe, name)
            vals = []
            for s in range(self.num_samples):
                with torch.no_grad():
                    hp.raw.copy_(raw[name][s])
                vals.append(hp.value().detach().clone())
            self.values[name] = torch.stack(vals)

    def model_at(self, s: int) -> Any:
        """A copy of the model at draw ``s``."""
        m = copy.deepcopy(self.model)
        with torch.no_grad():
            for name in self.names:
                Hyperparameter(m, name).raw.copy_(self.raw[name][s])
        m.clear_prediction_cache()
        return m

    def predict_y(self, X: Any, *, every: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of y under the mixture over draws (every ``every``-th)."""
        means, variances = [], []
        for s in range(0, self.num_samples, every):
            m, v = self.model_at(s).predict_y(X)
            means.append(torch.as_tensor(m))
            variances.append(torch.as_tensor(v))
        means, variances = torch.stack(means, -1), torch.stack(variances, -1)
        weights = torch.full((means.shape[-1],), 1.0 / means.shape[-1], dtype=means.dtype)
        mean, var = mixture_moments(weights, means, variances)
        return mean.numpy(), var.numpy()


def sample_hyperparameters(
    model: Any, X: Any, y: Any, *, num_samples: int = 200, warmup: int = 200, seed: int = 0,
) -> HyperparameterSamples:
    """NUTS draws of the hyperparameters with priors of a fitted (or initialised) ExactGP
    or SparseGP, on data ``(X, y)``; see the module docstring."""
    try:
        from pyro.infer.mcmc import MCMC, NUTS  # noqa: PLC0415 - an optional extra
    except ImportError as err:  # pragma: no cover - pyro is in the mcmc extra
        raise ImportError("sample_hyperparameters needs pyro: pip install latentgp[mcmc]") from err
    if getattr(model, "supports_minibatch", True):
        raise ValueError(
            f"{type(model).__name__}'s objective is a stochastic bound, not the marginal "
            "likelihood: hyperparameter MCMC is for ExactGP and SparseGP"
        )
    names = list(model.priors)
    if not names:
        raise ValueError("no hyperparameter has a prior: set_prior(name, prior) first")
    work = copy.deepcopy(model)
    work.initialize(X, y, seed=seed)
    Xt, _ = work.check_training_data(X, y)
    yt = work.scale_targets(y)
    potential = _Potential(work, Xt, yt, names)
    params = dict(potential.named_parameters())
    for p in params.values():
        p.requires_grad_(True)
    init = {potential.paths[n]: params[potential.paths[n]].detach().clone() for n in names}

    def potential_fn(values: dict[str, torch.Tensor]) -> torch.Tensor:
        # the change-of-variables term differentiates the value map, so the raw values
        # must carry gradients even where pyro only asks for the energy
        with torch.enable_grad():
            values = {k: v if v.requires_grad else v.detach().requires_grad_()
                      for k, v in values.items()}
            return torch.func.functional_call(potential, values, ())

    with seeded_scope(seed, [work.device_]):
        kernel = NUTS(potential_fn=potential_fn, adapt_step_size=True)
        run = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup,
                   initial_params=init, disable_progbar=True)
        run.run()
        draws = run.get_samples()
    raw = {n: draws[potential.paths[n]].detach() for n in names}
    return HyperparameterSamples(work, names, raw)
