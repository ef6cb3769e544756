"""Worker: GPflow's SVGP (whitened, full q_sqrt, ARD SE; a Gaussian likelihood, or with
``likelihood`` in the setup command ``Bernoulli`` (its default probit link) or ``Poisson``
(its default exp link)); runs in .venv-gpflow.

Needs TF_USE_LEGACY_KERAS=1 (set by the harness).  The training step is a tf.function,
GPflow's recommended fast path.
"""

from __future__ import annotations

import math
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
    threads = int(cmd.get("threads", 2))
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    dt = np.float64 if cmd["dtype"] == "float64" else np.float32
    gpflow.config.set_default_float(dt)
    d = np.load(cmd["data"])
    X, y = d["X_train"].astype(dt), d["y_train"].astype(dt)[:, None]
    kern = gpflow.kernels.SquaredExponential(
        lengthscales=d["lengthscale"].astype(dt), variance=dt(d["variance"])
    )
    lik_name = cmd.get("likelihood", "gaussian")
    if lik_name == "gaussian":
        lik = gpflow.likelihoods.Gaussian(variance=dt(d["noise"]))
    elif lik_name == "bernoulli":
        lik = gpflow.likelihoods.Bernoulli()  # invlink: probit
    elif lik_name == "poisson":
        lik = gpflow.likelihoods.Poisson()  # invlink: exp
    else:
        raise ValueError(f"unknown likelihood {lik_name!r}")
    model = gpflow.models.SVGP(
        kern, lik, inducing_variable=d["Z"].astype(dt), whiten=True, num_data=X.shape[0]
    )
    opt = tf.keras.optimizers.Adam(learning_rate=float(cmd["lr"]))
    natural = cmd.get("optimizer", "adam") == "ngd"
    if natural:  # GPflow's recipe: q(u) by NaturalGradient, the rest by Adam
        gpflow.set_trainable(model.q_mu, False)
        gpflow.set_trainable(model.q_sqrt, False)
        natgrad = gpflow.optimizers.NaturalGradient(gamma=float(cmd.get("ngd_lr") or 0.1))

    @tf.function
    def step(xb, yb):
        def loss_fn():
            return model.training_loss((xb, yb))

        if natural:
            natgrad.minimize(loss_fn, var_list=[(model.q_mu, model.q_sqrt)])
        with tf.GradientTape() as tape:
            loss = loss_fn()
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    # trace the step once here (graph building, no update) so that tracing is not
    # counted as training time: later calls with these shapes reuse the graph
    B = int(d["batches"].shape[1])
    step.get_concrete_function(
        tf.TensorSpec([B, X.shape[1]], tf.as_dtype(dt)), tf.TensorSpec([B, 1], tf.as_dtype(dt))
    )
    state.update(
        model=model,
        X=X,
        y=y,
        batches=d["batches"],
        pos=0,
        step=step,
        Xte=d["X_test"].astype(dt),
        yte=d["y_test"],
        likelihood=lik_name,
    )
    return {"ok": True, "version": gpflow.__version__}


def train(cmd):
    times, cpu = [], []  # wall and process CPU seconds per step
    for _ in range(int(cmd["steps"])):
        idx = state["batches"][state["pos"] % len(state["batches"])]
        state["pos"] += 1
        xb, yb = tf.constant(state["X"][idx]), tf.constant(state["y"][idx])
        t0, c0 = time.perf_counter(), time.process_time()
        loss = state["step"](xb, yb)
        loss.numpy()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"times": times, "cpu_times": cpu, "loss": float(loss)}


def _predict(X):
    out_m, out_v = [], []
    for s in range(0, X.shape[0], 65536):
        m, v = state["model"].predict_y(X[s : s + 65536])
        out_m.append(m.numpy()[:, 0])
        out_v.append(v.numpy()[:, 0])
    return np.concatenate(out_m), np.concatenate(out_v)


def evaluate(cmd):
    if state["likelihood"] != "gaussian":  # the harness scores q(f*) the same way for all
        fm, fv = [], []
        for s in range(0, state["Xte"].shape[0], 65536):
            m, v = state["model"].predict_f(state["Xte"][s : s + 65536])
            fm.append(m.numpy()[:, 0])
            fv.append(v.numpy()[:, 0])
        return {"f_mean": np.concatenate(fm).tolist(), "f_var": np.concatenate(fv).tolist()}
    mean, var = _predict(state["Xte"])
    y = state["yte"]
    nlpd = 0.5 * np.mean(np.log(2 * np.pi * var) + (y - mean) ** 2 / var)
    return {"rmse": float(np.sqrt(np.mean((mean - y) ** 2))), "nlpd": float(nlpd)}


def predict(cmd):
    n = int(cmd["n"])
    X = state["Xte"]
    Xp = np.tile(X, (math.ceil(n / X.shape[0]), 1))[:n]
    _predict(Xp[:100])
    t0, c0 = time.perf_counter(), time.process_time()
    _predict(Xp)
    return {"points_per_second": n / (time.perf_counter() - t0),
            "cpu_points_per_second": n / max(time.process_time() - c0, 1e-9)}


def handler(cmd):
    return {"setup": setup, "train": train, "eval": evaluate, "predict": predict}[cmd["cmd"]](cmd)


if __name__ == "__main__":
    serve(handler)
