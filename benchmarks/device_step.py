"""SVGP training step on an accelerator: latentgp against GPyTorch, same process, same data.

The GPU column of ``docs/results/performance.md``'s step grid (issue 24): one minibatch
step (ELBO, backward, optimiser update) of an SVGP with an ARD SE kernel, whitened full
q(u), Gaussian likelihood, D = 8, N = 100,000 synthetic rows, at M = 256 / B = 1,024 and
M = 1,024 / B = 4,096, float64 and float32; Adam for both libraries, and the natural step
(latentgp's ``optimizer="natural"`` step; GPyTorch's ``NGD`` on its natural
parameterisation plus Adam). Both models start from the same Z and hyperparameters. Each
configuration: 5 warm-up steps, then ``--reps`` interleaved rounds of ``--steps`` steps
per library, each step timed between ``torch.cuda.synchronize()`` calls; the median step
is reported.  GPflow is not run here (TensorFlow is not on the device machine).

    python benchmarks/device_step.py [--device cuda] [--steps 20] [--reps 3] [--out FILE]

Writes a JSON (``--out``) with the rows and the machine's provenance.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "peers"))

from machine import package_version, stamp  # noqa: E402

import latentgp as lg  # noqa: E402
from latentgp.training.natural import make_natural_adam  # noqa: E402


def data(N: int, D: int, M: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (N, D))
    y = np.sin(X @ rng.standard_normal(D)) + 0.1 * rng.standard_normal(N)
    Z = X[rng.choice(N, M, replace=False)]
    return X, y, Z


def latentgp_stepper(X, y, Z, B, natural, dtype, device):
    N = X.shape[0]
    m = lg.SVGP(Z=Z, kernel=lg.kernels.RBF(lengthscale=[1.0] * X.shape[1], variance=1.0),
                likelihood=lg.likelihoods.Gaussian(variance=0.1), normalize_y=False,
                dtype=dtype, device=device)
    Xt = torch.as_tensor(X, dtype=dtype, device=device)
    yt = torch.as_tensor(y, dtype=dtype, device=device)
    m.initialize(Xt, yt)
    params = list(m.parameters())
    if natural:
        opt = make_natural_adam(m, params, 0.01, N, {"natural_alternate": True}, batch_size=B)
    else:
        opt = lg.training.make_optimizer("adam", params, 0.01)
    g = torch.Generator(device="cpu").manual_seed(1)

    def step():
        idx = torch.randint(N, (B,), generator=g).to(device)
        xb, yb = Xt[idx], yt[idx]

        def closure():
            opt.zero_grad(set_to_none=True)
            loss = -m.objective(xb, yb, N) / N
            loss.backward()
            return loss

        if natural:
            opt.step(closure)
        else:
            closure()
            opt.step()

    return step


def gpytorch_stepper(X, y, Z, B, natural, dtype, device):
    import gpytorch
    from gpytorch_worker import SVGPModel

    N = X.shape[0]
    Xt = torch.as_tensor(X, dtype=dtype, device=device)
    yt = torch.as_tensor(y, dtype=dtype, device=device)
    model = SVGPModel(torch.as_tensor(Z, dtype=dtype), X.shape[1], natural).to(device, dtype)
    lik = gpytorch.likelihoods.GaussianLikelihood().to(device, dtype)
    model.covar_module.base_kernel.lengthscale = torch.ones(X.shape[1], dtype=dtype,
                                                            device=device)
    model.covar_module.outputscale = 1.0
    lik.noise = 0.1
    mll = gpytorch.mlls.VariationalELBO(lik, model, num_data=N)
    if natural:
        opts = [gpytorch.optim.NGD(model.variational_parameters(), num_data=N, lr=0.1),
                torch.optim.Adam([*model.hyperparameters(), *lik.parameters()], lr=0.01)]
    else:
        opts = [torch.optim.Adam([*model.parameters(), *lik.parameters()], lr=0.01)]
    model.train()
    lik.train()
    g = torch.Generator(device="cpu").manual_seed(1)

    def step():
        idx = torch.randint(N, (B,), generator=g).to(device)
        for o in opts:
            o.zero_grad(set_to_none=True)
        loss = -mll(model(Xt[idx]), yt[idx])
        loss.backward()
        for o in opts:
            o.step()

    return step


def timed(step, steps: int, device: str) -> list[float]:
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    out = []
    for _ in range(steps):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--N", type=int, default=100_000)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    rows = []
    for M, B in [(256, 1024), (1024, 4096)]:
        X, y, Z = data(a.N, 8, M)
        for dtype in (torch.float64, torch.float32):
            for natural in (False, True):
                steppers = {"latentgp": latentgp_stepper(X, y, Z, B, natural, dtype, a.device),
                            "gpytorch": gpytorch_stepper(X, y, Z, B, natural, dtype, a.device)}
                times: dict[str, list[float]] = {k: [] for k in steppers}
                for s in steppers.values():
                    timed(s, 5, a.device)
                for _ in range(a.reps):
                    for k, s in steppers.items():
                        times[k] += timed(s, a.steps, a.device)
                med = {k: 1e3 * float(np.median(v)) for k, v in times.items()}
                row = {"M": M, "B": B, "dtype": str(dtype).split(".")[-1],
                       "step": "natural" if natural else "adam",
                       "latentgp_ms": med["latentgp"], "gpytorch_ms": med["gpytorch"],
                       "gpytorch_over_latentgp": med["gpytorch"] / med["latentgp"]}
                rows.append(row)
                print(json.dumps(row), flush=True)
    obj = stamp({"rows": rows}, peers={"gpytorch": package_version("gpytorch")})
    obj["provenance"].update(device=a.device, gpu=torch.cuda.get_device_name()
                             if a.device.startswith("cuda") else None)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(obj, fh, indent=1)


if __name__ == "__main__":
    main()
