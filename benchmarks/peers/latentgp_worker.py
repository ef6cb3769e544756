"""Worker: latentgp's SVGP (ARD SE kernel, whitened full q(u); a Gaussian likelihood, or
with ``likelihood`` in the setup command Bernoulli (probit) or Poisson (exp link)).

Besides the race commands (``worker_protocol``) it runs latentgp's default fit
(``{"cmd": "default_fit", ...}``, see :func:`default_fit`)."""

from __future__ import annotations

import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from worker_protocol import serve  # noqa: E402

import latentgp as lg  # noqa: E402

state: dict = {}


def setup(cmd):
    torch.set_num_threads(int(cmd.get("threads", 2)))
    d = np.load(cmd["data"])
    dtype = getattr(torch, cmd["dtype"])
    X, y = torch.as_tensor(d["X_train"], dtype=dtype), torch.as_tensor(d["y_train"], dtype=dtype)
    model = lg.SVGP(
        Z=d["Z"],
        kernel=lg.kernels.RBF(lengthscale=d["lengthscale"].tolist(), variance=float(d["variance"])),
        likelihood=_likelihood(cmd.get("likelihood", "gaussian"), float(d["noise"])),
        normalize_y=False,
        dtype=dtype,
    )
    state["likelihood"] = cmd.get("likelihood", "gaussian")
    model.initialize(X, y)  # builds with the shared initial values; no training
    state.update(
        model=model,
        X=X,
        y=y,
        batches=d["batches"],
        pos=0,
        N=X.shape[0],
        opt=_optimizer(model, {**cmd, "batches": d["batches"]}, X.shape[0]),
        alternate=cmd.get("optimizer", "adam") == "ngd" and bool(cmd.get("ngd_alternate")),
        Xte=torch.as_tensor(d["X_test"], dtype=dtype),
        yte=d["y_test"],
    )
    return {"ok": True, "version": lg.__version__}


def _likelihood(name: str, noise: float):
    """The race's likelihood: Gaussian (initial noise variance), Bernoulli with the probit
    link (the link all three libraries share) or Poisson with the exp link (offset 0)."""
    if name == "gaussian":
        return lg.likelihoods.Gaussian(variance=noise)
    if name == "bernoulli":
        return lg.likelihoods.Bernoulli(link="probit")
    if name == "poisson":
        return lg.likelihoods.Poisson()
    raise ValueError(f"unknown likelihood {name!r}")


def _optimizer(model, cmd, N):
    """The optimiser latentgp's fit uses: torch's Adam (fused when available), or with
    ``optimizer="ngd"`` natural-gradient steps on q(u) (``ngd_lr``: gamma, None for
    latentgp's default) and Adam on the rest, as ``fit(optimizer="natural")`` builds."""
    params = list(model.parameters())
    if cmd.get("optimizer", "adam") == "adam":
        return lg.training.make_optimizer("adam", params, float(cmd["lr"]))
    from latentgp.training.natural import make_natural_adam

    extra = {} if cmd.get("ngd_lr") is None else {"natural_lr": float(cmd["ngd_lr"])}
    extra["natural_alternate"] = bool(cmd.get("ngd_alternate", False))
    B = len(cmd["batches"][0]) if cmd.get("batches") is not None else None
    return make_natural_adam(model, params, float(cmd["lr"]), N, extra, batch_size=B)


def train(cmd):
    m, opt, N = state["model"], state["opt"], state["N"]
    m.train()
    times, cpu = [], []  # wall and process CPU seconds per step
    for _ in range(int(cmd["steps"])):
        idx = torch.as_tensor(state["batches"][state["pos"] % len(state["batches"])])
        state["pos"] += 1
        xb, yb = state["X"][idx], state["y"][idx]
        t0, c0 = time.perf_counter(), time.process_time()

        first: list[torch.Tensor] = []  # the loss at the step's start

        def closure(xb=xb, yb=yb, first=first):
            opt.zero_grad(set_to_none=True)
            loss = -m.objective(xb, yb, N) / N
            loss.backward()
            first.append(loss.detach())
            return loss

        if state["alternate"]:  # the step evaluates q's gradients, then the others' at new q
            opt.step(closure)
        else:
            closure()
            opt.step()
        loss = first[0]
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"times": times, "cpu_times": cpu, "loss": float(loss)}


def evaluate(cmd):
    m = state["model"]
    m.eval()
    if state["likelihood"] != "gaussian":  # the harness scores q(f*) the same way for all
        fm, fv = m.predict_f(state["Xte"])
        return {"f_mean": np.asarray(fm).ravel().tolist(), "f_var": np.asarray(fv).ravel().tolist()}
    mean, var = m.predict_y(state["Xte"])
    y = state["yte"]
    lpd = m.log_predictive_density(state["Xte"], y)
    return {"rmse": float(np.sqrt(np.mean((mean - y) ** 2))), "nlpd": float(-lpd.mean())}


def predict(cmd):
    m = state["model"]
    n = int(cmd["n"])
    X = state["Xte"]
    reps = math.ceil(n / X.shape[0])
    Xp = X.repeat(reps, 1)[:n]
    m.predict_f(Xp[:100])  # warm the cache
    t0, c0 = time.perf_counter(), time.process_time()
    m.predict_f(Xp, as_numpy=False)
    return {"points_per_second": n / (time.perf_counter() - t0),
            "cpu_points_per_second": n / max(time.process_time() - c0, 1e-9)}


def default_fit(cmd):
    """latentgp's default ``lg.SVGP(num_inducing=M[, likelihood=...]).fit(X, y)`` on the
    race's training rows (its own initialisation, optimiser and stopping rule; ``seed=0``,
    no progress bar), with a callback that scores the test NLPD (``log_predictive_density``,
    in the units of the data given) every ``every`` steps.  Times are process CPU seconds
    from the call of ``fit`` with the scoring excluded; ``cap`` (CPU seconds, optional)
    stops the fit from the callback, recorded as its reason."""
    torch.set_num_threads(int(cmd.get("threads", 1)))
    d = np.load(cmd["data"])
    X, y, Xte, yte = d["X_train"], d["y_train"], d["X_test"], d["y_test"]
    every, cap = int(cmd["every"]), cmd.get("cap")
    kw = {} if cmd.get("likelihood") is None else {"likelihood": cmd["likelihood"]}
    curve: dict[str, list] = {"seconds": [], "steps": [], "nlpd": []}
    scoring = [0.0]  # CPU seconds spent scoring
    cut = [False]

    def score(model) -> float:
        with torch.no_grad():
            value = -float(np.mean(np.asarray(model.log_predictive_density(Xte, yte))))
        return value if np.isfinite(value) else float("inf")

    def callback(info) -> bool:
        if info["step"] % every:
            return False
        e0 = time.process_time()
        t = e0 - c0 - scoring[0]
        curve["seconds"].append(t)
        curve["steps"].append(int(info["step"]))
        curve["nlpd"].append(score(info["model"]))
        scoring[0] += time.process_time() - e0
        cut[0] = cap is not None and t >= float(cap)
        return cut[0]

    model = lg.SVGP(num_inducing=int(cmd["M"]), **kw)
    w0, c0 = time.perf_counter(), time.process_time()
    model.fit(X, y, seed=0, progress=False, callbacks=[callback])
    total, wall = time.process_time() - c0 - scoring[0], time.perf_counter() - w0
    final = score(model)  # after fit returns (a stopping rule may restore earlier parameters)
    curve["seconds"].append(total)
    curve["steps"].append(int(model.history_.steps))
    curve["nlpd"].append(final)
    reason = f"cut at {float(cap):g} CPU s" if cut[0] else model.history_.reason
    return {"curve": curve, "total_seconds": total, "wall_seconds": wall, "final_nlpd": final,
            "steps": int(model.history_.steps), "reason": reason,
            "optimizer": model.history_.optimizer, "batch_size": int(model.history_.batch_size),
            "version": lg.__version__}


def handler(cmd):
    return {"setup": setup, "train": train, "eval": evaluate, "predict": predict,
            "default_fit": default_fit}[cmd["cmd"]](cmd)


if __name__ == "__main__":
    serve(handler)
