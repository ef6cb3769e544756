"""QSGP's mean step on a few hundred rows (issue 23): the shipped ``mean_step="auto"``
(the gradient step below 1,000 rows) against the block-Newton step with its basis batch
shrunk to N / 4 (so that its variance-reduction anchor applies), with the exact GP for
scale.  One JSON line per fit on stdout: test NLPD, RMSE, steps, stop, CPU seconds.

    OMP_NUM_THREADS=1 python benchmarks/qsgp_small_data.py [--sets diabetes kin40k-800]

Sets: scikit-learn's diabetes (the defaults page's 70/30 split, ``random_state=0``);
seeded random subsets (800, 400, 100 rows) of uci/kin40k split 0's training rows, scored
on its first 5,000 test rows; 30 noisy rows of sin(2x).  The table in docs/design.md
("A limit for small data") was written by hand from this output.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split

import latentgp as lg

SETS = ("diabetes", "kin40k-800", "kin40k-400", "kin40k-100", "sin-30")
MODELS: dict[str, Callable[[int], Any]] = {
    "QSGP default": lambda n: lg.QSGP(),
    "QSGP Newton, basis batch N/4": lambda n: lg.QSGP(
        mean_step="newton", basis=lg.QSGP.Basis(batch=max(1, n // 4))),
    "ExactGP": lambda n: lg.ExactGP(),
}


def load(name: str) -> tuple[np.ndarray, ...]:
    """Training inputs, test inputs, training targets, test targets of one set."""
    if name == "diabetes":
        X, y = load_diabetes(return_X_y=True)
        return tuple(train_test_split(X, y, test_size=0.3, random_state=0))
    if name.startswith("kin40k-"):
        d = lg.datasets.load("uci/kin40k", split=0)
        idx = np.random.default_rng(0).choice(len(d.y_train), int(name[7:]), replace=False)
        return d.X_train[idx], d.X_test[:5000], d.y_train[idx], d.y_test[:5000]
    rng = np.random.default_rng(1)
    X = rng.uniform(-3, 3, (130, 1))
    y = np.sin(2 * X[:, 0]) + 0.2 * rng.standard_normal(130)
    return X[:30], X[30:], y[:30], y[30:]


def fit(name: str, label: str, data: tuple[np.ndarray, ...]) -> dict[str, Any]:
    Xtr, Xte, ytr, yte = data
    t = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = MODELS[label](len(ytr)).fit(Xtr, ytr, seed=0, progress=False)
    sec = time.process_time() - t
    mean, _ = m.predict_y(Xte)
    cfg = m.get_config()
    return {"set": name, "rows": len(ytr), "model": label,
            "nlpd": round(-float(np.mean(np.asarray(m.log_predictive_density(Xte, yte)))), 4),
            "rmse": round(float(np.sqrt(np.mean((np.asarray(mean) - yte) ** 2))), 4),
            "steps": m.history_.steps, "stop": m.history_.reason, "cpu_s": round(sec, 1),
            "mean_step": str(cfg.get("mean_step")), "basis": cfg.get("basis")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", nargs="*", default=list(SETS), choices=SETS)
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name in args.sets:
        data = load(name)
        for label in args.models:
            print(json.dumps(fit(name, label, data), default=str), flush=True)




if __name__ == "__main__":
    main()
