"""Bayesian GPLVM on digit images: 1-nearest-neighbour error in the latent space.

    .venv/bin/python benchmarks/gplvm.py [--datasets digits,usps] [--latent 2,5]
        [--n 1000] [--inducing 50] [--methods collapsed,gpflow,uncollapsed]
        [--uncollapsed-steps 2000]
    .venv/bin/python benchmarks/gplvm.py --report      # docs/results/gplvm.md

Data: scikit-learn's 8x8 digits (1,797 images, 10 classes) and the SAVIGP USPS 16x16
digits 4/7/9 (``savigp/usps`` split 1 training file, 1,233 images) from the data home;
``--n`` rows drawn without replacement (seed 0).  Each method embeds the images in Q
dimensions without the labels; the score is the leave-one-out 1-NN classification error
of the labels in that embedding (latent means for the GPLVMs).  Methods:

- PCA (the first Q principal components; also the GPLVMs' starting point);
- latentgp ``BayesianGPLVM`` (collapsed bound, the default convergence-based L-BFGS fit);
- GPflow ``BayesianGPLVM`` from the same initial values (latent means and variances, Z,
  kernel, noise, scaled data) with its Scipy L-BFGS-B to convergence (at most 5,000
  iterations), in the peer venv /work/venvs/gpflow (benchmarks/gpflow_gplvm_runner.py);
- latentgp's uncollapsed bound (Adam at lr 0.01, minibatches of 256) for a fixed budget
  of ``--uncollapsed-steps`` (``--methods ...,uncollapsed``).

Each run appends one provenance-stamped row per method to ``docs/results/gplvm.jsonl``
and, for Q = 2 with more than PCA and one method, draws the embeddings to
``docs/results/gplvm_<dataset>.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
import warnings

import numpy as np
from machine import package_version, stamp

import latentgp as lg

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "docs", "results")
ROWS = os.path.join(OUT, "gplvm.jsonl")
GPFLOW_PY = "/work/venvs/gpflow/bin/python"
os.environ.setdefault("LATENTGP_DATA", os.path.join(HERE, "..", "..", "shared", "data"))


def load(name: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    if name == "digits":
        from sklearn.datasets import load_digits

        Y, labels = load_digits(return_X_y=True)
    elif name == "usps":
        import latentgp.datasets as datasets

        d = datasets.load("savigp/usps", split=1)
        Y, labels = np.asarray(d.X_train, dtype=float), np.asarray(d.y_train)
    else:
        raise ValueError(name)
    rng = np.random.default_rng(0)
    pick = np.sort(rng.choice(len(Y), size=min(n, len(Y)), replace=False))
    return Y[pick].astype(np.float64), labels[pick]


def nn_error(X: np.ndarray, labels: np.ndarray) -> float:
    """Leave-one-out 1-nearest-neighbour error of ``labels`` in the embedding ``X``."""
    sq = (X * X).sum(1)
    d = sq[:, None] + sq[None, :] - 2.0 * X @ X.T
    np.fill_diagonal(d, np.inf)
    return float(np.mean(labels[d.argmin(1)] != labels))


def pca(Y: np.ndarray, Q: int) -> np.ndarray:
    Yc = Y - Y.mean(0)
    U, s, _ = np.linalg.svd(Yc, full_matrices=False)
    return U[:, :Q] * s[:Q]


def run_gpflow(init: lg.BayesianGPLVM, Y: np.ndarray) -> tuple[dict, np.ndarray]:
    Ys = init.scale_targets(Y).numpy()
    mean, var = init.latent_posterior()
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "in.npz"), os.path.join(tmp, "out.npz")
        np.savez(
            src, Y=Ys, X_mean=mean, X_var=var, Z=init.Z.detach().numpy(),
            lengthscale=init.kernel.lengthscale.detach().numpy(),
            variance=float(init.kernel.variance.detach()),
            noise=float(init.likelihood.variance.detach()),
        )
        env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "OMP_NUM_THREADS": "1"}
        out = subprocess.run(
            [GPFLOW_PY, os.path.join(HERE, "gpflow_gplvm_runner.py"), src, dst, "5000"],
            capture_output=True, text=True, env=env, check=True,
        )
        info = json.loads(out.stdout.strip().splitlines()[-1])
        return info, np.load(dst)["X_mean"]


def bound_per_point(model: lg.BayesianGPLVM, N: int) -> float:
    """The final collapsed bound per point in the scaled data's units (GPflow's units)."""
    return float(model.history_.objective[-1] + N * model.target_log_scale()) / N


def run(name: str, Q: int, n: int, M: int, methods: set[str], unc_steps: int) -> list[dict]:
    Y, labels = load(name, n)
    N, P = Y.shape
    base = {"dataset": name, "N": N, "P": P, "Q": Q, "M": M}
    rows, embeddings = [], {}
    t = time.perf_counter()
    Xp = pca(Y, Q)
    rows.append({**base, "method": "PCA", "nn_error": nn_error(Xp, labels),
                 "seconds": time.perf_counter() - t})
    embeddings["PCA"] = Xp
    if "collapsed" in methods:
        rows.append(run_collapsed(base, Y, labels, embeddings))
    if "gpflow" in methods:
        init = lg.BayesianGPLVM(Q, num_inducing=M).initialize(Y, seed=0)
        info, Xg = run_gpflow(init, Y)
        rows.append({**base, "method": "GPflow BayesianGPLVM", "nn_error": nn_error(Xg, labels),
                     "seconds": info["seconds"], "steps": info["iterations"],
                     "stopped": info["message"], "bound_per_point": info["bound"] / N})
        embeddings["GPflow"] = Xg
    if "uncollapsed" in methods:
        unc = lg.BayesianGPLVM(Q, num_inducing=M, bound="uncollapsed")
        t = time.perf_counter()
        unc.fit(Y, seed=0, progress=False, max_steps=unc_steps)
        seconds = time.perf_counter() - t
        Xu = unc.latent_posterior()[0]
        rows.append({**base, "method": "latentgp BayesianGPLVM (uncollapsed, Adam B=256)",
                     "nn_error": nn_error(Xu, labels), "seconds": seconds, "steps": unc_steps})
        embeddings["latentgp uncollapsed"] = Xu
    if Q == 2 and len(embeddings) > 2:
        plot(name, embeddings, labels)
    return rows


def run_collapsed(base: dict, Y: np.ndarray, labels: np.ndarray, embeddings: dict) -> dict:
    N, Q, M = base["N"], base["Q"], base["M"]
    model = lg.BayesianGPLVM(Q, num_inducing=M)
    t = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(Y, seed=0, progress=False)
    seconds = time.perf_counter() - t
    Xl = model.latent_posterior()[0]
    embeddings["latentgp"] = Xl
    return {**base, "method": "latentgp BayesianGPLVM (collapsed)",
            "nn_error": nn_error(Xl, labels), "seconds": seconds,
            "steps": model.history_.steps, "stopped": model.history_.stopped,
            "bound_per_point": bound_per_point(model, N),
            "warnings": [str(w.message)[:200] for w in caught]}


def plot(name: str, embeddings: dict, labels: np.ndarray) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(embeddings), figsize=(4.2 * len(embeddings), 4))
    for ax, (title, X) in zip(np.atleast_1d(axes), embeddings.items(), strict=True):
        sc = ax.scatter(X[:, 0], X[:, 1], c=labels, cmap="tab10", s=6)
        ax.set_title(f"{title} ({name}, 1-NN error {nn_error(X, labels):.3f})", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(sc, ax=axes, shrink=0.8, label="class")
    fig.savefig(os.path.join(OUT, f"gplvm_{name}.png"), dpi=90)
    plt.close(fig)


def report() -> None:
    rows = [json.loads(line) for line in open(ROWS)] if os.path.exists(ROWS) else []
    last: dict = {}
    for r in rows:
        last[(r["dataset"], r["Q"], r["method"])] = r
    lines = [
        "| data | N | P | Q | M | method | 1-NN error (LOO) | seconds | steps | bound / N "
        "| commit |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for key in sorted(last, key=lambda k: (k[0], k[1])):
        r = last[key]
        bound = f"{r['bound_per_point']:.4f}" if "bound_per_point" in r else ""
        commit = (r["provenance"]["commit"] or "")[:8]
        lines.append(
            f"| {r['dataset']} | {r['N']} | {r['P']} | {r['Q']} | {r['M']} | {r['method']} | "
            f"{r['nn_error']:.3f} | {r['seconds']:.1f} | {r.get('steps', '')} | {bound} "
            f"| {commit} |"
        )
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--datasets", default="digits,usps")
    ap.add_argument("--latent", default="2,5")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--inducing", type=int, default=50)
    ap.add_argument("--methods", default="collapsed,gpflow",
                    help="of collapsed, gpflow, uncollapsed (PCA always runs)")
    ap.add_argument("--uncollapsed-steps", type=int, default=2000)
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 200 digits, Q = 2, M = 20, collapsed and PCA; printed, "
                    "nothing written")
    a = ap.parse_args()
    if a.quick:
        a.datasets, a.latent, a.n, a.inducing, a.methods = "digits", "2", 200, 20, "collapsed"
    if a.report:
        report()
        return
    methods = set(a.methods.split(","))
    if not os.path.exists(GPFLOW_PY):
        methods.discard("gpflow")
    peers = {"gpflow": package_version("gpflow", GPFLOW_PY)} if "gpflow" in methods else None
    for name in a.datasets.split(","):
        for Q in (int(q) for q in a.latent.split(",")):
            for row in run(name, Q, a.n, a.inducing, methods, a.uncollapsed_steps):
                stamp(row, peers=peers)
                if not a.quick:
                    with open(ROWS, "a") as fh:
                        fh.write(json.dumps(row) + "\n")
                print(json.dumps({k: v for k, v in row.items() if k != "provenance"}))


if __name__ == "__main__":
    main()
