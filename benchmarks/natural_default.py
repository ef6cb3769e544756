"""SVGP's default fit on more than ``FULL_BATCH_ROWS`` rows: minibatch Adam against
natural gradients on q(u) with Adam on the rest (issue 24, the evidence for the default).

For each set, fits of ``lg.SVGP(likelihood=...)`` (M = 128, its default) with no budget
(the convergence rule of :mod:`latentgp.training.convergence`), ``seed=0``:
``optimizer="adam"`` (lr 0.01, B = 1,024: the default before natural gradients) and
``optimizer="natural"`` at each ``--gammas`` natural step size (Adam at lr 0.01 on the
hyperparameters and Z, same minibatches); CPU seconds of the fitting process
(``time.process_time``, one thread), steps, why it stopped, and test NLPD.

    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/natural_default.py \
        [--sets elevators DoctorVisits flights_delay diamonds] [--gammas 0.1] [--quick]

Sets: uci/elevators split 0 (standardised as in ``time_to_accuracy.load``), the
DoctorVisits (Poisson) and diamonds (Gaussian, log price) splits of
``benchmarks/defaults.py``, and flights_delay: 10,000 nycflights13 flights drawn at random
(seed 0) from ``lg.datasets.load("flights")``'s training rows, y = arrival delay > 0
(Bernoulli), standardised inputs, 70/30 split.  ``--quick``: DoctorVisits only.
Prints a provenance line (commit, versions, CPU, threads, date) and one JSON line per fit;
``--out`` appends them to a file.  The page ``docs/results/natural_default.md`` is
written by hand from them.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np
from defaults import split
from machine import provenance
from sklearn.model_selection import train_test_split

import latentgp as lg


def _elevators():
    ds = lg.datasets.load("uci/elevators", split=0)
    ds, _, _ = lg.datasets.standardize(ds)
    return ds.X_train, ds.X_test, ds.y_train, ds.y_test, "gaussian"


def _flights_delay():
    ds = lg.datasets.load("flights", n_test=1, order="time")
    X, y = np.asarray(ds.X_train, dtype=np.float64), np.asarray(ds.y_train)
    idx = np.random.default_rng(0).choice(len(X), 10_000, replace=False)
    X, y = X[idx], (y[idx] > 0).astype(np.float64)
    X = (X - X.mean(0)) / X.std(0)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
    return Xtr, Xte, ytr, yte, "bernoulli"


def _from_defaults(name: str, likelihood: str):
    def load():
        Xtr, Xte, ytr, yte = split(name)
        return Xtr, Xte, ytr, yte, likelihood
    return load


SETS = {
    "elevators": _elevators,
    "DoctorVisits": _from_defaults("DoctorVisits", "poisson"),
    "flights_delay": _flights_delay,
    "diamonds": _from_defaults("diamonds", "gaussian"),
}


def one_fit(data, likelihood: str, **options) -> dict:
    Xtr, Xte, ytr, yte = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.process_time()
        model = lg.SVGP(likelihood=likelihood).fit(Xtr, ytr, seed=0, progress=False, **options)
        cpu = time.process_time() - t0
    h = model.history_
    nlpd = -float(np.mean(np.asarray(model.log_predictive_density(Xte, yte))))
    return {"cpu_s": round(cpu, 2), "steps": h.steps, "reason": h.reason,
            "optimizer": h.optimizer, "nlpd": round(nlpd, 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", nargs="*", default=list(SETS))
    ap.add_argument("--gammas", nargs="*", type=float, default=[0.1])
    ap.add_argument("--configs", nargs="*", default=["default", "adam", "natural"],
                    help="default: the fit with no options; adam; natural (per gamma)")
    ap.add_argument("--quick", action="store_true", help="DoctorVisits only")
    ap.add_argument("--out", default=None, help="append the JSON lines to this file")
    args = ap.parse_args()
    sets = ["DoctorVisits"] if args.quick else args.sets
    prov = provenance()
    line = json.dumps({"provenance": prov})
    print(line, flush=True)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write(line + "\n")
    for name in sets:
        *data, lik = SETS[name]()
        runs = []
        if "default" in args.configs:
            runs.append(("default", {}))
        if "adam" in args.configs:
            runs.append(("adam", {"optimizer": "adam"}))
        if "natural" in args.configs:
            runs += [(f"natural {g:g}", {"optimizer": "natural",
                                         "optimizer_kwargs": {"natural_lr": g}})
                     for g in args.gammas]
        for label, opts in runs:
            row = {"set": name, "likelihood": lik, "n_train": len(data[2]), "config": label,
                   **one_fit(data, lik, **opts), "commit": prov.get("commit"),
                   "date": prov.get("date")}
            line = json.dumps(row)
            print(line, flush=True)
            if args.out:
                with open(args.out, "a") as fh:
                    fh.write(line + "\n")


if __name__ == "__main__":
    main()
