"""ExactGP's iterative path (CG + SLQ, issue 26 part 3) against its Cholesky path.

On the first N training rows of ``uci/kin40k`` split 0 (D = 8, inputs and targets
standardised by the model), with the ARD RBF kernel's hyperparameters taken from a
Cholesky fit on the first ``--fit-n`` rows (L-BFGS, ``--fit-steps`` steps; the same
hyperparameters for every row), each row evaluates the log marginal likelihood of the N
points and its gradient (one ``objective`` + ``backward``, timed) and predicts the 4,000
test points (test RMSE in the targets' units):

* ``cholesky``: ``ExactGP(solver="cholesky")``, one dense factor;
* ``cg`` rows: ``ExactGP(solver="cg", iterative=...)`` with the options shown (CG
  ``tol``, preconditioner ``rank``, ``num_probes`` Rademacher probes, variances by LOVE).

Reported: the log marginal likelihood (targets' units), its difference from the Cholesky
row, seconds per evaluation with gradient, CG iterations of the evaluation, the peak
resident memory of the process after the row (the CG rows run first, so their peak is
their own), and the test RMSE.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/exact_at_scale.py [--n 10000] \
        [--fit-n 2000] [--fit-steps 30] [--cg-only-n 20000]
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/exact_at_scale.py --spread 1000 --seeds 6

Writes docs/results/exact_at_scale.json and .md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import time

import numpy as np
import torch
from machine import describe as describe_machine
from machine import stamp

import latentgp as lg
from latentgp import datasets

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(os.path.dirname(HERE), "docs", "results")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def evaluate(template, X, y, Xs, ys, solver, options=None) -> dict:
    """Log marginal, gradient time, RMSE of ``template``'s hyperparameters on ``(X, y)``."""
    m = template.clone()
    m.solver = solver
    if options is not None:  # predictive means only: no LOVE cache is built
        m.iterative = lg.ExactGP.Iterative(**{"variance": "cg", **options})
    m.set_data(X, y)
    Xt, yt = m.X_train, m.y_train
    m.zero_grad()
    t0 = time.perf_counter()
    obj = m.objective(Xt, yt, Xt.shape[0])
    obj.backward()
    seconds = time.perf_counter() - t0
    lml = float(obj.detach()) - Xt.shape[0] * float(m.y_scale.log().sum())
    info = dict(m.last_cg) if solver == "cg" else {}
    rss_eval = peak_rss_mb()
    t0 = time.perf_counter()
    with torch.no_grad():  # the predictive mean only: K(X*, X) alpha, alpha from the cache
        _, alpha = m.prediction_cache()
        Xst = torch.as_tensor(Xs, dtype=alpha.dtype)
        mean = torch.cat([m.kernel(Xst[i : i + 500], m.X_train) @ alpha
                          for i in range(0, Xst.shape[0], 500)])[:, 0]
        mean = (mean * m.y_scale + m.y_mean).numpy()
    predict_s = time.perf_counter() - t0
    rmse = float(np.sqrt(np.mean((mean - ys) ** 2)))
    return {
        "solver": solver, "options": options, "n": int(X.shape[0]), "lml": lml,
        "seconds_per_eval": seconds, "cg_iterations": info.get("iterations"),
        "cg_converged": info.get("converged"), "predict_seconds": predict_s,
        "test_rmse": rmse, "peak_rss_mb": rss_eval, "peak_rss_mb_after_predict": peak_rss_mb(),
    }


def run(n: int, fit_n: int, fit_steps: int, cg_only_n: int) -> dict:
    ds = datasets.load("uci/kin40k", 0)
    X, y, Xs, ys = ds.X_train, ds.y_train, ds.X_test, ds.y_test
    torch.manual_seed(0)
    t0 = time.perf_counter()
    template = lg.ExactGP(solver="cholesky").fit(X[:fit_n], y[:fit_n], max_steps=fit_steps,
                                                  seed=0)
    fit_s = time.perf_counter() - t0
    hyper = {
        "lengthscale": template.kernel.lengthscale.detach().reshape(-1).tolist(),
        "noise_variance_scaled": float(template.likelihood.variance.detach()),
    }
    rows = []
    for options in (
        {},  # the defaults: tol 1e-6, rank 100, 16 probes, LOVE variances
        {"rank": 500, "num_probes": 32},
    ):
        rows.append(evaluate(template, X[:n], y[:n], Xs, ys, "cg", options))
        print(json.dumps(rows[-1]), flush=True)
    if cg_only_n:
        rows.append(evaluate(template, X[:cg_only_n], y[:cg_only_n], Xs, ys, "cg", {}))
        print(json.dumps(rows[-1]), flush=True)
    rows.append(evaluate(template, X[:n], y[:n], Xs, ys, "cholesky"))
    print(json.dumps(rows[-1]), flush=True)
    ref = rows[-1]["lml"]
    for r in rows:
        if r["n"] == n:
            r["lml_minus_cholesky"] = r["lml"] - ref
            r["relative_difference"] = abs(r["lml"] - ref) / abs(ref)
    return {"dataset": "uci/kin40k split 0", "fit_n": fit_n, "fit_steps": fit_steps,
            "fit_seconds": fit_s, "hyperparameters": hyper, "rows": rows}


def slq_spread(n: int, seeds: int, hyper: dict, configs, first_seed: int = 0) -> dict:
    """Bias and spread of the SLQ ``log|K + s^2 I|`` over probe seeds at ``hyper``, on
    the first ``n`` rows, against the Cholesky value (same operator, ``tol`` 1e-6)."""
    from latentgp.linalg import cholesky, logdet_chol
    from latentgp.linalg_iterative import KernelOperator, slq_logdet

    ds = datasets.load("uci/kin40k", 0)
    m = lg.ExactGP(solver="cholesky").initialize(ds.X_train[:n], ds.y_train[:n], seed=0)
    m.kernel.lengthscale = torch.tensor(hyper["lengthscale"], dtype=torch.float64)
    s2 = hyper["noise_variance_scaled"]
    X = m.X_train
    with torch.no_grad():
        K = m.kernel(X) + s2 * torch.eye(n, dtype=X.dtype)
        exact = float(logdet_chol(cholesky(K, jitter=0.0)[0]))
        del K
        op, diag = KernelOperator(m.kernel, X, s2), m.kernel.diag(X)
        rows = []
        for rank, probes in configs:
            est = []
            for seed in range(first_seed, first_seed + seeds):
                e, r = slq_logdet(op, num_probes=probes, rank=rank, diag=diag, tol=1e-6,
                                  generator=torch.Generator().manual_seed(seed))
                est.append(float(e))
            a = np.array(est)
            rows.append({"rank": rank, "num_probes": probes, "mean_minus_exact":
                         float(a.mean() - exact), "sd": float(a.std(ddof=1)),
                         "cg_iterations": r.iterations, "seeds": seeds,
                         "first_seed": first_seed})
            print(json.dumps(rows[-1]), flush=True)
    return {"n": n, "seeds": seeds, "exact_logdet": exact, "rows": rows}


def write(res: dict, provenance: dict | None = None) -> None:
    """The .json (stamped now, unless ``provenance`` of a stored run is given) and .md."""
    if provenance is None:
        obj = stamp({"results": res})
        with open(os.path.join(RESULTS, "exact_at_scale.json"), "w") as fh:
            json.dump(obj, fh, indent=1)
        provenance = obj["provenance"]
    prov = provenance
    lines = [
        "# Exact GPs beyond a Cholesky (CG, SLQ, LOVE)",
        "",
        "Issue 26, part 3: `ExactGP(solver=\"cg\")` (conjugate gradients with a pivoted-"
        "Cholesky preconditioner, stochastic Lanczos quadrature for log|K|, chunked "
        "kernel products that never form an N x N matrix; see the user guide's \"Exact GPs "
        "on many points\") against `solver=\"cholesky\"` at the same hyperparameters.",
        "",
        f"Command: `{prov['command']}` (with `OMP_NUM_THREADS=1`). Machine: "
        f"{describe_machine()}, shared with other jobs during the run (load average about "
        "7 on 2 cores), so the times are upper bounds. Commit "
        f"`{prov['commit']}`, torch {prov['versions']['torch']}, {prov['date']}; raw "
        "numbers and provenance in `exact_at_scale.json`.",
        "",
        f"Data: the first N training rows of {res['dataset']} (D = 8), the 4,000 test "
        f"rows. Hyperparameters: a Cholesky fit on the first {res['fit_n']} rows "
        f"({res['fit_steps']} L-BFGS steps, {res['fit_seconds']:.0f} s), the same for "
        "every row. An evaluation is the log marginal likelihood and its gradient "
        "(objective + backward).",
        "",
        "| N | solver | options | log p(y) | minus Cholesky | relative | s per eval "
        "| CG iterations | test RMSE | mean s | peak RSS MB |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in res["rows"]:
        opts = "defaults" if r["options"] == {} else (
            ", ".join(f"{k}={v}" for k, v in (r["options"] or {}).items()) or "-")
        diff = r.get("lml_minus_cholesky")
        rel = r.get("relative_difference")
        lines.append(
            f"| {r['n']:,} | {r['solver']} | {opts} | {r['lml']:.3f} | "
            f"{'' if diff is None else f'{diff:+.3f}'} | "
            f"{'' if rel is None else f'{rel:.1e}'} | {r['seconds_per_eval']:.1f} | "
            f"{r['cg_iterations'] if r['cg_iterations'] is not None else '-'} | "
            f"{r['test_rmse']:.4f} | {r['predict_seconds']:.1f} | {r['peak_rss_mb']:.0f} |"
        )
    spread = res.get("slq_spread")
    if spread:
        lines += [
            "",
            "## Where the difference comes from: the SLQ estimate's spread",
            "",
            f"`log|K + s^2 I|` of the first {spread['n']:,} rows at the same "
            f"hyperparameters (Cholesky: {spread['exact_logdet']:.2f}), estimated over "
            "probe seeds (`--spread`; CG `tol` 1e-6):",
            "",
            "| rank | probes | seeds | mean minus Cholesky | standard error | sd over seeds "
            "| CG iterations |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for r in spread["rows"]:
            k = r.get("seeds", spread["seeds"])
            f0 = r.get("first_seed", 0)
            lines.append(f"| {r['rank']} | {r['num_probes']} | {f0}..{f0 + k - 1} | "
                         f"{r['mean_minus_exact']:+.2f} | {r['sd'] / math.sqrt(k):.2f} | "
                         f"{r['sd']:.2f} | {r['cg_iterations']} |")
        lines += [
            "",
            "The error is mostly Monte Carlo spread, which falls with the preconditioner's "
            "rank (the remainder `log(P^{-1/2} K P^{-1/2})` is smaller) and as "
            "1/sqrt(probes). The means also sit about 2.5 nats (0.12%) below the Cholesky "
            "value, 1.4 to 2.1 standard errors in the precise rows: a small negative bias "
            "that this session did not resolve (the full-Lanczos and full-rank tests are "
            "exact; in a check not recorded here, CG `tol` 1e-10 instead of 1e-6 changed "
            "the 300 x 64 mean by under 1e-9). kin40k's scaled noise is small "
            f"({res['hyperparameters']['noise_variance_scaled']:.4f}), so the remainder is "
            "large at rank 100 and the default options are far from the issue's 1e-4 "
            "agreement; predictive means agree (the RMSE column) because they need only "
            "the solve, not the log-determinant. At N = 3,000 the rank-500 preconditioner "
            "was both faster (61 CG iterations against 205) and closer than the defaults.",
        ]
    lines += NOTES
    with open(os.path.join(RESULTS, "exact_at_scale.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


NOTES = [
    "",
    "Peak RSS is the process's high-water mark after the row's evaluation; the CG rows "
    "run before the Cholesky row, so theirs do not include its N x N matrices (the data, "
    "the model and torch itself account for about 250 MB). \"mean s\": the predictive "
    "means of the 4,000 test points, including the solve for `alpha`.",
    "",
    "## Not run yet",
    "",
    "| row | why not |",
    "| --- | --- |",
    "| N = 10^4 of uci/kin40k split 0, CG against Cholesky (the issue's 1e-4 check) | "
    "one CG solve of the N = 10^4 problem at these hyperparameters did not finish in "
    "170 s on the shared machine (about a quarter of a core was ours), so an evaluation "
    "with gradient, times two option sets, would exceed the session's few-minute runs; "
    "the N = 3,000 rows and the spread study above show that the default options "
    "would not reach 1e-4 there anyway (the SLQ spread at rank 100 is tens of nats) |",
    "| N = 10^5 of uci/protein or uci/kin40k, trained (target: under 30 min, 0.5 GB per "
    "10^5 points, test RMSE at least SVGP M = 1,024's) | a training run at N = 10^5 is "
    "hours of the 2 shared cores' time (each CG iteration is 10^10 kernel entries); this "
    "session was limited to runs of a few minutes |",
    "| N = 2 x 10^5 synthetic | as above |",
    "| GPyTorch's exact GP at N = 2 x 10^4 and 10^5 (time per evaluation, final RMSE) "
    "| not installed in a peer environment yet; same time limit |",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--fit-n", type=int, default=2_000)
    ap.add_argument("--fit-steps", type=int, default=30)
    ap.add_argument("--cg-only-n", type=int, default=0,
                    help="also a CG row (defaults) at this many rows (0: none)")
    ap.add_argument("--spread", type=int, default=0,
                    help="only the SLQ spread study on this many rows, added to the .json")
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--configs", default="100x16,100x64,300x16",
                    help="preconditioner rank x probes of the spread study, comma-separated")
    ap.add_argument("--render", action="store_true",
                    help="rewrite the .md page from the stored .json without running")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 1,000 rows, hyperparameters from 300 rows in 5 steps; "
                    "printed, nothing written")
    args = ap.parse_args()
    if args.quick:
        res = run(1_000, 300, 5, 0)
        print(json.dumps(res, indent=1, default=str))
        return
    if args.render or args.spread:
        with open(os.path.join(RESULTS, "exact_at_scale.json")) as fh:
            stored = json.load(fh)
        if args.spread:  # adds the spread study to the stored run, with its own stamp
            configs = [tuple(int(v) for v in c.split("x")) for c in args.configs.split(",")]
            spread = slq_spread(args.spread, args.seeds, stored["results"]["hyperparameters"],
                                configs, args.first_seed)
            old = stored["results"].get("slq_spread")
            if old:  # a later run adds rows (each row records its seeds)
                for r in old["rows"]:
                    r.setdefault("seeds", old["seeds"])
                    r.setdefault("first_seed", 0)
                spread["rows"] = old["rows"] + spread["rows"]
                spread = stamp(spread, earlier=old.get("provenance"))
            else:
                spread = stamp(spread)
            stored["results"]["slq_spread"] = spread
            with open(os.path.join(RESULTS, "exact_at_scale.json"), "w") as fh:
                json.dump(stored, fh, indent=1)
        write(stored["results"], stored["provenance"])
        return
    res = run(args.n, args.fit_n, args.fit_steps, args.cg_only_n)
    write(res)


if __name__ == "__main__":
    main()
