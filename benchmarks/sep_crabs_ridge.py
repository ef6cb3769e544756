"""Issue 23 diagnosis: why SEP (250 sweeps) and GFITC (L-BFGS) disagree on crabs.

For each crabs split of Table 1 (same permutation and seeds as ``sep_reproduction.py
--parts table1``; its inducing inputs at M = 15%, another draw at 25% and 50%, see
``sep_reproduction.split_data``) this fits, without hyperpriors (the seed's
protocol):

- SEP, 250 sweeps, and GFITC, L-BFGS for at most 250 iterations (tol 1e-7);
- GFITC at SEP's final hyperparameters (EP run to convergence there): does the other
  approximation give SEP's test NLL at equal hyperparameters?
- GFITC stopped after 60 and 100 iterations: how much does GFITC's own NLL depend on
  where it stops?

and then both methods again with the same log-normal hyperpriors centred on the initial
values (MAP-II: ``kernel.variance ~ LogNormal(0, s)``, ``kernel.lengthscale ~
LogNormal(log sqrt(D), s)``, s = ``--prior-scale``), under which the objective has a
maximum.  Records go to ``docs/results/sep_raw/ridge.json``; ``--report`` prints the
markdown written into docs/results/sep.md by hand.

    python benchmarks/sep_crabs_ridge.py --splits 20 --fracs 0.15
    python benchmarks/sep_crabs_ridge.py --report
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sep_reproduction as sr  # noqa: E402 (the Table 1 splits and NLL)
from machine import stamp  # noqa: E402

import latentgp as lg  # noqa: E402

PART = "ridge"


def _hyper(model) -> dict:
    k = model.kernel
    return {
        "variance": float(k.variance),
        "lengthscale": [float(v) for v in k.lengthscale.detach().reshape(-1)],
        "Z_moved": float((model.Z.detach() - model.Z_init_).norm()),
    }


def _fit(make, kw, Xtr, ytr, split, prior_scale=None):
    model = make()
    if prior_scale is not None:
        D = Xtr.shape[1]
        model.set_prior("kernel.variance", lg.priors.LogNormal(0.0, prior_scale))
        ls_prior = lg.priors.LogNormal(math.log(math.sqrt(D)), prior_scale)
        model.set_prior("kernel.lengthscale", ls_prior)
    torch.manual_seed(split)
    t0 = time.perf_counter()
    model.fit(Xtr, ytr, seed=split, **kw)
    secs = time.perf_counter() - t0
    return model, secs


def _prior_fits(runs: dict, Z, Xtr, ytr, Xte, yte, split: int, prior_scale: float) -> dict:
    """SEP and GFITC with the same priors (``runs``: name -> (make, fit keywords)), and the
    MAP objective at SEP's point with EP converged there (GFITC's EP): comparable with
    GFITC's own final value; GFITC's NLL at that point."""
    rec, fitted = {}, {}
    for name, (make, kw) in runs.items():
        m, secs = _fit(make, kw, Xtr, ytr, split, prior_scale)
        m.Z_init_ = torch.as_tensor(Z)
        fitted[name] = m
        o = m.history_.objective
        rec[f"{name}_prior"] = dict(
            nll=sr.nll_err(m, Xte, yte)[0],
            seconds=secs,
            steps=m.history_.steps,
            objective=float(o[-1]),
            objective_200=float(o[min(199, len(o) - 1)]),
            **_hyper(m),
        )
    g = copy.deepcopy(fitted["GFITC"])
    g.load_state_dict(fitted["SEP"].state_dict())
    rec["GFITC_prior_at_SEP"] = dict(
        objective=g.converge(Xtr, ytr) + float(g.log_prior()), nll=sr.nll_err(g, Xte, yte)[0]
    )
    return rec


def equal_footing(
    splits: int, first_split: int, fracs, prior_scale: float, fixed_z: bool = False
) -> None:
    """Only the same-prior fits of :func:`run` (250 iterations each), for the splits that
    :func:`run` has not recorded (records in ``equal``): the equal-footing counts at a
    third of the cost.  The no-prior comparison at these splits is Table 1's own records
    (the same data, inducing inputs and seeds).  ``fixed_z``: both methods keep Table 1's
    inducing inputs (``learn_inducing=False``; records in ``equal_fixed_z``)."""
    res = sr.load_part(PART) or {"runs": []}
    key = "equal_fixed_z" if fixed_z else "equal"
    done = {(r["frac"], r["split"]) for r in res.get(key, [])}
    if not fixed_z:
        done |= {(r["frac"], r["split"]) for r in res["runs"]}
    for split in range(first_split, splits):
        for frac in fracs:
            if (frac, split) in done:
                continue
            Xtr, ytr, Xte, yte, Z = sr.split_data("crabs", split, frac)
            runs = {
                "SEP": (lambda Z=Z: lg.SEP(Z=Z, learn_inducing=not fixed_z), {"max_steps": 250}),
                "GFITC": (
                    lambda Z=Z: lg.GFITC(Z=Z, learn_inducing=not fixed_z),
                    {"max_steps": 250, "tol": 1e-7},
                ),
            }
            rec = {"frac": frac, "split": split, "M": len(Z), "prior_scale": prior_scale}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rec.update(_prior_fits(runs, Z, Xtr, ytr, Xte, yte, split, prior_scale))
            rec["Z"], rec["load1"] = "table1", os.getloadavg()[0]
            print(json.dumps(rec), flush=True)
            res.setdefault(key, []).append(rec)
            sr.save_part(PART, stamp(res))


def run(splits: int, first_split: int, fracs, prior_scale: float, quick: bool) -> None:
    res = sr.load_part(PART) or {"runs": []}
    done = set() if quick else {(r["frac"], r["split"]) for r in res["runs"]}
    steps = 20 if quick else 250
    for split in range(first_split, splits):
        for frac in fracs:
            if (frac, split) in done:
                continue
            Xtr, ytr, Xte, yte, Z = sr.split_data("crabs", split, frac)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rec = {"frac": frac, "split": split, "M": len(Z), "prior_scale": prior_scale}
                runs = {
                    "SEP": (lambda Z=Z: lg.SEP(Z=Z), {"max_steps": steps}),
                    "GFITC": (lambda Z=Z: lg.GFITC(Z=Z), {"max_steps": steps, "tol": 1e-7}),
                }
                fitted = {}
                for name, (make, kw) in runs.items():
                    m, secs = _fit(make, kw, Xtr, ytr, split)
                    m.Z_init_ = torch.as_tensor(Z)
                    fitted[name] = m
                    rec[name] = dict(
                        nll=sr.nll_err(m, Xte, yte)[0],
                        seconds=secs,
                        steps=m.history_.steps,
                        log_evidence=float(m.history_.objective[-1]),
                        **_hyper(m),
                    )
                # GFITC's EP at SEP's hyperparameters and inducing inputs
                g = copy.deepcopy(fitted["GFITC"])
                g.load_state_dict(fitted["SEP"].state_dict())
                rec["GFITC_at_SEP"] = dict(
                    log_evidence=g.converge(Xtr, ytr), nll=sr.nll_err(g, Xte, yte)[0]
                )
                for stop in (60, 100):  # GFITC stopped earlier on its own path
                    kw = {"max_steps": min(stop, steps), "tol": 1e-7}
                    m, _ = _fit(lambda Z=Z: lg.GFITC(Z=Z), kw, Xtr, ytr, split)
                    rec[f"GFITC_{stop}"] = dict(
                        nll=sr.nll_err(m, Xte, yte)[0],
                        log_evidence=float(m.history_.objective[-1]),
                    )
                rec.update(_prior_fits(runs, Z, Xtr, ytr, Xte, yte, split, prior_scale))
                rec["Z"] = "table1"  # split_data's inducing inputs are Table 1's at every M
            rec["load1"] = os.getloadavg()[0]
            print(json.dumps(rec), flush=True)
            if not quick:  # a smoke run keeps no records
                res["runs"].append(rec)
                sr.save_part(PART, stamp(res))


def long_run(split: int, frac: float, prior_scale: float, steps: int) -> None:
    """Both methods with the priors run long (SEP ``steps`` sweeps; GFITC to tol 1e-9 or
    ``steps`` iterations), and GFITC's EP at SEP's final parameters: do they then agree?"""
    res = sr.load_part(PART) or {"runs": []}
    Xtr, ytr, Xte, yte, Z = sr.split_data("crabs", split, frac)
    rec = {"frac": frac, "split": split, "M": len(Z), "prior_scale": prior_scale}
    kws = {"SEP": {"max_steps": steps}, "GFITC": {"max_steps": steps, "tol": 1e-9}}
    fitted = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, cls in (("SEP", lg.SEP), ("GFITC", lg.GFITC)):
            m, secs = _fit(lambda cls=cls: cls(Z=Z), kws[name], Xtr, ytr, split, prior_scale)
            fitted[name] = m
            o = m.history_.objective
            rec[name] = dict(
                nll=sr.nll_err(m, Xte, yte)[0],
                objective=float(o[-1]),
                objective_250=float(o[min(249, len(o) - 1)]),
                steps=m.history_.steps,
                variance=float(m.kernel.variance),
            )
        g = copy.deepcopy(fitted["GFITC"])
        g.load_state_dict(fitted["SEP"].state_dict())
        rec["GFITC_at_SEP"] = dict(
            objective=g.converge(Xtr, ytr) + float(g.log_prior()), nll=sr.nll_err(g, Xte, yte)[0]
        )
    print(json.dumps(rec), flush=True)
    res.setdefault("long", []).append(rec)
    sr.save_part(PART, stamp(res))


def _log_hyper(model) -> torch.Tensor:
    k = model.kernel
    parts = (k.variance.detach().reshape(1), k.lengthscale.detach().reshape(-1))
    return torch.cat(parts).log()


def _map_gradient(gfitc, state, Xtr, ytr) -> dict:
    """The MAP objective's gradient at ``state`` (GFITC's EP converged to 1e-10 there): its
    largest entry over the kernel's variance and lengthscales in log coordinates, and the
    norm over the inducing inputs.  Near zero at a maximum; not near zero where a fit
    stopped on the way."""
    g = copy.deepcopy(gfitc)
    g.load_state_dict(state)
    g.ep_tol, g.max_sweeps = 1e-10, 20000
    X = torch.as_tensor(Xtr, dtype=g.dtype_)
    y = torch.as_tensor(ytr, dtype=g.dtype_)
    k = g.kernel
    obj = g.objective(X, y, X.shape[0]) + g.log_prior()
    raws = [k.raw_variance, k.raw_lengthscale, g.Z_raw]
    d_var, d_ls, d_z = torch.autograd.grad(obj, raws)
    out = []
    for prop, d in (("variance", d_var), ("lengthscale", d_ls)):
        raw = getattr(k, f"raw_{prop}")
        with torch.enable_grad():
            v = getattr(k, prop)
            (slope,) = torch.autograd.grad(v.sum(), raw)
        out.append((d * v.detach().reshape(d.shape) / slope).abs().max())
    return {"log_hyper": float(max(out)), "Z": float(d_z.norm())}


def diagnose(split: int, frac: float, prior_scale: float, steps: int, quick: bool = False) -> None:
    """A split where SEP and GFITC with the same priors differ after 250 iterations: is it
    the approximation, EP's convergence, the step budget, or different optima?

    Records, for 250 iterations and for a long run (SEP ``steps`` sweeps, GFITC to tol
    1e-9 or ``steps`` iterations): each method's MAP objective and test NLL, the MAP
    objective at SEP's point with EP converged there (GFITC's EP; its difference from SEP's
    own last-sweep value is what EP's unconverged sites contribute) and GFITC's NLL there,
    the objective's rise over the last 50 iterations, and the largest |log ratio| between
    the two methods' variance and lengthscales.  A method whose gradient is already flat
    after 250 iterations (below ``GRAD_FLAT``) is not run long: its long entry is that fit
    (``reused``).  ``quick``: 20 and 40 iterations, nothing kept (a smoke run)."""
    res = sr.load_part(PART) or {"runs": []}
    Xtr, ytr, Xte, yte, Z = sr.split_data("crabs", split, frac)
    rec = {"frac": frac, "split": split, "M": len(Z), "prior_scale": prior_scale}
    budgets = {
        "250": {"SEP": {"max_steps": 250}, "GFITC": {"max_steps": 250, "tol": 1e-7}},
        "long": {"SEP": {"max_steps": steps}, "GFITC": {"max_steps": steps, "tol": 1e-9}},
    }
    if quick:
        budgets = {
            b: {n: {**kw, "max_steps": 20 * (1 + (b == "long"))} for n, kw in k.items()}
            for b, k in budgets.items()
        }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prev: dict = {}
        for budget, kws in budgets.items():
            fitted, out = {}, {}
            for name, cls in (("SEP", lg.SEP), ("GFITC", lg.GFITC)):
                if name in prev and rec["250"][name]["gradient"]["log_hyper"] < GRAD_FLAT:
                    # already at a maximum after 250: the long run is that fit
                    fitted[name], out[name] = prev[name], {**rec["250"][name], "reused": True}
                    continue
                m, secs = _fit(lambda cls=cls: cls(Z=Z), kws[name], Xtr, ytr, split, prior_scale)
                fitted[name] = m
                o = m.history_.objective
                out[name] = dict(
                    nll=sr.nll_err(m, Xte, yte)[0],
                    objective=float(o[-1]),
                    rise_50=float(o[-1] - o[max(0, len(o) - 51)]),
                    steps=m.history_.steps,
                    seconds=secs,
                )
            g = copy.deepcopy(fitted["GFITC"])
            g.load_state_dict(fitted["SEP"].state_dict())
            out["GFITC_at_SEP"] = dict(
                objective=g.converge(Xtr, ytr) + float(g.log_prior()),
                nll=sr.nll_err(g, Xte, yte)[0],
            )
            for name in ("SEP", "GFITC"):
                if "gradient" not in out[name]:
                    out[name]["gradient"] = _map_gradient(
                        fitted["GFITC"], fitted[name].state_dict(), Xtr, ytr
                    )
            gap = _log_hyper(fitted["SEP"]) - _log_hyper(fitted["GFITC"])
            out["max_log_ratio"] = float(gap.abs().max())
            out["Z_apart"] = float((fitted["SEP"].Z - fitted["GFITC"].Z).detach().norm())
            rec[budget], prev = out, fitted
    rec["load1"] = os.getloadavg()[0]
    print(json.dumps(rec), flush=True)
    if quick:
        return
    res.setdefault("diagnose", []).append(rec)
    sr.save_part(PART, stamp(res))


COMMANDS = (
    "python benchmarks/sep_crabs_ridge.py --splits 20 --fracs 0.15",
    "python benchmarks/sep_crabs_ridge.py --long 5 --fracs 0.15",
    "python benchmarks/sep_crabs_ridge.py --splits 20 --fracs 0.25  # stopped after split 7",
)


def _summary(rs: list) -> dict:
    """Counts and extremes of the records ``rs`` of one M."""
    d = np.array([r["SEP"]["nll"] - r["GFITC"]["nll"] for r in rs])
    dp = np.array([r["SEP_prior"]["nll"] - r["GFITC_prior"]["nll"] for r in rs])
    g60 = np.array([abs(r["GFITC_60"]["nll"] - r["GFITC"]["nll"]) for r in rs])
    g100 = np.array([abs(r["GFITC_100"]["nll"] - r["GFITC"]["nll"]) for r in rs])
    gap = np.array([r["GFITC"]["log_evidence"] - r["SEP"]["log_evidence"] for r in rs])
    return {
        "n": len(rs),
        "within": int((abs(d) <= 0.01).sum()),
        "equal_hyp": max(abs(r["GFITC_at_SEP"]["nll"] - r["SEP"]["nll"]) for r in rs),
        "g60": int((g60 > 0.01).sum()),
        "g60_max": float(g60.max()),
        "g100": int((g100 > 0.01).sum()),
        "g100_max": float(g100.max()),
        "gap": (float(gap.min()), float(gap.max())),
        "var_sep": (min(r["SEP"]["variance"] for r in rs), max(r["SEP"]["variance"] for r in rs)),
        "var_gf": (
            min(r["GFITC"]["variance"] for r in rs),
            max(r["GFITC"]["variance"] for r in rs),
        ),
        "gf_ls3": sum(sum(v > 1e5 for v in r["GFITC"]["lengthscale"]) >= 3 for r in rs),
        "Z_gf": (min(r["GFITC"]["Z_moved"] for r in rs), max(r["GFITC"]["Z_moved"] for r in rs)),
        "Z_sep": max(r["SEP"]["Z_moved"] for r in rs),
        "ls_sep": max(max(r["SEP"]["lengthscale"]) for r in rs),
        "within_prior": int((abs(dp) <= 0.01).sum()),
        "prior_max": float(abs(dp).max()),
        "mean": {
            k: float(np.mean([r[k]["nll"] for r in rs]))
            for k in ("SEP", "GFITC", "SEP_prior", "GFITC_prior")
        },
        "gf_prior_stopped": sum(r["GFITC_prior"]["steps"] < 250 for r in rs),
        "scale": rs[0]["prior_scale"],
    }


def section_lines() -> list[str]:
    """The markdown of docs/results/sep.md's issue-23 diagnosis (empty without records);
    ``sep_reproduction.py --report`` includes it."""
    res = sr.load_part(PART)
    if not res or not res["runs"]:
        return []
    runs = sorted(res["runs"], key=lambda r: (r["frac"], r["split"]))
    table = [
        "| M | split | SEP / GFITC NLL | GFITC at SEP's hyp. | GFITC after 60 / 100 it. "
        "| log Z SEP / GFITC | variance SEP / GFITC | with prior: SEP / GFITC NLL | diff |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in runs:
        s, g, gs = r["SEP"], r["GFITC"], r["GFITC_at_SEP"]
        sp, gp = r["SEP_prior"], r["GFITC_prior"]
        table.append(
            f"| {r['M']} | {r['split']} | {s['nll']:.3f} / {g['nll']:.3f} | {gs['nll']:.3f} | "
            f"{r['GFITC_60']['nll']:.3f} / {r['GFITC_100']['nll']:.3f} | "
            f"{s['log_evidence']:.1f} / {g['log_evidence']:.1f} | "
            f"{s['variance']:.2g} / {g['variance']:.2g} | {sp['nll']:.3f} / {gp['nll']:.3f} | "
            f"{sp['nll'] - gp['nll']:+.3f} |"
        )
    bullets, sums = [], {}
    for frac in sorted({r["frac"] for r in runs}):
        rs = [r for r in runs if r["frac"] == frac]
        u = sums[rs[0]["M"]] = _summary(rs)
        m = u["mean"]
        bullets.append(
            f"- M = {rs[0]['M']} ({u['n']} splits): without priors SEP is within 0.01 of GFITC "
            f"on {u['within']}; GFITC at SEP's hyperparameters gives SEP's NLL to "
            f"{u['equal_hyp']:.1e} at most; GFITC stopped after 60 / 100 iterations differs "
            f"from its own final NLL by more than 0.01 on {u['g60']} / {u['g100']} splits "
            f"(largest {u['g60_max']:.3f} / {u['g100_max']:.3f}); GFITC's final log Z is "
            f"{u['gap'][0]:.1f} to {u['gap'][1]:.1f} nats above SEP's; signal variance SEP "
            f"{u['var_sep'][0]:.2g}-{u['var_sep'][1]:.2g}, GFITC "
            f"{u['var_gf'][0]:.2g}-{u['var_gf'][1]:.2g}; GFITC has three or more lengthscales "
            f"above 1e5 on {u['gf_ls3']} splits and moved its inducing inputs by "
            f"{u['Z_gf'][0]:.1g}-{u['Z_gf'][1]:.1g} (Frobenius norm), SEP's largest lengthscale "
            f"is {u['ls_sep']:.0f} and its inducing inputs moved by at most {u['Z_sep']:.1f}.  "
            f"With the prior SEP is within 0.01 of "
            f"GFITC on {u['within_prior']} of {u['n']} (largest difference "
            f"{u['prior_max']:.3f}); mean NLL SEP {m['SEP_prior']:.3f}, GFITC "
            f"{m['GFITC_prior']:.3f} (without priors {m['SEP']:.3f} / {m['GFITC']:.3f}); "
            f"GFITC's L-BFGS with the prior stopped on its tolerance before 250 iterations "
            f"on {u['gf_prior_stopped']} of {u['n']}."
        )
    for r in res.get("long", []):
        s_, g_, x_ = r["SEP"], r["GFITC"], r["GFITC_at_SEP"]
        bullets.append(
            f"- Run long with the priors (`--long {r['split']}`, M = {r['M']}): SEP after "
            f"{s_['steps']} sweeps log Z_q + log p = {s_['objective']:.2f} (after 250: "
            f"{s_['objective_250']:.2f}), test NLL {s_['nll']:.3f}; GFITC stopped on tol 1e-9 "
            f"after {g_['steps']} iterations at {g_['objective']:.2f} (after 250: "
            f"{g_['objective_250']:.2f}), NLL {g_['nll']:.3f}; GFITC's converged EP at SEP's "
            f"final parameters: {x_['objective']:.2f}, NLL {x_['nll']:.3f}."
        )
    p = res["provenance"]
    scale = runs[0]["prior_scale"]
    return [
        "### Issue 23, second pass: the approximation or the stopping point?",
        "",
        "Commands (records in sep_raw/ridge.json, the markdown from `--report`):",
        "",
        *[f"    {c}" for c in COMMANDS],
        "",
        "Per split, Table 1's data, seeds and inducing inputs (at every M: "
        "`sep_reproduction.split_data` repeats Table 1's draws; see the third pass), no "
        "hyperpriors (the seed's protocol): SEP (250 sweeps) and GFITC (L-BFGS, at most 250 "
        "iterations, tol 1e-7); "
        "GFITC's EP run to convergence at SEP's final hyperparameters and inducing inputs "
        "('GFITC at SEP's hyp.'); GFITC stopped after 60 and 100 iterations.  Then both "
        "again with the same hyperpriors (MAP-II, `set_prior`: kernel.variance ~ "
        f"LogNormal(0, {scale:g}), kernel.lengthscale ~ LogNormal(log sqrt(D), {scale:g}), "
        "centred on the initial values), under which the objective has a maximum.  "
        "Runs: M = 30 at commit 231d3af (26 Nov 2026; SEP and GFITC code of commit 73c992a); "
        "M = 50 and 100, with Table 1's inducing inputs, and the diagnosis of the third pass "
        f"at commit {p['commit']} ({p['date'][:10]}; the +dirty part, if marked, is docs, "
        "tests and this script's report code); "
        f"{p['cpu']}, {p['cpu_count']} cores, threads 1, one benchmark process under nice "
        "beside other work (1-minute load average "
        f"{min(r['load1'] for r in runs):.0f}-{max(r['load1'] for r in runs):.0f}).",
        "",
        *table,
        "",
        *bullets,
        "",
        "Reading: (1) at equal hyperparameters the two approximations predict the same: "
        "GFITC's EP at SEP's final hyperparameters and inducing inputs reproduces SEP's "
        "test NLL to 1e-3 or better on every split, so none of the per-split differences "
        "is the approximation.  (2) Without priors the two stop at different points of a "
        "ridge on which the EP evidence has no maximum: GFITC's L-BFGS switches three of "
        "the five inputs off (lengthscales above 1e5), raises the signal variance to about "
        "1e7-1e8 and moves inducing inputs out to about 1e7 before its relative tolerance "
        "fires; SEP's 250 sweeps stop at variances of 1e2-1e4 with every lengthscale below "
        "about 30, 2-5 nats of evidence lower.  GFITC's own NLL depends on where it stops by "
        "more than 0.01 on several splits (the 60-iteration column); at sweep 250 SEP's "
        "evidence still rises by 1e-3 to 6e-3 relative per sweep (splits 0 and 3 at M = 30), "
        "so a stopping rule on the evidence change per sweep would not fire within the "
        "budget; and on split 0 SEP run to convergence passes GFITC's evidence with a worse "
        "NLL (above).  No step or stopping rule can therefore single out GFITC's point.  "
        "(3) With the same priors on both the objective has a maximum, and after 250 "
        "iterations SEP is within 0.01 of GFITC on the counts above (mean NLL higher than "
        "without priors: this prior is a diagnostic, not the Table 1 protocol, as the "
        "seed's fits have none); the splits where they still differ are diagnosed one by "
        "one in the third pass.  The issue's target, SEP within 0.01 "
        "of GFITC on every split without priors, compares where two optimisers stop on an "
        "unbounded ridge, not the two approximations; it is not met, and these "
        "measurements are why.",
        "",
        *third_pass_lines(res, runs),
    ]


EQUAL_COMMANDS = (
    "python benchmarks/sep_crabs_ridge.py --equal --fixed-z --first-split 0 --splits 1 "
    "--fracs 0.25",
    "python benchmarks/sep_crabs_ridge.py --equal --fixed-z --first-split 5 --splits 6 "
    "--fracs 0.15",
    "python benchmarks/sep_crabs_ridge.py --equal --fixed-z --splits 20 --fracs 0.15",
)
DIAGNOSE_COMMANDS = (
    "python benchmarks/sep_crabs_ridge.py --diagnose 0 --fracs 0.25 --long-steps 1000",
)


def _verdict(d: dict) -> str:
    """One split's reading from its diagnosis record (thresholds in the page's text)."""
    a, b = d["250"], d["long"]
    close_long = abs(b["SEP"]["nll"] - b["GFITC"]["nll"]) <= 0.01 and b["max_log_ratio"] < 0.1
    if close_long:
        slow = min(("SEP", "GFITC"), key=lambda n: a[n]["objective_map"])
        return f"step budget ({slow} short of the maximum at 250)"
    near = abs(b["SEP"]["objective_map"] - b["GFITC"]["objective_map"])
    if b["max_log_ratio"] < 0.1 and near < 0.1:
        return (
            f"inducing inputs: kernel hyperparameters agree (log ratio "
            f"{b['max_log_ratio']:.2f}), MAP objectives {near:.2f} nats apart, inducing "
            f"inputs {b['Z_apart']:.1f} apart (Frobenius)"
        )
    flat = [n for n in ("SEP", "GFITC") if b[n]["gradient"]["log_hyper"] < GRAD_FLAT]
    if len(flat) == 2:
        return "two maxima (same start, different paths)"
    moving = [n for n in ("SEP", "GFITC") if n not in flat]
    return f"{' and '.join(moving)} not at a maximum after the long run"


GRAD_FLAT = 1e-2  # a log-coordinate gradient below this counts as at a maximum


def _steps(entry: dict) -> str:
    return (
        f"{entry['steps']} (flat at 250, not re-run)"
        if entry.get("reused")
        else str(entry["steps"])
    )


def equal_counts(res: dict | None = None, t1: dict | None = None) -> list[dict]:
    """Per M, over the splits with same-prior fits (full and ``--equal`` records): how many
    are within 0.01 without priors (Table 1's records of those splits) and with the same
    priors after 250 iterations, the largest difference with priors, and the mean NLLs."""
    res = res if res is not None else (sr.load_part(PART) or {"runs": []})
    if t1 is None:
        t1 = {
            (r["frac"], r["split"], r["method"]): r
            for r in sr.table1_runs()
            if r["data"] == "crabs"
        }
    equal = res["runs"] + res.get("equal", [])
    out = []
    for frac in sorted({r["frac"] for r in equal}):
        rs = [r for r in equal if r["frac"] == frac]
        dp = np.array([r["SEP_prior"]["nll"] - r["GFITC_prior"]["nll"] for r in rs])
        ks = [r["split"] for r in rs]
        d0 = np.array([t1[(frac, k, "SEP")]["nll"] - t1[(frac, k, "GFITC")]["nll"] for k in ks])
        out.append(
            {
                "frac": frac,
                "M": rs[0]["M"],
                "n": len(rs),
                "within": int((abs(d0) <= 0.01).sum()),
                "within_prior": int((abs(dp) <= 0.01).sum()),
                "prior_max": float(abs(dp).max()),
                "mean": [
                    float(np.mean([t1[(frac, k, m)]["nll"] for k in ks])) for m in ("SEP", "GFITC")
                ],
                "mean_prior": [
                    float(np.mean([r[f"{m}_prior"]["nll"] for r in rs])) for m in ("SEP", "GFITC")
                ],
            }
        )
    return out


def third_pass_lines(res: dict, runs: list) -> list[str]:
    """Issue 23's third pass: Table 1's inducing inputs at every M, the equal-footing
    counts, and the per-split diagnosis of what remains (``--diagnose``)."""
    t1 = {
        (r["frac"], r["split"], r["method"]): r for r in sr.table1_runs() if r["data"] == "crabs"
    }
    same = [
        abs(r[m]["nll"] - t1[(r["frac"], r["split"], m)]["nll"])
        for r in runs
        if r.get("Z") == "table1"
        for m in ("SEP", "GFITC")
        if (r["frac"], r["split"], m) in t1
    ]
    old = res.get("superseded_other_Z", {}).get("runs", [])
    equal = runs + res.get("equal", [])
    counts = [
        "| M | splits | within 0.01, no priors (Table 1's protocol) | within 0.01, same "
        "priors, 250 it. | largest difference, same priors | mean NLL SEP / GFITC, no priors "
        "| mean NLL SEP / GFITC, same priors |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in equal_counts(res, t1):
        counts.append(
            f"| {c['M']} | {c['n']} | {c['within']} | {c['within_prior']} "
            f"| {c['prior_max']:.3f} | {c['mean'][0]:.3f} / {c['mean'][1]:.3f} "
            f"| {c['mean_prior'][0]:.3f} / {c['mean_prior'][1]:.3f} |"
        )
    # at every split: the MAP objective at SEP's point (EP converged) against GFITC's
    withz = [r for r in equal if "GFITC_prior_at_SEP" in r]
    below = [r["GFITC_prior"]["objective"] - r["GFITC_prior_at_SEP"]["objective"] for r in withz]
    lines = [
        "### Issue 23, third pass: Table 1's inducing inputs at every M, and an equal footing",
        "",
        "Commands (records in sep_raw/ridge.json, `equal` and `diagnose`):",
        "",
        *[f"    {c}" for c in EQUAL_COMMANDS + DIAGNOSE_COMMANDS],
        "",
        "**Inducing inputs.** Table 1 draws the inducing inputs of 15%, 25% and 50% one "
        "after the other from the generator that drew the split's permutation (each a "
        "random subset of the training inputs, shared by the methods: the seed's "
        "protocol); `split_data` now repeats those draws, and `table1` takes its data from "
        "it.  The second pass's M = 50 and 100 rows are re-run with them: without priors "
        "they reproduce the Table 1 records (sep_raw/table1-i23.json) to "
        f"{max(same) if same else float('nan'):.1e} in test NLL ({len(same)} SEP and GFITC "
        "fits), so the 'no priors' counts below are the Table 1 comparison itself.  (The "
        f"earlier rows on another draw, {len(old)} records, are kept in ridge.json under "
        "`superseded_other_Z`.)",
        "",
        "**An equal footing.** Without priors neither method has an optimum to converge "
        "to: the EP evidence rises along the ridge (second pass), and SEP run to "
        "convergence passes GFITC's evidence with a worse NLL; 'each at its converged "
        "optimum of the same objective' exists only for an objective with a maximum.  "
        "GFITC takes the same hyperpriors as SEP with no maths of its own: `set_prior` is "
        "the models' shared `HyperpriorMixin`, and the shared fit loop adds "
        "`log_prior()` to GFITC's EP evidence and its gradient, as SEP's step adds it to "
        "its own (tests/integration/test_sep_priors.py checks GFITC's MAP value and step "
        "gradient against the log-normal densities and finite differences of the "
        "re-converged evidence).  Two protocols on that footing were measured, both MAP-II "
        "(not Table 1's protocol: the seed's fits have no priors; NLLs higher than "
        "Table 1's), the same initial values, 250 iterations each (the seed's budget): "
        "**(a)** the same priors, inducing inputs learned from Table 1's draw (as in the "
        "seed); **(b)** the same priors, inducing inputs held at Table 1's draw for both.  "
        "(a) per M, with the no-prior counts of the same splits beside it:",
        "",
        *counts,
        "",
    ]
    if below:
        lines += [
            "At every split with the same priors where it was recorded ("
            + ", ".join(
                f"M = {M}: {sum(r['M'] == M for r in withz)} splits"
                for M in sorted({r["M"] for r in withz})
            )
            + "), the MAP objective at SEP's point after 250 sweeps, "
            "with EP converged there, against GFITC's after 250 L-BFGS iterations: GFITC's "
            f"is higher on {sum(b > 0 for b in below)} of {len(below)}, by "
            f"{min(below):+.2f} to {max(below):+.2f} nats (median {np.median(below):+.2f}).",
            "",
        ]
    zs = [r["SEP_prior"]["Z_moved"] for r in equal]
    zg = [r["GFITC_prior"]["Z_moved"] for r in equal]
    lr = [
        float(
            np.abs(
                np.log(
                    np.array(r["SEP_prior"]["lengthscale"] + [r["SEP_prior"]["variance"]])
                    / np.array(r["GFITC_prior"]["lengthscale"] + [r["GFITC_prior"]["variance"]])
                )
            ).max()
        )
        for r in equal
    ]
    gaps = [r["SEP_prior"]["objective"] - r["GFITC_prior_at_SEP"]["objective"] for r in withz]
    lines += [
        f"Where the two end, over the {len(equal)} same-prior fits of (a): the kernel "
        f"hyperparameters agree (largest |log ratio| of variance and lengthscales "
        f"{min(lr):.2f} to {max(lr):.2f}, median {np.median(lr):.2f}), the inducing inputs "
        f"do not: GFITC's L-BFGS moved them by {min(zg):.1f} to {max(zg):.1f} (Frobenius "
        f"norm from Table 1's draw), SEP's step by {min(zs):.1f} to {max(zs):.1f}.  SEP's "
        "own last-sweep objective differs from the converged EP value at its point by "
        + (f"{min(gaps):+.4f} to {max(gaps):+.4f} nats" if gaps else "(not recorded)")
        + " (EP's convergence is not what differs).",
        "",
    ]
    fz = sorted(res.get("equal_fixed_z", []), key=lambda r: (r["frac"], r["split"]))
    if fz:
        free = {(r["frac"], r["split"]): r for r in equal}
        rows_fz = [
            "| M | split | learned inducing inputs: NLL SEP / GFITC | diff | fixed at Table 1's: "
            "NLL SEP / GFITC | diff | fixed: MAP objective SEP* / GFITC |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in fz:
            f = free.get((r["frac"], r["split"]))
            fr = (
                "- | -"
                if f is None
                else f"{f['SEP_prior']['nll']:.3f} / {f['GFITC_prior']['nll']:.3f} | "
                f"{f['SEP_prior']['nll'] - f['GFITC_prior']['nll']:+.3f}"
            )
            rows_fz.append(
                f"| {r['M']} | {r['split']} | {fr} | {r['SEP_prior']['nll']:.3f} / "
                f"{r['GFITC_prior']['nll']:.3f} | "
                f"{r['SEP_prior']['nll'] - r['GFITC_prior']['nll']:+.3f} | "
                f"{r['GFITC_prior_at_SEP']['objective']:.3f} / "
                f"{r['GFITC_prior']['objective']:.3f} |"
            )
        summary = []
        for frac in sorted({r["frac"] for r in fz}):
            rs = [r for r in fz if r["frac"] == frac]
            d = np.array([r["SEP_prior"]["nll"] - r["GFITC_prior"]["nll"] for r in rs])
            o = np.array(
                [r["GFITC_prior"]["objective"] - r["GFITC_prior_at_SEP"]["objective"] for r in rs]
            )
            summary.append(
                f"- M = {rs[0]['M']} ({len(rs)} splits: "
                f"{', '.join(str(r['split']) for r in rs)}): SEP within 0.01 of GFITC on "
                f"{int((abs(d) <= 0.01).sum())} of {len(rs)} (largest |difference| "
                f"{float(abs(d).max()):.1e}); GFITC's MAP objective minus SEP*'s "
                f"{float(o.min()):+.1e} to {float(o.max()):+.1e} nats; GFITC's L-BFGS stopped "
                f"on its tolerance after {min(r['GFITC_prior']['steps'] for r in rs)}-"
                f"{max(r['GFITC_prior']['steps'] for r in rs)} iterations."
            )
        lines += [
            "(b) the same priors with the inducing inputs held at Table 1's draw for both "
            "(`--equal --fixed-z`, 250 iterations; the splits listed are those that finished "
            "on the shared machine):",
            "",
            *summary,
            "",
            *rows_fz,
            "",
        ]
    diag = sorted(res.get("diagnose", []), key=lambda d: (d["frac"], d["split"]))
    if diag:
        rows = [
            "| M | split | NLL SEP / GFITC, 250 it. | MAP objective SEP* / GFITC, 250 it. "
            "| EP gap | rise, last 50 it. SEP / GFITC | gradient SEP / GFITC, 250 it. "
            "| long: steps SEP / GFITC | long: NLL SEP / GFITC | long: MAP objective SEP* / "
            "GFITC | long: gradient SEP / GFITC | long: max log ratio | reading |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for d in diag:
            for b in ("250", "long"):
                d[b]["SEP"]["objective_map"] = d[b]["GFITC_at_SEP"]["objective"]
                d[b]["GFITC"]["objective_map"] = d[b]["GFITC"]["objective"]
            a, b = d["250"], d["long"]
            rows.append(
                f"| {d['M']} | {d['split']} | {a['SEP']['nll']:.3f} / {a['GFITC']['nll']:.3f} "
                f"| {a['SEP']['objective_map']:.3f} / {a['GFITC']['objective']:.3f} "
                f"| {a['SEP']['objective'] - a['SEP']['objective_map']:+.3f} "
                f"| {a['SEP']['rise_50']:.3f} / {a['GFITC']['rise_50']:.3f} "
                f"| {a['SEP']['gradient']['log_hyper']:.1e} / "
                f"{a['GFITC']['gradient']['log_hyper']:.1e} "
                f"| {_steps(b['SEP'])} / {_steps(b['GFITC'])} "
                f"| {b['SEP']['nll']:.3f} / {b['GFITC']['nll']:.3f} "
                f"| {b['SEP']['objective_map']:.3f} / {b['GFITC']['objective']:.3f} "
                f"| {b['SEP']['gradient']['log_hyper']:.1e} / "
                f"{b['GFITC']['gradient']['log_hyper']:.1e} | {b['max_log_ratio']:.2f} "
                f"| {_verdict(d)} |"
            )
        lines += [
            "**What remains.** Each split where the two differ by more than 0.01 with the "
            "same priors after 250 iterations, run again (`--diagnose`): at 250 iterations "
            "and long (SEP `--long-steps` sweeps, 1,000 here; GFITC's L-BFGS to a relative "
            "change of 1e-9 or as many iterations).  SEP* = the MAP objective "
            "(log Z_EP + log p) at SEP's hyperparameters and inducing inputs with EP run "
            "to convergence there (GFITC's EP; the two share fixed points); 'EP gap' = "
            "SEP's own last-sweep value minus SEP*, what SEP's not yet converged sites "
            "contribute; 'rise' = the objective's increase over the last 50 iterations; "
            "'gradient' = the largest entry of the MAP objective's gradient over the "
            "variance and lengthscales in log coordinates at the final point, EP converged "
            f"to 1e-10 (below {GRAD_FLAT:g}: at a maximum); 'max log ratio' = the largest "
            "|log| ratio of the two methods' variance and lengthscales after the long "
            "runs.  Reading: 'step budget' where the long runs agree (NLL within 0.01, log "
            "ratio below 0.1), naming the method with the lower MAP objective at 250; "
            "'inducing inputs' where the long runs' kernel hyperparameters agree (log ratio "
            "below 0.1) and their MAP objectives are within 0.1 nats but the NLLs are not: "
            "the two end at different inducing inputs; 'two maxima' where both long runs "
            "end with a flat gradient at different hyperparameters.",
            "",
            *rows,
            "",
        ]
    lines += _third_reading(res, equal, fz)
    return lines


def _third_reading(res: dict, equal: list, fz: list) -> list[str]:
    """The third pass's reading; its numbers come from the records."""
    n_fz = len(fz)
    ok_fz = sum(abs(r["SEP_prior"]["nll"] - r["GFITC_prior"]["nll"]) <= 0.01 for r in fz)
    big = max((abs(r["SEP_prior"]["nll"] - r["GFITC_prior"]["nll"]) for r in fz), default=0.0)
    ms_a = ", ".join(
        f"{sum(r['frac'] == f for r in equal)} splits at M = "
        f"{next(r['M'] for r in equal if r['frac'] == f)}"
        for f in sorted({r["frac"] for r in equal})
    )
    old = res.get("superseded_other_Z", {}).get("runs", [])
    other = "; ".join(
        f"M = {M}: {sum(abs(r['SEP_prior']['nll'] - r['GFITC_prior']['nll']) <= 0.01 for r in rs)}"
        f" of {len(rs)}"
        for M in sorted({r["M"] for r in old})
        for rs in [[r for r in old if r["M"] == M]]
    )
    return [
        "Reading.  (1) Table 1's crabs records were already on Table 1's inducing inputs, "
        "so the no-prior per-split counts stand (first table of this section): under "
        "Table 1's protocol the issue's target is not met, for the reasons of the second "
        "pass (no maximum to converge to).  (2) With the same priors and learned inducing "
        f"inputs, (a), measured on {ms_a} (the other splits at M = 50 and all of M = 100 "
        "were not re-run on Table 1's draw: the 2-core machine was shared with a long "
        "timing benchmark, and this page's runs got a few per cent of a core; on another "
        f"draw of the same size the second pass had, with the same priors, {other}), what "
        "remains is not the approximation (GFITC's EP at SEP's point gives SEP's NLL), "
        "not EP's convergence, and not the kernel hyperparameters (they agree closely), "
        "but the inducing inputs: the MAP objective has no prior on them and is nearly "
        "flat along them, GFITC's L-BFGS moves them far and SEP's step little, and the "
        "test NLL depends on where they end (the diagnosed split: SEP run to 1,000 sweeps "
        "ends 0.02 nats below GFITC's objective, its NLL unchanged).  SEP is also still "
        "climbing at 250 sweeps (GFITC's objective is higher on every split with the "
        "record): a step budget, but in directions that barely move the objective; on "
        "split 5 at M = 30 the second pass's long run shows the other order (SEP's 1,500 "
        "sweeps end 0.15 nats above where GFITC's L-BFGS stops), so neither optimiser "
        "is the better one on that flat region.  (3) With the same priors and the "
        "inducing inputs held at Table 1's draw, (b), the objective is over the kernel's "
        "six hyperparameters only, and the two reach the same maximum: within 0.01 on "
        f"{ok_fz} of {n_fz} measured splits (largest difference {big:.1e}).  That is the "
        "comparison on an equal footing, and on it SEP matches GFITC split by split at "
        "250 iterations; it differs from the seed's protocol (priors, inducing inputs not "
        "learned), which is why Table 1's rows stay as measured.",
        "",
    ]


def report() -> None:
    lines = section_lines()
    print("\n".join(lines) if lines else "no records: run first")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--splits", type=int, default=20, help="run splits first-split..splits-1")
    ap.add_argument("--first-split", type=int, default=0)
    ap.add_argument("--fracs", default="0.15", help="M as fractions of all instances")
    ap.add_argument(
        "--prior-scale",
        type=float,
        default=1.0,
        help="log-normal prior scale on variance and lengthscales",
    )
    ap.add_argument(
        "--long",
        type=int,
        default=None,
        metavar="SPLIT",
        help="run split SPLIT (first of --fracs) with the priors to convergence",
    )
    ap.add_argument(
        "--diagnose",
        default=None,
        metavar="SPLITS",
        help="comma-separated splits (first of --fracs): the residual-gap diagnosis with priors",
    )
    ap.add_argument(
        "--equal",
        action="store_true",
        help="only the same-prior fits, for the splits without a full record",
    )
    ap.add_argument(
        "--fixed-z",
        action="store_true",
        help="with --equal: both methods keep Table 1's inducing inputs",
    )
    ap.add_argument("--long-steps", type=int, default=1500)
    ap.add_argument(
        "--quick", action="store_true", help="1 split, 20 steps, and a 20/40-step diagnosis"
    )
    ap.add_argument("--report", action="store_true", help="print the markdown from the records")
    args = ap.parse_args(argv)
    if args.report:
        report()
        return
    torch.set_num_threads(1)
    fracs = [float(f) for f in args.fracs.split(",")]
    if args.long is not None:
        long_run(args.long, fracs[0], args.prior_scale, args.long_steps)
        return
    if args.equal:
        equal_footing(args.splits, args.first_split, fracs, args.prior_scale, args.fixed_z)
        return
    if args.diagnose is not None:
        for split in (int(k) for k in args.diagnose.split(",")):
            diagnose(split, fracs[0], args.prior_scale, args.long_steps)
        return
    if args.quick:
        run(1, 0, fracs[:1], args.prior_scale, True)
        diagnose(0, fracs[0], args.prior_scale, 40, quick=True)
        return
    run(args.splits, args.first_split, fracs, args.prior_scale, False)


if __name__ == "__main__":
    main()
