"""Reading model files: nothing in a file is trusted before it is checked.

:func:`load` (``lg.load``) and :func:`read_model_file` read a file written by
:meth:`GPModel.save` in this order, each step before anything the next one would allocate:

1. ``torch.load(weights_only=True, mmap=True)``: no code runs and no tensor is copied
   into memory (the records stay mapped from the file);
2. every record is dense, views no more than it stores, nests at most a few levels, and
   the tensors together hold no more than the file's size (:func:`latentgp.io.check_record_sizes`);
3. every record matches its SHA-256 checksum (when the file has them);
4. the header is a JSON object of a known format, version and model class;
5. the model the header describes is planned on PyTorch's ``meta`` device (shapes and
   dtypes, no memory), and the stored tensors are compared with it record by record:
   missing, extra, wrong-shaped and wrong-typed records (integers for a float parameter
   are not cast) are refused, and so is a plan that would allocate more than the file's
   size warrants;
6. only then is the model built for real and the tensors copied in.

Every refusal is one ``ValueError`` that names the file (and the record, where one is at
fault).
"""

from __future__ import annotations

import json
import os
import zipfile
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ..io import MAX_RECORD_DEPTH, check_record_sizes, verify_records
from .base import MODEL_REGISTRY, GPModel
from .file_format import FORMAT, READABLE_FORMAT_VERSIONS, file_records

#: A plan may exceed the file's size by this much (buffers a file need not store, such as
#: the ``input_unit`` of format-1 files, and rounding).
PLAN_SLACK_BYTES = 1 << 20

#: While a model is planned, an operation whose result would hold more than this many
#: elements gives a ``meta`` tensor (shape and dtype only) instead of a real one.
_SMALL = 1 << 16

#: Functions that create a tensor from sizes alone (a ``device=`` keyword also marks one).
_FACTORIES = frozenset(
    {torch.zeros, torch.ones, torch.empty, torch.full, torch.eye, torch.rand, torch.randn,
     torch.randint, torch.arange, torch.linspace, torch.logspace, torch.empty_strided}
)  # fmt: skip


def _first_sentence(err: BaseException, limit: int, whole: bool = False) -> str:
    """An exception's text on one line: its first sentence (or all of it), cut at ``limit``."""
    text = " ".join(str(err).split()) or type(err).__name__
    if not whole:
        text = text.split(". ")[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _on_meta(obj: Any) -> Any:
    """``obj`` with every tensor in it (in lists, tuples, dicts) moved to ``meta``."""
    if isinstance(obj, torch.Tensor):
        return obj if obj.device.type == "meta" else obj.detach().to("meta")
    if isinstance(obj, (list, tuple)):
        return type(obj)(_on_meta(v) for v in obj)
    if isinstance(obj, dict):
        return {k: _on_meta(v) for k, v in obj.items()}
    return obj


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _tensors(v)]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    return []


def _elements(out: Any) -> int:
    return sum(t.numel() for t in _tensors(out))


class _LargeOnMeta(TorchFunctionMode):
    """While a model is planned, large tensors live on the ``meta`` device (shapes and
    dtypes, no memory) and small ones stay real: each operation is first run on ``meta``
    copies of its arguments, and its result is kept there when it would hold more than
    :data:`_SMALL` elements (a header's sizes then never allocate); an operation that
    mixes real and ``meta`` tensors is planned on ``meta``.  Small real tensors are
    needed: constructors check their arguments' values (``meta`` tensors have none)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = _tensors((args, kwargs))
        if not inputs and func not in _FACTORIES and "device" not in kwargs:
            return func(*args, **kwargs)  # torch.tensor(values): as large as the header
        if any(t.device.type == "meta" for t in inputs):
            try:
                return func(*args, **kwargs)
            except RuntimeError:  # real and meta tensors mixed: the result is planned
                return func(*_on_meta(args), **_on_meta(kwargs))
        meta_kwargs = _on_meta(kwargs)
        if func in _FACTORIES or "device" in kwargs:
            meta_kwargs["device"] = "meta"
        try:
            planned = func(*_on_meta(args), **meta_kwargs)
        except (RuntimeError, NotImplementedError, TypeError, ValueError):
            return func(*args, **kwargs)  # needs values (a check): done for real
        return planned if _elements(planned) > _SMALL else func(*args, **kwargs)


def _upgrade_state_v1(state: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
    """Version-1 tensors in the version-2 layout: ``...Z`` becomes ``...Z_raw`` and every
    ``input_unit`` buffer is 1 (raw values were then in data units)."""
    out = dict(state)
    for key, ref in expected.items():
        if key in out:
            continue
        if key.endswith("input_unit"):
            out[key] = torch.ones_like(ref)
        elif key.endswith("Z_raw") and key[: -len("_raw")] in out:
            out[key] = out.pop(key[: -len("_raw")])
    return out


def _upgraded(version: int, cls: type[GPModel], state: dict, expected: dict) -> dict:
    if version == 1:
        state = _upgrade_state_v1(state, expected)
    return cls.upgrade_state(state, expected)


def _read_payload(path: str) -> dict[str, Any]:
    """The file's records, mapped (not copied), after the checks of steps 1-3."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no model file at {path}")
    unreadable = (
        f"{path} is not a readable latentgp model file (corrupted, truncated, or not a "
        "model file)"
    )
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{unreadable}: not a torch.save archive (no zip directory)")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # noqa: BLE001 - any unreadable file gets the same refusal
        cause = f"{type(err).__name__}: {_first_sentence(err, 160)}"
        raise ValueError(f"{unreadable}: {cause}") from None
    if not isinstance(payload, dict) or "header" not in payload or "state" not in payload:
        raise ValueError(f"{path} is not a latentgp model file (no header)")
    if not isinstance(payload["state"], dict):
        raise ValueError(f"{path} is not a latentgp model file (no tensor records)")
    records = file_records(payload)
    check_record_sizes(path, {**records, "checksums": payload.get("checksums")},
                       os.path.getsize(path))  # fmt: skip
    if "checksums" in payload:  # every record is verified before anything is used
        verify_records(path, records, payload["checksums"])
    return payload


def _depth(obj: Any) -> int:
    """How deeply ``obj`` (parsed JSON) nests lists and objects (iteratively)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        item, d = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, d)
            stack.extend((v, d + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def _json_kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else "null"
    )


def _parse_header(path: str, text: Any) -> tuple[dict[str, Any], int, type[GPModel]]:
    """The header (step 4): ``(header, format version, model class)``."""
    if not isinstance(text, str):
        raise ValueError(f"{path} has a corrupted header (not JSON text)")
    try:
        header = json.loads(text)
    except ValueError:
        raise ValueError(f"{path} has a corrupted header (not valid JSON)") from None
    except RecursionError:  # thousands of nested brackets
        raise ValueError(
            f"{path} has a corrupted header: it nests more than {MAX_RECORD_DEPTH} levels deep"
        ) from None
    if not isinstance(header, dict):
        raise ValueError(
            f"{path} has a corrupted header: it is {_json_kind(header)}, not a JSON object"
        )
    if _depth(header) > MAX_RECORD_DEPTH:
        raise ValueError(
            f"{path} has a corrupted header: it nests more than {MAX_RECORD_DEPTH} levels deep"
        )
    if header.get("format") != FORMAT:
        raise ValueError(f"{path} is not a latentgp model file (format {header.get('format')!r})")
    version = header.get("format_version")
    if version not in READABLE_FORMAT_VERSIONS or isinstance(version, bool):
        raise ValueError(
            f"{path} uses model-file format version {version!r}, but this latentgp reads "
            f"versions {', '.join(map(str, READABLE_FORMAT_VERSIONS))}"
        )
    name = header.get("model")
    if not isinstance(name, str) or name not in MODEL_REGISTRY:
        raise ValueError(f"{path} holds an unknown model class {name!r}")
    for field in ("config", "build"):
        if not isinstance(header.get(field), dict):
            raise ValueError(
                f"{path}: the header's {field!r} is {_json_kind(header.get(field))}, "
                f"not a JSON object"
            )
    return header, int(version), MODEL_REGISTRY[name]


def _plan(path: str, cls: type[GPModel], header: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The state of the model the header describes, on the ``meta`` device (step 5)."""
    try:
        with _LargeOnMeta():
            return cls.from_header(header["config"], header["build"], device="meta").state_dict()
    except Exception as err:  # noqa: BLE001 - whatever the header makes a model do
        raise ValueError(
            f"{path}: the header does not describe a valid {cls.__name__}: "
            f"{type(err).__name__}: {_first_sentence(err, 300, whole=True)}"
        ) from None


def _shape(t: torch.Tensor) -> str:
    return str(tuple(t.shape))


def check_state(
    path: str, name: str, state: dict[str, Any], planned: dict[str, torch.Tensor]
) -> None:
    """Compare the tensors of a file (``state``) with the state the header describes
    (``planned``: names, shapes, dtypes); a ``ValueError`` names the file and the first
    record that is missing, extra, not a tensor, of another shape or of another dtype."""
    for key in planned:
        if key not in state:
            raise ValueError(f"{path}: record 'state/{key}' is missing (a {name} has it)")
    for key, value in state.items():
        record = f"record 'state/{key}'"
        if key not in planned:
            raise ValueError(f"{path}: {record} is not part of a {name}")
        want = planned[key]
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"{path}: {record} is a {type(value).__name__}, not a tensor")
        if value.shape != want.shape:
            raise ValueError(
                f"{path}: {record} has shape {_shape(value)} but the header describes "
                f"{_shape(want)}"
            )
        if value.dtype != want.dtype:
            raise ValueError(
                f"{path}: {record} holds {value.dtype} values where the {name} has "
                f"{want.dtype} (values are not converted)"
            )


def _check_plan_size(path: str, planned: dict[str, torch.Tensor]) -> None:
    need = sum(t.numel() * t.element_size() for t in planned.values())
    size = os.path.getsize(path)
    if need > 2 * size + PLAN_SLACK_BYTES:
        raise ValueError(
            f"{path}: the header describes {need} bytes of parameters, more than a file of "
            f"{size} bytes warrants"
        )


def read_model_file(
    path: str | os.PathLike, *, device: torch.device | str | None = None
) -> tuple[GPModel, dict[str, Any]]:
    """Load a model file (see the module docstring) and return ``(model, records)``:
    ``records`` holds the file's other top-level records (such as the CLI's
    ``"preprocessing"`` JSON text), verified like the rest."""
    path = os.fspath(path)
    payload = _read_payload(path)
    header, version, cls = _parse_header(path, payload["header"])
    planned = _plan(path, cls, header)
    try:
        upgraded = _upgraded(version, cls, payload["state"], planned)
    except Exception as err:  # noqa: BLE001
        raise ValueError(f"{path}: the tensors cannot be read as a {cls.__name__}: {err}") from None
    check_state(path, cls.__name__, upgraded, planned)
    _check_plan_size(path, planned)
    try:
        model = cls.from_header(header["config"], header["build"], device=device)
        model.load_state_dict(_upgraded(version, cls, payload["state"], model.state_dict()))
    except Exception as err:  # noqa: BLE001
        raise ValueError(
            f"{path}: header and tensors do not describe a valid {cls.__name__}: "
            f"{_first_sentence(err, 300, whole=True)}"
        ) from None
    model.to(device=model.device_)
    model.eval()
    others = {k: v for k, v in payload.items() if k not in ("header", "state", "checksums")}
    return model, others


def load(path: str | os.PathLike, device: torch.device | str | None = None) -> GPModel:
    """Load a model written by :meth:`GPModel.save`: no code from the file is executed,
    and every record is checked (checksums, shapes and dtypes against the header) before
    anything is allocated; a bad file is refused with a ``ValueError`` naming it."""
    return read_model_file(path, device=device)[0]
