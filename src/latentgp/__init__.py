"""latentgp: inference in latent Gaussian process models at scale, on PyTorch.

Three lines::

    import latentgp as lg
    model = lg.SVGP(num_inducing=256, likelihood="gaussian", kernel="rbf")
    model.fit(X, y, batch_size=1024, epochs=10, lr=0.01, optimizer="adam", seed=0)

The names below are imported on first use (PEP 562), so ``import latentgp`` itself is
cheap and the command line starts without torch (``latentgp --help``); ``lg.SVGP`` or
``from latentgp import SVGP`` imports the models then.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from .version import __version__

if TYPE_CHECKING:  # what the lazy loader below returns, for type checkers and the API docs
    from . import kernels, likelihoods, linalg, metrics, variational
    from .config import Config, config, get_config
    from .linalg import CholeskyError, JitterWarning
    from .models import (
        GFITC,
        QSGP,
        SAVIGP,
        SEP,
        SHGP,
        SLGP,
        SMGP,
        SVGP,
        SVHGP,
        BatchedExactGP,
        BayesianGPLVM,
        DeepGP,
        ExactGP,
        GPModel,
        SparseGP,
        load,
    )
    from .training import FitHistory, TrainingWarning
    from .validation import SizeCappedWarning

__all__ = [
    "SEP",
    "GFITC",
    "__version__",
    "ExactGP",
    "BatchedExactGP",
    "SVGP",
    "QSGP",
    "SHGP",
    "SMGP",
    "SLGP",
    "SVHGP",
    "DeepGP",
    "BayesianGPLVM",
    "SparseGP",
    "SAVIGP",
    "GPModel",
    "load",
    "kernels",
    "likelihoods",
    "linalg",
    "metrics",
    "priors",
    "variational",
    "config",
    "get_config",
    "Config",
    "CholeskyError",
    "JitterWarning",
    "FitHistory",
    "TrainingWarning",
    "SizeCappedWarning",
]

#: Attribute -> submodule that defines it (imported on first access).
_LAZY_ATTRIBUTES = {
    **dict.fromkeys(("Config", "config", "get_config"), "config"),
    **dict.fromkeys(("CholeskyError", "JitterWarning"), "linalg"),
    **dict.fromkeys(
        (
            "GFITC",
            "QSGP",
            "SAVIGP",
            "SEP",
            "SHGP",
            "SLGP",
            "SMGP",
            "SVGP",
            "SVHGP",
            "BatchedExactGP",
            "BayesianGPLVM",
            "DeepGP",
            "ExactGP",
            "GPModel",
            "SparseGP",
            "load",
        ),
        "models",
    ),
    **dict.fromkeys(("FitHistory", "TrainingWarning"), "training"),
    "SizeCappedWarning": "validation",
}


def __getattr__(name: str) -> Any:
    """Import ``latentgp.<module>`` for a public name (or a submodule) on first access."""
    if name in _LAZY_ATTRIBUTES:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY_ATTRIBUTES[name]}"), name)
        if name != "config":  # see _Package.config
            globals()[name] = value
        return value
    if not name.startswith("__"):
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """The ``latentgp`` module: ``latentgp.config`` is the function, never the submodule.

    Importing the submodule ``latentgp.config`` (which any model does) makes the import
    system set the package attribute ``config`` to that module; this property keeps
    ``lg.config(...)`` the context manager, as when the package imported it eagerly.
    """

    @property
    def config(self) -> Any:
        override = self.__dict__.get("_config_override")
        if override is not None:
            return override
        from .config import config

        return config

    @config.setter
    def config(self, value: Any) -> None:
        if isinstance(value, types.ModuleType) and value.__name__ == f"{__name__}.config":
            return  # the import system binding the submodule
        self.__dict__["_config_override"] = value

    @config.deleter
    def config(self) -> None:
        self.__dict__.pop("_config_override", None)


sys.modules[__name__].__class__ = _Package
