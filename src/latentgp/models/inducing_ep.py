"""What the two EP classifiers with inducing points (SEP, GFITC) share.

Both end with a Gaussian ``q(fbar) = N(mu, Sigma)`` over the inducing values and predict
with (S2 eqs. 5, 36, 37)::

    m* = k*' K^{-1} mu,   s* = K** - k*' K^{-1} k* + k*' K^{-1} Sigma K^{-1} k*
    P(y* = 1) = Phi(m* / sqrt(1 + s*))

``q`` is stored in the model file as ``q_mean`` (M,) and a square root ``q_sqrt`` (M, M) of
``Sigma``; the EP sites (O(N) or O(N M) numbers) are training state and are not saved.
"""

from __future__ import annotations

from typing import Any

import torch

from ..kernels import Kernel
from ..likelihoods import Bernoulli, likelihood_from_name
from ..linalg import cholesky
from ..variational import InducingQ, predictive_cache
from .base import GPModel, init_sample
from .inducing_inputs import InducingInputs


def check_damping(damping: Any) -> float:
    """The EP damping factor as a float in (0, 1], or a ValueError naming the value."""
    if isinstance(damping, bool) or not (isinstance(damping, (int, float)) and 0 < damping <= 1):
        raise ValueError(f"damping must be a number in (0, 1], got {damping!r}")
    return float(damping)

#: The old positional order of the EP classifiers' shared arguments after their own ones
#: (for :func:`~latentgp.validation.keyword_only_after_first`).
LEGACY_ARGUMENT_TAIL = (
    "learn_inducing", "inducing_init", "likelihood", "normalize_y", "device", "dtype",
)


class InducingEPClassifier(InducingInputs, GPModel):
    """Base of binary probit classifiers with M inducing points fitted by EP.

    Labels are {0, 1} at the API (validated by the probit Bernoulli likelihood) and are
    mapped to {-1, +1} internally.  ``predict_y`` returns ``P(y = 1)`` as the mean.
    """

    #: the EP site updates and evidence are derived for a zero-mean prior (no ``mean=``)
    supports_mean = False

    def __init__(
        self,
        num_inducing: int = 50,
        *,
        kernel: str | Kernel | None = "rbf",
        Z: Any = None,
        learn_inducing: bool = True,
        inducing_init: str = "random",
        likelihood: Any = "probit",
        normalize_y: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        lik = likelihood_from_name(likelihood)
        if not (isinstance(lik, Bernoulli) and lik.link == "probit"):
            raise ValueError(
                f"{type(self).__name__} is a probit classifier: likelihood must be 'probit', "
                f"got {likelihood!r}"
            )
        super().__init__(kernel, lik, False, device, dtype)
        self._store_inducing_args(num_inducing, Z, learn_inducing, inducing_init, batched=False)

    def get_config(self) -> dict[str, Any]:
        cfg = super().get_config()
        cfg.update(self.inducing_config())
        return cfg

    # ------------------------------------------------------------------ building --
    def _build(self, input_dim: int, output_dim: int) -> None:
        super()._build(input_dim, output_dim)
        if output_dim != 1:
            raise ValueError(f"{type(self).__name__} needs one column of binary labels")
        M = self.num_inducing
        self.kernel.build(input_dim, (), self.dtype_, self.device_)
        self._build_inducing((M, input_dim), learn=self.learn_inducing)
        self.register_buffer("q_mean", torch.zeros(M, dtype=self.dtype_))
        self.register_buffer("q_sqrt", torch.zeros(M, M, dtype=self.dtype_))
        self.to(dtype=self.dtype_, device=self.device_)

    def _validate_sizes(self, N: int) -> None:
        if self._init_Z is None and self.num_inducing > N:
            raise ValueError(
                f"num_inducing={self.num_inducing} is larger than the {N} training points; "
                f"use num_inducing <= {N}"
            )
        if self._init_Z is not None and self._init_Z.shape[-1] != self.input_dim:
            raise ValueError(f"Z has {self._init_Z.shape[-1]} columns but X has {self.input_dim}")

    def _init_from_data(self, X: torch.Tensor, y: torch.Tensor) -> None:
        super()._init_from_data(X, y)
        self._place_inducing(X)
        with torch.no_grad():
            # q = prior until EP has run: mu = 0, Sigma = K.
            L, _ = cholesky(self.kernel(self.Z), "Kzz")
            self.q_mean.zero_()
            self.q_sqrt.copy_(L)

    def _prepare(self, X: Any, y: Any, seed: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Validate, build and initialise on first use (kernel and inducing inputs from
        the seeded sample of :func:`~latentgp.models.base.init_sample`, at most 20,000
        rows, as from an out-of-core source); returns ``X`` and labels in {-1, +1}."""
        Xt = self._check_X(X)
        yt = self._check_y(y, Xt.shape[0])
        if yt.ndim != 1:
            raise ValueError(f"y must be a 1-D array of 0/1 labels, got shape {tuple(yt.shape)}")
        if not self.built:
            self._build_for_data(Xt, yt)
            self._validate_sizes(Xt.shape[0])
            if seed is not None:
                torch.manual_seed(seed)
            # from the sample a source initialises from, so that both are the same fit
            sub = torch.as_tensor(init_sample(Xt.shape[0], seed), device=Xt.device)
            self._init_from_data(Xt[sub], yt[sub])
            self.to(device=self.device_)
        self._validate_sizes(Xt.shape[0])
        return Xt, 2.0 * yt - 1.0

    # -------------------------------------------------------------------- shared --

    def _set_q(self, mean: torch.Tensor, sqrt_cov: torch.Tensor) -> None:
        with torch.no_grad():
            self.q_mean.copy_(mean)
            self.q_sqrt.copy_(sqrt_cov)
        self._cache = None

    # ----------------------------------------------------------------- prediction --
    def _compute_cache(self):
        """The strategy's prediction cache of q(u) = N(q_mean, q_sqrt q_sqrt^T) (over u)."""
        L = self.prior_factor()
        return predictive_cache(L, InducingQ(self.q_mean[None], self.q_sqrt[None], whiten=False))

    def objective(self, X, y, num_data):  # pragma: no cover - EP models train in fit
        raise NotImplementedError(f"{type(self).__name__} trains with its own EP loop in fit")
