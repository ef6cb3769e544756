"""The package's import graph: layers import downward only, and there is no cycle.

Read from the source with ``ast`` (every ``import`` statement, at module level or inside
a function), so a lazy import cannot hide an upward dependency.  The layers are those of
``docs/design.md``:

    constants, version, columns, config, validation, kde, rng (import nothing above)
    linalg, parameters, mixtures                numerics
    kernels, inducing                           priors
    likelihoods                                 observation models, integrators
    variational                                 posterior families, the one conditional
    models                                      model families
    training                                    the one fit
    cli, sklearn, botorch, plotting, datasets, the package itself     user-facing

``data`` and ``metrics`` sit beside the stack: they may use the numerics below them, and
only training and the user-facing layer import them.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"
PKG = "latentgp"

#: rank of each top-level part of the package; higher ranks may import lower ones
RANKS = {
    "constants": 0,
    "version": 0,
    "columns": 0,
    "config": 0,
    "validation": 0,
    "kde": 0,
    "rng": 0,
    "options": 0,
    "linalg": 1,
    "linalg_iterative": 1,
    "linalg_cg": 1,
    "linalg_love": 1,
    "linalg_precondition": 1,
    "parameters": 1,
    "mixtures": 1,
    "priors": 1,
    "io": 1,
    "data": 1.5,
    "metrics": 1.5,
    "kernels": 2,
    "inducing": 2,
    "means": 2,
    "likelihoods": 3,
    "variational": 4,
    "models": 5,
    "training": 6,
    "cli": 7,
    "cli_config": 7,
    "cli_plot": 7,
    "cli_reproduce": 7,
    "sklearn": 7,
    "mcmc": 7,
    "plotting": 7,
    "datasets": 7,
    "botorch": 7,
    "__main__": 8,
    "": 7,  # the package's __init__: the facade, beside the CLI (neither imports the other)
}
#: modules beside the stack that the model stack (ranks 2-5) must never import
BESIDE = {"data", "metrics"}


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in (SRC / PKG).rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
    """The latentgp modules that ``name`` imports (``from pkg import mod`` counts as
    importing ``pkg.mod``, and as importing ``pkg`` only when a name is not a module)."""
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == PKG)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != PKG:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in modules else target)
    return {m for m in found if m in modules and m != name}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


GRAPH = {name: _imports(name, path, _modules()) for name, path in _modules().items()}


def test_every_part_of_the_package_has_a_layer():
    missing = sorted({_part(m) for m in GRAPH} - set(RANKS))
    assert not missing, f"add these to RANKS (and docs/design.md): {missing}"


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_point_downward(module):
    rank = RANKS[_part(module)]
    bad = []
    for dep in sorted(GRAPH[module]):
        dep_part = _part(dep)
        if dep_part == _part(module):
            continue  # inside one part: checked for cycles below
        if RANKS[dep_part] > rank:
            bad.append(f"{dep} (layer {RANKS[dep_part]} above {rank})")
        elif dep_part in BESIDE and 2 <= rank <= 5:
            bad.append(f"{dep} (beside the model stack)")
    assert not bad, f"{module} imports upward: {bad}"


def test_no_import_cycles():
    """Tarjan's strongly connected components over the module graph."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"
