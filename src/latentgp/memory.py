"""Handing freed heap memory back to the operating system between the stages of a fit.

glibc's allocator keeps freed blocks in its arenas for reuse: after a stage that freed
hundreds of megabytes of tensors (the exact GP's Cholesky pretrain, one CG evaluation's
preconditioner and workspaces), the process's resident size stays near that stage's peak
and the next stage's allocations stack on top of it.  ``malloc_trim(0)`` returns the free
pages at the top of the heap and in each arena.  Elsewhere (macOS, Windows, musl) this is a
no-op: those allocators return large blocks themselves or offer no such call.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable

__all__ = ["release_freed_memory"]


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_freed_memory() -> bool:
    """Return the C heap's free pages to the operating system (glibc's ``malloc_trim(0)``).

    Returns True when memory was released, False when nothing was or the C library has no
    such call.  It frees nothing that is in use, so it is safe at any point; it costs a walk
    of the allocator's free lists (milliseconds), so call it between stages, not per step.
    """
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False
