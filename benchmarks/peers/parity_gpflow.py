"""Worker: GPflow's side of ``benchmarks/parity.py``; runs in GPflow's own environment with
TF_USE_LEGACY_KERAS=1 (set by the harness).

- lmc: SVGP with the ``LinearCoregionalization`` kernel (Q SE kernels, W), separate
  inducing inputs per latent, whitened full q_sqrt, ``Gaussian`` likelihood (GPflow's
  Gaussian has one noise variance for all outputs);
- ordinal: SVGP with GPflow's ``Ordinal`` likelihood (fixed bin edges, learned noise
  scale sigma).
GPflow has no negative binomial likelihood and no spectral mixture kernel; the harness
does not ask for them.  The training step is a ``tf.function`` (GPflow's fast path).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import gpflow  # noqa: E402
import tensorflow as tf  # noqa: E402
from worker_protocol import serve  # noqa: E402

state: dict = {}


def setup(cmd):
    threads = int(cmd.get("threads", 1))
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    gpflow.config.set_default_float(np.float64)
    d = np.load(cmd["data"])
    task = cmd["task"]
    X, y = d["X_train"], d["y_train"]
    y = y if y.ndim == 2 else y[:, None]
    N, M = X.shape[0], d["Z"].shape[0]

    def se():
        return gpflow.kernels.SquaredExponential(
            lengthscales=d["lengthscale"].copy(), variance=float(d["kvar"])
        )

    if task == "lmc":
        P, Q = d["W"].shape
        kernel = gpflow.kernels.LinearCoregionalization([se() for _ in range(Q)], W=d["W"].copy())
        iv = gpflow.inducing_variables.SeparateIndependentInducingVariables(
            [gpflow.inducing_variables.InducingPoints(d["Z"].copy()) for _ in range(Q)]
        )
        model = gpflow.models.SVGP(
            kernel,
            gpflow.likelihoods.Gaussian(variance=float(d["noise"])),
            iv,
            q_mu=np.zeros((M, Q)),
            q_sqrt=np.repeat(np.eye(M)[None], Q, 0),
            whiten=True,
            num_data=N,
        )
    elif task == "ordinal":
        lik = gpflow.likelihoods.Ordinal(bin_edges=d["cutpoints"].copy())
        model = gpflow.models.SVGP(
            se(), lik, inducing_variable=d["Z"].copy(), whiten=True, num_data=N
        )
    else:
        raise ValueError(f"GPflow offers no {task!r} model here")
    opt = tf.keras.optimizers.Adam(learning_rate=float(cmd["lr"]), epsilon=1e-8)  # torch's eps

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = model.training_loss((xb, yb))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    state.update(
        task=task,
        model=model,
        X=X,
        y=y,
        batches=d["batches"] if "batches" in d.files else None,
        pos=0,
        step=step,
        Xte=d["X_test"],
        yte=d["y_test"],
    )
    return {"ok": True, "version": gpflow.__version__}


def train(cmd):
    times = []
    for _ in range(int(cmd["steps"])):
        if state["batches"] is None:
            xb, yb = state["X"], state["y"]
        else:
            idx = state["batches"][state["pos"] % len(state["batches"])]
            xb, yb = state["X"][idx], state["y"][idx]
        state["pos"] += 1
        xb, yb = tf.constant(xb), tf.constant(yb)
        t0 = time.perf_counter()
        loss = state["step"](xb, yb)
        loss.numpy()
        times.append(time.perf_counter() - t0)
    # GPflow's training loss is -ELBO; the others report -ELBO / N
    return {"times": times, "loss": float(loss) / state["X"].shape[0]}


def evaluate(cmd):
    model, task = state["model"], state["task"]
    X, y = state["Xte"], state["yte"]
    if task == "lmc":
        mean, var = (a.numpy() for a in model.predict_y(X))
        lpd = -0.5 * (np.log(2 * np.pi * var) + (y - mean) ** 2 / var)
        out = {"rmse": float(np.sqrt(np.mean((mean - y) ** 2)))}
    else:
        lpd = model.predict_log_density((X, y[:, None])).numpy()
        mean = model.predict_y(X)[0].numpy()[:, 0]
        out = {"mae": float(np.mean(np.abs(mean - y)))}
        out["sigma"] = float(model.likelihood.sigma.numpy())
    out["nlpd"] = float(-np.mean(lpd))
    return out


def handler(cmd):
    return {"setup": setup, "train": train, "eval": evaluate}[cmd["cmd"]](cmd)


if __name__ == "__main__":
    serve(handler)
