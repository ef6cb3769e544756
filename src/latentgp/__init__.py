"""latentgp: inference in latent Gaussian process models at scale, on PyTorch.

Three lines::

    import latentgp as lg
    model = lg.SVGP(num_inducing=256, likelihood="gaussian", kernel="rbf")
    model.fit(X, y, batch_size=1024, epochs=10, lr=0.01, optimizer="adam", seed=0)
"""

from . import kernels, likelihoods, linalg, variational  # noqa: E402
from .config import Config, config, get_config  # noqa: E402
from .linalg import CholeskyError, JitterWarning  # noqa: E402
from .models import (  # noqa: E402  # noqa: E402  # noqa: E402
    GFITC,
    QSGP,
    SAVIGP,  # noqa: E402
    SEP,
    SHGP,
    SLGP,
    SMGP,
    SVGP,
    SVHGP,
    ExactGP,
    GPModel,
    SparseGP,  # noqa: E402
    load,
)
from .training import FitHistory, TrainingWarning  # noqa: E402
from .version import __version__

__all__ = [
    "SEP",
    "GFITC",
    "__version__",
    "ExactGP",
    "SVGP",
    "QSGP",
    "SHGP",
    "SMGP",
    "SLGP",
    "SVHGP",
    "SparseGP",
    "SAVIGP",
    "GPModel",
    "load",
    "kernels",
    "likelihoods",
    "linalg",
    "metrics",
    "variational",
    "config",
    "get_config",
    "Config",
    "CholeskyError",
    "JitterWarning",
    "FitHistory",
    "TrainingWarning",
]


def __getattr__(name):  # lazy: datasets pull in optional dependencies
    if name in ("datasets", "metrics"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'latentgp' has no attribute {name!r}")
