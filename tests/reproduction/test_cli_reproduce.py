"""``latentgp reproduce``: experiment scripts from benchmarks/ run as subprocesses."""

from __future__ import annotations

import json
import os
import pathlib
import re
import sys

import pytest

from latentgp.cli import main
from latentgp.cli.reproduce import EXPERIMENTS

ROOT = pathlib.Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.splitlines()[-1].startswith("latentgp: error: "), err
    assert "Traceback" not in err
    return err.splitlines()[-1]


def test_list_names_every_experiment_script(capsys):
    assert main(["reproduce", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = [ln.split()[0] for ln in lines]
    assert names == list(EXPERIMENTS)
    # helpers, not experiments: the GPflow runner (called by sparse_reproduction), the
    # reliability tables printer, the QSRVM, SLGP-moons, SEP crabs-ridge and BO-trajectory
    # diagnostics and QSGP's small-data comparison (pages written by hand from their
    # output), the QSGP default-fit runner (a
    # section of the qsgp_reproduction page), the natural-gradient default comparison (its
    # page written by hand from its output), the stopping-rule traces (page written by hand
    # from their replay), the accelerator step benchmark (needs a GPU; gpu.md written by
    # hand), the time-to-accuracy and exact-at-scale page writers (imported by
    # time_to_accuracy and exact_at_scale) and the machine description the scripts import
    helpers = {
        "bo_trajectories",
        "gpflow_gplvm_runner",
        "gpflow_sparse_runner",
        "gpytorch_deepgp_runner",
        "reliability_report",
        "sep_crabs_ridge",
        "qsgp_default_fit",
        "qsgp_rvm_diagnostic",
        "qsgp_small_data",
        "qsgp_table3_lr",
        "slgp_moons_diagnostic",
        "natural_default",
        "stopping_traces",
        "device_step",
        "tta_page",
        "exact_at_scale_page",
        "machine",
    }
    scripts = {p.stem for p in BENCH.glob("*.py")} - helpers
    assert set(names) == scripts  # every experiment script of benchmarks/ and no other
    for name in names:
        text = (BENCH / EXPERIMENTS[name].script).read_text()
        assert '"--quick"' in text, name  # the flag reproduce passes exists
        for run in EXPERIMENTS[name].runs:
            for arg in run:
                if arg.startswith("--"):
                    assert f'"{arg}"' in text, (name, arg)
    assert main(["reproduce", "--list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["experiments"]
    assert [r["name"] for r in rows] == names


def test_unknown_name_is_a_usage_error_with_the_list(capsys):
    assert main(["reproduce", "sparse"]) == 2
    err = _error(capsys)
    assert "unknown experiment 'sparse'" in err
    assert all(name in err for name in EXPERIMENTS)
    assert main(["reproduce"]) == 2
    assert "give an experiment NAME or --list" in _error(capsys)


def test_dry_run_commands(tmp_path, capsys):
    assert main(["reproduce", "sep_reproduction", "--quick", "--dry-run", "--json",
                 "--", "--parts", "banana"]) == 0
    summary = json.loads(capsys.readouterr().out)
    script = str(BENCH / "sep_reproduction.py")
    assert summary["commands"] == [
        [sys.executable, script, "--quick", "--parts", "banana"],
        [sys.executable, script, "--report"],
    ]
    assert main(["reproduce", "svgp_performance", "--dry-run", "--json",
                 "--results-dir", str(tmp_path)]) == 0
    cmd = json.loads(capsys.readouterr().out)["commands"]
    assert cmd == [[sys.executable, str(BENCH / "svgp_performance.py"),
                    "--out", str(tmp_path / "performance.md")]]
    assert main(["reproduce", "qsgp_scaling", "--results-dir", str(tmp_path)]) == 2
    err = _error(capsys)
    assert "qsgp_scaling writes its page into docs/results only" in err
    assert re.search(r"--results-dir works with: .*svgp_performance", err)


FAKE = """\
import os, sys
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
print("fake run", " ".join(sys.argv[1:]), flush=True)
if "--fail" in sys.argv:
    print("something broke", flush=True)
    sys.exit(3)
os.makedirs(os.path.join(root, "docs", "results"), exist_ok=True)
with open(os.path.join(root, "docs", "results", "qsgp_scaling.md"), "w") as fh:
    fh.write("quick" if "--quick" in sys.argv else "full")
"""


@pytest.fixture
def fake_bench(tmp_path, monkeypatch):
    bench = tmp_path / "repo" / "benchmarks"
    bench.mkdir(parents=True)
    (bench / "qsgp_scaling.py").write_text(FAKE)
    monkeypatch.setenv("LATENTGP_BENCHMARKS", str(bench))
    return bench


def test_runs_the_script_and_reports_pages_written(fake_bench, capsys):
    assert main(["reproduce", "qsgp_scaling", "--quick", "--json", "--no-progress"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)  # the script's own output is not on stdout
    page = fake_bench.parent / "docs" / "results" / "qsgp_scaling.md"
    assert page.read_text() == "quick"
    assert summary["written"] == [str(page)] and summary["returncode"] == 0
    assert summary["commands"] == [[sys.executable, str(fake_bench / "qsgp_scaling.py"),
                                    "--quick"]]
    assert "fake run" not in captured.err  # quiet: --no-progress
    assert captured.err.strip() == (
        "latentgp: warning: a --quick run of qsgp_scaling writes its smoke-run numbers over "
        "docs/results/qsgp_scaling.md (git restores them)"
    )
    assert main(["reproduce", "qsgp_scaling", "--progress"]) == 0
    captured = capsys.readouterr()
    assert "fake run" in captured.err and page.read_text() == "full"
    assert re.match(r"reproduced qsgp_scaling in [\d.]+ s\n  wrote .*qsgp_scaling.md\n$",
                    captured.out)


def test_failing_script_shows_its_last_lines(fake_bench, capsys):
    assert main(["reproduce", "qsgp_scaling", "--no-progress", "--", "--fail"]) == 1
    err = capsys.readouterr().err
    assert "something broke" in err
    assert err.strip().splitlines()[-1].startswith(
        "latentgp: error: qsgp_scaling failed (exit status 3)")


def test_missing_benchmarks_dir(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("LATENTGP_BENCHMARKS", raising=False)
    assert main(["reproduce", "scaleout", "--benchmarks-dir", str(tmp_path / "no")]) == 2
    assert "is not a folder" in _error(capsys)
    assert main(["reproduce", "scaleout", "--benchmarks-dir", str(tmp_path)]) == 2
    assert "scaleout.py does not exist" in _error(capsys)


@pytest.mark.slow
def test_quick_reproduction_of_svgp_performance(tmp_path, capsys):
    """A real --quick run (1.5-3 min on 2 cores), its page redirected under tmp_path."""
    page = ROOT / "docs" / "results" / "performance.md"
    before = page.stat().st_mtime_ns if page.exists() else None
    argv = ["reproduce", "svgp_performance", "--quick", "--json", "--no-progress",
            "--results-dir", str(tmp_path), "--", "--peers", "latentgp", "--data", "synthetic",
            "--reps", "1", "--steps", "2", "--warmup", "1"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    written = tmp_path / "performance.md"
    # (other processes may write docs/results meanwhile: only ours are checked)
    assert {str(tmp_path / "performance.json"), str(written)} <= set(summary["written"])
    assert not [p for p in summary["written"] if os.path.basename(p).startswith("performance")
                and not p.startswith(str(tmp_path))]
    text = written.read_text()
    assert "| synthetic | 256 | 1024 | float64 | latentgp |" in text
    assert (page.stat().st_mtime_ns if page.exists() else None) == before
    assert os.path.getsize(tmp_path / "performance.json") > 0
