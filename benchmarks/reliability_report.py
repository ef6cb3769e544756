"""Tables for docs/results/reliability.md, from real runs.

    .venv/bin/python benchmarks/reliability_report.py inputs   # bad-input table (markdown)
    .venv/bin/python benchmarks/reliability_report.py scaling  # bad-scaling numbers
    .venv/bin/python benchmarks/reliability_report.py float32  # float32 vs float64 on UCI
    .venv/bin/python benchmarks/reliability_report.py files    # issue 29: the file battery

``files`` runs the crafted-file battery of ``tests/integration/test_model_files_crafted.py``
(every size of every header) and the bad-input table ``CASES``, rewrites the section
between the ``issue-29`` markers of ``docs/results/reliability.md`` and writes the counts
with their provenance to ``docs/results/reliability_files.json``.

``inputs`` runs every row of ``tests/integration/test_reliability_inputs.py::CASES`` (the same table
the tests assert on) and prints the outcome and the exact message each bad input gets, so
the report cannot drift from the code.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "integration"))
os.environ.setdefault("LATENTGP_DATA", str(HERE.parent.parent / "shared" / "data"))


def _cell(text: str, limit: int = 260) -> str:
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return text.replace("|", "\\|").replace("\n", " ")


def inputs() -> None:
    import test_reliability_inputs as T

    print("| boundary | bad input | outcome | message |")
    print("| --- | --- | --- | --- |")
    bad = 0
    for case in T.CASES:
        with tempfile.TemporaryDirectory() as d, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = case.run(Path(d))
            got.message = got.message.replace(os.path.realpath(d), "<tmp>").replace(d, "<tmp>")
        ok = got.kind == case.kind and case.fragment in got.message
        bad += not ok
        mark = "" if ok else " **(differs from the test's expectation)**"
        msg = _cell(got.message)
        print(f"| {case.boundary} | {_cell(case.what)} | {got.kind}{mark} | `{msg}` |")
    print(f"\n{len(T.CASES)} bad inputs, {bad} differing from the tests' expectations")


def _problem(n=60, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)
    return X, y, rng.uniform(-3, 3, size=(25, 2))


def scaling() -> None:
    import latentgp as lg

    makers = {
        "ExactGP": (lambda: lg.ExactGP(), dict(max_steps=40)),
        "SparseGP vfe M=15": (
            lambda: lg.SparseGP(num_inducing=15, method="vfe"),
            dict(max_steps=30),
        ),
        "SVGP M=15": (lambda: lg.SVGP(num_inducing=15), dict(max_steps=80, lr=0.03, seed=0)),
    }
    print("| model | transform | max abs mean error / sd(y) | max rel. variance error | seconds |")
    print("| --- | --- | --- | --- | --- |")
    X, y, Xt = _problem()
    for name, (make, kw) in makers.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m0, v0 = make().fit(X, y, **kw).predict_y(Xt)
            for sx, sy, dup in [(1, 1e6, False), (1e-6, 1, False), (1e6, 1, False),
                                (1e-6, 1e6, True), (1e6, 1e-6, True)]:  # fmt: skip
                Xa, ya = (np.r_[X, X[:20]], np.r_[y, y[:20] + 0.05]) if dup else (X, y)
                r0 = (make().fit(Xa, ya, **kw).predict_y(Xt)) if dup else (m0, v0)
                t = time.perf_counter()
                m1, v1 = make().fit(Xa * sx, ya * sy, **kw).predict_y(Xt * sx)
                dt = time.perf_counter() - t
                e_m = np.abs(m1 / sy - r0[0]).max() / y.std()
                e_v = np.abs(v1 / sy**2 / r0[1] - 1).max()
                what = f"X x {sx:g}, y x {sy:g}" + (", 20 rows duplicated" if dup else "")
                print(f"| {name} | {what} | {e_m:.2g} | {e_v:.2g} | {dt:.1f} |")


def float32() -> None:
    import torch

    import latentgp as lg

    print("| dataset | N train | dtype | test RMSE | steps | repairs | seconds |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in ("housing", "concrete", "energy", "kin40k"):
        ds = lg.datasets.load(name, split=0)
        s = lg.datasets.Standardizer().fit(ds.X_train)
        Xtr, Xte = s.transform(ds.X_train), s.transform(ds.X_test)
        for dtype in (torch.float32, torch.float64):
            t = time.perf_counter()
            m = lg.SVGP(num_inducing=64, dtype=dtype)
            epochs = 100 if len(Xtr) < 5000 else 10
            m.fit(Xtr, ds.y_train, batch_size=256, epochs=epochs, lr=0.02, seed=0)
            mean, var = m.predict_y(Xte)
            dt = time.perf_counter() - t
            rmse = float(np.sqrt(np.mean((mean - ds.y_test) ** 2)))
            assert np.all(var > 0)
            print(f"| {name} | {len(Xtr)} | {str(dtype)[6:]} | {rmse:.4g} | {m.history_.steps} "
                  f"| {len(m.history_.events)} | {dt:.1f} |")  # fmt: skip


RESULTS = HERE.parent / "docs" / "results"
BEGIN, END = "<!-- issue-29 battery: begin -->", "<!-- issue-29 battery: end -->"


def _verdict(F, case, got) -> str:
    """What a crafted-file case gave: refused as it must be, or how it failed."""
    if F.refused(case, got):
        return "accepted, same predictions" if got.kind == F.SAME else "refused"
    if got.kind == F.DIFFERENT or (got.kind == F.SAME and not case.inert):
        return "silent wrong result"
    if got.kind in ("ValueError", "TypeError"):
        return "refused without naming the record"
    return f"other failure ({got.kind})"


def _file_battery(F, folder: Path) -> tuple[dict, dict]:
    """``{(family, kind): {verdict: count}}`` and ``{family: (files, largest, peak KiB)}``."""
    from collections import Counter

    counts: dict = {}
    cases = [c for fam in F.FAMILIES for c in F.battery(fam, folder, every_size=True)]
    for case in cases + F.checkpoint_battery(folder):
        verdict = _verdict(F, case, case.run())
        counts.setdefault((case.family, case.kind), Counter())[verdict] += 1
    peaks = {}
    for fam in F.FAMILIES:
        good, crafted = F.crafted_sizes(fam, folder, every_size=True)
        peak, _ = F.peak_kib(good, crafted)
        peaks[fam] = (len(crafted), max(p.stat().st_size for p in crafted), peak)
    return counts, peaks


def _boundaries(T, folder: Path) -> dict:
    """``{boundary: {outcome: count}}`` over ``CASES`` (API, sklearn, loaders, CLI)."""
    from collections import Counter

    out: dict = {}
    for case in T.CASES:
        with tempfile.TemporaryDirectory(dir=folder) as d:
            got = case.run(Path(d))
        out.setdefault(case.boundary, Counter())[got.kind] += 1
    return out


def _files_markdown(counts, peaks, bounds, prov) -> list[str]:
    verdicts = ["refused", "accepted, same predictions", "silent wrong result",
                "refused without naming the record"]  # fmt: skip
    lines = [BEGIN, "", "    .venv/bin/python benchmarks/reliability_report.py files", "",
             f"Last run: commit {prov['commit']}, {prov['date']}, torch "
             f"{prov['versions']['torch']}, {prov['cpu']} (counts and provenance also in "
             "`docs/results/reliability_files.json`).", "",
             "| model | kind | cases | " + " | ".join(verdicts) + " | other failures |",
             "| --- | --- | --- | " + " | ".join("---" for _ in verdicts) + " | --- |"]  # fmt: skip
    for (fam, kind), c in counts.items():
        other = sum(n for v, n in c.items() if v.startswith("other"))
        cells = " | ".join(str(c.get(v, 0)) for v in verdicts)
        lines.append(f"| {fam} | {kind} | {sum(c.values())} | {cells} | {other} |")
    total = sum(sum(c.values()) for c in counts.values())
    silent = sum(c.get("silent wrong result", 0) for c in counts.values())
    other = sum(n for c in counts.values() for v, n in c.items() if v.startswith("other"))
    lines += ["", f"{total} crafted or corrupted files, {silent} silent wrong results, "
              f"{other} failures other than ValueError/TypeError.", "",
              "Allocation: every size in each family's header multiplied by 10^5 (checksums "
              "recomputed, as an attacker would), loaded one after another in a forked "
              "process; growth of its peak resident memory:", "",
              "| model | crafted files | largest file (bytes) | peak memory growth (KiB) |",
              "| --- | --- | --- | --- |"]  # fmt: skip
    for fam, (n, size, peak) in peaks.items():
        lines.append(f"| {fam} | {n} | {size} | {peak} |")
    lines += ["", "Bad input at the boundaries (every row of `CASES`, section 1):", "",
              "| boundary | cases | outcomes |", "| --- | --- | --- |"]  # fmt: skip
    for boundary, c in sorted(bounds.items()):
        outcomes = ", ".join(f"{k}: {n}" for k, n in sorted(c.items()))
        lines.append(f"| {boundary} | {sum(c.values())} | {outcomes} |")
    api_other = sum(n for b, c in bounds.items() if not b.startswith("cli")
                    for k, n in c.items()
                    if k not in ("ValueError", "TypeError", "ok", "FileNotFoundError"))  # fmt: skip
    exit1 = sum(c.get("exit 1", 0) for b, c in bounds.items() if b.startswith("cli"))
    lines += ["", f"Outside the CLI, {api_other} failures other than ValueError/TypeError "
              "(a missing file is a FileNotFoundError, as documented); in the CLI, "
              f"{exit1} bad inputs end with exit status 1 (bad input exits 2).", "", END]
    return lines


def files() -> None:
    import json

    import test_model_files_crafted as F
    import test_reliability_inputs as T
    from machine import stamp

    with tempfile.TemporaryDirectory() as d, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        counts, peaks = _file_battery(F, Path(d))
        bounds = _boundaries(T, Path(d))
    record = stamp({
        "files": [{"model": f, "kind": k, **c} for (f, k), c in counts.items()],
        "allocation": [{"model": f, "crafted_files": n, "largest_bytes": s, "peak_kib": p}
                       for f, (n, s, p) in peaks.items()],
        "boundaries": [{"boundary": b, **c} for b, c in bounds.items()],
    })  # fmt: skip
    (RESULTS / "reliability_files.json").write_text(json.dumps(record, indent=1) + "\n")
    lines = _files_markdown(counts, peaks, bounds, record["provenance"])
    page = RESULTS / "reliability.md"
    text = page.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    page.write_text(text[:start] + "\n".join(lines) + text[end:])
    print("\n".join(lines))


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "inputs"
    {"inputs": inputs, "scaling": scaling, "float32": float32, "files": files}[what]()
