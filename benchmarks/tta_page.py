"""The time-to-accuracy page (issue 24): time to a level, the target ratios, merging the
JSONs of several runs, the table and the figures.  Pure logic (no fits), imported by
``time_to_accuracy.py`` and by its test.

A row is one (set, split, M) of one run: ``curves`` (label -> seconds, steps, nlpd of the
race), ``tol`` (the level is the best race NLPD plus ``tol``), ``budget`` and, where the
default fit ran, ``default`` (its curve, total seconds, final NLPD, reason).  Rows of the
committed Gaussian runs predate ``tol``, ``budget``, ``likelihood`` and ``default``: they
are filled from their file's ``args`` (:func:`normalise_rows`).
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

#: the race's configurations: (label, library, setup options); the page's column order
CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("latentgp Adam", "latentgp", {"optimizer": "adam"}),
    ("latentgp natural (gamma 0.1)", "latentgp", {"optimizer": "ngd", "ngd_lr": 0.1}),
    ("latentgp natural, alternating (gamma 0.1)", "latentgp",
     {"optimizer": "ngd", "ngd_lr": 0.1, "ngd_alternate": True}),
    ("GPyTorch Adam", "GPyTorch", {"optimizer": "adam"}),
    ("GPyTorch NGD (0.1)", "GPyTorch", {"optimizer": "ngd", "ngd_lr": 0.1}),
    ("GPflow Adam", "GPflow", {"optimizer": "adam"}),
    ("GPflow NaturalGradient (0.1)", "GPflow", {"optimizer": "ngd", "ngd_lr": 0.1}),
]
LIBRARY = {label: lib for label, lib, _ in CONFIGS}
DEFAULT_LABEL = "latentgp default fit"
#: the issue's tolerances: regression 0.01 nats, classification and counts 0.005
TOL = {"gaussian": 0.01, "bernoulli": 0.005, "poisson": 0.005}


def first_time_below(curve: dict[str, list], level: float) -> float | None:
    """The first ``seconds`` at which ``nlpd <= level`` (None: never)."""
    for s, v in zip(curve["seconds"], curve["nlpd"], strict=True):
        if v <= level:
            return float(s)
    return None


def best_nlpd(row: dict[str, Any]) -> float:
    """The best test NLPD any race configuration reached (the default fit excluded, so that
    merging a default-only run into a row leaves its level alone)."""
    return min(min(c["nlpd"]) for c in row["curves"].values())


def summary(row: dict[str, Any]) -> dict[str, Any]:
    """Times to the level and the two target ratios of one row.

    ``ratio_peer``: best peer time / latentgp's best time (the 3x target); where no peer
    configuration reached the level, a lower bound (``ratio_peer_bound``: the shortest
    time a peer configuration trained without reaching it / latentgp's best time).
    ``ratio_default``: the default fit's time to the level / latentgp's best time (the
    1.5x target), None where either did not reach it or the default did not run."""
    best = best_nlpd(row)
    level = best + row["tol"]
    reach = {lab: first_time_below(c, level) for lab, c in row["curves"].items()}
    if all(t == 0 for t in reach.values()):
        # the level is the untrained model's (every race starts from the same state): no
        # configuration got better than the start within the budget, so there is no time
        # to compare; the row says so instead of showing zeros
        return {"best": best, "level": level, "reach": dict.fromkeys(reach),
                "lg_best": None, "peer_best": None, "ratio_peer": None,
                "ratio_peer_bound": None, "ratio_default": None, "default_reach": None,
                "no_progress": True}
    lg_times = [t for lab, t in reach.items() if LIBRARY.get(lab) == "latentgp" and t is not None]
    peer = {lab: t for lab, t in reach.items() if LIBRARY.get(lab) not in (None, "latentgp")}
    peer_times = [t for t in peer.values() if t is not None]
    lg_best = min(lg_times) if lg_times else None
    out: dict[str, Any] = {"best": best, "level": level, "reach": reach, "lg_best": lg_best,
                           "peer_best": min(peer_times) if peer_times else None,
                           "ratio_peer": None, "ratio_peer_bound": None, "ratio_default": None,
                           "default_reach": None}
    if lg_best is not None and lg_best > 0:
        if peer_times:
            out["ratio_peer"] = min(peer_times) / lg_best
        elif peer:
            trained = [row["curves"][lab]["seconds"][-1] for lab in peer]
            out["ratio_peer_bound"] = min(trained) / lg_best
    d = row.get("default")
    if d is not None:
        out["default_reach"] = first_time_below(d["curve"], level)
        if out["default_reach"] is not None and lg_best:
            out["ratio_default"] = out["default_reach"] / lg_best
    return out


def trailing_mean(values: list[float], window: int) -> list[float]:
    """Each score replaced by the mean of it and the ``window - 1`` scores before it (fewer
    at the start of the curve)."""
    v = np.asarray(values, dtype=float)
    c = np.concatenate([[0.0], np.cumsum(v)])
    i = np.arange(1, len(v) + 1)
    lo = np.maximum(0, i - window)
    return ((c[i] - c[lo]) / (i - lo)).tolist()


def smoothed(row: dict[str, Any], window: int) -> dict[str, Any]:
    """A copy of ``row`` whose race curves and default curve read the trailing mean of
    ``window`` consecutive test scores (the level and times of :func:`summary` then come
    from the averaged curves): a reading that one lucky or unlucky score cannot move,
    where the scores of a run move by about the tolerance between evaluations."""
    def one(c: dict[str, list]) -> dict[str, list]:
        return {**c, "nlpd": trailing_mean(c["nlpd"], window)}

    out = {**row, "curves": {lab: one(c) for lab, c in (row.get("curves") or {}).items()}}
    if row.get("default"):
        out["default"] = {**row["default"], "curve": one(row["default"]["curve"])}
    return out


def normalise_rows(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of one run's JSON with ``likelihood``, ``tol``, ``budget``, ``default``
    and ``source`` (its command) filled in where an older run lacks them."""
    args, prov = run.get("args", {}), run.get("provenance", {})
    rows = []
    for r in run["rows"]:
        r = dict(r)
        r.setdefault("likelihood", "gaussian")
        if r.get("tol") is None:
            r["tol"] = args.get("tol") or TOL[r["likelihood"]]
        if r.get("budget") is None and args.get("budget") is not None:
            large = args.get("budget_large")
            r["budget"] = args["budget"] if r["M"] < 1024 or large is None else large
        r.setdefault("default", None)
        r.setdefault("chunk", args.get("chunk"))
        r.setdefault("clock", args.get("clock", "wall"))  # the first harness timed wall seconds
        r.setdefault("source", prov.get("command"))
        r.setdefault("commit", prov.get("commit"))
        rows.append(r)
    return rows


def compact(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its curves' seconds rounded to 10 ms and NLPDs to 1e-4 nats (a page of
    some 15 rows stays under the results folder's 1 MB limit); changes ``row`` in place."""
    curves = list((row.get("curves") or {}).values())
    if row.get("default"):
        curves.append(row["default"]["curve"])
    for c in curves:
        for key, digits in (("seconds", 2), ("wall", 2), ("nlpd", 4)):
            if key in c:
                c[key] = [round(float(v), digits) if np.isfinite(v) else float(v)
                          for v in c[key]]
    return row


def merge(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of several runs, one per (set, split, M) in first-seen order: a later race row
    replaces an earlier one (keeping the earlier default fit if it has none), and a
    default-only row (``--only-default``) sets the default fit of the race row."""
    by_key: dict[tuple, dict[str, Any]] = {}
    for run in runs:
        for r in normalise_rows(run):
            key = (r["set"], r["split"], r["M"])
            old = by_key.get(key)
            if r.get("default_only"):
                if old is None:
                    by_key[key] = r
                else:
                    old["default"] = r["default"]
                    old["default_source"] = r.get("source")
            else:
                if old is not None and r.get("default") is None and old.get("default"):
                    r["default"] = old["default"]
                    r["default_source"] = old.get("default_source", old.get("source"))
                by_key[key] = r
    return [compact(r) for r in by_key.values()]


def fmt_time(t: float | None) -> str:
    return "not reached" if t is None else f"{t:.1f}"


def _ratio(s: dict[str, Any]) -> str:
    if s.get("no_progress"):
        return "n/a (no configuration improved on the start within the budget)"
    if s["lg_best"] is None:
        return "latentgp not reached"
    if s["lg_best"] == 0:
        return "n/a (level met at the start)"
    if s["ratio_peer"] is not None:
        return f"{s['ratio_peer']:.2f}x"
    if s["ratio_peer_bound"] is not None:
        return f"> {s['ratio_peer_bound']:.2f}x (no peer reached)"
    return "no peer ran"


def _default_cells(row: dict[str, Any], s: dict[str, Any]) -> list[str]:
    d = row.get("default")
    if d is None:
        old = row.get("default_fit")  # committed runs: wall seconds of the fit, no curve
        if old:
            return [f"no curve (fit: {old['seconds']:.1f} wall s, NLPD {old['nlpd']:.3f})",
                    "n/a", "n/a"]
        return ["not run", "not run", "n/a"]
    total = f"{d['total_seconds']:.1f} ({d['final_nlpd']:.3f}, {d['reason']})"
    if s.get("no_progress"):
        return ["n/a (no race level)", total, "n/a"]
    if d.get("every"):
        total += f", scored every {d['every']} steps"
    return [fmt_time(s["default_reach"]), total, _default_ratio(s)]


def _default_ratio(s: dict[str, Any]) -> str:
    """The default's ratio cell of a row's summary ``s``."""
    if s["ratio_default"] is not None:
        return f"{s['ratio_default']:.2f}x"
    return "default not reached" if s["default_reach"] is None else "latentgp not reached"


def table(rows: list[dict[str, Any]]) -> list[str]:
    labels = [c[0] for c in CONFIGS]
    out = [
        "| set | likelihood | split | M | N | best NLPD | level | " + " | ".join(labels)
        + f" | best peer / latentgp best (3x) | {DEFAULT_LABEL}: to level | "
        "default: total (final NLPD, stop) | default / latentgp best (1.5x) |",
        "|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(labels) + "---:|---:|---|---:|",
    ]
    for r in rows:
        if not r.get("curves"):
            continue  # a default-only row without its race
        s = summary(r)
        cells = [fmt_time(s["reach"][lab]) if lab in s["reach"] else "skipped" for lab in labels]
        if s.get("no_progress"):
            cells = ["no better than the start" if lab in s["reach"] else "skipped"
                     for lab in labels]
        wall = " (wall s)" if r.get("clock") == "wall" else ""
        out.append(
            f"| {r['set']}{wall} | {r['likelihood']} | {r['split']} | {r['M']} | "
            f"{r.get('n_train', '')} | {s['best']:.3f} | +{r['tol']:g} | "
            + " | ".join(cells) + f" | {_ratio(s)} | " + " | ".join(_default_cells(r, s)) + " |"
        )
    return out


def smoothed_table(rows: list[dict[str, Any]], window: int) -> list[str]:
    """The target ratios of every row read from curves averaged over ``window`` scores
    (:func:`smoothed`)."""
    out = [
        f"| set | split | M | level ({window}-score mean) | latentgp best | best peer "
        "| best peer / latentgp best (3x) | default | default / latentgp best (1.5x) "
        "| default scored every |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if not r.get("curves"):
            continue
        s = summary(smoothed(r, window))
        if s.get("no_progress"):
            out.append(f"| {r['set']} | {r['split']} | {r['M']} | {s['level']:.3f} | "
                       "no configuration improved on the start | | n/a | | n/a | |")
            continue
        d = r.get("default")
        if d is None:
            default, ratio = "not run", "n/a"
        else:
            default, ratio = fmt_time(s["default_reach"]), _default_ratio(s)
        every = (d.get("every") or 50) if d else ""
        out.append(
            f"| {r['set']} | {r['split']} | {r['M']} | {s['level']:.3f} | "
            f"{fmt_time(s['lg_best'])} | {fmt_time(s['peer_best'])} | {_ratio(s)} | "
            f"{default} | {ratio} | {every} |"
        )
    return out


def figure_name(row: dict[str, Any]) -> str:
    return f"tta_{row['set']}_s{row['split']}_M{row['M']}.png"


def plot(rows: list[dict[str, Any]], out_dir: str) -> list[str]:
    """One figure per row: test NLPD against training CPU seconds (log x), the level
    dotted, the default fit dashed black."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    files = []
    for r in rows:
        if not r.get("curves"):
            continue
        s = summary(r)
        fig, ax = plt.subplots(figsize=(6, 4))
        for label, c in r["curves"].items():
            ax.plot(np.maximum(c["seconds"], 1e-2), c["nlpd"], label=label)
        d = r.get("default")
        if d is not None and d["curve"]["seconds"]:
            ax.plot(np.maximum(d["curve"]["seconds"], 1e-2), d["curve"]["nlpd"], "k--",
                    label=DEFAULT_LABEL)
        ax.axhline(s["level"], color="k", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_ylim(s["best"] - 5 * r["tol"], s["best"] + 0.6)
        ax.set_xlabel("training CPU seconds")
        ax.set_ylabel("test NLPD")
        ax.set_title(f"{r['set']} ({r['likelihood']}) split {r['split']}, M = {r['M']}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        name = figure_name(r)
        fig.savefig(os.path.join(out_dir, name), dpi=90)
        plt.close(fig)
        files.append(name)
    return files


def load_runs(paths: list[str]) -> list[dict[str, Any]]:
    runs = []
    for p in paths:
        with open(p) as fh:
            runs.append(json.load(fh))
    return runs
