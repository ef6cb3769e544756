"""The time-to-accuracy page's logic (``benchmarks/tta_page.py``, issue 24): the time to
the level, the two target ratios (with 'not reached' as a lower bound or as missing), and
the merge of several runs' JSONs, including rows of the committed harness that lack the
likelihood, tolerance and default-fit curve and a default-only run merged into a race."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tp():
    spec = importlib.util.spec_from_file_location("tta_page", ROOT / "benchmarks" / "tta_page.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _curve(seconds, nlpd):
    return {"seconds": list(seconds), "steps": list(range(len(seconds))), "nlpd": list(nlpd)}


def _race(peer_reaches: bool = True) -> dict:
    peer = [1.0, 0.8, 0.55] if peer_reaches else [1.0, 0.9, 0.8]
    return {
        "set": "s", "split": 0, "M": 256,
        "curves": {
            "latentgp Adam": _curve([0, 10, 20], [1.0, 0.7, 0.6]),
            "latentgp natural (gamma 0.1)": _curve([0, 5, 10], [1.0, 0.505, 0.5]),
            "GPyTorch Adam": _curve([0, 30, 60], peer),
            "GPflow Adam": _curve([0, 40, 90], [1.0, 0.9, 0.85]),
        },
    }


def test_time_to_level_and_ratios(tp):
    assert tp.first_time_below(_curve([0, 1, 2], [3.0, 2.0, 1.0]), 2.0) == 1.0
    assert tp.first_time_below(_curve([0, 1], [3.0, 2.5]), 2.0) is None
    row = dict(_race(), tol=0.06)  # level 0.56: latentgp natural at 5 s, GPyTorch at 60 s
    row["default"] = {"curve": _curve([3, 8, 12], [0.9, 0.58, 0.55]), "total_seconds": 12.0,
                      "final_nlpd": 0.55, "reason": "converged"}
    s = tp.summary(row)
    assert s["best"] == 0.5 and s["level"] == pytest.approx(0.56)
    assert s["reach"]["GPflow Adam"] is None
    assert s["lg_best"] == 5.0 and s["peer_best"] == 60.0
    assert s["ratio_peer"] == pytest.approx(12.0)
    assert s["default_reach"] == 12.0 and s["ratio_default"] == pytest.approx(2.4)
    # no peer reached the level: the ratio is a lower bound from the shortest peer budget
    s = tp.summary(dict(_race(peer_reaches=False), tol=0.06, default=None))
    assert s["ratio_peer"] is None and s["ratio_peer_bound"] == pytest.approx(60.0 / 5.0)
    assert s["ratio_default"] is None and s["default_reach"] is None


def test_a_race_where_nothing_beat_the_start_shows_no_times(tp):
    """Every configuration starts from the same model; if none got below its test NLPD
    within the budget, the level is the start's and every 'time' would be 0: the row
    says so instead (flights at M = 1,024 and 150 CPU s, session 19)."""
    worse = {lab: _curve([0, 10, 20], [1.0, 1.4, 1.2]) for lab in _race()["curves"]}
    row = dict(_race(), curves=worse, tol=0.01, likelihood="gaussian")
    row["default"] = {"curve": _curve([5, 9], [1.3, 0.95]), "total_seconds": 9.0,
                      "final_nlpd": 0.95, "reason": "converged"}
    s = tp.summary(row)
    assert s["no_progress"] and s["lg_best"] is None and s["ratio_default"] is None
    assert all(t is None for t in s["reach"].values())
    line = tp.table([row])[-1]
    assert "no better than the start" in line and "no configuration improved" in line
    assert " 0.0 " not in line


def test_merge_old_rows_and_default_only(tp):
    old = {"args": {"tol": 0.01, "budget": 90.0, "budget_large": 150.0},
           "provenance": {"command": "python a", "commit": "abc"},
           "rows": [dict(_race(), default_fit={"seconds": 80.0, "nlpd": 0.52, "steps": 9,
                                               "reason": "converged"}),
                    dict(_race(), M=1024, default_fit=None)]}
    dflt = {"curve": _curve([4, 9], [0.6, 0.505]), "total_seconds": 9.0, "final_nlpd": 0.505,
            "reason": "converged"}
    only = {"args": {"tol": None}, "provenance": {"command": "python b --only-default"},
            "rows": [{"set": "s", "split": 0, "M": 1024, "likelihood": "gaussian",
                      "tol": 0.01, "default_only": True, "default": dflt}]}
    rows = tp.merge([old, only])
    assert [r["M"] for r in rows] == [256, 1024]
    assert rows[0]["tol"] == 0.01 and rows[0]["likelihood"] == "gaussian"
    assert rows[0]["budget"] == 90.0 and rows[1]["budget"] == 150.0
    assert rows[0]["default"] is None and rows[1]["default"] is dflt
    assert rows[1]["default_source"] == "python b --only-default"
    text = "\n".join(tp.table(rows))
    assert "no curve (fit: 80.0 wall s, NLPD 0.520)" in text  # the old row's default
    # M = 1024: level 0.51; latentgp natural reached it at 5 s, the default at 9 s
    assert "| 1.80x |" in text and "| 9.0 |" in text
    # a later race row without a default keeps the default merged before it
    again = tp.merge([old, only, {"args": {"tol": 0.01}, "provenance": {},
                                  "rows": [dict(_race(), M=1024)]}])
    assert again[1]["default"] is dflt


def test_the_averaged_reading_ignores_one_lucky_score(tp):
    """``smoothed`` reads each curve as the trailing mean of 3 scores: a single low score
    that set the level (and a configuration's time) no longer does, while a curve that
    stays low keeps its time."""
    assert tp.trailing_mean([3.0, 1.0, 2.0, 6.0], 3) == pytest.approx([3.0, 2.0, 2.0, 3.0])
    assert tp.trailing_mean([1.0, 2.0], 1) == [1.0, 2.0]
    row = {
        "set": "s", "split": 0, "M": 256, "tol": 0.01,
        "curves": {
            # one lucky score at 10 s, then back above it
            "latentgp Adam": _curve([0, 10, 20, 30, 40], [1.0, 0.40, 0.47, 0.47, 0.47]),
            # steadily at 0.45 from 20 s
            "GPflow Adam": _curve([0, 10, 20, 30, 40], [1.0, 0.6, 0.45, 0.45, 0.45]),
        },
        "default": {"curve": _curve([0, 10, 20, 30, 40], [1.0, 0.6, 0.45, 0.45, 0.45]),
                    "total_seconds": 40.0, "final_nlpd": 0.45, "reason": "converged"},
    }
    raw = tp.summary(row)
    assert raw["level"] == pytest.approx(0.41) and raw["lg_best"] == 10.0
    assert raw["peer_best"] is None and raw["default_reach"] is None
    avg = tp.summary(tp.smoothed(row, 3))
    # averaged: latentgp's best 0.4467 (at 30 s), GPflow and the default 0.45 at 40 s
    assert avg["level"] == pytest.approx((0.40 + 0.47 + 0.47) / 3 + 0.01)
    assert avg["lg_best"] == 30.0 and avg["peer_best"] == 40.0 and avg["default_reach"] == 40.0
    assert avg["ratio_default"] == pytest.approx(40.0 / 30.0)
    assert row["curves"]["latentgp Adam"]["nlpd"][1] == 0.40  # the row is not changed
    lines = tp.smoothed_table([row], 3)
    assert lines[2].startswith("| s | 0 | 256 | 0.457 | 30.0 | 40.0 | 1.33x | 40.0 | 1.33x | 50 |")
