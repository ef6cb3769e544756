"""Scale-out: SVGP training throughput with 1 and 2 data-parallel processes, and training
over a 10^7-row Parquet file with bounded resident memory.

Throughput: the same global batch and steps, each process single-threaded, the
processes joined in a gloo group on loopback (``latentgp.training.distributed.spawn``).
The target on a 2-core machine is at least 1.6x with 2 processes.

    .venv/bin/python benchmarks/scaleout.py [--quick]

Writes docs/results/scale-out.md.
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

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(ROOT, "docs", "results")


def _train(X, y, M, B, steps, out):
    import latentgp as lg
    from latentgp.training import distributed as D

    torch.set_num_threads(1)
    m = lg.SVGP(num_inducing=M, normalize_y=False)
    m.initialize(X, y, seed=0)
    t0 = time.perf_counter()
    m.fit(X, y, batch_size=B, max_steps=steps, seed=0)
    secs = time.perf_counter() - t0
    if D.is_main():
        with open(out, "w") as fh:
            json.dump({"seconds": secs}, fh)


def throughput(M: int, B: int, steps: int, nproc: int, tmp: str) -> float:
    import latentgp as lg
    from latentgp.training import distributed as D

    X, y = lg.datasets.gp_draws(50_000, input_dim=8, seed=0, lengthscale=2.0, noise=0.01)
    out = os.path.join(tmp, f"t_{M}_{nproc}.json")
    if nproc == 1:
        _train(X, y, M, B, steps, out)
    else:
        D.spawn(_train, nproc, X, y, M, B, steps, out)
    with open(out) as fh:
        secs = json.load(fh)["seconds"]
    return steps * B / secs


def parquet_worker(path: str, B: int, epochs: int) -> dict:
    import latentgp as lg

    torch.set_num_threads(2)
    src = lg.datasets.ShardedArrays(path, target="y")
    t0 = time.perf_counter()
    m = lg.SVGP(num_inducing=256).fit(src, batch_size=B, epochs=epochs, seed=0)
    return {
        "rows": src.num_rows,
        "seconds": time.perf_counter() - t0,
        "steps": m.history_.steps,
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def write_parquet(path: str, n: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    import latentgp as lg

    writer = None
    for X, y in lg.datasets.gp_draws(
        n, input_dim=8, seed=0, lengthscale=2.0, noise=0.01, chunk_size=1_000_000
    ):
        cols = {f"x{i}": X[:, i] for i in range(8)}
        cols["y"] = y
        table = pa.table(cols)
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
    writer.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--parquet-rows", type=int, default=10_000_000)
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(parquet_worker(args.worker[0], int(args.worker[1]), int(args.worker[2]))))
        return
    tmp = os.path.join(ROOT, "build", "scaleout")
    os.makedirs(tmp, exist_ok=True)
    rows = []
    steps = 10 if args.quick else 40
    for M in (256, 1024):
        B = 4096
        # interleaved: 1 process, 2 processes sharing the batch (strong scaling), 2
        # processes with B each (weak scaling, the usual data-parallel throughput)
        one = throughput(M, B, steps, 1, tmp)
        strong = throughput(M, B, steps, 2, tmp)
        weak = throughput(M, 2 * B, steps, 2, tmp)
        rows.append((M, B, one, strong, weak))
        print(
            f"M={M} B={B}: 1 process {one:,.0f} pts/s; 2 processes, global batch {B}: "
            f"{strong:,.0f} pts/s ({strong / one:.2f}x); 2 processes, {B} each: "
            f"{weak:,.0f} pts/s ({weak / one:.2f}x)"
        )
    n = 1_000_000 if args.quick else args.parquet_rows
    path = os.path.join(tmp, f"gp_{n}.parquet")
    if not os.path.exists(path):
        write_parquet(path, n)
    res = json.loads(
        subprocess.run(
            [sys.executable, __file__, "--worker", path, "4096", "1"],
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    print(f"parquet {res['rows']:,} rows: {res['seconds']:.0f} s, RSS {res['rss_mib']:.0f} MiB")
    cmd = "python benchmarks/scaleout.py" + (" --quick" if args.quick else "")
    lines = [
        "# Scale-out: data-parallel SVGP and out-of-core training",
        "",
        f"Command: `{cmd}`",
        "",
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, torch {torch.__version__}, "
        "float64, gloo on loopback, each process single-threaded.",
        "",
        f"## Throughput, 1 vs 2 processes ({steps} steps, D = 8)",
        "",
        "Strong scaling: the 2 processes share one global batch of B points (B/2 each), so",
        "each still repeats the O(M^3) work of a step (Kzz's Cholesky, the KL and the",
        "M x M factors). Weak scaling: each process takes a batch of B points (global 2B),",
        "the usual measure of data-parallel throughput.",
        "",
        "| M | B per process (1 proc) | 1 process pts/s | 2 processes, global B: pts/s "
        "| speed-up | 2 processes, B each: pts/s | speed-up |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {M} | {B} | {a:,.0f} | {b:,.0f} | {b / a:.2f}x | {c:,.0f} | {c / a:.2f}x |"
        for M, B, a, b, c in rows
    ]
    lines += [
        "",
        f"## One epoch over a {res['rows']:,}-row Parquet file (M = 256, B = 4096)",
        "",
        "| rows | steps | seconds | peak RSS MiB |",
        "|---|---|---|---|",
        f"| {res['rows']:,} | {res['steps']} | {res['seconds']:.0f} | {res['rss_mib']:.0f} |",
        "",
        "The Parquet file is converted once, streaming, into memory-mapped .npy shards "
        "(the conversion time is included unless the shards were cached); the peak RSS "
        "(ru_maxrss of the training process) includes the file pages of the shards mapped "
        "into the process, bounded by `ShardedArrays(max_mapped_bytes=1 GiB)`.",
    ]
    with open(os.path.join(RESULTS, "scale-out.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
