"""The tests use latentgp through its public API only.

A test that reaches into a private name (``model._build(...)``, ``m._scale_y``,
``from latentgp.x import _helper``) breaks on every refactor of the internals.  Where a
test needs an internal quantity the library offers a public, documented hook instead
(e.g. ``GPModel.build``, ``scale_targets``, ``QSGP.newton_mean``).

The private names are collected from ``src/latentgp`` with ``ast``: functions, methods,
classes and attributes or variables assigned there whose name starts with one
underscore (dunder names are public protocol).  Every test file is parsed and checked for

* attribute access ``x._name`` with such a name,
* ``from latentgp... import _name``,
* the name as a string given to ``getattr``/``setattr``/``hasattr``/``delattr`` or
  ``monkeypatch.setattr``/``monkeypatch.delattr``.

Helpers a test defines itself (``_data``, fixtures) and private names of other packages
(``torch._C``) are not latentgp's and are allowed.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

TESTS = next(p for p in pathlib.Path(__file__).resolve().parents if p.name == "tests")
SRC = TESTS.parent / "src" / "latentgp"


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name != "_"


def _names_defined_in(tree: ast.AST, own_attributes_only: bool = False) -> set[str]:
    """Private names that ``tree`` defines: functions, classes, variables and assigned
    attributes (with ``own_attributes_only``, only ``self._x`` / ``cls._x``: a test that
    assigns ``model._x = ...`` does not make ``_x`` its own)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            owner = node.value
            if not own_attributes_only or (
                isinstance(owner, ast.Name) and owner.id in ("self", "cls")
            ):
                out.add(node.attr)
    return {n for n in out if _is_private(n)}


def _src_private_names() -> set[str]:
    names: set[str] = set()
    for path in SRC.rglob("*.py"):
        names |= _names_defined_in(ast.parse(path.read_text(encoding="utf-8")))
    return names


PRIVATE = _src_private_names()
TEST_FILES = sorted(p for p in TESTS.rglob("*.py") if "data" not in p.relative_to(TESTS).parts)

_REFLECTION = {"getattr", "setattr", "hasattr", "delattr"}


def _violations(path: pathlib.Path, root: pathlib.Path = TESTS.parent) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = _names_defined_in(tree, own_attributes_only=True)  # helpers may share a src name
    bad = []

    def flag(node: ast.AST, what: str) -> None:
        bad.append(f"{path.relative_to(root)}:{node.lineno}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE and node.attr not in own:
            flag(node, f"attribute .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("latentgp"):
            for alias in node.names:
                if _is_private(alias.name):
                    flag(node, f"import of {alias.name} from {node.module}")
        elif isinstance(node, ast.Call):
            f = node.func
            reflective = (isinstance(f, ast.Name) and f.id in _REFLECTION) or (
                isinstance(f, ast.Attribute) and f.attr in ("setattr", "delattr")
            )
            if reflective and len(node.args) >= 2:
                arg = node.args[1]
                if (
                    isinstance(arg, ast.Constant)
                    and isinstance(arg.value, str)
                    and arg.value in PRIVATE
                    and arg.value not in own
                ):
                    flag(node, f"{ast.unparse(f)}(..., {arg.value!r})")
    return bad


def test_private_names_are_collected():
    # a few names the library keeps private, so that the check below has teeth
    assert {"_build", "_check_X", "_scale_y", "_cache"} <= PRIVATE
    assert len(TEST_FILES) > 30


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: str(p.relative_to(TESTS)))
def test_uses_public_api_only(path):
    bad = _violations(path)
    assert not bad, "private latentgp names used in tests:\n" + "\n".join(bad)


def test_the_check_finds_private_uses(tmp_path):
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "from latentgp.models.base import _first_sentence\n"
        "def t(m, monkeypatch):\n"
        "    m._build(1, 1)\n"
        "    m._cache = None\n"
        "    monkeypatch.setattr(m, '_cache', None)\n"
        "    getattr(m, '_scale_y')\n"
        "    m.__class__, m.build(1, 1)\n"
    )
    bad = _violations(probe, root=tmp_path)
    assert len(bad) == 5, bad
