"""The automatic held-out stopping rule of a fit without a budget.

Some training objectives keep improving while the model gets worse on new data, so
"converged" on the objective is the wrong place to stop.  The latent-input GP (SLGP) is
the case in point: its three amortised encoder networks have no prior on their weights,
and on small data the bound rises while the test density falls.  On ``MASS/mcycle`` (93
rows) the default fit's training NLPD fell from 5.03 to 3.48 over 4,000 steps while its
test NLPD rose from 4.71 (step 300) to 6.41, the noise variance collapsing from 1.0 to
0.009 (standardised); after the 12,000-step ceiling the test NLPD was 75.6
(``docs/results/defaults.md``).

A model opts in through ``fit_defaults(N)["holdout"]``, a dict of the rule's settings
(:data:`HOLDOUT_DEFAULTS` fills the ones it leaves out).  A fit with arrays that names no
budget (``epochs``, ``max_steps``), no ``tol`` and no
:class:`~latentgp.training.EarlyStopping` of its own then

1. holds out ``clamp(ceil(fraction N), min_rows, max_rows)`` rows, but never more than
   half of them (``floor(N / 2)``), drawn by a permutation seeded with the fit's ``seed``
   (0 when None; the caller's random state is untouched); below ``fewest_rows`` (10)
   held-out rows there is no rule (N too small);
2. trains on the other rows with an :class:`~latentgp.training.EarlyStopping` on the
   held-out rows' mean log predictive density (a score every ``every`` = 50 steps; stop
   after ``patience`` = 4 scores without improvement once the steps since the best score
   are also at least ``relative_patience`` = 0.5 times the best score's step: the wait
   grows with the run, as the objective rule's windows do, and a stop costs at most
   about 1.5 times the steps of the best score when that is past step 400), under the
   usual objective rule and ceiling;
3. puts back the parameters of the best score, and records the rule in
   ``history_.holdout`` (rows held out, best step and score, every score) and in
   ``history_.events``.

The price is the held-out rows, which the final model does not train on.

Why 20 rows at least (``min_rows``; 10 before session 29): the best of some 20 scores of
a held-out mean over few rows is the luckiest of them as much as the best, and the
restored step is late. Over 20 fit seeds of the default SLGP on 90 rows of a
heteroscedastic toy and on ``MASS/mcycle``'s 93 training rows, 20 held-out rows against 10
gave a test NLPD of 0.380 against 0.421 (toy, mean; exact GP 0.241) and 4.734 against
4.754 (mcycle; exact GP 4.624), the worst seed 0.69 against 0.78
(``docs/results/holdout_rule.md``; ``docs/design.md``, "Held-out stopping: 20 rows at
least").
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .early_stopping import EarlyStopping
from .tasks import FitData

#: the settings of the rule (a model's ``fit_defaults(N)["holdout"]`` overrides them)
HOLDOUT_DEFAULTS: dict[str, Any] = {
    "fraction": 0.1,
    "min_rows": 20,
    "fewest_rows": 10,
    "max_rows": 2000,
    "every": 50,
    "patience": 4,
    "relative_patience": 0.5,
}


def holdout_rows(num_rows: int, settings: dict[str, Any]) -> int:
    """Rows the rule holds out of ``num_rows``: ``clamp(ceil(fraction N), min_rows,
    max_rows)`` capped at ``floor(N / 2)`` (as many left to train on), or 0 when that is
    fewer than ``min(fewest_rows, min_rows)``."""
    s = {**HOLDOUT_DEFAULTS, **settings}
    n = min(max(math.ceil(s["fraction"] * num_rows), s["min_rows"]), s["max_rows"])
    n = min(n, num_rows // 2)
    return n if n >= max(min(s["fewest_rows"], s["min_rows"]), 1) else 0


def applies(defaults: dict[str, Any], data: FitData, options: dict[str, Any],
            callbacks: Any) -> bool:
    """Whether the rule runs: the model asks for it, the data are arrays, and the fit
    names no budget, no ``tol`` and no early stopping of its own."""
    if "holdout" not in defaults or data.X is None:
        return False
    if any(options.get(k) is not None for k in ("epochs", "max_steps", "tol")):
        return False
    return not any(isinstance(cb, EarlyStopping) for cb in callbacks)


class Holdout:
    """The rule for one fit: the split (:meth:`split`) and its stopping callback."""

    def __init__(self, settings: dict[str, Any], num_rows: int, seed: int | None) -> None:
        self.settings = {**HOLDOUT_DEFAULTS, **settings}
        self.rows = holdout_rows(num_rows, self.settings)
        self.num_rows = num_rows
        self.seed = 0 if seed is None else int(seed)
        self.stop: EarlyStopping | None = None

    def indices(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Row indices ``(held, kept)`` on the CPU: the first :attr:`rows` of a permutation
        drawn by a private generator seeded with the fit's seed, and the rest."""
        g = torch.Generator(device="cpu")
        g.manual_seed(self.seed)
        perm = torch.randperm(self.num_rows, generator=g)
        return perm[: self.rows], perm[self.rows:]

    def split(self, data: FitData) -> FitData:
        """The training part of ``data`` (the held-out rows go to the callback)."""
        held, kept = (i.to(data.X.device) for i in self.indices())
        self.stop = EarlyStopping(
            data.X[held], data.y[held],
            every=self.settings["every"], patience=self.settings["patience"],
            relative_patience=self.settings["relative_patience"],
        )
        return FitData(data.X[kept], data.y[kept], None, self.num_rows - self.rows)

    def record(self) -> dict[str, Any]:
        """What ``history_.holdout`` holds: rows held out and trained on, the settings, the
        best step and its mean log predictive density, and every ``(step, score)``."""
        stop = self.stop
        return {
            "rows": self.rows,
            "train_rows": self.num_rows - self.rows,
            "every": self.settings["every"],
            "patience": self.settings["patience"],
            "relative_patience": self.settings["relative_patience"],
            "best_step": stop.best_step,
            "best_score": stop.best_score,
            "scores": list(stop.scores),
        }

    def event(self) -> str:
        return (
            f"held-out stopping: {self.rows} of {self.num_rows} rows held out (the model "
            f"trains on the other {self.num_rows - self.rows}); best held-out mean log "
            f"density {self.stop.best_score:.4g} at step {self.stop.best_step}"
        )
