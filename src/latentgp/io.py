"""The one atomic file writer (model files, checkpoints, CLI outputs, figures).

A file is written to a temporary file in the destination folder, flushed to disk (fsync),
given the mode of the file it replaces (0o644 for a new one), renamed over the
destination, and the rename made durable by an fsync of the folder; on any failure, Ctrl-C
included, the temporary file is removed and an existing destination is left as it was.
A write that fails for a reason of the file system (disk full, read-only, no permission,
quota) raises :class:`WriteError`: one line that names the path and the cause.

Imports nothing from latentgp (nor torch): callers pass a function that writes to the
open handle.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Callable
from typing import IO, Any

_CAUSES = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOENT: "the folder does not exist",
}


class WriteError(OSError):
    """A file could not be written; the message names the path and the cause."""


def _cause(err: BaseException) -> str | None:
    if isinstance(err, OSError) and err.errno in _CAUSES:
        return _CAUSES[err.errno]
    text = str(err)
    # torch.save reports a short write (ENOSPC underneath) as a RuntimeError
    if isinstance(err, RuntimeError) and ("unexpected pos" in text or "failed writing" in text):
        return "the write stopped part way (is the disk full?)"
    return None


def check_writable(path: str | os.PathLike, what: str = "output") -> str:
    """Check, before any work, that ``path`` can be written: its folder exists and is
    writable and ``path`` is not a folder.  Returns the path as a string."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise WriteError(errno.EISDIR, f"{what} {path!r} is a folder, not a file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise WriteError(errno.ENOENT, f"{what} {path!r}: the folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise WriteError(errno.EACCES, f"{what} {path!r}: the folder {folder!r} is not writable")
    return path


def atomic_write(
    path: str | os.PathLike,
    write: Callable[[IO], Any],
    *,
    binary: bool = True,
    make_folder: bool = False,
) -> None:
    """Write ``path`` through ``write(handle)`` atomically (see the module docstring).

    ``binary``: the handle is a binary file (else UTF-8 text with ``newline=""``);
    ``make_folder``: create missing folders first (checkpoints).
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        if make_folder:
            os.makedirs(folder, exist_ok=True)
        mode = 0o644
        with contextlib.suppress(OSError):
            mode = os.stat(path).st_mode & 0o777
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
        fh = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="")
        with fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        tmp = None
        with contextlib.suppress(OSError):  # make the rename itself durable
            dfd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
    except BaseException as err:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        cause = _cause(err)
        if cause is None:
            raise
        code = err.errno if isinstance(err, OSError) and err.errno else errno.EIO
        detail = err.strerror if isinstance(err, OSError) and err.strerror else None
        text = f"could not write {path}: {cause}" + (f" ({detail})" if detail else "")
        raise WriteError(code, text) from err


# ------------------------------------------------------------------ integrity --
def _update(h: Any, obj: Any) -> None:
    """Feed a canonical serialisation of ``obj`` (nested dicts, lists, tensors, arrays,
    numbers, strings) into the hash ``h``."""
    if isinstance(obj, dict):
        h.update(b"{")
        for key in sorted(obj, key=repr):
            h.update(repr(key).encode())
            _update(h, obj[key])
        h.update(b"}")
    elif isinstance(obj, (list, tuple)):
        h.update(b"[" if isinstance(obj, list) else b"(")
        for item in obj:
            _update(h, item)
        h.update(b"]")
    elif hasattr(obj, "detach") and hasattr(obj, "numpy"):  # a torch tensor
        t = obj.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(-1).numpy().tobytes() if t.numel() else b"")
    elif hasattr(obj, "tobytes") and hasattr(obj, "dtype"):  # a numpy array or scalar
        h.update(f"A{obj.dtype}{getattr(obj, 'shape', ())}".encode())
        h.update(obj.tobytes())
    else:
        h.update(f"{type(obj).__name__}:{obj!r}".encode())


def digest(obj: Any) -> str:
    """SHA-256 (hex) of a canonical serialisation of ``obj``: any change of a value, a
    key, a shape or a dtype changes it."""
    import hashlib

    h = hashlib.sha256()
    _update(h, obj)
    return h.hexdigest()


def record_digests(records: dict[str, Any]) -> dict[str, str]:
    """One :func:`digest` per record (the manifest a file stores beside its records)."""
    return {str(k): digest(v) for k, v in records.items()}


def verify_records(path: str, records: dict[str, Any], manifest: Any) -> None:
    """Check every record of a file against its stored manifest before anything is used;
    a ``ValueError`` names the file and the first record that does not match."""
    if not isinstance(manifest, dict) or set(manifest) != {str(k) for k in records}:
        raise ValueError(f"{path}: the checksum manifest does not list the file's records")
    for key, value in records.items():
        if manifest[str(key)] != digest(value):
            raise ValueError(
                f"{path}: record {key!r} does not match its checksum (the file is corrupted "
                "or was altered); it is not used"
            )


#: Records of a file may nest containers at most this deep (a few levels are used; a
#: crafted pickle can nest thousands, which would exhaust the recursion of any reader).
MAX_RECORD_DEPTH = 32


def _children(obj: Any) -> list[Any]:
    if isinstance(obj, dict):
        return [*obj.keys(), *obj.values()]
    if isinstance(obj, (list, tuple)):
        return list(obj)
    return []


def _stored_bytes(path: str, key: str, t: Any) -> tuple[int, int]:
    """``(storage id, storage bytes)`` of tensor ``t``, after checking that it is dense
    and views no more elements than its storage holds (a crafted file can give a
    one-element storage the strides of a huge tensor: any copy of it would allocate
    the huge size)."""
    if str(getattr(t, "layout", "torch.strided")) != "torch.strided":
        raise ValueError(
            f"{path}: record {key!r} holds a {t.layout} tensor; only dense tensors are read"
        )
    storage = t.untyped_storage()
    viewed = (t.storage_offset() + t.numel()) * t.element_size() if t.numel() else 0
    if viewed > storage.nbytes():
        raise ValueError(
            f"{path}: record {key!r} claims shape {tuple(t.shape)} but stores only "
            f"{storage.nbytes()} bytes (a tensor may not view more than it stores)"
        )
    return storage.data_ptr(), storage.nbytes()


def check_record_sizes(path: str, records: dict[str, Any], file_size: int) -> None:
    """Check a file's records before any of them is hashed, copied or used: no record
    nests containers more than :data:`MAX_RECORD_DEPTH` deep, every tensor is dense and
    views no more than its storage holds, and the storages together hold no more bytes
    than the file (``file_size``).  Copying the records then never allocates more than
    the file's size warrants.  A ``ValueError`` names the file and the record."""
    storages: dict[int, int] = {}
    for key, value in records.items():
        stack = [(value, 0)]
        while stack:
            obj, depth = stack.pop()
            if depth > MAX_RECORD_DEPTH:
                raise ValueError(
                    f"{path}: record {key!r} nests containers more than {MAX_RECORD_DEPTH} "
                    "levels deep (not written by latentgp)"
                )
            if hasattr(obj, "untyped_storage") and hasattr(obj, "numel"):
                ptr, nbytes = _stored_bytes(path, str(key), obj)
                storages[ptr] = max(nbytes, storages.get(ptr, 0))
            else:
                stack.extend((child, depth + 1) for child in _children(obj))
    total = sum(storages.values())
    if total > file_size:
        raise ValueError(
            f"{path}: the records claim {total} bytes of tensor data but the file has only "
            f"{file_size} bytes (corrupted or crafted)"
        )
