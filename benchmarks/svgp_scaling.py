"""SVGP scaling: one epoch over N = 10^4 .. 10^7 synthetic points streamed from .npy shards,
and per-step time against M = 64 .. 4096.

The data is written once to ``.npy`` shards (``latentgp.datasets.write_gp_draws_npy``) and
read back memory-mapped one shard at a time, shuffled within the shard, so resident memory
does not grow with N (10^7 x 8 float64 = 640 MB on disk).  Each worker run is a separate
process so its peak RSS is its own.

    .venv/bin/python benchmarks/svgp_scaling.py [--quick] [--max-n 10000000]

Writes docs/results/scaling.md and scaling.png.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(ROOT, "docs", "results")


def epoch_worker(folder: str, n: int, M: int, B: int, threads: int) -> dict:
    """One epoch over the first n rows of the shards; returns seconds and peak RSS."""
    import latentgp as lg

    torch.set_num_threads(threads)
    meta = json.load(open(os.path.join(folder, "meta.json")))
    shards = [(os.path.join(folder, s["X"]), os.path.join(folder, s["y"])) for s in meta["shards"]]
    X0 = np.load(shards[0][0], mmap_mode="r")
    y0 = np.load(shards[0][1], mmap_mode="r")
    model = lg.SVGP(num_inducing=M, normalize_y=False)
    model.initialize(np.asarray(X0[: min(n, 20000)]), np.asarray(y0[: min(n, 20000)]), seed=0)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    g = np.random.default_rng(0)
    seen, steps = 0, 0
    t0 = time.perf_counter()
    for xp, yp in shards:
        if seen >= n:
            break
        Xs = np.load(xp, mmap_mode="r")
        ys = np.load(yp, mmap_mode="r")
        rows = min(len(ys), n - seen)
        order = g.permutation(rows)
        for s in range(0, rows, B):
            idx = np.sort(order[s : s + B])
            xb = torch.from_numpy(np.asarray(Xs[idx]))
            yb = torch.from_numpy(np.asarray(ys[idx]))
            opt.zero_grad(set_to_none=True)
            loss = -model.objective(xb, yb, n) / n
            loss.backward()
            opt.step()
            steps += 1
        seen += rows
    secs = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"n": n, "M": M, "B": B, "seconds": secs, "steps": steps, "rss_mib": rss}


def step_worker(M: int, B: int, threads: int, steps: int = 5) -> dict:
    import latentgp as lg

    torch.set_num_threads(threads)
    X, y = lg.datasets.gp_draws(max(B, M) * 2, input_dim=8, seed=0)
    model = lg.SVGP(num_inducing=M, normalize_y=False).initialize(X, y, seed=0)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    xb, yb = torch.from_numpy(X[:B]), torch.from_numpy(y[:B])
    times = []
    for i in range(steps + 2):
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        (-model.objective(xb, yb, len(y)) / len(y)).backward()
        opt.step()
        if i >= 2:
            times.append(time.perf_counter() - t)
    return {"M": M, "B": B, "step_seconds": float(np.median(times))}


def _sub(kind: str, **kw) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", kind, json.dumps(kw)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--max-n", type=int, default=10_000_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data-dir", default=os.path.join(ROOT, "build", "gp_draws_8d"))
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        kind, kw = args.worker[0], json.loads(args.worker[1])
        fn = epoch_worker if kind == "epoch" else step_worker
        print(json.dumps(fn(**kw)))
        return
    import latentgp as lg

    max_n = 1_000_000 if args.quick else args.max_n
    meta_path = os.path.join(args.data_dir, "meta.json")
    if not os.path.exists(meta_path) or json.load(open(meta_path))["n"] < max_n:
        print(f"writing {max_n} rows to {args.data_dir} ...")
        lg.datasets.write_gp_draws_npy(
            args.data_dir,
            max_n,
            shard_size=1_000_000,
            input_dim=8,
            seed=0,
            lengthscale=2.0,
            noise=0.01,
        )
    ns = [n for n in (10**4, 10**5, 10**6, 10**7) if n <= max_n]
    epochs = [
        _sub("epoch", folder=args.data_dir, n=n, M=256, B=4096, threads=args.threads) for n in ns
    ]
    for e in epochs:
        print(
            f"epoch N={e['n']}: {e['seconds']:.1f} s, {e['steps']} steps, "
            f"RSS {e['rss_mib']:.0f} MiB"
        )
    Ms = [64, 256, 1024] if args.quick else [64, 128, 256, 512, 1024, 2048, 4096]
    steps = [_sub("step", M=M, B=1024, threads=args.threads) for M in Ms]
    for s in steps:
        print(f"step M={s['M']} B=1024: {s['step_seconds'] * 1e3:.1f} ms")
    _write(args, epochs, steps)


def _write(args, epochs, steps) -> None:
    os.makedirs(RESULTS, exist_ok=True)
    cmd = "python benchmarks/svgp_scaling.py" + (" --quick" if args.quick else "")
    lines = [
        "# SVGP scaling in N (streamed) and M",
        "",
        f"Command: `{cmd}`",
        "",
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, torch {torch.__version__}, "
        f"{args.threads} threads, float64, ARD SE kernel, Gaussian likelihood, Adam.",
        "",
        "## One epoch over N synthetic points (M = 256, B = 4096), streamed from .npy shards",
        "",
        "| N | steps | seconds | points/s | peak RSS MiB |",
        "|---|---|---|---|---|",
    ]
    for e in epochs:
        lines.append(
            f"| {e['n']:,} | {e['steps']} | {e['seconds']:.1f} | "
            f"{e['n'] / e['seconds']:,.0f} | {e['rss_mib']:.0f} |"
        )
    lines += ["", "## Step time against M (B = 1024)", "", "| M | ms per step |", "|---|---|"]
    lines += [f"| {s['M']} | {s['step_seconds'] * 1e3:.1f} |" for s in steps]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(9, 3.5), dpi=100)
        ax[0].loglog([e["n"] for e in epochs], [e["seconds"] for e in epochs], "o-")
        ax[0].set(xlabel="N", ylabel="seconds per epoch", title="epoch time (M=256, B=4096)")
        ax[1].loglog([s["M"] for s in steps], [s["step_seconds"] for s in steps], "o-")
        ax[1].set(xlabel="M", ylabel="seconds per step", title="step time (B=1024)")
        fig.tight_layout()
        fig.savefig(os.path.join(RESULTS, "scaling.png"))
        lines += ["", "![scaling](scaling.png)"]
    except ImportError:
        pass
    with open(os.path.join(RESULTS, "scaling.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
