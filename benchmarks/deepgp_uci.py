"""Deep GPs (DSVI, Salimbeni & Deisenroth 2017) on UCI regression: test NLPD for L layers.

    .venv/bin/python benchmarks/deepgp_uci.py [--datasets housing,concrete,energy]
        [--layers 1,2,3] [--split 0] [--steps 20000]
    .venv/bin/python benchmarks/deepgp_uci.py --report      # docs/results/deep.md
    .venv/bin/python benchmarks/deepgp_uci.py --datasets housing --layers 2 --steps 2000
        --gpytorch /work/venvs/gpytorch/bin/python   # GPyTorch's DeepGP, same setting

The paper's setting where this machine allows it: M = 100 inducing points per layer,
RBF ARD kernels, inner layers of width min(D, 30) with the PCA / identity mean function,
Adam at lr 0.01 on minibatches of min(N, 10,000) (the whole training set here), one
sample through the layers per point in training, 100 at test, initial noise variance
0.01.  Each run appends one provenance-stamped row to ``docs/results/deepgp.jsonl``.
The splits are the data home's fixed ``uci/<name>`` splits (90/10), not the paper's 20
random splits.  ``--device cuda`` runs the models on a GPU (the row says so), ``--rows
FILE`` appends the rows there instead (e.g. ``$OUT`` on the device machine; append that
file to ``deepgp.jsonl`` here).
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

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "docs", "results")
ROWS = os.path.join(OUT, "deepgp.jsonl")
os.environ.setdefault("LATENTGP_DATA", os.path.join(HERE, "..", "..", "shared", "data"))


def run(name: str, layers: int, split: int, steps: int, device: str = "cpu") -> dict:
    import latentgp.datasets as datasets

    d = datasets.load(f"uci/{name}", split=split)
    model = lg.DeepGP(layers, num_inducing=100, num_samples=1, num_predict_samples=100,
                      noise_variance=0.01, device=device)
    t = time.perf_counter()
    model.fit(d.X_train, d.y_train, max_steps=steps, lr=0.01, optimizer="adam",
              batch_size=min(len(d.y_train), 10000), seed=split, progress=False)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t
    lpd = model.log_predictive_density(d.X_test, d.y_test)
    mean, _ = model.predict_y(d.X_test)
    rmse = float(np.sqrt(np.mean((mean - d.y_test) ** 2)))
    obj = np.asarray(model.history_.objective, dtype=float) / len(d.y_train)
    tenth = max(1, len(obj) // 10)
    return {
        # the bound per training point: mean over the last and the one-but-last tenth of
        # the steps (a rise between them: still climbing when the budget ran out)
        "bound_last_tenth": float(obj[-tenth:].mean()),
        "bound_previous_tenth": float(obj[-2 * tenth:-tenth].mean()),
        "dataset": name, "layers": layers, "split": split, "steps": steps,
        "num_inducing": 100, "nlpd": float(-np.mean(lpd)), "rmse": rmse,
        "train_seconds": round(seconds, 1), "n_train": len(d.y_train), "device": device,
    }


def run_gpytorch(name: str, layers: int, split: int, steps: int, python: str) -> dict:
    """GPyTorch's deep GP on the same split, layers, M and steps
    (``gpytorch_deepgp_runner.py`` under the interpreter ``python``, which has gpytorch)."""
    import subprocess
    import tempfile

    import latentgp.datasets as datasets

    d = datasets.load(f"uci/{name}", split=split)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.npz")
        np.savez(path, X_train=d.X_train, y_train=d.y_train, X_test=d.X_test,
                 y_test=d.y_test)
        out = subprocess.run(
            [python, os.path.join(HERE, "gpytorch_deepgp_runner.py"), path, str(layers),
             str(steps)], capture_output=True, text=True, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return {**r, "library": f"gpytorch {r.pop('gpytorch')}", "dataset": name,
            "layers": layers, "split": split, "steps": steps, "num_inducing": 100,
            "n_train": len(d.y_train)}


def _trend(r: dict) -> str:
    if "bound_last_tenth" not in r:
        return "not recorded"
    return f"{r['bound_previous_tenth']:.3f} -> {r['bound_last_tenth']:.3f}"


def _library(r: dict) -> str:
    device = r.get("device", "cpu")
    return r.get("library", "latentgp") + ("" if device == "cpu" else f" ({device})")


def report() -> None:
    rows = [json.loads(line) for line in open(ROWS)] if os.path.exists(ROWS) else []
    last: dict = {}
    for r in rows:  # the latest run of each (dataset, layers, split, steps, library)
        last[(r["dataset"], r["layers"], r["split"], r["steps"], _library(r))] = r
    lines = [
        "| dataset | N train | layers | steps | library | test NLPD | test RMSE "
        "| bound / N, last two tenths | train s | commit |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for key in sorted(last):
        r = last[key]
        lines.append(
            f"| {r['dataset']} | {r['n_train']} | {r['layers']} | {r['steps']} | "
            f"{_library(r)} | {r['nlpd']:.3f} | {r['rmse']:.3f} | "
            f"{_trend(r)} | {r['train_seconds']} | "
            f"{r['provenance']['commit'][:10]} |"
        )
    path = os.path.join(OUT, "deep.md")
    text = open(path).read() if os.path.exists(path) else ""
    start, end = "<!-- table:start -->", "<!-- table:end -->"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + start + "\n" + "\n".join(lines) + "\n" + end + rest.split(end, 1)[1]
        with open(path, "w") as fh:
            fh.write(text)
    print("\n".join(lines))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default="housing,concrete,energy")
    p.add_argument("--layers", default="1,2,3")
    p.add_argument("--split", type=int, default=0)
    p.add_argument("--steps", type=int, default=20000)
    p.add_argument("--report", action="store_true")
    p.add_argument("--gpytorch", metavar="PYTHON", default=None,
                   help="run GPyTorch's DeepGP instead, under this interpreter (with gpytorch)")
    p.add_argument("--device", default="cpu", help="torch device of the models (cpu, cuda)")
    p.add_argument("--rows", default=ROWS, help="file the rows are appended to")
    p.add_argument("--quick", action="store_true",
                   help="housing, 1 and 2 layers, 200 steps; rows printed, not recorded")
    a = p.parse_args()
    if a.report:
        report()
        return
    if a.quick:
        for L in (1, 2):
            row = run("housing", L, a.split, 200, a.device)
            print(json.dumps({k: v for k, v in row.items() if k != "provenance"}), flush=True)
        return
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    for name in a.datasets.split(","):
        for L in (int(x) for x in a.layers.split(",")):
            row = stamp(run(name, L, a.split, a.steps, a.device) if a.gpytorch is None else
                        run_gpytorch(name, L, a.split, a.steps, a.gpytorch))
            with open(a.rows, "a") as fh:
                fh.write(json.dumps(row) + "\n")
            print(json.dumps({k: v for k, v in row.items() if k != "provenance"}), flush=True)


if __name__ == "__main__":
    main()
