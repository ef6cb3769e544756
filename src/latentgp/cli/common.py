"""Helpers shared by the commands of ``latentgp``: exit codes, errors, output, files.

Nothing here imports torch or the models at import time (``latentgp --help`` and
``latentgp datasets list`` start without them); the functions that need them import them
when called.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from typing import IO, Any

from ..io import atomic_write as io_atomic_write

PROG = "latentgp"
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141

#: The ``formatter_class`` of every command parser (the epilogs are laid out by hand).
HELP_FORMAT = argparse.RawDescriptionHelpFormatter

#: Help of the ``--config`` option of fit, predict and evaluate.
CONFIG_HELP = (
    "read options from a TOML file (keys named like the long options; options given here "
    "override it)"
)


class CLIError(Exception):
    """A usage error: reported as one line on stderr, exit status 2."""


#: The errors that :func:`latentgp.cli.main` reports as usage errors (exit status 2):
#: bad options, unknown names, missing or malformed files, what the library refuses with
#: ``ValueError``.  Anything else that fails while running exits with 1.
USAGE_ERRORS: tuple[type[BaseException], ...] = (
    CLIError,
    ValueError,
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
    ImportError,
)


# ============================================================================== output
def warn(message: str) -> None:
    """Print ``latentgp: warning: <message>`` on stderr."""
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def is_main_process() -> bool:
    """False on the ranks > 0 of a data-parallel run (they print nothing)."""
    if "torch" not in sys.modules:  # no process group can exist without torch
        return True
    from latentgp.training.distributed import is_main

    return is_main()


def out(text: str = "") -> None:
    """Print one line on stdout (on the main process of a data-parallel run only)."""
    if is_main_process():
        sys.stdout.write(text + "\n")


def jsonable(value: Any) -> Any:
    """``value`` with tensors, numpy scalars and other objects made JSON-serialisable."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def emit_json(args: argparse.Namespace, obj: dict[str, Any], **outputs: Any) -> None:
    """Print ``obj`` as the one JSON object of ``--json`` on stdout, with the paths written
    (``"outputs"``, only those given) and the command's wall time (``"seconds"``)."""
    obj = dict(obj)
    obj["outputs"] = {k: os.fspath(v) for k, v in outputs.items() if v and v != "-"}
    started = getattr(args, "started", None)
    if started is not None:
        obj["seconds"] = round(time.perf_counter() - started, 4)
    out(json.dumps(jsonable(obj), indent=2))


def format_value(value: Any) -> str:
    """A metric value for the one-line summaries (4 significant digits for floats)."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def metric_line(metrics: dict[str, Any]) -> str:
    """``rmse 0.1   mae 0.08   nlpd -0.3`` from the metric entries of ``metrics``."""
    keys = [
        k
        for k in metrics
        if k.removeprefix("train_") in ("rmse", "mae", "nlpd", "error_rate", "nlp")
    ]
    return "   ".join(f"{k} {format_value(metrics[k])}" for k in keys)


# =============================================================================== files
def check_output_path(path: str | None, option: str) -> None:
    """Fail before any work when an output cannot be written where asked."""
    if path is None or path == "-":
        return
    if os.path.isdir(path):
        raise CLIError(f"{option} {path!r} is a directory, not a file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CLIError(f"{option} {path!r}: the folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise CLIError(f"{option} {path!r}: the folder {folder!r} is not writable")


def atomic_write(
    path: str | os.PathLike, write: Callable[[IO], Any], *, binary: bool = False
) -> None:
    """:func:`latentgp.io.atomic_write`, text by default (the CLI writes CSV and JSON)."""
    io_atomic_write(path, write, binary=binary)


def write_json(path: str, obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``path`` (atomically)."""
    atomic_write(path, lambda fh: fh.write(json.dumps(obj, indent=2) + "\n"))


# ======================================================================= option types
def checked_number(
    convert: Callable[[str], Any], ok: Callable[[Any], bool], expected: str
) -> Callable[[str], Any]:
    """An argparse ``type``: ``convert(text)``, refused with "expected <expected>" when the
    text does not convert or ``ok`` rejects the value."""

    def parse(text: str):
        try:
            v = convert(text)
        except ValueError:
            v = None
        if v is None or not ok(v):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return v

    # latentgp.cli.config reads the result type (int or float) from the return annotation
    parse.__annotations__ = {"text": str, "return": convert}
    return parse


#: ``--inducing``, ``--epochs`` ...: an integer >= 1.
positive_int = checked_number(int, lambda v: v >= 1, "a positive integer")
#: ``--split``, ``--seed``: an integer >= 0.
nonneg_int = checked_number(int, lambda v: v >= 0, "an integer >= 0")
#: ``--seed``: an integer in [0, 2**64 - 1] (what torch's generators accept).
seed_int = checked_number(int, lambda v: 0 <= v <= 2**64 - 1, "an integer in [0, 2**64 - 1]")
#: ``--lr``, ``--dpi``: a finite number > 0.
positive_float = checked_number(float, lambda v: math.isfinite(v) and v > 0, "a positive number")
#: ``--test-fraction``: a number in [0, 1).
fraction = checked_number(float, lambda v: 0.0 <= v < 1.0, "a number in [0, 1)")
