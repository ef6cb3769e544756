"""Modulated scalable GPs of seed 003: heteroscedastic (SHGP, and the SVHGP baseline),
mixture-of-experts (SMGP) and latent-input (SLGP) models."""

from .base import MixturePredictive, ModulatedGP
from .shgp import SHGP
from .slgp import SLGP
from .smgp import SMGP
from .svhgp import SVHGP

__all__ = ["MixturePredictive", "ModulatedGP", "SHGP", "SMGP", "SLGP", "SVHGP"]
