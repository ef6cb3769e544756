"""Early stopping on held-out data, keeping the best parameters.

A training objective can keep improving while the model gets worse on new data: a
latent-input GP (SLGP) on 456 housing points drives its training NLL from 2.5 to -0.02 and
its test NLL from 2.5 to 18.9 in 5,000 steps (docs/results/modulated.md).  Pass an
:class:`EarlyStopping` in ``fit(..., callbacks=[...])``: every ``every`` steps it scores the
model on ``(X_val, y_val)`` by the mean log predictive density, stops training once
``patience`` scores in a row fail to beat the best by ``min_delta``, and when training ends
(stopped, converged or out of steps) puts back the parameters of the best score.

    stop = lg.training.EarlyStopping(X_val, y_val, every=100, patience=5)
    model.fit(X, y, max_steps=20_000, callbacks=[stop])
    stop.best_step, stop.best_score, stop.scores     # what happened

The parameters are restored at the end of each ``fit`` call, and the restore is recorded in
``model.history_.events``.  An interrupted fit (Ctrl-C) keeps the parameters of its last
step, as every interrupted fit does.  The scores are not checkpointed: a resumed fit starts
scoring afresh.  In data-parallel training every process scores the same held-out data with
the same parameters, so all make the same decision.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ..validation import check_positive_int


class EarlyStopping:
    """Callback: stop when the held-out log predictive density stops improving.

    Parameters
    ----------
    X_val, y_val: held-out inputs ``(N_val, D)`` and targets, in the units of the training
        data (whatever ``model.log_predictive_density`` accepts).
    every: steps between scores (the first score is taken after step 1, which also checks
        the held-out data against the model before any long training).
    patience: scores in a row without improvement before training stops.
    min_delta: improvement in mean log density (nats per point) that counts.
    restore_best: put back the parameters of the best score when training ends.
    relative_patience: training also goes on while the steps since the best score are
        fewer than this fraction of the best score's step (0: ``patience`` alone), so
        that the wait grows with the run, as the windows of the objective's convergence
        rule do (:mod:`latentgp.training.convergence`).
    """

    def __init__(
        self,
        X_val: Any,
        y_val: Any,
        every: int = 100,
        patience: int = 5,
        min_delta: float = 0.0,
        restore_best: bool = True,
        relative_patience: float = 0.0,
    ) -> None:
        self.every = check_positive_int(every, "every")
        self.patience = check_positive_int(patience, "patience")
        if not (isinstance(min_delta, (int, float)) and math.isfinite(min_delta)
                and min_delta >= 0):
            raise ValueError(f"min_delta must be a finite number >= 0, got {min_delta!r}")
        self.min_delta = float(min_delta)
        if not (isinstance(relative_patience, (int, float))
                and math.isfinite(relative_patience) and relative_patience >= 0):
            raise ValueError(
                f"relative_patience must be a finite number >= 0, got {relative_patience!r}"
            )
        self.relative_patience = float(relative_patience)
        self.restore_best = bool(restore_best)
        self.X_val, self.y_val = X_val, y_val
        #: ``(step, mean log predictive density)`` of every score taken
        self.scores: list[tuple[int, float]] = []
        self.best_score = -math.inf
        self.best_step: int | None = None
        #: the step after which this callback stopped training (None: it did not)
        self.stopped_step: int | None = None
        self._best_state: dict[str, torch.Tensor] | None = None
        self._misses = 0
        self._at_best = False

    @property
    def best_state(self) -> dict[str, torch.Tensor] | None:
        """A copy of the model's ``state_dict()`` at the best score (``None`` before the
        first score): what :meth:`finish` restores.  Treat it as read-only."""
        return self._best_state

    def score(self, model: Any) -> float:
        """Mean held-out log predictive density (``-inf`` if it is not finite)."""
        with torch.no_grad():
            lpd = np.asarray(model.log_predictive_density(self.X_val, self.y_val))
        value = float(lpd.mean())
        return value if math.isfinite(value) else -math.inf

    def __call__(self, info: dict) -> bool:
        step = info["step"]
        self._at_best = False  # the parameters moved on since the last best score
        if step != 1 and step % self.every:
            return False
        model = info["model"]
        value = self.score(model)
        self.scores.append((step, value))
        if value > self.best_score + self.min_delta or self.best_step is None:
            self.best_score, self.best_step, self._misses = value, step, 0
            self._best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            self._at_best = True
            return False
        self._misses += 1
        waited = step - self.best_step >= self.relative_patience * self.best_step
        if self._misses >= self.patience and waited:
            self.stopped_step = step
            return True
        return False

    def finish(self, info: dict) -> str | None:
        """Called by the training loop when a fit ends: restore the best parameters."""
        if not self.restore_best or self._best_state is None or self._at_best:
            return None
        info["model"].load_state_dict(self._best_state)
        return (
            f"early stopping: restored the parameters of step {self.best_step} (held-out "
            f"mean log density {self.best_score:.4g}; step {info['step']} was the last)"
        )
