"""SVGP training speed and accuracy: latentgp against GPyTorch and GPflow on the same work.

Each library runs in its own worker process (GPflow in its own virtual environment,
``.venv-gpflow``) and the harness interleaves their repetitions, so all three see the same
machine state.  Same data, split, minibatch sequence, initial inducing inputs and
hyperparameters, M, B, dtype, ARD SE kernel, Gaussian likelihood, Adam learning rate and
number of steps.  Reports per-step time (min/median/max over repetitions of the per-
repetition median), the ratio to latentgp, the achieved GFLOP/s under the issue's count
(7 B M^2 + M^3 per step) against the dense GEMM rate measured in the same run, test RMSE
and NLPD after the same steps, prediction throughput and peak resident memory.

    .venv/bin/python benchmarks/svgp_performance.py            # full grid (about an hour)
    .venv/bin/python benchmarks/svgp_performance.py --quick    # two configurations

Writes docs/results/performance.md (and performance.json).  Run on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from machine import describe as describe_machine
from machine import package_version, stamp

import latentgp as lg
from latentgp.inducing import kmeans_pp

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(ROOT, "docs", "results")


def gemm_gflops(dtype: torch.dtype, n: int = 2048, reps: int = 5,
                clock=time.perf_counter) -> float:
    """Dense n x n GEMM GFLOP/s, median of ``reps`` timed by ``clock`` (wall by default;
    ``time.process_time`` for CPU seconds)."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    times = []
    for _ in range(reps):
        t = clock()
        a @ b
        times.append(clock() - t)
    return 2 * n**3 / float(np.median(times)) / 1e9


class Worker:
    """One library in its own process, spoken to through JSON lines."""

    def __init__(self, name: str, python: str, script: str, env: dict | None = None):
        self.name = name
        e = dict(os.environ, **(env or {}))
        self.stderr = tempfile.TemporaryFile(mode="w+")  # kept to say why a worker died
        self.proc = subprocess.Popen(
            [python, os.path.join(HERE, "peers", script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            env=e,
        )

    def _died(self) -> RuntimeError:
        self.stderr.seek(0)
        tail = self.stderr.read().strip().splitlines()[-1:] or ["no message"]
        return RuntimeError(f"{self.name} worker died: {tail[0]}")

    def call(self, **cmd) -> dict:
        try:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise self._died() from None
        line = self.proc.stdout.readline()
        if not line:
            raise self._died()
        out = json.loads(line)
        if "error" in out:
            raise RuntimeError(f"{self.name}: {out['error']}")
        return out

    def close(self) -> None:
        try:
            self.proc.stdin.write('{"cmd": "quit"}\n')
            self.proc.stdin.flush()
            self.proc.wait(timeout=30)
        except Exception:  # noqa: BLE001
            self.proc.kill()


def gpflow_python() -> str:
    """GPflow's interpreter: ``$LATENTGP_GPFLOW_PYTHON``, else ``.venv-gpflow`` here."""
    return os.environ.get("LATENTGP_GPFLOW_PYTHON") or os.path.join(
        ROOT, ".venv-gpflow", "bin", "python")


def make_workers(peers: list[str], threads: int) -> list[Worker]:
    py = sys.executable
    workers = [Worker("latentgp", py, "latentgp_worker.py")]
    if "gpytorch" in peers:
        workers.append(Worker("GPyTorch", py, "gpytorch_worker.py"))
    gpflow_py = gpflow_python()
    if "gpflow" in peers:
        if os.path.exists(gpflow_py):
            workers.append(
                Worker(
                    "GPflow",
                    gpflow_py,
                    "gpflow_worker.py",
                    {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"},
                )
            )
        else:
            print(f"GPflow skipped: {gpflow_py} not found (see docs/results/performance.md)")
    return workers


def load_data(name: str, quick: bool):
    if name == "flights":
        ds = lg.datasets.load("flights", n_test=10000)
        ds, _, _ = lg.datasets.standardize(ds)
        return ds.X_train, ds.y_train, ds.X_test, ds.y_test, ds.description
    n = 50_000 if quick else 200_000
    X, y = lg.datasets.gp_draws(n + 10_000, input_dim=8, seed=0, lengthscale=2.0, noise=0.01)
    y = (y - y[:n].mean()) / y[:n].std()
    return X[:n], y[:n], X[n:], y[n:], "GP draw (RFF, SE lengthscale 2 on N(0, I) inputs)"


def prepare(path, X, y, Xte, yte, M, B, total_steps, seed=0):
    g = np.random.default_rng(seed)
    N = X.shape[0]
    per_epoch = N // B
    batches = np.concatenate(
        [
            g.permutation(N)[: per_epoch * B].reshape(per_epoch, B)
            for _ in range(int(np.ceil(total_steps / per_epoch)))
        ]
    )[:total_steps]
    Z = kmeans_pp(torch.as_tensor(X), M, seed=seed, lloyd_iters=5).numpy()
    np.savez(
        path,
        X_train=X,
        y_train=y,
        X_test=Xte,
        y_test=yte,
        Z=Z,
        batches=batches,
        lengthscale=np.full(X.shape[1], np.sqrt(X.shape[1])),
        variance=1.0,
        noise=0.1,
    )


def predict_points(M: int) -> int:
    """Test points for the prediction throughput: 200,000 at M <= 256, fewer at larger M
    (the work is 2 N M^2), never fewer than 5,000."""
    return int(min(200_000, max(5_000, 200_000 * (256 / M) ** 2)))


def start_workers(workers, warmup: int, **setup) -> list:
    """The workers whose ``setup`` (with ``setup``'s fields) succeeded, each trained
    ``warmup`` steps; a failed setup is printed and that worker left out."""
    live = []
    for w in workers:
        try:
            w.call(cmd="setup", **setup)
            live.append(w)
        except RuntimeError as err:
            print(f"  {w.name} setup failed: {err}")
    for w in live:
        w.call(cmd="train", steps=warmup)
    return live


def run_config(workers, data, M, B, dtype, reps, steps, warmup, lr, threads):
    X, y, Xte, yte, _ = data
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "work.npz")
        prepare(path, X, y, Xte, yte, M, B, warmup + reps * steps)
        live = start_workers(workers, warmup, data=path, M=M, B=B, dtype=dtype, lr=lr,
                             threads=threads)
        per_rep = {w.name: [] for w in live}
        for _ in range(reps):
            for w in live:  # interleaved
                out = w.call(cmd="train", steps=steps)
                per_rep[w.name].append(float(np.median(out["times"])))
        result = {}
        for w in live:
            ev = w.call(cmd="eval")
            pr = w.call(cmd="predict", n=predict_points(M))
            rss = w.call(cmd="rss")["rss_mib"]
            t = np.array(per_rep[w.name])
            result[w.name] = {
                "step_min": float(t.min()),
                "step_median": float(np.median(t)),
                "step_max": float(t.max()),
                "rmse": ev["rmse"],
                "nlpd": ev["nlpd"],
                "predict_pts_per_s": pr["points_per_second"],
                "rss_mib": rss,
            }
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--peers", default="gpytorch,gpflow")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data", default="flights,synthetic")
    ap.add_argument(
        "--grid",
        default="",
        help="configurations M:B:dtype, comma-separated (default: the issue's full grid, "
        "or three with --quick)",
    )
    ap.add_argument("--out", default=os.path.join(RESULTS, "performance.md"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.grid:
        grid = [
            (int(M), int(B), dt) for M, B, dt in (item.split(":") for item in args.grid.split(","))
        ]
    elif args.quick:
        grid = [(256, 1024, "float64"), (1024, 4096, "float64"), (256, 1024, "float32")]
    else:
        grid = [
            (M, B, dt)
            for dt in ("float64", "float32")
            for M in (64, 256, 1024, 2048)
            for B in (256, 1024, 4096)
        ]
    gemm = {"float64": [gemm_gflops(torch.float64)], "float32": [gemm_gflops(torch.float32)]}
    workers = make_workers(args.peers.split(","), args.threads)
    rows = []
    try:
        for dname in args.data.split(","):
            data = load_data(dname, args.quick)
            print(f"data {dname}: {data[0].shape[0]} train, {data[2].shape[0]} test ({data[4]})")
            for M, B, dt in grid:
                if B > data[0].shape[0]:
                    continue
                t0 = time.perf_counter()
                res = run_config(
                    workers, data, M, B, dt, args.reps, args.steps, args.warmup, 0.01, args.threads
                )
                gemm[dt].append(gemm_gflops(getattr(torch, dt)))
                rows.append({"data": dname, "M": M, "B": B, "dtype": dt, "results": res})
                ours = res["latentgp"]["step_median"]
                print(
                    f"  M={M} B={B} {dt}: "
                    + ", ".join(f"{k} {v['step_median'] * 1e3:.1f} ms" for k, v in res.items())
                    + f" ({time.perf_counter() - t0:.0f} s); latentgp x{1:.0f}"
                    + "".join(
                        f", {k} x{v['step_median'] / ours:.2f}"
                        for k, v in res.items()
                        if k != "latentgp"
                    )
                )
                _write(args, rows, gemm)
    finally:
        for w in workers:
            w.close()
    _write(args, rows, gemm)


def plot_step_times(rows: list[dict], path: str) -> bool:
    """Step time against M, one panel per dtype, a line per library and batch size;
    False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    dtypes = sorted({r["dtype"] for r in rows}, reverse=True)
    fig, axes = plt.subplots(1, len(dtypes), figsize=(5 * len(dtypes), 3.8), squeeze=False)
    styles = {"latentgp": "-", "GPyTorch": "--", "GPflow": ":"}
    for ax, dt in zip(axes[0], dtypes, strict=True):
        sub = [r for r in rows if r["dtype"] == dt and r["data"] == rows[0]["data"]]
        for B in sorted({r["B"] for r in sub}):
            for lib, ls in styles.items():
                pts = sorted(
                    (r["M"], r["results"][lib]["step_median"])
                    for r in sub
                    if r["B"] == B and lib in r["results"]
                )
                if pts:
                    Ms, secs = zip(*pts, strict=True)
                    ax.loglog(Ms, secs, ls, marker="o", label=f"{lib}, B={B}")
        ax.set(xlabel="M", ylabel="seconds per Adam step", title=f"{rows[0]['data']}, {dt}")
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return True


def _write(args, rows, gemm) -> None:
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    g = {k: float(np.median(v)) for k, v in gemm.items()}
    cmd = "python benchmarks/svgp_performance.py" + (" --quick" if args.quick else "")
    if args.grid:
        cmd += f" --grid {args.grid}"
    for flag, default in (("data", "flights,synthetic"), ("reps", 3), ("steps", 10), ("warmup", 3)):
        if getattr(args, flag) != default:
            cmd += f" --{flag} {getattr(args, flag)}"
    if os.path.abspath(args.out) != os.path.join(RESULTS, "performance.md"):
        cmd += f" --out {os.path.relpath(args.out, ROOT)}"
    lines = [
        "# SVGP performance: latentgp vs GPyTorch and GPflow",
        "",
        f"Command: `{cmd}` (from the repository root, after `make test` created `.venv`;"
        " GPflow runs from `.venv-gpflow`, see below).",
        "",
        f"Machine: {describe_machine()}, "
        f"torch {torch.__version__}, {args.threads} threads per worker, "
        f"dense GEMM {g['float64']:.0f} GFLOP/s float64, {g['float32']:.0f} GFLOP/s float32 "
        "(2048 x 2048, median of the measurements taken between configurations).",
        "",
        f"Protocol: per configuration, {args.warmup} warm-up steps, then {args.reps} interleaved"
        f" repetitions of {args.steps} Adam steps (lr 0.01) per library; the step time is the "
        "median within a repetition, reported as min / median / max over repetitions. "
        "GFLOP/s counts 7 B M^2 + M^3 per step. Test RMSE/NLPD after all steps "
        f"({args.warmup + args.reps * args.steps}); prediction of mean and variance for "
        "200,000 points at M <= 256 (200,000 x (256 / M)^2, at least 5,000, above); "
        "peak RSS of each worker process (cumulative over its configurations).",
        "",
        "| data | M | B | dtype | library | step ms (min / med / max) | vs latentgp | GFLOP/s "
        "| % GEMM | RMSE | NLPD | predict pts/s | RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        M, B, dt = r["M"], r["B"], r["dtype"]
        flops = 7 * B * M * M + M**3
        ours = r["results"]["latentgp"]["step_median"]
        for lib, v in r["results"].items():
            gf = flops / v["step_median"] / 1e9
            lines.append(
                f"| {r['data']} | {M} | {B} | {dt} | {lib} | {v['step_min'] * 1e3:.1f} / "
                f"{v['step_median'] * 1e3:.1f} / {v['step_max'] * 1e3:.1f} | "
                f"{v['step_median'] / ours:.2f}x | {gf:.1f} | {100 * gf / g[dt]:.0f}% | "
                f"{v['rmse']:.4f} | {v['nlpd']:.4f} | {v['predict_pts_per_s']:,.0f} | "
                f"{v['rss_mib']:.0f} |"
            )
    png = os.path.splitext(args.out)[0] + ".png"
    if plot_step_times(rows, png):
        lines += ["", f"![step time against M]({os.path.basename(png)})"]
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    with open(os.path.splitext(args.out)[0] + ".json", "w") as fh:
        json.dump(stamp({"gemm": gemm, "rows": rows}, peers=peer_versions(rows)), fh, indent=1)


def peer_versions(rows: list[dict]) -> dict[str, str | None]:
    """Versions of the peer libraries the rows compare with (GPflow's from its venv)."""
    libs = {lib for r in rows for lib in r["results"]}
    out: dict[str, str | None] = {}
    if "GPyTorch" in libs:
        out["gpytorch"] = package_version("gpytorch")
    if "GPflow" in libs:
        out["gpflow"] = package_version("gpflow", gpflow_python())
    return out


if __name__ == "__main__":
    main()
