"""Training: the shared fit loop, optimisers and progress display."""

from . import distributed
from .checkpoint import load_checkpoint, save_checkpoint
from .fit import OPTIMIZERS, FitHistory, TrainingWarning, fit
from .progress import ProgressBar

__all__ = [
    "distributed",
    "load_checkpoint",
    "save_checkpoint",
    "fit",
    "FitHistory",
    "TrainingWarning",
    "OPTIMIZERS",
    "ProgressBar",
]
