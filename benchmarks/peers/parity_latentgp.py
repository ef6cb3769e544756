"""Worker: latentgp's side of ``benchmarks/parity.py`` (LMC, negative binomial, ordinal,
spectral mixture), spoken to through ``worker_protocol``.

Every model takes its initial values from the npz the harness wrote (Z, lengthscales,
variances, W, cut-points, spectral components), trains with torch's Adam on the harness's
batch sequence and reports test NLPD from its own predictive density.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from worker_protocol import serve  # noqa: E402

import latentgp as lg  # noqa: E402

state: dict = {}
DT = torch.float64


def _t(a) -> torch.Tensor:
    return torch.as_tensor(np.asarray(a), dtype=DT)


def _rbf(d) -> lg.kernels.RBF:
    return lg.kernels.RBF(lengthscale=d["lengthscale"].tolist(), variance=float(d["kvar"]))


def _build(task: str, d) -> lg.models.GPModel:
    common = {"normalize_y": False, "dtype": DT}
    if task == "lmc":
        P, Q = d["W"].shape
        lik = lg.likelihoods.LinearCoregionalization(P, Q, variance=float(d["noise"]))
        model = lg.SVGP(
            Z=d["Z"], kernel=_rbf(d), likelihood=lik, num_latent=Q, shared_inducing=False, **common
        )
    elif task == "negbin":
        lik = lg.likelihoods.NegativeBinomial(size=float(d["size"]))
        model = lg.SVGP(Z=d["Z"], kernel=_rbf(d), likelihood=lik, **common)
    elif task == "ordinal":
        lik = lg.likelihoods.Ordinal(cutpoints=d["cutpoints"].tolist())
        model = lg.SVGP(Z=d["Z"], kernel=_rbf(d), likelihood=lik, **common)
    elif task == "sm":
        kern = lg.kernels.SpectralMixture(num_mixtures=len(d["sm_weights"]))
        lik = lg.likelihoods.Gaussian(variance=float(d["noise"]))
        model = lg.ExactGP(kernel=kern, likelihood=lik, **common)
    else:
        raise ValueError(f"unknown task {task!r}")
    return model


def setup(cmd):
    torch.set_num_threads(int(cmd.get("threads", 1)))
    d = np.load(cmd["data"])
    task = cmd["task"]
    X, y = _t(d["X_train"]), _t(d["y_train"])
    model = _build(task, d)
    model.initialize(X, y)  # builds with the given initial values; no training
    with torch.no_grad():
        if task == "lmc":
            model.likelihood.W.copy_(_t(d["W"]))
        if task == "sm":
            k = model.kernel
            for raw, key in (
                (k.raw_weights, "sm_weights"),
                (k.raw_means, "sm_means"),
                (k.raw_scales, "sm_scales"),
            ):
                raw.copy_(lg.parameters.inv_softplus(_t(d[key])).reshape(raw.shape))
    state.update(
        task=task,
        model=model,
        X=X,
        y=y,
        batches=d["batches"] if "batches" in d.files else None,
        pos=0,
        N=X.shape[0],
        opt=torch.optim.Adam(model.parameters(), lr=float(cmd["lr"])),
        Xte=_t(d["X_test"]),
        yte=d["y_test"],
    )
    return {"ok": True, "version": lg.__version__}


def train(cmd):
    m, opt, N = state["model"], state["opt"], state["N"]
    m.train()
    times = []
    for _ in range(int(cmd["steps"])):
        if state["batches"] is None:
            xb, yb = state["X"], state["y"]
        else:
            idx = torch.as_tensor(state["batches"][state["pos"] % len(state["batches"])])
            xb, yb = state["X"][idx], state["y"][idx]
        state["pos"] += 1
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = -m.objective(xb, yb, N) / N
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return {"times": times, "loss": float(loss.detach())}


def evaluate(cmd):
    m, task = state["model"], state["task"]
    m.eval()
    y = state["yte"]
    with torch.no_grad():
        mean, var = m.predict_y(state["Xte"])
        if task in ("lmc", "sm"):
            # per-output Gaussian marginals, the same formula for every library
            lpd = -0.5 * (np.log(2 * np.pi * var) + (y - mean) ** 2 / var)
            out = {"rmse": float(np.sqrt(np.mean((mean - y) ** 2)))}
        else:
            lpd = m.log_predictive_density(state["Xte"], y)
            out = {"mae": float(np.mean(np.abs(mean - y)))}
    out["nlpd"] = float(-np.mean(lpd))
    lik = m.likelihood
    if task == "negbin":
        out["size"] = float(lik.size)
    if task == "ordinal":
        out["cutpoints"] = lik.cutpoints().detach().tolist()
    return out


def handler(cmd):
    return {"setup": setup, "train": train, "eval": evaluate}[cmd["cmd"]](cmd)


if __name__ == "__main__":
    serve(handler)
