"""Every numbered table and figure of a seed is on its results page or in its "Not done" list.

The rule, applied to each seed and its results pages (``SEED_PAGES``):

1. **Seed items.** Every ``Table N``, ``Figure N`` or ``Fig. N`` in the seed's text is an
   item (kind ``table`` or ``figure``, number ``N``). The seeds' captions all read
   ``Figure N:`` / ``Table N:``, so no item is missed; a mention of an item in running text
   adds nothing new.
2. **Page references.** Outside fenced code blocks a page names items with ``Table``,
   ``Tables``, ``Tab.``, ``Figure``, ``Figures``, ``Fig.``, ``Fig``, ``Figs`` or ``Figs.``
   (any case) followed by a list of numbers and ranges: ``Figs 8, 16–18``,
   ``figures 1–4 and 13``, ``figure 7 / 15`` (separators ``,``, ``and``, ``or``, ``&``,
   ``/``; ranges with ``-`` or ``–``). The list stops at the first word that is not a
   number, so ``Fig. 1 left`` names figure 1 only. A number glued to a word
   (``table2_qsgp``) is not a reference.
3. **Sections.** A page is cut at its Markdown headings; a heading's section runs to the
   next heading of the same or a higher level (so it holds its subsections). The
   **"Not done" sections** are those whose heading contains "not done" (any case).
4. **Present.** An item is present when some page of the seed names it in a heading or a
   line that lies outside every "Not done" section, and the section of that heading or
   line holds a result: a Markdown table row with a number in it (not the header or the
   ``|---|`` line) or an embedded image (``![...](...)``).
5. **Listed as not done.** An item is listed when an *entry* of a "Not done" section on
   one of the seed's pages names it and gives a reason: at least ``MIN_REASON_WORDS``
   words of three or more letters once the references are removed. An entry is a list
   item (``-``, ``*`` or ``1.`` with its continuation lines), a table row, or a paragraph.
6. Every item must be present or listed (both is fine: a figure with one panel run and the
   other not). The first page of each seed must have a "Not done" section.

What the check cannot see: whether the numbers beside a reference really are the item's.
That is a matter of reading; the check makes sure no item is dropped silently.

The seeds live in the shared folder beside the data home: ``$LATENTGP_DATA/../seeds``, else
``../shared/seeds`` from the repository root. Without them the seed tests skip (the checker's
own tests below still run).
"""

from __future__ import annotations

import os
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"

#: seed number -> its results pages (the first holds the "Not done" list)
SEED_PAGES: dict[str, tuple[str, ...]] = {
    "000": ("savigp.md",),
    "001": ("qsgp.md", "qsgp_reproduction.md", "qsgp_scaling.md"),
    "002": ("sep.md",),
    "003": ("modulated.md",),
    "004": ("sparse.md",),
}
MIN_REASON_WORDS = 4

_SEED_REF = re.compile(r"\b(Table|Figure|Fig\.)\s?(\d+)\b")
_KEY = r"(?P<key>tables?|tab\.|figures?|figs?\.?)"
_NUM = r"\d+(?:\s*[-–]\s*\d+)?"
_SEP = r"\s*(?:,|&|/|\band\b|\bor\b)\s*"
_PAGE_REF = re.compile(
    rf"(?<![\w.]){_KEY}\s*(?P<nums>{_NUM}(?:{_SEP}{_NUM})*)(?![\w.]?\d|\w)", re.IGNORECASE
)
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_ENTRY_START = re.compile(r"^\s*(?:[-*]|\d+\.)\s+")
_TABLE_SEP = re.compile(r"^\s*\|[\s:|-]+\|\s*$")


def seed_items(text: str) -> set[tuple[str, int]]:
    """The (kind, number) items a seed's text names: rule 1."""
    return {("table" if k == "Table" else "figure", int(n)) for k, n in _SEED_REF.findall(text)}


def page_refs(line: str) -> set[tuple[str, int]]:
    """The (kind, number) items one line of a page names: rule 2."""
    out: set[tuple[str, int]] = set()
    for m in _PAGE_REF.finditer(line):
        kind = "table" if m.group("key").lower().startswith("tab") else "figure"
        for part in re.split(_SEP, m.group("nums")):
            ends = [int(v) for v in re.split(r"\s*[-–]\s*", part.strip())]
            lo, hi = ends[0], ends[-1]
            if hi < lo or hi - lo > 50:  # not a range of item numbers
                hi = lo
            out.update((kind, n) for n in range(lo, hi + 1))
    return out


def _strip_refs(text: str) -> str:
    return _PAGE_REF.sub(" ", text)


def _lines_outside_code(page: str) -> list[str]:
    """The page's lines with fenced code blocks blanked (line numbers kept)."""
    out, fenced = [], False
    for line in page.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else line)
    return out


def _sections(lines: list[str]) -> list[tuple[int, int, int, str]]:
    """(start, end, level, title) of every heading's section: rule 3 (start = heading line)."""
    heads = [
        (i, len(m.group(1)), m.group(2))
        for i, line in enumerate(lines)
        if (m := _HEADING.match(line))
    ]
    out = []
    for j, (i, level, title) in enumerate(heads):
        end = next((k for k, lv, _ in heads[j + 1 :] if lv <= level), len(lines))
        out.append((i, end, level, title))
    return out


def _has_result(lines: list[str]) -> bool:
    """A Markdown table row holding a number (not a header or ``|---|`` line), or an image."""
    for k, line in enumerate(lines):
        if "![" in line:
            return True
        if not line.lstrip().startswith("|") or _TABLE_SEP.match(line):
            continue
        is_header = k + 1 < len(lines) and bool(_TABLE_SEP.match(lines[k + 1]))
        if not is_header and re.search(r"\d", line):
            return True
    return False


def _entries(lines: list[str]) -> list[str]:
    """The list items, table rows and paragraphs of a block of lines: rule 5."""
    entries: list[str] = []
    current: list[str] = []

    def flush():
        if current:
            entries.append(" ".join(current))
            current.clear()

    for line in lines:
        if not line.strip() or _HEADING.match(line):
            flush()
        elif line.lstrip().startswith("|"):
            flush()
            if not _TABLE_SEP.match(line):
                entries.append(line)
        elif _ENTRY_START.match(line):
            flush()
            current.append(line)
        else:
            current.append(line)
    flush()
    return entries


def coverage(page: str) -> tuple[set[tuple[str, int]], dict[tuple[str, int], list[str]]]:
    """(items present, {item: its "Not done" entries with a reason}) for one page."""
    lines = _lines_outside_code(page)
    sections = _sections(lines)
    not_done = [(s, e) for s, e, _, title in sections if "not done" in title.lower()]

    def in_not_done(i: int) -> bool:
        return any(s <= i < e for s, e in not_done)

    present: set[tuple[str, int]] = set()
    for i, line in enumerate(lines):
        refs = page_refs(line)
        if not refs or in_not_done(i):
            continue
        # the innermost section holding the line (or headed by it), with its subsections
        holders = [(s, e) for s, e, _, _ in sections if s <= i < e]
        s, e = max(holders) if holders else (0, len(lines))
        if _has_result(lines[s:e]):
            present |= refs
    listed: dict[tuple[str, int], list[str]] = {}
    for s, e in not_done:
        for entry in _entries(lines[s + 1 : e]):
            words = re.findall(r"[A-Za-z]{3,}", _strip_refs(entry))
            if len(words) < MIN_REASON_WORDS:
                continue
            for item in page_refs(entry):
                listed.setdefault(item, []).append(entry)
    return present, listed


def has_not_done_section(page: str) -> bool:
    return any(
        "not done" in m.group(2).lower()
        for line in _lines_outside_code(page)
        if (m := _HEADING.match(line))
    )


def uncovered(items: set[tuple[str, int]], pages: list[str]) -> list[str]:
    """The seed items that no page shows with a result or lists as not done, as text."""
    covered: set[tuple[str, int]] = set()
    for page in pages:
        present, listed = coverage(page)
        covered |= present | set(listed)
    return [f"{k.capitalize()} {n}" for k, n in sorted(items - covered)]


# ----------------------------------------------------------------- the five pages --


def _seeds_dir() -> pathlib.Path | None:
    candidates = []
    env = os.environ.get("LATENTGP_DATA", "").strip()
    if env:
        candidates.append(pathlib.Path(env).expanduser().parent / "seeds")
    candidates.append(ROOT.parent / "shared" / "seeds")
    return next((c for c in candidates if c.is_dir()), None)


def _seed_text(number: str) -> str:
    folder = _seeds_dir()
    if folder is None:
        pytest.skip(
            "the seeds folder is absent: looked for $LATENTGP_DATA/../seeds and "
            f"{ROOT.parent / 'shared' / 'seeds'}"
        )
    found = sorted(folder.glob(f"{number}_*.txt"))
    if not found:
        pytest.skip(f"no seed {number}_*.txt in {folder}")
    return found[0].read_text(encoding="utf-8")


def test_every_seed_has_a_results_page():
    folder = _seeds_dir()
    if folder is None:
        pytest.skip("the seeds folder is absent ($LATENTGP_DATA/../seeds, ../shared/seeds)")
    numbers = {p.name.split("_")[0] for p in folder.glob("[0-9][0-9][0-9]_*.txt")}
    assert numbers <= set(SEED_PAGES), f"seeds without a results page: {numbers - set(SEED_PAGES)}"


@pytest.mark.parametrize("number", sorted(SEED_PAGES))
def test_results_pages_cover_every_table_and_figure_of_their_seed(number):
    items = seed_items(_seed_text(number))
    pages = [(RESULTS / name).read_text(encoding="utf-8") for name in SEED_PAGES[number]]
    assert has_not_done_section(pages[0]), f"{SEED_PAGES[number][0]} has no 'Not done' section"
    missing = uncovered(items, pages)
    assert not missing, (
        f"seed {number}: {', '.join(missing)} neither on {', '.join(SEED_PAGES[number])} "
        "with a result nor in a 'Not done' entry with a reason"
    )


def test_seed_004_has_no_numbered_items_and_its_page_says_so():
    """The blog (seed 004) numbers no table or figure; its page must not pretend otherwise."""
    assert seed_items(_seed_text("004")) == set()
    page = (RESULTS / "sparse.md").read_text(encoding="utf-8")
    assert re.search(r"no numbered tables? or figures?", page, re.IGNORECASE)


# ------------------------------------------------------------- the checker itself --

_SEED = """Intro. Figure 1: a diagram of the model.
Table 1: results on three sets.
As Fig. 2 shows, ... Figure 2: error against time.
Figure 3: more. See Table 1 again."""

_PAGE = """# A page

## Results (Table 1, Fig. 2)

| set | ours | paper |
|---|---|---|
| a | 0.12 | 0.10 |

## Figure 3 left

![fig](x.png)

## Not done

- Figure 1: an illustration of the model, no numbers to reproduce.
"""


def test_seed_items_are_read_from_captions_and_text():
    assert seed_items(_SEED) == {("figure", 1), ("figure", 2), ("figure", 3), ("table", 1)}


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("Figs 8, 16–18 and Table 3", {8, 16, 17, 18, -3}),
        ("figures 1–4 and 13", {1, 2, 3, 4, 13}),
        ("## SARCOS, GPRN (figure 7 / 15)", {7, 15}),
        ("Fig. 1 left and Fig. 3 left", {1, 3}),
        ("seed Fig. 2; Tables 2 and 3", {2, -2, -3}),
        ("`--parts table2_qsgp` and tables.md", set()),
        ("Figure 4(a)", {4}),
    ],
)
def test_page_references_parse_lists_and_ranges(line, expected):
    got = {n if k == "figure" else -n for k, n in page_refs(line)}
    assert got == expected


def test_checker_accepts_a_page_that_covers_every_item():
    assert uncovered(seed_items(_SEED), [_PAGE]) == []


def test_checker_fails_a_page_that_drops_an_item():
    dropped = _PAGE.replace("## Figure 3 left", "## A plot")
    assert uncovered(seed_items(_SEED), [dropped]) == ["Figure 3"]


def test_checker_needs_a_result_beside_a_present_item():
    no_numbers = _PAGE.replace("| a | 0.12 | 0.10 |", "| a | good | fine |")
    assert uncovered(seed_items(_SEED), [no_numbers]) == ["Figure 2", "Table 1"]


def test_checker_needs_a_reason_in_the_not_done_list():
    bare = _PAGE.replace(": an illustration of the model, no numbers to reproduce.", ".")
    assert uncovered(seed_items(_SEED), [bare]) == ["Figure 1"]


def test_a_mention_inside_not_done_is_not_a_result():
    moved = _PAGE.replace("## Figure 3 left", "## A plot") + "\n| Figure 3 | 0.5 |\n"
    # the row is in the Not done section and has too short a reason: still uncovered
    assert uncovered(seed_items(_SEED), [moved]) == ["Figure 3"]


def test_items_can_be_spread_over_a_seeds_pages():
    first = _PAGE.replace("## Figure 3 left", "## A plot")
    second = "# Companion\n\n## Fig. 3\n\n| m | 1.5 |\n|---|---|\n| a | 2.5 |\n"
    assert uncovered(seed_items(_SEED), [first, second]) == []
    assert not has_not_done_section(second) and has_not_done_section(first)
