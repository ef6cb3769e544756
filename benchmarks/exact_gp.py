"""Exact GP at N = 10^4 on 2 cores: fit time, one objective evaluation, prediction.

Issue 3, part 3: a Cholesky-based exact GP on 10^4 points fits in minutes, and prediction
reuses the factorisation.  Synthetic GP draws (D = 8, SE kernel, noise 0.1), ARD SE kernel,
L-BFGS with strong-Wolfe line search (the ExactGP default), float64, 2 threads.

    .venv/bin/python benchmarks/exact_gp.py [--sizes 2000 5000 10000] [--steps 30]

Reports per N: one objective + gradient evaluation (s), its GFLOP/s under the count
N^3/3 (Cholesky) + 2/3 N^3 (cholesky_inverse) + 2 N^3... (see below), the whole fit (s)
with the number of function evaluations, test RMSE / NLPD on 5,000 held-out draws, and
prediction throughput (first call includes the one Cholesky of the cache; later calls
reuse it).  Writes docs/results/exact_gp.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import numpy as np
import torch
from machine import describe as describe_machine

import latentgp as lg

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(os.path.dirname(HERE), "docs", "results")


def run(n: int, steps: int) -> dict:
    X, y = lg.datasets.gp_draws(n + 5000, input_dim=8, seed=0, lengthscale=2.0, noise=0.1)
    Xtr, ytr, Xte, yte = X[:n], y[:n], X[n:], y[n:]
    m = lg.ExactGP()
    m.initialize(Xtr, ytr)
    Xt = torch.as_tensor(Xtr)
    yt = m.scale_targets(ytr)
    # one objective + gradient evaluation
    t0 = time.perf_counter()
    obj = m.objective(Xt, yt, n)
    obj.backward()
    t_eval = time.perf_counter() - t0
    m.zero_grad()
    evals = [0]
    orig = m.objective

    def counted(*a, **k):
        evals[0] += 1
        return orig(*a, **k)

    m.objective = counted
    t0 = time.perf_counter()
    m.fit(Xtr, ytr, max_steps=steps, progress=False)
    t_fit = time.perf_counter() - t0
    m.objective = orig
    t0 = time.perf_counter()
    mean, var = m.predict_y(Xte)  # includes the cache's Cholesky
    t_pred_first = time.perf_counter() - t0
    t0 = time.perf_counter()
    mean, var = m.predict_y(Xte)
    t_pred = time.perf_counter() - t0
    lpd = m.log_predictive_density(Xte, yte)
    # dominant work of one evaluation: Cholesky N^3/3, cholesky_inverse 2N^3/3, the kernel
    # matrix and its gradient O(N^2 D) -> count N^3 flops
    return {
        "n": n,
        "eval_s": t_eval,
        "eval_gflops": n**3 / t_eval / 1e9,
        "fit_s": t_fit,
        "steps": m.history_.steps,
        "evals": evals[0],
        "rmse": float(np.sqrt(np.mean((mean - yte) ** 2))),
        "nlpd": float(-np.mean(lpd)),
        "pred_first_s": t_pred_first,
        "pred_pts_s": len(yte) / t_pred,
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2000, 5000, 10000])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--quick", action="store_true", help="N = 1000, 2000 and 5 steps")
    ap.add_argument("--out", default=os.path.join(RESULTS, "exact_gp.md"))
    args = ap.parse_args()
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    sizes, steps = ([1000, 2000], 5) if args.quick else (args.sizes, args.steps)
    rows = []
    for n in sizes:
        r = run(n, steps)
        rows.append(r)
        print(
            f"N={n}: eval {r['eval_s']:.2f} s ({r['eval_gflops']:.0f} GFLOP/s), fit "
            f"{r['fit_s']:.1f} s ({r['steps']} L-BFGS steps, {r['evals']} evaluations), "
            f"RMSE {r['rmse']:.4f} NLPD {r['nlpd']:.4f}, predict {r['pred_pts_s']:,.0f} pts/s "
            f"(first call {r['pred_first_s']:.2f} s), peak RSS {r['rss_mib']:,.0f} MiB",
            flush=True,
        )
    cmd = "python benchmarks/exact_gp.py" + (" --quick" if args.quick else "")
    lines = [
        "# Exact GP on up to 10^4 points",
        "",
        f"Command: `{cmd}` (from the repository root, `.venv/bin/python`).",
        "",
        f"Machine: {describe_machine()}, torch {torch.__version__}, "
        "float64, 2 threads. Data: GP draws, D = 8, lengthscale 2, noise 0.1; 5,000 test "
        "points. ExactGP defaults: ARD SE kernel, L-BFGS (strong Wolfe), targets "
        "standardised.",
        "",
        "One evaluation = kernel matrix, Cholesky, log marginal likelihood and its gradient "
        "(closed-form backward: one `cholesky_inverse`); GFLOP/s counts N^3 per evaluation.",
        "",
        "| N | one evaluation s | GFLOP/s | fit s | L-BFGS steps | evaluations | RMSE | NLPD "
        "| predict pts/s (cached factor) | first predict s | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['n']:,} | {r['eval_s']:.2f} | {r['eval_gflops']:.0f} | {r['fit_s']:.1f} | "
        f"{r['steps']} | {r['evals']} | {r['rmse']:.4f} | {r['nlpd']:.4f} | "
        f"{r['pred_pts_s']:,.0f} | {r['pred_first_s']:.2f} | {r['rss_mib']:,.0f} |"
        for r in rows
    ]
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
