"""``release_freed_memory``: freed heap pages go back to the system (glibc), and it is a
no-op where the C library has no ``malloc_trim``."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest
import torch

from latentgp.memory import release_freed_memory

glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="malloc_trim is glibc's",
)


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@glibc
def test_freed_heap_pages_are_returned():
    # 2,000 blocks of 64 KiB (below the mmap threshold: they live in the heap), each
    # followed by a small block that stays alive, so the freed space is holes inside
    # the heap that glibc does not return by itself
    freed, kept = [], []
    for _ in range(2000):
        freed.append(torch.ones(8192, dtype=torch.float64))
        kept.append(torch.ones(4, dtype=torch.float64))
    freed.clear()
    before = _rss_mb()
    assert release_freed_memory() is True
    after = _rss_mb()
    assert before - after > 60.0, (before, after)  # of the 125 MB freed
    assert float(sum(k.sum() for k in kept)) == 8000.0  # what is in use is untouched


def test_without_malloc_trim_it_does_nothing():
    code = (
        "import ctypes.util\n"
        "ctypes.util.find_library = lambda name: None\n"
        "from latentgp.memory import release_freed_memory\n"
        "assert release_freed_memory() is False\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
