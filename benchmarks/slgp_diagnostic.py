"""Why does SLGP's test NLL on housing grow with training?  (seed 003, issue 8)

Fits SLGP exactly as ``modulated_reproduction.py --parts uci`` does (housing, split 0,
M = 100, beta = 1, S = 5, Adam lr 0.005, full batch) and every ``--every`` steps records
the test and training NLL of the predictive mixture, the noise variance nu_eps, the
mean predictive-component spread and the width of p(w|x) at the test points; at the end,
the test NLL against the number of predictive draws.  Output: JSON lines on stdout,
docs/results/modulated_raw/slgp_diagnostic[_early_stop].json, and the regenerated
docs/results/modulated.md.

    .venv/bin/python benchmarks/slgp_diagnostic.py --steps 5000 --every 500
    .venv/bin/python benchmarks/slgp_diagnostic.py --default-fit --every 500

``--default-fit``: the same model with ``fit(X, y, seed=split)`` and no budget (SLGP's
default, which holds out 10% of the rows and stops on them), written to
slgp_diagnostic_default.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np
import torch

import latentgp as lg

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import modulated_reproduction as mr  # noqa: E402
from machine import stamp  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dataset", default="housing")
    ap.add_argument("--split", type=int, default=0)
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--every", type=int, default=500)
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--early-stop", action="store_true",
                    help="hold out 10%% of the training split and stop on it "
                         "(lg.training.EarlyStopping, every 250 steps, patience 4)")
    ap.add_argument("--default-fit", action="store_true",
                    help="SLGP's default fit: no budget, so it holds out 10%% of the rows "
                         "and stops on them by itself (latentgp.training.holdout); "
                         "--steps is not used")
    ap.add_argument("--quick", action="store_true", help="200 steps, a score every 100")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.every = 200, 100
    torch.set_num_threads(1)
    ds = lg.datasets.load(f"uci/{args.dataset}", args.split)
    s = lg.datasets.Standardizer().fit(ds.X_train)
    Xtr, Xte = s.transform(ds.X_train), s.transform(ds.X_test)
    ytr = ds.y_train
    callbacks = []
    stop = None
    if args.early_stop:
        Xtr, ytr, Xval, yval = mr.hold_out(Xtr, ytr, args.split)
        stop = lg.training.EarlyStopping(Xval, yval, every=250, patience=4)
        callbacks.append(stop)
    torch.manual_seed(args.split)
    model = mr.build("SLGP", 100, args.dataset, S=args.samples)
    rows = []

    def record(info):
        step = info["step"]
        if step % args.every and step != args.steps:
            return None
        m = info["model"]
        with torch.no_grad():
            lpd_te = np.asarray(m.log_predictive_density(Xte, ds.y_test))
            lpd_tr = np.asarray(m.log_predictive_density(Xtr, ytr))
            _, var_p = m.predict_latent_input(Xte)  # p(w|x): mean, variance
            nu = float(m.likelihood.variance) * float(m.y_scale[0]) ** 2
        row = {"step": step, "test_nll": -float(lpd_te.mean()),
               "train_nll": -float(lpd_tr.mean()), "nu_eps": nu,
               "pw_sd_median": float(torch.as_tensor(var_p).sqrt().median()),
               "worst_test_nll": sorted((-lpd_te).tolist())[-5:]}
        rows.append(row)
        print(json.dumps(row), flush=True)
        return None

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if args.default_fit:  # the paper's model, the library's default fit
            model.fit(Xtr, ytr, seed=args.split, progress=False, callbacks=[record])
        else:
            model.fit(Xtr, ytr, max_steps=args.steps, lr=0.005, batch_size=min(512, len(Xtr)),
                      seed=args.split, callbacks=[record, *callbacks])
    # the predictive is a mixture over K (w, h) draws: does the final NLL depend on K?
    by_k = {}
    for K in (200, 2000, 20000):
        model.num_predict_samples = K
        lpd = np.asarray(model.log_predictive_density(Xte, ds.y_test))
        by_k[K] = {"test_nll": -float(lpd.mean()), "worst": sorted((-lpd).tolist())[-5:]}
        print(json.dumps({"K": K, **by_k[K]}), flush=True)
    out = {"argv": sys.argv, "seconds": time.perf_counter() - t0, "rows": rows,
           "nll_by_predict_samples": by_k, "y_train_sd": float(ds.y_train.std()),
           "n_train": len(Xtr)}
    if stop is not None:
        out["early_stopping"] = {"best_step": stop.best_step, "scores": stop.scores,
                                 "stopped": model.history_.stopped,
                                 "steps": model.history_.steps}
    if args.default_fit:
        h = model.history_
        out["default_fit"] = {"steps": h.steps, "stopped": h.stopped, "reason": h.reason,
                              "holdout": {k: v for k, v in h.holdout.items() if k != "scores"}}
    name = ("slgp_diagnostic_default.json" if args.default_fit
            else "slgp_diagnostic_early_stop.json" if args.early_stop
            else "slgp_diagnostic.json")
    os.makedirs(mr.RAW, exist_ok=True)
    with open(os.path.join(mr.RAW, name), "w") as fh:
        json.dump(stamp(out), fh, indent=1)
    mr.report()  # the page shows the diagnostic beside the reproduction


if __name__ == "__main__":
    main()
