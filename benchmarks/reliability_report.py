"""Tables for docs/results/reliability.md, from real runs.

    .venv/bin/python benchmarks/reliability_report.py inputs   # bad-input table (markdown)
    .venv/bin/python benchmarks/reliability_report.py scaling  # bad-scaling numbers
    .venv/bin/python benchmarks/reliability_report.py float32  # float32 vs float64 on UCI

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


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "inputs"
    {"inputs": inputs, "scaling": scaling, "float32": float32}[what]()
