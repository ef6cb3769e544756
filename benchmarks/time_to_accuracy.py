"""Time to accuracy (issue 24): wall-clock training time until the test NLPD comes within
``--tol`` of the best value any library reached in the same run.

Each (library, optimiser) runs in its own worker process (``benchmarks/peers``; GPflow in
its own virtual environment) on the same data, initial inducing inputs and initial
hyperparameters (``svgp_performance.prepare``: k-means++ Z, lengthscales sqrt(D), signal
variance 1, noise 0.1) and the same minibatch sequence (B = 1,024); the harness
interleaves them in rounds of ``--chunk`` steps and evaluates the test NLPD after every
round (evaluations are not timed).  Configurations: Adam at lr 0.01 for every library;
natural gradients for q(u) with Adam on the rest — latentgp's ``optimizer="natural"``
(its default step size, and gamma 0.1), GPyTorch's ``NaturalVariationalDistribution`` +
``NGD`` (lr 0.1) and GPflow's ``NaturalGradient`` (gamma 0.1), the peers' recommended
minibatch settings.  Also timed: latentgp's default ``lg.SVGP(num_inducing=M).fit(X, y)``
(its own initialisation and stopping rule).

    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/time_to_accuracy.py \
        [--sets elevators kin40k protein] [--splits 0 1 2] [--M 256 1024] [--budget 120]

Writes docs/results/time_to_accuracy.md, .json (rows with provenance) and one figure of
NLPD against seconds per set and M.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any

import numpy as np
from machine import stamp
from svgp_performance import ROOT, Worker, prepare

import latentgp as lg

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(ROOT, "docs", "results")
B, LR = 1024, 0.01

#: (label, worker, setup options)
CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("latentgp Adam", "latentgp", {"optimizer": "adam"}),
    ("latentgp natural (gamma 0.1)", "latentgp", {"optimizer": "ngd", "ngd_lr": 0.1}),
    ("latentgp natural, alternating (gamma 0.1)", "latentgp",
     {"optimizer": "ngd", "ngd_lr": 0.1, "ngd_alternate": True}),
    ("GPyTorch Adam", "GPyTorch", {"optimizer": "adam"}),
    ("GPyTorch NGD (0.1)", "GPyTorch", {"optimizer": "ngd", "ngd_lr": 0.1}),
    ("GPflow Adam", "GPflow", {"optimizer": "adam"}),
    ("GPflow NaturalGradient (0.1)", "GPflow", {"optimizer": "ngd", "ngd_lr": 0.1}),
]
#: hand-written reading of the committed run (diagnoses, caveats), appended to the page
NOTES_FILE = os.path.join(HERE, "time_to_accuracy_notes.md")
CLOCK_WORDS = {"cpu": "CPU seconds of the worker process, all its threads",
               "wall": "wall-clock seconds"}
#: which per-step times of a worker's reply a clock sums
CLOCK = {"cpu": "cpu_times", "wall": "times"}
SCRIPTS = {"latentgp": "latentgp_worker.py", "GPyTorch": "gpytorch_worker.py",
           "GPflow": "gpflow_worker.py"}


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


def load(name: str, split: int) -> tuple[np.ndarray, ...]:
    ds = lg.datasets.load(f"uci/{name}", split=split)
    ds, _, _ = lg.datasets.standardize(ds)
    return ds.X_train, ds.y_train, ds.X_test, ds.y_test


def race(path: str, configs, gpflow_py, *, budget: float, chunk: int,
         clock: str = "cpu") -> dict[str, Any]:
    """Interleave the configurations on the prepared data until each has trained for
    ``budget`` seconds of ``clock`` (``"cpu"``: the worker process's CPU time, all its
    threads; ``"wall"``); curves of (cumulative training seconds, wall seconds, steps,
    test NLPD)."""
    live, curves, skipped = [], {}, []
    for label, worker, opts in configs:
        w = start(worker, gpflow_py)
        if w is None:
            skipped.append(label)
            continue
        try:
            w.call(cmd="setup", data=path, dtype="float64", lr=LR, threads=1, **opts)
        except RuntimeError as err:
            skipped.append(f"{label} ({err})")
            w.close()
            continue
        live.append((label, w))
        first = w.call(cmd="eval")
        curves[label] = {"seconds": [0.0], "wall": [0.0], "steps": [0], "nlpd": [first["nlpd"]]}
    while live:
        for label, w in list(live):
            c = curves[label]
            out = w.call(cmd="train", steps=chunk)
            c["seconds"].append(c["seconds"][-1] + float(np.sum(out[CLOCK[clock]])))
            c["wall"].append(c["wall"][-1] + float(np.sum(out["times"])))
            c["steps"].append(c["steps"][-1] + chunk)
            nl = w.call(cmd="eval")["nlpd"]
            c["nlpd"].append(nl if np.isfinite(nl) else float("inf"))
            if c["seconds"][-1] >= budget or not np.isfinite(nl):
                w.close()
                live.remove((label, w))
    return {"curves": curves, "skipped": skipped}


def first_time_below(curve: dict[str, list], level: float) -> float | None:
    for s, v in zip(curve["seconds"], curve["nlpd"], strict=True):
        if v <= level:
            return s
    return None


def default_fit(X, y, Xte, yte, M: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    model = lg.SVGP(num_inducing=M).fit(X, y, seed=0, progress=False)
    seconds = time.perf_counter() - t0
    nlpd = -float(np.mean(np.asarray(model.log_predictive_density(Xte, yte))))
    return {"seconds": seconds, "nlpd": nlpd, "steps": model.history_.steps,
            "reason": model.history_.reason}


def one(name: str, split: int, M: int, args, gpflow_py) -> dict[str, Any]:
    X, y, Xte, yte = load(name, split)
    budget = args.budget if M < 1024 or args.budget_large is None else args.budget_large
    steps = int(budget / 0.002) + args.chunk  # more minibatches than any run takes
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.npz")
        prepare(path, X, y, Xte, yte, M, min(B, X.shape[0]), min(steps, 200_000))
        configs = [c for c in CONFIGS if not args.configs or c[0] in args.configs]
        result = race(path, configs, gpflow_py, budget=budget, chunk=args.chunk,
                      clock=args.clock)
    curves = result["curves"]
    best = min(min(c["nlpd"]) for c in curves.values())
    level = best + args.tol
    reach = {k: first_time_below(c, level) for k, c in curves.items()}
    dflt = default_fit(X, y, Xte, yte, M) if args.default else None
    return {"set": name, "split": split, "M": M, "n_train": int(X.shape[0]),
            "best_nlpd": best, "level": level, "time_to_level": reach,
            "final_nlpd": {k: c["nlpd"][-1] for k, c in curves.items()},
            "curves": curves, "skipped": result["skipped"], "default_fit": dflt}


def _fmt(t: float | None) -> str:
    return "not reached" if t is None else f"{t:.1f}"


def page(rows: list[dict[str, Any]], args, command: str | None = None) -> str:
    labels = [c[0] for c in CONFIGS]
    command = command or " ".join(["python", *sys.argv])
    out = [
        "# Time to accuracy (issue 24)", "",
        "Written by `benchmarks/time_to_accuracy.py` (provenance in `time_to_accuracy.json`).",
        f"Command: `{command}`.", "",
        f"Seconds of training ({CLOCK_WORDS[getattr(args, 'clock', 'wall')]}; "
        "evaluations untimed) until the test NLPD comes within "
        f"{args.tol} nats of the best value any configuration reached in the same run, "
        f"interleaved in rounds of {args.chunk} steps, each configuration for "
        f"{args.budget:g} s of training"
        + ("" if getattr(args, "budget_large", None) is None
           else f" ({args.budget_large:g} s at M = 1,024)")
        + "; B = 1,024, float64, one thread per worker, the "
        "same data, initial Z and hyperparameters and minibatch sequence for all; "
        "standardised UCI splits. The last column is latentgp's default "
        "`lg.SVGP(num_inducing=M).fit(X, y)` (its own initialisation and stopping rule): "
        "seconds, test NLPD and why it stopped.", "",
        "| set | split | M | best NLPD | " + " | ".join(labels) + " | default fit |",
        "|---|---:|---:|---:|" + "---:|" * len(labels) + "---|",
    ]
    for r in rows:
        cells = [_fmt(r["time_to_level"].get(lab)) if lab in r["time_to_level"] else "skipped"
                 for lab in labels]
        d = r["default_fit"]
        dcell = "not run" if d is None else f"{d['seconds']:.1f} s, {d['nlpd']:.3f}, {d['reason']}"
        out.append(f"| {r['set']} | {r['split']} | {r['M']} | {r['best_nlpd']:.3f} | "
                   + " | ".join(cells) + f" | {dcell} |")
    out += ["", *(f"![{r['set']} split {r['split']} M {r['M']}]"
                  f"(tta_{r['set']}_s{r['split']}_M{r['M']}.png)" for r in rows)]
    if NOTES_FILE and os.path.exists(NOTES_FILE):
        with open(NOTES_FILE) as fh:
            out += ["", fh.read().rstrip()]
    return "\n".join(out) + "\n"


def plot(rows: list[dict[str, Any]], out_dir: str) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    files = []
    for r in rows:
        fig, ax = plt.subplots(figsize=(6, 4))
        for label, c in r["curves"].items():
            ax.plot(np.maximum(c["seconds"], 1e-2), c["nlpd"], label=label)
        ax.axhline(r["level"], color="k", lw=0.8, ls=":")
        ax.set_xscale("log")
        lo = r["best_nlpd"]
        ax.set_ylim(lo - 0.05, lo + 0.6)
        ax.set_xlabel("training seconds")
        ax.set_ylabel("test NLPD")
        ax.set_title(f"{r['set']} split {r['split']}, M = {r['M']}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        name = f"tta_{r['set']}_s{r['split']}_M{r['M']}.png"
        fig.savefig(os.path.join(out_dir, name), dpi=90)
        plt.close(fig)
        files.append(name)
    return files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", nargs="*", default=["elevators", "kin40k", "protein"])
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
    ap.add_argument("--tol", type=float, default=0.01)
    ap.add_argument("--no-default", dest="default", action="store_false")
    ap.add_argument("--gpflow-python", default=None)
    ap.add_argument("--out", default=os.path.join(RESULTS, "time_to_accuracy.md"))
    ap.add_argument("--quick", action="store_true",
                    help="elevators split 0, M = 64, 5 s each; page in a temporary folder")
    ap.add_argument("--render", default=None,
                    help="rebuild the page (and figures) from this JSON of a run; no fits")
    args = ap.parse_args()
    if args.render:
        with open(args.render) as fh:
            run = json.load(fh)
        for k, v in run["args"].items():
            if k not in ("render", "out"):
                setattr(args, k, v)
        plot(run["rows"], os.path.dirname(args.out))
        with open(args.out, "w") as fh:
            fh.write(page(run["rows"], args, command=run["provenance"].get("command")))
        return
    if args.quick:
        args.sets, args.splits, args.M, args.budget, args.chunk = ["elevators"], [0], [64], 5, 10
        args.out = os.path.join(tempfile.mkdtemp(), "time_to_accuracy.md")
    gpflow_py = gpflow_python(args.gpflow_python)
    rows = []
    for name in args.sets:
        for split in args.splits:
            for M in args.M:
                rows.append(one(name, split, M, args, gpflow_py))
                r = rows[-1]
                print(r["set"], r["split"], r["M"], {k: _fmt(v) for k, v in
                                                     r["time_to_level"].items()},
                      r["default_fit"], flush=True)
                out_dir = os.path.dirname(args.out)
                with open(os.path.splitext(args.out)[0] + ".json", "w") as fh:
                    json.dump(stamp({"rows": rows, "args": vars(args)}), fh, default=str)
                plot(rows, out_dir)
                with open(args.out, "w") as fh:
                    fh.write(page(rows, args))


if __name__ == "__main__":
    main()
