"""Training checkpoints: everything needed to resume a run exactly, written atomically.

A checkpoint holds the model's and optimiser's state, the step counter, the data cursor
(the current epoch's permutation and position), the shuffling generator's and torch's
random-number states and the history so far.  It is written to a temporary file in the
same folder, flushed to disk (fsync) and renamed over the previous checkpoint, so a crash
at any moment leaves either the old or the new checkpoint, never a partial one.  The file
is read with ``torch.load(weights_only=True)``: loading never executes code.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from ..io import atomic_write, check_record_sizes, record_digests, verify_records

FORMAT = "latentgp-checkpoint"
VERSION = 1


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save`` to ``path`` through :func:`latentgp.io.atomic_write`."""
    atomic_write(path, lambda fh: torch.save(obj, fh), make_folder=True)


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Write a checkpoint (see module docstring)."""
    records = {"format": FORMAT, "version": VERSION, **state}
    atomic_torch_save({**records, "checksums": record_digests(records)}, path)


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Read a checkpoint, with a clear ``ValueError`` for a corrupt or foreign file."""
    path = os.fspath(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as err:  # noqa: BLE001
        raise ValueError(
            f"checkpoint {path} is corrupt or truncated and cannot be resumed from "
            f"({type(err).__name__}); delete it to start afresh"
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path} is not a latentgp training checkpoint")
    manifest = state.pop("checksums", None)
    if manifest is None:
        raise ValueError(
            f"checkpoint {path} has no checksums (written by an older latentgp or altered); "
            "delete it to start afresh"
        )
    # tensors dense and within the file, nesting bounded: hashing then allocates nothing
    check_record_sizes(f"checkpoint {path}", {**state, "checksums": manifest},
                       os.path.getsize(path))  # fmt: skip
    verify_records(f"checkpoint {path}", state, manifest)
    if state.get("version") != VERSION:
        raise ValueError(
            f"checkpoint {path} has format version {state.get('version')}; this latentgp "
            f"reads version {VERSION}"
        )
    return state
