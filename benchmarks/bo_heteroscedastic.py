"""Bayesian optimisation of a noisy heteroscedastic objective: SHGP against SingleTaskGP.

Issue 28's Done-when, second run: what SHGP (input-dependent noise) gains over
``SingleTaskGP`` (one noise level) on a heteroscedastic objective, or that it does not.

Objective: Branin on the unit square, negated and divided by 50 (values in about
[-6, 0], three optima), observed with Gaussian noise of standard deviation
``0.02 + 0.5 x0``: the optimum near x0 = 0.12 sits in quiet data, the one near 0.96 in
noisy data.  Both models see the same Sobol start and noise draws per seed and the same
acquisition settings as ``bo_benchmark.py`` (qLogNEI, q = 1); SHGP is refit from scratch
at every iteration (``SHGP(min(20, N)).fit(X, y, max_steps=--shgp-steps)``), SingleTaskGP with
``fit_gpytorch_mll``.  Regret: the optimum minus the best *true* value among the
evaluated points.

    .venv/bin/python benchmarks/bo_heteroscedastic.py [--seeds 0 1] [--iterations 20]

Rows go to docs/results/bo_heteroscedastic.jsonl (with provenance); the page
docs/results/bo_heteroscedastic.md summarises.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
import torch
from bo_benchmark import RESULTS, fit_singletask, iterate
from botorch.test_functions import Branin
from machine import describe as describe_machine
from machine import package_version, stamp

import latentgp as lg
from latentgp.botorch import LatentGPModel

ROWS = os.path.join(RESULTS, "bo_heteroscedastic.jsonl")
BRANIN = Branin(negate=True)
LO, HI = BRANIN.bounds[0].double(), BRANIN.bounds[1].double()
OPTIMUM = float(BRANIN.optimal_value) / 50


def truth(x: torch.Tensor) -> torch.Tensor:
    return BRANIN(LO + x * (HI - LO)) / 50


def noise_sd(x: torch.Tensor) -> torch.Tensor:
    return 0.02 + 0.5 * x[..., 0]


def run_one(model: str, seed: int, args) -> dict:
    gen = torch.Generator().manual_seed(1000 + seed)  # the same noise draws for both models

    def evaluate(x):
        eps = torch.randn(x.shape[0], generator=gen, dtype=torch.float64)
        return (truth(x) + noise_sd(x) * eps).unsqueeze(-1)

    def fit_shgp(X, y):
        M = min(20, X.shape[0])  # at most one inducing input per point
        return LatentGPModel(lg.SHGP(M).fit(X, y[:, 0], max_steps=args.shgp_steps))

    fit = {"latentgp.SHGP": fit_shgp, "botorch.SingleTaskGP": fit_singletask}[model]
    X = torch.quasirandom.SobolEngine(2, scramble=True, seed=seed).draw(10).double()
    y = evaluate(X)
    unit = torch.stack([torch.zeros(2), torch.ones(2)]).double()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        X, y, fit_s, acq_s = iterate(fit, X, y, evaluate, unit, args)
    best_true = float(truth(X).max())
    return {
        "problem": "heteroscedastic_branin",
        "model": model,
        "seed": seed,
        "iterations": args.iterations,
        "shgp_steps": args.shgp_steps,
        "best_true": best_true,
        "regret": OPTIMUM - best_true,
        "fraction_in_quiet_half": float((X[10:, 0] < 0.5).double().mean()),
        "fit_s": fit_s,
        "acq_s": acq_s,
        "wall_s": fit_s + acq_s,
    }


def summarise(rows: list[dict]) -> None:
    lines = [
        "# Bayesian optimisation with heteroscedastic noise: SHGP against SingleTaskGP",
        "",
        "Command: `python benchmarks/bo_heteroscedastic.py` (from the repository root, "
        "`.venv/bin/python`); rows with provenance in `bo_heteroscedastic.jsonl`.",
        "",
        f"Machine: {describe_machine()}, torch {torch.__version__}, BoTorch "
        f"{package_version('botorch')}, float64.  Branin / 50 on the unit square with noise "
        "sd 0.02 + 0.5 x0; qLogNEI, q = 1, 10 Sobol points then the iterations below; "
        "regret on the true function at the best evaluated point.",
        "",
        "| model | seeds | iterations | median regret | regrets by seed | share of new points "
        "in the quiet half (x0 < 0.5) | median wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    for model in ("latentgp.SHGP", "botorch.SingleTaskGP"):
        rs = sorted((r for r in rows if r["model"] == model), key=lambda r: r["seed"])
        if not rs:
            continue
        by_seed = ", ".join(f"{r['seed']}: {r['regret']:.3g}" for r in rs)
        lines.append(
            f"| {model} | {len(rs)} | {rs[0]['iterations']} | "
            f"{np.median([r['regret'] for r in rs]):.4g} | {by_seed} | "
            f"{np.mean([r['fraction_in_quiet_half'] for r in rs]):.2f} | "
            f"{np.median([r['wall_s'] for r in rs]):.0f} |"
        )
    lines.append("")
    with open(os.path.join(RESULTS, "bo_heteroscedastic.md"), "w") as fh:
        fh.write("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--shgp-steps", type=int, default=500)
    ap.add_argument("--restarts", type=int, default=5)
    ap.add_argument("--raw", type=int, default=256)
    ap.add_argument("--quick", action="store_true",
                    help="seed 0, 3 iterations, 100 SHGP steps; writes nothing")
    args = ap.parse_args()
    if args.quick:
        args.iterations, args.shgp_steps, args.restarts, args.raw = 3, 100, 2, 32
        for model in ("latentgp.SHGP", "botorch.SingleTaskGP"):
            print(json.dumps(run_one(model, 0, args)), flush=True)
        return
    rows = []
    if os.path.exists(ROWS):
        with open(ROWS) as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
    done = {(r["model"], r["seed"], r["iterations"]) for r in rows}
    for seed in args.seeds:
        for model in ("latentgp.SHGP", "botorch.SingleTaskGP"):
            if (model, seed, args.iterations) in done:
                continue
            row = stamp(run_one(model, seed, args))
            print(json.dumps({k: v for k, v in row.items() if k != "provenance"}), flush=True)
            rows.append(row)
            with open(ROWS, "a") as fh:
                fh.write(json.dumps(row) + "\n")
            summarise(rows)
    summarise(rows)


if __name__ == "__main__":
    main()
