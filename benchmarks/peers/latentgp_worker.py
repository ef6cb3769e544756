"""Worker: latentgp's SVGP (Gaussian likelihood, ARD SE kernel, whitened full q(u))."""

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
        likelihood=lg.likelihoods.Gaussian(variance=float(d["noise"])),
        normalize_y=False,
        dtype=dtype,
    )
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

        def closure(xb=xb, yb=yb):
            opt.zero_grad(set_to_none=True)
            loss = -m.objective(xb, yb, N) / N
            loss.backward()
            return loss

        if state["alternate"]:  # the step evaluates q's gradients, then the others' at new q
            opt.step(closure)
            loss = torch.zeros(())
        else:
            loss = closure()
            opt.step()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"times": times, "cpu_times": cpu, "loss": float(loss)}


def evaluate(cmd):
    m = state["model"]
    m.eval()
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


def handler(cmd):
    return {"setup": setup, "train": train, "eval": evaluate, "predict": predict}[cmd["cmd"]](cmd)


if __name__ == "__main__":
    serve(handler)
