"""Training: the shared fit loop, optimisers and progress display."""

from .fit import OPTIMIZERS, FitHistory, TrainingWarning, fit
from .progress import ProgressBar

__all__ = ["fit", "FitHistory", "TrainingWarning", "OPTIMIZERS", "ProgressBar"]
