"""Bayesian optimisation: latentgp's ExactGP in BoTorch against BoTorch's SingleTaskGP.

Issue 28's Done-when: Hartmann-6 and Branin, qLogNoisyExpectedImprovement with
``optimize_acqf``, 40 iterations after 10 Sobol points, seeds; latentgp's ExactGP wrapped
by ``latentgp.botorch.LatentGPModel`` should reach a median final regret within 1.2x of
``SingleTaskGP``'s, in the same run, with wall time reported for both.

All models see the same inputs (the problem's box mapped to the unit cube), the same
initial Sobol points per seed, the same acquisition settings (q = 1, ``--restarts``
restarts, ``--raw`` raw samples, 128 quasi-MC samples) and are refit from scratch at every
iteration:

- ``latentgp.default_model``: ``latentgp.botorch.default_model(X, y)``, latentgp's
  documented BO default, an ExactGP set up as BoTorch 0.18's ``SingleTaskGP`` is (ARD RBF,
  dimension-scaled lengthscale prior, noise prior and floor 1e-4, a learned constant mean,
  signal variance 1 on standardised targets), MAP fitted as BoTorch fits (scipy's
  L-BFGS-B on the hyperparameter values, the same starting values);
- ``latentgp.default_model(mean=zero)`` (``--models`` to include it): the same with the
  prior mean at the targets' mean, an ablation;
- ``latentgp.default_model(fitter=latentgp)`` (``--models`` to include it): the same model
  fitted by latentgp's own L-BFGS (on the softplus raw parameters), the previous default;
- ``latentgp.ExactGP`` (``--models`` to include it): ``ExactGP().fit(X, y)`` with its
  general-purpose defaults (zero mean on standardised targets, learned signal variance,
  maximum likelihood, noise floor 1e-6);
- ``botorch.SingleTaskGP``: ``SingleTaskGP(X, y)`` + ``fit_gpytorch_mll`` (its defaults);
- ``botorch.SingleTaskGP(cache_root=False)`` (``--models`` to include it): the same with
  qLogNEI's ``cache_root=False``, the Monte Carlo estimator that a wrapped latentgp model
  gets (BoTorch caches the baseline's root decomposition for its own models only).

Objectives are noise-free; the regret is the optimum minus the best value observed.

    .venv/bin/python benchmarks/bo_benchmark.py [--seeds 0 1 2] [--iterations 40]

Rows go to docs/results/bo_benchmark.jsonl (one per problem, model and seed, with
provenance; a rerun skips the rows present); docs/results/bo_benchmark.md summarises.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch
from botorch.acquisition.logei import qLogNoisyExpectedImprovement
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.optim import optimize_acqf
from botorch.sampling.normal import SobolQMCNormalSampler
from botorch.test_functions import Branin, Hartmann
from gpytorch.mlls import ExactMarginalLogLikelihood
from machine import describe as describe_machine
from machine import package_version, stamp

import latentgp as lg
from latentgp.botorch import LatentGPModel, default_model
from latentgp.linalg import CholeskyError

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(os.path.dirname(HERE), "docs", "results")
ROWS = os.path.join(RESULTS, "bo_benchmark.jsonl")
PROBLEMS = {
    "branin": lambda: Branin(negate=True),
    "hartmann6": lambda: Hartmann(dim=6, negate=True),
}


#: fits of a latentgp model that raised FloatingPointError (the fit restores the last good
#: parameters before raising; the benchmark goes on with them and counts the failure)
FIT_FAILURES: list[str] = []


def fit_or_restored(model, X, y):
    try:
        model.fit(X, y[:, 0])
    except FloatingPointError as err:
        FIT_FAILURES.append(str(err).split(";")[0])
    return LatentGPModel(model)


def fit_latentgp(X, y):
    return fit_or_restored(lg.ExactGP(), X, y)


def fit_latentgp_default(X, y, **options):
    """latentgp's BO default (``latentgp.botorch.default_model``, fitted by its default
    fitter, scipy's L-BFGS-B as BoTorch fits); a fit that raises is counted and the model
    kept at its starting values."""
    try:
        return default_model(X, y, **options)
    except (FloatingPointError, CholeskyError) as err:
        FIT_FAILURES.append(str(err).split(";")[0])
        return default_model(X, y, fit=False, **options)


def fit_latentgp_default_own_lbfgs(X, y):
    """The same model fitted by latentgp's own L-BFGS (``fitter="latentgp"``)."""
    return fit_or_restored(default_model(X, y, fit=False).wrapped, X, y)


def fit_singletask(X, y):
    model = SingleTaskGP(X, y)
    fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    return model


def fit_latentgp_default_zero_mean(X, y):
    """The same with the prior mean at the targets' mean (an ablation)."""
    return fit_latentgp_default(X, y, mean="zero")


MODELS = {
    "latentgp.default_model": fit_latentgp_default,
    "latentgp.default_model(mean=zero)": fit_latentgp_default_zero_mean,
    "latentgp.default_model(fitter=latentgp)": fit_latentgp_default_own_lbfgs,
    "latentgp.ExactGP": fit_latentgp,
    "botorch.SingleTaskGP": fit_singletask,
    "botorch.SingleTaskGP(cache_root=False)": fit_singletask,
}
#: acquisition options per model (default: qLogNEI's own): SingleTaskGP with the Monte
#: Carlo estimator a wrapped latentgp model gets (BoTorch caches the root decomposition of
#: the baseline posterior only for its own GPyTorch models), an ablation
ACQF_OPTIONS = {"botorch.SingleTaskGP(cache_root=False)": {"cache_root": False}}
#: the models a run includes unless --models says otherwise
DEFAULT_MODELS = ("latentgp.default_model", "botorch.SingleTaskGP")


def iterate(fit, X, y, evaluate, unit, args, acqf_options=None):
    """``args.iterations`` BO steps with the surrogate ``fit(X, y)``; returns the grown
    data and the fit / acquisition time."""
    fit_s = acq_s = 0.0
    for _ in range(args.iterations):
        t0 = time.perf_counter()
        surrogate = fit(X, y)
        t1 = time.perf_counter()
        acqf = qLogNoisyExpectedImprovement(
            surrogate, X_baseline=X, sampler=SobolQMCNormalSampler(torch.Size([128])),
            **(acqf_options or {}),
        )
        x, _ = optimize_acqf(
            acqf, bounds=unit, q=1, num_restarts=args.restarts, raw_samples=args.raw
        )
        t2 = time.perf_counter()
        fit_s, acq_s = fit_s + t1 - t0, acq_s + t2 - t1
        X, y = torch.cat([X, x]), torch.cat([y, evaluate(x)])
    return X, y, fit_s, acq_s


def run_one(problem: str, model: str, seed: int, args) -> dict:
    f = PROBLEMS[problem]()
    lo, hi = f.bounds[0].double(), f.bounds[1].double()
    d = lo.shape[0]
    unit = torch.stack([torch.zeros(d), torch.ones(d)]).double()

    def evaluate(x):
        return f(lo + x * (hi - lo)).unsqueeze(-1)

    X = torch.quasirandom.SobolEngine(d, scramble=True, seed=seed).draw(10).double()
    y = evaluate(X)
    fit_s = acq_s = 0.0
    FIT_FAILURES.clear()
    with torch.random.fork_rng():  # BoTorch's raw samples use the global generator
        torch.manual_seed(seed)
        X, y, fit_s, acq_s = iterate(MODELS[model], X, y, evaluate, unit, args,
                                     ACQF_OPTIONS.get(model))
    best = float(y.max())
    return {
        "problem": problem,
        "model": model,
        "seed": seed,
        "iterations": args.iterations,
        "restarts": args.restarts,
        "raw_samples": args.raw,
        "best": best,
        "regret": float(f.optimal_value) - best,
        "fit_s": fit_s,
        "acq_s": acq_s,
        "wall_s": fit_s + acq_s,
        "fit_failures": len(FIT_FAILURES),
    }


def load_rows() -> list[dict]:
    if not os.path.exists(ROWS):
        return []
    with open(ROWS) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def summarise(rows: list[dict]) -> None:
    lines = [
        "# Bayesian optimisation: latentgp's ExactGP against BoTorch's SingleTaskGP",
        "",
        "Command: `python benchmarks/bo_benchmark.py` (from the repository root, "
        "`.venv/bin/python`); one row per problem, model and seed with provenance in "
        "`bo_benchmark.jsonl`.",
        "",
        f"Machine: {describe_machine()}, torch {torch.__version__}, BoTorch "
        f"{package_version('botorch')}, float64.  qLogNEI (128 Sobol QMC samples), "
        "`optimize_acqf` with q = 1, every model refit from scratch at every iteration, "
        "10 Sobol points then the iterations below; noise-free objectives; regret = optimum "
        "minus the best value observed.",
        "",
        "| problem | model | seeds | iterations | median final regret | regrets by seed | "
        "median wall s (fit + acquisition) | failed fits |",
        "|---|---|---|---|---|---|---|---|",
    ]
    def of(problem, model):
        return sorted((r for r in rows if r["problem"] == problem and r["model"] == model),
                      key=lambda r: r["seed"])

    def median_regret(rs, seeds):
        return float(np.median([r["regret"] for r in rs if r["seed"] in seeds]))

    present = [m for m in MODELS if any(r["model"] == m for r in rows)]
    for problem in PROBLEMS:
        for model in present:
            rs = of(problem, model)
            if not rs:
                continue
            by_seed = ", ".join(f"{r['seed']}: {r['regret']:.3g}" for r in rs)
            wall = float(np.median([r["wall_s"] for r in rs]))
            failures = sum(r.get("fit_failures", 0) for r in rs)
            fit = float(np.median([r["fit_s"] for r in rs]))
            med = median_regret(rs, {r["seed"] for r in rs})
            lines.append(
                f"| {problem} | {model} | {len(rs)} | {rs[0]['iterations']} | {med:.4g} | "
                f"{by_seed} | {wall:.0f} ({fit:.0f} + {wall - fit:.0f}) | {failures} |"
            )
    lines += ["", "Ratio of median final regrets, latentgp / SingleTaskGP, over the seeds both "
              "finished (target <= 1.2, against `botorch.SingleTaskGP`):", ""]
    for problem in PROBLEMS:
        for ref_name in (m for m in present if m.startswith("botorch.")):
            ref = of(problem, ref_name)
            for name in (m for m in present if m.startswith("latentgp.")):
                ours = of(problem, name)
                seeds = {r["seed"] for r in ours} & {r["seed"] for r in ref}
                if not seeds:
                    continue
                a, b = median_regret(ours, seeds), median_regret(ref, seeds)
                ratio = a / b if b > 0 else float("inf") if a > 0 else 1.0
                against = "" if ref_name == "botorch.SingleTaskGP" else f" against {ref_name}"
                lines.append(f"- {problem}, {name}{against} ({len(seeds)} seeds): {a:.4g} / "
                             f"{b:.4g} = {ratio:.2f}")
    lines.append("")
    page = os.path.join(RESULTS, "bo_benchmark.md")
    kept = ""  # the hand-written sections after the table ("## ..." headings) stay
    if os.path.exists(page):
        with open(page) as fh:
            old = fh.read()
        if "\n## " in old:
            kept = "\n" + old[old.index("\n## ") + 1:]
    with open(page, "w") as fh:
        fh.write("\n".join(lines) + kept)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--restarts", type=int, default=5)
    ap.add_argument("--raw", type=int, default=256)
    ap.add_argument("--problems", nargs="+", default=list(PROBLEMS))
    ap.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), choices=list(MODELS))
    ap.add_argument("--quick", action="store_true",
                    help="seed 0, 3 iterations, small acquisition budget; writes nothing")
    args = ap.parse_args()
    if args.quick:
        args.iterations, args.restarts, args.raw = 3, 2, 32
        for problem in args.problems:
            for model in args.models:
                print(json.dumps(run_one(problem, model, 0, args)), flush=True)
        return
    rows = load_rows()
    done = {(r["problem"], r["model"], r["seed"], r["iterations"]) for r in rows}
    for seed in args.seeds:
        for problem in args.problems:
            for model in args.models:
                if (problem, model, seed, args.iterations) in done:
                    continue
                row = stamp(run_one(problem, model, seed, args))
                print(json.dumps({k: v for k, v in row.items() if k != "provenance"}), flush=True)
                rows.append(row)
                with open(ROWS, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
                summarise(rows)
    summarise(rows)


if __name__ == "__main__":
    main()
