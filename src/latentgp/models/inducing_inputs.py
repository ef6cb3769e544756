"""The inducing-point prior: inducing inputs stored in units of the input columns, and
the Cholesky factor of Kzz that every inducing-point model shares.

A model with inducing inputs keeps ``Z_raw`` (the trainable tensor) and a buffer
``input_unit`` ``(D,)``, the standard deviation of each input column of the data that
initialised it, and exposes

    Z = Z_raw * input_unit        (data units)

Optimisers see ``Z_raw``.  Adam's steps have a fixed size in the units of the tensor it
updates, and L-BFGS mixes all parameters in one curvature model, so storing ``Z`` in data
units would make training depend on the units of ``X``: with ``X * 1e-6`` every Adam step
would jump across the whole input range.  In column units the raw values and their
gradients are the same for ``X`` and ``X * c``, and so is everything training does (the
kernels store lengthscales the same way, :func:`latentgp.parameters.column_unit`).

``model.Z`` is computed on every access: assign ``model.Z = new_values`` to change it
(``model.Z.copy_(...)`` would only change a temporary copy).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..inducing import INIT_METHODS, check_inducing_init, inducing_inputs_arg, initial_inducing
from ..linalg import cholesky
from ..parameters import column_unit
from ..validation import cap_at_rows, check_positive_int
from ..variational import PredictiveCache, cached_conditional


class InducingInputs:
    """Mixin for :class:`~latentgp.models.base.GPModel` subclasses with inducing inputs."""

    Z_raw: torch.Tensor
    input_unit: torch.Tensor
    num_inducing: int | None
    learn_inducing: bool | None
    inducing_init: str
    _init_Z: torch.Tensor | None

    def _store_inducing_args(
        self,
        num_inducing: int | None,
        Z: Any,
        learn_inducing: bool | None,
        inducing_init: str,
        *,
        batched: bool = True,
        inits: tuple[str, ...] = INIT_METHODS,
        required: bool = True,
    ) -> bool | None:
        """Check and keep the inducing-point arguments every such model takes:
        ``num_inducing`` (None allowed unless ``required``: the model derives M later),
        initial ``Z``
        (``(M, D)``, or ``(Q, M, D)`` if ``batched``; it fixes M), ``learn_inducing`` (None:
        the model decides per fit, see :meth:`learns_inducing`) and ``inducing_init`` (one
        of ``inits``).  Returns whether a given Z is shared by the
        latents (2-D), None when no Z was given."""
        dtype = self.dtype_  # type: ignore[attr-defined]
        self._init_Z = inducing_inputs_arg(Z, dtype, batched=batched)
        shared = None
        if self._init_Z is not None:
            shared = self._init_Z.ndim == 2
            num_inducing = self._init_Z.shape[-2]
        if num_inducing is not None or required:
            num_inducing = check_positive_int(num_inducing, "num_inducing")
        self.num_inducing = num_inducing
        self.learn_inducing = None if learn_inducing is None else bool(learn_inducing)
        self.inducing_init = check_inducing_init(inducing_init, inits)
        return shared

    def _place_inducing(self, X: torch.Tensor, greedy_kernel: Any = None) -> None:
        """Measure the input unit on ``X`` ``(N, D)`` and set Z: the given initial Z, or
        ``num_inducing`` points picked from ``X`` by ``inducing_init`` (``"greedy"``
        selects by the variance that ``greedy_kernel``, default the model's kernel,
        leaves unexplained)."""
        with torch.no_grad():
            if self._init_Z is not None:
                Z = self._init_Z.to(self.Z_raw)
            else:
                kern = None
                if self.inducing_init == "greedy":
                    kern = self.kernel if greedy_kernel is None else greedy_kernel  # type: ignore[attr-defined]
                Z = initial_inducing(X, self.num_inducing, self.inducing_init, kern)
            self._set_input_unit(X)
            self.Z = Z

    def _cap_sizes(self, N: int) -> None:
        """``num_inducing`` above the ``N`` training rows means all N (a warning says so;
        :func:`latentgp.validation.cap_at_rows`), unless Z was given."""
        if getattr(self, "_init_Z", None) is None and self.num_inducing is not None:
            self.num_inducing = cap_at_rows(self.num_inducing, N, name="num_inducing")

    def inducing_config(self) -> dict[str, Any]:
        """The inducing-point arguments as a model file records them."""
        return {
            "num_inducing": self.num_inducing,
            "learn_inducing": self.learn_inducing,
            "inducing_init": self.inducing_init,
        }

    def _build_inducing(
        self, shape: tuple[int, ...], learn: bool = True, fixed: bool = False
    ) -> None:
        """Allocate ``Z_raw`` of ``shape`` (``(..., M, D)``) and the ``(D,)`` unit buffer;
        ``fixed`` makes ``Z_raw`` a buffer (never trained, e.g. Z = X in dense mode)."""
        dtype = self.dtype_  # type: ignore[attr-defined]
        self.register_buffer("input_unit", torch.ones(shape[-1], dtype=dtype))  # type: ignore[attr-defined]
        z = torch.zeros(shape, dtype=dtype)
        if fixed:
            self.register_buffer("Z_raw", z)  # type: ignore[attr-defined]
        else:
            self.Z_raw = nn.Parameter(z, requires_grad=learn is not False)

    def inducing_parameters(self) -> list[nn.Parameter]:
        """The trainable inducing inputs (``[Z_raw]``; empty when they are fixed): what a
        fit leaves out to keep Z at its placement (the ``"fixed_inducing"`` fit default)."""
        z = self.Z_raw
        return [z] if isinstance(z, nn.Parameter) and z.requires_grad else []

    @property
    def Z(self) -> torch.Tensor:
        """Inducing inputs ``(M, D)`` (or ``(Q, M, D)``) in the units of the data."""
        return self.Z_raw * self.input_unit

    @Z.setter
    def Z(self, value: Any) -> None:
        with torch.no_grad():
            v = inducing_inputs_arg(value, self.Z_raw.dtype).to(self.Z_raw.device)
            if v.shape[-1] != self.Z_raw.shape[-1]:
                raise ValueError(
                    f"Z has {v.shape[-1]} columns but the model's inducing inputs have "
                    f"{self.Z_raw.shape[-1]}"
                )
            try:
                v = torch.broadcast_to(v, self.Z_raw.shape)
            except RuntimeError:
                raise ValueError(
                    f"Z has shape {tuple(v.shape)} but the model's inducing inputs have "
                    f"shape {tuple(self.Z_raw.shape)}"
                ) from None
            self.Z_raw.copy_(v / self.input_unit)

    def prior_factor(self) -> torch.Tensor:
        """Cholesky factor of ``Kzz = k(Z, Z)``: ``(Q, M, M)`` for a kernel with batch shape
        ``(Q,)``, else ``(M, M)``; differentiable.  The jitter that the factorisation needed
        goes to ``last_jitter`` (reported by ``fit``)."""
        L, self.last_jitter = cholesky(self.kernel(self.Z), "Kzz")  # type: ignore[attr-defined]
        return L

    def latent_prior_mean(self, X: torch.Tensor) -> torch.Tensor | None:
        """The prior mean at inputs ``X`` ``(..., B, D)`` laid out as the conditional
        takes it, ``(..., Q, B)``; None for the zero mean."""
        m = self.prior_mean_at(X)  # type: ignore[attr-defined]
        return None if m is None else m.movedim(-1, -2)

    def inducing_prior_mean(self) -> torch.Tensor | None:
        """The prior mean at the inducing inputs, ``(Q, M)`` (latent q at its own Z when
        each latent has its own); None for the zero mean."""
        m = self.prior_mean_at(self.Z)  # type: ignore[attr-defined]
        if m is None:
            return None
        if m.ndim == 2:  # shared Z: (M, Q)
            return m.mT
        return m.diagonal(dim1=0, dim2=2).mT  # (Q, M, Q) -> [q, m] = m(Z_q)[m, q]

    def _predict_f_chunk(self, X: torch.Tensor, cache: PredictiveCache):
        """Marginals ``(B, Q)`` of q(f) at ``X`` from the conditional's cache."""
        mean, var = cached_conditional(
            cache, self.kernel(self.Z, X), self.kernel.diag(X), mean_x=self.latent_prior_mean(X)  # type: ignore[attr-defined]
        )
        return mean.mT, var.mT

    def _predict_f_full(self, X: torch.Tensor, cache: PredictiveCache):
        """Mean ``(B, Q)`` and joint covariance ``(Q, B, B)`` of q(f) at ``X`` (for models
        whose prediction cache is the conditional's)."""
        if not isinstance(cache, PredictiveCache):
            raise NotImplementedError(
                f"{type(self).__name__} has no joint predictive covariance"
            )
        k = self.kernel  # type: ignore[attr-defined]
        mean_x = self.latent_prior_mean(X)
        if X.ndim > 2:  # batches of inputs broadcast against the latent axis
            X = X[..., None, :, :]
        mean, cov = cached_conditional(cache, k(self.Z, X), k(X), full_cov=True, mean_x=mean_x)
        return mean.mT, cov

    def _set_input_unit(self, X: torch.Tensor) -> None:
        """Measure ``input_unit`` on the data ``X`` ``(N, D)`` that Z lives among (keeps Z)."""
        self.adopt_input_unit(column_unit(X))

    def adopt_input_unit(self, unit: torch.Tensor) -> None:
        """Store Z in the column ``unit`` ``(D,)``, keeping its values."""
        with torch.no_grad():
            Z = self.Z.clone()
            self.input_unit.copy_(unit.to(self.input_unit))
            self.Z = Z
