"""How many CG iterations an exact GP's evaluation takes on uci/protein, against N and rank.

Issue 26's full-protein exact run (41,157 training rows) did not finish its first
full-data evaluation in 35 CPU minutes.  This script measures why, with the record that
``conjugate_gradients`` keeps of every solve (``CGResult.residuals``):

* the hyperparameters of a Cholesky fit on 2,000 random training rows of uci/protein
  split 0 (inputs and targets standardised with the training statistics; the fit's
  defaults), the same for every row of the table;
* for each N (the first N rows of a fixed random permutation of the training rows) and
  preconditioner rank: one value-only evaluation's solve, ``[y, 16 probes]`` to CG's
  training tolerance (``ExactGP.Iterative().tol``, 1e-2), as the objective makes it
  (:func:`latentgp.linalg_iterative.iterative_log_marginal`): the iterations, the CPU
  seconds of the solve and per iteration, and the residual after 10, 25, 50, 100, ...
  iterations;
* at the full N, the CPU seconds of one product ``(K + s^2 I) V`` with V of 17 columns
  (the cost of one iteration), without a solve.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/exact_cg_record.py \\
        [--n 5000,10000,20000] [--ranks 256,1024] [--max-iter 400] [--quick]

Writes docs/results/exact_cg_record.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch
from machine import stamp

import latentgp as lg
from latentgp import datasets
from latentgp.linalg_iterative import KernelOperator

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(os.path.dirname(HERE), "docs", "results")
CHECKPOINTS = (10, 25, 50, 100, 200, 400, 800)


def hyperparameters(X, y, rows: int) -> lg.ExactGP:
    """A Cholesky fit (the library's defaults) on ``rows`` random training rows."""
    sub = np.random.default_rng(0).choice(X.shape[0], rows, replace=False)
    return lg.ExactGP(solver="cholesky").fit(X[sub], y[sub], seed=0, progress=False)


def solve_row(template: lg.ExactGP, X, y, rank: int, max_iter: int) -> dict:
    """One value-only evaluation's solve on ``(X, y)`` at ``template``'s hyperparameters."""
    m = template.clone()
    m.solver = "cg"
    m.iterative = lg.ExactGP.Iterative(rank=rank, max_iter=max_iter)
    m.set_data(X, y)
    Xt, yt = m.X_train, m.y_train
    c0 = time.process_time()
    with torch.no_grad():
        m.objective(Xt, yt, Xt.shape[0])
    cpu = time.process_time() - c0
    cg = m.last_cg
    record = cg["residuals"]
    return {
        "n": int(X.shape[0]), "rank": rank, "tol": m.iterative.tol,
        "num_probes": m.iterative.num_probes, "iterations": cg["iterations"],
        "converged": cg["converged"], "final_residual": cg["residual"],
        "cpu_seconds": cpu, "cpu_seconds_per_iteration": cpu / max(cg["iterations"], 1),
        "residual_at": {str(k): record[k - 1] for k in CHECKPOINTS if k <= len(record)},
        "record": record,
    }


def product_seconds(template: lg.ExactGP, X, y, columns: int = 17) -> float:
    """CPU seconds of one chunked product ``(K + s^2 I) V``, V ``(N, columns)``, on the
    model's training inputs as it stores them."""
    m = template.clone()
    m.solver = "cg"
    m.set_data(X, y)
    op = KernelOperator(m.kernel, m.X_train, m.likelihood.variance.detach())
    V = torch.randn(m.X_train.shape[0], columns, dtype=m.X_train.dtype,
                    generator=torch.Generator().manual_seed(0))
    c0 = time.process_time()
    with torch.no_grad():
        op.matmul(V)
    return time.process_time() - c0


def page(res: dict) -> str:
    p = res["provenance"]
    scales = ", ".join(f"{v:.3g}" for v in res["lengthscale"])
    marks = [k for k in CHECKPOINTS if any(str(k) in r["residual_at"] for r in res["rows"])]
    out = [
        "# CG iterations of an exact GP on uci/protein (issue 26)", "",
        f"Command: `{p['command']}` (commit {str(p['commit'])[:10]}, {p['date']}, "
        f"{p['cpu']}, threads {p['threads']}, versions {p['versions']}). Rows with the "
        "full record of residuals: `exact_cg_record.json`.", "",
        f"Hyperparameters: a Cholesky fit (library defaults) on {res['fit_rows']:,} random "
        f"training rows of uci/protein split 0 ({res['fit_steps']} steps, "
        f"{res['fit_cpu_seconds']:.0f} CPU s): lengthscales {scales}; "
        f"kernel variance {res['kernel_variance']:.3g}, noise {res['noise']:.3g} "
        "(standardised targets). Each row is one value-only evaluation's solve of "
        "`[y, 16 probes]` to the training tolerance, the first N rows of a fixed random "
        "permutation of the 41,157 training rows, one thread; CPU seconds.", "",
        "| N | rank | CG iterations | converged | CPU s | CPU s per iteration | "
        + " | ".join(f"residual after {k}" for k in marks) + " |",
        "|---:|---:|---:|---|---:|---:|" + "---:|" * len(marks),
    ]
    for r in res["rows"]:
        cells = [r["residual_at"].get(str(k)) for k in marks]
        out.append(
            f"| {r['n']:,} | {r['rank']} | {r['iterations']} | {r['converged']} | "
            f"{r['cpu_seconds']:.1f} | {r['cpu_seconds_per_iteration']:.2f} | "
            + " | ".join("-" if c is None else f"{c:.2g}" for c in cells) + " |")
    if res.get("full_product"):
        fp = res["full_product"]
        out += ["", f"One product `(K + s^2 I) V` at N = {fp['n']:,} (17 columns): "
                f"{fp['cpu_seconds']:.1f} CPU s."]
    notes = os.path.join(HERE, "exact_cg_record_notes.md")
    if os.path.exists(notes):
        out += ["", open(notes).read().rstrip()]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", default="5000,10000,20000")
    ap.add_argument("--ranks", default="256,1024")
    ap.add_argument("--max-iter", type=int, default=400)
    ap.add_argument("--fit-rows", type=int, default=2000)
    ap.add_argument("--no-full-product", action="store_true")
    ap.add_argument("--out", default=os.path.join(RESULTS, "exact_cg_record.md"))
    ap.add_argument("--render", action="store_true", help="rewrite the page from the JSON")
    ap.add_argument("--quick", action="store_true",
                    help="N = 1,000 and 2,000 at rank 64, 300 fit rows, no full product; "
                         "temporary folder")
    args = ap.parse_args()
    if args.quick:
        import tempfile

        args.n, args.ranks, args.fit_rows, args.no_full_product = "1000,2000", "64", 300, True
        args.out = os.path.join(tempfile.mkdtemp(), "exact_cg_record.md")
    json_path = os.path.splitext(args.out)[0] + ".json"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    if args.render:
        with open(json_path) as fh:
            res = json.load(fh)
        with open(args.out, "w") as fh:
            fh.write(page(res))
        return
    torch.set_num_threads(1)
    ds, _, _ = datasets.standardize(datasets.load("uci/protein", split=0))
    perm = np.random.default_rng(1).permutation(ds.X_train.shape[0])
    X, y = ds.X_train[perm], ds.y_train[perm]
    c0 = time.process_time()
    template = hyperparameters(X, y, args.fit_rows)
    res = {
        "dataset": "uci/protein split 0 (standardised)", "fit_rows": args.fit_rows,
        "fit_steps": template.history_.steps, "fit_cpu_seconds": time.process_time() - c0,
        "lengthscale": template.kernel.lengthscale.detach().reshape(-1).tolist(),
        "kernel_variance": float(template.kernel.variance.detach()),
        "noise": float(template.likelihood.variance.detach()), "rows": [],
    }
    print(json.dumps({k: v for k, v in res.items() if k != "rows"}), flush=True)

    def save() -> None:
        out = stamp(dict(res))
        with open(json_path, "w") as fh:
            json.dump(out, fh)
        with open(args.out, "w") as fh:
            fh.write(page(out))

    if not args.no_full_product:
        res["full_product"] = {"n": int(X.shape[0]),
                               "cpu_seconds": product_seconds(template, X, y)}
        print(json.dumps(res["full_product"]), flush=True)
        save()
    for n in [int(v) for v in args.n.split(",")]:
        for rank in [int(v) for v in args.ranks.split(",")]:
            row = solve_row(template, X[:n], y[:n], rank, args.max_iter)
            res["rows"].append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "record"}), flush=True)
            save()


if __name__ == "__main__":
    main()
