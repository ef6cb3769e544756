"""Where an SVGP training step spends its time, what torch.compile and a fused ELBO give,
and the float32 / float64 step against GPyTorch and GPflow (issue 24, items 3 and 4).

Five parts, each on the flights stand-in (standardised), one thread per process:

- ``profile``: torch.profiler over latentgp's Adam step at M = 256, B = 1024 (float64 and
  float32), each operation's self time grouped into parts (matrix products, triangular
  solves, Cholesky, ...), with the flops and GFLOP/s of each part against the dense GEMM
  rate measured in the same process.  Per operation the fastest of the profiled steps is
  kept (another process taking the core only ever adds time), and the sum is checked
  against the step's CPU seconds measured without the profiler.
- ``compile``: ``torch.compile`` (inductor, CPU) of the objective, float64: compile
  seconds, step time after, and the loss and gradients against eager mode.
- ``fused``: a Gaussian-likelihood ELBO with its own backward (:class:`FusedGaussianELBO`,
  checked against autograd in tests/unit/test_step_profile.py), interleaved with the
  library's step.
- ``peers``: latentgp, GPyTorch and GPflow in their worker processes
  (``benchmarks/peers``), interleaved: per-step wall and CPU seconds, test RMSE / NLPD
  (NaN checks), prediction throughput and %GEMM, for the float32 grid (M = 256 and 1,024)
  and the float64 targets (M = 256, B = 1024; M = 1024, B = 4096).

    .venv/bin/python benchmarks/step_profile.py            # all parts (about 20 minutes)
    .venv/bin/python benchmarks/step_profile.py --quick    # small smoke run

Writes docs/results/step_profile.json (the page docs/results/step_profile.md is written by
hand from it).  GPflow runs from ``$LATENTGP_GPFLOW_PYTHON`` or ``.venv-gpflow``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import sys
import tempfile
import time

import torch
from machine import stamp
from svgp_performance import load_data, make_workers, peer_versions, prepare

from latentgp.variational.fastpaths import WhitenedQuadFactors

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(ROOT, "docs", "results")


# ------------------------------------------------------------------ fused ELBO --
class FusedGaussianELBO(torch.autograd.Function):
    """``(Kzx, kxx, alpha, R, s2, y, scale) -> scale * sum_n E_q[log N(y_n | f_n, s2)]``.

    With ``mu = Kzx^T alpha`` and ``sum_n var_n = sum(kxx) - <R, P>``, ``P = Kzx Kzx^T``
    (the batch enters the variances only through their sum, so no ``(M, B)`` element-wise
    product and reduction is formed):
    ``ell = -B/2 log(2 pi s2) - (|y - mu|^2 + sum_n var_n) / (2 s2)``.
    Backward: ``g_mu = (y - mu) / s2``, ``g_R = P / (2 s2)``, ``g_kxx = -1 / (2 s2)``,
    ``g_Kzx = alpha g_mu^T + R Kzx / s2``, ``g_alpha = Kzx g_mu``,
    ``g_s2 = -B / (2 s2) + (|y - mu|^2 + sum var) / (2 s2^2)`` (all times ``scale``).
    Shapes: Kzx ``(1, M, B)``, kxx ``(1, B)``, alpha ``(1, M)``, R ``(1, M, M)``, s2 a
    0-d tensor, y ``(B,)``; scale a float (N / B).  Unlike the library's marginals the
    variances are not clamped one by one (only their sum enters).
    """

    @staticmethod
    def forward(ctx, Kzx, kxx, alpha, R, s2, y, scale):
        mu = (alpha[:, None, :] @ Kzx)[0, 0]
        P = Kzx @ Kzx.mT
        r = y - mu
        total = r @ r + kxx.sum() - (R * P).sum()
        B = y.shape[0]
        ctx.save_for_backward(Kzx, alpha, R, P, r, s2, total)
        ctx.scale = scale
        return scale * (-0.5 * B * torch.log(2 * math.pi * s2) - 0.5 * total / s2)

    @staticmethod
    def backward(ctx, g):
        Kzx, alpha, R, P, r, s2, total = ctx.saved_tensors
        c = g * ctx.scale
        g_mu = (c / s2) * r
        half = 0.5 * c / s2  # minus the gradient with respect to sum_n var_n
        g_Kzx = (R @ Kzx) * (2.0 * half)
        g_Kzx.addcmul_(alpha[:, :, None], g_mu[None, None, :])
        g_alpha = (Kzx @ g_mu[:, None])[..., 0]
        g_s2 = c * (-0.5 * r.shape[0] / s2 + 0.5 * total / s2**2)
        g_kxx = (-half).expand(Kzx.shape[0], Kzx.shape[-1])
        return g_Kzx, g_kxx, g_alpha, P * half, g_s2, None, None


def fused_objective(model, X: torch.Tensor, y: torch.Tensor, num_data: int) -> torch.Tensor:
    """``model.objective(X, y, num_data)`` of an SVGP with one latent, a Gaussian
    likelihood, whitened full q(u) and no prior mean, through :class:`FusedGaussianELBO`.
    X ``(B, D)``, y ``(B,)`` or ``(B, 1)``."""
    Lzz = model.prior_factor()
    M = Lzz.shape[-1]
    alpha, R = WhitenedQuadFactors.apply(Lzz.expand(1, M, M), model.q.q_mu, model.q.q_sqrt)
    ell = FusedGaussianELBO.apply(
        model.kernel(model.Z, X), model.kernel.diag(X), alpha, R,
        model.likelihood.variance.reshape(()), y.reshape(-1), num_data / X.shape[0],
    )
    return ell - model.q.kl(Lzz, None)


# ------------------------------------------------------------------ helpers --
def gemm_rate(dtype: torch.dtype, n: int = 1024, reps: int = 7) -> float:
    """Dense GEMM GFLOP/s in CPU seconds (one thread), median of ``reps``."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    t = []
    for _ in range(reps):
        c = time.process_time()
        a @ b
        t.append(time.process_time() - c)
    return 2 * n**3 / statistics.median(t) / 1e9


def load_avg() -> float:
    return os.getloadavg()[0]


def latentgp_state(path: str, M: int, B: int, dtype: str, lr: float = 0.01) -> dict:
    """A fresh latentgp worker state (model, optimiser, batches) from the shared npz."""
    if os.path.join(HERE, "peers") not in sys.path:
        sys.path.insert(0, os.path.join(HERE, "peers"))
    import latentgp_worker as lw

    lw.state.clear()
    lw.setup({"data": path, "M": M, "B": B, "dtype": dtype, "lr": lr, "threads": 1})
    return dict(lw.state)


def make_step(st: dict, objective=None):
    """One Adam step of the worker's loop (``objective(model, xb, yb, N)``, default the
    model's own), cycling through the npz's minibatches; returns the loss."""
    m, opt, N = st["model"], st["opt"], st["N"]
    obj = objective or (lambda mod, x, y, n: mod.objective(x, y, n))
    pos = [0]

    def step():
        idx = torch.as_tensor(st["batches"][pos[0] % len(st["batches"])])
        pos[0] += 1
        opt.zero_grad(set_to_none=True)
        loss = -obj(m, st["X"][idx], st["y"][idx], N) / N
        loss.backward()
        opt.step()
        return loss

    return step


def cpu_ms(step, n: int) -> list[float]:
    out = []
    for _ in range(n):
        c = time.process_time()
        step()
        out.append(1e3 * (time.process_time() - c))
    return out


# ------------------------------------------------------------------ profile --
def _flops(name: str, shapes: list) -> float:
    s = [list(x) for x in shapes if isinstance(x, (list, tuple))]
    if name in ("aten::bmm", "aten::mm") and len(s) >= 2 and s[0] and s[1]:
        a, b = s[0], s[1]
        return 2.0 * math.prod(a) * b[-1]
    if name == "aten::linalg_solve_triangular" and len(s) >= 2:
        a, b = s[0], s[1]
        return float(a[-1] * a[-1]) * (math.prod(b) / a[-1]) * (math.prod(a[:-2]) or 1) / (
            math.prod(b[:-2]) or 1) if a else 0.0
    if name == "aten::linalg_cholesky_ex" and s:
        return s[0][-1] ** 3 / 3.0 * (math.prod(s[0][:-2]) or 1)
    return 0.0


def _part(name: str, shapes: list, M: int, B: int) -> str:
    if name in ("aten::bmm", "aten::mm", "aten::addmm", "aten::baddbmm"):
        return "matrix products"
    if name == "aten::linalg_solve_triangular":
        return "triangular solves"
    if name == "aten::linalg_cholesky_ex":
        return "Cholesky"
    if name == "aten::exp":
        return "exp (kernel)"
    if "adam" in name.lower() or name.startswith("Optimizer."):
        return "optimiser"
    big = max((math.prod(x) for x in shapes if isinstance(x, (list, tuple)) and x), default=0)
    if big >= M * B // 2:
        return "element-wise, (M, B) arrays"
    if big >= M * M // 2:
        return "element-wise, (M, M) arrays"
    return "small operations and autograd bookkeeping"


def profile_step(path: str, M: int, B: int, dtype: str, steps: int) -> dict:
    from torch.profiler import ProfilerActivity, profile, record_function

    st = latentgp_state(path, M, B, dtype)
    step = make_step(st)
    for _ in range(3):
        step()
    plain = cpu_ms(step, steps)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for i in range(steps):
            with record_function(f"step{i}"):
                step()
    events = [e for e in prof.events()]
    marks = sorted((e.time_range.start, e.time_range.end, int(e.name[4:]))
                   for e in events if e.name.startswith("step") and e.name[4:].isdigit())
    per_step: list[list] = [[] for _ in range(steps)]
    for e in events:
        if e.name.startswith("step") and e.name[4:].isdigit():
            continue
        t0 = e.time_range.start
        for a, b, k in marks:
            if a <= t0 <= b:
                per_step[k].append(e)
                break
    # the k-th occurrence of each (name, shapes) in a step; its fastest over the steps
    best: dict = {}
    for evs in per_step:
        seen: dict = {}
        for e in sorted(evs, key=lambda e: e.time_range.start):
            key = (e.name, str(e.input_shapes))
            k = seen.get(key, 0)
            seen[key] = k + 1
            t = e.self_cpu_time_total / 1e3  # ms
            cur = best.get((key, k))
            if cur is None or t < cur[0]:
                best[(key, k)] = (t, e.name, e.input_shapes)
    parts: dict = {}
    for t, name, shapes in best.values():
        p = parts.setdefault(_part(name, shapes, M, B), {"ms": 0.0, "calls": 0, "gflop": 0.0})
        p["ms"] += t
        p["calls"] += 1
        p["gflop"] += _flops(name, shapes) / 1e9
    return {"M": M, "B": B, "dtype": dtype, "step_cpu_ms": plain,
            "gemm_gflops": gemm_rate(getattr(torch, dtype)), "parts": parts}


# ------------------------------------------------------------------ compile / fused --
def _grads(st: dict, objective) -> tuple[float, list[torch.Tensor]]:
    m, N = st["model"], st["N"]
    idx = torch.as_tensor(st["batches"][0])
    params = [p for p in m.parameters() if p.requires_grad]
    loss = -objective(m, st["X"][idx], st["y"][idx], N) / N
    return float(loss), [g.detach().clone() for g in torch.autograd.grad(loss, params)]


def _rel_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max() / y.abs().max().clamp_min(1e-30))
               for x, y in zip(a, b, strict=True))


def compile_and_fused(path: str, M: int, B: int, dtype: str, steps: int, reps: int,
                      with_compile: bool) -> dict:
    """Eager, fused-ELBO and (optionally) compiled steps from the same start, interleaved
    in this process; compile time; loss and gradients against eager."""
    def eager(mod, x, y, n):
        return mod.objective(x, y, n)

    states = {"eager": latentgp_state(path, M, B, dtype),
              "fused": latentgp_state(path, M, B, dtype)}
    out: dict = {"M": M, "B": B, "dtype": dtype}
    loss0, g0 = _grads(states["eager"], eager)
    loss1, g1 = _grads(states["fused"], fused_objective)
    out["fused_vs_eager"] = {"loss_rel": abs(loss1 - loss0) / abs(loss0),
                             "grad_max_rel": _rel_diff(g1, g0)}
    objectives = {"eager": None, "fused": fused_objective}
    if with_compile:
        states["compiled"] = latentgp_state(path, M, B, dtype)
        compiled = torch.compile(eager)
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        c0, w0 = time.process_time(), time.perf_counter()
        loss2, g2 = _grads(states["compiled"], compiled)  # compiles forward and backward
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        out["compile"] = {
            "wall_s": time.perf_counter() - w0,
            "cpu_s": time.process_time() - c0 + (r1.ru_utime - r0.ru_utime)
            + (r1.ru_stime - r0.ru_stime),
            "loss_rel": abs(loss2 - loss0) / abs(loss0), "grad_max_rel": _rel_diff(g2, g0),
        }
        objectives["compiled"] = compiled
    steps_fn = {k: make_step(states[k], objectives[k]) for k in states}
    for s in steps_fn.values():
        for _ in range(3):
            s()
    times: dict = {k: [] for k in steps_fn}
    for _ in range(reps):
        for k, s in steps_fn.items():  # interleaved
            times[k].append(statistics.median(cpu_ms(s, steps)))
    out["step_cpu_ms"] = times
    out["final_loss"] = {k: float(v()) for k, v in steps_fn.items()}
    return out


# ------------------------------------------------------------------ peers --
def peers_config(workers, data, M: int, B: int, dtype: str, steps: int, reps: int,
                 warmup: int, predict_n: int) -> dict:
    X, y, Xte, yte, _ = data
    res: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "work.npz")
        prepare(path, X, y, Xte, yte, M, B, warmup + reps * steps)
        live = []
        for w in workers:
            try:
                w.call(cmd="setup", data=path, M=M, B=B, dtype=dtype, lr=0.01, threads=1)
                live.append(w)
            except RuntimeError as err:
                print(f"  {w.name} setup failed: {err}")
        for w in live:
            w.call(cmd="train", steps=warmup)
        wall = {w.name: [] for w in live}
        cpu = {w.name: [] for w in live}
        for _ in range(reps):
            for w in live:  # interleaved
                o = w.call(cmd="train", steps=steps)
                wall[w.name].append(1e3 * statistics.median(o["times"]))
                cpu[w.name].append(1e3 * statistics.median(o["cpu_times"]))
        for w in live:
            ev = w.call(cmd="eval")
            pr = w.call(cmd="predict", n=predict_n)
            res[w.name] = {"wall_ms": wall[w.name], "cpu_ms": cpu[w.name],
                           "rmse": ev["rmse"], "nlpd": ev["nlpd"],
                           "predict_pts_per_s": pr["points_per_second"],
                           "predict_cpu_pts_per_s": pr.get("cpu_points_per_second")}
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--parts", default="profile,compile,fused,peers")
    ap.add_argument("--peers", default="gpytorch,gpflow")
    ap.add_argument("--configs", default="256:1024:float64,256:1024:float32,"
                    "1024:1024:float32,1024:4096:float64",
                    help="peer configurations M:B:dtype")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(RESULTS, "step_profile.json"))
    args = ap.parse_args()
    # inductor compiles in this process (no worker pool on the other, shared core)
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    torch.set_num_threads(1)
    parts = args.parts.split(",")
    configs = [(int(a), int(b), c) for a, b, c in (s.split(":") for s in args.configs.split(","))]
    if args.quick:
        configs = [(64, 256, "float64"), (64, 256, "float32")]
    M0, B0 = (64, 256) if args.quick else (256, 1024)
    data = load_data("flights", args.quick)
    result: dict = {"load_before": load_avg(), "parts": parts}
    t_start = time.perf_counter()

    def save():
        result["load_after"] = load_avg()
        result["minutes"] = (time.perf_counter() - t_start) / 60
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as fh:
            json.dump(stamp(result, peers=peer_versions(
                [{"results": r} for c in result.get("peers", []) for r in [c["results"]]])),
                fh, indent=1)

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "work.npz")
        X, y, Xte, yte, _ = data
        prepare(path, X, y, Xte, yte, M0, B0, 2000)
        if "profile" in parts:
            result["profile"] = [profile_step(path, M0, B0, dt, 5 if args.quick else 30)
                                 for dt in ("float64", "float32")]
            save()
            print("profile done", flush=True)
        if "compile" in parts or "fused" in parts:
            result["compile_fused"] = [
                compile_and_fused(path, M0, B0, dt, 3 if args.quick else 10,
                                  2 if args.quick else 5,
                                  "compile" in parts and dt == "float64")  # one compile
                for dt in ("float64", "float32")]
            save()
            print("compile/fused done", flush=True)
    if "peers" in parts:
        workers = make_workers(args.peers.split(","), 1)
        result["peers"] = []
        try:
            for M, B, dt in configs:
                g = gemm_rate(getattr(torch, dt))
                n_pred = int(min(100_000, max(5_000, 100_000 * (256 / M) ** 2)))
                if args.quick:
                    n_pred = 2_000
                r = peers_config(workers, data, M, B, dt, 2 if args.quick else 5,
                                 1 if args.quick else args.reps, 2, n_pred)
                result["peers"].append({"M": M, "B": B, "dtype": dt, "gemm_gflops": g,
                                        "gemm_after": gemm_rate(getattr(torch, dt)),
                                        "load": load_avg(), "predict_n": n_pred,
                                        "results": r})
                print(f"M={M} B={B} {dt}: " + ", ".join(
                    f"{k} {statistics.median(v['cpu_ms']):.1f} ms cpu" for k, v in r.items()),
                    flush=True)
                save()
        finally:
            for w in workers:
                w.close()
    save()


if __name__ == "__main__":
    main()
