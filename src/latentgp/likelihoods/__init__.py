"""Likelihoods ``p(y_n | f_n)`` and the integrators that take their expectations."""

from .base import (
    CallableLikelihood,
    Likelihood,
    gauss_hermite,
    likelihood_from_config,
    likelihood_from_name,
    normal_points,
)
from .bernoulli import Bernoulli
from .counts import NegativeBinomial, ZeroInflatedPoisson
from .dirichlet import DirichletClassification
from .experts import GaussianExperts
from .gaussian import Gaussian
from .gprn import GPRN
from .heteroscedastic import HeteroscedasticGaussian
from .laplace import Laplace
from .lgcp import LogGaussianCox
from .lmc import LinearCoregionalization
from .ordinal import Ordinal
from .poisson import Poisson
from .positive import Beta, Exponential, Gamma
from .robit import Robit
from .scale_modulated import ScaleModulatedGaussian
from .softmax import Softmax
from .student_t import StudentT
from .warped import WarpedGaussian

__all__ = [
    "Likelihood",
    "CallableLikelihood",
    "Gaussian",
    "HeteroscedasticGaussian",
    "Bernoulli",
    "Poisson",
    "StudentT",
    "Laplace",
    "Softmax",
    "gauss_hermite",
    "normal_points",
    "likelihood_from_name",
    "likelihood_from_config",
]
__all__ += ["WarpedGaussian", "LogGaussianCox", "GPRN", "ScaleModulatedGaussian", "GaussianExperts"]
__all__ += [
    "LinearCoregionalization", "NegativeBinomial", "ZeroInflatedPoisson", "Gamma",
    "Exponential", "Beta", "Ordinal", "Robit", "DirichletClassification",
]
