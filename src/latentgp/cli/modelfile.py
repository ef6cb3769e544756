"""Model files of the command line: the preprocessing record, input transform, metrics.

``latentgp fit`` saves a model with :func:`save_model_file`: the file is exactly what
:meth:`latentgp.GPModel.save` writes, plus a JSON string entry ``"preprocessing"`` that
holds the input standardisation, feature names, target name, class labels and the
training history.  :func:`latentgp.load` ignores the entry; :func:`load_model_file`
returns it.
"""

from __future__ import annotations

import json
import os
from typing import Any

from latentgp.cli.common import CLIError, jsonable

#: Key of the CLI's preprocessing record inside a model file's payload.
PREPROCESSING_KEY = "preprocessing"
PREPROCESSING_FORMAT = "latentgp-cli-preprocessing"
PREPROCESSING_VERSION = 1


def save_model_file(model: Any, path: str | os.PathLike, preprocessing: dict[str, Any]) -> None:
    """Save ``model`` like :meth:`GPModel.save`, with ``preprocessing`` stored in the file.

    The record is JSON text under the payload key ``"preprocessing"``; the rest of the
    file is exactly what ``model.save`` writes, so :func:`latentgp.load` reads it.
    """
    record = {
        "format": PREPROCESSING_FORMAT,
        "version": PREPROCESSING_VERSION,
        **{k: jsonable(v) for k, v in preprocessing.items()},
    }
    model.save(os.fspath(path), records={PREPROCESSING_KEY: json.dumps(record)})


def load_model_file(path: str | os.PathLike) -> tuple[Any, dict[str, Any]]:
    """Load a model file and its CLI preprocessing record (``{}`` when there is none)."""
    from latentgp.models import read_model_file

    model, records = read_model_file(path)  # the record verified with the rest, read once
    raw = records.get(PREPROCESSING_KEY)
    if not raw:
        return model, {}
    try:
        record = json.loads(raw)
    except (TypeError, ValueError, RecursionError):
        raise ValueError(f"{path}: the preprocessing record is not valid JSON") from None
    if not isinstance(record, dict) or record.get("format") != PREPROCESSING_FORMAT:
        raise ValueError(f"{path}: unrecognised preprocessing record")
    if record.get("version") != PREPROCESSING_VERSION:
        raise ValueError(
            f"{path}: preprocessing record version {record.get('version')} is not supported "
            f"(this latentgp reads version {PREPROCESSING_VERSION})"
        )
    return model, record


def standardizer_record(X_train: Any, *, enabled: bool = True) -> tuple[Any, Any]:
    """``(mean, scale)`` of the training inputs (``(None, None)`` when not ``enabled``)."""
    if not enabled:
        return None, None
    from latentgp.datasets import Standardizer

    s = Standardizer().fit(X_train)
    return s.mean_.reshape(-1), s.scale_.reshape(-1)


def apply_inputs(X: Any, record: dict[str, Any]) -> Any:
    """Apply the stored input standardisation (identity when there is none)."""
    import numpy as np

    mean, scale = record.get("x_mean"), record.get("x_scale")
    if mean is None or scale is None:
        return X
    mean, scale = np.asarray(mean, dtype=np.float64), np.asarray(scale, dtype=np.float64)
    if X.shape[1] != mean.shape[0]:
        raise CLIError(
            f"the data have {X.shape[1]} input column(s) but the model was trained on "
            f"{mean.shape[0]}"
        )
    return (X - mean) / scale


def compute_metrics(model: Any, X: Any, y: Any, *, prefix: str = "") -> dict[str, float]:
    """The metrics that apply to the model's task, on ``(X, y)`` (model input units).

    Regression and counts: ``rmse``, ``mae``, ``nlpd``; classification: ``error_rate``,
    ``nlp`` (from the predicted class probabilities) and ``nlpd``.
    """
    import torch

    from latentgp import metrics

    if X.shape[0] == 0:
        return {}
    torch.manual_seed(0)  # Monte Carlo predictions (softmax) are reproducible
    mean, _ = model.predict_y(X)
    lpd = model.log_predictive_density(X, y)
    out: dict[str, float] = {}
    if model.likelihood.task in ("binary", "multiclass"):
        out["error_rate"] = metrics.error_rate(y, mean)
        out["nlp"] = metrics.nlp_classes(y, mean)
    else:
        out["rmse"] = metrics.rmse(y, mean)
        out["mae"] = metrics.mae(y, mean)
    out["nlpd"] = metrics.nlpd(lpd)
    return {prefix + k: float(v) for k, v in out.items()}
