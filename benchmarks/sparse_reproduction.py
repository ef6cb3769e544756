"""Reproduction of seed 004 ("Scaling Gaussian Processes"): SoR/DIC, DTC, FITC, VFE.

Part 1, the blog's 1-D toy (2,000 noisy observations, x ~ N(0, 1), lg.datasets.make_snelson):
a figure per method (mean, 2-sigma band, learned inducing inputs) for M = 5..50, and a
results figure of the Nyström error and each method's test RMSE/NLPD against M.

Part 2, UCI regression with the fixed splits of lg.datasets.load("uci/<name>", split=k):
RMSE and NLPD (original units) of exact GP (N <= 5000), SoR, DTC, FITC, VFE, SVGP and GPflow
SGPR / GPRFITC (subprocess in .venv-gpflow) with the same inputs, initial inducing inputs
and initial hyperparameters.  Results are cached in docs/results/sparse_uci.jsonl, so an
interrupted run resumes; the page docs/results/sparse.md is rewritten from the cache.

Part 3 (``--part evalspeed``): seconds per full-data objective + gradient evaluation of VFE
and FITC against GPflow SGPR / GPRFITC on split 0 of kin40k and pol (M = 256, 512),
alternating the libraries; results in docs/results/sparse_eval_speed.json.

    nice -n 10 .venv/bin/python benchmarks/sparse_reproduction.py [--quick]
        [--part all|toy|toyrandom|uci|bign|evalspeed|page] [--datasets housing,energy]
        [--splits 0,1,2] [--inducing 256] [--no-gpflow] [--lbfgs-steps 100]
        [--svgp-steps 300]
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from machine import cpu_model, package_version, provenance, stamp

import latentgp as lg
from latentgp.inducing import kmeans_pp
from latentgp.kernels.nystrom import nystrom_error

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "results"
CACHE = OUT / "sparse_uci.jsonl"
TOY_JSON = OUT / "sparse_toy.json"
GPFLOW_PY = ROOT / ".venv-gpflow" / "bin" / "python"
RUNNER = ROOT / "benchmarks" / "gpflow_sparse_runner.py"
METHODS = ["sor", "dtc", "fitc", "vfe"]
LABEL = {"sor": "SoR (DIC)", "dtc": "DTC", "fitc": "FITC", "vfe": "VFE"}
UCI_ALL = ["kin40k", "protein", "elevators", "pol", "bike", "energy", "concrete", "wine", "housing"]

# budgets (documented on the page)
LBFGS_STEPS = LBFGS_STEPS_DEFAULT = 100  # collapsed methods, exact GP and GPflow (maxiter)
SVGP_STEPS = SVGP_STEPS_DEFAULT = 300  # Adam steps, batch min(N, 1024), lr 0.02
SVGP_LR = 0.02
EXACT_MAX_N = 5000
EXACT_TOY_STEPS = 40  # L-BFGS steps of the exact GP reference on the 2,000-point toy

if "LATENTGP_DATA" not in os.environ and (ROOT.parent / "shared" / "data").exists():
    os.environ["LATENTGP_DATA"] = str(ROOT.parent / "shared" / "data")


# ======================================================================= shared bits
def _set_hypers(model, lengthscale, variance, noise):
    inv = lg.parameters.inv_softplus
    model.kernel.lengthscale = lengthscale  # in data units (stored per column unit)
    model.kernel.variance = variance
    lik = model.likelihood
    with torch.no_grad():
        lik.raw_variance.copy_(inv(torch.as_tensor(noise - lik.min_variance)))


def _metrics(model, X, y, y_scale=1.0):
    """RMSE and NLPD in original units from standardised predictions."""
    mean, _ = model.predict_y(X)
    lpd = model.log_predictive_density(X, y)
    rmse = float(np.sqrt(np.mean((mean - y) ** 2))) * y_scale
    return rmse, float(-np.mean(lpd)) + math.log(y_scale)


def machine_facts() -> dict:
    return {
        "cores": os.cpu_count(),
        "cpu": cpu_model(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "dtype": "float64",
        "load_average": os.getloadavg(),
    }


# ========================================================================= part 1: toy
def run_toy(quick: bool) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    X, y = lg.datasets.make_snelson(2000, seed=0)
    Xte, yte = lg.datasets.make_snelson(1000, seed=1)
    grid = np.linspace(-3.5, 3.5, 400)[:, None]
    steps = 10 if quick else 200
    panel_M = [5, 10, 20, 30, 50]
    curve_M = [5, 10, 20, 30, 50] if quick else [5, 10, 15, 20, 30, 40, 50]
    t0 = time.perf_counter()
    exact = lg.ExactGP().fit(X, y, max_steps=min(steps, EXACT_TOY_STEPS))
    ex_rmse, ex_nlpd = _metrics(exact, Xte, yte)
    res = {
        "exact": {
            "rmse": ex_rmse,
            "nlpd": ex_nlpd,
            "lml": exact.log_marginal_likelihood(),
            "seconds": time.perf_counter() - t0,
        },
        "methods": {},
        "nystrom": {},
        "steps": steps,
    }
    em, ev = exact.predict_y(grid)
    # Nystrom error at the exact GP's hyperparameters, Z = k-means++ or linspace
    Xs = X[:1000]
    for M in curve_M:
        Zk = kmeans_pp(torch.as_tensor(Xs), M, seed=0).numpy()
        Zl = np.linspace(X.min(), X.max(), M)[:, None]
        res["nystrom"][M] = {
            "kmeans": nystrom_error(exact.kernel, Xs, Zk),
            "linspace": nystrom_error(exact.kernel, Xs, Zl),
        }
    fits = {}
    for method in METHODS:
        res["methods"][method] = {}
        for M in sorted(set(panel_M) | set(curve_M)):
            Z0 = np.linspace(X.min(), X.max(), M)[:, None]  # the blog's linspaced Z
            t0 = time.perf_counter()
            m = lg.SparseGP(method=method, Z=Z0).fit(X, y, max_steps=steps)
            sec = time.perf_counter() - t0
            rmse, nlpd = _metrics(m, Xte, yte)
            res["methods"][method][M] = {
                "rmse": rmse,
                "nlpd": nlpd,
                "objective": m.log_marginal_likelihood(),
                "seconds": sec,
                "steps": m.history_.steps,
                "noise": float(m.likelihood.variance.detach()) * float(m.y_scale[0]) ** 2,
            }
            if M in panel_M:
                fits[(method, M)] = (m.predict_y(grid), m.Z.detach().numpy()[:, 0])
            print(f"toy {method} M={M}: rmse {rmse:.4f} nlpd {nlpd:.4f} ({sec:.1f}s)", flush=True)

    order = np.argsort(X[:, 0])
    for method in METHODS:
        fig, axes = plt.subplots(1, len(panel_M), figsize=(4 * len(panel_M), 3.4), sharey=True)
        for ax, M in zip(axes, panel_M, strict=True):
            (mu, var), Z = fits[(method, M)]
            ax.plot(X[order, 0], y[order], ".", ms=1.5, color="0.7", label="data")
            ax.plot(grid[:, 0], em, "k--", lw=0.8, label="exact GP mean")
            ax.plot(grid[:, 0], mu, color="C0", label=f"{LABEL[method]} mean")
            sd = np.sqrt(var)
            ax.fill_between(
                grid[:, 0], mu - 2 * sd, mu + 2 * sd, color="C0", alpha=0.25, label="±2σ (y)"
            )
            ax.plot(Z, np.full_like(Z, -2.4), "|", color="k", ms=10, label="inducing inputs")
            ax.set_title(f"{LABEL[method]}, M = {M}")
            ax.set_ylim(-2.6, 2.6)
            ax.set_xlim(-3.5, 3.5)
        axes[0].legend(loc="upper left", fontsize=7)
        fig.tight_layout()
        fig.savefig(OUT / f"sparse_toy_{method}.png", dpi=90)
        plt.close(fig)

    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
    Ms = curve_M
    ax = axes[0]
    for init, style in (("kmeans", "-o"), ("linspace", "-s")):
        ax.semilogy(
            Ms,
            [res["nystrom"][M][init]["relative_frobenius"] for M in Ms],
            style,
            label=f"Nyström, Z {init} (Frobenius)",
        )
        ax.semilogy(
            Ms,
            [res["nystrom"][M][init]["relative_trace"] for M in Ms],
            style,
            alpha=0.5,
            label=f"Nyström, Z {init} (trace)",
        )
    ax.semilogy(
        Ms,
        [
            res["nystrom"][M]["kmeans"]["best_frobenius"]
            / res["nystrom"][M]["kmeans"]["frobenius"]
            * res["nystrom"][M]["kmeans"]["relative_frobenius"]
            for M in Ms
        ],
        "k--",
        label="best rank-M (Frobenius)",
    )
    ax.set_xlabel("M")
    ax.set_ylabel("relative error of Kxx")
    ax.set_title("Nyström error (1,000 toy inputs, exact-GP hypers)")
    ax.legend(fontsize=7)
    for ax, key in ((axes[1], "rmse"), (axes[2], "nlpd")):
        for method in METHODS:
            ax.plot(Ms, [res["methods"][method][M][key] for M in Ms], "-o", label=LABEL[method])
        ax.axhline(res["exact"][key], color="k", ls="--", label="exact GP")
        ax.set_xlabel("M")
        ax.set_ylabel(f"test {key.upper()}")
        ax.set_title(f"toy: test {key.upper()} (1,000 fresh points)")
        if key == "nlpd":
            ax.set_ylim(None, min(ax.get_ylim()[1], res["exact"]["nlpd"] + 1.0))
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT / "sparse_toy_vs_M.png", dpi=90)
    plt.close(fig)
    res["facts"] = machine_facts()
    TOY_JSON.write_text(json.dumps(stamp(res), indent=1, default=float))
    return res


def run_toy_random(quick: bool) -> dict:
    """The blog's second toy experiment: a fixed random Z, some of it far from the data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    X, y = lg.datasets.make_snelson(2000, seed=0)
    Xte, yte = lg.datasets.make_snelson(1000, seed=1)
    grid = np.linspace(-4.5, 4.5, 400)[:, None]
    Z = np.sort(np.random.default_rng(3).uniform(-4, 4, 12))[:, None]
    steps = 10 if quick else 200
    out = {"Z": Z[:, 0].tolist(), "methods": {}}
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.4), sharey=True)
    order = np.argsort(X[:, 0])
    for ax, method in zip(axes, METHODS, strict=True):
        m = lg.SparseGP(method=method, Z=Z, learn_inducing=False).fit(X, y, max_steps=steps)
        rmse, nlpd = _metrics(m, Xte, yte)
        out["methods"][method] = {"rmse": rmse, "nlpd": nlpd, "steps": m.history_.steps}
        mu, var = m.predict_y(grid)
        sd = np.sqrt(var)
        ax.plot(X[order, 0], y[order], ".", ms=1.5, color="0.7")
        ax.plot(grid[:, 0], mu, color="C0")
        ax.fill_between(grid[:, 0], mu - 2 * sd, mu + 2 * sd, color="C0", alpha=0.25)
        ax.plot(Z[:, 0], np.full(len(Z), -2.4), "|", color="k", ms=10)
        ax.set_title(f"{LABEL[method]}, 12 fixed random Z")
        ax.set_ylim(-2.6, 2.6)
        print(f"toy random Z {method}: rmse {rmse:.4f} nlpd {nlpd:.4f}", flush=True)
    fig.tight_layout()
    fig.savefig(OUT / "sparse_toy_randomZ.png", dpi=90)
    plt.close(fig)
    (OUT / "sparse_toy_random.json").write_text(json.dumps(stamp(out), indent=1))
    return out


def run_big_n() -> None:
    """Memory check: FITC on N = 10^6 points (D = 2, M = 64), 2 L-BFGS steps + statistics."""
    import resource

    rng = np.random.default_rng(0)
    N, M = 1_000_000, 64
    X = rng.standard_normal((N, 2))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(N)
    m = lg.SparseGP(method="fitc", num_inducing=M)
    # N M = 6.4e7 is just below the default threshold (2^26) since session 10: force the
    # checkpointed chunks, whose O(chunk M) memory is what this part checks
    m.checkpoint_min_elements = 0
    t = time.time()
    m.fit(X, y, max_steps=2)
    print(
        f"fit 2 L-BFGS steps + set_data: {time.time() - t:.1f}s", "obj", m.log_marginal_likelihood()
    )
    print("peak RSS MB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


# ========================================================================= part 2: UCI
def _load_cache() -> list[dict]:
    if not CACHE.exists():
        return []
    return [json.loads(line) for line in CACHE.read_text().splitlines() if line.strip()]


@functools.cache
def gpflow_version() -> str | None:
    """GPflow's version in ``.venv-gpflow`` (None without that environment)."""
    return package_version("gpflow", str(GPFLOW_PY)) if GPFLOW_PY.exists() else None


def _append(rec: dict) -> None:
    """Append one record, with its provenance (and GPflow's version on GPflow rows)."""
    peers = {"gpflow": gpflow_version()} if rec.get("model", "").startswith("gpflow") else None
    rec = {**rec, "provenance": provenance(peers=peers)}
    with open(CACHE, "a") as fh:
        fh.write(json.dumps(rec) + "\n")
    print(json.dumps(rec), flush=True)


def budget_of(rec: dict) -> int:
    """The step budget of a cached record: ``max_steps`` (added with --lbfgs-steps /
    --svgp-steps); records written before that field existed used the defaults."""
    if "max_steps" in rec:
        return int(rec["max_steps"])
    return SVGP_STEPS_DEFAULT if rec["model"] == "svgp" else LBFGS_STEPS_DEFAULT


def run_uci(datasets: list[str], splits: list[int], Ms: list[int], gpflow: bool) -> None:
    done = {(r["dataset"], r["split"], r["M"], r["model"], budget_of(r)) for r in _load_cache()}

    def _budget(model_name: str) -> int:
        return SVGP_STEPS if model_name == "svgp" else LBFGS_STEPS

    for name in datasets:
        for split in splits:
            ds = lg.datasets.load(f"uci/{name}", split=split)
            sx = lg.datasets.Standardizer().fit(ds.X_train)
            ym, ysd = ds.y_train.mean(), ds.y_train.std()
            Xtr, Xte = sx.transform(ds.X_train), sx.transform(ds.X_test)
            ytr, yte = (ds.y_train - ym) / ysd, (ds.y_test - ym) / ysd
            N, D = Xtr.shape
            init = {"lengthscale": math.sqrt(D), "variance": 1.0, "noise": 0.1}
            base = {"dataset": name, "split": split, "N": N, "D": D}
            data = {"Xtr": Xtr, "ytr": ytr, "Xte": Xte, "yte": yte, "ysd": ysd, "init": init}

            def record(model_name, M, fitfn, key=(name, split), base=base, data=data, shared=None):
                """Fit, score and cache one model.  ``shared = (source name, model,
                seconds)``: the model is derived from that fit (DTC from SoR, which has the
                same objective), and its time is the source's plus the derivation."""
                if (*key, M, model_name, _budget(model_name)) in done:
                    return None
                t0 = time.perf_counter()
                try:
                    m = fitfn()
                    sec = time.perf_counter() - t0 + (shared[2] if shared else 0.0)
                    rmse, nlpd = _metrics(m, data["Xte"], data["yte"], data["ysd"])
                    rec = {
                        **base,
                        "M": M,
                        "model": model_name,
                        "max_steps": _budget(model_name),
                        "rmse": rmse,
                        "nlpd": nlpd,
                        "seconds": sec,
                        "steps": m.history_.steps,
                    }
                    if shared:
                        rec["shared_fit"] = shared[0]
                except Exception as err:  # noqa: BLE001 - an honest failure is a result
                    rec = {
                        **base,
                        "M": M,
                        "model": model_name,
                        "max_steps": _budget(model_name),
                        "error": repr(err)[:300],
                    }
                _append(rec)
                return (m, sec) if "error" not in rec else None

            if N <= EXACT_MAX_N:
                record("exact", 0, functools.partial(_fit_exact, data))
            for M in Ms:
                if M >= N:
                    continue
                Z0 = kmeans_pp(torch.as_tensor(Xtr), M, seed=split).numpy()
                sor = None
                for method in METHODS:
                    if method == "dtc" and sor is not None:
                        # DTC maximises SoR's objective (same approximate evidence; the
                        # tests check it): it is SoR's fit with DTC's predictive variance
                        record(
                            method,
                            M,
                            functools.partial(_dtc_from_sor, data, sor[0]),
                            shared=("sor", *sor),
                        )
                        continue
                    out = record(method, M, functools.partial(_fit_sparse, data, method, Z0))
                    if method == "sor":
                        sor = out
                record("svgp", M, functools.partial(_fit_svgp, data, Z0, split))
                if gpflow and not all(
                    (name, split, M, f"gpflow-{k}", LBFGS_STEPS) in done
                    for k in ("SGPR", "GPRFITC")
                ):
                    for rec in _run_gpflow(Xtr, ytr, Xte, yte, Z0, init):
                        if "error" not in rec:
                            rec["rmse"] *= ysd
                            rec["nlpd"] += math.log(ysd)
                        _append({**base, "M": M, "max_steps": LBFGS_STEPS, **rec})


# ============================================================ part 3: evaluation speed
#: (set, M) of --part evalspeed: split 0's training set, standardised as in part 2
EVAL_CASES = [("kin40k", 256), ("kin40k", 512), ("pol", 256), ("pol", 512)]
EVAL_REPS, EVAL_ROUNDS = 5, 3


def _time_ours(method: str, Xtr, ytr, Z0, init, reps: int) -> list[float]:
    """Seconds per full-data objective + gradient evaluation of latentgp's SparseGP."""
    m = lg.SparseGP(method=method, Z=Z0, normalize_y=False)
    m.fit(Xtr[:500], ytr[:500], max_steps=1)  # build on a few rows, then reset
    _set_hypers(m, **init)
    m.Z = Z0
    X = torch.as_tensor(Xtr, dtype=m.dtype_)
    y = torch.as_tensor(ytr, dtype=X.dtype)
    N = X.shape[0]

    def evaluation():
        m.zero_grad(set_to_none=True)
        m.objective(X, y, N).backward()

    evaluation()  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        evaluation()
        times.append(time.perf_counter() - t0)
    return times


def run_eval_speed(quick: bool) -> None:
    """Per-evaluation time of VFE and FITC, latentgp against GPflow, interleaved."""
    cases = [("housing", 64)] if quick else EVAL_CASES
    reps, rounds = (2, 1) if quick else (EVAL_REPS, EVAL_ROUNDS)
    out = {"facts": machine_facts(), "reps": reps, "rounds": rounds, "cases": []}
    for name, M in cases:
        ds = lg.datasets.load(f"uci/{name}", split=0)
        sx = lg.datasets.Standardizer().fit(ds.X_train)
        Xtr = sx.transform(ds.X_train)
        ytr = (ds.y_train - ds.y_train.mean()) / ds.y_train.std()
        N, D = Xtr.shape
        init = {"lengthscale": math.sqrt(D), "variance": 1.0, "noise": 0.1}
        Z0 = kmeans_pp(torch.as_tensor(Xtr), M, seed=0).numpy()
        times: dict[str, list[float]] = {}
        for _ in range(rounds):  # alternate the libraries so that both see the same load
            for method in ("vfe", "fitc"):
                times.setdefault(method, []).extend(_time_ours(method, Xtr, ytr, Z0, init, reps))
            for rec in _gpflow_eval_times(Xtr, ytr, Z0, init, reps):
                times.setdefault(rec["model"], []).extend(rec.get("seconds", []))
        case = {"dataset": name, "N": N, "D": D, "M": M, "seconds": times}
        print(json.dumps(case), flush=True)
        out["cases"].append(case)
    out["load_average_after"] = list(os.getloadavg())
    stamp(out, peers={"gpflow": gpflow_version()})
    (OUT / "sparse_eval_speed.json").write_text(json.dumps(out, indent=1))


def _gpflow_eval_times(Xtr, ytr, Z0, init, reps: int) -> list[dict]:
    if not GPFLOW_PY.exists():
        return []
    proc = _call_gpflow_runner(["--eval"], [str(reps)], Xtr, ytr, Z0, init)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def _eval_speed_section() -> list[str]:
    path = OUT / "sparse_eval_speed.json"
    if not path.exists():
        return []
    res = json.loads(path.read_text())
    f = res["facts"]
    lines = [
        "## 3. One objective + gradient evaluation: latentgp against GPflow",
        "",
        f"`--part evalspeed`: the full-data objective and its gradient (all hyperparameters "
        f"and Z), timed after one warm-up call; GPflow's inside one compiled `tf.function`. "
        f"Split 0's standardised training set, k-means++ Z, the initial hyperparameters of "
        f"part 2. {res['rounds']} rounds of {res['reps']} evaluations per library, the "
        "libraries alternating between rounds so that both see the same machine load; "
        f"median (min) seconds. One thread each, {f['cores']} cores, torch {f['torch']}; "
        "load average after the run "
        f"{', '.join(f'{v:.1f}' for v in res['load_average_after'])}.",
        "",
        "| set | N | D | M | VFE | GPflow SGPR | ratio | FITC | GPflow GPRFITC | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(ts):
        return f"{np.median(ts):.3f} ({min(ts):.3f})" if ts else "–"

    def ratio(a, b):
        return f"{np.median(a) / np.median(b):.2f}" if a and b else "–"

    for c in res["cases"]:
        t = c["seconds"]
        v, sg = t.get("vfe", []), t.get("gpflow-SGPR", [])
        fi, gf = t.get("fitc", []), t.get("gpflow-GPRFITC", [])
        lines.append(
            f"| {c['dataset']} | {c['N']} | {c['D']} | {c['M']} | {cell(v)} | {cell(sg)} | "
            f"{ratio(v, sg)} | {cell(fi)} | {cell(gf)} | {ratio(fi, gf)} |"
        )
    return lines + ["", "Ratio: latentgp's median over GPflow's (below 1: latentgp faster).", ""]


def _fit_exact(d: dict):
    m = lg.ExactGP(normalize_y=False).fit(d["Xtr"], d["ytr"], max_steps=1)
    _set_hypers(m, **d["init"])
    return m.fit(d["Xtr"], d["ytr"], max_steps=LBFGS_STEPS)


def _fit_sparse(d: dict, method: str, Z0: np.ndarray):
    m = lg.SparseGP(method=method, Z=Z0, normalize_y=False)
    m.fit(d["Xtr"], d["ytr"], max_steps=1)  # build, then reset to the shared initial values
    _set_hypers(m, **d["init"])
    m.Z = Z0
    return m.fit(d["Xtr"], d["ytr"], max_steps=LBFGS_STEPS)


def _dtc_from_sor(d: dict, sor_model):
    """A copy of a fitted SoR model turned into DTC (same hyperparameters and Z)."""
    m = copy.deepcopy(sor_model)
    m.method = "dtc"
    return m.set_data(d["Xtr"], d["ytr"])


def _fit_svgp(d: dict, Z0: np.ndarray, seed: int):
    m = lg.SVGP(Z=Z0, normalize_y=False)
    B = min(d["Xtr"].shape[0], 1024)
    m.fit(d["Xtr"], d["ytr"], max_steps=1, batch_size=B)
    _set_hypers(m, **d["init"])
    m.Z = Z0
    return m.fit(d["Xtr"], d["ytr"], max_steps=SVGP_STEPS, batch_size=B, lr=SVGP_LR, seed=seed)


def _call_gpflow_runner(before: list[str], after: list[str], Xtr, ytr, Z0, init, **test):
    """Run gpflow_sparse_runner.py in .venv-gpflow on the data, initial Z and
    hyperparameters, saved to a temporary .npz (``test``: X_test / y_test arrays)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.npz")
        np.savez(
            path,
            X_train=Xtr,
            y_train=ytr,
            Z=Z0,
            lengthscale=np.full(Xtr.shape[1], init["lengthscale"]),
            variance=init["variance"],
            noise=init["noise"],
            **test,
        )
        env = {
            **os.environ,
            "TF_USE_LEGACY_KERAS": "1",
            "TF_CPP_MIN_LOG_LEVEL": "3",
            "OMP_NUM_THREADS": "1",
        }
        return subprocess.run(
            [str(GPFLOW_PY), str(RUNNER), *before, path, *after],
            capture_output=True,
            text=True,
            env=env,
            timeout=3600,
        )


def _run_gpflow(Xtr, ytr, Xte, yte, Z0, init) -> list[dict]:
    if not GPFLOW_PY.exists():
        return [{"model": "gpflow-SGPR", "error": "no .venv-gpflow"}]
    proc = _call_gpflow_runner([], [str(LBFGS_STEPS)], Xtr, ytr, Z0, init, X_test=Xte, y_test=yte)
    out = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or len(out) < 2:
        out.append({"model": "gpflow-error", "error": proc.stderr[-300:]})
    return out


# ============================================================================== page
SEED_NOTE = (
    "The seed (a blog article) reports **no numbers**: only qualitative plots of its toy "
    "for SoR/DIC, DTC and FITC (the text stops before the VFE plot). Its qualitative "
    "claims are the reference for part 1; for part 2 the peer is GPflow (SGPR = VFE, "
    "GPRFITC = FITC) run on the same splits in the same run."
)


#: Why the UCI part is smaller than asked (printed above the coverage table).
SMALLER_THAN_ASKED = (
    "**Smaller than asked.** The issue asked for nine sets x 5 splits x M in {256, 512}. "
    "Splits 0-2 of energy, concrete, wine and housing ran while the machine's two cores "
    "were shared with many other processes (load average 10-20; one collapsed fit on "
    "concrete, N = 927, M = 256, took 70-120 s of wall time); splits 3-4 and everything "
    "else later under lighter load. The large sets (elevators, pol, bike, kin40k, "
    "protein) and M = 512 ran on 23 Nov 2026, one process at a time under `nice -n 15` "
    "with one thread, beside the lead engineer's test runs (load average 1.7-3.0 on 2 "
    "cores, from `uptime`). Before them one objective + gradient evaluation of VFE at M = "
    "256 (split 0) was timed: 1.2 s on elevators, 0.8 s pol, 1.1 s bike, 3.2 s kin40k, "
    "3.6 s protein; torch's L-BFGS used about 2-2.5 evaluations per iteration (inferred "
    "from the fit times), so one 100-iteration fit took 200-280 s on elevators/pol/bike "
    "(20 min per set with SVGP and GPflow) and would have taken about 13 min per method "
    "on kin40k and protein (about an hour per set with GPflow). **kin40k and protein "
    "therefore first ran with 30 L-BFGS iterations** (`--lbfgs-steps 30`, for latentgp "
    "and GPflow alike; SVGP kept 300 Adam steps): those numbers are from unconverged fits "
    "and are not comparable with published results; session 11 re-ran them at 100 "
    "iterations (below), and the tables keep both budgets as separate rows. The records "
    "of 23 Nov were made with the library as of commit ee7e438, before lengthscales and "
    "inducing inputs were stored in "
    "units of the input columns (model-file format 2); the inputs here are standardised, "
    "so those units are 1 to within 1/(2N) and the fits are unaffected beyond that. "
    "**Later records** (split 1 of elevators, pol and bike, 23 Nov 2026, session 5) were "
    "made "
    "with the faster collapsed-GP backward pass (three M x M x N products per evaluation "
    "instead of five, same values) and with DTC derived from SoR's fit, as a third "
    "single-threaded process beside two other benchmark processes (load average about 3 "
    "on 2 cores): their times are comparable with GPflow's in the same run, not with the "
    "earlier records'. **Session-9 records** (24 Nov 2026: splits 2-4 of elevators "
    "with GPflow, M = 512 on splits 1-4 of the small sets, pol and bike splits 2-4) ran as one "
    "of three or four processes on the 2 cores, with the current library: one VFE "
    "objective + gradient evaluation at M = 256 on kin40k now takes about 0.75 s under "
    "load, against 3.2 s when the first records were made, so one elevators split "
    "(all models and GPflow) took 6-8 minutes. **Session-10 records** (24 Nov 2026: "
    "kin40k and protein splits 1-4 at M = 256, M = 512 on the large sets) ran as two "
    "single-threaded processes on the 2 cores (three while the evaluation-speed part and "
    "a test run went on), with the library changes named above the run commands: one "
    "M = 512 split with all models and GPflow took about 10 minutes on pol and bike, 12 "
    "on elevators, 11 on kin40k and 12 on protein (30 iterations). **Session-11 records** "
    "(24 Nov 2026): kin40k and protein at M = 256 again, all 5 splits, with 100 L-BFGS "
    "iterations (the budget of the other sets) for latentgp and GPflow, as two "
    "single-threaded processes on the 2 cores (a test run beside them for 4 minutes); "
    "one split with all collapsed models and GPflow took 6-7 minutes. SVGP was not "
    "re-run (its budget, 300 Adam steps, is unchanged). M = 512 at 100 iterations "
    "followed, one process per set: an M = 512 split took about 22 minutes on kin40k and "
    "28 on protein, so the session ended with splits 0-2 of protein and 0-3 of kin40k "
    "(kin40k split 3 ran alone at the end); the 30-iteration records of all 5 splits "
    "stay in the tables as their own rows."
)

#: What was not run (printed below the coverage table).
NOT_RUN = (
    "**Not run:** the exact GP for N > 5000 (all large sets). Housing has "
    "N_train = 456, so M = 512 >= N is skipped (a 'sparse' model with more inducing inputs "
    "than data)."
)

#: Reading of the UCI tables of this run (written after the run).
UCI_OBSERVATIONS: list[str] = [
    "### Reading the UCI tables",
    "",
    "Figures are means over the 5 splits unless a bullet says otherwise (rewritten in "
    "session 10, when M = 256 had all 5 splits of all nine sets).",
    "",
    "- **latentgp VFE = GPflow SGPR** (two independent implementations, same init and "
    "budget): on the four small sets (20 splits at M = 256) test RMSE agrees to within "
    "0.03 on 18 of 20 splits (the two others: concrete split 3, 4.094 / 4.145, and split "
    "2, 4.624 / 4.715) and NLPD to within 0.035 on all; on the large sets RMSE 0.093 / "
    "0.093 (elevators), 5.96 / 6.00 (pol), 0.071 / 0.071 (bike), 0.195 / 0.196 (kin40k) "
    "and 0.507 / 0.507 (protein; both at 100 iterations, as everywhere below unless said "
    "otherwise), NLPD within 0.005 on each. "
    "FITC agrees less "
    "closely with GPRFITC (at M = 256, RMSE up to 0.26 apart on concrete split 0, NLPD up "
    "to 0.33 on energy split 4): FITC's objective has several optima and 100 iterations "
    "stop the two optimisers in different places.",
    "- **VFE tracks the exact GP** wherever the exact GP was run (the four small sets, 5 "
    "splits): RMSE 0.468 vs 0.452 (energy), 4.455 vs 4.438 (concrete), 0.462 vs 0.459 "
    "(wine), 2.717 vs 2.644 (housing), each within one split-to-split standard deviation.",
    "- **SoR and DTC overfit at M = 256 on the small sets** (N = 456-1440, so M is a "
    "large fraction of N and the learned Z give a very flexible degenerate model): RMSE "
    "50% above the exact GP on housing (3.97 vs 2.64), 43% on wine (0.658 vs 0.459) and "
    "26% on concrete (5.60 vs 4.44), identical for both (same objective, same mean). "
    "SoR's NLPD is catastrophic where test inputs leave the span of Z (36.9 on housing, "
    "6.5 on wine), because its predictive variance collapses to the noise; DTC's extra "
    "K** - Q** term repairs part of that but not the overfitted mean. On energy, the "
    "smoothest set, SoR/DTC have the best RMSE (0.435) but DTC's NLPD is the worst "
    "(3.43). On the large sets (N >> M) the picture turns: SoR/DTC have the lowest RMSE "
    "of all models on elevators (0.090 vs VFE 0.093), bike (0.056 vs 0.071), kin40k "
    "(0.181 vs 0.195) and protein (0.482 vs 0.507), and come second to VFE on pol (6.04 "
    "vs 5.96); SoR's NLPD is better than VFE's on all five, "
    "while DTC's NLPD is the worst of the collapsed methods on every large set (e.g. 0.97 "
    "vs SoR -1.46 on bike, 1.56 vs 0.69 on protein).",
    "- **FITC**'s RMSE on housing (2.50) is below the exact GP's (2.64; the exact fits "
    "used 97 of their 100 steps on average, so they may not have fully converged). FITC "
    "is a different (heteroscedastic) model rather than an approximation that converges "
    "to the exact GP at this M. On energy, FITC or GPRFITC has the best NLPD of all "
    "models on 4 of 5 splits, but FITC's is 6.6 on split 4 (hence 1.67 ± 2.47); it is "
    "worse than VFE on housing (2.69 vs 2.33) and concrete (2.96 vs 2.91). On pol, bike "
    "and kin40k it has the worst RMSE of the collapsed methods (7.45 vs VFE 5.96, 0.166 "
    "vs 0.071, 0.272 vs 0.195) and yet, with GPRFITC, the best NLPD (2.91 vs 3.24, -2.41 "
    "vs -1.13, -0.35 vs -0.16): its input-dependent noise buys likelihood, not accuracy. "
    "On elevators it has the best NLPD at VFE's RMSE (-1.04 vs -0.96, both 0.093); on "
    "protein the best NLPD (0.650; SoR 0.689, VFE 0.744) at an RMSE between SoR's and "
    "VFE's (0.512; 0.482, 0.507). At 30 iterations protein's ranking was different: SoR "
    "had the best NLPD (0.766 against FITC's 0.789).",
    "- **SVGP** with the small budget used here (300 Adam steps, batch 1024: about 20 "
    "epochs on the large sets) is under-trained on energy (RMSE 0.841 vs VFE 0.468), "
    "concrete (5.09 vs 4.46), pol (11.2 vs 5.96), bike (0.266 vs 0.071), kin40k (0.324 vs "
    "0.195) and protein (0.576 vs 0.507), somewhat worse on elevators (0.098 vs 0.093), "
    "close on wine and better on housing (2.49 vs 2.72): the collapsed bound does not "
    "need to learn q(u), which is the reason to prefer VFE for Gaussian likelihoods when "
    "the data fit a full-batch optimiser. At M = 256 SVGP took 8-21 s per large set (median over "
    "the splits) against 30-180 s per collapsed fit.",
    "- **Speed**: latentgp's collapsed fits took 1.0-1.9x (VFE) and 1.3-3.5x (FITC, M = 256) the "
    "wall time of GPflow's on the small sets, and 1.4-2.0x on the large sets, for the "
    "same number of L-BFGS iterations. A profile of one FITC fit (housing, M = 256) "
    "showed torch's L-BFGS spending about 2 objective evaluations per iteration (42 for "
    "20 iterations) and the backward pass taking ~80% of the time; scipy's L-BFGS-B "
    "usually needs about one. **Fixed after these runs**: torch's `LBFGS.step` (one "
    "iteration per step in our loop) began each step by re-evaluating the objective at "
    "the point where the previous line search had stopped; the loop now reuses that "
    "evaluation (same trajectory to the last bit, `test_lbfgs_reuses_the_line_search_"
    "evaluation`), which halves the evaluations: a FITC fit with N = 2,000, M = 64 and 40 "
    "steps went from 84 to 45 evaluations and from 2.3 s to 1.2 s. This bullet describes "
    "the records of split 0 of every set and of the small sets at M = 256, which predate "
    "the fix; later sessions' records (see 'Smaller than asked') do not.",
    "- **Speed after both fixes** (split 1 of elevators, pol and bike, M = 256, 100 "
    "L-BFGS iterations each; latentgp's fits and GPflow's ran back to back in one process "
    "chain beside other benchmark jobs): VFE took 139 / 142 / 150 s against GPflow SGPR's "
    "318 / 284 / 305 s (2.0-2.3x faster), FITC 216 / 204 / 212 s against GPRFITC's "
    "315 / 422 / 224 s (1.06-2.1x; bike's GPflow fits ran partly after the two SEP benchmark "
    "jobs had stopped, on a less loaded machine). Accuracy matches: VFE vs SGPR RMSE "
    "0.092 / 0.093, 5.93 / 6.03, 0.070 / 0.070. The gains come from the reused "
    "line-search evaluation and the hand-written backward pass of the data sums (three "
    "M x M x N products per evaluation for VFE, four for FITC, against five).",
    "- **Speed now** (session 10): one objective + gradient evaluation (section 3 below) "
    "takes 0.67-0.77x the time of GPflow SGPR's for VFE and 0.77-0.87x GPRFITC's for FITC "
    "on kin40k and pol at M = 256 and 512, after three changes: triangular solves without "
    "copies, chunks of 4,096 rows at M = 256 (2,048 at 512) so that element-wise passes "
    "run from cache, and no checkpointing below N M = 2^26 (docs/design.md). Before them "
    "a one-off check (synthetic N = 16,000, D = 8, M = 256) gave VFE 0.95x and FITC 1.4x; "
    "with the solves fixed but the old chunks, kin40k at M = 256 gave 0.89x and 1.27x "
    "(same protocol as section 3, not kept). Whole fits: "
    "the summary table above; records made before these changes carry the older times.",
    "- **30 against 100 L-BFGS iterations** (kin40k and protein, M = 256, 5 splits "
    "each): 30 iterations were far from converged. VFE's RMSE falls from 0.250 to 0.195 "
    "on kin40k and from 0.543 to 0.507 on protein, its NLPD from 0.046 to -0.158 and "
    "from 0.810 to 0.744; SoR's RMSE from 0.238 to 0.181 and 0.520 to 0.482; FITC's NLPD "
    "from -0.166 to -0.354 and 0.789 to 0.650. GPflow moves the same way (SGPR 0.250 to "
    "0.196 and 0.544 to 0.507). Every fit at 100 used all 100 iterations, so these too "
    "may improve with more. With the session-10 library, VFE's 100-iteration fits took "
    "0.71x SGPR's time on kin40k and on protein (medians over the splits), FITC's "
    "0.88x and 0.89x GPRFITC's (summary table above).",
    "- **M = 512 at 100 iterations** (splits 0-2 of both sets; kin40k also split 3): "
    "the gains over 30 iterations are as large as at M = 256. VFE's RMSE on splits 0-2 "
    "goes from 0.185 to 0.159 on kin40k and from 0.520 to 0.482 on protein (GPflow SGPR "
    "0.160 and 0.482), and doubling M at 100 iterations improves every collapsed method "
    "(VFE 0.195 to 0.159 on kin40k, 0.509 to 0.482 on protein; FITC's NLPD -0.355 to "
    "-0.717 and 0.644 to 0.548). FITC's RMSE on kin40k does not improve with more "
    "iterations (0.221 at 30, 0.233 at 100, splits 0-2) while its NLPD does (-0.500 to "
    "-0.717): the optimiser spends the extra iterations on the input-dependent variance. "
    "Whole fits at 100 iterations: VFE took 0.70-0.74x SGPR's time on every split of "
    "both sets (median 0.72x), FITC 0.74-0.85x GPRFITC's (medians 0.82x on kin40k, 0.77x "
    "on protein; split-by-split table).",
    "- **M = 512 on the small sets** (5 splits each of energy, concrete and wine; "
    "housing has N < 512): VFE reaches the exact GP, RMSE / NLPD 0.441 / 0.617 against "
    "0.452 / 0.640 on energy, 4.387 / 2.875 against 4.438 / 2.880 on concrete and 0.459 / "
    "0.603 against 0.459 / 0.597 on wine (at M = 256: 0.468 / 0.678, 4.455 / 2.907, "
    "0.462 / 0.618); its five-split means are within 0.015 of GPflow SGPR's. Being "
    "slightly better than the exact GP on energy and concrete says that the exact fits "
    "(100 L-BFGS iterations from the same start) had not fully converged, not that the "
    "bound beats log p(y). SoR/DTC get worse with more inducing inputs: RMSE 5.88 against "
    "5.60 on concrete, and SoR's NLPD on wine 32.9 against 6.5, the degenerate models "
    "gaining freedom, not accuracy. FITC does not gain from M = 512 either (RMSE 0.534, "
    "4.732, 0.482 against 0.527, 4.586, 0.477), a sign of the optimisation difficulty of "
    "its objective; GPRFITC behaves alike.",
    "- **M = 512 on the large sets** (all five on 5 splits; kin40k and protein at 30 "
    "iterations, compared here with their 30-iteration runs at M = 256): "
    "with N >> M every collapsed method gains from doubling M. VFE's RMSE falls from "
    "0.250 to 0.185 on kin40k, 0.543 to 0.516 on protein, 5.96 to 5.14 on pol, 0.071 to "
    "0.057 on bike and 0.093 to 0.091 on elevators, and its NLPD with it "
    "(kin40k 0.046 to -0.242). It stays at GPflow SGPR's values (RMSE 0.185 / 0.186 on "
    "kin40k, 0.516 / 0.519 on protein, 5.14 / 5.20 on pol). The ranking of the methods "
    "does not change: SoR has the lowest RMSE on kin40k (0.176), protein (0.489), bike "
    "(0.048) and elevators (0.090), VFE on pol; FITC the best NLPD except on protein "
    "(SoR's is lower, 0.705 against 0.745) and, on pol, bike and kin40k, the worst RMSE "
    "of the collapsed methods; DTC the worst NLPD; SVGP at 300 Adam steps stays far "
    "behind (kin40k 0.270). Whole fits at M = 512 (all but pol splits 0-1 with the "
    "session-10 library): latentgp's VFE took 0.70-0.83x GPflow SGPR's time (median per "
    "set) and FITC 0.90-1.03x GPRFITC's, for the same number of L-BFGS iterations "
    "(summary table above).",
    "",
]

_SCRIPT = "benchmarks/sparse_reproduction.py"
_LATER = f"OMP_NUM_THREADS=1 nice -n 15 .venv/bin/python {_SCRIPT} --part uci"
_S10 = f"OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python {_SCRIPT} --part uci"
#: (set, split) pairs run at M = 512 on 23 Nov 2026
_M512_RUNS: list[tuple[str, int]] = [("energy", 0), ("concrete", 0), ("wine", 0)]
RUN_COMMANDS = [
    *(
        f"nice -n 10 .venv/bin/python {_SCRIPT} --part {part}"
        for part in (
            "toy",
            "toyrandom",
            "uci --datasets housing,energy --splits 0,1,2 --inducing 256",
            "uci --datasets concrete,wine --splits 0,1,2 --inducing 256",
        )
    ),
    "# later (commands reconstructed from the order of the cache records):",
    f"nice -n 10 .venv/bin/python {_SCRIPT} --part uci --datasets housing,energy,concrete,wine "
    "--splits 3,4 --inducing 256",
    f"nice -n 10 .venv/bin/python {_SCRIPT} --part uci --datasets energy --splits 0 "
    "--inducing 512  # GPflow records of this one missing; added on 23 Nov",
    "# 23 Nov 2026, one process at a time:",
    *(f"{_LATER} --datasets {d} --splits 0 --inducing 256" for d in ("elevators", "pol", "bike")),
    *(
        f"{_LATER} --datasets {d} --splits 0 --inducing 256 --lbfgs-steps 30"
        for d in ("kin40k", "protein")
    ),
    *(f"{_LATER} --datasets {d} --splits {k} --inducing 512" for d, k in _M512_RUNS),
    "# 23 Nov 2026 (session 5), beside two SEP benchmark processes:",
    *(
        f"OMP_NUM_THREADS=1 nice -n 12 .venv/bin/python {_SCRIPT} --part uci --datasets "
        f"{d} --splits 1 --inducing 256"
        for d in ("elevators", "pol", "bike")
    ),
    "# 24 Nov 2026 (session 8), beside three other benchmark processes; stopped during",
    "# elevators split 2's GPflow fits (its latentgp records are kept):",
    f"OMP_NUM_THREADS=1 nice -n 12 .venv/bin/python {_SCRIPT} --part uci --datasets "
    "elevators --splits 2,3,4 --inducing 256",
    "# 24 Nov 2026 (session 9), the last half hour, beside SAVIGP benchmark processes",
    "# (three to four processes on the 2 cores):",
    f"OMP_NUM_THREADS=1 nice -n 12 .venv/bin/python {_SCRIPT} --part uci --datasets "
    "energy,concrete,wine --splits 1,2,3,4 --inducing 512",
    f"OMP_NUM_THREADS=1 nice -n 12 .venv/bin/python {_SCRIPT} --part uci --datasets "
    "elevators --splits 2,3,4 --inducing 256",
    f"OMP_NUM_THREADS=1 nice -n 12 .venv/bin/python {_SCRIPT} --part uci --datasets "
    "pol --splits 2,3,4 --inducing 256",
    "# then bike, one process per split (2 and 3 together, then 4), nothing else running:",
    *(
        f"OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python {_SCRIPT} --part uci --datasets "
        f"bike --splits {k} --inducing 256"
        for k in (2, 3, 4)
    ),
    "# 24 Nov 2026 (session 10), two processes at a time on the 2 cores (three while",
    "# evalspeed ran). The first two started with the library of 204b677, the next two",
    "# with the faster solves of eae2dde, the last ones also with the smaller chunks of",
    "# 1d9db7c (the library a running process uses is the one it started with):",
    f"{_S10} --datasets kin40k,protein --splits 1,2,3,4 --inducing 256 --lbfgs-steps 30",
    f"{_S10} --datasets pol,bike --splits 0,1,2,3,4 --inducing 512  # stopped after pol 1",
    f"{_S10} --datasets bike,elevators --splits 0,1 --inducing 512",
    f"{_S10} --datasets kin40k,protein --splits 0,1 --inducing 512 --lbfgs-steps 30",
    f"{_S10} --datasets kin40k,protein --splits 2,3,4 --inducing 512 --lbfgs-steps 30",
    f"{_S10} --datasets pol,bike,elevators --splits 2,3,4 --inducing 512  # stopped, see below",
    f"{_S10} --datasets elevators --splits 2 --inducing 512  # when the cores freed up",
    "# then splits 3 and 4 of elevators, one process each, nothing else running:",
    *(f"{_S10} --datasets elevators --splits {k} --inducing 512" for k in (3, 4)),
    f"OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python {_SCRIPT} --part evalspeed",
    "# 24 Nov 2026 (session 11), one process per set, two at a time, with the library",
    "# of c592d91 (the collapsed GPs as in session 10's last runs):",
    *(
        f"{_S10} --datasets {d} --splits 0,1,2,3,4 --inducing 256 --lbfgs-steps 100"
        for d in ("kin40k", "protein")
    ),
    *(
        f"{_S10} --datasets {d} --splits 0,1,2,3,4 --inducing 512 --lbfgs-steps 100"
        f"  # stopped at the session's end, after split {k}"
        for d, k in (("kin40k", 3), ("protein", 2))
    ),
    f"nice -n 10 .venv/bin/python {_SCRIPT} --part page",
]

#: What this run showed, next to the blog's qualitative claims (written after the run).
OBSERVATIONS: list[str] = [
    "### The blog's claims against this run",
    "",
    "- *SoR/DIC: good near the data, predictive variance collapses away from Z* — seen: "
    "with M = 5 (first SoR panel) and with fixed random Z, SoR's band shrinks to the noise "
    "level beyond the last inducing input (x > 3), while DTC, FITC and VFE revert to the "
    "prior there.",
    "- *DTC fixes the understated variance but fluctuates* — DTC trains to exactly the same "
    "hyperparameters and mean as SoR (same objective; the test checks this), and adds "
    "diag(K** - Q**) to the variance. On this toy that extra variance made DTC's test NLPD "
    "*worse* than SoR's at every M (e.g. 0.70 vs 0.37 at M = 10): between widely spaced "
    "inducing inputs the band balloons.",
    "- *FITC: good accuracy and reasonable uncertainty* — its mean is as good as the others "
    "from M = 20 on, but it learns a noise variance below the true 0.09 (0.067-0.083 for "
    "M = 15..50): the known FITC tendency to explain noise with the heteroscedastic "
    "diag(K - Q) term (Bauer, van der Wilk & Rasmussen, 2016; not in the seed).",
    "- *VFE* (the blog's text ends before its plot): its bound rises to the exact "
    "log p(y) from below (-479.7 at M = 40 and 50 against -479.68) and its noise estimate "
    "(0.0888) matches the exact GP's, whereas the SoR/DTC evidence overshoots the exact "
    "log p(y) (-450.0 at M = 15): it is not a bound. With linearly spaced initial Z, VFE "
    "stayed in a poorer local optimum at M = 10-15 (test RMSE 0.373) where SoR/DTC reached "
    "0.309.",
    "- *Nyström*: the error falls fast with M; linearly spaced Z beat k-means++ Z on this "
    "1-D toy by orders of magnitude at M >= 30 (k-means++ crowds Z where the N(0, 1) data "
    "are dense and leaves the tails uncovered), and both stay well above the best rank-M "
    "error.",
    "",
]


def _fmt(vals: list[float], digits=3) -> str:
    if not vals:
        return "–"
    if len(vals) == 1:
        return f"{vals[0]:.{digits}f}"
    return f"{np.mean(vals):.{digits}f} ± {np.std(vals):.{digits}f}"


def write_page(command: str) -> None:
    lines = ["# Sparse GP regression: SoR/DIC, DTC, FITC, VFE (seed 004)", ""]
    lines += [
        "Regenerate (from the repository root; GPflow venv: `python3 -m venv .venv-gpflow && "
        ".venv-gpflow/bin/pip install gpflow tensorflow-cpu tensorflow-probability tf-keras`). "
        "The results below came from these runs (the first ones, toy and UCI splits 0-2, in "
        "parallel, the later ones one at a time; each resumable through the cache "
        "`sparse_uci.jsonl`); the "
        "last line rewrites this page from the saved results:",
        "",
        "```",
        *RUN_COMMANDS,
        "```",
        "",
    ]
    toy = json.loads(TOY_JSON.read_text()) if TOY_JSON.exists() else None
    facts = toy["facts"] if toy else machine_facts()
    lines += [
        f"Machine: {facts['cores']} cores, torch {facts['torch']}, "
        f"torch threads {facts['threads']} (set to 1), float64, Python {facts['python']}. "
        "Load average (1, 5, 15 min) when the toy part finished: "
        f"{', '.join(f'{v:.1f}' for v in facts['load_average'])} — the machine "
        "was shared with several other jobs, so **all times are inflated and noisy**; "
        "compare times only within one row.",
        "",
        SEED_NOTE,
        "",
        "## 1. The blog's toy (2,000 points, x ~ N(0, 1))",
        "",
        "`lg.datasets.make_snelson(2000, seed=0)` (f(x) = sin(3x) + 0.3 cos(9x), noise sd "
        "0.3; the blog does not give its function), test set `make_snelson(1000, seed=1)`. "
        "Inducing inputs start linearly spaced between the smallest and largest x, as in the "
        "blog, and are then learned with the hyperparameters (L-BFGS, at most "
        f"{toy['steps'] if toy else 200} steps; the exact-GP reference: at most "
        f"{EXACT_TOY_STEPS} L-BFGS steps). Dashed: exact GP mean. The band is the 2-sigma "
        "band of y (latent variance + noise).",
        "",
    ]
    if toy:
        for method in METHODS:
            lines += [f"![{LABEL[method]}](sparse_toy_{method}.png)", ""]
        lines += [
            "![error and fit against M](sparse_toy_vs_M.png)",
            "",
            "Left: relative error of the Nyström matrix Qxx against Kxx on 1,000 of the toy "
            "inputs at the exact GP's hyperparameters (`latentgp.kernels.nystrom.nystrom_error`), "
            "for k-means++ and linearly spaced Z, with the best rank-M error (truncated "
            "eigendecomposition) for reference. The curves flatten near 1e-6 relative error "
            "because Kzz gets a relative jitter of 1e-6 before its Cholesky.",
            "",
        ]
        Ms = sorted(int(k) for k in toy["methods"]["vfe"])
        lines += [
            "Test RMSE / NLPD against M (exact GP: RMSE "
            f"{toy['exact']['rmse']:.4f}, NLPD {toy['exact']['nlpd']:.4f}, "
            f"log p(y) {toy['exact']['lml']:.1f}):",
            "",
        ]
        lines += [
            "| M | "
            + " | ".join(LABEL[m] for m in METHODS)
            + " | Nyström rel. Frobenius (k-means Z) |",
            "|---|" + "---|" * (len(METHODS) + 1),
        ]
        for M in Ms:
            cells = [
                f"{toy['methods'][m][str(M)]['rmse']:.4f} / {toy['methods'][m][str(M)]['nlpd']:.3f}"
                for m in METHODS
            ]
            ny = toy["nystrom"].get(str(M), {}).get("kmeans", {})
            nys = f"{ny['relative_frobenius']:.2e}" if ny else "–"
            lines.append(f"| {M} | " + " | ".join(cells) + f" | {nys} |")
        lines += [
            "",
            "Training objective (approximate log p(y); VFE: lower bound) at M = 10 "
            "and 30, and the learned noise variance (true: 0.09):",
            "",
            "| method | obj. M=10 | obj. M=30 | noise M=10 | noise M=30 |",
            "|---|---|---|---|---|",
        ]
        for m in METHODS:
            r10, r30 = toy["methods"][m]["10"], toy["methods"][m]["30"]
            lines.append(
                f"| {LABEL[m]} | {r10['objective']:.1f} | {r30['objective']:.1f} | "
                f"{r10['noise']:.4f} | {r30['noise']:.4f} |"
            )
        lines.append("")
    rnd = OUT / "sparse_toy_random.json"
    if rnd.exists():
        r = json.loads(rnd.read_text())
        lines += [
            "### Fixed random inducing inputs (the blog's second toy experiment)",
            "",
            "12 inducing inputs drawn uniformly in [-4, 4] and kept fixed "
            "(`learn_inducing=False`; several lie away from the data), hyperparameters learned:",
            "",
            "![random Z](sparse_toy_randomZ.png)",
            "",
            "| method | test RMSE | test NLPD |",
            "|---|---|---|",
        ]
        for m in METHODS:
            v = r["methods"][m]
            lines.append(f"| {LABEL[m]} | {v['rmse']:.4f} | {v['nlpd']:.4f} |")
        lines.append("")
    lines += OBSERVATIONS
    lines += [
        "### Scaling check: N = 10^6",
        "",
        "`--part bign` (FITC, N = 1,000,000, D = 2, M = 64, float64, one thread): two "
        "full-data L-BFGS steps (each objective + gradient accumulated in checkpointed "
        "chunks of 65,536 rows) plus the final statistics pass ran with a **peak resident "
        "memory of 795 MB** (the O(N M) graph without checkpointing would hold several "
        "512 MB tensors) and took 922 s of wall time on the contended machine (load average "
        "about 16 on 2 cores), measured with `/usr/bin/time -v` in this session.",
        "",
    ]
    lines += _uci_section()
    lines += _eval_speed_section()
    lines += NOT_DONE
    (OUT / "sparse.md").write_text("\n".join(lines) + "\n")


#: the page's closing section (tests/reproduction/test_seed_coverage.py reads it)
NOT_DONE = [
    "## Not done",
    "",
    "The blog (seed 004) has no numbered tables or figures, so there is no table or figure "
    "number to cover. Its unnumbered plots are the toy predictions of SoR/DIC with linearly "
    "spaced inducing inputs, DTC, FITC (also with inducing inputs far from the data) and "
    "VFE (whose plot the converted text refers to but does not contain): section 1 redraws "
    "each of them (`sparse_toy_*.png`) and checks the blog's claims about them one by one. "
    "Nothing of the blog's own experiment is left out. Of the larger runs that the project "
    "added beyond the blog (section 2):",
    "",
    "- the exact GP is not run for N > 5000 (the five large sets);",
    "- M = 512 at 100 L-BFGS iterations ran only on splits 0-2 of protein and 0-3 of "
    "kin40k (the 30-iteration rows have all 5 splits);",
    "- housing skips M = 512, which is more inducing inputs than its 456 training points.",
    "",
]


def _uci_section() -> list[str]:
    recs = [r for r in _load_cache()]
    lines = ["## 2. UCI regression, fixed splits", ""]
    if not recs:
        return lines + ["Not run.", ""]
    sets = [d for d in UCI_ALL if any(r["dataset"] == d for r in recs)]
    missing = [d for d in UCI_ALL if d not in sets]
    models = ["exact", "sor", "dtc", "fitc", "vfe", "svgp", "gpflow-SGPR", "gpflow-GPRFITC"]
    lines += [
        "Inputs and targets standardised with training statistics; RMSE and NLPD in the "
        "original target units (mean ± std over the splits listed). Every model starts from "
        "the same hyperparameters (lengthscales sqrt(D), signal variance 1, noise 0.1, SE-ARD "
        "kernel) and the same k-means++ inducing inputs; Z is learned. Default budgets "
        f"(the 'budget' column gives the one used): collapsed methods, exact GP and GPflow: "
        f"at most {LBFGS_STEPS_DEFAULT} L-BFGS iterations (GPflow: scipy L-BFGS-B "
        f"maxiter={LBFGS_STEPS_DEFAULT}); SVGP: {SVGP_STEPS_DEFAULT} Adam steps, "
        f"batch min(N, 1024), lr {SVGP_LR}, whitened full q(u). Exact GP only for "
        f"N <= {EXACT_MAX_N}. Time = training seconds (s), contended machine. "
        "DTC maximises the same approximate evidence as SoR, so since 23 Nov 2026 the "
        "benchmark derives DTC from SoR's fit (same hyperparameters and Z, DTC's "
        'predictive variance) instead of training it again; those rows say "SoR\'s fit" '
        "and their time is SoR's plus the derivation.",
        "",
    ]
    lines += [SMALLER_THAN_ASKED, ""]
    lines += _coverage(recs)
    lines += [NOT_RUN, ""]
    if missing:
        lines += [f"**Sets with no result at all:** {', '.join(missing)}.", ""]
    for name in sets:
        rs = [r for r in recs if r["dataset"] == name]
        splits = sorted({r["split"] for r in rs})
        N, D = rs[0]["N"], rs[0]["D"]
        lines += [
            f"### {name} (N_train = {N}, D = {D}; splits {splits})",
            "",
            "| model | M | budget (max steps) | splits run | RMSE | NLPD | time (s) | steps |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for M in sorted({r["M"] for r in rs}):
            for model in models:
                for budget in sorted({budget_of(r) for r in rs if r["model"] == model}):
                    sel = [
                        r
                        for r in rs
                        if r["M"] == M and r["model"] == model and budget_of(r) == budget
                    ]
                    if not sel:
                        continue
                    ok = [r for r in sel if "error" not in r]
                    bad = len(sel) - len(ok)
                    note = f" ({bad} failed: {sel[0].get('error', '')[:60]})" if bad else ""
                    kind = "Adam" if model == "svgp" else "L-BFGS"
                    shared = sum("shared_fit" in r for r in ok)
                    if shared:  # DTC from SoR's fit: see the note above the tables
                        note += f" ({shared} of {len(ok)}: SoR's fit)"
                    lines.append(
                        f"| {model}{note} | {M or '–'} | {budget} {kind} | {len(ok)} | "
                        f"{_fmt([r['rmse'] for r in ok])} | {_fmt([r['nlpd'] for r in ok])} | "
                        f"{_fmt([r['seconds'] for r in ok], 1)} | "
                        f"{_fmt([r['steps'] for r in ok], 0)} |"
                    )
        lines.append("")
    lines += _peer_pairs(recs)
    lines += UCI_OBSERVATIONS
    return lines


def _coverage(recs: list[dict]) -> list[str]:
    """What ran, from the cache: splits per set and M, with the L-BFGS budget used."""
    lines = [
        "Coverage (from the cache; budget = L-BFGS iterations of the collapsed methods and "
        "GPflow, SVGP always 300 Adam steps):",
        "",
        "| set | N_train | M = 256: splits (budget) | M = 512: splits (budget) |",
        "|---|---|---|---|",
    ]
    for name in UCI_ALL:
        rs = [r for r in recs if r["dataset"] == name and "error" not in r]
        if not rs:
            lines.append(f"| {name} | – | not run | not run |")
            continue
        N = rs[0]["N"]
        cells = []
        for M in (256, 512):
            if M >= N:
                cells.append(f"M >= N, not defined (N = {N})")
                continue
            sel = [r for r in rs if r["M"] == M and r["model"] == "vfe"]
            if not sel:
                cells.append("not run")
                continue
            splits = sorted({r["split"] for r in sel})
            budgets = sorted({budget_of(r) for r in sel})
            gp = {r["split"] for r in rs if r["M"] == M and r["model"] == "gpflow-SGPR"}
            peer = "" if gp == set(splits) else f"; GPflow on {sorted(gp) or 'none'}"
            cells.append(f"{splits} ({'/'.join(map(str, budgets))}{peer})")
        lines.append(f"| {name} | {N} | {cells[0]} | {cells[1]} |")
    return lines + [""]


def _peer_pairs(recs: list[dict]) -> list[str]:
    """Split-by-split: latentgp VFE/FITC beside GPflow SGPR/GPRFITC (same init, budget)."""
    # pairs only at equal budgets: a set may have been run at two (kin40k, protein)
    key = {
        (r["dataset"], r["split"], r["M"], budget_of(r), r["model"]): r
        for r in recs
        if "error" not in r
    }
    rows = []
    for (d, k, M, b, model), r in sorted(key.items()):
        for ours, theirs in (("vfe", "gpflow-SGPR"), ("fitc", "gpflow-GPRFITC")):
            if model == ours and (d, k, M, b, theirs) in key:
                t = key[(d, k, M, b, theirs)]
                rows.append(
                    f"| {d} | {k} | {M} | {budget_of(r)} / {budget_of(t)} | "
                    f"{ours} vs {theirs} | {r['rmse']:.3f} / {t['rmse']:.3f} | "
                    f"{r['nlpd']:.3f} / {t['nlpd']:.3f} | {r['seconds']:.0f} / "
                    f"{t['seconds']:.0f} |"
                )
    if not rows:
        return []
    return [
        *_peer_summary(key),
        "### latentgp against GPflow, split by split",
        "",
        "Same standardised data, initial Z and hyperparameters, and the same L-BFGS "
        "iteration budget for both (column 'budget'; latentgp: torch L-BFGS with "
        "strong-Wolfe line search, one iteration per step; GPflow: scipy L-BFGS-B maxiter). "
        "GPflow's time includes building its tf.function graph. Times are wall-clock.",
        "",
        "| set | split | M | budget ours / GPflow | pair | RMSE ours / GPflow | "
        "NLPD ours / GPflow | time (s) |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def _peer_summary(key: dict) -> list[str]:
    """One row per set, M and pair: how far latentgp is from GPflow over the paired splits.

    ``key`` maps (set, split, M, budget, model) to a record.  Each split counts once, at
    the largest budget both libraries ran.  Differences are ours minus GPflow's; the time
    ratio is ours / GPflow's per split (median and range over the splits).
    """
    rows = []
    for name in UCI_ALL:
        for M in (256, 512):
            for ours, theirs in (("vfe", "gpflow-SGPR"), ("fitc", "gpflow-GPRFITC")):
                best: dict[int, tuple[int, dict, dict]] = {}  # split -> (budget, ours, theirs)
                for (d, k, m, b, model), r in key.items():
                    if (d, m, model) != (name, M, ours) or (d, k, m, b, theirs) not in key:
                        continue
                    if k not in best or b > best[k][0]:
                        best[k] = (b, r, key[(d, k, m, b, theirs)])
                pairs = [(r, t) for _, (_, r, t) in sorted(best.items())]
                if not pairs:
                    continue
                budgets = sorted({b for b, _, _ in best.values()})
                rel_rmse = [abs(a["rmse"] - b["rmse"]) / b["rmse"] for a, b in pairs]
                d_nlpd = [a["nlpd"] - b["nlpd"] for a, b in pairs]
                ratio = [a["seconds"] / b["seconds"] for a, b in pairs]
                rows.append(
                    f"| {name} | {M} | {ours} vs {theirs} | {len(pairs)} "
                    f"({'/'.join(map(str, budgets))}) | "
                    f"{100 * float(np.mean(rel_rmse)):.1f}% | {float(np.mean(d_nlpd)):+.3f} | "
                    f"{float(np.median(ratio)):.2f} ({min(ratio):.2f}-{max(ratio):.2f}) |"
                )
    if not rows:
        return []
    return [
        "### latentgp against GPflow, summary",
        "",
        "Over the splits where both ran (the table below lists them one by one): the mean "
        "relative RMSE difference |ours - GPflow| / GPflow, the mean NLPD difference ours - "
        "GPflow (negative: latentgp's test NLPD is lower), and latentgp's training time "
        "over GPflow's for the same number of L-BFGS iterations (median over the splits, "
        "with the range). Each pair ran back to back in one process, so both sides saw "
        "about the same machine load; records made before the two speed-ups described "
        "under 'Reading the UCI tables' (split 0 of every set, and splits 1-4 of the "
        "small sets at M = 256) carry the older library's times. Where a split ran at two "
        "budgets, the larger counts; column 'splits' gives the budgets counted.",
        "",
        "| set | M | pair | splits (budget) | mean rel. RMSE diff. | mean NLPD diff. | "
        "time ours / GPflow: median (range) |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument(
        "--part",
        choices=("all", "toy", "toyrandom", "uci", "bign", "evalspeed", "page"),
        default="all",
    )
    p.add_argument("--datasets", default="housing,energy,concrete,wine")
    p.add_argument("--splits", default="0,1,2")
    p.add_argument("--inducing", default="256")
    p.add_argument("--no-gpflow", action="store_true")
    p.add_argument(
        "--lbfgs-steps",
        type=int,
        default=LBFGS_STEPS_DEFAULT,
        help="L-BFGS budget of the collapsed methods, exact GP and GPflow (smaller for "
        "the large sets; stored as max_steps in each record and shown on the page)",
    )
    p.add_argument("--svgp-steps", type=int, default=SVGP_STEPS_DEFAULT, help="Adam steps of SVGP")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    global LBFGS_STEPS, SVGP_STEPS
    LBFGS_STEPS, SVGP_STEPS = args.lbfgs_steps, args.svgp_steps
    if args.quick:  # a smoke run: tiny budgets, results in a temporary folder
        global OUT, CACHE, TOY_JSON
        OUT = Path(tempfile.mkdtemp(prefix="sparse-quick-"))
        CACHE, TOY_JSON = OUT / "sparse_uci.jsonl", OUT / "sparse_toy.json"
        LBFGS_STEPS, SVGP_STEPS = 10, 20
        print(f"--quick: writing to {OUT}")
    OUT.mkdir(parents=True, exist_ok=True)
    command = "nice -n 10 .venv/bin/python benchmarks/sparse_reproduction.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    if args.part in ("all", "toy"):
        run_toy(args.quick)
    if args.part == "bign":
        run_big_n()
        return
    if args.part in ("all", "toyrandom"):
        run_toy_random(args.quick)
    if args.part in ("all", "evalspeed"):
        run_eval_speed(args.quick)
    if args.part in ("all", "uci"):
        splits = [0] if args.quick else [int(s) for s in args.splits.split(",")]
        Ms = [int(m) for m in args.inducing.split(",")]
        data = ["housing"] if args.quick else args.datasets.split(",")
        run_uci(data, splits, [min(Ms)] if args.quick else Ms, not args.no_gpflow)
    write_page(command)


if __name__ == "__main__":
    main()
