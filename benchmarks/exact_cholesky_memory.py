"""Memory and time of one Cholesky-path evaluation of an exact GP with its gradient.

ExactGP's Cholesky path takes the gradient of ``log p(y)`` from ``d log p / dK`` and the
kernel's blocks (``models.exact.cholesky_log_marginal``) instead of autograd through the
whole ``N x N`` kernel computation.  This compares the two on the first N rows of
``uci/kin40k`` split 0 (D = 8), at the hyperparameters of a short Cholesky fit on the
first 1,000 rows: each variant runs in its own process, so each peak resident memory is
its own, and the variants alternate (``--repeats``) so that a drift of the shared
machine shows.

* ``blockwise``: ``model.objective(X, y, N)`` and ``backward()``, the library's path;
* ``autograd``: the same value through ``add_diagonal(kernel(X), noise)``, ``cholesky``
  and ``gaussian_log_marginal`` (the path before, and the fallback for kernels whose
  blocks are not the rows of ``K(X)``), then ``backward()``.

Reported per row: peak RSS above the process's RSS before the evaluation (MB), the
``N x N`` matrix's size, CPU and wall seconds of the evaluation with its gradient, and
the largest relative difference between the two variants' gradients.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/exact_cholesky_memory.py --n 2100,5000,10000

Writes docs/results/exact_cholesky_memory.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch
from machine import stamp

import latentgp as lg
from latentgp import datasets
from latentgp.linalg import add_diagonal, cholesky
from latentgp.models.exact import gaussian_log_marginal

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(os.path.dirname(HERE), "docs", "results")
VARIANTS = ("blockwise", "autograd")


def status_mb(field: str) -> float:
    """``field`` of ``/proc/self/status`` in MB (``VmRSS``: resident now, ``VmHWM``: its
    high-water mark)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def rss_mb() -> float:
    return status_mb("VmRSS")


def hwm_mb() -> float:
    return status_mb("VmHWM")


def one(n: int, variant: str) -> dict:
    """One evaluation with gradient in this process (see the module docstring)."""
    ds = datasets.load("uci/kin40k", 0)
    X, y = np.asarray(ds.X_train), np.asarray(ds.y_train)
    m = lg.ExactGP(solver="cholesky").fit(X[:1000], y[:1000], max_steps=20, seed=0,
                                          progress=False)
    m.set_data(X[:n], y[:n])
    Xt, yt = m.X_train, m.y_train
    params = [p for p in m.parameters() if p.requires_grad]
    base = rss_mb()
    if hwm_mb() > base + 1.0:  # the fit's own peak: reset the high-water mark
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    t0, c0 = time.perf_counter(), time.process_time()
    if variant == "blockwise":
        value = m.objective(Xt, yt, n)
    else:
        mean = m.prior_mean_at(Xt)
        Y = yt.reshape(n, -1)
        R = Y if mean is None else Y - mean
        K = add_diagonal(m.kernel(Xt), m.likelihood.variance)
        L, _ = cholesky(K.detach(), "K + noise", jitter=0.0)
        value = gaussian_log_marginal(K, L, R)
        del K, L
    value.backward()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "n": n, "variant": variant, "value": float(value.detach()),
        "grad": [float(v) for p in params if p.grad is not None for v in p.grad.reshape(-1)],
        "peak_above_mb": hwm_mb() - base, "nxn_mb": n * n * 8 / 2**20,
        "wall_seconds": wall, "cpu_seconds": cpu, "threads": torch.get_num_threads(),
    }


def render(stored: dict) -> str:
    prov = stored["provenance"]
    lines = [
        "# Exact GP, Cholesky path: memory of one evaluation with its gradient",
        "",
        "Command: `" + prov.get("command", "") + "`",
        "",
        f"Commit {prov.get('commit')}, {prov.get('date')}, "
        f"torch {prov.get('versions', {}).get('torch')}, "
        f"CPU {prov.get('cpu')}, threads {stored['rows'][0]['threads']}.  `uci/kin40k` "
        "split 0, first N rows (D = 8), hyperparameters of a 20-step Cholesky fit on the "
        "first 1,000 rows.  Each variant in its own process; peak = the process's RSS "
        "high-water mark during the evaluation minus its RSS before it.",
        "",
        "| N | N x N (MB) | variant | peak above start (MB) | in N x N matrices | CPU s | "
        "wall s | gradient difference |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in stored["rows"]:
        lines.append(
            f"| {r['n']:,} | {r['nxn_mb']:.0f} | {r['variant']} | {r['peak_above_mb']:.0f} | "
            f"{r['peak_above_mb'] / r['nxn_mb']:.1f} | {r['cpu_seconds']:.1f} | "
            f"{r['wall_seconds']:.1f} | {r.get('grad_rel_diff', float('nan')):.1e} |"
        )
    lines += ["", stored.get("reading", ""), ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", default="2100,5000,10000")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 500 and 1,000 rows, printed, nothing written")
    ap.add_argument("--render", action="store_true",
                    help="rewrite the .md page from the stored .json without running")
    ap.add_argument("--one", nargs=2, metavar=("N", "VARIANT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(int(args.one[0]), args.one[1])))
        return
    path = os.path.join(RESULTS, "exact_cholesky_memory.json")
    if args.render:
        with open(path) as fh:
            stored = json.load(fh)
        with open(path.replace(".json", ".md"), "w") as fh:
            fh.write(render(stored))
        return
    rows = []
    sizes = [500, 1000] if args.quick else [int(v) for v in args.n.split(",") if v]
    for n in sizes:
        for _ in range(args.repeats):
            got = {}
            for variant in VARIANTS:
                out = subprocess.run(
                    [sys.executable, os.path.abspath(__file__), "--one", str(n), variant],
                    check=True, capture_output=True, text=True,
                ).stdout.strip().splitlines()[-1]
                got[variant] = json.loads(out)
            a, b = (np.array(got[v]["grad"]) for v in VARIANTS)
            diff = float(np.abs(a - b).max() / np.abs(b).max())
            for v in VARIANTS:
                row = {k: val for k, val in got[v].items() if k != "grad"}
                row["grad_rel_diff"] = diff
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.quick:
        return
    stored = stamp({"rows": rows}, command="OMP_NUM_THREADS=" + os.environ.get(
        "OMP_NUM_THREADS", "?") + " python benchmarks/exact_cholesky_memory.py --n " + args.n
        + (f" --repeats {args.repeats}" if args.repeats != 1 else ""))
    if os.path.exists(path):  # the reading written for the stored run
        with open(path) as fh:
            stored["reading"] = json.load(fh).get("reading", "")
    with open(path, "w") as fh:
        json.dump(stored, fh, indent=1)
    with open(path.replace(".json", ".md"), "w") as fh:
        fh.write(render(stored))


if __name__ == "__main__":
    main()
