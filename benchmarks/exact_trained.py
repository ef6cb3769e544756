"""A trained exact GP on all of a large training set (issue 26 part 3), beside SVGP.

``uci/protein`` split 0 (41,157 training rows, 4,573 test rows, D = 9), inputs and targets
standardised with the training statistics (:func:`latentgp.data.standardize`); test RMSE
and NLPD in those standardised units.  Parts (each in its own process, so that the peak
resident memory is the part's own):

* ``exact``: ``lg.ExactGP(solver="cg").fit(X, y, seed=0)`` with the library's defaults
  for large N: an exact (Cholesky) fit on a random subset, then full-data L-BFGS steps
  on the CG / SLQ objective, then CG predictive means and LOVE variances of the test
  rows (``history_`` records the stages);
* ``svgp``: ``lg.SVGP(1024).fit(X, y, seed=0)``, SVGP's default fit;
* ``vfe``: ``lg.SparseGP("vfe", num_inducing=1024).fit(X, y, seed=0)``, the collapsed
  bound's default fit (full-batch L-BFGS over the hyperparameters and Z, no minibatch
  noise; ``--max-steps`` a budget): SVGP's model at its optimal q(u);
* ``gpytorch``: GPyTorch's exact GP trained its own way on the same rows
  (``peers/gpytorch_exact_runner.py --train-steps``: Adam from its initial values, its
  defaults for large N, float32 unless ``--gpytorch-dtype``), in GPyTorch's venv
  (``$GPYTORCH_PYTHON``; on the device machine, whose python holds GPyTorch, this python);
* ``synthetic``: one CG / SLQ evaluation with gradient and the test means of an exact
  GP on ``--synthetic-n`` points of a smooth 4-D function with noise standard deviation
  0.3 (hyperparameters at their true values), to measure the per-iteration cost;
* ``agreement``: the iterative path's log marginal likelihood against the Cholesky
  path's on the first ``--agreement-n`` training rows (default 10^4), at the
  hyperparameters of the default pretrain (a Cholesky fit on the library's 2,100-row
  subset of those rows, seed 0): one value per probe seed in ``--seeds``, with
  ``--probes`` Rademacher probes (default 16, the library's) and the other options at
  their defaults, so the SLQ estimate's Monte Carlo spread shows.

Each row records wall and CPU seconds, the process's peak RSS and the RSS of a bare
``import torch, latentgp`` process (the baseline), the load average before and after.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/exact_trained.py --part exact
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/exact_trained.py --part svgp
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/exact_trained.py --part vfe

Writes the row into ``docs/results/exact_at_scale.json`` (key ``"trained"``, each row
with its own provenance) and re-renders ``exact_at_scale.md``.

On a GPU (``--device cuda``, e.g. the lent device machine) the row is written to ``--out``
instead (the page is rendered where the repository is: ``--store-from FILE`` adds it);
the row then also records the device's peak allocated memory.

    python benchmarks/exact_trained.py --part exact --device cuda --out $OUT/exact.json
    python benchmarks/exact_trained.py --store-from exact.json
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import resource
import subprocess
import sys
import time

import numpy as np
import torch
from machine import stamp

import latentgp as lg
from latentgp import datasets

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(os.path.dirname(HERE), "docs", "results")
JSON = os.path.join(RESULTS, "exact_at_scale.json")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def baseline_rss_mb() -> float:
    """Peak RSS of a process that only imports torch and latentgp."""
    code = ("import resource, torch, latentgp; "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ})
    return float(out.stdout.strip().splitlines()[-1])


def fit_baseline_rss_mb() -> float:
    """Peak RSS of a process that imports torch and latentgp and fits a default
    ``ExactGP`` on 200 rows: what any fit costs before its data.  torch's optimisers
    import ``torch._dynamo`` (and sympy) on their first parameter group, about 80 MB
    resident on this machine's torch, and the first BLAS / LAPACK calls map their code."""
    code = ("import resource, numpy as np, torch, latentgp as lg; "
            "g = np.random.default_rng(0); X = g.normal(size=(200, 4)); "
            "lg.ExactGP().fit(X, np.sin(X.sum(1)), progress=False); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ})
    return float(out.stdout.strip().splitlines()[-1])


def protein(max_rows: int | None = None):
    ds, _, _ = lg.data.standardize(datasets.load("uci/protein", 0))
    X, y, Xs, ys = ds.X_train, ds.y_train, ds.X_test, ds.y_test
    if max_rows is not None:
        X, y, Xs, ys = X[:max_rows], y[:max_rows], Xs[: max_rows // 4], ys[: max_rows // 4]
    return X, y, Xs, ys


def sync(device: str) -> None:
    """Wait for the device's queued work (timings on a GPU end there)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def device_peak_mb(device: str) -> float | None:
    """Peak memory torch allocated on ``device`` so far (None on the CPU)."""
    if not device.startswith("cuda"):
        return None
    return torch.cuda.max_memory_allocated() / 2**20


def scores(model, Xs, ys) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    mean, var = model.predict_y(Xs)
    mean, var = np.asarray(mean).reshape(-1), np.asarray(var).reshape(-1)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    rmse = float(np.sqrt(np.mean((mean - ys) ** 2)))
    nlpd = float(np.mean(0.5 * np.log(2 * math.pi * var) + 0.5 * (ys - mean) ** 2 / var))
    return {"test_rmse": rmse, "test_nlpd": nlpd, "predict_seconds": seconds,
            "predict_cpu_seconds": cpu}


def run_exact(X, y, Xs, ys, kwargs: dict, device: str = "cpu") -> dict:
    model = lg.ExactGP(solver="cg", device=device, **kwargs)
    t0, c0 = time.perf_counter(), time.process_time()
    model.fit(X, y, seed=0, progress=True)
    sync(device)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    h = model.history_
    print(json.dumps({"fit_seconds": seconds, "fit_cpu_seconds": cpu, "stages": h.stages,
                      "last_cg": model.last_cg, "load": os.getloadavg()}), flush=True)
    row = {"model": "ExactGP(solver='cg')", "options": {k: str(v) for k, v in kwargs.items()},
           "n": int(X.shape[0]), "fit_seconds": seconds, "fit_cpu_seconds": cpu,
           "steps": h.steps, "reason": h.reason, "stages": h.stages,
           "last_cg": dict(model.last_cg), "peak_rss_fit_mb": peak_rss_mb(),
           "device_peak_fit_mb": device_peak_mb(device)}
    row.update(scores(model, Xs, ys))
    row["last_cg_predict"] = dict(model.last_cg)
    row["lengthscale"] = model.kernel.lengthscale.detach().reshape(-1).tolist()
    row["noise_variance"] = float(model.likelihood.variance.detach()
                                  * model.y_scale.square().mean())
    return row


def run_sparse(X, y, Xs, ys, part: str, num_inducing: int, device: str = "cpu",
               max_steps: int | None = None) -> dict:
    """``part`` ``"svgp"``: SVGP's default fit; ``"vfe"``: the collapsed (Titsias) bound's
    default fit, full-batch L-BFGS over the hyperparameters and Z, i.e. SVGP's objective
    at its optimal q(u)."""
    if part == "svgp":
        model, label = lg.SVGP(num_inducing, device=device), f"SVGP(M={num_inducing})"
    else:
        model = lg.SparseGP("vfe", num_inducing=num_inducing, device=device)
        label = f"SparseGP('vfe', M={num_inducing})"
    t0, c0 = time.perf_counter(), time.process_time()
    model.fit(X, y, seed=0, progress=True, max_steps=max_steps)
    sync(device)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    h = model.history_
    row = {"model": label, "max_steps": max_steps, "n": int(X.shape[0]), "fit_seconds": seconds,
           "fit_cpu_seconds": cpu, "steps": h.steps, "reason": h.reason,
           "optimizer": h.optimizer, "peak_rss_fit_mb": peak_rss_mb()}
    row.update(scores(model, Xs, ys))
    return row


def run_gpytorch(X, y, Xs, ys, args) -> dict:
    import tempfile

    python = os.environ.get("GPYTORCH_PYTHON", "/work/venvs/gpytorch/bin/python")
    if not os.path.exists(python):
        python = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.npz")
        np.savez(path, X_train=X, y_train=y, X_test=Xs, y_test=ys, y_mean=0.0, y_scale=1.0)
        out = subprocess.run(
            [python, os.path.join(HERE, "peers", "gpytorch_exact_runner.py"), path,
             "--dtype", args.gpytorch_dtype, "--device", args.device,
             "--train-steps", str(args.gpytorch_steps), "--lr", str(args.gpytorch_lr),
             "--time-limit", str(args.gpytorch_time_limit)],
            capture_output=True, text=True, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    s = sorted(row["seconds_per_step"])
    return {**row, "model": f"GPyTorch ExactGP ({args.gpytorch_dtype}, Adam lr {args.gpytorch_lr})",
            "steps": row["train_steps"], "reason": "budget",
            "median_step_seconds": s[len(s) // 2], "fit_cpu_seconds": None,
            "peak_rss_fit_mb": row["peak_rss_mb"]}


def run_synthetic(n: int, n_test: int = 2_000, device: str = "cpu",
                  chunk_entries: int | None = None, product_dtype: str | None = None) -> dict:
    gen = np.random.default_rng(0)
    Xa = gen.uniform(-2.0, 2.0, (n + n_test, 4))
    fa = np.sin(2 * Xa[:, 0]) + np.cos(Xa[:, 1] * Xa[:, 2]) + 0.5 * Xa[:, 3]
    ya = fa + 0.3 * gen.standard_normal(n + n_test)
    X, y, Xs, fs = Xa[:n], ya[:n], Xa[n:], fa[n:]
    it = {} if chunk_entries is None else {"chunk_rows": max(1, chunk_entries // n)}
    if product_dtype is not None:
        it["product_dtype"] = product_dtype
    model = lg.ExactGP(solver="cg", normalize_y=False, device=device,
                       iterative=it).initialize(X[:10], y[:10])
    with torch.no_grad():
        model.kernel.lengthscale = [0.8] * 4
        model.kernel.variance = 1.0
        model.likelihood.variance = 0.09
    model.set_data(X, y)
    Xt, yt = model.X_train, model.y_train
    t0, c0 = time.perf_counter(), time.process_time()
    obj = model.objective(Xt, yt, n)
    obj.backward()
    sync(device)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    info = dict(model.last_cg)
    t1, c1 = time.perf_counter(), time.process_time()
    mean = np.asarray(model.predict_f(Xs)[0]).reshape(-1)
    name = "ExactGP(solver='cg') one evaluation"
    if chunk_entries is not None:
        name += f", blocks of 2^{int(math.log2(chunk_entries))} entries"
    options = {"iterative": str({"product_dtype": product_dtype})} if product_dtype else {}
    return {"model": name, "n": n, "options": options,
            "lml": float(obj.detach()), "chunk_rows": it.get("chunk_rows"),
            "device_peak_eval_mb": device_peak_mb(device),
            "eval_seconds": seconds, "eval_cpu_seconds": cpu, "eval_cg": info,
            "predict_mean_seconds": time.perf_counter() - t1,
            "predict_mean_cpu_seconds": time.process_time() - c1,
            "test_rmse_f": float(np.sqrt(np.mean((mean - fs) ** 2))),
            "peak_rss_fit_mb": peak_rss_mb()}


def run_agreement(X, y, n: int, probes: int, seeds: list[int]) -> dict:
    """Cholesky against CG / SLQ log marginal likelihoods on the first ``n`` rows."""
    from latentgp.models.exact import pretrain_subset

    X, y = np.asarray(X)[:n], np.asarray(y)[:n]
    model = lg.ExactGP(solver="cholesky")
    rows = lg.ExactGP.Iterative().pretrain_rows
    idx = pretrain_subset(n, rows, 0).numpy()
    model.fit(X[idx], y[idx], seed=0, progress=False)
    model.set_data(X, y)
    t0 = time.perf_counter()
    chol = model.log_marginal_likelihood()
    chol_seconds = time.perf_counter() - t0
    values = []
    for seed in seeds:
        model.solver = "cg"
        model.iterative = lg.ExactGP.Iterative(num_probes=probes, seed=seed)
        t0 = time.perf_counter()
        value = model.log_marginal_likelihood()
        cg = model.last_cg
        values.append({"seed": seed, "lml": value, "diff": value - chol,
                       "rel": (value - chol) / abs(chol),
                       "seconds": time.perf_counter() - t0, "iterations": cg["iterations"],
                       "rank": cg["rank"], "product_dtype": cg["product_dtype"]})
        print(json.dumps(values[-1]), flush=True)
    return {"model": "ExactGP log marginal likelihood, CG / SLQ against Cholesky", "n": n,
            "options": {"num_probes": str(probes)}, "pretrain_rows": rows,
            "cholesky_lml": chol, "cholesky_seconds": chol_seconds, "values": values,
            "peak_rss_fit_mb": peak_rss_mb()}


def store(records: list) -> None:
    """Add stamped rows (``{"results": row, "provenance": ...}``) to the .json, replacing
    a stored row of the same model, N, device and options, and re-render the page."""
    with open(JSON) as fh:
        stored = json.load(fh)

    def key(rec):
        r = rec["results"]
        options = json.dumps(r.get("options") or {}, sort_keys=True)
        return r["model"], r["n"], r.get("device", "cpu"), options

    for rec in records:
        stored["trained"] = [r for r in stored.get("trained", []) if key(r) != key(rec)]
        stored["trained"].append(rec)
    with open(JSON, "w") as fh:
        json.dump(stored, fh, indent=1)
    subprocess.run([sys.executable, os.path.join(HERE, "exact_at_scale.py"), "--render"],
                   check=True)


def store_from(path: str) -> None:
    """Store the rows of ``path`` (one stamped JSON object per line, written by ``--out``)."""
    with open(path) as fh:
        store([json.loads(line) for line in fh if line.strip()])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=("exact", "svgp", "vfe", "gpytorch", "synthetic",
                                       "agreement"),
                    default="exact")
    ap.add_argument("--finetune-steps", type=int, default=None,
                    help="exact part: full-data L-BFGS steps (default: the library's, 3)")
    ap.add_argument("--num-inducing", type=int, default=1024)
    ap.add_argument("--max-steps", type=int, default=None,
                    help="svgp / vfe parts: a step budget (default: the model's own)")
    ap.add_argument("--synthetic-n", type=int, default=200_000)
    ap.add_argument("--agreement-n", type=int, default=10_000)
    ap.add_argument("--probes", type=int, default=16,
                    help="agreement part: Rademacher probes of the SLQ estimate")
    ap.add_argument("--seeds", default="0,1,2,3", help="agreement part: probe seeds")
    ap.add_argument("--chunk-entries", type=int, default=None,
                    help="synthetic part: entries of one kernel block (rows = entries / N; "
                    "default: the library's, linalg_iterative.block_rows)")
    ap.add_argument("--product-dtype", choices=("float32", "float64"), default=None,
                    help="exact / synthetic parts: the training products' dtype "
                    "(default: the library's)")
    ap.add_argument("--gpytorch-steps", type=int, default=50)
    ap.add_argument("--gpytorch-lr", type=float, default=0.1)
    ap.add_argument("--gpytorch-dtype", default="float32")
    ap.add_argument("--gpytorch-time-limit", type=float, default=float("inf"),
                    help="seconds after which GPyTorch's training stops (the row says so)")
    ap.add_argument("--device", default="cpu", help="torch device of the models (cpu, cuda)")
    ap.add_argument("--out", default=None,
                    help="append the stamped row to this file (one JSON line) instead of "
                    "storing it in docs/results")
    ap.add_argument("--store-from", default=None,
                    help="store the rows of a file written by --out, render, and exit")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run on the first 2,000 training rows (pretraining on 500); "
                    "printed, nothing written")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.store_from:
        store_from(args.store_from)
        return
    load_before = os.getloadavg()
    base, fit_base = baseline_rss_mb(), fit_baseline_rss_mb()
    if args.part == "synthetic":
        row = run_synthetic(2_000 if args.quick else args.synthetic_n, device=args.device,
                            chunk_entries=args.chunk_entries,
                            product_dtype=args.product_dtype)
    else:
        X, y, Xs, ys = protein(2_000 if args.quick else None)
        if args.part == "agreement":
            row = run_agreement(X, y, 2_000 if args.quick else args.agreement_n,
                                args.probes, [int(v) for v in args.seeds.split(",")])
        elif args.part == "exact":
            it = {"pretrain_rows": 500} if args.quick else {}
            if args.finetune_steps is not None:
                it["finetune_steps"] = args.finetune_steps
            if args.product_dtype is not None:
                it["product_dtype"] = args.product_dtype
            kw = {"iterative": it} if it else {}
            row = run_exact(X, y, Xs, ys, kw, device=args.device)
        elif args.part == "gpytorch":
            row = run_gpytorch(X, y, Xs, ys, args)
        else:
            row = run_sparse(X, y, Xs, ys, args.part, 64 if args.quick else args.num_inducing,
                             device=args.device, max_steps=args.max_steps)
        row["dataset"] = "uci/protein split 0 (standardised)"
    row.update(baseline_rss_mb=base, fit_baseline_rss_mb=fit_base, peak_rss_mb=peak_rss_mb(),
               load_before=load_before, load_after=os.getloadavg(), threads=torch.get_num_threads(),
               device=args.device)
    row.setdefault("device_peak_mb", device_peak_mb(args.device))  # GPyTorch's: its own
    if args.device.startswith("cuda"):
        row["device_name"] = torch.cuda.get_device_name()
    print(json.dumps(row, default=str), flush=True)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write(json.dumps(stamp({"results": row}), default=str) + "\n")
    elif not args.quick:
        store([stamp({"results": row})])


if __name__ == "__main__":
    main()
