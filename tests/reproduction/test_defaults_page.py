"""The defaults page (issue 30) and the benchmark that writes it.

The page's table is exactly what ``benchmarks/defaults.py`` renders from the rows of
``defaults.json``; every row's gap, time ratio and verdict follow from its own numbers;
the page covers at least eight data sets.  The benchmark records a fit that raises as a
failed attempt instead of dying, keeps the best tuned attempt that finished, and a merge
replaces an earlier row for the same set and model.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "results" / "defaults.md"


@pytest.fixture(scope="module")
def bench():
    pytest.importorskip("sklearn")
    sys.path.insert(0, str(ROOT / "benchmarks"))  # the script imports its sibling `machine`
    try:
        spec = importlib.util.spec_from_file_location("defaults_bench", ROOT / "benchmarks"
                                                      / "defaults.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return module


def _rows() -> list[dict]:
    return json.loads(PAGE.with_suffix(".json").read_text())["rows"]


def test_page_rows_are_consistent_with_their_numbers(bench):
    rows = _rows()
    assert len({r["set"] for r in rows}) >= 8
    for r in rows:
        d, t = r["default"], r["tuned"]
        if "error" in d or t is None:
            assert r["gap"] is None and r["time_ratio"] is None
            continue
        assert t in r["tuned_all"] and t["nlpd"] == min(
            a["nlpd"] for a in r["tuned_all"] if "error" not in a)
        assert r["gap"] == pytest.approx(d["nlpd"] - t["nlpd"], abs=1e-12)
        assert r["time_ratio"] == pytest.approx(d["seconds"] / t["seconds"], rel=1e-12)
        assert r["meets"] == (r["gap"] <= bench.TARGET_NATS
                              and r["time_ratio"] <= bench.TARGET_RATIO)


def test_page_table_is_rendered_from_the_json(bench):
    assert bench.table(_rows()) in PAGE.read_text()


class _History:
    steps, reason, optimizer = 7, "converged", "adam"


class _Fake:
    """A model whose fits at ``lr=0.1`` with a budget raise, like SEP's unstable step."""

    def fit_defaults(self, N):
        return {"optimizer": "adam", "lr": 0.1}

    def fit(self, X, y, *, seed, progress, max_steps=None, lr=None, optimizer=None):
        if lr == 0.1 and max_steps not in (None, 1):
            raise FloatingPointError("non-finite evidence")
        self.lr, self.history_ = lr, _History()
        return self

    def log_predictive_density(self, X, y):
        return -np.full(len(y), 1.0 if self.lr is None else 0.9)


def test_a_failed_tuned_attempt_is_recorded_and_the_finished_one_kept(bench, monkeypatch):
    data = (np.zeros((4, 1)), np.zeros((2, 1)), np.zeros(4), np.zeros(2))
    monkeypatch.setattr(bench, "split", lambda name: data)
    row = bench.run("wine", "fake", lambda y: _Fake(), 100)
    failed = [a for a in row["tuned_all"] if "error" in a]
    assert [a["options"]["lr"] for a in failed] == [0.1]
    assert failed[0]["error"].startswith("FloatingPointError")
    # tuned with the optimiser the default ran, named
    assert row["tuned"]["options"] == {"max_steps": 100, "lr": 0.05, "optimizer": "adam"}
    assert row["gap"] == pytest.approx(0.1)
    assert "FloatingPointError" in bench.notes([row])
    assert "| fake |" in bench.table([row])


def test_merge_replaces_a_row_for_the_same_set_and_model(bench, tmp_path):
    def part(name, nlpd, date):
        row = {"set": "wine", "model": "m", "default": {"nlpd": nlpd}}
        prov = {"commit": name, "date": date, "command": "x --only wine"}
        (tmp_path / f"{name}.json").write_text(json.dumps({"rows": [row],
                                                           "provenance": prov}))
        return str(tmp_path / f"{name}.json")

    rows, parts = bench.merge([part("old", 1.0, "d1"), part("new", 2.0, "d2")])
    assert [r["default"]["nlpd"] for r in rows] == [2.0]
    assert rows[0]["measured"]["commit"] == "new" and [p["commit"] for p in parts] == ["new"]
