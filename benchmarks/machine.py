"""The machine a benchmark ran on and the provenance of its results rows.

Timings are only comparable within one run, but a reader needs to know which CPU, threads,
library versions and commit produced them: :func:`provenance` gathers all of it in one
dict that every benchmark attaches to the rows (or file header) it writes."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else the platform's processor."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe() -> str:
    """``"2 cores, AMD EPYC (x86_64)"``."""
    return f"{os.cpu_count()} cores, {cpu_model()} ({platform.machine()})"


PROVENANCE_KEYS = ("commit", "date", "command", "versions", "cpu", "cpu_count", "threads")
"""Keys every provenance record written by :func:`provenance` carries."""


def _git_commit() -> str | None:
    """The commit of the working tree, with ``+dirty`` when tracked files differ from it
    (``LATENTGP_COMMIT`` when set: the commit a copy of the tree was made at)."""
    if os.environ.get("LATENTGP_COMMIT"):  # a copy of the tree (the GPU machine's git
        return os.environ["LATENTGP_COMMIT"]  # metadata there is the session's start)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def package_version(package: str, python: str | None = None) -> str | None:
    """The installed version of ``package`` (None when it is not installed).

    With ``python`` (the interpreter of another virtual environment, e.g. the GPflow one)
    the version is the one installed there.
    """
    if python is None:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return None
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def provenance(command: str | None = None, peers: dict[str, str | None] | None = None) -> dict:
    """Where a results row came from: commit, library versions, CPU, threads, date, command.

    ``command`` defaults to the running command line (``sys.argv`` joined); ``peers`` adds
    the versions of the libraries a row compares with (e.g. ``{"gpflow": "2.9.2"}``, see
    :func:`package_version`).  Attach the result to each row, or to the header of a file
    that holds one run.
    """
    import numpy
    import torch

    versions = {
        "latentgp": package_version("latentgp"),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "python": platform.python_version(),
    }
    try:
        import latentgp

        versions["latentgp"] = getattr(latentgp, "__version__", versions["latentgp"])
    except ImportError:
        pass
    versions.update(peers or {})
    if command is None:
        command = " ".join(["python", *sys.argv])
    return {
        "commit": _git_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command,
        "versions": versions,
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads": {
            "torch": torch.get_num_threads(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        },
    }


def stamp(
    obj: dict,
    command: str | None = None,
    peers: dict[str, str | None] | None = None,
    earlier: dict | None = None,
) -> dict:
    """Set ``obj["provenance"]`` to :func:`provenance` and return ``obj``.

    A file that is resumed (rewritten by a later run that keeps earlier rows) keeps the
    earlier records under ``provenance["previous"]``: pass the file's old provenance as
    ``earlier`` (or leave it in ``obj``); records of the same commit and command as this
    run are not repeated.
    """
    new = provenance(command, peers)
    old = earlier if earlier is not None else obj.get("provenance")
    if isinstance(old, dict):
        chain = [{k: v for k, v in old.items() if k != "previous"}, *old.get("previous", [])]
        same = (new["commit"], new["command"])
        chain = [e for e in chain if (e.get("commit"), e.get("command")) != same]
        if chain:
            new["previous"] = chain
    obj["provenance"] = new
    return obj


def file_provenance(path: str | os.PathLike) -> dict | None:
    """The ``provenance`` of the JSON file at ``path`` (None when absent)."""
    try:
        with open(path) as fh:
            obj = json.load(fh)
    except (OSError, ValueError):
        return None
    return obj.get("provenance") if isinstance(obj, dict) else None
