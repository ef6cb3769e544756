"""GPflow's BayesianGPLVM on one data set, for gplvm.py (runs in the GPflow virtual
environment with TF_USE_LEGACY_KERAS=1; never imported by latentgp).  Usage::

    /work/venvs/gpflow/bin/python benchmarks/gpflow_gplvm_runner.py in.npz out.npz maxiter

``in.npz`` holds the (scaled) data ``Y`` and the initial values latentgp starts from:
latent means ``X_mean``, variances ``X_var``, inducing inputs ``Z``, ``lengthscale``,
``variance`` and ``noise``.  GPflow's Scipy L-BFGS-B runs to its own convergence (at most
``maxiter`` iterations); ``out.npz`` gets the fitted latent means, and one JSON line on
stdout gives the training seconds, iterations and the final bound.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)

import gpflow  # noqa: E402


def main(path_in: str, path_out: str, maxiter: int) -> None:
    d = np.load(path_in)
    kern = gpflow.kernels.SquaredExponential(
        lengthscales=np.array(d["lengthscale"], dtype=np.float64),
        variance=float(d["variance"]),
    )
    model = gpflow.models.BayesianGPLVM(
        d["Y"],
        X_data_mean=d["X_mean"].copy(),
        X_data_var=d["X_var"].copy(),
        kernel=kern,
        inducing_variable=d["Z"].copy(),
    )
    model.likelihood.variance.assign(float(d["noise"]))
    t0 = time.perf_counter()
    res = gpflow.optimizers.Scipy().minimize(
        model.training_loss, model.trainable_variables, options={"maxiter": maxiter},
        compile=True,
    )
    seconds = time.perf_counter() - t0
    np.savez(path_out, X_mean=model.X_data_mean.numpy())
    print(json.dumps({
        "seconds": seconds, "iterations": int(res.nit), "success": bool(res.success),
        "message": str(res.message), "bound": float(model.elbo().numpy()),
        "gpflow": gpflow.__version__, "tensorflow": tf.__version__,
    }))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
