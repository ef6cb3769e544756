"""``latentgp datasets list``: the named datasets of the registry (no torch needed)."""

from __future__ import annotations

import argparse
from typing import Any

from latentgp.cli.common import EXIT_OK, HELP_FORMAT, emit_json, out

EPILOG = """\
example:
  latentgp datasets list
  latentgp datasets list --json
"""


def cmd_datasets_list(args: argparse.Namespace) -> int:
    """Run ``latentgp datasets list``."""
    from latentgp import datasets

    rows = datasets.list_datasets()
    if args.json:
        emit_json(args, {"count": len(rows), "datasets": rows})
        return EXIT_OK
    table = [("name", "task", "source", "splits")]
    for r in rows:
        splits = str(r.get("n_splits", ""))
        if r.get("split_kind"):
            splits += f" ({r['split_kind']})"
        table.append((r["name"], r["task"], r["source"], splits))
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    for row in table:
        out("  ".join(c.ljust(w) for c, w in zip(row[:3], widths, strict=True)) + "  " + row[3])
    return EXIT_OK


def add_parser(sub: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``datasets`` command (with its action ``list``) to the subparsers ``sub``."""
    p = sub.add_parser(
        "datasets",
        parents=[common],
        help="list the named datasets",
        description="Named datasets of the registry.",
        epilog=EPILOG,
        formatter_class=HELP_FORMAT,
    )
    dsub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    q = dsub.add_parser(
        "list",
        parents=[common],
        help="table of name, task, source, splits",
        description="List every registered dataset.",
        epilog=EPILOG,
        formatter_class=HELP_FORMAT,
    )
    q.add_argument("--json", action="store_true", help="print JSON instead of a table")
    q.set_defaults(func=cmd_datasets_list)
    return p
