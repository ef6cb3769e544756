"""Models: exact and sparse GPs, SVGP, SAVIGP, EP (SEP, GFITC), QSGP, modulated GPs."""

from .base import MODEL_REGISTRY, GPModel
from .batched import BatchedExactGP
from .deep import DeepGP
from .exact import ExactGP
from .gfitc import GFITC
from .gplvm import BayesianGPLVM
from .modulated import SHGP, SLGP, SMGP, SVHGP
from .qsgp import QSGP
from .savigp import SAVIGP
from .sep import SEP
from .serialization import load, read_model_file
from .sparse import SparseGP
from .svgp import SVGP

__all__ = [
    "GPModel", "load", "MODEL_REGISTRY", "BayesianGPLVM", "DeepGP", "ExactGP", "BatchedExactGP",
    "SparseGP",
    "SVGP", "SAVIGP", "SEP",
    "GFITC", "QSGP", "SHGP", "SMGP", "SLGP", "SVHGP", "read_model_file",
]
