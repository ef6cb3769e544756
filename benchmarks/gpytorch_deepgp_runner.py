"""GPyTorch's deep GP on one split, for ``deepgp_uci.py --gpytorch`` (issue 26): run in a
virtual environment with gpytorch (``/work/venvs/gpytorch``), not latentgp's.

    python benchmarks/gpytorch_deepgp_runner.py DATA.npz LAYERS STEPS

``DATA.npz`` holds ``X_train``, ``y_train``, ``X_test``, ``y_test`` (written by
``deepgp_uci.py``).  The model is GPyTorch's deep GP example (``DeepGPLayer`` with a
``VariationalStrategy`` over a ``CholeskyVariationalDistribution``, ``ScaleKernel(RBF)``
with ARD, a learned linear mean in the inner layers and a constant mean at the top,
``DeepApproximateMLL(VariationalELBO)``) set to deepgp_uci.py's setting: M inducing
points per layer (per output: GPyTorch's inner layers are batches of independent GPs,
each with its own kernel and inducing inputs, where latentgp's outputs share them),
inner width ``min(D, 30)``, initial noise variance 0.01, Adam at lr 0.01 on the whole
training set, one sample through the layers per point in training, 100 at test.
Inputs and targets are standardised with the training set's statistics; the inducing
inputs start at training points (the first layer; the inner width's columns of them for
later layers).  Prints one JSON line: test NLPD of the 100-sample mixture and RMSE of
its mean (targets' units), training seconds, the bound per point over the last two
tenths of the steps.
"""

from __future__ import annotations

import json
import math
import sys
import time

import gpytorch
import numpy as np
import torch
from gpytorch.models.deep_gps import DeepGP, DeepGPLayer


class Layer(DeepGPLayer):
    def __init__(self, input_dims: int, output_dims: int | None, Z: torch.Tensor,
                 mean: str) -> None:
        batch = torch.Size([]) if output_dims is None else torch.Size([output_dims])
        M = Z.shape[-2]
        if output_dims is not None:
            Z = Z.expand(output_dims, *Z.shape).clone()
        dist = gpytorch.variational.CholeskyVariationalDistribution(M, batch_shape=batch)
        strat = gpytorch.variational.VariationalStrategy(self, Z, dist,
                                                         learn_inducing_locations=True)
        super().__init__(strat, input_dims, output_dims)
        self.mean_module = (gpytorch.means.LinearMean(input_dims, batch_shape=batch)
                            if mean == "linear" else gpytorch.means.ConstantMean(batch_shape=batch))
        self.covar_module = gpytorch.kernels.ScaleKernel(
            gpytorch.kernels.RBFKernel(batch_shape=batch, ard_num_dims=input_dims),
            batch_shape=batch)

    def forward(self, x: torch.Tensor):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                         self.covar_module(x))


class Deep(DeepGP):
    def __init__(self, X: torch.Tensor, layers: int, M: int) -> None:
        super().__init__()
        D = X.shape[-1]
        width = min(D, 30)
        g = torch.Generator().manual_seed(0)
        Z = X[torch.randperm(X.shape[0], generator=g)[:M]]
        inner = []
        d_in = D
        for _ in range(layers - 1):
            inner.append(Layer(d_in, width, Z[:, :d_in] if d_in <= D else Z, "linear"))
            d_in = width
        self.inner = torch.nn.ModuleList(inner)
        self.top = Layer(d_in, None, Z[:, :d_in], "constant")
        self.likelihood = gpytorch.likelihoods.GaussianLikelihood()
        self.likelihood.noise = 0.01

    def forward(self, x: torch.Tensor):
        h = x
        for layer in self.inner:
            h = layer(h)
        return self.top(h)


def main() -> None:
    path, layers, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    d = np.load(path)
    Xtr, ytr = torch.as_tensor(d["X_train"]), torch.as_tensor(d["y_train"])
    Xte, yte = torch.as_tensor(d["X_test"]), torch.as_tensor(d["y_test"])
    xm, xs = Xtr.mean(0), Xtr.std(0).clamp_min(1e-12)
    ym, ys = ytr.mean(), ytr.std()
    Xtr, Xte = (Xtr - xm) / xs, (Xte - xm) / xs
    ytr_s = (ytr - ym) / ys
    model = Deep(Xtr, layers, 100)
    mll = gpytorch.mlls.DeepApproximateMLL(
        gpytorch.mlls.VariationalELBO(model.likelihood, model, Xtr.shape[0]))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    bound = []
    model.train()
    t = time.perf_counter()
    with gpytorch.settings.num_likelihood_samples(1):
        for _ in range(steps):
            opt.zero_grad()
            loss = -mll(model(Xtr), ytr_s)
            loss.backward()
            opt.step()
            bound.append(-float(loss.detach()))
    seconds = time.perf_counter() - t
    model.eval()
    with torch.no_grad(), gpytorch.settings.num_likelihood_samples(100):
        pred = model.likelihood(model(Xte))  # a batch of 100 Gaussians (deep) or one
        m, v = pred.mean, pred.variance
        if m.dim() == 1:
            m, v = m[None], v[None]
        m, v = m * ys + ym, v * ys**2
        lp = -0.5 * (torch.log(2 * math.pi * v) + (yte - m) ** 2 / v)
        lpd = torch.logsumexp(lp, 0) - math.log(m.shape[0])
        rmse = float(((m.mean(0) - yte) ** 2).mean().sqrt())
    obj = np.asarray(bound)  # the ELBO per point (GPyTorch's is already divided by N)
    tenth = max(1, len(obj) // 10)
    print(json.dumps({
        "nlpd": float(-lpd.mean()), "rmse": rmse, "train_seconds": round(seconds, 1),
        "bound_last_tenth": float(obj[-tenth:].mean() - math.log(float(ys))),
        "bound_previous_tenth": float(obj[-2 * tenth:-tenth].mean() - math.log(float(ys))),
        "gpytorch": gpytorch.__version__, "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
