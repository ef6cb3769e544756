"""TOML configuration files for the ``latentgp`` command line (``--config run.toml``).

A configuration file holds the long options of a command as TOML keys, spelled like the
options without the leading dashes (``test-fraction`` or ``test_fraction``)::

    # run.toml
    data = "measurements.csv"
    target = "yield"

    [fit]
    model = "svgp"
    inducing = 64
    epochs = 30
    lr = 0.01
    no-standardize = false
    progress = false

    [evaluate]
    metrics = "test-metrics.json"

Top-level keys apply to the command being run; a table named after a command (``[fit]``,
``[predict]``, ``[evaluate]``, ``[plot]``) applies to that command only and overrides the
top-level keys; tables of other commands are ignored, so one file can serve a whole
fit -> evaluate -> plot session.  Options given on the command line override the file
(the file's options are inserted before them, and for an option given twice the last
one wins).  Switches (``json``, ``no-standardize``, ...) take ``true``/``false``
(``false`` leaves the default); ``progress = false`` is ``--no-progress``.  Paths are read
relative to the current directory, exactly as on the command line.

Errors name the file and the key: an unknown key or table, a value of the wrong TOML type
(a string for ``epochs``, a float for ``inducing``), or a value the option rejects.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from typing import Any

#: Commands that accept ``--config``.
CONFIG_COMMANDS = ("fit", "predict", "evaluate", "plot")
#: Options that cannot come from a file.
_NOT_IN_FILES = {"config", "help", "version"}


def read_toml(path: str | os.PathLike) -> dict[str, Any]:
    """Parse a TOML file; ``ValueError`` naming the file for a missing or malformed one."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise ImportError(
                "--config needs Python 3.11 or the tomli package (pip install tomli)"
            ) from None
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"config file {path!r} does not exist")
    with open(path, "rb") as fh:
        try:
            return tomllib.load(fh)
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"{path}: not a valid TOML file: {err}") from None


def _result_kind(action: argparse.Action) -> type | None:
    """``int`` or ``float`` for numeric options (from the converter's return annotation)."""
    conv = action.type
    if conv in (int, float):
        return conv
    ret = getattr(conv, "__annotations__", {}).get("return")
    return {"int": int, int: int, "float": float, float: float}.get(ret)


def _option_tokens(path: str, key: str, value: Any, action: argparse.Action) -> list[str]:
    """The command-line tokens equivalent to ``key = value``."""
    opt = next(o for o in action.option_strings if o.startswith("--"))
    where = f"{path}: {key} = {value!r}"
    if isinstance(action, argparse.BooleanOptionalAction):
        if not isinstance(value, bool):
            raise ValueError(f"{where}: expected true or false")
        return [opt] if value else [f"--no-{opt[2:]}"]
    if action.nargs == 0:  # store_true / store_const switches
        if not isinstance(value, bool):
            raise ValueError(f"{where}: expected true or false")
        return [opt] if value else []
    kind = _result_kind(action)
    if isinstance(value, bool) or isinstance(value, (dict, list)):
        expected = {int: "an integer", float: "a number"}.get(kind, "a string")
        raise ValueError(f"{where}: expected {expected}")
    if kind is int and not isinstance(value, int):
        raise ValueError(f"{where}: expected an integer")
    if kind is float and not isinstance(value, (int, float)):
        raise ValueError(f"{where}: expected a number")
    if kind is None and not isinstance(value, (str, int)):
        raise ValueError(f"{where}: expected a string")
    text = str(value)
    if action.choices is not None and text not in action.choices:
        raise ValueError(f"{where}: choose one of {', '.join(map(str, action.choices))}")
    if action.type is not None:
        try:
            action.type(text)
        except (argparse.ArgumentTypeError, ValueError, TypeError) as err:
            raise ValueError(f"{where}: {err}") from None
    return [f"{opt}={text}"]


def config_tokens(
    path: str, command: str, actions: Sequence[argparse.Action], data: Mapping[str, Any]
) -> list[str]:
    """Command-line tokens for ``command`` from the parsed config ``data`` of ``path``."""
    by_name: dict[str, argparse.Action] = {}
    for action in actions:
        for opt in action.option_strings:
            if opt.startswith("--") and opt[2:] not in _NOT_IN_FILES:
                by_name[opt[2:]] = action
    settings: dict[str, tuple[str, Any]] = {}

    def take(table: Mapping[str, Any], where: str) -> None:
        for key, value in table.items():
            name = key.replace("_", "-")
            if name not in by_name:
                known = ", ".join(sorted(by_name))
                raise ValueError(
                    f"{path}: unknown key {key!r}{where} for 'latentgp {command}' "
                    f"(known keys: {known})"
                )
            settings[name] = (key, value)

    top = {}
    for key, value in data.items():
        if isinstance(value, dict):
            if key not in CONFIG_COMMANDS:
                raise ValueError(
                    f"{path}: unknown table [{key}]; tables name a command: "
                    + ", ".join(f"[{c}]" for c in CONFIG_COMMANDS)
                )
        else:
            top[key] = value
    take(top, "")
    section = data.get(command)
    if isinstance(section, dict):
        nested = [k for k, v in section.items() if isinstance(v, dict)]
        if nested:
            raise ValueError(f"{path}: [{command}] holds a nested table {nested[0]!r}")
        take(section, f" in [{command}]")
    tokens: list[str] = []
    for key, value in settings.values():
        tokens += _option_tokens(path, key, value, by_name[key.replace("_", "-")])
    return tokens


def expand_config(
    argv: Sequence[str], commands: Mapping[str, argparse.ArgumentParser]
) -> list[str]:
    """Insert the options of ``--config FILE`` into ``argv`` right after the command name.

    ``commands`` maps command names to their parsers.  ``argv`` is returned unchanged when
    it has no ``--config`` (or its command does not take one).
    """
    argv = list(argv)
    cmd_at = next((i for i, a in enumerate(argv) if a in commands), None)
    if cmd_at is None or argv[cmd_at] not in CONFIG_COMMANDS:
        return argv
    command = argv[cmd_at]
    paths = []
    for i in range(cmd_at + 1, len(argv)):
        a = argv[i]
        if a == "--":
            break
        if a == "--config" and i + 1 < len(argv):
            paths.append(argv[i + 1])
        elif a.startswith("--config="):
            paths.append(a.split("=", 1)[1])
    if not paths:
        return argv
    if len(paths) > 1:
        raise ValueError("give --config once")
    data = read_toml(paths[0])
    tokens = config_tokens(paths[0], command, commands[command]._actions, data)
    return argv[: cmd_at + 1] + tokens + argv[cmd_at + 1 :]
