"""A model's data at its boundary: the checks of targets and out-of-core sources against
the model, the target statistics that standardisation starts from, and the seeded
initialisation sample of a fit from a source.

Plain functions of public values that :class:`~latentgp.models.base.GPModel` (and models
that check their own targets, such as SAVIGP) call.  ``init_sample`` and
``INIT_SAMPLE_ROWS`` are re-exported by :mod:`latentgp.models.base`, where they lived
before.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = [
    "INIT_SAMPLE_ROWS",
    "check_output_columns",
    "check_source",
    "check_target_columns",
    "column_stats",
    "init_sample",
]

#: Rows of the seeded sample from which a model initialises (inducing inputs,
#: lengthscales) when it trains from an out-of-core source (:func:`init_sample`).
INIT_SAMPLE_ROWS = 20000


def init_sample(num_rows: int, seed: int | None) -> np.ndarray:
    """The sorted row numbers of the seeded initialisation sample of ``num_rows`` rows: at
    most :data:`INIT_SAMPLE_ROWS`, drawn without replacement by
    ``numpy.random.default_rng(seed or 0)``; every row (``arange``) of a smaller set."""
    rng = np.random.default_rng(0 if seed is None else seed)
    return np.sort(rng.choice(num_rows, size=min(num_rows, INIT_SAMPLE_ROWS), replace=False))


def column_stats(y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Mean, standard deviation (N - 1), minimum and maximum of each column of ``y``
    ``(N, P)``, over its observed (non-NaN) entries."""
    observed = ~torch.isnan(y)
    if bool(observed.all()):  # the usual case, computed as it always was (bit for bit)
        sd = y.std(0) if y.shape[0] > 1 else torch.ones_like(y[0])
        return y.mean(0), sd, y.amin(0), y.amax(0)
    n = observed.sum(0)
    mean = torch.where(observed, y, 0.0).sum(0) / n.clamp_min(1)
    dev = torch.where(observed, y - mean, 0.0)
    sd = (dev.square().sum(0) / (n - 1).clamp_min(1)).sqrt()
    lo = torch.where(observed, y, torch.inf).amin(0)
    hi = torch.where(observed, y, -torch.inf).amax(0)
    return mean, sd, lo, hi


def check_output_columns(y: torch.Tensor, output_dim: int | None, name: str) -> None:
    """Refuse targets ``(N,)`` / ``(N, P)`` whose number of columns is not the
    ``output_dim`` the model was trained with (None: not built yet, anything goes)."""
    out = 1 if y.ndim == 1 else y.shape[1]
    if output_dim is not None and out != output_dim:
        raise ValueError(
            f"{name} has {out} output column(s) but the model was trained with {output_dim}"
        )


def check_target_columns(
    y: torch.Tensor, *, likelihood: Any, output_dim: int | None, name: str
) -> torch.Tensor:
    """Targets ``y`` (already a tensor in the model's dtype) checked against the model's
    ``output_dim`` and its ``likelihood``: one column of labels or targets for a likelihood
    with several latents (unless it declares ``num_outputs``), then the likelihood's own
    :meth:`~latentgp.likelihoods.Likelihood.validate_targets`."""
    check_output_columns(y, output_dim, name)
    multi_output = getattr(likelihood, "num_outputs", None) is not None
    if likelihood.latent_dim > 1 and y.ndim != 1 and not multi_output:
        what = "class labels" if likelihood.task == "multiclass" else "targets"
        raise ValueError(
            f"{name} must be a 1-D array of {what} (one target column for the "
            f"{type(likelihood).__name__} likelihood), got shape {tuple(y.shape)}"
        )
    return likelihood.validate_targets(y, name)


def check_source(source: Any, input_dim: int | None) -> int:
    """Check an out-of-core source (``latentgp.datasets.ShardedArrays``) against a model
    trained with ``input_dim`` input columns (None: not built yet); returns its number of
    rows N."""
    if input_dim is not None and source.input_dim != input_dim:
        raise ValueError(
            f"the data has {source.input_dim} columns but the model was trained with "
            f"{input_dim} input dimensions"
        )
    return int(source.num_rows)
