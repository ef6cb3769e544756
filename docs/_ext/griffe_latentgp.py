"""Griffe extension for the docs build: read latentgp's compact parameter lists.

Many latentgp docstrings write numpy-style sections with the description on the same
line as the name (``num_inducing: M (ignored when Z is given).``).  Griffe's numpy parser
expects ``name : type`` followed by an indented description, so this rewrites each such
entry to that form before parsing.  It also turns reStructuredText literal blocks
(a paragraph ending in ``::`` followed by an indented block) into fenced code blocks and
Sphinx roles (``:class:`~a.B```) into inline code, since docstrings are rendered as
Markdown.  Source files are not changed.
"""

from __future__ import annotations

import re

import griffe

_SECTIONS = ("Parameters", "Attributes", "Other Parameters")
_ENTRY = re.compile(r"^(\s*)([A-Za-z_*][\w*]*(?:\s*,\s*[A-Za-z_*][\w*]*)*):(?:\s+(\S.*))?$")
_BORDER = re.compile(r"^\s*=+(?:\s+=+)+\s*$")
_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):`~?([^`]+)`")


def literal_blocks(text: str) -> str:
    """Turn ``para::`` + indented block (reStructuredText) into a fenced code block."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        if not line.rstrip().endswith("::") or line.strip().startswith(".."):
            continue
        base = len(line) - len(line.lstrip())
        j = i
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j >= len(lines) or len(lines[j]) - len(lines[j].lstrip()) <= base:
            continue  # no indented block follows
        end = j
        block: list[str] = []
        while end < len(lines) and (
            not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > base
        ):
            block.append(lines[end])
            end += 1
        while block and not block[-1].strip():
            block.pop()
        indent = min(len(b) - len(b.lstrip()) for b in block if b.strip())
        stripped = line.rstrip()[:-2].rstrip()
        out[-1] = stripped + (":" if stripped and not stripped.endswith(":") else "")
        pad = " " * base
        out += ["", pad + "```text", *[pad + b[indent:] for b in block], pad + "```", ""]
        i = end
    return "\n".join(out)


def simple_tables(text: str) -> str:
    """Fence reStructuredText simple tables (``===  ===`` borders) as preformatted text."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        if not _BORDER.match(lines[i]):
            out.append(lines[i])
            i += 1
            continue
        borders = [k for k in range(i, len(lines)) if _BORDER.match(lines[k])][:3]
        end = borders[-1]
        out += ["", "```text", *lines[i : end + 1], "```", ""]
        i = end + 1
    return "\n".join(out)


_INLINE = re.compile(r"(?<=[.;])\s+([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*):\s+")


def _split_inline(names: list[str], desc: str, known: set[str]) -> list[tuple[list[str], str]]:
    """Split ``"M for SVGP.  max_exact: largest n"`` into one entry per documented name."""
    entries: list[tuple[list[str], str]] = []
    start = 0
    for m in _INLINE.finditer(desc):
        found = [n.strip() for n in m.group(1).split(",")]
        if known and all(n in known for n in found):
            entries.append((names, desc[start : m.start()].strip()))
            names, start = found, m.end()
    entries.append((names, desc[start:].strip()))
    return entries


def _rewrite_section(block: list[str], known: set[str]) -> list[str]:
    """Rewrite the lines of one Parameters/Attributes section (no blank lines inside)."""
    base = len(block[0]) - len(block[0].lstrip())
    pad = " " * base
    items: list[tuple[bool, list[str], list[str]]] = []  # (compact?, names or raw, description)
    for cur in block:
        indent = len(cur) - len(cur.lstrip())
        m = _ENTRY.match(cur)
        if m and indent == base:
            names = [n.strip() for n in m.group(2).split(",")]
            items.append((True, names, [m.group(3)] if m.group(3) else []))
        elif indent == base or not items:
            items.append((False, [cur], []))  # already numpy style (``name : type``)
        else:
            items[-1][2].append(cur.strip())
    out: list[str] = []
    for compact, names, desc in items:
        if not compact:
            out += [names[0], *[f"{pad}    {d}" for d in desc]]
            continue
        for entry_names, text in _split_inline(names, " ".join(desc), known):
            for name in entry_names:  # one entry per name: each gets its own annotation
                out.append(f"{pad}{name}")
                if text:
                    out.append(f"{pad}    {text}")
    return out


def rewrite(text: str, known: set[str] | None = None) -> str:
    """Return ``text`` with compact ``name: description`` entries in numpy form.

    ``known`` are the documented object's parameter and member names; a description that
    contains ``"...  name: text"`` for a known name is split into two entries.
    """
    known = known or set()
    lines = simple_tables(literal_blocks(text)).splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        is_header = (
            line.strip() in _SECTIONS and i + 1 < len(lines) and set(lines[i + 1].strip()) == {"-"}
        )
        if not is_header:
            out.append(line)
            i += 1
            continue
        out.extend([line, lines[i + 1]])
        i += 2
        block = []
        while i < len(lines) and lines[i].strip():
            block.append(lines[i])
            i += 1
        if block:
            out += _rewrite_section(block, known)
        # free text after the list would be read as more entries: give it its own section
        if i < len(lines) and not lines[i].strip():
            j = i
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j < len(lines) and not (j + 1 < len(lines) and set(lines[j + 1].strip()) == {"-"}):
                out.extend(["", "Notes", "-----"])
                i = j
    # Sphinx roles (:class:`~a.b.C`) become inline code of the last name
    return _ROLE.sub(lambda r: f"``{r.group(1).split('.')[-1]}``", "\n".join(out))


def _known_names(obj: griffe.Object) -> set[str]:
    names: set[str] = set()
    try:
        names |= {p.name.lstrip("*") for p in obj.parameters}  # functions; classes: __init__
    except (AttributeError, TypeError, ValueError):
        pass
    try:
        names |= set(obj.members)
    except (AttributeError, TypeError):
        pass
    return names


class CompactParameters(griffe.Extension):
    """Rewrite compact parameter entries of every docstring before it is parsed."""

    def on_object(self, *, obj: griffe.Object, **kwargs) -> None:  # noqa: D102
        # runs once the object and its members are loaded, so a class knows __init__
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value, _known_names(obj))
