"""Every public model family, small and seeded, for the tests that run them all (not a
test module): :mod:`test_invariances` and :mod:`test_training_diagnostics`.

Each :class:`Family` builds a fresh model and fits it with a fixed seed and a small
budget; ``task`` says which data it takes (``regression``: real targets;
``binary``: 0/1 labels; ``count``: non-negative integers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import latentgp as lg


@dataclass(frozen=True)
class Family:
    name: str
    make: Callable[[], Any]
    task: str = "regression"
    fit: dict[str, Any] = field(default_factory=dict)
    sklearn: bool = False

    def fitted(self, X: Any, y: Any) -> Any:
        """A fresh model fitted to ``(X, y)`` with the family's seeded settings."""
        model = self.make()
        if self.sklearn:
            return model.fit(X, y)
        return model.fit(X, y, seed=0, progress=False, **self.fit)


def _sk():
    import latentgp.sklearn as sk

    return sk


FAMILIES = [
    Family("ExactGP", lambda: lg.ExactGP(), fit={"max_steps": 30}),
    Family("VFE", lambda: lg.SparseGP(method="vfe", num_inducing=8), fit={"max_steps": 30}),
    Family("FITC", lambda: lg.SparseGP(method="fitc", num_inducing=8), fit={"max_steps": 30}),
    Family("SoR", lambda: lg.SparseGP(method="sor", num_inducing=8), fit={"max_steps": 30}),
    Family("SVGP", lambda: lg.SVGP(num_inducing=8), fit={"max_steps": 60, "lr": 0.05}),
    Family("SAVIGP", lambda: lg.SAVIGP(num_inducing=8), fit={"max_steps": 40, "lr": 0.05}),
    Family("SEP", lambda: lg.SEP(num_inducing=8), task="binary", fit={"max_steps": 20}),
    Family("GFITC", lambda: lg.GFITC(num_inducing=8), task="binary", fit={"max_steps": 15}),
    Family("QSGP", lambda: lg.QSGP(num_basis=40), fit={"max_steps": 60}),
    Family("SHGP", lambda: lg.SHGP(num_inducing=8), fit={"max_steps": 40, "lr": 0.05}),
    Family("SMGP", lambda: lg.SMGP(2, num_inducing=8), fit={"max_steps": 40, "lr": 0.05}),
    Family("SVHGP", lambda: lg.SVHGP(num_inducing=8), fit={"max_steps": 40, "lr": 0.05}),
    Family("SLGP", lambda: lg.SLGP(num_inducing=8, hidden=(8,)),
           fit={"max_steps": 40, "lr": 0.05}),
    Family("GPRegressor", lambda: _sk().GPRegressor(max_steps=30), sklearn=True),
    Family("GPClassifier", lambda: _sk().GPClassifier(max_steps=30), task="binary",
           sklearn=True),
    Family("GPCountRegressor", lambda: _sk().GPCountRegressor(max_steps=30), task="count",
           sklearn=True),
]
BY_NAME = {f.name: f for f in FAMILIES}


def family_data(task: str, n: int = 40, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(N, 2)`` inputs and targets for ``task`` from one smooth function plus noise."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, 2))
    f = np.sin(1.3 * X[:, 0]) + 0.4 * X[:, 1]
    if task == "binary":
        return X, (f + 0.3 * rng.standard_normal(n) > 0).astype(float)
    if task == "count":
        return X, rng.poisson(np.exp(0.8 * f)).astype(float)
    return X, f + 0.1 * rng.standard_normal(n)
