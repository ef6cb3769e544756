"""Issue 11, part 3: fault tolerance of ``latentgp fit``, tried with real signals.

A training run in a subprocess (``latentgp fit ... --checkpoint ck --checkpoint-every 1
--out model.pt``, so that a signal very likely lands while a checkpoint is being written)
is interrupted with SIGINT, SIGTERM or SIGKILL at a random moment.  Afterwards:

* the checkpoint is absent or loads (never partial), and no temporary file is left
  except possibly one from SIGKILL;
* a model file that existed before the run is byte-for-byte unchanged;
* SIGINT and SIGTERM exit with status 130 after saving a checkpoint, printing no traceback;
* ``--resume`` finishes the run with the parameters of an uninterrupted run.

The soak test (marked slow) repeats kill/resume cycles over a longer run.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.cli import main

PREVIOUS = b"a model file from an earlier run\n"
STEPS = 150


def _csv(path: Path, n: int = 1200, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.sin(2 * X[:, 0]) + 0.3 * X[:, 1] + 0.1 * rng.normal(size=n)
    rows = ["a,b,c,y"] + [",".join(f"{v:.6f}" for v in r) for r in np.c_[X, y]]
    path.write_text("\n".join(rows) + "\n")
    return path


def _args(data: Path, steps: int) -> list[str]:
    return [
        "fit", "--data", str(data), "--model", "svgp", "--inducing", "16",
        "--batch-size", "40", "--max-steps", str(steps), "--lr", "0.03", "--seed", "5",
        "--no-progress",
    ]  # fmt: skip


def _run_inprocess(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(argv)
    return rc, err.getvalue()


def _state(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)["state"]


def _assert_same_model(a: Path, b: Path, tol: float = 1e-9) -> None:
    sa, sb = _state(a), _state(b)
    assert sa.keys() == sb.keys()
    for k in sa:
        torch.testing.assert_close(sa[k], sb[k], rtol=tol, atol=tol, msg=k)


def _start(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "latentgp", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _interrupt(proc: subprocess.Popen, ck: Path, sig: int, delay: float) -> tuple[int, str]:
    """Wait for this process's first checkpoint, then ``delay`` seconds, then send ``sig``.

    (A signal during interpreter start-up, before ``main`` runs, is Python's business:
    it prints a KeyboardInterrupt traceback from the imports.)"""

    def stamp():
        return ck.stat().st_mtime_ns if ck.exists() else None

    before = stamp()
    deadline = time.time() + 120
    while stamp() in (None, before) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(delay)
    if proc.poll() is None:
        proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def _check_files_after_fault(folder: Path, ck: Path, out: Path) -> int:
    """The invariants after any fault; returns the checkpoint's step (0 if none)."""
    assert out.read_bytes() == PREVIOUS  # an earlier output is never overwritten
    step = 0
    if ck.exists():
        step = int(lg.training.load_checkpoint(ck)["step"])  # never partial
    return step


@pytest.fixture(scope="module")
def run_setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("faults")
    data = _csv(d / "d.csv")
    ref = d / "reference.pt"
    rc, err = _run_inprocess([*_args(data, STEPS), "--out", str(ref)])
    assert rc == 0, err
    return d, data, ref


@pytest.mark.parametrize(
    "sig",
    [
        pytest.param(signal.SIGINT, id="SIGINT"),
        pytest.param(signal.SIGTERM, id="SIGTERM", marks=pytest.mark.slow),  # same code path
    ],
)
def test_interrupt_saves_checkpoint_exits_130_and_resume_matches(run_setup, tmp_path, sig):
    _, data, ref = run_setup
    ck, out = tmp_path / "run.ckpt", tmp_path / "model.pt"
    out.write_bytes(PREVIOUS)
    argv = [*_args(data, STEPS), "--checkpoint", str(ck), "--checkpoint-every", "1",
            "--out", str(out)]  # fmt: skip
    rc, err = _interrupt(_start(argv), ck, sig, delay=random.uniform(0.0, 0.15))
    if rc != 130 and out.read_bytes() != PREVIOUS:
        _assert_same_model(out, ref)  # the run was complete before the signal landed
        pytest.skip(f"training finished before the signal arrived (status {rc})")
    assert rc == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "latentgp: interrupted"
    assert "training interrupted at step" in err and str(ck) in err
    step = _check_files_after_fault(tmp_path, ck, out)
    assert 0 < step < STEPS
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    rc, err = _run_inprocess([*argv, "--resume"])
    assert rc == 0, err
    _assert_same_model(out, ref)


def test_sigkill_at_random_point_then_resume_matches(run_setup, tmp_path):
    _, data, ref = run_setup
    ck, out = tmp_path / "run.ckpt", tmp_path / "model.pt"
    out.write_bytes(PREVIOUS)
    argv = [*_args(data, STEPS), "--checkpoint", str(ck), "--checkpoint-every", "1",
            "--out", str(out)]  # fmt: skip
    rc, _ = _interrupt(_start(argv), ck, signal.SIGKILL, delay=random.uniform(0.0, 0.15))
    if rc == 0:
        _assert_same_model(out, ref)
        pytest.skip("training finished before the signal arrived (machine too fast)")
    assert rc == -signal.SIGKILL
    step = _check_files_after_fault(tmp_path, ck, out)
    assert step < STEPS
    rc, err = _run_inprocess([*argv, "--resume"])
    assert rc == 0, err
    _assert_same_model(out, ref)


def test_api_ctrl_c_inside_a_step_resumes_exactly(tmp_path):
    """A KeyboardInterrupt inside a step (after the batch was drawn) rewinds the cursor and
    the random state, so the resumed run takes that step again and ends where an
    uninterrupted run does."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 2))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=120)
    kw = dict(batch_size=25, max_steps=20, lr=0.05, seed=3)
    ref = lg.SVGP(num_inducing=10).fit(X, y, **kw)
    ck = tmp_path / "run.ckpt"
    m = lg.SVGP(num_inducing=10)
    m.initialize(X, y, seed=3)
    fn, calls = m.likelihood.expected_log_prob, {"n": 0}

    def ctrl_c_in_step_7(*a, **k):
        calls["n"] += 1
        if calls["n"] == 8:
            raise KeyboardInterrupt
        return fn(*a, **k)

    m.likelihood.expected_log_prob = ctrl_c_in_step_7
    with pytest.warns(lg.TrainingWarning, match="interrupted at step 7"):
        m.fit(X, y, **kw, checkpoint=ck)
    resumed = lg.SVGP(num_inducing=10).fit(X, y, **kw, checkpoint=ck, resume=True)
    for k, v in ref.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[k], v, rtol=1e-10, atol=1e-10, msg=k)


def test_failed_write_keeps_previous_model_file(run_setup, tmp_path, monkeypatch):
    """A disk error while writing the model: one-line error, old file intact, no temp."""
    _, data, _ = run_setup
    out = tmp_path / "model.pt"
    out.write_bytes(PREVIOUS)
    real_save = torch.save

    def full_disk(obj, f, *a, **k):
        if hasattr(f, "write") and not isinstance(f, io.BytesIO):
            raise OSError(28, "No space left on device")
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", full_disk)
    rc, err = _run_inprocess([*_args(data, 5), "--out", str(out)])
    assert rc == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0], err
    assert out.read_bytes() == PREVIOUS
    assert sorted(os.listdir(tmp_path)) == ["model.pt"]


@pytest.mark.slow
def test_soak_many_kill_resume_cycles_match_uninterrupted_run(tmp_path):
    """A 1500-step run killed (SIGKILL / SIGTERM / SIGINT, at random moments) and resumed
    until done ends with exactly the parameters of an uninterrupted run."""
    data = _csv(tmp_path / "d.csv")
    ref = tmp_path / "ref.pt"
    assert _run_inprocess([*_args(data, 1500), "--out", str(ref)])[0] == 0
    ck, out = tmp_path / "run.ckpt", tmp_path / "model.pt"
    out.write_bytes(PREVIOUS)
    argv = [*_args(data, 1500), "--checkpoint", str(ck), "--checkpoint-every", "3",
            "--out", str(out), "--resume"]  # fmt: skip
    rng = random.Random(11)
    cycles, steps_seen = 0, []
    while cycles < 12:
        sig = rng.choice([signal.SIGKILL, signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
        rc, err = _interrupt(_start(argv), ck, sig, delay=rng.uniform(0.1, 1.5))
        if rc == 0:
            break
        assert rc in (130, -signal.SIGKILL), err
        assert "Traceback" not in err
        steps_seen.append(_check_files_after_fault(tmp_path, ck, out))
        cycles += 1
    if out.read_bytes() == PREVIOUS:
        assert _run_inprocess(argv)[0] == 0
    print(f"\nsoak: {cycles} interruptions, checkpoint steps after each: {steps_seen}")
    assert steps_seen == sorted(steps_seen)  # progress is never lost
    _assert_same_model(out, ref)
