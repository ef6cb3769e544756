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
