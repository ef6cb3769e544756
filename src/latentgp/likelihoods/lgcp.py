"""Log Gaussian Cox process likelihood: Poisson counts per bin (Møller et al. 1998).

The intensity of a point process is ``lambda(x) = exp(f(x) + offset)``; with the domain cut
into bins of size ``bin_size`` the count in bin n is

    y_n ~ Poisson(bin_size * exp(f_n + offset)),

with a learnable log-mean ``offset``.  This is :class:`Poisson` with the bin size as
exposure and the offset learnable; ``init_offset`` sets it from the data's mean count.
"""

from __future__ import annotations

import math

import torch

from .base import register
from .poisson import Poisson


@register("lgcp", "coxprocess", "logcox")
class LogGaussianCox(Poisson):
    """``y_n ~ Poisson(bin_size * exp(f_n + offset))``.

    Parameters
    ----------
    bin_size: width of the bins (the exposure).
    offset: initial log-mean offset (learned unless ``learn_offset=False``); None sets it
        from the data at the first fit (``log(mean count / bin_size)``).
    """

    def __init__(
        self, bin_size: float = 1.0, offset: float | None = None, learn_offset: bool = True
    ) -> None:
        super().__init__(
            exposure=bin_size, offset=0.0 if offset is None else offset, learn_offset=learn_offset
        )
        self.bin_size = float(bin_size)
        self._offset_arg = offset

    def init_offset(self, y: torch.Tensor) -> None:
        """Set the offset to ``log(mean(y) / bin_size)`` (if it was not given)."""
        if self._offset_arg is not None:
            return
        rate = max(float(y.mean()), 1e-3) / self.bin_size
        with torch.no_grad():
            self.offset.fill_(math.log(rate))

    def intensity(self, f: torch.Tensor) -> torch.Tensor:
        """``lambda = exp(f + offset)`` per unit of the input."""
        return torch.exp(f + self.offset)

    def _config_args(self):
        return {
            "bin_size": self.bin_size,
            "offset": self._offset_arg,
            "learn_offset": self.learn_offset,
        }
