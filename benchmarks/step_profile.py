"""Where an SVGP training step spends its time, what torch.compile and a fused ELBO give,
and the float32 / float64 step against GPyTorch and GPflow (issue 24, items 3 and 4).

Six parts, each on the flights stand-in (standardised), one thread per process:

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
  and the float64 target (M = 256, B = 1024).
- ``large``: latentgp alone at M = 1,024, B = 4,096, float64: the step's %GEMM; and
  prediction's %GEMM at M = 256 and 1,024.

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
from svgp_performance import (
    gemm_gflops,
    load_data,
    make_workers,
    peer_versions,
    prepare,
    start_workers,
)

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
    return gemm_gflops(dtype, n, reps, clock=time.process_time)


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
        live = start_workers(workers, warmup, data=path, M=M, B=B, dtype=dtype, lr=0.01,
                             threads=1)
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


# ------------------------------------------------------------------ large / predict --
def large_step(data, M: int, B: int, dtype: str, steps: int, predict: dict) -> dict:
    """latentgp alone, in this process: CPU ms per Adam step at (M, B) and %GEMM under the
    count ``7 B M^2 + M^3``; prediction (mean and variance) throughput per CPU second at
    each ``predict`` entry ``{M: n_points}`` and %GEMM under ``2 n M^2``."""
    X, y, Xte, yte, _ = data
    out: dict = {"M": M, "B": B, "dtype": dtype}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "work.npz")
        prepare(path, X, y, Xte, yte, M, B, steps + 1)
        step = make_step(st := latentgp_state(path, M, B, dtype))
        step()
        out["step_cpu_ms"] = cpu_ms(step, steps)
        out["gemm_gflops"] = gemm_rate(getattr(torch, dtype))
        del st, step
        out["predict"] = []
        for Mp, n in predict.items():
            prepare(path, X, y, Xte, yte, Mp, 256, 1)
            model = latentgp_state(path, Mp, 256, dtype)["model"]
            Xp = torch.as_tensor(Xte, dtype=getattr(torch, dtype)).repeat(
                math.ceil(n / Xte.shape[0]), 1)[:n]
            model.eval()
            model.predict_f(Xp[:100])  # builds the prediction cache
            t = []
            for _ in range(3):
                c = time.process_time()
                model.predict_f(Xp, as_numpy=False)
                t.append(time.process_time() - c)
            out["predict"].append({"M": Mp, "n": n, "cpu_s": t,
                                   "gemm_gflops": gemm_rate(getattr(torch, dtype))})
    return out


# ------------------------------------------------------------------ report --
def _med(v: list[float]) -> float:
    return statistics.median(v)


def render(result: dict) -> str:
    """The page's tables (markdown) from a result of :func:`main`."""
    out: list[str] = []
    for pr in result.get("profile", []):
        step, gemm = _med(pr["step_cpu_ms"]), pr["gemm_gflops"]
        total = sum(p["ms"] for p in pr["parts"].values())
        out += [f"**{pr['dtype']}, M = {pr['M']}, B = {pr['B']}**: step {step:.1f} ms CPU "
                f"(median of {len(pr['step_cpu_ms'])}, no profiler); parts below sum to "
                f"{total:.1f} ms; GEMM {gemm:.0f} GFLOP/s (1,024 x 1,024, this process).", "",
                "| part | ms per step | share of parts | calls | GFLOP | GFLOP/s | % of GEMM |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        for name, p in sorted(pr["parts"].items(), key=lambda kv: -kv[1]["ms"]):
            rate = p["gflop"] / (p["ms"] / 1e3) if p["gflop"] and p["ms"] else None
            out.append(
                f"| {name} | {p['ms']:.2f} | {100 * p['ms'] / total:.0f}% | {p['calls']} | "
                + (f"{p['gflop']:.3f} | {rate:.1f} | {100 * rate / gemm:.0f}% |" if rate
                   else "– | – | – |"))
        out += [f"| rest: Python between operations (step minus the parts) | "
                f"{step - total:.2f} | – | – | – | – | – |", ""]
    for cf in result.get("compile_fused", []):
        t = {k: _med(v) for k, v in cf["step_cpu_ms"].items()}
        line = (f"**{cf['dtype']}**: eager {t['eager']:.1f} ms, fused ELBO {t['fused']:.1f} ms "
                f"({t['fused'] / t['eager']:.2f}x; loss within "
                f"{cf['fused_vs_eager']['loss_rel']:.1e}, gradients within "
                f"{cf['fused_vs_eager']['grad_max_rel']:.1e} of eager)")
        if "compiled" in t:
            c = cf["compile"]
            line += (f", torch.compile {t['compiled']:.1f} ms ({t['compiled'] / t['eager']:.2f}x"
                     f"; compiling took {c['cpu_s']:.0f} CPU s / {c['wall_s']:.0f} wall s; loss "
                     f"within {c['loss_rel']:.1e}, gradients within {c['grad_max_rel']:.1e})")
        out += [line + "; CPU ms per step, medians of interleaved repetitions.", ""]
    if result.get("peers"):
        out += ["| M | B | dtype | library | step CPU ms (min / med / max) | wall ms (med) | "
                "vs latentgp (CPU) | % GEMM | RMSE | NLPD | predict pts per CPU s | "
                "predict % GEMM | load |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for c in result["peers"]:
            M, B = c["M"], c["B"]
            gemm = _med([c["gemm_gflops"], c["gemm_after"]])
            ours = _med(c["results"]["latentgp"]["cpu_ms"])
            for lib, v in c["results"].items():
                cpu = _med(v["cpu_ms"])
                gf = (7 * B * M * M + M**3) / (cpu / 1e3) / 1e9
                pts = v.get("predict_cpu_pts_per_s") or v["predict_pts_per_s"]
                pg = 2 * M * M * pts / 1e9
                out.append(
                    f"| {M} | {B} | {c['dtype']} | {lib} | {min(v['cpu_ms']):.1f} / {cpu:.1f} / "
                    f"{max(v['cpu_ms']):.1f} | {_med(v['wall_ms']):.1f} | {cpu / ours:.2f}x | "
                    f"{100 * gf / gemm:.0f}% | {v['rmse']:.4f} | {v['nlpd']:.4f} | {pts:,.0f} | "
                    f"{100 * pg / gemm:.0f}% | {c['load']:.1f} |")
        out.append("")
    lg_ = result.get("large")
    if lg_:
        M, B, step = lg_["M"], lg_["B"], _med(lg_["step_cpu_ms"])
        gf = (7 * B * M * M + M**3) / (step / 1e3) / 1e9
        out += [f"latentgp alone, {lg_['dtype']}, M = {M}, B = {B}: step {step:.0f} ms CPU "
                f"(median of {len(lg_['step_cpu_ms'])}) = {gf:.1f} GFLOP/s = "
                f"{100 * gf / lg_['gemm_gflops']:.0f}% of GEMM ({lg_['gemm_gflops']:.0f} GFLOP/s)."]
        for p in lg_["predict"]:
            pts = p["n"] / _med(p["cpu_s"])
            pg = 2 * p["M"] ** 2 * pts / 1e9
            out.append(f"Prediction (mean and variance), M = {p['M']}: {pts:,.0f} points per "
                       f"CPU s = {pg:.1f} GFLOP/s = {100 * pg / p['gemm_gflops']:.0f}% of GEMM.")
        out.append("")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--parts", default="peers,large,profile,fused,compile")
    ap.add_argument("--peers", default="gpytorch,gpflow")
    ap.add_argument("--configs", default="256:1024:float64,256:1024:float32,1024:1024:float32",
                    help="peer configurations M:B:dtype")
    ap.add_argument("--reps", type=int, default=3, help="interleaved repetitions")
    ap.add_argument("--steps", type=int, default=5, help="steps per repetition")
    ap.add_argument("--profile-steps", type=int, default=15)
    ap.add_argument("--out", default=os.path.join(RESULTS, "step_profile.json"))
    ap.add_argument("--merge", action="store_true",
                    help="keep the other parts already in --out (run parts separately)")
    ap.add_argument("--report", action="store_true",
                    help="print the page's tables from --out and exit")
    args = ap.parse_args()
    if args.report:
        with open(args.out) as fh:
            print(render(json.load(fh)))
        return
    # inductor compiles in this process (no worker pool on the other, shared core)
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    torch.set_num_threads(1)
    parts = args.parts.split(",")
    configs = [(int(a), int(b), c) for a, b, c in (s.split(":") for s in args.configs.split(","))]
    if args.quick:
        configs = [(64, 256, "float64"), (64, 256, "float32")]
        args.reps, args.steps, args.profile_steps = 1, 2, 5
    M0, B0 = (64, 256) if args.quick else (256, 1024)
    data = load_data("flights", args.quick)
    result: dict = {"load_before": load_avg(), "parts": parts}
    if args.merge and os.path.exists(args.out):
        with open(args.out) as fh:
            old = json.load(fh)
        result = old  # its provenance goes to provenance["previous"] (machine.stamp)
        result.setdefault("runs", []).append({"parts": parts, "load_before": load_avg()})
    t_start = time.perf_counter()

    def save():
        result["load_after"] = load_avg()
        result["minutes"] = (time.perf_counter() - t_start) / 60
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as fh:
            json.dump(stamp(result, peers=peer_versions(
                [{"results": r} for c in result.get("peers", []) for r in [c["results"]]])),
                fh, indent=1)

    if "peers" in parts:
        workers = make_workers(args.peers.split(","), 1)
        result["peers"] = []
        try:
            for M, B, dt in configs:
                g = gemm_rate(getattr(torch, dt))
                n_pred = int(min(100_000, max(5_000, 100_000 * (256 / M) ** 2)))
                if args.quick:
                    n_pred = 2_000
                r = peers_config(workers, data, M, B, dt, args.steps, args.reps,
                                 1 if args.quick else 2, n_pred)
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
    if "large" in parts:
        result["large"] = large_step(
            data, 256 if args.quick else 1024, 1024 if args.quick else 4096, "float64",
            2 if args.quick else 3,
            {64: 2_000} if args.quick else {256: 100_000, 1024: 10_000})
        save()
        print("large done", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "work.npz")
        X, y, Xte, yte, _ = data
        prepare(path, X, y, Xte, yte, M0, B0, 2000)
        if "profile" in parts:
            result["profile"] = [profile_step(path, M0, B0, dt, args.profile_steps)
                                 for dt in ("float64", "float32")]
            save()
            print("profile done", flush=True)
        if "compile" in parts or "fused" in parts:
            result["compile_fused"] = [
                compile_and_fused(path, M0, B0, dt, args.steps, args.reps,
                                  "compile" in parts and dt == "float64")  # one compile
                for dt in ("float64", "float32")]
            save()
            print("compile/fused done", flush=True)
    save()


if __name__ == "__main__":
    main()
