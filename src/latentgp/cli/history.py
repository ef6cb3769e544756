"""The training record that ``latentgp fit`` stores in a model file (``"history"``).

The objective per step (thinned to at most :data:`MAX_TRACE_POINTS` points), steps,
epochs, seconds, why training stopped, and with ``fit --eval-every K`` the test metrics
every K steps.  ``latentgp plot --kind objective / metrics`` draws them.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from latentgp.cli.modelfile import compute_metrics

#: Longest objective trace stored in a model file; longer runs are thinned evenly (the
#: first and last steps are always kept).
MAX_TRACE_POINTS = 5000
#: Largest sample of training rows for ``--eval-every`` when there is no test set.
EVAL_SAMPLE = 2000


class MetricTrace:
    """A ``fit`` callback recording :func:`compute_metrics` every ``every`` steps.

    The evaluation runs inside :func:`torch.random.fork_rng`, so training draws the same
    random numbers with and without a trace (the saved model is identical).
    """

    def __init__(self, X: Any, y: Any, every: int, on: str) -> None:
        self.X, self.y, self.every, self.on = X, y, int(every), on
        self.steps: list[int] = []
        self.values: dict[str, list[float]] = {}

    def record(self, step: int, model: Any) -> None:
        import torch

        if self.steps and self.steps[-1] == step:
            return
        with torch.random.fork_rng(devices=[]):
            metrics = compute_metrics(model, self.X, self.y)
        self.steps.append(int(step))
        for key, value in metrics.items():
            self.values.setdefault(key, []).append(float(value))

    def __call__(self, info: dict[str, Any]) -> bool:
        if int(info["step"]) % self.every == 0:
            self.record(int(info["step"]), info["model"])
        return False


def history_record(history: Any, trace: MetricTrace | None) -> dict[str, Any]:
    """The training record stored in the model file (key ``"history"`` of the CLI record).

    ``objective_steps`` / ``objective``: the training objective (higher is better) at each
    step, thinned to at most :data:`MAX_TRACE_POINTS`; ``steps``, ``epochs``, ``seconds``,
    ``stopped``, ``events`` as in :class:`latentgp.training.FitHistory`; ``eval`` (with
    ``--eval-every``): ``on`` ("test" or "train sample"), ``steps`` and one list per metric.
    """
    import numpy as np

    values = [float(v) for v in history.objective]
    steps = list(range(1, len(values) + 1))
    if len(values) > MAX_TRACE_POINTS:
        keep = np.unique(np.linspace(0, len(values) - 1, MAX_TRACE_POINTS).round().astype(int))
        steps = [steps[i] for i in keep]
        values = [values[i] for i in keep]
    out: dict[str, Any] = {
        "objective_steps": steps,
        "objective": [v if math.isfinite(v) else None for v in values],
        "steps": int(history.steps),
        "epochs": float(history.epochs),
        "seconds": float(history.seconds),
        "stopped": str(history.stopped),
        "events": [str(e) for e in history.events],
    }
    if trace is not None and trace.steps:
        out["eval"] = {"on": trace.on, "steps": trace.steps, **trace.values}
    return out


def metric_trace(
    args: argparse.Namespace, X_test: Any, y_test: Any, X_train: Any, y_train: Any
) -> MetricTrace | None:
    """The ``--eval-every`` callback (``None`` without the option)."""
    import numpy as np

    every = getattr(args, "eval_every", None)
    if not every:
        return None
    if X_test.shape[0]:
        return MetricTrace(X_test, y_test, every, "test")
    n = X_train.shape[0]
    idx = np.sort(np.random.default_rng(0).choice(n, size=min(n, EVAL_SAMPLE), replace=False))
    return MetricTrace(X_train[idx], y_train[idx], every, "train sample")

