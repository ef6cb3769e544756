"""GPyTorch's exact GP at fixed hyperparameters (run with GPyTorch's venv).

Reads an ``.npz`` written by ``benchmarks/exact_at_scale.py`` (training and test rows,
the ARD RBF lengthscales, kernel variance and noise of a latentgp fit, the target
standardisation) and prints one JSON line: seconds (wall and CPU) of one marginal
likelihood evaluation with its gradient under GPyTorch's defaults for large N (CG with
its rank-15 pivoted-Cholesky preconditioner and stochastic Lanczos quadrature above
``max_cholesky_size`` = 800 points), its log marginal likelihood in the targets' units,
and the test RMSE of its predictive mean.

    python gpytorch_exact_runner.py DATA.npz [--dtype float32] [--evals 2]

With ``--train-steps S`` it trains instead, as GPyTorch's large-data exact GP example does:
from GPyTorch's own initial hyperparameters, Adam with ``--lr`` for S steps on the
marginal likelihood (stopping early at ``--time-limit`` seconds), then predicts with
``fast_pred_var`` (LOVE); it reports each step's seconds, the test RMSE and NLPD.
``--device cuda`` runs on the GPU (timings end at ``torch.cuda.synchronize()``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import gpytorch
import numpy as np
import torch


class _Exact(gpytorch.models.ExactGP):
    def __init__(self, X, y, lik):
        super().__init__(X, y, lik)
        self.mean_module = gpytorch.means.ZeroMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(
            gpytorch.kernels.RBFKernel(ard_num_dims=X.shape[1]))

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def _peak_rss_mb() -> float:
    """This process's high-water mark (VmHWM: unlike ``ru_maxrss``, not inherited from the
    parent across ``exec``)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return float(line.split()[1]) / 1024.0
    return float("nan")


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def train(model, lik, X, y, Xs, d, args) -> dict:
    """GPyTorch's own fit (Adam on the marginal likelihood from its initial values), then
    its predictive with LOVE variances."""
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    model.train()
    lik.train()
    steps, values, start = [], [], time.perf_counter()
    for _ in range(args.train_steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = -mll(model(X), y)
        loss.backward()
        opt.step()
        _sync(args.device)
        steps.append(time.perf_counter() - t0)
        values.append(-float(loss.detach()))
        if time.perf_counter() - start > args.time_limit:
            break
    fit_s = time.perf_counter() - start
    model.eval()
    lik.eval()
    t0 = time.perf_counter()
    with torch.no_grad(), gpytorch.settings.fast_pred_var():
        preds = [lik(model(Xs[i : i + 1000])) for i in range(0, Xs.shape[0], 1000)]
        mean = torch.cat([p.mean for p in preds]).double().cpu().numpy()
        var = torch.cat([p.variance for p in preds]).double().cpu().numpy()
    _sync(args.device)
    predict_s = time.perf_counter() - t0
    scale, ys = float(d["y_scale"]), d["y_test"]
    mean, var = mean * scale + float(d["y_mean"]), var * scale**2
    return {
        "train_steps": len(steps), "lr": args.lr, "fit_seconds": fit_s,
        "seconds_per_step": steps, "objective_per_point": values,
        "test_rmse": float(np.sqrt(np.mean((mean - ys) ** 2))),
        "test_nlpd": float(np.mean(0.5 * np.log(2 * math.pi * var)
                                   + 0.5 * (ys - mean) ** 2 / var)),
        "predict_seconds": predict_s,
        "lengthscale": model.covar_module.base_kernel.lengthscale.detach().cpu()
        .reshape(-1).tolist(),
        "noise": float(lik.noise.detach()),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--evals", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--train-steps", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--time-limit", type=float, default=float("inf"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    dtype = getattr(torch, args.dtype)
    d = np.load(args.data)
    X = torch.as_tensor(d["X_train"], dtype=dtype, device=args.device)
    y = torch.as_tensor((d["y_train"] - d["y_mean"]) / d["y_scale"], dtype=dtype,
                        device=args.device)
    lik = gpytorch.likelihoods.GaussianLikelihood().to(dtype=dtype, device=args.device)
    model = _Exact(X, y, lik).to(dtype=dtype, device=args.device)
    head = {"solver": "gpytorch", "n": X.shape[0], "dtype": args.dtype,
            "device": args.device, "gpytorch": gpytorch.__version__,
            "torch": torch.__version__}
    if args.train_steps:
        Xs = torch.as_tensor(d["X_test"], dtype=dtype, device=args.device)
        row = {**head, **train(model, lik, X, y, Xs, d, args), "peak_rss_mb": _peak_rss_mb()}
        if args.device.startswith("cuda"):
            row["device_peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
        print(json.dumps(row))
        return
    model.covar_module.base_kernel.lengthscale = torch.as_tensor(d["lengthscale"], dtype=dtype)
    model.covar_module.outputscale = float(d["variance"])
    lik.noise = float(d["noise"])
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
    model.train()
    lik.train()
    walls, cpus, values = [], [], []
    for _ in range(args.evals):
        model.zero_grad()
        t0, c0 = time.perf_counter(), time.process_time()
        out = mll(model(X), y)
        out.backward()
        _sync(args.device)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        values.append(float(out.detach()) * X.shape[0])
        print(f"evaluation {len(values)}: {walls[-1]:.1f} s wall, {cpus[-1]:.1f} s CPU",
              file=sys.stderr, flush=True)
    n = X.shape[0]
    lml = [v - n * math.log(float(d["y_scale"])) for v in values]
    model.eval()
    lik.eval()
    Xs = torch.as_tensor(d["X_test"], dtype=dtype, device=args.device)
    t0, c0 = time.perf_counter(), time.process_time()
    # fast_pred_var (LOVE), GPyTorch's setting for large-data prediction: without it each
    # chunk's .mean also forms the chunk's full predictive covariance by a CG solve with
    # one right-hand side per test point (measured: 300 of the 303 CPU s at N = 5,000)
    with torch.no_grad(), gpytorch.settings.fast_pred_var():
        mean = torch.cat([model(Xs[i : i + 500]).mean for i in range(0, Xs.shape[0], 500)])
    _sync(args.device)
    predict_s, predict_cpu = time.perf_counter() - t0, time.process_time() - c0
    mean = mean.double().cpu().numpy() * float(d["y_scale"]) + float(d["y_mean"])
    rmse = float(np.sqrt(np.mean((mean - d["y_test"]) ** 2)))
    print(json.dumps({
        **head, "seconds_per_eval": walls, "cpu_seconds_per_eval": cpus,
        "lml": lml, "test_rmse": rmse, "predict_seconds": predict_s,
        "predict_cpu_seconds": predict_cpu, "predict_setting": "fast_pred_var",
        "peak_rss_mb": _peak_rss_mb(),
        "device_peak_mb": (torch.cuda.max_memory_allocated() / 2**20
                           if args.device.startswith("cuda") else None),
    }))


if __name__ == "__main__":
    main()
