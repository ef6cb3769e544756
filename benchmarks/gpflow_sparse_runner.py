"""GPflow SGPR (Titsias VFE) and GPRFITC on one split, for sparse_reproduction.py.

Runs inside the GPflow virtual environment (``.venv-gpflow``, with TF_USE_LEGACY_KERAS=1),
never imported by latentgp.  Usage::

    .venv-gpflow/bin/python benchmarks/gpflow_sparse_runner.py split.npz maxiter
    .venv-gpflow/bin/python benchmarks/gpflow_sparse_runner.py --eval split.npz reps

``split.npz`` holds standardised ``X_train, y_train, X_test, y_test``, the initial
inducing inputs ``Z`` and initial hyperparameters ``lengthscale, variance, noise``.
Prints one JSON line per model: rmse and nlpd (standardised units), training seconds,
L-BFGS iterations and the final objective (log marginal likelihood or bound).  With
``--eval`` it only times objective + gradient evaluations (sparse_reproduction's
``--part evalspeed``).
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


def run(path: str, maxiter: int) -> None:
    d = np.load(path)
    Xtr, ytr = d["X_train"], d["y_train"][:, None]
    Xte, yte = d["X_test"], d["y_test"][:, None]
    for name in ("SGPR", "GPRFITC"):
        kern = gpflow.kernels.SquaredExponential(
            lengthscales=np.array(d["lengthscale"], dtype=np.float64),
            variance=float(d["variance"]),
        )
        cls = getattr(gpflow.models, name)
        model = cls(
            (Xtr, ytr), kern, inducing_variable=d["Z"].copy(), noise_variance=float(d["noise"])
        )
        t0 = time.perf_counter()
        res = gpflow.optimizers.Scipy().minimize(
            model.training_loss, model.trainable_variables, options={"maxiter": maxiter}
        )
        seconds = time.perf_counter() - t0
        mean, var = (a.numpy()[:, 0] for a in model.predict_y(Xte))
        lpd = -0.5 * (np.log(2 * np.pi * var) + (yte[:, 0] - mean) ** 2 / var)
        out = {
            "model": f"gpflow-{name}",
            "rmse": float(np.sqrt(np.mean((yte[:, 0] - mean) ** 2))),
            "nlpd": float(-np.mean(lpd)),
            "seconds": seconds,
            "steps": int(res.nit),
            "objective": float(-model.training_loss().numpy()),
        }
        print(json.dumps(out), flush=True)


def time_evaluations(path: str, reps: int) -> None:
    """Seconds per objective + gradient evaluation (compiled, after one warm-up call) of
    SGPR and GPRFITC on ``X_train, y_train`` of ``path``; one JSON line per model."""
    d = np.load(path)
    X, y = d["X_train"], d["y_train"][:, None]
    for name in ("SGPR", "GPRFITC"):
        kern = gpflow.kernels.SquaredExponential(
            lengthscales=np.array(d["lengthscale"], dtype=np.float64),
            variance=float(d["variance"]),
        )
        model = getattr(gpflow.models, name)(
            (X, y), kern, inducing_variable=d["Z"].copy(), noise_variance=float(d["noise"])
        )
        variables = model.trainable_variables

        @tf.function
        def value_and_grad(model=model, variables=variables):
            with tf.GradientTape() as tape:
                loss = model.training_loss()
            return loss, tape.gradient(loss, variables)

        value_and_grad()  # trace and compile
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            value_and_grad()
            times.append(time.perf_counter() - t0)
        print(json.dumps({"model": f"gpflow-{name}", "seconds": times}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--eval":
        time_evaluations(sys.argv[2], int(sys.argv[3]))
    else:
        run(sys.argv[1], int(sys.argv[2]))
