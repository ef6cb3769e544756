"""Long SVGP traces for the stochastic stopping rule (issue 24, the default fit): per step
the minibatch objective, every ``--probe-every`` steps the ELBO per point on 8,192 fixed
rows evenly spaced over the training set (a "probe": no minibatch noise), every
``--eval-every`` steps the test NLPD, so that stopping rules can be replayed offline
against where the test NLPD settles (``--replay``).

Each case is ``lg.SVGP(num_inducing=M, likelihood=...)`` fitted with the default fit's
optimiser settings for large data (lr 0.01, B = 1,024; ``optimizer`` as named) for a
fixed number of steps (``max_steps``: no rule stops it), ``seed=0``, on one of the time-
to-accuracy sets (``time_to_accuracy.load``, split 0).  CPU seconds exclude the probe and
the scoring.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/stopping_traces.py \\
        --cases elevators:gaussian:natural:128:6000 ... --out traces.json
    .venv/bin/python benchmarks/stopping_traces.py --replay traces.json ...

Writes one JSON object per case (appended to ``--out``).  ``--replay`` prints, per trace,
where the library's stochastic rule stops on the minibatch values (``Convergence`` with
the default rule) and where two probe-based rules would: the change of the probe between
the ends of the rule's growing windows below ``rtol`` per base window (twice in a row),
and the least-squares slope of the probe points inside each window plus ``z`` standard
errors below a rate per step (twice in a row).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import signal
import time

import numpy as np
import torch
from machine import provenance
from time_to_accuracy import load

import latentgp as lg
from latentgp.models.svgp import PROBED_RULE
from latentgp.training.convergence import Convergence, default_rule

PROBE_ROWS = 8192


def trace(name: str, likelihood: str, optimizer: str, M: int, steps: int,
          probe_every: int, eval_every: int, device: str) -> dict:
    (X, y, Xte, yte), what = load(name, 0, None)
    N = X.shape[0]
    rows = torch.linspace(0, N - 1, min(N, PROBE_ROWS), dtype=torch.float64).round().long()
    Xp = torch.as_tensor(X[rows.numpy()], dtype=torch.float64, device=device)
    yp = torch.as_tensor(y[rows.numpy()], dtype=torch.float64, device=device)
    out = {"case": f"{name}:{likelihood}:{optimizer}:{M}:{steps}", "what": what, "N": N,
           "probe_step": [], "probe": [], "eval_step": [], "nlpd": [], "cpu_seconds": []}
    spent = [0.0]

    def callback(info) -> bool:
        step = int(info["step"])
        if step % probe_every and step % eval_every:
            return False
        e0 = time.process_time()
        m = info["model"]
        with torch.no_grad():
            if step % probe_every == 0:
                ys = (yp - m.y_mean) / m.y_scale if m.normalize_y else yp
                out["probe_step"].append(step)
                out["probe"].append(float(m.objective(Xp, ys, N) + m.log_prior()) / N)
            if step % eval_every == 0:
                out["eval_step"].append(step)
                out["nlpd"].append(-float(np.mean(np.asarray(m.log_predictive_density(Xte, yte)))))
                out["cpu_seconds"].append(e0 - c0 - spent[0])
        spent[0] += time.process_time() - e0
        return False

    model = lg.SVGP(num_inducing=M, likelihood=likelihood, device=device)
    c0 = time.process_time()
    model.fit(X, y, optimizer=optimizer, lr=0.01, batch_size=1024, max_steps=steps, seed=0,
              progress=False, callbacks=[callback])
    out["objective_per_point"] = [v / N for v in model.history_.objective]
    out["offset_per_point"] = -float(model.target_log_scale())
    return out


def _nlpd_at(d: dict, step: int | None) -> float | None:
    if step is None:
        return None
    st = np.asarray(d["eval_step"])
    return float(d["nlpd"][int(np.argmin(np.abs(st - step)))])


def _window_ends(total: int, growth: float = 0.2, window: int = 50) -> list[int]:
    ends, t = [], 0
    while True:
        t += max(window, math.ceil(growth * t))
        if t > total:
            return ends
        ends.append(t)


def library_rule(d: dict, probed: bool = False) -> int | None:
    """Where the library's stochastic rule stops on the trace: on its minibatch values, or
    (``probed``) with SVGP's ``PROBED_RULE``, its probes read off the trace (the recorded
    probe nearest to the step asked for; recorded every 25 steps)."""
    pst, pv = np.asarray(d["probe_step"]), np.asarray(d["probe"])
    step = [0]
    probe = (lambda: float(pv[int(np.argmin(np.abs(pst - step[0])))])) if probed else None
    rule = default_rule(1, deterministic=False, overrides=PROBED_RULE if probed else None)
    conv = Convergence(rule, probe=probe)
    for k, v in enumerate(np.asarray(d["objective_per_point"]) - d["offset_per_point"], 1):
        step[0] = k
        conv.add(float(v))
        if conv.end_of_step(k):
            return k
    return None


def probe_change_rule(d: dict, rtol: float, patience: int = 2) -> int | None:
    """The probe at each window end (nearest recorded point): change below
    ``rtol * max(|value|, 1) * window / 50``."""
    pst, pv = np.asarray(d["probe_step"]), np.asarray(d["probe"])
    at = lambda t: pv[int(np.argmin(np.abs(pst - t)))]  # noqa: E731
    calm, prev_end = 0, None
    for end in _window_ends(len(d["objective_per_point"])):
        if prev_end is not None:
            a, b = at(prev_end), at(end)
            calm = calm + 1 if abs(b - a) < rtol * max(abs(a), 1.0) * (end - prev_end) / 50 \
                else 0
            if calm >= patience:
                return end
        prev_end = end
    return None


def probe_slope_rule(d: dict, rate: float, z: float, patience: int = 2) -> int | None:
    """The least-squares slope of the probe points inside each window (at least 8), plus
    ``z`` standard errors, below ``rate * max(|mean|, 1)`` per step."""
    pst, pv = np.asarray(d["probe_step"], dtype=float), np.asarray(d["probe"])
    calm, start = 0, 0
    for end in _window_ends(len(d["objective_per_point"])):
        sel = (pst > start) & (pst <= end)
        start = end
        if sel.sum() < 8:
            continue
        x, y = pst[sel], pv[sel]
        xm, sxx = x.mean(), ((x - x.mean()) ** 2).sum()
        b = ((x - xm) * (y - y.mean())).sum() / sxx
        res = y - y.mean() - b * (x - xm)
        se = math.sqrt((res ** 2).sum() / (len(x) - 2) / sxx)
        calm = calm + 1 if b + z * se < rate * max(abs(y.mean()), 1.0) else 0
        if calm >= patience:
            return end
    return None


def replay(paths: list[str]) -> None:
    rules = {"window means (before)": library_rule,
             "probed (SVGP's default)": lambda d: library_rule(d, probed=True),
             "probe change 2e-4": lambda d: probe_change_rule(d, 2e-4),
             "probe change 5e-4": lambda d: probe_change_rule(d, 5e-4),
             "probe change 1e-3": lambda d: probe_change_rule(d, 1e-3),
             "probe slope 1e-5, z 2": lambda d: probe_slope_rule(d, 1e-5, 2.0),
             "probe slope 2e-5, z 2": lambda d: probe_slope_rule(d, 2e-5, 2.0)}
    for path in paths:
        with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as fh:
            for line in fh:
                d = json.loads(line)
                nl = np.asarray(d["nlpd"])
                print(f"{d['case']}: best test NLPD {nl.min():.4f} at step "
                      f"{d['eval_step'][int(nl.argmin())]}, last {nl[-1]:.4f}")
                for name, rule in rules.items():
                    s = rule(d)
                    v = _nlpd_at(d, s)
                    print(f"  {name:22s} stops at {s}" + ("" if v is None else
                          f", test NLPD {v:.4f} ({v - nl.min():+.4f})"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=[],
                    help="set:likelihood:optimizer:M:steps")
    ap.add_argument("--replay", nargs="+", default=None, metavar="JSON",
                    help="replay stopping rules on these trace files; no fits")
    ap.add_argument("--probe-every", type=int, default=25)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.replay:
        replay(a.replay)
        return
    if not a.cases or not a.out:
        ap.error("--cases and --out are needed for a run (or --replay files)")

    def interrupt(*_):  # a time limit (SIGTERM) ends the fit as Ctrl-C does; it is kept
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    prov = provenance()
    for case in a.cases:
        name, lik, opt, M, steps = case.split(":")
        t0 = time.time()
        res = trace(name, lik, opt, int(M), int(steps), a.probe_every, a.eval_every, a.device)
        res["provenance"] = prov
        with open(a.out, "a") as fh:
            fh.write(json.dumps(res) + "\n")
        print(case, f"{time.time() - t0:.0f} s", f"final nlpd {res['nlpd'][-1]:.4f}",
              flush=True)


if __name__ == "__main__":
    main()
