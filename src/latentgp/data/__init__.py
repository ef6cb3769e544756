"""Datasets for latentgp: named benchmark loaders, synthetic generators, CSV and scaling.

>>> from latentgp import datasets
>>> ds = datasets.load("boston", split=0)
>>> ds.X_train.shape, ds.task
((455, 13), 'regression')

See :func:`list_datasets` for every name, and :mod:`latentgp.data.loaders` for the split
conventions. Importing this package needs only numpy; package-shipped datasets need the
``data`` extra (``pip install latentgp[data]``).
"""

from __future__ import annotations

from latentgp.data.csv import (
    CSVColumns,
    count_csv_rows,
    csv_columns,
    iter_csv_chunks,
    load_csv,
    load_csv_table,
    save_csv,
)
from latentgp.data.files import DATA_HOME_ENV, data_home
from latentgp.data.loaders import (  # importing it registers the built-in datasets
    UCI_NAMES,
    data_home_files,
)
from latentgp.data.readers import load_seismic_reference
from latentgp.data.registry import (
    TASKS,
    Dataset,
    DatasetSpec,
    get_spec,
    list_datasets,
    load,
    random_split,
    register,
)
from latentgp.data.standardize import Standardizer, standardize
from latentgp.data.synthetic import (
    data_assoc_mean,
    gp_draws,
    gp_draws_function,
    heteroscedastic_mean,
    heteroscedastic_std,
    make_data_assoc,
    make_heteroscedastic,
    make_moons_regression,
    make_snelson,
    make_step,
    snelson_function,
    write_gp_draws_npy,
)

__all__ = [
    "CSVColumns",
    "DATA_HOME_ENV",
    "TASKS",
    "UCI_NAMES",
    "Dataset",
    "DatasetSpec",
    "Standardizer",
    "count_csv_rows",
    "csv_columns",
    "data_assoc_mean",
    "data_home",
    "data_home_files",
    "get_spec",
    "gp_draws",
    "gp_draws_function",
    "heteroscedastic_mean",
    "heteroscedastic_std",
    "iter_csv_chunks",
    "list_datasets",
    "load",
    "load_csv",
    "load_csv_table",
    "load_seismic_reference",
    "make_data_assoc",
    "make_heteroscedastic",
    "make_moons_regression",
    "make_snelson",
    "make_step",
    "random_split",
    "register",
    "save_csv",
    "snelson_function",
    "standardize",
    "write_gp_draws_npy",
]


def __getattr__(name: str):
    """Streaming sources import torch, so they load on first use only."""
    if name in ("ShardedArrays", "CSVSource", "LazyRows"):
        from . import streaming

        return getattr(streaming, name)
    raise AttributeError(f"module 'latentgp.data' has no attribute {name!r}")
