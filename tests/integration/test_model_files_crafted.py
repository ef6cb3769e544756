"""Issue 29: model files and checkpoints prove their integrity, crafted files are refused.

The battery, for every model family ``lg.load`` reads (a tiny fitted model each):

* **bit flips**: one bit flipped inside every record of the file as stored on disk
  (each tensor's bytes in the zip archive, the header's text, a checksum): every flip is
  refused with a ``ValueError`` naming the file and the record; the same for every
  record of a training checkpoint;
* **crafted headers**: every size in the header made larger (with a consistent checksum,
  as an attacker would write it), headers that are JSON lists, numbers, strings, deeply
  nested, with unknown models, dtypes or fields of the wrong type: one ``ValueError``
  naming the file;
* **crafted tensors**: integers for a float parameter, a missing, an extra and a
  wrong-shaped record, a non-tensor, a sparse tensor, and a one-element tensor with the
  strides of a huge one: refused with the record named;
* **allocation bound**: loading a crafted 6 KB file that claims ``num_inducing=10^5``
  (and other sizes) raises the peak memory of a fresh process by less than 8 MiB.

:func:`battery` builds the cases; ``benchmarks/reliability_report.py files`` runs the same
cases to count them for ``docs/results/reliability.md``.
"""

from __future__ import annotations

import json
import os
import resource
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from test_reliability_inputs import Outcome, api

import latentgp as lg
from latentgp.io import digest

#: tiny models of every family ``lg.load`` reads: (maker, classification data?)
FAMILIES: dict[str, tuple[Callable[[], lg.GPModel], bool]] = {
    "ExactGP": (lambda: lg.ExactGP(), False),
    "SparseGP": (lambda: lg.SparseGP(num_inducing=3), False),
    "SVGP": (lambda: lg.SVGP(num_inducing=3), False),
    "SAVIGP": (lambda: lg.SAVIGP(num_inducing=3), False),
    "SEP": (lambda: lg.SEP(num_inducing=3), True),
    "GFITC": (lambda: lg.GFITC(num_inducing=3), True),
    "QSGP": (lambda: lg.QSGP(num_basis=8), False),
    "SHGP": (lambda: lg.SHGP(num_inducing=3), False),
    "SMGP": (lambda: lg.SMGP(num_inducing=3), False),
    "SLGP": (lambda: lg.SLGP(num_inducing=3, hidden=(4,)), False),
    "SVHGP": (lambda: lg.SVHGP(num_inducing=3), False),
    "DeepGP": (lambda: lg.DeepGP(2, num_inducing=3, num_predict_samples=4), False),
}


def data(classification: bool = False) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 2))
    y = (X[:, 0] > 0).astype(float) if classification else np.sin(X[:, 0]) + 0.1 * X[:, 1]
    return X, y


def save_family(name: str, folder: Path) -> Path:
    """Fit the tiny ``name`` model for two steps and save it to ``folder/<name>.pt``."""
    make, classification = FAMILIES[name]
    X, y = data(classification)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = make().fit(X, y, max_steps=2, progress=False, seed=0)
    path = folder / f"{name}.pt"
    model.save(path)
    return path


def save_checkpoint_file(folder: Path) -> Path:
    """A training checkpoint of a small SVGP (written by ``fit(checkpoint=...)``)."""
    X, y = data()
    path = folder / "run.ckpt"
    lg.SVGP(num_inducing=3).fit(X, y, max_steps=2, progress=False, seed=0, checkpoint=path)
    return path


@dataclass
class FileCase:
    family: str
    kind: str  # "bit flip", "crafted header", "crafted tensors", "checkpoint bit flip"
    what: str
    run: Callable[[], Outcome]
    fragment: str  # in the message besides the file's name: the record, or the cause
    file: Path  # the file the case loads
    inert: bool = False  # a size that allocates nothing: accepting it is fine if harmless


SAME = "accepted, same predictions"
DIFFERENT = "accepted, different predictions"  # a silent wrong result


def attempt(load: Callable[[], object], same: Callable[[object], bool] | None) -> Outcome:
    """The outcome of ``load()``: the exception it raises, or whether what it accepted
    predicts what the original did (``same``; None: anything accepted is wrong)."""
    out: dict = {}
    got = api(lambda: out.setdefault("value", load()))
    if got.kind != "ok":
        return got
    return Outcome(SAME if same is not None and same(out["value"]) else DIFFERENT, got.message)


def predicts_like(path: Path, family: str) -> Callable[[object], bool]:
    """Whether a loaded model predicts exactly what the model in ``path`` predicts."""
    X, _ = data(FAMILIES[family][1])
    want = lg.load(path).predict_y(X)[0]
    return lambda model: bool(np.array_equal(model.predict_y(X)[0], want))


def refused(case: FileCase, got: Outcome) -> bool:
    """The outcome every case must have: a ValueError/TypeError naming the file and
    holding the case's fragment (or, for an inert size, a model that predicts the same)."""
    if case.inert and got.kind == SAME:
        return True
    return (
        got.kind in ("ValueError", "TypeError")
        and str(case.file) in got.message
        and case.fragment in got.message
    )


# ------------------------------------------------------------------ bit flips --
def entries(data_: bytes) -> dict[str, tuple[int, int]]:
    """``name -> (offset, size)`` of every stored entry of a zip archive (torch.save)."""
    import io

    out = {}
    with zipfile.ZipFile(io.BytesIO(data_)) as z:
        for info in z.infolist():
            local = data_[info.header_offset : info.header_offset + 30]
            name_len = int.from_bytes(local[26:28], "little")
            extra_len = int.from_bytes(local[28:30], "little")
            start = info.header_offset + 30 + name_len + extra_len
            out[info.filename.split("/", 1)[1]] = (start, info.file_size)
    return out


def tensors_in(obj, prefix: str) -> list[tuple[str, torch.Tensor]]:
    if isinstance(obj, torch.Tensor):
        return [(prefix, obj)]
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in tensors_in(v, prefix)]
    if isinstance(obj, (list, tuple)):
        return [p for v in obj for p in tensors_in(v, prefix)]
    return []


def storage_owners(path: Path, records: Callable[[dict], dict]) -> dict[bytes, set[str]]:
    """The bytes of every stored tensor -> the records holding a tensor with those bytes
    (identical bytes, such as two zero vectors, are one storage's candidates)."""
    payload = torch.load(path, map_location="cpu", weights_only=True)
    owners: dict[bytes, set[str]] = {}
    for key, value in records(payload).items():
        for record, t in tensors_in(value, key):
            raw = t.detach().numpy().tobytes()
            owners.setdefault(raw, set()).add(record)
    return owners


def flipped(path: Path, offset: int, out: Path, bit: int = 0) -> Path:
    data_ = bytearray(path.read_bytes())
    data_[offset] ^= 1 << bit
    out.write_bytes(bytes(data_))
    return out


def model_records(payload: dict) -> dict:
    return {f"state/{k}": v for k, v in payload["state"].items()}


def checkpoint_records(payload: dict) -> dict:
    return {k: v for k, v in payload.items() if k != "checksums"}


def bit_flip_cases(family: str, path: Path, folder: Path, *, load, records, kind: str, same):
    """One flipped bit in the middle of every tensor entry of ``path``, in the header's
    text and in a checksum (for model files; a checkpoint's pickle holds no text)."""
    raw = path.read_bytes()
    owners = storage_owners(path, records)
    cases = []
    for name, (start, size) in entries(raw).items():
        if not name.startswith("data/") or size == 0:
            continue
        stored = raw[start : start + size]
        names = sorted(owners.get(stored, {"?"}))
        bad = folder / f"{family}-{name.replace('/', '-')}.flip"
        cases.append(
            FileCase(
                family,
                kind,
                f"bit flip in {names[0]}",
                lambda bad=bad, start=start, size=size: attempt(
                    lambda: load(flipped(path, start + size // 2, bad)), same
                ),
                f"record {names[0]!r}" if len(names) == 1 else "does not match its checksum",
                bad,
            )
        )
    if kind != "bit flip":
        return cases
    checksum = torch.load(path, weights_only=True)["checksums"]["state/y_scale"].encode()
    for what, needle, record in [
        ("the header's text", b'"format": "latentgp-model"', "header"),
        ("the header's sizes", b'"input_dim": 2', "header"),
        ("a checksum", checksum, "state/y_scale"),
    ]:
        pos = raw.find(needle)
        assert pos > 0 and raw.count(needle) == 1, needle
        # a letter of the text ('o' -> 'n', 'p' -> 'q'), or a hex digit (stays hex: bit 2)
        offset, bit = (pos + 3, 0) if record == "header" else (pos + 10, 2)
        bad = folder / f"{family}-{record.replace('/', '-')}.flip"
        cases.append(
            FileCase(
                family,
                kind,
                f"bit flip in {what}",
                lambda bad=bad, offset=offset, bit=bit: attempt(
                    lambda: load(flipped(path, offset, bad, bit=bit)), same
                ),
                f"record {record!r} does not match its checksum",
                bad,
            )
        )
    return cases


# ------------------------------------------------------------ crafted headers --
def rewritten(path: Path, out: Path, edit, *, keep_checksums: bool = True) -> Path:
    """``path`` with its payload changed by ``edit(header, state, payload)``; the checksums
    recomputed (an attacker's file is consistent) unless ``keep_checksums`` is False, in
    which case they are dropped."""
    payload = torch.load(path, map_location="cpu", weights_only=True)
    header = json.loads(payload["header"])
    state = dict(payload["state"])
    new_header = edit(header, state, payload)
    text = isinstance(new_header, (str, bytes))
    payload["header"] = new_header if text else json.dumps(header)
    payload["state"] = state
    payload.pop("checksums")
    if keep_checksums:
        records = {k: v for k, v in payload.items() if k != "state"}
        records.update({f"state/{k}": v for k, v in state.items()})
        payload["checksums"] = {k: digest(v) for k, v in records.items()}
    torch.save(payload, out)
    return out


def sizes(header: dict) -> list[tuple[str, ...]]:
    """Paths of the positive integers in the header's ``config`` and ``build``."""
    out = []

    def walk(obj, where):
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, (*where, k))
        elif isinstance(obj, list):
            for i, v in enumerate(obj):
                walk(v, (*where, i))
        elif isinstance(obj, int) and not isinstance(obj, bool) and obj >= 1:
            out.append(where)

    walk({"config": header["config"], "build": header["build"]}, ())
    return out


def set_at(header: dict, where: tuple, value) -> None:
    for k in where[:-1]:
        header = header[k]
    header[where[-1]] = value


#: sizes that allocate nothing when a model is loaded (sample counts of training and
#: prediction, sweeps): a larger value loads and only costs time when used
RUNTIME_SIZES = {"num_samples", "pred_samples", "num_predict_samples", "num_gate_samples",
                 "max_sweeps", "basis_batch", "batch", "num_quadrature"}  # fmt: skip

#: header sizes that the stored tensors do not fix and that allocate nothing on loading
#: (SAVIGP's num_data is used by dense SAVIGP only; QSGP's configured num_basis is
#: superseded by the built one, and its pretrain_rows is read by a first fit only; the
#: options of ExactGP's iterative path are not read by a model on the Cholesky path, as
#: the test's is): a file with them changed loads and predicts the same
INERT = {("SAVIGP", "build.num_data"), ("QSGP", "config.num_basis"),
         ("QSGP", "config.hyperparameters.pretrain_rows")} | {
    ("ExactGP", f"config.iterative.{name}")
    for name in ("max_iter", "num_probes", "love_rank", "pretrain_rows", "finetune_steps")}


def header_cases(family: str, path: Path, folder: Path, *, every_size: bool = False):
    payload = torch.load(path, map_location="cpu", weights_only=True)
    header0 = json.loads(payload["header"])
    out = folder / f"{family}.crafted"
    same = predicts_like(path, family)

    def case(what, edit, fragment, kind="crafted header", keep=True, inert=False):
        return FileCase(
            family, kind, what,
            lambda: attempt(lambda: lg.load(rewritten(path, out, edit, keep_checksums=keep)),
                            same),
            fragment, out, inert,
        )  # fmt: skip

    cases = []
    for where in sizes(header0):
        if where[-1] in RUNTIME_SIZES or "likelihood" in where:
            continue
        if not every_size and where[-1] not in ("num_inducing", "num_basis", "num_data"):
            continue
        label = ".".join(map(str, where))
        cases.append(case(f"{label} x 10^5", lambda h, s, p, w=where: set_at(
            h, w, 10**5 * _get(h, w)), "", inert=(family, label) in INERT))  # fmt: skip
    cases += [
        case("header a JSON list", lambda h, s, p: "[1, 2]", "it is a list, not a JSON object"),
        case("header a number", lambda h, s, p: "42", "it is a number, not a JSON object"),
        case("header a string", lambda h, s, p: '"x"', "it is a string, not a JSON object"),
        case("header JSON null", lambda h, s, p: "null", "it is null, not a JSON object"),
        case("header 100 000 levels deep", lambda h, s, p: "[" * 100_000 + "]" * 100_000,
             "nests more than 32 levels deep"),  # fmt: skip
        case("header 100 levels deep", lambda h, s, p: h.update(x=_nested(100)),
             "nests more than 32 levels deep"),  # fmt: skip
        case("header bytes, not text", lambda h, s, p: b"{}", "corrupted header"),
        case("unknown model", lambda h, s, p: h.update(model="Nope"), "unknown model class"),
        case("model name a list", lambda h, s, p: h.update(model=["SVGP"]), "unknown model"),
        case("config a list", lambda h, s, p: h.update(config=[1]), "'config' is a list"),
        case("build a string", lambda h, s, p: h.update(build="x"), "'build' is a string"),
        case("format version true", lambda h, s, p: h.update(format_version=True),
             "format version True"),  # fmt: skip
        case("dtype 'nn'", lambda h, s, p: h["config"].update(dtype="nn"), "dtype 'nn'"),
        case("dtype float32 (tensors float64)", lambda h, s, p: h["config"].update(
            dtype="float32"), "values are not converted"),  # fmt: skip
        case("unknown config field", lambda h, s, p: h["config"].update(evil=1), "evil"),
        case("input_dim a string", lambda h, s, p: h["build"].update(input_dim="2"),
             "does not describe a valid"),  # fmt: skip
        case("input_dim negative", lambda h, s, p: h["build"].update(input_dim=-3), ""),
    ]
    return cases


def _get(header: dict, where: tuple):
    for k in where:
        header = header[k]
    return header


def _nested(depth: int):
    obj: list = []
    for _ in range(depth):
        obj = [obj]
    return obj


def tensor_cases(family: str, path: Path, folder: Path):
    payload = torch.load(path, map_location="cpu", weights_only=True)
    floats = [k for k, v in payload["state"].items() if v.is_floating_point() and v.numel() > 1]
    key = floats[0]
    out = folder / f"{family}.tensors"
    same = predicts_like(path, family)

    def case(what, edit, fragment, keep=True):
        return FileCase(
            family, "crafted tensors", what,
            lambda: attempt(lambda: lg.load(rewritten(path, out, edit, keep_checksums=keep)),
                            same),
            fragment, out,
        )  # fmt: skip

    def set_state(k, v):
        return lambda h, s, p: s.update({k: v})

    big = torch.zeros(1, dtype=torch.float64).expand(10**5, 10**5)
    sparse = torch.sparse_coo_tensor(
        torch.zeros(2, 0, dtype=torch.long), [], (10**5, 10**5), check_invariants=True
    )
    return [
        case(f"integers for {key}", set_state(key, payload["state"][key].long()),
             f"record 'state/{key}' holds torch.int64 values"),  # fmt: skip
        case(f"missing {key}", lambda h, s, p: s.pop(key), f"record 'state/{key}' is missing"),
        case("extra record", set_state("evil", torch.zeros(2)),
             "record 'state/evil' is not part of"),  # fmt: skip
        case(f"{key} one row longer", set_state(key, torch.cat([payload["state"][key]] * 2)),
             f"record 'state/{key}' has shape"),  # fmt: skip
        case(f"{key} not a tensor", set_state(key, [1.0, 2.0]), f"record 'state/{key}'"),
        case(f"{key} a 10^5 x 10^5 view of one element", set_state(key, big),
             f"record 'state/{key}' claims shape (100000, 100000)", keep=False),  # fmt: skip
        case(f"{key} a sparse 10^5 x 10^5 tensor", set_state(key, sparse),
             f"record 'state/{key}' holds a torch.sparse_coo tensor", keep=False),  # fmt: skip
        case(f"integers for {key}, no checksums", set_state(key, payload["state"][key].long()),
             f"record 'state/{key}' holds torch.int64 values", keep=False),  # fmt: skip
    ]


def battery(family: str, folder: Path, *, every_size: bool = False) -> list[FileCase]:
    """Every case of the battery for one model family (files written under ``folder``)."""
    path = save_family(family, folder)
    return (
        bit_flip_cases(family, path, folder, load=lg.load, records=model_records,
                       kind="bit flip", same=predicts_like(path, family))  # fmt: skip
        + header_cases(family, path, folder, every_size=every_size)
        + tensor_cases(family, path, folder)
    )


def checkpoint_battery(folder: Path) -> list[FileCase]:
    from latentgp.training import load_checkpoint

    path = save_checkpoint_file(folder)
    return bit_flip_cases(
        "SVGP checkpoint", path, folder, load=load_checkpoint, records=checkpoint_records,
        kind="checkpoint bit flip", same=None,
    )  # fmt: skip


# ---------------------------------------------------------------------- tests --
@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("crafted")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_case_is_refused_naming_the_file_and_the_record(family, folder):
    cases = battery(family, folder)
    assert len(cases) >= 30, len(cases)
    flips = [c for c in cases if c.kind == "bit flip"]
    raw = (folder / f"{family}.pt").read_bytes()
    stored = [e for e, (_, n) in entries(raw).items() if e.startswith("data/") and n > 0]
    assert len(flips) == len(stored) + 3  # every tensor entry, the header twice, a checksum
    wrong = []
    for case in cases:
        got = case.run()
        if not refused(case, got):
            wrong.append((case.what, got))
    assert not wrong, wrong
    assert lg.load(folder / f"{family}.pt").built  # the intact file loads


def test_every_record_of_a_checkpoint_refuses_a_flipped_bit(folder):
    cases = checkpoint_battery(folder)
    assert len(cases) >= 10
    records = set()
    for case in cases:
        got = case.run()
        assert got.kind == "ValueError" and str(case.file) in got.message, got
        assert case.fragment in got.message, (case.what, got)
        records.add(got.message.split("record ")[1].split(" ")[0])
    assert {"'model'", "'optimizer'"} <= records, records


def test_integers_are_not_cast_and_the_good_file_is_unchanged(folder):
    """Before/after: the intact file predicts exactly what the model did; the crafted file
    with integer values (which loading used to cast to float silently) is refused."""
    path = save_family("SVGP", folder)
    X, _ = data()
    before = lg.load(path).predict_y(X)[0]
    payload = torch.load(path, weights_only=True)
    payload["state"]["q.q_mu"] = payload["state"]["q.q_mu"].round().long()
    del payload["checksums"]
    torch.save(payload, folder / "ints.pt")
    with pytest.raises(ValueError, match=r"ints.pt: record 'state/q.q_mu' holds torch.int64"):
        lg.load(folder / "ints.pt")
    np.testing.assert_array_equal(lg.load(path).predict_y(X)[0], before)


def measure_peak(good: Path, crafted: list[Path]) -> str:
    """Load ``good`` (imports, one-off allocations), then every crafted file; the messages
    and the growth of the peak resident memory (``ru_maxrss``, KiB) on the last line."""
    lg.load(good)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    lines = []
    for path in crafted:
        got = api(lambda path=path: lg.load(path))
        lines.append(f"{got.kind}: {got.message}")
    lines.append(f"PEAK_KIB {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before}")
    return "\n".join(lines)


def peak_kib(good: Path, crafted: list[Path]) -> tuple[int, str]:
    """:func:`measure_peak` in a forked child (its peak memory is its own; the parent's
    imports are already there, so this costs no start-up)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: measure, report through the pipe, leave at once
        code = 1
        try:
            os.close(r)
            with os.fdopen(w, "w") as fh:
                fh.write(measure_peak(good, crafted))
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r) as fh:
        text = fh.read()
    _, status = os.waitpid(pid, 0)
    assert status == 0 and "PEAK_KIB" in text, text
    return int(text.split("PEAK_KIB")[1]), text


def crafted_sizes(family: str, folder: Path, *, every_size: bool) -> tuple[Path, list[Path]]:
    """The family's good file, and one crafted file per size of its header, each size
    multiplied by 10^5 (checksums consistent)."""
    path = save_family(family, folder)
    header = json.loads(torch.load(path, weights_only=True)["header"])
    out = []
    for i, where in enumerate(sizes(header)):
        if where[-1] in RUNTIME_SIZES or "likelihood" in where:
            continue
        if not every_size and where[-1] not in ("num_inducing", "num_basis", "num_data"):
            continue
        if (family, ".".join(map(str, where))) in INERT:
            continue
        target = folder / f"{family}-size{i}.pt"
        rewritten(path, target, lambda h, s, p, w=where: set_at(h, w, 10**5 * _get(h, w)))
        out.append(target)
    return path, out


def test_a_crafted_header_allocates_no_more_than_the_file_warrants(folder):
    """A 6 KB SVGP file claiming num_inducing = 10^5 (q(u) alone would be 80 GB; the
    loader used to build the model first: 831 MiB for 10^4) and crafted ExactGP and
    QSGP sizes are refused with less than 8 MiB of extra peak memory."""
    good, crafted = crafted_sizes("SVGP", folder, every_size=False)
    for family in ("ExactGP", "QSGP", "SAVIGP"):
        crafted += crafted_sizes(family, folder, every_size=False)[1]
    assert len(crafted) >= 4
    assert max(p.stat().st_size for p in crafted) < 8000
    peak, text = peak_kib(good, crafted)
    assert text.count("more than a file of") + text.count("has shape") == len(crafted), text
    assert peak < 8 * 1024, (peak, text)


@pytest.mark.slow
@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_header_size_of_every_family_allocates_nothing(family, folder):
    good, crafted = crafted_sizes(family, folder, every_size=True)
    peak, text = peak_kib(good, crafted)
    assert peak < 8 * 1024, (peak, text)


@pytest.mark.slow
@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_size_of_every_family_is_refused(family, folder):
    cases = battery(family, folder, every_size=True)
    wrong = [(c.what, g) for c in cases if not refused(c, g := c.run())]
    assert not wrong, wrong


@pytest.mark.parametrize(
    "make",
    [
        lambda: lg.SVGP(num_inducing=300),  # q(u): 90,000 elements, planned on meta
        lambda: lg.SAVIGP(num_inducing=300, posterior=lg.SAVIGP.Posterior(components=2)),
        lambda: lg.SLGP(num_inducing=5, hidden=(300, 300)),
        lambda: lg.QSGP(num_basis=70_000),
        lambda: lg.SparseGP(num_inducing=300),
        lambda: lg.SVGP(num_inducing=4, likelihood=lg.likelihoods.GPRN(num_outputs=2)),
    ],
    ids=["SVGP", "SAVIGP", "SLGP", "QSGP", "SparseGP", "SVGP-GPRN"],
)
def test_large_models_are_planned_without_allocating_and_load_exactly(make, folder):
    """Models whose tensors exceed the planner's small-tensor limit load bit for bit (the
    plan keeps those tensors on ``meta``; a false refusal would fail here)."""
    model = make()
    model.build(2, model.likelihood.num_outputs if hasattr(model.likelihood, "num_outputs")
                else 1)  # fmt: skip
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_(torch.linspace(-1, 1, p.numel(), dtype=p.dtype).reshape(p.shape) + i)
    model.save(folder / "large.pt")
    loaded = lg.load(folder / "large.pt")
    want, got = model.state_dict(), loaded.state_dict()
    assert list(got) == list(want)
    for key in want:  # bit for bit (NaN marks statistics not computed yet)
        torch.testing.assert_close(got[key], want[key], rtol=0, atol=0, equal_nan=True)


def test_a_crafted_checkpoint_is_refused_before_it_is_hashed(folder):
    """A checkpoint's records are checked before their checksums are computed: hashing a
    one-element tensor with the strides of a 10^5 x 10^5 one would copy 80 GB."""
    from latentgp.training import load_checkpoint

    payload = torch.load(save_checkpoint_file(folder), weights_only=True)
    key = next(iter(payload["model"]))
    huge = dict(payload, model={**payload["model"], key: torch.zeros(1).expand(10**5, 10**5)})
    torch.save(huge, folder / "huge.ckpt")
    with pytest.raises(ValueError, match=r"huge.ckpt: record 'model' claims shape \(100000, 100"):
        load_checkpoint(folder / "huge.ckpt")
    torch.save(dict(payload, loop=_nested(200)), folder / "deep.ckpt")
    with pytest.raises(ValueError, match="deep.ckpt: record 'loop' nests containers more than"):
        load_checkpoint(folder / "deep.ckpt")


@pytest.mark.parametrize("edit", ["integers", "shape"])
def test_a_self_consistent_crafted_checkpoint_is_refused_before_loading(edit, tmp_path):
    """A checkpoint whose checksums were recomputed after its tensors were changed passes
    the integrity check; resuming from it compares every tensor with the run's own (shape
    and dtype) before loading any: integers were cast silently, a wrong shape failed
    deep inside torch."""
    from latentgp.io import record_digests

    X, y = data()
    path = tmp_path / "run.ckpt"
    lg.SVGP(num_inducing=3).fit(X, y, max_steps=2, progress=False, seed=0, checkpoint=path)
    state = torch.load(path, weights_only=True)
    state.pop("checksums")
    mu = state["model"]["q.q_mu"]
    state["model"]["q.q_mu"] = mu.round().long() if edit == "integers" else mu[:, :2].clone()
    state["checksums"] = record_digests(state)
    torch.save(state, path)
    with pytest.raises(ValueError, match=r"run.ckpt: record /model/q.q_mu is"):
        lg.SVGP(num_inducing=3).fit(X, y, max_steps=4, progress=False, seed=0,
                                     checkpoint=path, resume=True)


def test_a_deepgp_header_with_too_many_layers_is_refused_at_once(folder):
    """At most ``MAX_LAYERS`` layers: the constructor says so, and a saved DeepGP whose
    header claims 200,000 layers (checksums consistent) is refused at once: the loader used
    to plan every layer module before comparing a record, minutes for a 6 KB file."""
    import time

    from latentgp.models.deep import MAX_LAYERS

    with pytest.raises(ValueError, match=f"num_layers={MAX_LAYERS + 1} is more than"):
        lg.DeepGP(num_layers=MAX_LAYERS + 1)
    path = save_family("DeepGP", folder)
    crafted = rewritten(path, folder / "layers.pt",
                        lambda h, s, p: h["config"].update(num_layers=200_000))
    start = time.perf_counter()
    with pytest.raises(ValueError, match="num_layers=200000 is more than") as err:
        lg.load(crafted)
    assert str(crafted) in str(err.value) and time.perf_counter() - start < 5
