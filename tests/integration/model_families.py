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
    """``make(**kw)`` builds the model (``kw``: constructor options such as ``device``);
    ``make_z(Z, **kw)`` (inducing-point families) builds it with given initial inducing
    inputs ``Z``; ``order``: why the fit depends on the order of
    the training rows (empty: it does not, given ``Z`` where ``make_z`` exists)."""

    name: str
    make: Callable[..., Any]
    task: str = "regression"
    fit: dict[str, Any] = field(default_factory=dict)
    sklearn: bool = False
    make_z: Callable[..., Any] | None = None
    order: str = ""

    def fitted(self, X: Any, y: Any, Z: Any = None, **kw: Any) -> Any:
        """A fresh model (with inducing inputs ``Z`` when given; ``kw``, e.g. ``device``,
        to its constructor) fitted to ``(X, y)`` with the family's seeded settings."""
        model = self.make(**kw) if Z is None else self.make_z(Z, **kw)
        if self.sklearn:
            return model.fit(X, y)
        return model.fit(X, y, seed=0, progress=False, **self.fit)

    def predict(self, model: Any, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Predictive mean and variance of y at ``X`` (class-1 probability and its
        Bernoulli variance for the classifier)."""
        if not self.sklearn:
            mean, var = model.predict_y(X)
            return np.asarray(mean), np.asarray(var)
        if self.task == "binary":
            p = model.predict_proba(X)[:, 1]
            return p, p * (1 - p)
        mean, std = model.predict(X, return_std=True)
        return np.asarray(mean), np.asarray(std) ** 2


def _sk():
    import latentgp.sklearn as sk

    return sk


MC = "Monte Carlo draws are made per row, so reordering rows reorders the draws"
KMEANS = (
    "the seeded k-means++ initialisation of the inducing inputs picks rows by index "
    "(internal, no Z argument)"
)

FAMILIES = [
    Family("ExactGP", lambda **kw: lg.ExactGP(**kw), fit={"max_steps": 30}),
    Family(
        "VFE",
        lambda **kw: lg.SparseGP(method="vfe", num_inducing=8, **kw),
        fit={"max_steps": 30},
        make_z=lambda Z, **kw: lg.SparseGP(method="vfe", Z=Z, **kw),
    ),
    Family(
        "FITC",
        lambda **kw: lg.SparseGP(method="fitc", num_inducing=8, **kw),
        fit={"max_steps": 30},
        make_z=lambda Z, **kw: lg.SparseGP(method="fitc", Z=Z, **kw),
    ),
    Family(
        "SoR",
        lambda **kw: lg.SparseGP(method="sor", num_inducing=8, **kw),
        fit={"max_steps": 30},
        make_z=lambda Z, **kw: lg.SparseGP(method="sor", Z=Z, **kw),
    ),
    Family(
        "SVGP",
        lambda **kw: lg.SVGP(num_inducing=8, **kw),
        fit={"max_steps": 60, "lr": 0.05},
        make_z=lambda Z, **kw: lg.SVGP(Z=Z, **kw),
    ),
    Family(
        "SAVIGP",
        lambda **kw: lg.SAVIGP(num_inducing=8, **kw),
        fit={"max_steps": 40, "lr": 0.05},
        make_z=lambda Z, **kw: lg.SAVIGP(Z=Z, **kw),
        order=MC,
    ),
    Family(
        "SEP",
        lambda **kw: lg.SEP(num_inducing=8, **kw),
        task="binary",
        fit={"max_steps": 20},
        make_z=lambda Z, **kw: lg.SEP(Z=Z, **kw),
    ),
    Family(
        "GFITC",
        lambda **kw: lg.GFITC(num_inducing=8, **kw),
        task="binary",
        fit={"max_steps": 15},
        make_z=lambda Z, **kw: lg.GFITC(Z=Z, **kw),
    ),
    Family("QSGP", lambda **kw: lg.QSGP(num_basis=40, **kw), fit={"max_steps": 60}),
    Family(
        "SHGP",
        lambda **kw: lg.SHGP(num_inducing=8, **kw),
        fit={"max_steps": 40, "lr": 0.05},
        make_z=lambda Z, **kw: lg.SHGP(Z=Z, **kw),
    ),
    Family(
        "SMGP",
        lambda **kw: lg.SMGP(2, num_inducing=8, **kw),
        fit={"max_steps": 40, "lr": 0.05},
        make_z=lambda Z, **kw: lg.SMGP(2, Z=Z, **kw),
        order=MC,
    ),
    Family(
        "SVHGP",
        lambda **kw: lg.SVHGP(num_inducing=8, **kw),
        fit={"max_steps": 40, "lr": 0.05},
        make_z=lambda Z, **kw: lg.SVHGP(Z=Z, **kw),
    ),
    Family(
        "SLGP",
        lambda **kw: lg.SLGP(num_inducing=8, hidden=(8,), **kw),
        fit={"max_steps": 40, "lr": 0.05},
        order=MC + "; its inducing inputs live in the "
        "encoding space and are initialised by k-means++ there",
    ),
    Family(
        "DeepGP",
        lambda **kw: lg.DeepGP(2, num_inducing=8, **kw),
        fit={"max_steps": 40, "lr": 0.05},
        order=MC + " (the samples through the layers)",
    ),
    Family("GPRegressor", lambda **kw: _sk().GPRegressor(max_steps=30, **kw), sklearn=True),
    Family(
        "GPClassifier",
        lambda **kw: _sk().GPClassifier(max_steps=30, **kw),
        task="binary",
        sklearn=True,
        order=KMEANS,
    ),
    Family(
        "GPCountRegressor",
        lambda **kw: _sk().GPCountRegressor(max_steps=30, **kw),
        task="count",
        sklearn=True,
        order=KMEANS,
    ),
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
