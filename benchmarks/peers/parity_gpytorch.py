"""Worker: GPyTorch's side of ``benchmarks/parity.py``; runs in GPyTorch's own environment.

- lmc: ``LMCVariationalStrategy`` over Q whitened ``VariationalStrategy`` latents (batched
  kernels, one Z per latent), ``MultitaskGaussianLikelihood`` with one noise per output;
- negbin: SVGP with GPyTorch's ``NegativeBinomialLikelihood`` (its own parametrisation:
  mean softplus(f), variance mean / (1 - p));
- sm: ``ExactGP`` with ``SpectralMixtureKernel``.
GPyTorch has no ordinal likelihood; the harness does not ask for one.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import gpytorch  # noqa: E402
from worker_protocol import serve  # noqa: E402

state: dict = {}
DT = torch.float64


def _t(a) -> torch.Tensor:
    return torch.as_tensor(np.asarray(a), dtype=DT)


class _SVGP(gpytorch.models.ApproximateGP):
    def __init__(self, Z, d, num_tasks=None):
        M, D = Z.shape
        Q = None if num_tasks is None else d["W"].shape[1]
        batch = torch.Size([] if Q is None else [Q])
        q = gpytorch.variational.CholeskyVariationalDistribution(M, batch_shape=batch)
        Zb = Z if Q is None else Z.expand(Q, M, D).clone()
        strat = gpytorch.variational.VariationalStrategy(self, Zb, q, learn_inducing_locations=True)
        if Q is not None:
            strat = gpytorch.variational.LMCVariationalStrategy(
                strat, num_tasks=num_tasks, num_latents=Q, latent_dim=-1
            )
        super().__init__(strat)
        self.mean_module = gpytorch.means.ZeroMean(batch_shape=batch)
        self.covar_module = gpytorch.kernels.ScaleKernel(
            gpytorch.kernels.RBFKernel(ard_num_dims=D, batch_shape=batch), batch_shape=batch
        )
        self.covar_module.base_kernel.lengthscale = (
            _t(d["lengthscale"]).expand(*batch, 1, D).clone()
        )
        self.covar_module.outputscale = _t(np.full(tuple(batch), float(d["kvar"])))

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


class _Exact(gpytorch.models.ExactGP):
    def __init__(self, X, y, lik, d):
        super().__init__(X, y, lik)
        Q = len(d["sm_weights"])
        self.mean_module = gpytorch.means.ZeroMean()
        self.covar_module = gpytorch.kernels.SpectralMixtureKernel(num_mixtures=Q, ard_num_dims=1)
        self.covar_module.mixture_weights = _t(d["sm_weights"])
        self.covar_module.mixture_means = _t(d["sm_means"]).reshape(Q, 1, 1)
        self.covar_module.mixture_scales = _t(d["sm_scales"]).reshape(Q, 1, 1)

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def setup(cmd):
    torch.set_num_threads(int(cmd.get("threads", 1)))
    torch.manual_seed(0)  # GPyTorch jitters its initial variational mean
    d = np.load(cmd["data"])
    task = cmd["task"]
    X, y = _t(d["X_train"]), _t(d["y_train"])
    N = X.shape[0]
    if task == "lmc":
        P = d["W"].shape[0]
        model = _SVGP(_t(d["Z"]), d, num_tasks=P).to(DT)
        model.variational_strategy.lmc_coefficients.data.copy_(_t(d["W"]).mT)
        lik = gpytorch.likelihoods.MultitaskGaussianLikelihood(
            num_tasks=P, has_global_noise=False
        ).to(DT)
        lik.task_noises = _t(np.full(P, float(d["noise"])))
    elif task == "negbin":
        model = _SVGP(_t(d["Z"]), d).to(DT)
        lik = gpytorch.likelihoods.NegativeBinomialLikelihood().to(DT)
    elif task == "sm":
        lik = gpytorch.likelihoods.GaussianLikelihood().to(DT)
        lik.noise = float(d["noise"])
        model = _Exact(X, y, lik, d).to(DT)
    else:
        raise ValueError(f"GPyTorch offers no {task!r} model here")
    if task == "sm":
        mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
    else:
        mll = gpytorch.mlls.VariationalELBO(lik, model, num_data=N)
    params = list(model.parameters()) + [
        p for p in lik.parameters() if all(p is not q for q in model.parameters())
    ]
    state.update(
        task=task,
        model=model,
        lik=lik,
        mll=mll,
        X=X,
        y=y,
        batches=d["batches"] if "batches" in d.files else None,
        pos=0,
        opt=torch.optim.Adam(params, lr=float(cmd["lr"])),
        Xte=_t(d["X_test"]),
        yte=d["y_test"],
    )
    return {"ok": True, "version": gpytorch.__version__}


def train(cmd):
    model, lik, mll, opt = state["model"], state["lik"], state["mll"], state["opt"]
    model.train()
    lik.train()
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
        loss = -mll(model(xb), yb)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return {"times": times, "loss": float(loss.detach())}


def evaluate(cmd):
    model, lik, task = state["model"], state["lik"], state["task"]
    model.eval()
    lik.eval()
    X, y = state["Xte"], state["yte"]
    with torch.no_grad(), gpytorch.settings.fast_pred_var(False):
        f = model(X)
        if task in ("lmc", "sm"):
            pred = lik(f)
            mean, var = pred.mean.numpy(), pred.variance.numpy()
            lpd = -0.5 * (np.log(2 * np.pi * var) + (y - mean) ** 2 / var)
            out = {"rmse": float(np.sqrt(np.mean((mean - y) ** 2)))}
        else:
            lpd = lik.log_marginal(_t(y), f).numpy()
            # the predictive mean E[softplus(f)], by GPyTorch's own Gauss-Hermite rule
            mean = lik.quadrature(torch.nn.functional.softplus, f).numpy()
            out = {"mae": float(np.mean(np.abs(mean - y)))}
    out["nlpd"] = float(-np.mean(lpd))
    if task == "negbin":
        out["probs"] = float(lik.probs.reshape(-1)[0])
    return out


def handler(cmd):
    return {"setup": setup, "train": train, "eval": evaluate}[cmd["cmd"]](cmd)


if __name__ == "__main__":
    serve(handler)
