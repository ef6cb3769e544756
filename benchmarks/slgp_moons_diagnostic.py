"""Why does SLGP's moons test NLL grow with training?  (seed 003 toy 3, issue 23)

Fits SLGP as ``modulated_reproduction.py --parts toys`` does (moons, M = 50, beta = 0.01,
d_w = 1, S = 3, Adam lr 0.005, full batch) and every ``--every`` steps records the test
and training NLL of the 200-draw predictive mixture, the training NLL with w drawn from
the posterior q(w|x,y) instead of the prior p(w|x), the test points with NLL > 3, KL(q||p)
and the widths of q(w|x,y) and p(w|x).  With ``--probe`` it then reports the NLL with 200
and 5,000 draws, and p(w|x) on a fine x grid through the region of the worst test points
beside the posterior w of the training points there.  Output: JSON on stdout and
docs/results/modulated_raw/slgp_moons_diagnostic[_probe].json.

    .venv/bin/python benchmarks/slgp_moons_diagnostic.py --steps 10000 --every 2000
    .venv/bin/python benchmarks/slgp_moons_diagnostic.py --steps 4000 --probe
    .venv/bin/python benchmarks/slgp_moons_diagnostic.py --default-fit

``--default-fit`` instead fits the same SLGP with ``fit(X, y, seed=0)`` and no budget (its
default: held-out stopping, :mod:`latentgp.training.holdout`) beside the toy protocol's
SGP (M = 50, Adam lr 0.005, full batch, ``--steps`` steps) and its default fit, and
writes docs/results/modulated_raw/slgp_moons_default.json (test NLL of each, steps,
seconds, the held-out record).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings

import numpy as np
import torch
from machine import stamp

import latentgp as lg
from latentgp.constants import LOG_2PI

HERE = os.path.dirname(os.path.abspath(__file__))
RAW = os.path.join(HERE, "..", "docs", "results", "modulated_raw")


def posterior_terms(m, X, y, K: int = 200) -> dict:
    """Training NLL with w ~ q(w|x,y) (a reconstruction, not a predictive), KL(q||p) and
    the median sds of q(w|x,y) and p(w|x)."""
    with torch.no_grad():
        Lzz = m.prediction_cache()
        Xt = m.standardize_inputs(torch.as_tensor(X))
        yt = ((torch.as_tensor(y) - m.y_mean[0]) / m.y_scale[0])[:, None]
        mu_q, var_q = m._w_post(Xt, yt)
        mu_p, var_p = m._w_prior(Xt)
        g = torch.Generator().manual_seed(1)
        e = torch.randn((K,) + tuple(mu_q.shape), generator=g, dtype=Xt.dtype)
        _, mu_h, var_h = m._h_post(Xt, mu_q + var_q.sqrt() * e)
        e2 = torch.randn(tuple(mu_h.shape), generator=g, dtype=Xt.dtype)
        mf, vf = m.gp_marginals(mu_h + var_h.sqrt() * e2, Lzz)
        v = vf + m.likelihood.variance
        comp = (-0.5 * (LOG_2PI + v.log() + (yt - mf) ** 2 / v)).sum(-1)
        nll = -(torch.logsumexp(comp, 0) - math.log(K)) + m.y_scale[0].log()
        r = var_q / var_p
        kl = 0.5 * (r + (mu_q - mu_p) ** 2 / var_p - 1 - r.log()).sum(-1)
    return {"train_post_w": float(nll.mean()), "kl_q_p": float(kl.mean()),
            "q_sd": float(var_q.sqrt().median()), "p_sd": float(var_p.sqrt().median()),
            "mu_q": mu_q[:, 0].numpy(), "mu_p": mu_p[:, 0].numpy(), "var_p": var_p[:, 0].numpy()}


def default_fits(args, Xs, ytr, Xtes, yte) -> None:
    """SLGP's default fit beside SGP's toy-protocol and default fits (``--default-fit``)."""
    runs = {
        "SLGP default": (lambda: lg.SLGP(latent_dim=1, num_inducing=50, beta=0.01,
                                         num_samples=args.samples), {}),
        "SGP toy protocol": (lambda: lg.SVGP(num_inducing=50),
                             {"max_steps": args.steps, "lr": 0.005,
                              "batch_size": len(ytr)}),
        "SGP default": (lambda: lg.SVGP(num_inducing=50), {}),
    }
    out = {"argv": ["slgp_moons_diagnostic.py", *sys.argv[1:]], "fits": {}}
    for name, (make, options) in runs.items():
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = make().fit(Xs, ytr, seed=0, progress=False, **options)
        seconds = time.perf_counter() - t0
        h = m.history_
        nll = -np.asarray(m.log_predictive_density(Xtes, yte))
        fit = {"test_nll": float(nll.mean()), "n_bad": int((nll > 3).sum()),
               "steps": h.steps, "reason": h.reason, "seconds": seconds,
               "optimizer": h.optimizer, "options": options}
        if h.holdout:
            fit["holdout"] = {k: h.holdout[k] for k in ("rows", "train_rows", "best_step",
                                                        "best_score")}
        out["fits"][name] = fit
        print(json.dumps({name: fit}), flush=True)
    stamp(out)
    os.makedirs(RAW, exist_ok=True)
    with open(os.path.join(RAW, "slgp_moons_default.json"), "w") as fh:
        json.dump(out, fh, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=10000)
    ap.add_argument("--every", type=int, default=2000)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--probe", action="store_true", help="probe p(w|x) after training")
    ap.add_argument("--default-fit", action="store_true",
                    help="SLGP's default fit (no budget) against SGP; see the docstring")
    ap.add_argument("--quick", action="store_true", help="40 steps, a record every 20")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.every = 40, 20
    torch.set_num_threads(1)
    Xtr, ytr, Xte, yte = lg.datasets.make_moons_regression(0)
    s = lg.datasets.Standardizer().fit(Xtr)
    Xs, Xtes = s.transform(Xtr), s.transform(Xte)
    if args.default_fit:
        default_fits(args, Xs, ytr, Xtes, yte)
        return
    torch.manual_seed(0)
    m = lg.SLGP(latent_dim=1, num_inducing=50, beta=0.01, num_samples=args.samples)
    rows = []

    def record(info):
        step = info["step"]
        if step % args.every and step != args.steps:
            return None
        mm = info["model"]
        with torch.no_grad():
            lte = -np.asarray(mm.log_predictive_density(Xtes, yte))
            ltr = -np.asarray(mm.log_predictive_density(Xs, ytr))
        post = posterior_terms(mm, Xs, ytr)
        bad = lte > 3
        row = {"step": step, "test_nll": float(lte.mean()), "test_median": float(np.median(lte)),
               "n_bad": int(bad.sum()), "bad_x": Xte[bad, 0].round(2).tolist(),
               "worst": float(lte.max()), "train_nll": float(ltr.mean()),
               **{k: post[k] for k in ("train_post_w", "kl_q_p", "q_sd", "p_sd")},
               "nu_eps": float(mm.likelihood.variance), "nu0": float(mm.nu0),
               "lengthscale": mm.kernel.lengthscale.detach().flatten().tolist()}
        rows.append(row)
        print(json.dumps(row), flush=True)
        return None

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.fit(Xs, ytr, max_steps=args.steps, lr=0.005, batch_size=len(ytr), seed=0,
              callbacks=[] if args.probe else [record])
    out = {"argv": ["slgp_moons_diagnostic.py", *sys.argv[1:]], "rows": rows}
    if args.probe:
        l200 = -np.asarray(m.log_predictive_density(Xtes, yte))
        m.num_predict_samples = 5000
        l5k = -np.asarray(m.log_predictive_density(Xtes, yte))
        post = posterior_terms(m, Xs, ytr)
        z = (post["mu_q"] - post["mu_p"]) / np.sqrt(post["var_p"])
        xg = np.linspace(0.2, 0.6, 41)
        mg, vg = m.predict_latent_input(s.transform(xg[:, None]))
        near = (Xtr[:, 0] > 0.2) & (Xtr[:, 0] < 0.6)
        out.update(
            nll_K200=float(l200.mean()), nll_K5000=float(l5k.mean()),
            n_bad_K200=int((l200 > 3).sum()), n_bad_K5000=int((l5k > 3).sum()),
            train_z_q_vs_p={"median_abs": float(np.median(abs(z))), "max_abs": float(abs(z).max())},
            grid=np.c_[xg, mg[:, 0], np.sqrt(vg[:, 0])].tolist(),  # x, mean, sd of p(w|x)
            # x, y, posterior mean of w, prior mean of w at the training points near it
            train_near=np.c_[Xtr[near, 0], ytr[near], post["mu_q"][near],
                             post["mu_p"][near]].tolist(),
        )
        print(json.dumps({k: v for k, v in out.items() if k.startswith(("nll", "n_"))}))
    stamp(out)
    name = "slgp_moons_diagnostic" + ("_probe" if args.probe else "")
    os.makedirs(RAW, exist_ok=True)
    with open(os.path.join(RAW, f"{name}.json"), "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
