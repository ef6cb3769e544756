"""The one atomic writer: whole files or none, temporary files cleaned, file-system
failures reported in one line that names the path."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest

import latentgp as lg
from latentgp.io import WriteError, atomic_write, check_writable


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.bin"
    path.write_bytes(b"old")

    def fails(fh):
        fh.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(WriteError, match=rf"could not write {path}: the disk is full"):
        atomic_write(path, fails)
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["out.bin"]


def test_torch_short_write_and_interrupt(tmp_path):
    path = tmp_path / "m.pt"

    def short(fh):
        raise RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 64")

    with pytest.raises(WriteError, match="part way"):
        atomic_write(path, short)

    def interrupted(fh):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, interrupted)
    assert os.listdir(tmp_path) == []


def test_mode_of_a_replaced_file_is_kept(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("a")
    os.chmod(path, 0o600)
    atomic_write(path, lambda fh: fh.write("b"), binary=False)
    assert path.read_text() == "b" and (os.stat(path).st_mode & 0o777) == 0o600


def test_checkpoint_path_is_checked_before_training(tmp_path):
    (tmp_path / "afile").write_text("x")
    bad = tmp_path / "afile" / "run.ckpt"  # its folder is a file
    X = np.random.default_rng(0).normal(size=(30, 1))
    m = lg.SVGP(num_inducing=5)
    with pytest.raises(WriteError, match="checkpoint"):
        m.fit(X, X[:, 0], max_steps=5, checkpoint=bad, progress=False)
    assert not m.built  # nothing was trained and lost
    with pytest.raises(WriteError, match="is a folder"):
        check_writable(tmp_path, "output")


def _flip_first_bit(t):
    """A copy of tensor ``t`` with one bit of its first element flipped."""
    import torch

    raw = torch.from_numpy(t.detach().cpu().numpy().copy())
    raw.reshape(-1).view(torch.uint8)[0] ^= 1
    return raw


def test_every_record_of_a_model_file_is_verified(tmp_path):
    """One flipped bit in any tensor record, or a changed header, is refused with the
    record named; the intact file loads."""
    import json

    import torch

    X = np.random.default_rng(0).normal(size=(40, 2))
    m = lg.SVGP(num_inducing=6).fit(X, X[:, 0], max_steps=5, progress=False)
    path = tmp_path / "m.pt"
    m.save(path)
    lg.load(path)
    payload = torch.load(path, weights_only=True)
    assert payload["state"], "no records"
    for key in payload["state"]:
        bad = torch.load(path, weights_only=True)
        bad["state"][key] = _flip_first_bit(bad["state"][key])
        torch.save(bad, tmp_path / "bad.pt")
        with pytest.raises(ValueError, match=rf"record 'state/{key}' does not match"):
            lg.load(tmp_path / "bad.pt")
    bad = torch.load(path, weights_only=True)
    header = json.loads(bad["header"])
    header["config"]["num_inducing"] = 7
    bad["header"] = json.dumps(header)
    torch.save(bad, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match="record 'header' does not match"):
        lg.load(tmp_path / "bad.pt")


def test_every_record_of_a_checkpoint_is_verified(tmp_path):
    import torch

    from latentgp.training.checkpoint import load_checkpoint, save_checkpoint

    state = {"step": 3, "model": {"w": torch.arange(4.0)}, "rng": torch.arange(3)}
    save_checkpoint(tmp_path / "c.ckpt", state)
    assert load_checkpoint(tmp_path / "c.ckpt")["step"] == 3
    bad = torch.load(tmp_path / "c.ckpt", weights_only=True)
    bad["model"]["w"] = _flip_first_bit(bad["model"]["w"])
    torch.save(bad, tmp_path / "bad.ckpt")
    with pytest.raises(ValueError, match="record 'model' does not match"):
        load_checkpoint(tmp_path / "bad.ckpt")
    bad = torch.load(tmp_path / "c.ckpt", weights_only=True)
    bad["step"] = 4
    torch.save(bad, tmp_path / "bad.ckpt")
    with pytest.raises(ValueError, match="record 'step' does not match"):
        load_checkpoint(tmp_path / "bad.ckpt")


def test_a_header_dtype_outside_the_allow_list_is_refused(tmp_path):
    import json

    import torch

    from latentgp.io import digest

    X = np.random.default_rng(0).normal(size=(30, 1))
    lg.SVGP(num_inducing=4).fit(X, X[:, 0], max_steps=2, progress=False).save(tmp_path / "m.pt")
    payload = torch.load(tmp_path / "m.pt", weights_only=True)
    header = json.loads(payload["header"])
    header["config"]["dtype"] = "nn"  # torch.nn exists: getattr would have taken it
    payload["header"] = json.dumps(header)
    payload["checksums"]["header"] = digest(payload["header"])
    torch.save(payload, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match="dtype 'nn' is not one of"):
        lg.load(tmp_path / "bad.pt")
