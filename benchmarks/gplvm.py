"""Bayesian GPLVM on digit images: 1-nearest-neighbour error in the latent space.

    .venv/bin/python benchmarks/gplvm.py [--datasets digits,usps] [--latent 2,5]
        [--n 1000] [--inducing 50] [--methods collapsed,gpflow,uncollapsed]
        [--uncollapsed-steps 2000]
    .venv/bin/python benchmarks/gplvm.py --heldout 600 [--n 1000] [--latent 2]
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

``--heldout N_TRAIN``: train on N_TRAIN of the ``--n`` rows (a seed-1 permutation),
embed the others with PCA fitted on the training rows and with the collapsed GPLVM's
``transform``, and score the held-out rows by 1-NN classification against the training
rows' embedding (process CPU seconds).

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


def nn_classify(train: np.ndarray, labels: np.ndarray, test: np.ndarray) -> np.ndarray:
    """The label of each ``test`` row's nearest ``train`` row (1-NN classification)."""
    d = (test * test).sum(1)[:, None] + (train * train).sum(1)[None, :] - 2.0 * test @ train.T
    return labels[d.argmin(1)]


def run_heldout(name: str, Q: int, n: int, n_train: int, M: int) -> list[dict]:
    """Train on ``n_train`` of the ``n`` drawn rows, embed the rest, and classify each
    held-out row by the label of its nearest training row in the embedding: PCA fitted on
    the training rows and applied to the held-out ones, against the collapsed
    BayesianGPLVM fitted to the training rows and its ``transform`` of the held-out ones.
    Times are process CPU seconds (one thread)."""
    Y, labels = load(name, n)
    perm = np.random.default_rng(1).permutation(len(Y))
    tr, te = np.sort(perm[:n_train]), np.sort(perm[n_train:])
    base = {"dataset": name, "N": len(tr), "N_test": len(te), "P": Y.shape[1], "Q": Q,
            "M": M, "heldout": True}
    t = time.process_time()
    mu = Y[tr].mean(0)
    _, _, Vt = np.linalg.svd(Y[tr] - mu, full_matrices=False)
    Xtr, Xte = (Y[tr] - mu) @ Vt[:Q].T, (Y[te] - mu) @ Vt[:Q].T
    rows = [{**base, "method": "PCA (fitted on train, applied to test)",
             "nn_error": float(np.mean(nn_classify(Xtr, labels[tr], Xte) != labels[te])),
             "train_loo_error": nn_error(Xtr, labels[tr]), "cpu_fit": time.process_time() - t}]
    model = lg.BayesianGPLVM(Q, num_inducing=M)
    t = time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(Y[tr], seed=0, progress=False)
        cpu_fit = time.process_time() - t
        t = time.process_time()
        Xte = model.transform(Y[te])
        cpu_transform = time.process_time() - t
    Xtr = model.latent_posterior()[0]
    rows.append({**base, "method": "latentgp BayesianGPLVM (collapsed) + transform",
                 "nn_error": float(np.mean(nn_classify(Xtr, labels[tr], Xte) != labels[te])),
                 "train_loo_error": nn_error(Xtr, labels[tr]), "cpu_fit": cpu_fit,
                 "cpu_transform": cpu_transform, "steps": model.history_.steps,
                 "stopped": model.history_.stopped,
                 "warnings": [str(w.message)[:200] for w in caught]})
    return rows


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
    heldout = [r for r in rows if r.get("heldout")]
    rows = [r for r in rows if not r.get("heldout")]
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
    if heldout:
        print(report_heldout(heldout))


def report_heldout(rows: list[dict]) -> str:
    last: dict = {}
    for r in rows:
        last[(r["dataset"], r["Q"], r["method"])] = r
    lines = [
        "| data | N train | N test | P | Q | M | method | held-out 1-NN error "
        "| train 1-NN error (LOO) | CPU s fit | CPU s transform | steps | commit |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for key in sorted(last, key=lambda k: (k[0], k[1])):
        r = last[key]
        tr = f"{r['cpu_transform']:.1f}" if "cpu_transform" in r else ""
        lines.append(
            f"| {r['dataset']} | {r['N']} | {r['N_test']} | {r['P']} | {r['Q']} | {r['M']} "
            f"| {r['method']} | {r['nn_error']:.3f} | {r['train_loo_error']:.3f} "
            f"| {r['cpu_fit']:.1f} | {tr} | {r.get('steps', '')} "
            f"| {(r['provenance']['commit'] or '')[:8]} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--datasets", default="digits,usps")
    ap.add_argument("--latent", default="2,5")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--inducing", type=int, default=50)
    ap.add_argument("--methods", default="collapsed,gpflow",
                    help="of collapsed, gpflow, uncollapsed (PCA always runs)")
    ap.add_argument("--uncollapsed-steps", type=int, default=2000)
    ap.add_argument("--heldout", type=int, default=0, metavar="N_TRAIN",
                    help="held-out runs instead: train on N_TRAIN of the --n rows, transform "
                    "the rest, 1-NN error of the held-out labels (PCA and collapsed GPLVM)")
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 200 digits, Q = 2, M = 20, collapsed and PCA; printed, "
                    "nothing written")
    a = ap.parse_args()
    if a.quick:
        a.datasets, a.latent, a.n, a.inducing, a.methods = "digits", "2", 200, 20, "collapsed"
        a.heldout = 120 if a.heldout else 0
    if a.report:
        report()
        return
    methods = set() if a.heldout else set(a.methods.split(","))
    if not os.path.exists(GPFLOW_PY):
        methods.discard("gpflow")
    peers = {"gpflow": package_version("gpflow", GPFLOW_PY)} if "gpflow" in methods else None
    for name in a.datasets.split(","):
        for Q in (int(q) for q in a.latent.split(",")):
            if a.heldout:
                out = run_heldout(name, Q, a.n, a.heldout, a.inducing)
            else:
                out = run(name, Q, a.n, a.inducing, methods, a.uncollapsed_steps)
            for row in out:
                stamp(row, peers=peers)
                if not a.quick:
                    with open(ROWS, "a") as fh:
                        fh.write(json.dumps(row) + "\n")
                print(json.dumps({k: v for k, v in row.items() if k != "provenance"}))


if __name__ == "__main__":
    main()
