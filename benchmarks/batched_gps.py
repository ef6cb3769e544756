"""Many independent small GPs: one batched fit against a Python loop of single fits.

Issue 28, item 5: 1,000 independent exact GPs of 100 points each, fitted in one
``lg.BatchedExactGP().fit(X, y)`` call (``X`` ``(1000, 100, D)``), against a Python loop
of ``lg.ExactGP().fit(X[b], y[b])``; the target is 20x faster with the same optima.

Data: member b is a draw of ``lg.datasets.gp_draws`` (seed b) with its own lengthscale
(log-uniform in [0.3, 3]), signal amplitude (log-uniform in [0.3, 30]), offset and noise
(standard deviation 5-30% of the amplitude), inputs uniform in [0, 4]^D: each member's
optimum is its own.

Timed: the batched fit (the whole call: validation, initialisation, training, once), and
the loop over the first ``--loop`` members (each fit a whole call; half of them before the
batched fit, half after it), whose mean time per fit times B is the loop's time for all
members (extrapolated: the loop over every member
takes about as long again as the rest of the benchmark, and each fit is independent of
the others).  Both single-threaded, in the same process.

Optima: for the looped members, the batched fit's log marginal likelihood (targets' units)
minus the single fit's, and the largest relative difference of the fitted
hyperparameters (lengthscales, signal and noise variances).

    .venv/bin/python benchmarks/batched_gps.py [--members 1000] [--points 100] [--dim 2]
        [--loop 50] [--device cpu] [--quick]

Writes docs/results/batched_gps.json and .md (not with --quick).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch
from machine import describe as describe_machine
from machine import stamp

import latentgp as lg

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(os.path.dirname(HERE), "docs", "results")


def make_data(B: int, N: int, D: int) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(0)
    X = np.empty((B, N, D))
    y = np.empty((B, N))
    for b in range(B):
        ls = float(np.exp(rng.uniform(np.log(0.3), np.log(3.0))))
        amp = float(np.exp(rng.uniform(np.log(0.3), np.log(30.0))))
        f = lg.datasets.gp_draws_function(input_dim=D, seed=b, lengthscale=ls)
        X[b] = rng.uniform(0.0, 4.0, (N, D))
        noise = rng.uniform(0.05, 0.3) * amp
        y[b] = amp * f(X[b]) + rng.normal(0.0, 1.0) * amp + noise * rng.standard_normal(N)
    return torch.as_tensor(X), torch.as_tensor(y)


def evaluation_cost(X: torch.Tensor, y: torch.Tensor, members: int = 210,
                    repeats: int = 5) -> dict:
    """Milliseconds per member of one evaluation (objective and gradient) of the batched
    L-BFGS at the members' starting points: by autograd (the general path, chunks of 105)
    and in closed form (chunks of 105 and the default 27), and of its two factorisations
    alone (``cholesky_ex`` and ``cholesky_inverse`` of the same matrices)."""
    from latentgp.training import BatchedLBFGSTask
    from latentgp.training.tasks import FitOptions

    members = min(members, X.shape[0])
    X, y = X[:members], y[:members]
    model = lg.BatchedExactGP(device=X.device).initialize(X, y)
    opts = FitOptions(batch_size=X.shape[1], batch_size_given=False, epochs=None,
                      max_steps=None, lr=1.0, optimizer="lbfgs", optimizer_kwargs=None,
                      seed=None, tol=None, checkpoint=None, resume=False,
                      process_group=None, defaults={})
    task = BatchedLBFGSTask(model, X, model.y_train, opts)
    x0, idx = task.flat(), torch.arange(members)

    def per_member(fn) -> float:
        fn()
        _sync(X.device.type)
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        _sync(X.device.type)
        return 1e3 * (time.perf_counter() - t0) / repeats / members

    out = {}
    for name, closed, chunk in [("autograd, chunks of 105", False, 105),
                                ("closed form, chunks of 105", True, 105),
                                (f"closed form, chunks of {task.chunk}", True, task.chunk)]:
        task.closed_form, task.chunk = closed, chunk
        out[name] = per_member(lambda: task.evaluate(x0, idx))
    with torch.no_grad():
        K = model.kernel(X, X) + torch.diag_embed(
            model.likelihood.variance[:, None].expand(members, X.shape[1]))
    L = torch.linalg.cholesky(K)
    out["cholesky_ex alone"] = per_member(lambda: torch.linalg.cholesky_ex(K))
    out["cholesky_inverse alone"] = per_member(lambda: torch.cholesky_inverse(L))
    return out


def hyper(m, b=None):
    k, lik = m.kernel, m.likelihood
    pick = (lambda t: t[b]) if b is not None else (lambda t: t)
    scale = float(m.y_scale[b] if b is not None else m.y_scale[0]) ** 2
    return np.concatenate([
        pick(k.lengthscale).detach().reshape(-1).cpu().numpy(),
        [float(pick(k.variance).detach()) * scale, float(pick(lik.variance).detach()) * scale],
    ])


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run(B: int, N: int, D: int, loop: int, device: str, loop_device: str) -> dict:
    X, y = make_data(B, N, D)
    X, y = X.to(device), y.to(device)
    Xl, yl = X.to(loop_device), y.to(loop_device)
    lg.ExactGP(device=loop_device).fit(Xl[0], yl[0])  # warm-up (first-call allocations)
    lg.BatchedExactGP(device=device).fit(X[:2], y[:2])
    singles, times = [], []

    def single_fits(members: range) -> None:
        for b in members:
            _sync(loop_device)
            t0 = time.perf_counter()
            s = lg.ExactGP(device=loop_device).fit(Xl[b], yl[b])
            _sync(loop_device)
            times.append(time.perf_counter() - t0)
            singles.append(s)

    # half of the looped fits before the batched fit and half after it, so that a change
    # of the shared machine's load during the run weighs on both sides alike
    load_before = os.getloadavg()
    single_fits(range(loop // 2))
    _sync(device)
    t0 = time.perf_counter()
    model = lg.BatchedExactGP(device=device).fit(X, y)
    _sync(device)
    t_batched = time.perf_counter() - t0
    single_fits(range(loop // 2, loop))
    load_after = os.getloadavg()
    cost = evaluation_cost(X, y)
    lml_b = model.log_marginal_likelihood()
    lml_s = np.array([s.log_marginal_likelihood() for s in singles])
    d = lml_b[:loop] - lml_s
    rel = [float(np.max(np.abs(hyper(model, b) - hyper(s)) / np.abs(hyper(s))))
           for b, s in enumerate(singles)]
    per_fit = float(np.mean(times))
    return {
        "members": B, "points": N, "dim": D, "looped": loop,
        "batched_seconds": t_batched,
        "batched_steps": model.history_.steps,
        "batched_stopped": model.history_.stopped,
        "batched_events": list(model.history_.events),
        "loop_seconds_per_fit": per_fit,
        "loop_seconds_per_fit_min_max": [float(np.min(times)), float(np.max(times))],
        "loop_seconds_extrapolated": per_fit * B,
        "speedup": per_fit * B / t_batched,
        "single_steps_median": float(np.median([s.history_.steps for s in singles])),
        "lml_diff_max_abs": float(np.max(np.abs(d))),
        "lml_diff_min": float(np.min(d)),
        "lml_diff_max": float(np.max(d)),
        "members_lml_within_1e-4": int(np.sum(np.abs(d) < 1e-4)),
        "members_lml_within_1e-2": int(np.sum(np.abs(d) < 1e-2)),
        "hyper_rel_diff_median": float(np.median(rel)),
        "hyper_rel_diff_max": float(np.max(rel)),
        "load_average_1_5_15_min_before_after": [list(load_before), list(load_after)],
        "evaluation_ms_per_member": cost,
        "torch_threads": torch.get_num_threads(),
        "device": device,
        "loop_device": loop_device,
        "gpu": torch.cuda.get_device_name() if "cuda" in (device + loop_device) else None,
    }


def fmt_load(avg: list) -> str:
    return " / ".join(f"{a:.2f}" for a in avg)


def write(res: dict, stem: str) -> None:
    obj = stamp({"results": res})
    with open(os.path.join(RESULTS, f"{stem}.json"), "w") as fh:
        json.dump(obj, fh, indent=1)
    p = obj["provenance"]
    r = res
    lines = [
        "# Batched independent GPs: one call against a loop of single fits",
        "",
        f"Command: `{p['command']}` (from the "
        f"repository root); raw numbers and provenance in `{stem}.json`.",
        "",
        f"Machine: {describe_machine()}"
        + (f", GPU {r['gpu']}" if r.get("gpu") else "")
        + f"; batched fit on {r['device']}, single fits on {r['loop_device']}; torch "
        f"{p['versions'].get('torch')}, float64, {r['torch_threads']} thread(s); commit "
        f"{p['commit']}, {p['date']}.",
        "",
        f"{r['members']} independent exact GPs of {r['points']} points each (D = {r['dim']}, "
        "ARD SE kernel, Gaussian noise, each member its own lengthscale, amplitude, offset "
        "and noise; targets standardised per member), fitted to convergence by the "
        "library's defaults.",
        "",
        "| what | seconds | per member |",
        "|---|---|---|",
        f"| `BatchedExactGP().fit(X, y)`, X of shape ({r['members']}, {r['points']}, "
        f"{r['dim']}), one call | {r['batched_seconds']:.1f} | "
        f"{1e3 * r['batched_seconds'] / r['members']:.1f} ms |",
        f"| loop of `ExactGP().fit(X[b], y[b])`: {r['looped']} fits timed, times "
        f"{r['members']} (extrapolated) | {r['loop_seconds_extrapolated']:.1f} | "
        f"{1e3 * r['loop_seconds_per_fit']:.1f} ms (min "
        f"{1e3 * r['loop_seconds_per_fit_min_max'][0]:.0f}, max "
        f"{1e3 * r['loop_seconds_per_fit_min_max'][1]:.0f}) |",
        "",
        f"**Speed-up: {r['speedup']:.1f}x** (target: 20x).",
        "",
        "Load of the shared machine (`os.getloadavg()`, 1/5/15 min) before the first "
        f"timed fit: {fmt_load(r['load_average_1_5_15_min_before_after'][0])}; after the "
        f"last: {fmt_load(r['load_average_1_5_15_min_before_after'][1])}.  Half of the "
        "looped fits ran before the batched fit and half after it.",
        "",
        "One evaluation of the batched L-BFGS (objective and gradient of 210 members at "
        "their starting points, measured after the fits), milliseconds per member: "
        + "; ".join(f"{k} {v:.3f}" for k, v in r["evaluation_ms_per_member"].items()) + ".",
        "",
        f"Batched fit: {r['batched_steps']} iterations, {r['batched_stopped']}; "
        + "; ".join(r["batched_events"]) + ". Single fits: median "
        f"{r['single_steps_median']:.0f} L-BFGS steps.",
        "",
        f"Same optima, over the {r['looped']} looped members: batched minus single log "
        f"marginal likelihood between {r['lml_diff_min']:.2e} and {r['lml_diff_max']:.2e} "
        f"nats (largest |difference| {r['lml_diff_max_abs']:.2e}); "
        f"{r['members_lml_within_1e-4']} of {r['looped']} within 1e-4 nats, "
        f"{r['members_lml_within_1e-2']} within 1e-2; fitted hyperparameters (lengthscales, "
        f"signal and noise variances in the targets' units) differ by a median relative "
        f"{r['hyper_rel_diff_median']:.1e}, at most {r['hyper_rel_diff_max']:.1e}.",
        "",
    ]
    with open(os.path.join(RESULTS, f"{stem}.md"), "w") as fh:
        fh.write("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=1000)
    ap.add_argument("--points", type=int, default=100)
    ap.add_argument("--dim", type=int, default=2)
    ap.add_argument("--loop", type=int, default=50)
    ap.add_argument("--device", default="cpu", help="the batched fit's device: cpu or cuda")
    ap.add_argument("--loop-device", default=None,
                    help="the single fits' device (default: --device)")
    ap.add_argument("--out", default=None, help="file stem under docs/results "
                    "(default: batched_gps, or batched_gps_<device>_loop_<loop device>)")
    ap.add_argument("--quick", action="store_true", help="40 members, 10 looped; no files")
    a = ap.parse_args()
    if a.quick:
        a.members, a.loop = 40, 10
    loop_device = a.loop_device or a.device
    res = run(a.members, a.points, a.dim, a.loop, a.device, loop_device)
    print(json.dumps(res, indent=1))
    stem = a.out or ("batched_gps" if a.device == loop_device == "cpu"
                     else f"batched_gps_{a.device}_loop_{loop_device}")
    if not a.quick:
        write(res, stem)


if __name__ == "__main__":
    main()
