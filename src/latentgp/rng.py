"""Seeded work that leaves the caller's random state alone.

``fit(seed=...)``, ``initialize(seed=...)`` and friends draw their random numbers (inducing
inputs, Monte Carlo samples, minibatch order) reproducibly from the seed, but must not
reseed the user's global torch generator: :func:`seeded_scope` runs the seeded work inside
:func:`torch.random.fork_rng` (the CPU generator and those of the given CUDA devices), so
the global state after the block is what it was before.  Inside the block the code seeds
and draws exactly as a plain ``torch.manual_seed(seed)`` would, so results for a given
seed are unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch

__all__ = ["seeded_scope"]


def _cuda_indices(devices: Iterable[torch.device | str | None]) -> list[int]:
    out: list[int] = []
    for d in devices:
        if d is None:
            continue
        d = torch.device(d)
        if d.type == "cuda":
            idx = d.index if d.index is not None else torch.cuda.current_device()
            if idx not in out:
                out.append(idx)
    return out


@contextlib.contextmanager
def seeded_scope(
    seed: int | None, devices: Iterable[torch.device | str | None] = ()
) -> Iterator[None]:
    """A block whose torch random state is private when ``seed`` is not None.

    ``seed=None``: nothing is forked (unseeded work draws from, and advances, the global
    generator as usual).  Otherwise the CPU generator and the generators of the CUDA
    devices among ``devices`` are saved on entry and restored on exit (also on an
    exception); the block itself calls ``torch.manual_seed`` where it needs to.
    """
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=_cuda_indices(devices)):
        yield
