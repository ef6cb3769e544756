"""GPyTorch's exact GP at fixed hyperparameters (run with GPyTorch's venv).

Reads an ``.npz`` written by ``benchmarks/exact_at_scale.py`` (training and test rows,
the ARD RBF lengthscales, kernel variance and noise of a latentgp fit, the target
standardisation) and prints one JSON line: seconds (wall and CPU) of one marginal
likelihood evaluation with its gradient under GPyTorch's defaults for large N (CG with
its rank-15 pivoted-Cholesky preconditioner and stochastic Lanczos quadrature above
``max_cholesky_size`` = 800 points), its log marginal likelihood in the targets' units,
and the test RMSE of its predictive mean.

    python gpytorch_exact_runner.py DATA.npz [--dtype float32] [--evals 2]
"""

from __future__ import annotations

import argparse
import json
import math
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--evals", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    dtype = getattr(torch, args.dtype)
    d = np.load(args.data)
    X = torch.as_tensor(d["X_train"], dtype=dtype)
    y = torch.as_tensor((d["y_train"] - d["y_mean"]) / d["y_scale"], dtype=dtype)
    lik = gpytorch.likelihoods.GaussianLikelihood().to(dtype)
    model = _Exact(X, y, lik).to(dtype)
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
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        values.append(float(out.detach()) * X.shape[0])
    n = X.shape[0]
    lml = [v - n * math.log(float(d["y_scale"])) for v in values]
    model.eval()
    lik.eval()
    Xs = torch.as_tensor(d["X_test"], dtype=dtype)
    t0 = time.perf_counter()
    with torch.no_grad():
        mean = torch.cat([model(Xs[i : i + 500]).mean for i in range(0, Xs.shape[0], 500)])
    predict_s = time.perf_counter() - t0
    mean = mean.double().numpy() * float(d["y_scale"]) + float(d["y_mean"])
    rmse = float(np.sqrt(np.mean((mean - d["y_test"]) ** 2)))
    print(json.dumps({
        "solver": "gpytorch", "n": n, "dtype": args.dtype, "gpytorch": gpytorch.__version__,
        "torch": torch.__version__, "seconds_per_eval": walls, "cpu_seconds_per_eval": cpus,
        "lml": lml, "test_rmse": rmse, "predict_seconds": predict_s,
        "peak_rss_mb": _peak_rss_mb(),
    }))


if __name__ == "__main__":
    main()
