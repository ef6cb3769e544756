"""What the SVGP compositions of seed 003 share (SHGP, SMGP, SVHGP).

Each is :class:`~latentgp.SVGP` with a fixed number of latent GPs (separate inducing
inputs by default), a likelihood that combines them, and the mixture-predictive
functions of :class:`~latentgp.models.modulated.base.MixturePredictive`; they train at
the modulated models' rate (seed 003's protocol: Adam, 0.005, batches of 512), except
that SHGP and SVHGP (closed-form bounds) on small data train by SVGP's full-batch L-BFGS
when the fit names no optimiser, learning rate, batch size or budget.
"""

from __future__ import annotations

from typing import Any

from ..svgp import SVGP
from .base import MixturePredictive, modulated_fit_defaults


class ModulatedSVGP(MixturePredictive, SVGP):
    """Base of the SVGP compositions: subclasses call :meth:`_compose` from ``__init__``.

    ``fixed_arguments``: SVGP arguments the composition sets itself (refused from users,
    left out of model files); ``single_output``: the likelihood models one target column.
    """

    default_lr = 0.005
    fixed_arguments: tuple[str, ...] = ("num_latent", "covariance")
    single_output = True

    def _compose(
        self,
        num_inducing: int,
        likelihood: Any,
        num_latent: int,
        svgp_kwargs: dict[str, Any],
    ) -> None:
        """``SVGP.__init__`` with the composition's likelihood and number of latents;
        ``svgp_kwargs`` are the other SVGP keywords as the user gave them (``kernel``
        included: SVGP's defaults are not restated here)."""
        for fixed in self.fixed_arguments:
            if fixed in svgp_kwargs:
                raise ValueError(f"{type(self).__name__} fixes {fixed}; it cannot be given")
        svgp_kwargs.setdefault("shared_inducing", False)
        SVGP.__init__(
            self, num_inducing, likelihood=likelihood, num_latent=num_latent, **svgp_kwargs
        )

    def _default_fit_args(self, N: int) -> dict[str, Any]:
        # SHGP and SVHGP (closed-form bounds): full-batch L-BFGS on small data, as SVGP
        return self.full_batch_default(modulated_fit_defaults(N), N)

    def _build(self, input_dim: int, output_dim: int) -> None:
        if self.single_output and output_dim != 1:
            raise ValueError(
                f"{type(self).__name__} models one target column; y has {output_dim} columns"
            )
        super()._build(input_dim, output_dim)

    def get_config(self) -> dict[str, Any]:
        cfg = super().get_config()
        for key in self.fixed_arguments:
            cfg.pop(key, None)
        return cfg
