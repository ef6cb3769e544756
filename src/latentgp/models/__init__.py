"""Models: exact GP and SVGP (more families land here)."""

from .base import MODEL_REGISTRY, GPModel, load
from .exact import ExactGP
from .svgp import SVGP

__all__ = ["GPModel", "ExactGP", "SVGP", "load", "MODEL_REGISTRY"]
