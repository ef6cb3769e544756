"""A tiny JSON-lines protocol so each library runs in its own process (and, for GPflow,
its own virtual environment) while the harness interleaves their repetitions.

The harness writes one JSON command per line to the worker's stdin and reads one JSON
reply per line from its stdout.  Commands:

- ``{"cmd": "setup", "data": npz_path, "M": .., "B": .., "dtype": "float64", "lr": ..,
  "threads": 2}``: load the arrays (X_train, y_train, X_test, y_test, Z, batches) and build
  the model with the shared initial values in the npz (lengthscale, variance, noise).
- ``{"cmd": "train", "steps": k}``: take the next k minibatches from ``batches``; reply with
  the per-step wall times.
- ``{"cmd": "eval"}``: test RMSE and NLPD.
- ``{"cmd": "predict", "n": n}``: time mean+variance prediction for n test rows (points
  per wall second and per process CPU second).
- ``{"cmd": "rss"}``: peak resident memory of the worker (MiB).
- ``{"cmd": "quit"}``.

This file is imported by the workers: it must not import torch or tensorflow.
"""

from __future__ import annotations

import json
import resource
import sys
import time


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def serve(handler) -> None:
    """Run the command loop; ``handler(cmd: dict) -> dict``."""
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        cmd = json.loads(line)
        if cmd["cmd"] == "quit":
            break
        try:
            if cmd["cmd"] == "rss":
                out = {"rss_mib": peak_rss_mib()}
            else:
                t0 = time.perf_counter()
                out = handler(cmd)
                out.setdefault("seconds", time.perf_counter() - t0)
        except Exception as err:  # noqa: BLE001 - reported to the harness
            out = {"error": f"{type(err).__name__}: {err}"}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
