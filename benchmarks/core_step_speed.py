"""Step and prediction time of each model family, before and after a code change.

Issue 22 moved every inducing-point model onto one conditional (``variational.strategy``)
and one prediction module.  This harness times, for each configuration below, one
training step (objective + gradient, the step the fit loop takes) and one prediction pass,
in two source trees: ``--before`` (a git revision, checked out into a temporary worktree,
or a ``src`` folder; default aa222fc, the last commit before the restructuring) and
``--after`` (default this checkout's ``src``).  Each tree runs in its own worker process;
the workers alternate repetition by repetition so both see the same machine state, and the
page reports the ratio of medians (after / before).

    .venv/bin/python benchmarks/core_step_speed.py                  # aa222fc against src
    .venv/bin/python benchmarks/core_step_speed.py --before HEAD~5 --configs shgp_M100_B512
    .venv/bin/python benchmarks/core_step_speed.py --grid --out docs/results/core_step_speed_grid.md

Writes docs/results/core_step_speed.md and .json (with provenance; the json also keeps
every repetition's time, in running order, under ``samples``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from machine import provenance

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(ROOT, "docs", "results")

#: name -> (model constructor source, N, batch, target kind)
CONFIGS = {
    "svgp_M256_B1024": ("lg.SVGP(num_inducing=256)", 4096, 1024, "reg"),
    "svgp_diag_M128_B4096": ("lg.SVGP(num_inducing=128, covariance='diag')", 8192, 4096, "reg"),
    # SAVIGP's flat num_samples= (deprecated) on purpose: the same source runs on --before trees
    "savigp_fg_M128_B512": (
        "lg.SAVIGP(num_inducing=128, posterior='fg', num_samples=20)", 2048, 512, "reg"),
    "savigp_mog2_M128_B512": (
        "lg.SAVIGP(num_inducing=128, posterior='mog2', num_samples=20)", 2048, 512, "reg"),
    "shgp_M100_B512": ("lg.SHGP(num_inducing=100)", 2048, 512, "reg"),
    "smgp_T4_M50_B512": ("lg.SMGP(num_experts=4, num_inducing=50)", 2048, 512, "reg"),
    "svhgp_M100_B512": ("lg.SVHGP(num_inducing=100)", 2048, 512, "reg"),
    "sep_M64": ("lg.SEP(num_inducing=64)", 2048, None, "bin"),
}

#: the SVGP configurations of the performance grid (docs/results/performance_grid.md:
#: M x B x dtype; M = 2048 left out for time), run with ``--grid``
GRID = {
    f"svgp_M{M}_B{B}_{dt}": (
        f"lg.SVGP(num_inducing={M}, dtype=torch.{dt})", max(4 * B, 2 * M), B, "reg")
    for dt in ("float64", "float32")
    for M in (64, 256, 1024)
    for B in (256, 1024, 4096)
}
CONFIGS.update(GRID)

WORKER = r'''
import json, sys, time
import numpy as np, torch
import latentgp as lg
torch.set_num_threads(int(sys.argv[2]))
name, ctor, N, B, kind = json.loads(sys.argv[1])
rng = np.random.default_rng(0)
X = rng.uniform(-3, 3, (N, 4))
f = np.sin(X[:, 0]) + 0.5 * np.cos(2 * X[:, 1])
y = (f > 0).astype(float) if kind == "bin" else f + 0.1 * rng.normal(size=N)
model = eval(ctor)
model.fit(X, y, max_steps=2, progress=False, seed=0)
Xt = torch.as_tensor(X)
out = {}
if kind != "bin":
    if hasattr(model, "scale_targets"):
        ys = model.scale_targets(y)
    else:  # trees from before the public hook
        ys = model._scale_y(model._check_y(torch.as_tensor(y), N))
    xb, yb = Xt[:B].to(ys.dtype), ys[:B]  # the model's dtype (float32 configurations)
    params = [p for p in model.parameters() if p.requires_grad]
    def step():
        obj = model.objective(xb, yb, N)
        torch.autograd.grad(obj, params, allow_unused=True)
    for _ in range(2):
        step()
    times = []
    for _ in range(7):
        t = time.perf_counter(); step(); times.append(time.perf_counter() - t)
    out["step_ms"] = 1e3 * float(np.median(times))
Xp = np.random.default_rng(1).uniform(-3, 3, (20000, 4))
model.predict_y(Xp[:100])
times = []
for _ in range(3):
    t = time.perf_counter(); model.predict_y(Xp); times.append(time.perf_counter() - t)
out["predict_ms"] = 1e3 * float(np.median(times))
print(json.dumps(out))
'''


def run_worker(src: str, cfg: list, threads: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
    proc = subprocess.run(
        [sys.executable, "-c", WORKER, json.dumps(cfg), str(threads)],
        capture_output=True, text=True, env=env, check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def commit_of(path: str) -> str:
    try:
        return subprocess.run(["git", "-C", path, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def source_tree(spec: str, tmp: str) -> str:
    """A ``src`` folder for ``spec``: the folder itself, or a worktree of that revision."""
    if os.path.isdir(spec):
        return os.path.abspath(spec)
    dest = os.path.join(tmp, "tree")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", dest, spec],
                   check=True, capture_output=True)
    return os.path.join(dest, "src")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", default="aa222fc", help="git revision or src folder")
    ap.add_argument("--after", default=os.path.join(ROOT, "src"))
    ap.add_argument("--quick", action="store_true", help="two configurations, one repetition")
    ap.add_argument("--grid", action="store_true",
                    help="the SVGP performance grid (M x B x dtype) instead of the families")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--configs", default=",".join(c for c in CONFIGS if c not in GRID))
    ap.add_argument("--out", default=os.path.join(RESULTS, "core_step_speed.md"))
    args = ap.parse_args()
    if args.grid:
        args.configs = ",".join(GRID)
    if args.quick:
        args.reps, args.configs = 1, "svgp_M256_B1024,shgp_M100_B512"
    with tempfile.TemporaryDirectory() as tmp:
        before = source_tree(args.before, tmp)
        try:
            run(args, before)
        finally:
            if not os.path.isdir(args.before):
                subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force",
                                os.path.dirname(before)], capture_output=True)


def run(args: argparse.Namespace, before_src: str) -> None:
    rows = []
    for name in args.configs.split(","):
        ctor, N, B, kind = CONFIGS[name]
        cfg = [name, ctor, N, B, kind]
        res = {"before": [], "after": []}
        for _ in range(args.reps):
            for side in ("before", "after"):
                src = before_src if side == "before" else args.after
                res[side].append(run_worker(src, cfg, args.threads))
        row = {"config": name, "threads": args.threads}
        for key in ("step_ms", "predict_ms"):
            if key in res["before"][0]:
                b = sorted(r[key] for r in res["before"])[len(res["before"]) // 2]
                a = sorted(r[key] for r in res["after"])[len(res["after"]) // 2]
                row[key] = {"before": b, "after": a, "ratio": a / b,
                            "samples": {side: [r[key] for r in res[side]] for side in res}}
        rows.append(row)
        print(json.dumps(row), flush=True)
    prov = provenance()
    prov["before_commit"] = commit_of(os.path.dirname(before_src))
    prov["after_commit"] = commit_of(os.path.dirname(os.path.abspath(args.after)))
    base = os.path.splitext(args.out)[0]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(base + ".json", "w") as fh:
        json.dump({"provenance": prov, "rows": rows}, fh, indent=1)
    lines = [
        "# Step and prediction time before and after the one-core restructuring", "",
        f"Command: `{prov['command']}`  ",
        f"Before: commit {prov['before_commit']}; after: commit {prov['after_commit']}; "
        f"torch {prov['versions']['torch']}, numpy {prov['versions']['numpy']}, Python "
        f"{prov['versions']['python']}; {prov['cpu']}; {args.threads} thread(s) per worker; "
        f"{prov['date']}.", "",
        "Medians over repetitions, the two trees alternating in separate processes; "
        "ratio = after / before (below 1: faster).  A training step is objective + "
        "gradient on one batch; prediction is `predict_y` on 20,000 points.", "",
        "| configuration | step before (ms) | step after (ms) | ratio | predict before (ms) "
        "| predict after (ms) | ratio |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        s, p = r.get("step_ms"), r["predict_ms"]
        step = (f"{s['before']:.1f} | {s['after']:.1f} | {s['ratio']:.2f}" if s else "– | – | –")
        lines.append(f"| {r['config']} | {step} | {p['before']:.1f} | {p['after']:.1f} | "
                     f"{p['ratio']:.2f} |")
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
