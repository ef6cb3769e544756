"""ExactGP.condition_on at N = 5,000 + 50: time against a new Cholesky, and equality.

Issue 28, item 2: ``condition_on(X_new, y_new)`` extends the cached factor of
``K + s^2 I`` by a rank-k block update (``linalg.cholesky_append``) instead of
refactorising; it must equal the model built on all the data with the same
hyperparameters to 1e-8 and take at most 10% of the time of a new Cholesky.

Data: GP draws (``lg.datasets.gp_draws``, D = 8, lengthscale 2, noise 0.1), ARD SE
kernel at its data-based initial values (``initialize``: no training is needed to time
a factorisation), float64.  Timed (best of ``--repeats``):

* ``condition_on``: the whole call (new model, block update, ``alpha``), from a model
  whose factor of the first N points is cached, and from a model updated once already
  (its factor, a ``linalg.BlockCholesky``, then has an appended tail);
* ``cholesky``: ``torch.linalg.cholesky`` of the (N + k) matrix alone (kernel matrix
  built beforehand, not timed);
* ``refit``: ``set_data`` on all the data and the prediction cache (kernel matrix,
  Cholesky, solve): what the model does without ``condition_on``.

Equality: the largest absolute differences between the two models' predictive means and
covariances at 200 test points (targets' units), and between the factors.

    .venv/bin/python benchmarks/exact_conditioning.py [--n 5000] [--k 50] [--repeats 5]

Writes docs/results/exact_conditioning.json and .md.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import time

import numpy as np
import torch
from machine import describe as describe_machine
from machine import stamp

import latentgp as lg

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(os.path.dirname(HERE), "docs", "results")


def best_time(fn, repeats: int, setup=lambda: None) -> tuple[float, object]:
    """Best wall time of ``fn(setup())`` over ``repeats`` runs (``setup`` untimed)."""
    best, out = float("inf"), None
    for _ in range(repeats):
        arg = setup()
        t0 = time.perf_counter()
        out = fn(arg)
        best = min(best, time.perf_counter() - t0)
    return best, out


def max_diffs(a, b, Xs) -> tuple[float, float]:
    (m1, C1), (m2, C2) = a.predict_f_full_cov(Xs), b.predict_f_full_cov(Xs)
    return float(np.abs(m1 - m2).max()), float(np.abs(C1 - C2).max())


def run(n: int, k: int, repeats: int) -> dict:
    X, y = lg.datasets.gp_draws(n + k + 201, input_dim=8, seed=0, lengthscale=2.0, noise=0.1)
    X, y = torch.as_tensor(X), torch.as_tensor(y)
    Xo, yo, Xn, yn = X[:n], y[:n], X[n : n + k], y[n : n + k]
    Xe, ye, Xs = X[n + k : n + k + 1], y[n + k : n + k + 1], X[n + k + 1 :]
    model = lg.ExactGP().initialize(Xo, yo)

    def fresh_factor():  # the cached factor of the first n points, as after a fit
        model.clear_prediction_cache()
        model.prediction_cache()
        return model

    t_first, new = best_time(lambda m: m.condition_on(Xn, yn), repeats, fresh_factor)

    def chain_start():  # a model updated once already (its factor has an appended tail)
        return fresh_factor().condition_on(Xe, ye)

    t_chain, chained = best_time(lambda m: m.condition_on(Xn, yn), repeats, chain_start)
    with torch.no_grad():
        Xa = torch.cat([Xo, Xn])
        K = model.kernel(Xa) + model.likelihood.variance * torch.eye(n + k, dtype=Xa.dtype)
    t_chol, L_ref = best_time(lambda A: torch.linalg.cholesky(A), repeats, lambda: K)

    def refit(ref):
        ref.set_data(Xa, torch.cat([yo, yn]))
        ref.prediction_cache()
        return ref

    t_refit, ref = best_time(refit, repeats, lambda: copy.deepcopy(model))
    ref_chain = copy.deepcopy(model).set_data(torch.cat([Xo, Xe, Xn]), torch.cat([yo, ye, yn]))
    mean_diff, cov_diff = max_diffs(new, ref, Xs)
    chain_mean_diff, chain_cov_diff = max_diffs(chained, ref_chain, Xs)
    return {
        "n": n,
        "k": k,
        "repeats": repeats,
        "condition_on_s": t_first,
        "chained_condition_on_s": t_chain,
        "cholesky_s": t_chol,
        "refit_s": t_refit,
        "ratio_to_cholesky": t_first / t_chol,
        "chained_ratio_to_cholesky": t_chain / t_chol,
        "ratio_to_refit": t_first / t_refit,
        "max_abs_mean_diff": mean_diff,
        "max_abs_cov_diff": cov_diff,
        "chained_max_abs_mean_diff": chain_mean_diff,
        "chained_max_abs_cov_diff": chain_cov_diff,
        "max_abs_factor_diff": float((new.prediction_cache()[0].dense() - L_ref).abs().max()),
        "threads": torch.get_num_threads(),
    }


def write(res: dict) -> None:
    os.makedirs(RESULTS, exist_ok=True)
    obj = stamp({"results": res})
    with open(os.path.join(RESULTS, "exact_conditioning.json"), "w") as fh:
        json.dump(obj, fh, indent=1)
    prov = obj["provenance"]
    lines = [
        "# ExactGP.condition_on: a rank-k update of the Cholesky factor",
        "",
        "Command: `python benchmarks/exact_conditioning.py` (from the repository root, "
        "`.venv/bin/python`); raw numbers and provenance in `exact_conditioning.json`.",
        "",
        f"Machine: {describe_machine()}, torch {torch.__version__}, float64, "
        f"{res['threads']} threads; commit {prov['commit']}, {prov['date']}.",
        "",
        f"N = {res['n']:,} cached points, k = {res['k']} new points, D = 8, ARD SE kernel; "
        f"best of {res['repeats']} runs each.",
        "",
        "| what | seconds | as a share of the new Cholesky |",
        "|---|---|---|",
        f"| `condition_on` from a fitted model (whole call) | {res['condition_on_s']:.3f} | "
        f"{100 * res['ratio_to_cholesky']:.1f}% |",
        f"| `condition_on` from a model updated once already | "
        f"{res['chained_condition_on_s']:.3f} | {100 * res['chained_ratio_to_cholesky']:.1f}% |",
        f"| `torch.linalg.cholesky` of the {res['n'] + res['k']:,} matrix alone | "
        f"{res['cholesky_s']:.3f} | 100% |",
        f"| `set_data` + prediction cache (kernel matrix, Cholesky, solve) | "
        f"{res['refit_s']:.3f} | {100 * res['refit_s'] / res['cholesky_s']:.0f}% |",
        "",
        "Against the model with the same hyperparameters built on all the data, at 200 test "
        "points: largest absolute difference of the predictive means "
        f"{res['max_abs_mean_diff']:.1e} (chained: {res['chained_max_abs_mean_diff']:.1e}), "
        f"of the covariances {res['max_abs_cov_diff']:.1e} "
        f"(chained: {res['chained_max_abs_cov_diff']:.1e}); of the Cholesky factors "
        f"{res['max_abs_factor_diff']:.1e} (target: 1e-8).",
        "",
    ]
    with open(os.path.join(RESULTS, "exact_conditioning.md"), "w") as fh:
        fh.write("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--k", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="N = 1000 + 20, once; writes nothing")
    args = ap.parse_args()
    res = run(1000, 20, 1) if args.quick else run(args.n, args.k, args.repeats)
    print(json.dumps(res, indent=1))
    if not args.quick:
        write(res)


if __name__ == "__main__":
    main()
