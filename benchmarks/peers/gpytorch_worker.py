"""Worker: GPyTorch's SVGP with the same model (whitened Cholesky q(u), ARD SE; a Gaussian
likelihood, or with ``likelihood`` in the setup command its ``BernoulliLikelihood`` (probit)
or :class:`_Poisson`)."""

from __future__ import annotations

import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import gpytorch  # noqa: E402
from worker_protocol import serve  # noqa: E402

state: dict = {}


class _Poisson(gpytorch.likelihoods._OneDimensionalLikelihood):
    """Poisson counts with the exp link, ``p(y | f) = Poisson(y; e^f)``: GPyTorch ships no
    Poisson likelihood, so this one uses its one-dimensional base class, whose expected
    log-likelihood is its default Gauss-Hermite quadrature (20 points)."""

    def forward(self, function_samples, *args, **kwargs):
        return torch.distributions.Poisson(rate=function_samples.exp(), validate_args=False)


def _likelihood(name: str):
    if name == "gaussian":
        return gpytorch.likelihoods.GaussianLikelihood()
    if name == "bernoulli":
        return gpytorch.likelihoods.BernoulliLikelihood()  # probit
    if name == "poisson":
        return _Poisson()
    raise ValueError(f"unknown likelihood {name!r}")


class SVGPModel(gpytorch.models.ApproximateGP):
    def __init__(self, Z, D, natural=False):
        if natural:  # GPyTorch's recipe for NGD: the natural parameterisation of q(u)
            q = gpytorch.variational.NaturalVariationalDistribution(Z.shape[0])
        else:
            q = gpytorch.variational.CholeskyVariationalDistribution(Z.shape[0])
        strat = gpytorch.variational.VariationalStrategy(self, Z, q, learn_inducing_locations=True)
        super().__init__(strat)
        self.mean_module = gpytorch.means.ZeroMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=D))

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def setup(cmd):
    torch.set_num_threads(int(cmd.get("threads", 2)))
    d = np.load(cmd["data"])
    dtype = getattr(torch, cmd["dtype"])
    X, y = torch.as_tensor(d["X_train"], dtype=dtype), torch.as_tensor(d["y_train"], dtype=dtype)
    Z = torch.as_tensor(d["Z"], dtype=dtype)
    natural = cmd.get("optimizer", "adam") == "ngd"
    model = SVGPModel(Z, X.shape[1], natural).to(dtype)
    lik_name = cmd.get("likelihood", "gaussian")
    lik = _likelihood(lik_name).to(dtype)
    model.covar_module.base_kernel.lengthscale = torch.as_tensor(d["lengthscale"], dtype=dtype)
    model.covar_module.outputscale = float(d["variance"])
    if lik_name == "gaussian":
        lik.noise = float(d["noise"])
    mll = gpytorch.mlls.VariationalELBO(lik, model, num_data=X.shape[0])
    if natural:  # NGD on q(u), Adam on the hyperparameters and Z
        opts = [
            gpytorch.optim.NGD(model.variational_parameters(), num_data=X.shape[0],
                               lr=float(cmd.get("ngd_lr") or 0.1)),
            torch.optim.Adam([*model.hyperparameters(), *lik.parameters()],
                             lr=float(cmd["lr"])),
        ]
    else:
        opts = [torch.optim.Adam([*model.parameters(), *lik.parameters()],
                                 lr=float(cmd["lr"]))]
    state.update(
        model=model,
        lik=lik,
        mll=mll,
        X=X,
        y=y,
        batches=d["batches"],
        pos=0,
        opts=opts,
        Xte=torch.as_tensor(d["X_test"], dtype=dtype),
        yte=d["y_test"],
        likelihood=lik_name,
    )
    return {"ok": True, "version": gpytorch.__version__}


def train(cmd):
    model, lik, mll, opts = state["model"], state["lik"], state["mll"], state["opts"]
    model.train()
    lik.train()
    times, cpu = [], []  # wall and process CPU seconds per step
    for _ in range(int(cmd["steps"])):
        idx = torch.as_tensor(state["batches"][state["pos"] % len(state["batches"])])
        state["pos"] += 1
        xb, yb = state["X"][idx], state["y"][idx]
        t0, c0 = time.perf_counter(), time.process_time()
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        loss = -mll(model(xb), yb)
        loss.backward()
        for opt in opts:
            opt.step()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"times": times, "cpu_times": cpu, "loss": float(loss)}


def _predict(X):
    model, lik = state["model"], state["lik"]
    model.eval()
    lik.eval()
    means, vars_ = [], []
    with torch.no_grad(), gpytorch.settings.fast_pred_var(False):
        for s in range(0, X.shape[0], 65536):
            f = model(X[s : s + 65536])
            means.append(f.mean)
            vars_.append(f.variance)
    return torch.cat(means), torch.cat(vars_)


def evaluate(cmd):
    mean, fvar = _predict(state["Xte"])
    if state["likelihood"] != "gaussian":  # the harness scores q(f*) the same way for all
        return {"f_mean": mean.numpy().tolist(), "f_var": fvar.numpy().tolist()}
    var = (fvar + state["lik"].noise).detach().numpy()
    mean = mean.numpy()
    y = state["yte"]
    nlpd = 0.5 * np.mean(np.log(2 * np.pi * var) + (y - mean) ** 2 / var)
    return {"rmse": float(np.sqrt(np.mean((mean - y) ** 2))), "nlpd": float(nlpd)}


def predict(cmd):
    n = int(cmd["n"])
    X = state["Xte"]
    Xp = X.repeat(math.ceil(n / X.shape[0]), 1)[:n]
    _predict(Xp[:100])
    t0, c0 = time.perf_counter(), time.process_time()
    _predict(Xp)
    return {"points_per_second": n / (time.perf_counter() - t0),
            "cpu_points_per_second": n / max(time.process_time() - c0, 1e-9)}


def handler(cmd):
    return {"setup": setup, "train": train, "eval": evaluate, "predict": predict}[cmd["cmd"]](cmd)


if __name__ == "__main__":
    serve(handler)
