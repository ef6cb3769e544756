"""The model-file format as written: its name and versions, the dtypes a file may name,
the records its checksums cover, and the writing of a payload.

:meth:`GPModel.file_payload <latentgp.models.base.GPModel.file_payload>` and
:meth:`~latentgp.models.base.GPModel.save` call :func:`make_payload` and
:func:`write_payload`; reading (every check before anything is allocated) is
:mod:`latentgp.models.serialization`.  The names are re-exported by
:mod:`latentgp.models.base`, where they lived before.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch

from ..io import atomic_write, digest, record_digests

__all__ = [
    "FILE_DTYPES",
    "FORMAT",
    "FORMAT_VERSION",
    "READABLE_FORMAT_VERSIONS",
    "dtype_name",
    "file_records",
    "make_payload",
    "write_payload",
]

FORMAT = "latentgp-model"
FORMAT_VERSION = 3
#: version 2 (latentgp 0.2): inducing inputs stored as ``Z_raw`` and lengthscales/periods
#: measured in units of each input column (``input_unit`` buffers); version-1 files load
#: with those units set to 1, which gives the same model.  Version 3: a prior mean
#: function (``config["mean"]`` and its ``mean_function.*`` tensors, present only for a
#: non-zero mean); files of versions 1 and 2 have none and load with the zero mean.
READABLE_FORMAT_VERSIONS = (1, 2, 3)


#: The dtypes a model file may name (never looked up as arbitrary torch attributes).
FILE_DTYPES = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


def dtype_name(dtype: torch.dtype) -> str:
    """The name a model file stores for ``dtype`` (a key of :data:`FILE_DTYPES`)."""
    return str(dtype).replace("torch.", "")


def file_records(payload: dict[str, Any]) -> dict[str, Any]:
    """The records of a model file that its checksum manifest covers: every top-level
    entry (the header, a tool's additions such as the CLI's preprocessing record) and each
    tensor of the state, one record apiece."""
    records = {k: v for k, v in payload.items() if k not in ("checksums", "state")}
    records.update({f"state/{k}": v for k, v in payload["state"].items()})
    return records


def make_payload(
    model_name: str,
    config: dict[str, Any],
    build: dict[str, Any],
    state: dict[str, torch.Tensor],
) -> dict[str, Any]:
    """``{"header": JSON text, "state": tensors, "checksums": ...}`` of a model of class
    ``model_name`` with constructor ``config``, build sizes ``build`` and ``state`` (its
    ``state_dict``; detached and moved to the CPU here)."""
    from ..version import __version__

    header = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "library_version": __version__,
        "model": model_name,
        "config": config,
        "build": build,
    }
    state = {k: v.detach().cpu() for k, v in state.items()}
    payload = {"header": json.dumps(header), "state": state}
    payload["checksums"] = record_digests(file_records(payload))
    return payload


def write_payload(
    path: str | os.PathLike, payload: dict[str, Any], records: dict[str, str] | None
) -> None:
    """Add the text ``records`` (new keys only, covered by the checksums) to ``payload``
    and write it to ``path`` atomically with ``torch.save``."""
    for key, text in (records or {}).items():
        if key in payload or not isinstance(text, str):
            raise ValueError(f"records: {key!r} must be a new key with a text value")
        payload[key] = text
        payload["checksums"][key] = digest(text)
    atomic_write(path, lambda fh: torch.save(payload, fh))
