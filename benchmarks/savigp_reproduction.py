"""Reproduction of SAVIGP (Bonilla, Krauth & Dezfouli), Table 1 and figures 1-5 and 12,
on the paper's own data files and splits, at a budget a shared 2-core CPU can afford.

    .venv/bin/python benchmarks/savigp_reproduction.py [--quick] [--only boston,mining,...]
        [--splits N] [--steps N]

Each experiment writes ``docs/results/savigp_raw/<name>.json`` (and PNG figures next to
``docs/results/savigp.md``); ``--page`` rebuilds ``docs/results/savigp.md`` from the JSON
files that exist, so experiments can run as separate processes.
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
POSTERIORS = ("fg", "mog1", "mog2")
SMALL = {
    # name: (dataset, likelihood factory, task, splits used)
    "boston": ("savigp/boston_housing", lambda: "gaussian", "regression", (1, 2, 3)),
    "creep": ("savigp/creep", lambda: WarpedGaussian(3), "regression", (1, 2)),
    "abalone": ("savigp/abalone", lambda: WarpedGaussian(3), "regression", (5, 6)),
    "cancer": ("savigp/wisconsin_cancer", lambda: Bernoulli(), "binary", (1, 2, 3)),
    "usps": ("savigp/USPS", lambda: Softmax(3), "multiclass", (1,)),
}


def _standardise(Xtr, Xte):
    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd = np.where(sd > 0, sd, 1.0)
    return (Xtr - mu) / sd, (Xte - mu) / sd


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


def _save(name, payload):
    RAW.mkdir(parents=True, exist_ok=True)
    (RAW / f"{name}.json").write_text(json.dumps(payload, indent=1))


# ============================================================== small-scale grid ==
def run_small(name, args):
    ds_name, lik, task, splits = SMALL[name]
    splits = splits[: args.splits] if args.splits else splits
    rows = []
    for split in splits:
        ds = lg.datasets.load(ds_name, split=split)
        Xtr, Xte = _standardise(ds.X_train, ds.X_test)
        ytr, yte = ds.y_train, ds.y_test
        perm = np.random.default_rng(split).permutation(len(Xtr))  # nested inducing subsets
        for sf in SFS:
            for post in POSTERIORS:
                t0 = time.time()
                M = max(1, math.ceil(sf * len(Xtr)))
                kw = {"dense": True} if sf == 1 else {"Z": Xtr[perm[:M]]}
                model = lg.SAVIGP(
                    likelihood=lik(),
                    kernel=lg.kernels.RBF(ard=False),
                    posterior=post,
                    num_samples=args.samples,
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
        rows += _baselines(name, task, Xtr, ytr, Xte, yte, split, args)
        _save(name, {"rows": rows, "args": vars(args)})
    return rows


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
def run_mining(args):
    ds = lg.datasets.load("savigp/mining")
    X, y = ds.X_train, ds.y_train
    years = 1851.2 + X[:, 0] / 365.25
    res = {"years": years.tolist(), "counts": y.tolist(), "fits": []}
    for sf, post in ((0.1, "fg"), (0.5, "fg"), (0.5, "mog1")):
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
            num_samples=args.samples,
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
        print("mining", sf, post, time.time() - t0, flush=True)
    _save("mining", res)


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
        num_samples=args.samples,
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
            posterior="fg",
            prior_mean=seis.PRIOR_MEAN,
            prior_variance=seis.PRIOR_VARIANCE,
            kernel=lg.kernels.RBF(lengthscale=1.0, ard=False),
            learn_hyperparameters=False,
            init_cov_scale=1e-3,
            num_samples=args.samples,
            estimator=est,
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


def _mining_plot(res):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.5))
    yrs = np.array(res["years"])
    for fit, c in zip(res["fits"], ("tab:blue", "tab:orange", "tab:green"), strict=False):
        lab = f"{fit['posterior'].upper()} SF={fit['sf']:g}"
        ax.plot(yrs, fit["mean"], color=c, label=lab)
        ax.fill_between(yrs, fit["lo"], fit["hi"], color=c, alpha=0.15)
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
        f"| configuration | M | {keys[0].upper()} (mean ± sd) | {keys[1].upper()} "
        "(mean ± sd) | s/run |",
        "|---|---|---|---|---|",
    ]
    for post in POSTERIORS:
        for sf in SFS:
            rs = [r for r in rows if r.get("posterior") == post and r.get("sf") == sf]
            if not rs:
                continue
            a, b = np.array([r[keys[0]] for r in rs]), np.array([r[keys[1]] for r in rs])
            sec = np.mean([r["seconds"] for r in rs])
            lines.append(
                f"| {post.upper()} SF={sf:g} | {rs[0]['M']} | {a.mean():.4f} ± "
                f"{a.std():.4f} | {b.mean():.4f} ± {b.std():.4f} | {sec:.0f} |"
            )
    for meth in sorted({r["method"] for r in rows if "method" in r}):
        rs = [r for r in rows if r.get("method") == meth]
        a, b = np.array([r[keys[0]] for r in rs]), np.array([r[keys[1]] for r in rs])
        lines.append(
            f"| {meth} | all | {a.mean():.4f} ± {a.std():.4f} | {b.mean():.4f} ± {b.std():.4f} | |"
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
    return parts, extra


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="boston,creep,abalone,cancer,usps,mining,sarcos,seismic")
    ap.add_argument("--splits", type=int, default=0, help="limit the number of splits")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--sarcos-m", type=int, default=100)
    ap.add_argument("--sarcos-steps", type=int, default=1500)
    ap.add_argument("--seismic-adam-steps", type=int, default=1500)
    ap.add_argument("--page", action="store_true", help="only rebuild plots from JSON")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.quick:
        args.splits, args.steps, args.samples = 1, 20, 10
        args.sarcos_steps, args.seismic_adam_steps = 50, 50
    if not args.page:
        for name in args.only.split(","):
            if name in SMALL:
                run_small(name, args)
            elif name == "mining":
                run_mining(args)
            elif name == "sarcos":
                run_sarcos(args)
            elif name == "seismic":
                run_seismic(args)
            else:
                raise SystemExit(f"unknown experiment {name!r}")
    parts, extra = build_page()
    facts = {
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }
    (RAW / "tables.md").write_text(
        "\n\n".join(f"### {n}\n\n{_summary_table(p['rows'], t)}" for n, p, t in parts if p)
        + f"\n\nmachine: {json.dumps(facts)}\n"
    )


if __name__ == "__main__":
    main()
