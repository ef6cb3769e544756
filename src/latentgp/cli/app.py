"""The ``latentgp`` entry point: the argument parser of all commands and :func:`main`.

:func:`main` parses the arguments (after expanding ``--config``, see
:mod:`latentgp.cli.config`), runs the command's function and turns errors into exit
statuses: usage errors print one line ``latentgp: error: ...`` and exit with 2, other
failures exit with 1, Ctrl-C with 130.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import traceback
import warnings
from collections.abc import Sequence
from typing import NoReturn

from latentgp.cli import datasets, evaluate, fit, plot, predict, reproduce
from latentgp.cli.common import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    HELP_FORMAT,
    PROG,
    USAGE_ERRORS,
    CLIError,
    warn,
)
from latentgp.cli.config import expand_config

#: The command modules, in the order of ``latentgp --help``; each has ``add_parser``.
COMMAND_MODULES = (fit, predict, evaluate, datasets, plot, reproduce)


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (raised, so that ``main`` decides the exit)."""

    def error(self, message: str) -> NoReturn:
        raise CLIError(f"{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    """The ``latentgp`` argument parser."""
    from latentgp import __version__

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the full traceback on errors",
    )
    parser = Parser(
        prog=PROG,
        description="Gaussian-process models at scale: fit, predict, evaluate, plot, "
        "reproduce, datasets.",
        epilog="run 'latentgp <command> --help' for the options and examples of a command",
        formatter_class=HELP_FORMAT,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        module.add_parser(sub, common)
    return parser


def command_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The command parsers of ``parser`` by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


# ================================================================================ main
def one_line(err: BaseException) -> str:
    """The message of ``err`` on one line (``missing key 'x'`` for a ``KeyError``)."""
    text = str(err).strip() or type(err).__name__
    if isinstance(err, KeyError):
        text = f"missing key {text}"
    return " ".join(text.split())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 failure, 2 usage, 130 ^C)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv

    def show_warning(message, category, filename, lineno, file=None, line=None):
        warn(" ".join(str(message).split()))

    try:
        with warnings.catch_warnings():
            if not debug:
                warnings.showwarning = show_warning
            parser = build_parser()
            commands = command_parsers(parser)
            cmd_at = next((i for i, a in enumerate(argv) if a in commands), len(argv))
            passthrough: list[str] = []
            if argv[cmd_at : cmd_at + 1] == ["reproduce"] and "--" in argv[cmd_at:]:
                cut = argv.index("--", cmd_at)  # 'reproduce NAME -- ARGS': ARGS go to the script
                argv, passthrough = argv[:cut], argv[cut + 1 :]
            argv = expand_config(argv, commands)
            debug = debug or "--debug" in argv
            try:
                args = parser.parse_args(argv)
            except SystemExit as exc:  # --help / --version
                return int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_USAGE
            args.started = time.perf_counter()
            if passthrough:
                args.script_args = passthrough
            return int(args.func(args))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `latentgp datasets list | head`: stop quietly
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except USAGE_ERRORS as err:
        if debug:
            traceback.print_exc()
        print(f"{PROG}: error: {one_line(err)}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as err:  # noqa: BLE001 - last resort: one line, status 1
        if debug:
            traceback.print_exc()
        hint = "" if debug else " (rerun with --debug for the traceback)"
        print(f"{PROG}: error: {type(err).__name__}: {one_line(err)}{hint}", file=sys.stderr)
        return EXIT_FAILURE
