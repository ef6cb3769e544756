"""The fit engine's registry: how a model reaches the one fit without importing it.

``GPModel.fit`` hands the model to the fit engine, the one :func:`latentgp.training.fit`,
which ``latentgp.training`` registers on import with :func:`set_fit_engine` (models never
import ``training``: layers import downwards).  Re-exported by
:mod:`latentgp.models.base`, where these names lived before.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["DEFAULT_FIT_ENGINE_MODULE", "fit_engine", "set_fit_engine"]

#: the fit engine (``latentgp.training.fit``), registered by ``latentgp.training`` on import
_FIT_ENGINE: list[Callable[..., Any]] = []


def set_fit_engine(engine: Callable[..., Any]) -> None:
    """Register the function that trains every model: ``engine(model, X, y, **options)``
    returning the model.  ``latentgp.training`` registers :func:`latentgp.training.fit`
    when it is imported (``import latentgp`` does), so that models reach the one fit
    without importing the training layer above them."""
    if not callable(engine):
        raise TypeError(f"the fit engine must be callable, got {engine!r}")
    _FIT_ENGINE[:] = [engine]


#: The module that registers the default engine when it is imported.  Models name it here
#: instead of importing it, so that the model layer does not depend on the training layer
#: (and ``import latentgp`` stays lazy: the CLI starts without torch).
DEFAULT_FIT_ENGINE_MODULE = "latentgp.training"


def fit_engine() -> Callable[..., Any]:
    """The registered fit engine; on first use without one, the default engine's module
    (:data:`DEFAULT_FIT_ENGINE_MODULE`) is imported, which registers it."""
    if not _FIT_ENGINE:
        importlib.import_module(DEFAULT_FIT_ENGINE_MODULE)
    if not _FIT_ENGINE:
        raise RuntimeError(
            f"no fit engine is registered: importing {DEFAULT_FIT_ENGINE_MODULE} did not "
            "register one"
        )
    return _FIT_ENGINE[0]
