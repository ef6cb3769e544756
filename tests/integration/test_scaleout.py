"""Checkpoints, exact resume, Ctrl-C, and data-parallel training on torch.distributed."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.training import distributed as D


def _data(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = np.sin(2 * X[:, 0]) + 0.3 * X[:, 1] + 0.1 * rng.normal(size=n)
    return X, y


def _params(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _assert_same(a, b, tol=0.0):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=tol, atol=tol, msg=k)


KW = dict(batch_size=25, max_steps=30, lr=0.05, seed=3)


def test_resume_matches_uninterrupted_run(tmp_path):
    X, y = _data()
    ref = lg.SVGP(num_inducing=10).fit(X, y, **KW)
    ck = tmp_path / "run.ckpt"
    first = lg.SVGP(num_inducing=10)
    first.fit(X, y, **KW, checkpoint=ck, callbacks=[lambda i: i["step"] >= 12])
    assert first.history_.steps == 12 and ck.exists()
    second = lg.SVGP(num_inducing=10)
    second.fit(X, y, **KW, checkpoint=ck, resume=True)
    assert second.history_.steps == 30
    _assert_same(_params(second), _params(ref))
    np.testing.assert_array_equal(second.history_.objective, ref.history_.objective)


def test_checkpoint_from_another_run_is_refused(tmp_path):
    X, y = _data()
    ck = tmp_path / "run.ckpt"
    lg.SVGP(num_inducing=10).fit(X, y, **KW, checkpoint=ck)
    with pytest.raises(ValueError, match="different run"):
        lg.SVGP(num_inducing=10).fit(X, y, batch_size=30, max_steps=5, checkpoint=ck, resume=True)


def test_truncated_checkpoint_gives_clear_error(tmp_path):
    X, y = _data()
    ck = tmp_path / "run.ckpt"
    lg.SVGP(num_inducing=10).fit(X, y, **KW, checkpoint=ck)
    data = ck.read_bytes()
    ck.write_bytes(data[: len(data) // 3])
    with pytest.raises(ValueError, match="corrupt or truncated"):
        lg.SVGP(num_inducing=10).fit(X, y, **KW, checkpoint=ck, resume=True)


def test_ctrl_c_stops_cleanly_and_checkpoints(tmp_path):
    X, y = _data()
    ck = tmp_path / "run.ckpt"

    def interrupt(info):
        if info["step"] == 7:
            raise KeyboardInterrupt

    m = lg.SVGP(num_inducing=10)
    with pytest.warns(lg.TrainingWarning, match="interrupted at step 7"):
        m.fit(X, y, **KW, checkpoint=ck, callbacks=[interrupt])
    assert m.history_.stopped.startswith("interrupted") and ck.exists()
    assert all(torch.isfinite(p).all() for p in m.parameters())
    resumed = lg.SVGP(num_inducing=10).fit(X, y, **KW, checkpoint=ck, resume=True)
    ref = lg.SVGP(num_inducing=10).fit(X, y, **KW)
    _assert_same(_params(resumed), _params(ref))


_KILL_SCRIPT = r"""
import sys, time, numpy as np, latentgp as lg
sys.path.insert(0, {tests!r})
from test_scaleout import _data, KW
X, y = _data()
def slow(info):
    time.sleep(0.05)
lg.SVGP(num_inducing=10).fit(X, y, **KW, checkpoint={ck!r}, checkpoint_every=4,
                             callbacks=[slow])
"""


def test_sigkill_mid_training_then_resume(tmp_path):
    X, y = _data()
    ck = tmp_path / "run.ckpt"
    code = _KILL_SCRIPT.format(tests=os.path.dirname(__file__), ck=str(ck))
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.time() + 120
    while not ck.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert ck.exists()
    state = lg.training.load_checkpoint(ck)  # never a partial file
    assert 0 < state["step"] <= 30
    resumed = lg.SVGP(num_inducing=10).fit(X, y, **KW, checkpoint=ck, resume=True)
    ref = lg.SVGP(num_inducing=10).fit(X, y, **KW)
    _assert_same(_params(resumed), _params(ref))
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def _dist_worker(X, y, out, kw):
    m = lg.SVGP(num_inducing=10).fit(X, y, **kw)
    if D.is_main():
        torch.save(_params(m), out)


@pytest.mark.parametrize(
    "kw",
    [
        dict(batch_size=40, max_steps=6, lr=0.05, seed=1),
        dict(max_steps=4, lr=0.05, seed=1),  # full batch
        dict(max_steps=3, lr=1.0, optimizer="lbfgs", seed=1),
    ],
    ids=["minibatch", "fullbatch", "lbfgs"],
)
def test_two_processes_equal_one_process(tmp_path, kw):
    X, y = _data(101)  # 101 rows: unequal parts across the 2 processes
    out = tmp_path / "params.pt"
    D.spawn(_dist_worker, 2, X, y, str(out), kw)
    two = torch.load(out, weights_only=True)
    one = _params(lg.SVGP(num_inducing=10).fit(X, y, **kw))
    _assert_same(two, one, tol=1e-9)


def _work_then_crash_at_exit(out):
    import atexit

    if D.is_main():
        torch.save({"done": torch.ones(1)}, out)
    else:
        atexit.register(os.abort)  # SIGABRT in interpreter teardown, after the work


def _crash_during_work(out):
    if not D.is_main():
        os.abort()
    torch.distributed.barrier()  # rank 0 waits for rank 1, which never comes


def test_spawn_tolerates_a_teardown_crash_after_the_work(tmp_path):
    out = tmp_path / "done.pt"
    with pytest.warns(RuntimeWarning, match="died from signal SIGABRT while tearing down"):
        D.spawn(_work_then_crash_at_exit, 2, str(out))
    assert torch.load(out, weights_only=True)["done"].item() == 1


def test_spawn_raises_a_crash_during_the_work(tmp_path):
    import torch.multiprocessing as mp

    with pytest.raises(mp.ProcessExitedException, match="SIGABRT"):
        D.spawn(_crash_during_work, 2, str(tmp_path / "never.pt"))


def test_local_part_weights_make_the_average_exact():
    idx = torch.arange(101)
    parts = torch.tensor_split(idx, 2)
    weights = [2 * len(p) / 101 for p in parts]
    # (1/W) sum_r (N W / B) S_r - G equals (N / B) S - G for any split
    S = torch.randn(101, dtype=torch.float64)
    N, G = 1000.0, 3.0
    avg = sum((N * w / len(p)) * S[p].sum() - G for p, w in zip(parts, weights, strict=True)) / 2
    assert float(avg) == pytest.approx(float(N / 101 * S.sum() - G), rel=1e-12)
