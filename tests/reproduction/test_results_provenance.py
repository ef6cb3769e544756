"""Results rows in ``docs/results`` say where they came from, and raw arrays stay out of git.

Every row of a ``.jsonl`` file, and every ``.json`` file (its header object, for a file
holding one run), carries a ``provenance`` object: the commit and date, and either the
library versions, CPU, threads and command of the run (written by
``benchmarks/machine.py::provenance``) or a ``recorded`` note saying what could only be
backfilled from git history.  No file under ``docs/results`` is over 1 MB.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
MAX_BYTES = 1_000_000
RUN_KEYS = ("command", "versions", "cpu", "cpu_count", "threads")
VERSION_KEYS = ("latentgp", "torch", "numpy")


def _result_files() -> list[pathlib.Path]:
    """Files under docs/results that git tracks or would add (ignored files excluded)."""
    if shutil.which("git") and (ROOT / ".git").exists():
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "docs/results"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        return sorted(ROOT / p for p in out if (ROOT / p).is_file())
    return sorted(p for p in RESULTS.rglob("*") if p.is_file())


def _problems(prov: object) -> list[str]:
    """What a provenance object lacks (empty when it is complete)."""
    if not isinstance(prov, dict):
        return ["no provenance object"]
    missing = [k for k in ("commit", "date") if not prov.get(k)]
    if "recorded" in prov:  # backfilled: says in words what was not recorded
        return missing + ([] if isinstance(prov["recorded"], str) else ["recorded not text"])
    missing += [k for k in RUN_KEYS if k not in prov]
    versions = prov.get("versions") or {}
    missing += [f"versions.{k}" for k in VERSION_KEYS if k not in versions]
    return missing


def _rows(path: pathlib.Path) -> list[tuple[str, object]]:
    """(where, provenance) for each row of a .jsonl file or the header of a .json file."""
    if path.suffix == ".jsonl":
        lines = path.read_text().splitlines()
        return [
            (f"line {i}", json.loads(line).get("provenance"))
            for i, line in enumerate(lines, 1)
            if line.strip()
        ]
    obj = json.loads(path.read_text())
    if isinstance(obj, list):
        return [(f"row {i}", r.get("provenance")) for i, r in enumerate(obj)]
    return [("header", obj.get("provenance"))]


RESULT_FILES = [p for p in _result_files() if p.suffix in (".json", ".jsonl")]


def test_results_files_found():
    assert RESULT_FILES, f"no results rows under {RESULTS}"


@pytest.mark.parametrize("path", RESULT_FILES, ids=lambda p: str(p.relative_to(RESULTS)))
def test_every_row_carries_provenance(path):
    bad = [f"{where}: {', '.join(p)}" for where, prov in _rows(path) if (p := _problems(prov))]
    assert not bad, f"{path.relative_to(ROOT)} rows without full provenance: {bad[:5]}"


def test_no_results_file_over_1mb():
    big = {
        str(p.relative_to(ROOT)): p.stat().st_size
        for p in _result_files()
        if p.stat().st_size > MAX_BYTES
    }
    assert not big, f"over 1 MB (regenerate raw arrays instead of committing them): {big}"


def _machine_module():
    spec = importlib.util.spec_from_file_location("machine", ROOT / "benchmarks" / "machine.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_provenance_helper_writes_complete_records():
    machine = _machine_module()
    prov = machine.provenance("python bench.py --quick", peers={"gpflow": "2.9.2"})
    assert _problems(prov) == []
    assert prov["command"] == "python bench.py --quick"
    assert prov["versions"]["gpflow"] == "2.9.2"
    json.dumps(prov)  # a results row must stay JSON


def test_stamp_keeps_the_records_of_a_resumed_file():
    machine = _machine_module()
    earlier = {"commit": "abc", "date": "2026-01-01T00:00:00Z", "recorded": "backfilled"}
    obj = machine.stamp({"rows": [1]}, command="python bench.py", earlier=earlier)
    assert _problems(obj["provenance"]) == []
    assert obj["provenance"]["previous"] == [earlier]
    again = machine.stamp(obj, command="python bench.py")  # same run: not repeated
    assert again["provenance"]["previous"] == [earlier]
