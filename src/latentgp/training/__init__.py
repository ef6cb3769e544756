"""Training: the shared loop driver, the gradient fit loop, optimisers and progress display."""

from . import distributed
from .checkpoint import load_checkpoint, save_checkpoint
from .early_stopping import EarlyStopping
from .fit import OPTIMIZERS, GradientTask, fit, make_optimizer
from .loop import FitHistory, Sampler, StepTask, TrainingWarning, run_loop
from .progress import ProgressBar

__all__ = [
    "distributed",
    "EarlyStopping",
    "load_checkpoint",
    "save_checkpoint",
    "fit",
    "make_optimizer",
    "run_loop",
    "StepTask",
    "GradientTask",
    "Sampler",
    "FitHistory",
    "TrainingWarning",
    "OPTIMIZERS",
    "ProgressBar",
]
