"""Training: the one fit of every model, its step tasks, the loop driver, optimisers,
checkpoints, early stopping, data-parallel reduction and progress display.

Importing this package registers :func:`latentgp.training.fit` as the fit engine of
:mod:`latentgp.models.base` (``import latentgp`` does it), so ``model.fit(...)`` reaches
the one fit without the models importing the training layer.
"""

from ..models.base import set_fit_engine
from . import distributed, optim, tasks
from .batched import BatchedLBFGS, BatchedLBFGSTask
from .checkpoint import load_checkpoint, save_checkpoint
from .early_stopping import EarlyStopping
from .fit import OPTIMIZERS, GradientTask, fit
from .loop import FitHistory, RestoringTask, Sampler, StepTask, TrainingWarning, run_loop
from .optim import SignAdaptive, SparseRowOptimizer, make_optimizer
from .progress import ProgressBar
from .restarts import fit_with_restarts
from .tasks import QSGPTask, SEPTask, distributed_sweep

set_fit_engine(fit)

__all__ = [
    "BatchedLBFGS",
    "BatchedLBFGSTask",
    "fit_with_restarts",
    "distributed",
    "optim",
    "tasks",
    "EarlyStopping",
    "load_checkpoint",
    "save_checkpoint",
    "fit",
    "make_optimizer",
    "run_loop",
    "StepTask",
    "RestoringTask",
    "GradientTask",
    "SEPTask",
    "QSGPTask",
    "SignAdaptive",
    "SparseRowOptimizer",
    "distributed_sweep",
    "Sampler",
    "FitHistory",
    "TrainingWarning",
    "OPTIMIZERS",
    "ProgressBar",
]
