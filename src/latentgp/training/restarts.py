"""Multi-start fitting: the same fit from several starting points, the best one kept.

A marginal likelihood or an ELBO over hyperparameters has local optima (a long
lengthscale that explains everything as noise, a short one that interpolates); one start
can stop in the wrong one.  :func:`fit_with_restarts` fits copies of the model from
``restarts`` starting points and keeps the one whose final objective is highest:

- start 0 is the model's own initialisation (what ``fit`` alone does);
- start k > 0 draws every hyperparameter from its prior where one is set
  (``model.set_prior``), else uniformly within its bounds where both are finite
  (``model.set_bounds``; log-uniformly for positive bounds, as scikit-learn's
  ``n_restarts_optimizer`` does), else log-uniformly within a factor of 10 of its
  data-scaled initial value (positive hyperparameters; others keep theirs), from a
  generator seeded by ``(seed, k)`` -- never the global random state;
- a start that fails (a matrix that stays indefinite, a non-finite objective) is skipped
  and reported, never fatal unless every start fails.

The kept start's parameters are copied into the caller's model, whose ``history_`` is
that start's, with one event per start (its objective, or why it failed).
"""

from __future__ import annotations

import copy
import math
import warnings
from typing import Any

import torch

from ..linalg import CholeskyError
from ..models.hyperpriors import Hyperparameter, hyperparameter_names
from ..validation import check_positive_int

__all__ = ["fit_with_restarts", "draw_start"]

#: a start without a prior moves each positive hyperparameter by a factor in [1/10, 10]
SPREAD = 10.0


def draw_start(model: Any, generator: torch.Generator) -> None:
    """Move ``model``'s hyperparameters to a random starting point (see the module
    docstring); the model must be built."""
    priors, bounds = model.priors, model.bounds
    for name in hyperparameter_names(model):
        hp = Hyperparameter(model, name)
        value = hp.value().detach()
        if not hp.raw.requires_grad:
            continue  # fixed by the user: not a hyperparameter to search over
        u = torch.rand(value.shape, generator=generator, dtype=value.dtype)
        lo, hi = bounds.get(name, (-math.inf, math.inf))
        if name in priors:
            new = priors[name].sample(tuple(value.shape), generator, dtype=value.dtype)
        elif math.isfinite(lo) and math.isfinite(hi):
            if lo > 0:
                new = torch.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
            else:
                new = lo + u * (hi - lo)
        elif bool((value > 0).all()):
            new = value * torch.exp((2.0 * u - 1.0) * math.log(SPREAD))
        else:
            continue
        hp.set_value(new.to(value))
    model.apply_bounds()
    model.clear_prediction_cache()


def fit_with_restarts(
    model: Any, X: Any, y: Any = None, *, restarts: int = 5, seed: int = 0, **options: Any
) -> Any:
    """Fit ``model`` from ``restarts`` starting points and keep the best (module docstring).

    ``options`` are those of ``model.fit`` (``seed`` seeds the starts: start k fits with
    ``seed + k``).  Returns ``model``.
    """
    restarts = check_positive_int(restarts, "restarts")
    template = copy.deepcopy(model)
    best, best_k, best_value, events, last_error = None, -1, -math.inf, [], None
    for k in range(restarts):
        candidate = copy.deepcopy(template)
        try:
            if k > 0:
                candidate.initialize(X, y, seed=seed + k)
                draw_start(candidate, torch.Generator().manual_seed(1_000_003 * seed + k))
            with warnings.catch_warnings():
                # one start's trouble is reported below, not k times over
                warnings.simplefilter("ignore")
                candidate.fit(X, y, seed=seed + k, **options)
            value = float(candidate.history_.objective[-1])
        except (CholeskyError, FloatingPointError, RuntimeError) as err:
            last_error = err
            events.append(f"start {k}: failed ({type(err).__name__}: {err}); skipped")
            continue
        if not math.isfinite(value):
            events.append(f"start {k}: non-finite final objective; skipped")
            continue
        events.append(f"start {k}: final objective {value:.6g}")
        if value > best_value:
            best, best_k, best_value = candidate, k, value
    if best is None:
        raise RuntimeError(
            f"all {restarts} starts failed; the last error: {last_error}"
        ) from last_error
    model.__dict__.update(copy.deepcopy(best).__dict__)
    model.history_.events = [*model.history_.events, *events,
                             f"kept start {best_k} (highest final objective)"]
    return model
