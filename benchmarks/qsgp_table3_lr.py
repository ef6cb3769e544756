"""QSGP Table 3 setting (Phi = S = K, kin40k split 0) at one learning rate: test RMSE and
MNLP on the first 2,000 test points every 250 steps, with or without the Nyström control
variate.  A diagnostic quoted by hand in docs/results/qsgp_reproduction.md.

    .venv/bin/python benchmarks/qsgp_table3_lr.py LR STEPS NYSTROM(0|1)
"""

from __future__ import annotations

import sys
import time
import warnings

import torch
from qsgp_reproduction import exact_init, load_split, metrics

import latentgp as lg


def main() -> None:
    lr, steps, nystrom = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    X, y, Xte, yte = load_split("kin40k", 0)
    Xte, yte = Xte[:2000], yte[:2000]
    ls, var, noise = exact_init(X, y, 0)
    q = lg.QSGP(
        basis=lg.QSGP.Basis(kind="inducing", batch=500),
        covariance=lg.QSGP.Covariance(kind="meanfield", closed_form_diagonal=False),
        kernel=lg.kernels.RBF(lengthscale=ls, variance=var),
        likelihood=lg.likelihoods.Gaussian(noise),
        control_variate=lg.QSGP.ControlVariate(rank=200, nystrom=nystrom),
    )
    t = time.perf_counter()

    def report(info) -> bool:
        if info["step"] % 250 == 0 and info["step"]:
            r, nl = metrics(info["model"], Xte, yte)
            print(info["step"], f"rmse {r:.4f} mnlp {nl:.3f} {time.perf_counter() - t:.0f}s")
        return False

    q.fit(X, y, max_steps=steps, batch_size=500, lr=lr, seed=0, callbacks=[report])
    print("final", metrics(q, Xte, yte))


if __name__ == "__main__":
    main()
