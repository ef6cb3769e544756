"""Why QSRVM does not prune on noisy sinc: exact-posterior RVM updates against QSGP's.

The exact part uses the closed-form posterior q(w) = N(mu, Sigma) of the RVM at each s
(dense n x n solves; a diagnostic, not a scalable method) and iterates em
(s_i = 1 / (mu_i^2 + Sigma_ii)) or MacKay (s_i = (1 - s_i Sigma_ii) / mu_i^2).  The QSGP
part trains lg.QSGP(basis="rvm") with each rvm_update on the same data.

    .venv/bin/python benchmarks/qsgp_rvm_diagnostic.py [--n 100] [--steps 1500] [--full-batch]
        [--lr 0.2] [--updates gradient,em,mackay] [--every 0] [--exact-iters 20000]

``--full-batch`` samples every data point and every basis function at each step (no
control variate), so the QSGP fits see the exact gradient: what is left is the optimiser.
The script also prints the spectrum of the mean's Hessian ``K K / sigma^2 + I`` at s = 1:
its condition number bounds how many first-order steps the mean needs.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from qsgp_reproduction import qsrvm, sinc_data


def exact_rvm(X, y, iters: int, mackay: bool, noise_var=0.01, lengthscale=1.0) -> list:
    """Counts of s_i < 1e4 along exact em / MacKay iterations (Phi = K, SE kernel)."""
    x = X[:, 0]
    Phi = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / lengthscale**2)
    s = np.ones(len(x))
    counts = []
    for it in range(1, iters + 1):
        A = Phi.T @ Phi / noise_var + np.diag(s)
        L = np.linalg.cholesky(A)
        mu = np.linalg.solve(L.T, np.linalg.solve(L, Phi.T @ y / noise_var))
        Linv = np.linalg.solve(L, np.eye(len(x)))  # diagnostic only: Sigma_ii = |L^-1 e_i|^2
        sigma = (Linv**2).sum(0)
        if mackay:
            s = (1.0 - s * sigma).clip(1e-300) / np.maximum(mu**2, 1e-300)
        else:
            s = 1.0 / (mu**2 + sigma)
        s = np.minimum(s, 1e12)
        if it in (10, 100, 1000, 5000, 20000) or it == iters:
            counts.append((it, int((s < 1e4).sum())))
    return counts


def hessian_spectrum(X, noise_var=0.01, lengthscale=1.0) -> dict:
    """Eigenvalues of the mean's Hessian K K / sigma^2 + I (Phi = K, s = 1)."""
    x = X[:, 0]
    K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / lengthscale**2)
    ev = np.linalg.eigvalsh(K @ K / noise_var + np.eye(len(x)))
    return {
        "condition_number": float(ev.max() / ev.min()),
        "eigenvalues_above_100": int((ev > 100).sum()),
        "eigenvalues_above_10": int((ev > 10).sum()),
    }


def qsgp_rvm(
    X, y, steps: int, update: str, full_batch: bool = False, lr: float = 0.2, every: int = 0
) -> dict:
    n = len(X)
    t = time.perf_counter()
    q = qsrvm(n, update)
    if full_batch:
        q.basis = q.basis.replace(batch=n)
        q.control_variate = q.control_variate.replace(rank=0)
    path = []

    def count(info) -> None:
        if every and info["step"] % every == 0:
            path.append((info["step"], int((q.log_s.detach() < np.log(1e4)).sum())))

    q.fit(
        X,
        y,
        max_steps=steps,
        batch_size=n if full_batch else min(100, n // 2),
        lr=lr,
        seed=0,
        callbacks=[count],
        progress=False,
    )
    Xs = np.linspace(-10, 10, 400)[:, None]
    mean, _ = q.predict_y(Xs)
    s = np.exp(q.log_s.detach().numpy())
    return {
        "update": update,
        "lr": lr,
        "below_1e4": int((s < 1e4).sum()),
        "below_1e4_along_the_run": path,
        "rmse_to_sinc": float(np.sqrt(np.mean((mean - np.sinc(Xs[:, 0] / np.pi)) ** 2))),
        "noise_sd": float(torch.sqrt(q.likelihood.variance.detach()) * q.y_scale[0]),
        "seconds": time.perf_counter() - t,
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--exact-iters", type=int, default=20000)
    ap.add_argument("--full-batch", action="store_true")
    ap.add_argument("--lr", type=float, default=0.2, help="AdaGrad step size of the QSGP fits")
    ap.add_argument("--updates", default="gradient,em,mackay", help="rvm_update values to fit")
    ap.add_argument("--every", type=int, default=0, help="record the count every this many steps")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    X, y = sinc_data(args.n, 0)
    print("Hessian of the mean at s = 1:", hessian_spectrum(X))
    print("exact em      (iteration, #s<1e4):", exact_rvm(X, y, args.exact_iters, False))
    print("exact MacKay  (iteration, #s<1e4):", exact_rvm(X, y, 2000, True))
    for update in args.updates.split(","):
        r = qsgp_rvm(X, y, args.steps, update, args.full_batch, args.lr, args.every)
        print("QSGP", args.steps, "steps:", r, flush=True)


if __name__ == "__main__":
    main()
