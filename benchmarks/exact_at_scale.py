"""ExactGP's iterative path (CG + SLQ, issue 26 part 3) against its Cholesky path.

On the first N training rows of ``uci/kin40k`` split 0 (D = 8, inputs and targets
standardised by the model), with the ARD RBF kernel's hyperparameters taken from a
Cholesky fit on the first ``--fit-n`` rows (L-BFGS, ``--fit-steps`` steps; the same
hyperparameters for every row), each row evaluates the log marginal likelihood of the N
points and its gradient (one ``objective`` + ``backward``, timed) and predicts the 4,000
test points (test RMSE in the targets' units):

* ``cholesky``: ``ExactGP(solver="cholesky")``, one dense factor (up to N = 10,000);
* ``cg`` rows: ``ExactGP(solver="cg")`` with the options of :func:`row_options` (CG
  ``tol`` 1e-6, 16 Rademacher probes, preconditioner rank ``min(1000, 2^25 / N)``: the
  defaults when the page was measured), one row per probe
  seed, so the spread of the stochastic log-determinant shows;
* ``gpytorch`` rows (``--gpytorch-n``): GPyTorch's exact GP at the same hyperparameters
  (``peers/gpytorch_exact_runner.py`` in GPyTorch's venv).

Reported: the log marginal likelihood (targets' units), its difference from the Cholesky
row, CPU and wall seconds per evaluation with gradient, CG iterations and preconditioner
rank of the evaluation, the peak resident memory of the process after the row (the CG
rows run first, so their peak is their own), and the test RMSE.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/exact_at_scale.py [--n 3000,10000] \
        [--seeds 3] [--gpytorch-n 20000]

Writes docs/results/exact_at_scale.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

import numpy as np
import torch
from exact_at_scale_page import write
from machine import stamp

import latentgp as lg
from latentgp import datasets

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(os.path.dirname(HERE), "docs", "results")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def evaluate(template, X, y, Xs, ys, solver, options=None, predict=True,
             gradient=True) -> dict:
    """Log marginal, gradient time, RMSE of ``template``'s hyperparameters on ``(X, y)``
    (``gradient=False``: the value only, without autograd's N x N intermediates)."""
    m = template.clone()
    m.solver = solver
    if options is not None:  # predictive means only: no LOVE cache is built
        m.iterative = lg.ExactGP.Iterative(**{"variance": "cg", **options})
    m.set_data(X, y)
    Xt, yt = m.X_train, m.y_train
    m.zero_grad()
    t0, c0 = time.perf_counter(), time.process_time()
    with torch.set_grad_enabled(gradient):
        obj = m.objective(Xt, yt, Xt.shape[0])
    if gradient:
        obj.backward()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    lml = float(obj.detach()) - Xt.shape[0] * float(m.y_scale.log().sum())
    info = dict(m.last_cg) if solver == "cg" else {}
    rss_eval = peak_rss_mb()
    row = {
        "solver": solver, "options": options, "n": int(X.shape[0]), "lml": lml,
        "seconds_per_eval": seconds, "cpu_seconds_per_eval": cpu,
        "cg_iterations": info.get("iterations"), "cg_converged": info.get("converged"),
        "rank": info.get("rank"), "peak_rss_mb": rss_eval, "gradient": gradient,
    }
    if predict:
        t0 = time.perf_counter()
        with torch.no_grad():  # the predictive mean only: K(X*, X) alpha, alpha from the cache
            _, alpha = m.prediction_cache()
            Xst = torch.as_tensor(Xs, dtype=alpha.dtype)
            mean = torch.cat([m.kernel(Xst[i : i + 500], m.X_train) @ alpha
                              for i in range(0, Xst.shape[0], 500)])[:, 0]
            mean = (mean * m.y_scale + m.y_mean).numpy()
        row["predict_seconds"] = time.perf_counter() - t0
        row["test_rmse"] = float(np.sqrt(np.mean((mean - ys) ** 2)))
        row["peak_rss_mb_after_predict"] = peak_rss_mb()
    return row


def gpytorch_row(template, X, y, Xs, ys, dtype: str) -> dict:
    """GPyTorch's exact GP at ``template``'s hyperparameters (``peers/gpytorch_exact_runner.py``
    in the GPyTorch venv, ``$GPYTORCH_PYTHON``, default /work/venvs/gpytorch)."""
    import subprocess
    import tempfile

    python = os.environ.get("GPYTORCH_PYTHON", "/work/venvs/gpytorch/bin/python")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.npz")
        np.savez(path, X_train=X, y_train=y, X_test=Xs, y_test=ys,
                 lengthscale=template.kernel.lengthscale.detach().numpy(),
                 variance=float(template.kernel.variance.detach()),
                 noise=float(template.likelihood.variance.detach()),
                 y_mean=float(template.y_mean[0]), y_scale=float(template.y_scale[0]))
        out = subprocess.run(
            [python, os.path.join(HERE, "peers", "gpytorch_exact_runner.py"), path,
             "--dtype", dtype], capture_output=True, text=True, check=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"})
    return json.loads(out.stdout.strip().splitlines()[-1])


def row_options(n: int, seed: int) -> dict:
    """The CG rows' options: the defaults when this page was measured (``tol`` 1e-6 for
    training and prediction, rank ``min(1000, 2^25 / N)``), named explicitly since the
    library's defaults changed (``exact_trained.py``'s regime: ``tol`` 1e-2,
    ``predict_tol`` 1e-4, rank ``min(1000, N, max(256, 2^23 / N))``)."""
    return {"seed": seed, "tol": 1e-6, "predict_tol": 1e-6, "rank": min(1000, 2**25 // n)}


def run(ns, fit_n: int, fit_steps: int, seeds: int, gpytorch_ns=(), gpytorch_dtype="float32",
        cholesky_max: int = 10_000) -> dict:
    ds = datasets.load("uci/kin40k", 0)
    X, y, Xs, ys = ds.X_train, ds.y_train, ds.X_test, ds.y_test
    torch.manual_seed(0)
    t0 = time.perf_counter()
    template = lg.ExactGP(solver="cholesky").fit(X[:fit_n], y[:fit_n], max_steps=fit_steps,
                                                  seed=0)
    fit_s = time.perf_counter() - t0
    hyper = {
        "lengthscale": template.kernel.lengthscale.detach().reshape(-1).tolist(),
        "kernel_variance_scaled": float(template.kernel.variance.detach()),
        "noise_variance_scaled": float(template.likelihood.variance.detach()),
    }
    rows = []
    for n in ns:  # the CG rows first: their peak memory is their own
        for seed in range(seeds if n <= cholesky_max else 1):  # probe seeds 0..seeds-1
            rows.append(evaluate(template, X[:n], y[:n], Xs, ys, "cg", row_options(n, seed),
                                 predict=seed == 0))
            print(json.dumps(rows[-1]), flush=True)
    for n in ns:
        if n <= cholesky_max:
            rows.append(evaluate(template, X[:n], y[:n], Xs, ys, "cholesky"))
            print(json.dumps(rows[-1]), flush=True)
    for n in ns:
        ref = [r["lml"] for r in rows if r["n"] == n and r["solver"] == "cholesky"]
        for r in rows:
            if ref and r["n"] == n:
                r["lml_minus_cholesky"] = r["lml"] - ref[0]
                r["relative_difference"] = abs(r["lml"] - ref[0]) / abs(ref[0])
    for n in gpytorch_ns:
        rows.append(gpytorch_row(template, X[:n], y[:n], Xs, ys, gpytorch_dtype))
        print(json.dumps(rows[-1]), flush=True)
    return {"dataset": "uci/kin40k split 0", "fit_n": fit_n, "fit_steps": fit_steps,
            "fit_seconds": fit_s, "hyperparameters": hyper, "seeds": seeds, "rows": rows}


def add_rows(ns, kind: str, dtype: str = "float32") -> None:
    """Rows at sizes ``ns`` added to the stored run (``exact_at_scale.json``), at its stored
    hyperparameters: ``kind`` ``"gpytorch"`` (GPyTorch's exact GP, ``dtype``) or
    ``"cholesky"`` (the reference, also above ``cholesky_max``, its value only: every
    stored row of that size then gets its difference from it).  The template is refitted
    on the same first ``fit_n`` rows (for the same target scaling) and its kernel and
    noise set to the stored values."""
    path = os.path.join(RESULTS, "exact_at_scale.json")
    with open(path) as fh:
        stored = json.load(fh)
    res = stored["results"]
    ds = datasets.load("uci/kin40k", 0)
    X, y, Xs, ys = ds.X_train, ds.y_train, ds.X_test, ds.y_test
    template = lg.ExactGP(solver="cholesky").fit(X[: res["fit_n"]], y[: res["fit_n"]],
                                                  max_steps=res["fit_steps"], seed=0)
    hyper = res["hyperparameters"]
    template.kernel.lengthscale = hyper["lengthscale"]
    template.kernel.variance = hyper["kernel_variance_scaled"]
    template.likelihood.variance = hyper["noise_variance_scaled"]
    for n in ns:
        if kind == "gpytorch":
            row = gpytorch_row(template, X[:n], y[:n], Xs, ys, dtype)
        else:
            # value only: with the gradient the N x N intermediates at 2 x 10^4 rows
            # would need about 26 GB
            row = evaluate(template, X[:n], y[:n], Xs, ys, "cholesky", gradient=False)
        row["provenance"] = stamp({})["provenance"]
        res["rows"].append(row)
        if kind == "cholesky":
            for r in res["rows"]:
                if r["n"] == n and r.get("lml") is not None:
                    last = r["lml"][-1] if isinstance(r["lml"], list) else r["lml"]
                    r["lml_minus_cholesky"] = last - row["lml"]
                    r["relative_difference"] = abs(last - row["lml"]) / abs(row["lml"])
        print(json.dumps(row), flush=True)
        with open(path, "w") as fh:
            json.dump(stored, fh, indent=1)
        write(res, stored["provenance"], stored.get("trained"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", default="3000,10000",
                    help="training sizes, comma-separated (Cholesky rows up to 10,000)")
    ap.add_argument("--fit-n", type=int, default=1_000)
    ap.add_argument("--fit-steps", type=int, default=20)
    ap.add_argument("--seeds", type=int, default=3,
                    help="CG rows: probe seeds 0..seeds-1 (seed 0 only above 10,000 rows)")
    ap.add_argument("--gpytorch-n", default="",
                    help="GPyTorch exact GP rows at these sizes, comma-separated")
    ap.add_argument("--gpytorch-dtype", default="float32")
    ap.add_argument("--add-gpytorch", default="",
                    help="add GPyTorch rows at these sizes to the stored run, at its stored "
                         "hyperparameters (each row carries its own provenance)")
    ap.add_argument("--add-cholesky", default="",
                    help="add Cholesky reference rows at these sizes to the stored run (above "
                         "10,000 too: N^2 doubles, a few times over)")
    ap.add_argument("--render", action="store_true",
                    help="rewrite the .md page from the stored .json without running")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 1,000 rows, hyperparameters from 300 rows in 5 steps; "
                    "printed, nothing written")
    args = ap.parse_args()
    if args.quick:
        res = run([1_000], 300, 5, 1)
        print(json.dumps(res, indent=1, default=str))
        return
    if args.render:
        with open(os.path.join(RESULTS, "exact_at_scale.json")) as fh:
            stored = json.load(fh)
        write(stored["results"], stored["provenance"], stored.get("trained", []))
        return
    if args.add_gpytorch or args.add_cholesky:
        for kind, sizes in (("gpytorch", args.add_gpytorch), ("cholesky", args.add_cholesky)):
            if sizes:
                add_rows([int(v) for v in sizes.split(",") if v], kind, args.gpytorch_dtype)
        return
    sizes = [int(v) for v in args.n.split(",") if v]
    gp_sizes = [int(v) for v in args.gpytorch_n.split(",") if v]
    res = run(sizes, args.fit_n, args.fit_steps, args.seeds, gp_sizes, args.gpytorch_dtype)
    write(res)


if __name__ == "__main__":
    main()
