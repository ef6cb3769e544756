"""Checks at the end of a fit for a degenerate solution, each with its cause and remedy.

:func:`latentgp.training.fit` calls :func:`diagnose_fit` once, after the loop: every
finding becomes a :class:`~latentgp.training.TrainingWarning` and an entry of
``history_.events``.  What is looked for (issue 29):

- **a lengthscale far outside the data's range**: below :data:`MIN_LENGTHSCALE_RATIO`
  times the spread (standard deviation) of its input column, the kernel sees every
  training point as unrelated to the others; above :data:`MAX_LENGTHSCALE_RATIO` times
  it in every column, the kernel is constant over the data and its gradients vanish;
- **a predictor constant to round-off**: the predictive mean varies over the training
  inputs by less than :data:`FLAT_RATIO` times the range of the targets (which do
  vary): the model learned nothing;
- **predictive variance collapsing to zero while the objective climbs** (regression):
  the median predictive variance at the training inputs is below
  :data:`COLLAPSED_VARIANCE_RATIO` times the targets' variance and the objective was
  still rising over the last tenth of the steps: the fit runs towards zero noise.

The predictions use at most :data:`DIAGNOSTIC_ROWS` training rows (evenly strided), so
the checks cost a fraction of one pass over the data.  Only public model methods are
used (``predict_y``, the stationary kernels' ``lengthscale`` and ``input_unit``: a
:class:`~latentgp.kernels.Stationary` lengthscale is in the units of the inputs).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ..kernels import Stationary

__all__ = [
    "COLLAPSED_VARIANCE_RATIO",
    "DIAGNOSTIC_ROWS",
    "FLAT_RATIO",
    "MAX_LENGTHSCALE_RATIO",
    "MIN_LENGTHSCALE_RATIO",
    "MIN_STEPS",
    "diagnose_fit",
]

#: A lengthscale below this multiple of its column's spread is degenerate.
MIN_LENGTHSCALE_RATIO = 1e-3
#: Lengthscales all above this multiple of their columns' spread are degenerate.
MAX_LENGTHSCALE_RATIO = 1e3
#: A predictive mean whose range over the training inputs is below this multiple of the
#: targets' range is constant to round-off.
FLAT_RATIO = 1e-6
#: A median predictive variance below this multiple of the targets' variance has collapsed.
COLLAPSED_VARIANCE_RATIO = 1e-8
#: Training rows the prediction checks look at.
DIAGNOSTIC_ROWS = 1000
#: Fits of fewer steps are not checked (initialisation passes, smoke tests).
MIN_STEPS = 10

LENGTHSCALE_REMEDY = (
    "start from the data-scaled default (leave the kernel's lengthscale=None: sqrt(D) "
    "times each column's spread), lower the learning rate (lr=), or standardise the inputs"
)


def _lengthscale_findings(model: Any) -> list[str]:
    findings = []
    for name, k in model.named_modules():
        # stationary kernels' lengthscales are in input units (Periodic's has none)
        if not isinstance(k, Stationary) or not k.built:
            continue
        ls = k.lengthscale
        with torch.no_grad():
            ratio = (ls / k.input_unit).detach().double().cpu().numpy()
        where = f"{type(k).__name__} lengthscale" + (f" ({name})" if name else "")
        low = float(ratio.min())
        if low < MIN_LENGTHSCALE_RATIO:
            findings.append(
                f"degenerate fit: the {where} reached {low:.3g} times the spread of its input "
                "column, so the kernel sees every training point as unrelated to the others "
                f"(the fit collapsed). Remedy: {LENGTHSCALE_REMEDY}."
            )
            continue
        per_latent = ratio.reshape(-1, ratio.shape[-1]).min(-1)  # every column far too long
        high = float(per_latent.max())
        if high > MAX_LENGTHSCALE_RATIO:
            findings.append(
                f"degenerate fit: the {where} is {high:.3g} times the spread of the inputs in "
                "every column, so the kernel is constant over the data and its gradients "
                f"vanish. Remedy: {LENGTHSCALE_REMEDY}."
            )
    return findings


def _sample_rows(data: Any) -> tuple[Any, np.ndarray] | None:
    """At most ``DIAGNOSTIC_ROWS`` evenly strided training rows ``(X, y)`` (y as float64)."""
    N = int(data.num_rows)
    if N < 2 or (data.X is not None and data.X.ndim > 2):  # batched models: rows are members
        return None
    idx = np.unique(np.linspace(0, N - 1, min(N, DIAGNOSTIC_ROWS)).astype(np.int64))
    if data.X is not None:
        pick = torch.as_tensor(idx, device=data.X.device)
        return data.X[pick], data.y[pick].detach().double().cpu().numpy()
    X, y = data.source.rows(idx)
    return X, np.asarray(y, dtype=np.float64)


def _climbing(objective: list[float]) -> bool:
    """Whether the objective still rose over the last tenth of the steps (by more than
    round-off of its size)."""
    values = [v for v in objective if math.isfinite(v)]
    if len(values) < 10:
        return False
    last, earlier = values[-1], values[-max(2, len(values) // 10)]
    return last - earlier > 1e-6 * max(abs(last), abs(earlier), 1.0)


def _predictions(model: Any, X: Any) -> tuple[Any, Any] | None:
    """``predict_y``'s mean and variance at ``X``; the latent mean (and no variance) for
    a likelihood without predictive moments (a user's ``log_prob`` callable); None for
    a model that predicts neither."""
    with torch.no_grad():
        try:
            return model.predict_y(X)
        except NotImplementedError:
            pass
        try:
            return model.predict_f(X)[0], None
        except NotImplementedError:
            return None


def _prediction_findings(model: Any, data: Any, objective: list[float]) -> list[str]:
    rows = _sample_rows(data)
    if rows is None:
        return []
    X, y = rows
    y2 = y.reshape(len(y), -1)
    y_range = float(np.max(np.ptp(y2, axis=0)))
    if not y_range > 0:
        return []  # constant targets: a constant predictor is the right answer
    predicted = _predictions(model, X)
    if predicted is None:
        return []
    mean, var = predicted
    mean = np.asarray(mean, dtype=np.float64).reshape(len(y), -1)
    findings = []
    p_range = float(np.max(np.ptp(mean, axis=0)))
    if p_range <= FLAT_RATIO * y_range:
        findings.append(
            f"degenerate fit: the predictions are constant to round-off on the training "
            f"inputs (they vary by {p_range:.3g} where the targets vary by {y_range:.3g}), so "
            "the model learned nothing from the inputs. Remedy: check the kernel's initial "
            "lengthscale (the default, lengthscale=None, is scaled to the data), the "
            "learning rate and the number of steps."
        )
    if var is not None and model.likelihood.task == "regression" and _climbing(objective):
        ratio = float(np.median(np.asarray(var, dtype=np.float64))) / float(
            np.var(y2, axis=0).max()
        )
        if ratio < COLLAPSED_VARIANCE_RATIO:
            findings.append(
                f"degenerate fit: the predictive variance collapsed to {ratio:.3g} times the "
                "targets' variance on the training inputs while the objective was still "
                "climbing: the fit is running towards zero noise (overfitting). Remedy: keep "
                "the noise away from zero (the likelihood's min_variance=), lower the "
                "learning rate (lr=), or stop on convergence (tol=, EarlyStopping)."
            )
    return findings


def diagnose_fit(model: Any, data: Any, history: Any) -> list[str]:
    """The degenerate-solution findings of a finished fit (empty for a sound one).

    Parameters
    ----------
    model: the fitted model (it is not changed).
    data: the fit's :class:`~latentgp.training.tasks.FitData` (arrays or a source).
    history: the fit's :class:`~latentgp.training.FitHistory` (its ``objective`` and
        ``steps``).

    Returns
    -------
    One message per finding, each naming the cause and the remedy.  A fit that stopped
    at a budget of fewer than :data:`MIN_STEPS` steps is not checked: it is an
    initialisation or a smoke test (an untrained q(u) predicts a constant), not a
    solution (one that converged that fast is: vanishing gradients converge at once).
    """
    if history.steps < MIN_STEPS and not history.stopped.startswith("converged"):
        return []
    findings = _lengthscale_findings(model)
    if getattr(model, "predicts_at_training_inputs", True):
        findings += _prediction_findings(model, data, history.objective)
    return findings
