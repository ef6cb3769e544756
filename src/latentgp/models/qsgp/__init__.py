"""Quadruply stochastic GPs (QSGP; Evans & Nair, seed 001, notes "Paper B").

Weight-space model with ``m`` basis functions::

    f(x) = phi(x)^T w,   w ~ N(0, S^{-1}),   q(w) = N(mu, C C^T)

Basis families (``basis=``):

- ``"rff"``: random Fourier features of an SE / Matérn (ARD) kernel, regenerated from a
  hash of their index (:mod:`latentgp.kernels.features`); whitened, ``S = I``; the
  lengthscales, signal variance and noise are learned by empirical Bayes (Prop. 2).
- ``"inducing"``: ``Phi = K(X, Z)``, ``S = K(Z, Z)`` on ``m`` inducing points taken from
  the training inputs (all of them when ``num_basis`` is None, then ``Phi = S = K``);
  hyperparameters are fixed (``log|S|`` is a constant, computed only when m <= 4096).
- ``"rvm"``: ``Phi = K(X, Z)``, ``S = diag(s)`` with one learned precision per basis
  function (relevance vector machine, QSRVM).

The package, one module per piece of the maths:

- :mod:`.model`: the :class:`QSGP` class -- options, basis functions, build,
  the training hooks, predictions (Appendix G's augmentation);
- :mod:`.options`: the grouped options (``lg.QSGP.Basis``, ``Covariance``,
  ``ControlVariate``, ``Newton``, ``Hyperparameters``), the deprecated flat keywords and
  the options' checks against the likelihood and kernel;
- :mod:`.factor`: the factor ``C`` of ``Sigma = C C^T`` (mean-field, chevron, full);
- :mod:`.initial`: the data-dependent initial values (basis centres, ``log|S|``,
  Prop. 1's closed-form diagonal and the column norms it needs);
- :mod:`.estimator`: the index draws, the unbiased ELBO estimator (Theorems 1-2,
  Prop. 2) and the corrected Theorem 3 lower bound for non-Gaussian likelihoods;
- :mod:`.control_variates`: Prop. 3 and the Nyström control variate (Appendix F);
- :mod:`.rvm`: the RVM precisions' closed-form updates (em, MacKay);
- :mod:`.newton`: the randomised block-Newton mean step;
- :mod:`.step`: one sparse training step (row-sparse AdaGrad/SGD on the sampled rows).

Training runs through the one fit (:func:`latentgp.training.fit`) with QSGP's plan
(:func:`latentgp.training.tasks.qsgp_plan`), which calls :meth:`QSGP.sparse_step`.
"""

from .model import QSGP, VARIATIONAL_OPTIMIZERS
from .options import BASES, COVARIANCES, MEAN_STEPS
from .rvm import RVM_MAX_PRECISION, RVM_UPDATES

__all__ = [
    "BASES",
    "COVARIANCES",
    "MEAN_STEPS",
    "QSGP",
    "RVM_MAX_PRECISION",
    "RVM_UPDATES",
    "VARIATIONAL_OPTIMIZERS",
]
